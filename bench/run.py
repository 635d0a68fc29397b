"""Time fleetc's pipeline on a generated instance and compare it with greedy baselines.

    python -m bench.run --clusters 20 --stages 200 --load 0.9 --repeat 3
    python -m bench.run --clusters 20 --stages 200 --load 0.7 0.9 1.0 --baseline
    python -m bench.run --clusters 20 --fit 100 200 400 800     # cost exponent over stages

Each measurement runs in a fresh child process (``python -m bench.run --child FOLDER``), so
imports are paid as in a real compile and the child's peak resident memory (``ru_maxrss`` from
``wait4``) is the compile's own. The child runs the real stages one by one, timing each:
import, load (read + YAML), validate (schema + semantic), resolve (model build), scores (filter
+ score matrix, which ``place`` computes again), place (fleetc's optimizer), render, write (the
atomic write of the output folder). With ``--baseline`` it also runs the greedy baselines of
:mod:`bench.greedy` and :mod:`bench.strong` on the same model and reports, for each method: objective, GPUs placed,
gap to fleetc's LP bound and time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import made_folder
from bench.clock import children_cpu_seconds, cpu_seconds, load_average, load_words
from bench.generate import Spec, generate, node_sizes

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("import", "load", "validate", "resolve", "scores", "place", "render", "write")


# --- the child: one measured compile -----------------------------------------------------------


def measure(folder: Path, *, time_limit: float | None, baseline: bool,
            write_to: Path | None = None) -> dict[str, Any]:
    """Run the pipeline on the policies in ``folder``; timings in seconds, counts, results.

    The output folder is written under ``write_to`` (default: the system's temporary folder).
    """
    timings: dict[str, float] = {}
    cpu_timings: dict[str, float] = {}  # CPU seconds, forked workers included (bench.clock)
    result: dict[str, Any] = {"timings": timings, "cpu_timings": cpu_timings}

    def timed(phase: str, action: Callable[[], Any]) -> Any:
        start, cpu = time.perf_counter(), cpu_seconds()
        value = action()
        timings[phase] = time.perf_counter() - start
        cpu_timings[phase] = cpu_seconds() - cpu
        return value

    def imports() -> Any:
        from fleetc import compiler, emit  # noqa: F401 - the cost measured
        from fleetc import render as render_module  # noqa: F401
        from fleetc.placement import optimize, scoring  # noqa: F401
        return compiler

    timed("import", imports)
    from fleetc.emit import write_tree
    from fleetc.errors import FleetcError
    from fleetc.placement.optimize import place
    from fleetc.placement.scoring import score_matrix
    from fleetc.policy.files import discover
    from fleetc.policy.load import load_files
    from fleetc.policy.validate import validate
    from fleetc.render import render
    from fleetc.resolve import resolve

    files = discover([str(folder)]).files
    loaded = timed("load", lambda: load_files(files))
    policies, problems = timed("validate", lambda: validate(loaded.documents))
    result["documents"] = len(loaded.documents)
    if loaded.diagnostics or problems:
        result["error"] = f"{len(loaded.diagnostics) + len(problems)} policy errors"
        return result
    model = timed("resolve", lambda: resolve(policies, str(folder)))
    result["stages"], result["clusters"] = len(model.stages), len(model.clusters)
    from bench.greedy import gpus_demanded, gpus_usable
    result["gpu_capacity"] = gpus_usable(model)
    result["gpu_demand"] = gpus_demanded(model)
    scores = timed("scores", lambda: score_matrix(model))
    methods: dict[str, dict[str, Any]] = {}
    result["methods"] = methods
    try:
        placement = timed("place", lambda: place(model, time_limit=time_limit,
                                                 allow_unplaced=True))
    except FleetcError as err:
        methods["fleetc"] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0]}",
                             "time": timings["place"] if "place" in timings else None}
        placement = None
    if placement is not None:
        methods["fleetc"] = _summary(model, placement, placement.bound, timings["place"], scores)
        rendered = timed("render", lambda: render(model, placement).files)
        out = Path(tempfile.mkdtemp(prefix="fleetc-bench-out-", dir=write_to))
        try:
            timed("write", lambda: write_tree(out / "out", rendered))
        finally:
            shutil.rmtree(out, ignore_errors=True)
        result["files"] = len(rendered)
        result["objects"] = sum(1 for p in rendered if p.startswith("clusters/")
                                and not p.endswith("/kustomization.yaml"))
    if baseline:
        from bench.greedy import ORDERS, place_greedy
        bound = placement.bound if placement is not None else None
        from bench.strong import place_strong
        baselines: dict[str, Callable[[], Any]] = {
            **{f"greedy-{order}": (lambda order=order: place_greedy(model, order, scores)) for order in ORDERS},
            "greedy-strong": lambda: place_strong(model, scores)}
        for name, baseline_place in baselines.items():
            start = time.perf_counter()
            placed = baseline_place()
            elapsed = time.perf_counter() - start + timings["scores"]
            methods[name] = refereed(model, placed, _summary(model, placed, bound, elapsed, scores))
    return result


def verify_placed(model: Any, placement: Any) -> list[str]:
    """:func:`fleetc.placement.verify.verify` accepting unplaced stages (greedy may leave some out)."""
    from fleetc.placement.verify import verify

    return verify(model, placement, allow_unplaced=True)


def refereed(model: Any, placement: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` of a baseline's ``placement`` with fleetc's verifier as referee: the rules
    it breaks (``problems``, the first in ``broken``); a baseline that breaks one is reported
    NOT COMPARABLE (its objective may count what no cluster could run)."""
    problems = verify_placed(model, placement)
    return {**summary, "problems": len(problems), **({"broken": problems[0]} if problems else {})}


def _summary(model: Any, placement: Any, bound: float | None, elapsed: float,
             scores: Any) -> dict[str, Any]:
    from bench.greedy import gpus_placed, objective
    from fleetc.placement import rules
    from fleetc.placement.verify import cap_problems

    value = objective(model, placement, scores)
    clusters = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    cost = sum(a.replicas * rules.replica_cost_micros(model, stages[p.stage], clusters[a.cluster])
               for p in placement.stages for a in p.assignments) / rules.MICROS
    return {
        "objective": value,
        "reported_objective": placement.objective,
        "gpus": gpus_placed(model, placement),
        "placed": sum(1 for p in placement.stages if p.assignments),
        "gap": None if not bound else max(0.0, 1.0 - value / bound),
        "bound": bound,
        "time": elapsed,
        "cost": cost,  # per hour, as the cost caps count it
        "cap_violations": len(cap_problems(model, placement)),
    }


def child_main(folder: str, time_limit: float | None, baseline: bool,
               write_to: Path | None) -> int:
    print(json.dumps(measure(Path(folder), time_limit=time_limit, baseline=baseline,
                             write_to=write_to)))
    return 0


# --- the parent: generate, spawn, report -------------------------------------------------------


def run_child(folder: Path, *, time_limit: float | None, baseline: bool,
              timeout: float | None, write_to: Path | None = None) -> dict[str, Any]:
    """Measure ``folder`` in a fresh process; add its wall time and peak memory (MiB)."""
    command = [sys.executable, "-m", "bench.run", "--child", str(folder)]
    if write_to is not None:
        command += ["--write-to", str(write_to)]
    if time_limit is not None:
        command += ["--time-limit", str(time_limit)]
    if baseline:
        command.append("--baseline")
    run = _run_measured(command, timeout)
    if "error" in run:
        return run
    result = json.loads(run.pop("stdout").strip().splitlines()[-1])
    result.update(run)
    return result


def run_compile(folder: Path, *, time_limit: float | None, timeout: float | None,
                write_to: Path | None = None) -> dict[str, Any]:
    """Time the real ``fleetc compile`` of ``folder`` in a fresh process (``--allow-unplaced``,
    so an over-full instance still compiles): its wall time and peak memory (MiB)."""
    with tempfile.TemporaryDirectory(prefix="fleetc-bench-cli-", dir=write_to) as out:
        command = [sys.executable, "-m", "fleetc", "compile", str(folder), "--out", f"{out}/out",
                   "--allow-unplaced"]
        if time_limit is not None:
            command += ["--time-limit", str(time_limit)]
        run = _run_measured(command, timeout)
    run.pop("stdout", None)
    return run


def _run_measured(command: list[str], timeout: float | None) -> dict[str, Any]:
    """Run ``command`` from the repository root: its wall time, peak resident memory (MiB) and
    standard output, or an error."""
    start, cpu_before, load = time.perf_counter(), children_cpu_seconds(), load_average()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)
        deadline = None if timeout is None else start + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                process.kill()
                _, status, usage = os.wait4(process.pid, 0)
                return {"error": f"timed out after {timeout:g}s",
                        "wall": time.perf_counter() - start, "rss_mib": usage.ru_maxrss / 1024}
            time.sleep(0.02)
        wall = time.perf_counter() - start
        rss_mib = usage.ru_maxrss / 1024  # Linux reports KiB
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode()
        if code or not stdout.strip():
            tail = err.read().decode().strip().splitlines()[-3:]
            return {"error": f"exit {code}: {' | '.join(tail)}", "wall": wall, "rss_mib": rss_mib}
    # the child's CPU seconds and its own children's (fleetc forks workers), reaped by wait4
    cpu = children_cpu_seconds() - cpu_before
    return {"wall": wall, "cpu": cpu, "rss_mib": rss_mib, "stdout": stdout, "load": load}


