"""fleetc against an exact solver of the documented rules, and against the strong greedy.

    python -m bench.exactcheck --instance 50x1000 100x2000 --seeds 0 1 2 --load 1.0 --nodes default 6,8,8
    python -m bench.exactcheck --instance 1000x20000 --load 0.9 --nodes default --diverse --no-exact

For each generated instance (``bench.generate``, optionally ``--node-gpus``) this builds its own
mixed-integer program of the placement rules of ``docs/optimizer.md`` and ``docs/pipelines.md``
with SCIP (pyscipopt; nothing of fleetc's program, only its score matrix and the per-pair facts
the rules name: which pairs are allowed, a stage's pods as they run on a cluster, a cluster's
usable capacity and node) and solves it:

* a gang runs whole on one allowed cluster (binary ``x[s, c]``); a Deployment's replicas split
  over allowed clusters, each running at least its per-cluster minimum (integer ``n[s, c]``,
  binary ``y[s, c]``); a stage is placed whole or not at all (``z[s]``);
* per cluster, the GPUs, cores and memory placed fit its usable capacity;
* per cluster, the GPU pods pack onto its nodes, exactly: every node holds one of the maximal
  multisets of pod sizes that fit it (Gilmore-Gomory patterns), the node of what utilization
  leaves of a node counted apart; cores and memory per node are held to the cluster's totals
  only (a relaxation), so the optimum is an upper bound, and is the true optimum when fleetc's
  verifier accepts its placement (reported);
* objective: ``sum value_s / replicas_s * (1 + score[s, c])`` per placed replica
  (:func:`bench.greedy.objective`), every stage placed when that is possible (first solve),
  else the most valuable partial placement (fleetc's rule).

The instance must be one the model covers: no platform, quotas or time-sliced device plugins
(the generator's defaults). Printed per instance: stages placed and objective of fleetc, of
the exact optimum and of the strong greedy; fleetc's shortfall below the optimum; each figure
with its CPU seconds and the machine's load; and fleetc's verifier's verdict on each placement.
``--no-exact`` leaves SCIP out where the instance is too large for it (1,000 x 20,000): fleetc
against the strong greedy only, which still says whether fleetc places every stage.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.clock import cpu_seconds, load_average, load_words
from bench.exact import model_of
from bench.generate import Spec, node_sizes


def maximal_patterns(node: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every maximal multiset of ``sizes`` that fits a node of ``node`` GPUs (a count per size)."""
    from fleetc.nodefit import patterns

    fitting = [g for g in sizes if 0 < g <= node]
    if not fitting:
        return []
    found = patterns(node, fitting)
    return [tuple(p[fitting.index(g)] if g in fitting else 0 for g in sizes) for p in found]


def check(spec: Spec, time_limit: float | None) -> dict[str, Any]:
    """fleetc, the exact optimum (none without a ``time_limit``) and the strong greedy on
    ``spec``'s instance."""
    from bench.greedy import objective
    from bench.strong import place_strong
    from fleetc.placement.optimize import place
    from fleetc.placement.scoring import score_matrix
    from fleetc.placement.verify import verify

    model = model_of(spec)
    if model.platforms or any(c.device_plugin_configured for c in model.clusters):
        raise ValueError("the exact model covers fleets without platforms or time-sliced device plugins")
    scores = score_matrix(model)
    result: dict[str, Any] = {"spec": vars(spec), "stages": len(model.stages), "load": load_average()}
    for name, solve in (("fleetc", lambda: place(model, allow_unplaced=True)),
                        ("greedy-strong", lambda: place_strong(model, scores))):
        wall, cpu = time.perf_counter(), cpu_seconds()
        placement = solve()
        result[name] = {"placed": sum(1 for p in placement.stages if p.assignments),
                        "objective": objective(model, placement, scores),
                        "wall": time.perf_counter() - wall, "cpu": cpu_seconds() - cpu,
                        "verifier": verify(model, placement, allow_unplaced=True)[:3]}
    if time_limit is None:
        return result
    wall, cpu = time.perf_counter(), cpu_seconds()
    result["exact"] = solve_exactly(model, scores, time_limit)
    result["exact"].update(wall=time.perf_counter() - wall, cpu=cpu_seconds() - cpu)
    return result


