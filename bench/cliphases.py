"""Where the time of ``fleetc compile`` goes, phase by phase, wall and CPU, in one fresh process.

    python -m bench.cliphases POLICIES --out DIR [--allow-unplaced]

:mod:`bench.run` times the pipeline's stages called one by one; this times the CLI's own front
door (:func:`fleetc.compiler.compile_fleet`, then the write), so what the CLI does beyond those
stages is counted too: reading the previous ``placement.yaml``, the inputs digest, the
warnings located in their policy files, the verifier, and as ``fleetc compile`` does, the check
of DIR's cluster folders that are kept as they are (``.fleetc/render``: compile the unchanged
policies into DIR first to time a recompile). Each phase the compile reports
(:class:`fleetc.progress.Reporter`) gets its wall time and its CPU time, this process's and
its forked children's (loading and rendering fork on large inputs); ``other`` is what falls
between phases. The peak resident memory is this process's or its largest child's
(``ru_maxrss``), with this process's resident memory as each phase ends (Linux), and the
machine's load average is printed beside, since a shared machine inflates wall times but not
CPU times.
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
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    timing = _Timing()
    start = _Clock.now()
    from fleetc.compiler import Options, compile_fleet
    from fleetc.emit import write_tree

    timing.phases.append(("import", *_Clock.now().since(start)))
    timing.resident["import"] = _resident_mib()
    options = Options(paths=tuple(args.policies), out=args.out, workdir=Path.cwd(),
                      allow_unplaced=args.allow_unplaced, reporter=timing, reuse=True)
    compiled = compile_fleet(options)
    timing.begin("write")
    write_tree(Path(args.out), compiled.files, kept=compiled.kept)
    timing.end("write")
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


if __name__ == "__main__":
    sys.exit(main())
