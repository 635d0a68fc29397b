"""The exact path's program solved through cvxpy and through HiGHS direct, side by side.

    python -m bench.exact --instance 20x200 50x1000 --load 0.9
    python -m bench.exact --instance 100x2000 --load 1.0 --solver SCIP   # is there a full packing?

For every component of a generated fleet (:func:`fleetc.placement.problem.problems`) the exact program
(:func:`fleetc.placement.program.build_program`,
what ``fleetc compile`` solves up to its ``LARGE`` pairs) is solved as a MILP twice, every stage
placed where possible as :func:`fleetc.placement.optimize.place` does: through cvxpy on HiGHS
(:func:`fleetc.placement.cvx.solve_program`, the exact path's solve) and by HiGHS through highspy with
the matrices passed directly (:func:`fleetc.placement.program.solve_program`); with
``--solver NAME`` cvxpy runs on that solver instead (``SCIP``: an independent exact solver, to
learn whether a full packing exists where fleetc's large path leaves stages out). Both objectives
(the program's score, as the placement reports it) and both times are printed; ``import cvxpy``
is timed once, apart.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.generate import Spec, fleet_size, generate


def model_of(spec: Spec) -> Any:
    """The resolved model of a generated instance (in memory, no files)."""
    from fleetc.policy.load import load_sources
    from fleetc.policy.validate import validate
    from fleetc.resolve import resolve

    instance = generate(spec)
    loaded = load_sources((path, text.encode()) for path, text in sorted(instance.files.items()))
    policies, problems = validate(loaded.documents)
    if loaded.diagnostics or problems:
        raise ValueError(f"{len(loaded.diagnostics) + len(problems)} policy errors in {spec}")
    return resolve(policies, "bench")


def side_by_side(spec: Spec, time_limit: float | None = None, solver: str = "HIGHS") -> dict[str, Any]:
    """Per component: pairs, and per backend its objective, time and whether it is optimal."""
    from fleetc.placement import cvx, optimize
    from fleetc.placement.problem import Budget, problems
    from fleetc.placement.program import Result, build_program, solve_program
    from fleetc.placement.scoring import score_matrix

    model = optimize._canonical(model_of(spec))
    parts = []
    for problem in problems(model, score_matrix(model), {})[0]:
        program = build_program(problem)
        row: dict[str, Any] = {"stages": len(problem.part.stages), "clusters": len(problem.part.clusters),
                               "pairs": int(problem.allowed.sum())}
        backends: dict[str, tuple[Callable[..., Result], str]] = {
            f"cvxpy ({solver})": (cvx.solve_program, solver), "HiGHS direct": (solve_program, "HIGHS")}
        for name, (solve, on) in backends.items():
            start = time.perf_counter()
            budget = Budget(None if time_limit is None else time.monotonic() + time_limit, on)
            result = solve(program, budget, require_all=True, integral=True)
            every = not result.infeasible
            if result.infeasible:  # as the exact path: the most valuable partial placement
                result = solve(program, budget, require_all=False, integral=True,
                               absolute_gap=0.5 * program.smallest_value)
            values = result.values
            row[name] = {
                "time": time.perf_counter() - start, "optimal": result.optimal, "every_stage": every,
                "objective": None if values is None else float(program.score @ values),
                "placed": None if values is None else int(values[program.z].round().sum()),
            }
        parts.append(row)
    return {"spec": vars(spec), "parts": parts, "solver": solver}


def import_cvxpy_seconds() -> float:
    from fleetc.infra.lazyimport import import_cvxpy

    start = time.perf_counter()
    import_cvxpy()  # as fleetc imports it

    return time.perf_counter() - start


def report(result: dict[str, Any]) -> list[str]:
    spec = result["spec"]
    lines = [f"{spec['clusters']} clusters x {spec['stages']} stages, load {spec['load']:.0%}, seed {spec['seed']}"]
    for part in result["parts"]:
        lines.append(f"  component: {part['stages']} stages x {part['clusters']} clusters, {part['pairs']} pairs")
        for name in (f"cvxpy ({result['solver']})", "HiGHS direct"):
            run = part[name]
            figure = "no placement" if run["objective"] is None else f"objective {run['objective']:.6f}"
            lines.append(f"    {name:<14} {figure}, {run['placed']} placed, {run['time']:.2f}s"
                         f"{'' if run['optimal'] else ' (not proven optimal)'}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance", nargs="+", type=fleet_size, default=[(20, 200), (50, 1000)],
                        help="CLUSTERSxSTAGES, one or more (default 20x200 50x1000)")
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=None, help="per solve (s)")
    parser.add_argument("--solver", default="HIGHS", help="the MILP solver cvxpy runs on (SCIP, ...)")
    args = parser.parse_args(argv)
    print(f"import cvxpy: {import_cvxpy_seconds():.2f}s (once, before the solves)")
    for clusters, stages in args.instance:
        result = side_by_side(Spec(clusters, stages, args.load, args.seed), args.time_limit, args.solver)
        print("\n".join(report(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