def solve_exactly(model: Any, scores: Any, time_limit: float) -> dict[str, Any]:
    """The exact program's optimum (see the module docstring): every stage placed if possible,
    else the most valuable partial placement; its figures, and fleetc's verifier's verdict on it."""
    built = _Program(model, scores)
    every = built.solve(time_limit, every=True)
    found = every if every is not None else built.solve(time_limit, every=False)
    if found is None:
        return {"placed": None, "objective": None, "optimal": False, "every_stage": False}
    placement, optimal, bound = found
    from bench.greedy import objective
    from fleetc.placement.verify import verify

    return {"placed": sum(1 for p in placement.stages if p.assignments),
            "objective": objective(model, placement, scores), "bound": bound, "optimal": optimal,
            "every_stage": every is not None, "verifier": verify(model, placement, allow_unplaced=True)[:3]}


class _Program:
    """The SCIP model of one instance (built anew for each solve: SCIP's models are not reused
    after optimizing)."""

    def __init__(self, model: Any, scores: Any) -> None:
        from fleetc.placement import rules
        from fleetc.placement.problem import stage_values

        self.model, self.scores = model, scores
        self.values = stage_values(model, model.stages)
        self.on = {(s, c): rules.on_cluster(model.stages[s], model.clusters[c])
                   for s, c in zip(*scores.allowed.nonzero(), strict=True)}
        self.usable = [rules.usable_capacity(model, c) for c in model.clusters]

    def solve(self, time_limit: float, *, every: bool) -> tuple[Any, bool, float] | None:
        from pyscipopt import Model, quicksum

        m = Model()
        m.hideOutput()
        m.setParam("timing/clocktype", 1)  # the limit in CPU seconds: a loaded machine's wall clock runs faster
        m.setParam("limits/time", time_limit)
        m.setParam("limits/gap", 1e-6)
        stages, clusters = self.model.stages, self.model.clusters
        x: dict[tuple[int, int], Any] = {}  # replicas of s on c (a gang: 0 or all, as 0/1 of the gang)
        y: dict[tuple[int, int], Any] = {}
        z = [m.addVar(vtype="B", lb=1 if every else 0) for _ in stages]
        terms = []
        for (s, c), stage in self.on.items():
            per_replica = self.values[s] / stages[s].replicas * (1.0 + float(self.scores.total[s, c]))
            if stage.is_gang:
                x[s, c] = m.addVar(vtype="B")
                terms.append(per_replica * stage.replicas * x[s, c])
            else:
                x[s, c] = m.addVar(vtype="I", lb=0, ub=stage.replicas)
                y[s, c] = m.addVar(vtype="B")
                from fleetc.placement.rules import min_replicas_per_cluster
                m.addCons(x[s, c] >= min_replicas_per_cluster(stage) * y[s, c])
                m.addCons(x[s, c] <= stage.replicas * y[s, c])
                terms.append(per_replica * x[s, c])
        by_stage: dict[int, list[int]] = {}
        by_cluster: dict[int, list[int]] = {}
        for s, c in self.on:
            by_stage.setdefault(s, []).append(c)
            by_cluster.setdefault(c, []).append(s)
        for s, stage in enumerate(stages):
            mine = by_stage.get(s, [])
            whole = 1 if stage.is_gang else stage.replicas
            m.addCons(quicksum(x[s, c] for c in mine) == whole * z[s])
        for c, cluster in enumerate(clusters):
            self._cluster_rows(m, quicksum, x, c, cluster, by_cluster.get(c, []))
        m.setObjective(quicksum(terms), "maximize")
        m.optimize()
        if m.getNSols() == 0:
            return None
        # "gaplimit": optimal within limits/gap (1e-6 of the objective), SCIP's proof of optimality here
        return self._placement(m, x), m.getStatus() in ("optimal", "gaplimit"), float(m.getDualbound())

    def _cluster_rows(self, m: Any, quicksum: Any, x: dict[tuple[int, int], Any], c: int, cluster: Any,
                      mine: list[int]) -> None:
        """Capacity in total, and GPU pods packed onto the cluster's nodes by patterns."""
        if not mine:
            return
        gpus, millis, memory = self.usable[c]

        def replicas(s: int) -> Any:
            stage = self.on[s, c]
            return stage.replicas * x[s, c] if stage.is_gang else x[s, c]

        m.addCons(quicksum(self.on[s, c].gpus * replicas(s) for s in mine) <= gpus)
        m.addCons(quicksum(self.on[s, c].cpu_millis * replicas(s) for s in mine) <= millis)
        m.addCons(quicksum(self.on[s, c].memory_bytes / 2**20 * replicas(s) for s in mine) <= memory / 2**20)
        sizes = sorted({self.on[s, c].pod_gpus for s in mine if self.on[s, c].pod_gpus > 0}, reverse=True)
        per_node = cluster.gpus_per_node
        if not sizes or per_node <= 0:
            return
        nodes = [(per_node, gpus // per_node)] + ([(gpus % per_node, 1)] if gpus % per_node else [])
        covered = {g: [] for g in sizes}  # type: dict[int, list[Any]]
        for size, count in nodes:
            chosen = []
            for pattern in maximal_patterns(size, sizes):
                use = m.addVar(vtype="I", lb=0, ub=count)
                chosen.append(use)
                for g, n in zip(sizes, pattern, strict=True):
                    if n:
                        covered[g].append(n * use)
            m.addCons(quicksum(chosen) <= count)
        for g in sizes:
            pods = quicksum(self.on[s, c].pods_per_replica * replicas(s) for s in mine if self.on[s, c].pod_gpus == g)
            m.addCons(pods <= quicksum(covered[g]))

    def _placement(self, m: Any, x: dict[tuple[int, int], Any]) -> Any:
        from fleetc.model import Assignment, Placement, StagePlacement

        where: dict[int, list[Any]] = {}
        for (s, c), var in x.items():
            n = round(m.getVal(var))
            if n:
                stage = self.on[s, c]
                count = stage.replicas if stage.is_gang else n
                where.setdefault(s, []).append(Assignment(self.model.clusters[c].name, count, count * stage.gpus))
        return Placement(tuple(
            StagePlacement(stage.key, tuple(sorted(where.get(s, []), key=lambda a: a.cluster)), 0.0,
                           "" if s in where else "left out by the exact optimum")
            for s, stage in enumerate(self.model.stages)), 0.0, 0.0, "scip")


def report(result: dict[str, Any]) -> list[str]:
    spec, exact = result["spec"], result.get("exact")
    shapes = ",".join(map(str, spec["node_gpus"])) or "8 (default)"
    lines = [f"{spec['clusters']} x {spec['stages']}, load {spec['load']:g}, seed {spec['seed']}, nodes {shapes} "
             f"({load_words(result['load'])} before)"]
    best = exact["objective"] if exact else None
    for name in ("fleetc", "exact", "greedy-strong"):
        if name not in result:
            continue
        run = result[name]
        if run["objective"] is None:
            lines.append(f"  {name:<14} no placement found in the time limit ({run['cpu']:.1f}s CPU)")
            continue
        short = "" if not best or name == "exact" else f", {1 - run['objective'] / best:+.3%} below the optimum"
        verdict = f"verifier: {'accepts it' if not run['verifier'] else run['verifier'][0]}"
        extra = f", {verdict}"
        if name == "exact" and run["bound"] >= 1e19:
            lines.append(f"  {name:<14} no bound and no placement placing anything found in the time limit "
                         f"(SCIP's root LP did not finish: {run['cpu']:.1f}s CPU)")
            continue
        if name == "exact":
            extra = (f", {'optimal (1e-6)' if run['optimal'] else 'not proven optimal'}, bound {run['bound']:.4f}"
                     f"{', every stage placed' if run['every_stage'] else ''}, {verdict}")
        lines.append(f"  {name:<14} {run['placed']}/{result['stages']} placed, objective {run['objective']:.4f}"
                     f"{short}, {run['cpu']:.1f}s CPU ({run['wall']:.1f}s wall){extra}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance", nargs="+", default=["50x1000"], help="CLUSTERSxSTAGES, one or more")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--nodes", nargs="+", default=["default", "6,8,8"],
                        help="node shapes: 'default' (8 GPUs) or GPUs per node as bench.generate --node-gpus")
    parser.add_argument("--time-limit", type=float, default=600.0, help="per SCIP solve (CPU s)")
    parser.add_argument("--diverse", action="store_true", help="stages that hardly repeat (bench.generate --diverse)")
    parser.add_argument("--no-exact", action="store_true", help="leave SCIP out: fleetc against the strong greedy")
    args = parser.parse_args(argv)
    for instance, nodes, seed in itertools.product(args.instance, args.nodes, args.seeds):
        clusters, stages = (int(n) for n in instance.lower().split("x"))
        shapes = () if nodes == "default" else node_sizes(nodes)
        spec = Spec(clusters, stages, args.load, seed, node_gpus=shapes, diverse=args.diverse)
        result = check(spec, None if args.no_exact else args.time_limit)
        print("\n".join(report(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