def best_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the smallest wall time (the least disturbed by the machine)."""
    return min(results, key=lambda r: r.get("wall", float("inf")))


def fit_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) over log(sizes): time grows like size**slope."""
    import numpy as np

    slope, _ = np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(seconds, float)), 1)
    return float(slope)


def _format_phases(result: dict[str, Any]) -> Iterator[str]:
    timings = result.get("timings", {})
    cells = [f"{phase} {timings[phase]:.3f}" for phase in PHASES if phase in timings]
    yield "  phases (s): " + ", ".join(cells)
    if "render" in timings and "write" in timings and result.get("files"):
        rate = result["files"] / (timings["render"] + timings["write"])
        yield f"  rendering + writing: {result['files']} files in " \
              f"{timings['render'] + timings['write']:.3f}s = {rate:,.0f} objects/s"
    if "validate" in timings and result.get("documents"):
        rate = result["documents"] / (timings["load"] + timings["validate"])
        yield f"  load + validate: {result['documents']} documents = {rate:,.0f} documents/s " \
              f"(validate alone {result['documents'] / timings['validate']:,.0f}/s)"
    cpu = result.get("cpu_timings", {})
    if cpu:
        yield "  phases (CPU s, forked workers included): " + ", ".join(
            f"{phase} {cpu[phase]:.3f}" for phase in PHASES if phase in cpu)
    yield f"  end to end {result.get('wall', 0):.2f}s wall, {result.get('cpu', 0):.2f}s CPU (child process and " \
          f"its children, imports included), peak RSS {result.get('rss_mib', 0):.0f} MiB, " \
          f"{load_words(result.get('load'))} before"


