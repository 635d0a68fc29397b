"""Where the time of ``fleetc compile`` goes, phase by phase, wall and CPU, in one fresh process.

    python -m bench.cliphases POLICIES --out DIR [--allow-unplaced]

:mod:`bench.run` times the pipeline's stages called one by one; this times the CLI's own front
door (:func:`fleetc.compiler.compile_fleet`, then the write), so what the CLI does beyond those
stages is counted too: reading the previous ``placement.yaml``, the inputs digest, the
warnings located in their policy files, the verifier, and as ``fleetc compile`` does, the check
of DIR's cluster folders that are kept as they are (``.fleetc/render``: compile the unchanged
policies into DIR first to time a recompile), and with ``--allow-unplaced`` the fix lines of
the stages left out (phase ``fixes``: 0.6-2.5 s of a sovereign 100 x 2,000's CPU). Each phase
the compile reports (:class:`fleetc.progress.Reporter`) gets its wall time and its CPU time,
this process's and its forked children's (loading and rendering fork on large inputs);
``other`` is what falls between phases. The peak resident memory is this process's or its
largest child's (``ru_maxrss``), with this process's resident memory as each phase ends
(Linux), and the machine's load average is printed beside, since a shared machine inflates
wall times but not CPU times.

With ``--profile N`` the compile runs on one core (its affinity narrowed, so that loading and
rendering run in this process instead of forked children, which a profiler does not see)
under :mod:`cProfile`, and prints where its CPU goes: the share of each part of fleetc (own
time of the functions in each package, the YAML emitter apart from the rest of the render)
and the ``N`` functions of most own time.

    python -m bench.cliphases POLICIES --out DIR --allow-unplaced --profile 25
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path


@dataclasses.dataclass
class _Clock:
    wall: float
    cpu: float  # this process's user + system
    children: float  # forked children's user + system, once they were waited for

    @classmethod
    def now(cls) -> _Clock:
        times = os.times()
        return cls(time.perf_counter(), times.user + times.system, times.children_user + times.children_system)

    def since(self, start: _Clock) -> tuple[float, float, float]:
        return self.wall - start.wall, self.cpu - start.cpu, self.children - start.children


class _Timing:
    """A :class:`fleetc.progress.Reporter` that notes each phase's clocks and the resident
    memory at its end."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float, float, float]] = []
        self.resident: dict[str, float] = {}
        self._started: dict[str, _Clock] = {}

    def begin(self, phase: str) -> None:
        self._started[phase] = _Clock.now()

    def end(self, phase: str) -> None:
        self.phases.append((phase, *_Clock.now().since(self._started.pop(phase))))
        self.resident[phase] = _resident_mib()

    def gap(self, gap: float) -> None:
        pass

    def placed(self, done: int, total: int) -> None:
        pass