def _format_methods(result: dict[str, Any]) -> Iterator[str]:
    methods = result.get("methods", {})
    if not methods:
        return
    yield (f"  {'method':<24} {'objective':>12} {'GPUs':>11} {'stages':>11} {'gap':>8} {'time':>8} "
           f"{'cost/h':>10} {'cap violations':>14}")
    capacity, demand = result.get("gpu_capacity", 0), result.get("gpu_demand", 0)
    stages = result.get("stages", 0)
    for name, m in methods.items():
        if "error" in m:
            yield f"  {name:<24} {m['error']}"
            continue
        if m.get("problems"):
            yield (f"  {name:<24} NOT COMPARABLE: fleetc's verifier finds {m['problems']} broken rule(s), "
                   f"e.g. {m['broken']}")
            continue
        gap = "-" if m["gap"] is None else f"{m['gap']:.2%}"
        gpus = f"{m['gpus']:g}/{min(capacity, demand):g}"
        yield (f"  {name:<24} {m['objective']:>12.3f} {gpus:>11} {m['placed']:>5}/{stages:<5} "
               f"{gap:>8} {m['time']:>7.2f}s {m['cost']:>10,.2f} {m['cap_violations']:>14}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--stages", type=int, default=200)
    parser.add_argument("--load", type=float, nargs="+", default=[0.9],
                        help="share(s) of the fleet's GPUs the stages ask for")
    parser.add_argument("--perfect", action="store_true",
                        help="instances whose GPUs split exactly into gangs (100%% placeable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--node-gpus", type=node_sizes, default=(),
                        help="GPUs per node a GPU cluster may have, one drawn per cluster (bench.generate --node-gpus)")
    parser.add_argument("--quotas", type=float, default=0.0,
                        help="also run each instance with team GPU quotas of this share of what each "
                             "team asks for (bench.generate --quotas), side by side")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="with --quotas: the teams' cost caps, this share of their GPUs' price")
    parser.add_argument("--repeat", type=int, default=1, help="runs per instance; best is shown")
    parser.add_argument("--baseline", action="store_true", help="also run the greedy baselines")
    parser.add_argument("--cli", action="store_true",
                        help="also time the real `fleetc compile` of each instance (wall, peak RSS)")
    parser.add_argument("--time-limit", type=float, default=None, help="fleetc solver limit (s)")
    parser.add_argument("--timeout", type=float, default=None, help="kill a run after this (s)")
    parser.add_argument("--fit", type=int, nargs="+", metavar="STAGES",
                        help="fit the cost exponent over these stage counts")
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    parser.add_argument("--write-to", type=made_folder,
                        help="folder to write the output under (e.g. /dev/shm to leave the "
                             "disk out of the write time); default: the temporary folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        return child_main(args.child, args.time_limit, args.baseline, args.write_to)
    cases = ([Spec(args.clusters, n, args.load[0], args.seed, args.perfect, node_gpus=args.node_gpus)
              for n in args.fit] if args.fit else
             [Spec(args.clusters, args.stages, load, args.seed, args.perfect, node_gpus=args.node_gpus)
              for load in args.load])
    if args.quotas:  # each instance without caps, then with them
        cases = [case for spec in cases
                 for case in (spec, dataclasses.replace(spec, quotas=args.quotas, budget=args.budget))]
    print(f"# {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    records = []
    with tempfile.TemporaryDirectory(prefix="fleetc-bench-") as scratch:
        for i, spec in enumerate(cases):
            instance = generate(spec)
            folder = instance.write(Path(scratch) / f"case-{i}")
            runs = [run_child(folder, time_limit=args.time_limit, baseline=args.baseline,
                              timeout=args.timeout, write_to=args.write_to)
                    for _ in range(args.repeat)]
            result = best_of(runs)
            result["load_after"] = load_average()
            demand = instance.gpu_demand / max(instance.gpu_capacity, 1)
            caps = f", team quotas {spec.quotas:g}" + (f" and budgets {spec.budget:g}" if spec.budget else "") \
                if spec.quotas else ""
            print(f"{spec.clusters} clusters x {instance.stages} stages, load {demand:.0%}"
                  f"{' (perfect packing)' if spec.perfect else ''}{caps}, seed {spec.seed}: "
                  f"{instance.documents} documents")
            if "error" in result:
                print(f"  error: {result['error']}")
            for line in [*_format_phases(result), *_format_methods(result)]:
                print(line)
            if args.cli:
                result["cli"] = run_compile(folder, time_limit=args.time_limit, timeout=args.timeout,
                                            write_to=args.write_to)
                cli = result["cli"]
                print(f"  fleetc compile (the CLI, fresh process): {cli['wall']:.2f}s wall"
                      + (f" ({cli['cpu']:.2f}s CPU)" if "cpu" in cli else "") + ", "
                      f"peak RSS {cli['rss_mib']:,.0f} MiB, {load_words(cli.get('load'))} before"
                      + (f", {cli['error']}" if "error" in cli else ""))
            records.append({"spec": vars(spec), "result": result})
    if args.fit:
        _report_fit(records)
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return 0


def _report_fit(records: list[dict[str, Any]]) -> None:
    ok = [r for r in records if "place" in r["result"].get("timings", {})]
    if len(ok) < 2:
        print("exponent: fewer than two successful runs")
        return
    sizes = [r["spec"]["stages"] for r in ok]
    rest = [p for p in PHASES if p not in ("import", "place")]
    for label, seconds in (
        ("place", [r["result"]["timings"]["place"] for r in ok]),
        ("everything but import and place", [sum(r["result"]["timings"].get(p, 0.0) for p in rest)
                                             for r in ok]),
        ("end to end", [r["result"]["wall"] for r in ok]),
    ):
        print(f"exponent ({label}): time ~ stages^{fit_exponent(sizes, seconds):.2f} "
              f"over {', '.join(map(str, sizes))} stages")


if __name__ == "__main__":
    sys.exit(main())