def _resident_mib() -> float:
    """This process's resident memory now (MiB); NaN where /proc is missing."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+")
    parser.add_argument("--out", required=True, help="output folder (written, as compile does)")
    parser.add_argument("--allow-unplaced", action="store_true")
    parser.add_argument("--profile", type=int, metavar="N", default=0,
                        help="profile the compile on one core: CPU by part of fleetc, and the N costliest functions")
    args = parser.parse_args(argv)
    if args.profile:
        return _profiled(args.policies, args.out, args.allow_unplaced, args.profile)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    timing = _Timing()
    start = _Clock.now()
    from fleetc.compiler import Options, compile_fleet, fix_lines
    from fleetc.emit import write_tree

    timing.phases.append(("import", *_Clock.now().since(start)))
    timing.resident["import"] = _resident_mib()
    options = Options(paths=tuple(args.policies), out=args.out, workdir=Path.cwd(),
                      allow_unplaced=args.allow_unplaced, reporter=timing, reuse=True)
    compiled = compile_fleet(options)
    timing.begin("write")
    write_tree(Path(args.out), compiled.files, kept=compiled.kept)
    timing.end("write")
    if args.allow_unplaced:  # what fleetc compile --allow-unplaced prints of the stages it leaves out
        timing.begin("fixes")
        fix_lines(compiled)
        timing.end("fixes")
    total = _Clock.now().since(start)
    rows = [*timing.phases]
    rows.append(("other", *(t - sum(row[i + 1] for row in rows) for i, t in enumerate(total))))
    print(f"{'phase':10s} {'wall s':>8s} {'CPU s':>8s} {'children':>9s} {'RSS MiB at end':>15s}")
    for name, wall, cpu, children in [*rows, ("total", *total)]:
        resident = timing.resident.get(name)
        print(f"{name:10s} {wall:8.2f} {cpu:8.2f} {children:9.2f}"
              + ("" if resident is None else f" {resident:15,.0f}"))
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    placed = sum(1 for p in compiled.placement.stages if p.assignments)
    print(f"{placed} of {len(compiled.placement.stages)} stages placed, {len(compiled.files)} files rendered, "
          f"{0 if compiled.kept is None else len(compiled.kept.paths)} kept, "
          f"{len(compiled.warnings)} warnings; peak RSS {peak:,.0f} MiB")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


#: Where a function's own time is counted in the profile: the first prefix of its file's path
#: (within the repository or site-packages) that matches, in this order.
PARTS = (("fleetc/render/yamlout", "render: YAML emitter"), ("fleetc/render", "render: objects"),
         ("fleetc/emit", "write"), ("fleetc/placement", "placement"), ("fleetc/policy", "load + validate"),
         ("fleetc/resolve", "resolve"), ("fleetc/", "fleetc, other"), ("numpy", "numpy"),
         ("scipy", "scipy"), ("highspy", "HiGHS"), ("cvxpy", "cvxpy"), ("yaml", "PyYAML / libyaml"),
         ("ruamel", "ruamel.yaml"), ("pydantic", "pydantic"), ("jsonschema", "jsonschema"))


def _part(filename: str, function: str) -> str:
    """The part a function's own time counts to: by its file, or for a built-in (file ``~``)
    by the module its name gives (``<built-in method highspy._core.run>``)."""
    path = filename.replace("\\", "/")
    if path == "~":
        module = function.removeprefix("<built-in method ").removeprefix("<method '").split(" ")[0]
        return next((name for prefix, name in PARTS if module.startswith(prefix.rstrip("/"))), "built-ins")
    return next((name for prefix, name in PARTS if f"/{prefix}" in path), "Python and the rest")


def _profiled(policies: Sequence[str], out: str, allow_unplaced: bool, top: int) -> int:
    import cProfile
    import pstats

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from fleetc.compiler import Options, compile_fleet, fix_lines
    from fleetc.emit import write_tree

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    options = Options(paths=tuple(policies), out=out, workdir=Path.cwd(), allow_unplaced=allow_unplaced, reuse=True)
    profiler = cProfile.Profile(time.process_time)  # CPU seconds: the default clock is wall time
    cpu = time.process_time()
    profiler.enable()
    compiled = compile_fleet(options)
    write_tree(Path(out), compiled.files, kept=compiled.kept)
    if allow_unplaced:
        fix_lines(compiled)
    profiler.disable()
    cpu = time.process_time() - cpu
    stats = pstats.Stats(profiler)
    own: dict[str, float] = {}
    rows = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, name), (_calls, _primitive, tottime, _cumulative, _callers) in rows.items():
        own[_part(filename, name)] = own.get(_part(filename, name), 0.0) + tottime
    total = sum(own.values())
    print(f"CPU {cpu:.2f}s on one core (profiled; the profiler's own overhead included), "
          f"{len(compiled.files)} files rendered")
    for name, seconds in sorted(own.items(), key=lambda item: -item[1]):
        print(f"  {name:<22} {seconds:8.2f}s {seconds / total:6.1%}")
    print(f"the {top} functions of most own time:")
    ranked = sorted(rows.items(), key=lambda item: -item[1][2])[:top]
    for (filename, line, name), (calls, _primitive, tottime, cumulative, _callers) in ranked:
        print(f"  {tottime:7.2f}s own {cumulative:7.2f}s with callees {calls:>9} calls  "
              f"{_part(filename, name)}: {Path(filename).name}:{line} {name}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
