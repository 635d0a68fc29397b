"""fleetc against an exact solver of the documented rules, and against the strong greedy.

    python -m bench.exactcheck --instance 50x1000 100x2000 --seeds 0 1 2 --load 1.0 --nodes default 6,8,8
    python -m bench.exactcheck --instance 1000x20000 --load 0.9 --nodes default --diverse --no-exact

For each generated instance (``bench.generate``, optionally ``--node-gpus``) this builds its own
mixed-integer program of the placement rules of ``docs/optimizer.md`` and ``docs/pipelines.md``
with SCIP (pyscipopt; nothing of fleetc's program, only its score matrix and the per-pair facts
the rules name: which pairs are allowed, a stage's pods as they run on a cluster, a cluster's
usable capacity and node) and solves it (one thread):

* a gang runs whole on one allowed cluster (binary ``x[s, c]``); a Deployment's replicas split
  over allowed clusters, each running at least its per-cluster minimum (integer ``n[s, c]``,
  binary ``y[s, c]``); a stage is placed whole or not at all (``z[s]``);
* per cluster, the GPUs, cores and memory placed fit its usable capacity;
* per cluster, every pod packs onto one of its nodes (:mod:`bench.nodepack`, the documented rule
  written anew): an integer count of each pod shape on each node, no node over its GPUs, cores
  or memory; GPU pods are also covered by the maximal multisets of pod sizes that fit a node
  (Gilmore-Gomory patterns), a bound that makes the program's relaxation tighter. So the
  optimum is that of the rules fleetc's verifier checks, pods packed per node, and every
  placement printed is also checked by :func:`bench.nodepack.packing` (an assignment of its pods
  to nodes, checked in integers). ``--lazy`` packs per node only the clusters where a solve's
  answer does not pack, re-solving until all do (each solve's optimum of cluster totals and
  patterns is then an upper bound);
* objective: ``sum value_s / replicas_s * (1 + score[s, c])`` per placed replica
  (:func:`bench.greedy.objective`), every stage placed when that is possible (first solve),
  else the most valuable partial placement (fleetc's rule).

The instance must be one the model covers: no platform, quotas or time-sliced device plugins
(the generator's defaults). Printed per instance: stages placed and objective of fleetc, of
the exact optimum and of the strong greedy; fleetc's shortfall below the optimum; each figure
with its CPU seconds and the machine's load; whether each placement's pods pack onto the nodes
(:mod:`bench.nodepack`) and fleetc's verifier's verdict on it. A SCIP solve that reaches its
time limit prints its bound and its best placement (a partial placement's solve starts from
fleetc's when the verifier accepts that).
``--no-exact`` leaves SCIP out where the instance is too large for it (1,000 x 20,000): fleetc
against the strong greedy only, which still says whether fleetc places every stage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.clock import cpu_seconds, load_average, load_words
from bench.exact import model_of
from bench.generate import Spec, fleet_size, node_sizes
from bench.nodepack import Shape, add_node_rows, cluster_nodes, packing


def maximal_patterns(node: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every maximal multiset of ``sizes`` that fits a node of ``node`` GPUs (a count per size,
    in the order of ``sizes``): no size that fits a node fits beside it."""
    fitting = [g for g in sizes if 0 < g <= node]
    found: list[tuple[int, ...]] = []

    def extend(i: int, left: int, counts: tuple[int, ...]) -> None:
        if i == len(sizes):
            if fitting and left < min(fitting):
                found.append(counts)
            return
        g = sizes[i]
        most = left // g if 0 < g <= node else 0
        for n in range(most, -1, -1):
            extend(i + 1, left - n * g, (*counts, n))

    extend(0, node, ())
    return found


def placed_pods(model: Any, placement: Any) -> dict[int, dict[Shape, int]]:
    """Per cluster (index), the pods ``placement`` puts there: a count per pod shape, each stage
    as it runs on that cluster (its pods per replica and their size)."""
    from fleetc.placement.rules import on_cluster

    index = {c.name: i for i, c in enumerate(model.clusters)}
    stages = {s.key: s for s in model.stages}
    pods: dict[int, dict[Shape, int]] = {}
    for stage_placement in placement.stages:
        for a in stage_placement.assignments:
            c = index[a.cluster]
            stage = on_cluster(stages[stage_placement.stage], model.clusters[c])
            shape = (stage.pod_gpus, stage.pod_cpu_millis, stage.pod_memory_bytes)
            on = pods.setdefault(c, {})
            on[shape] = on.get(shape, 0) + a.replicas * stage.pods_per_replica
    return pods


def unpacked_clusters(model: Any, placement: Any) -> list[int]:
    """The clusters (indices) whose pods in ``placement`` pack onto no assignment to their nodes
    (:func:`bench.nodepack.packing`)."""
    from fleetc.placement.rules import usable_capacity

    return sorted(c for c, pods in placed_pods(model, placement).items()
                  if packing(pods, cluster_nodes(model.clusters[c], usable_capacity(model, model.clusters[c])[0]))
                  is None)


def check(spec: Spec, time_limit: float | None, *, lazy: bool = False) -> dict[str, Any]:
    """fleetc, the exact optimum (none without a ``time_limit``) and the strong greedy on
    ``spec``'s instance (``lazy``: :func:`solve_exactly`'s)."""
    from bench.strong import place_strong
    from fleetc.placement.optimize import place
    from fleetc.placement.scoring import score_matrix

    model = model_of(spec)
    if model.platforms or any(c.device_plugin_configured for c in model.clusters):
        raise ValueError("the exact model covers fleets without platforms or time-sliced device plugins")
    scores = score_matrix(model)
    result: dict[str, Any] = {"spec": vars(spec), "stages": len(model.stages), "load": load_average()}
    placements = {}
    for name, solve in (("fleetc", lambda: place(model, allow_unplaced=True)),
                        ("greedy-strong", lambda: place_strong(model, scores))):
        wall, cpu = time.perf_counter(), cpu_seconds()
        placements[name] = placement = solve()
        result[name] = {"wall": time.perf_counter() - wall, "cpu": cpu_seconds() - cpu,
                        **judged(model, scores, placement)}
    result["placements"] = {name: where(p) for name, p in placements.items()}
    if time_limit is None:
        return result
    wall, cpu = time.perf_counter(), cpu_seconds()
    start = placements["fleetc"] if not result["fleetc"]["verifier"] else None
    result["exact"] = solve_exactly(model, scores, time_limit, lazy=lazy, start=start)
    result["exact"].update(wall=time.perf_counter() - wall, cpu=cpu_seconds() - cpu)
    if "placement" in result["exact"]:
        result["placements"]["exact"] = where(result["exact"].pop("placement"))
    return result


def where(placement: Any) -> dict[str, dict[str, int]]:
    """Stage key -> cluster -> replicas, of the stages placed (``--save``)."""
    return {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in placement.stages if p.assignments}


def judged(model: Any, scores: Any, placement: Any) -> dict[str, Any]:
    """A placement's stages placed and objective, fleetc's verifier's verdict on it (its first
    three problems) and the clusters whose pods pack onto no assignment to their nodes by
    :mod:`bench.nodepack` (names)."""
    from bench.greedy import objective
    from fleetc.placement.verify import verify

    return {"placed": sum(1 for p in placement.stages if p.assignments),
            "objective": objective(model, placement, scores),
            "verifier": verify(model, placement, allow_unplaced=True)[:3],
            "unpacked": [model.clusters[c].name for c in unpacked_clusters(model, placement)]}


def solve_exactly(model: Any, scores: Any, time_limit: float, *, lazy: bool = False,
                  start: Any = None) -> dict[str, Any]:
    """The exact program's optimum (see the module docstring): every stage placed if possible,
    else the most valuable partial placement; its figures, and fleetc's verifier's verdict on it.

    Pods are packed onto the nodes of every cluster in the program; ``lazy``: of none at first,
    then, after each solve, of each cluster whose pods in its optimum do not pack, until all
    pack (``rounds``: those clusters' names, per solve that added any). ``start``: a placement
    known to hold, offered to SCIP as a first solution of the partial placement's solve."""
    built = _Program(model, scores, set() if lazy else set(range(len(model.clusters))))
    rounds: list[list[str]] = []
    found, status = built.solve_packed(time_limit, True, None, rounds)
    every = found is not None and found[0] is not None
    if found is None:  # none of every stage found (or none exists): the most valuable partial placement
        found, _ = built.solve_packed(time_limit, False, start, rounds)
    answer: dict[str, Any] = {"rounds": rounds, "every_stage": every, "every_stage_status": status}
    if found is None:
        return {**answer, "placed": None, "objective": None, "optimal": False, "bound": None}
    placement, optimal, bound = found
    if placement is None:  # the last solve's solution does not pack: its bound only
        return {**answer, "placed": None, "objective": None, "optimal": False, "bound": bound}
    return {**answer, **judged(model, scores, placement), "bound": bound, "optimal": optimal, "placement": placement}


class _Program:
    """The SCIP model of one instance (built anew for each solve: SCIP's models are not reused
    after optimizing); pods packed onto the nodes of the clusters ``refined``."""

    def __init__(self, model: Any, scores: Any, refined: set[int]) -> None:
        from fleetc.placement import rules
        from fleetc.placement.problem import stage_values

        self.model, self.scores, self.refined = model, scores, refined
        self.values = stage_values(model, model.stages)
        self.on = {(s, c): rules.on_cluster(model.stages[s], model.clusters[c])
                   for s, c in zip(*scores.allowed.nonzero(), strict=True)}
        self.usable = [rules.usable_capacity(model, c) for c in model.clusters]
        self.nodes = [cluster_nodes(c, usable[0]) for c, usable in zip(model.clusters, self.usable, strict=True)]

    def solve_packed(self, time_limit: float, every: bool, start: Any, rounds: list[list[str]]
                     ) -> tuple[tuple[Any, bool, float] | None, str]:
        """:meth:`solve` until the pods of its answer pack onto every cluster's nodes, the
        clusters where they do not refined after each solve (their names appended to
        ``rounds``). The answer (its placement None when the last solve's does not pack, its
        time limit reached) and SCIP's last status."""
        while True:
            found, status = self.solve(time_limit, every=every, start=start)
            if found is None:
                return None, status
            unpacked = set(unpacked_clusters(self.model, found[0])) - self.refined
            if not unpacked:
                return found, status
            rounds.append([self.model.clusters[c].name for c in sorted(unpacked)])
            self.refined |= unpacked
            if status not in ("optimal", "gaplimit"):  # its time limit reached: no time for another
                return (None, False, found[2]), status

    def solve(self, time_limit: float, *, every: bool, start: Any = None) -> tuple[tuple[Any, bool, float] | None, str]:
        from pyscipopt import Model, quicksum

        m = Model()
        m.hideOutput()
        m.setParam("timing/clocktype", 1)  # the limit in CPU seconds: a loaded machine's wall clock runs faster
        m.setParam("limits/time", time_limit)
        m.setParam("limits/gap", 1e-6)
        m.setParam("parallel/maxnthreads", 1)
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
        if start is not None:
            self._offer(m, start, x, y, z)
        m.optimize()
        status = str(m.getStatus())
        if m.getNSols() == 0:
            return None, status
        # "gaplimit": optimal within limits/gap (1e-6 of the objective), SCIP's proof of optimality here
        return (self._placement(m, x), status in ("optimal", "gaplimit"), float(m.getDualbound())), status

    def _offer(self, m: Any, start: Any, x: dict[tuple[int, int], Any], y: dict[tuple[int, int], Any],
               z: list[Any]) -> None:
        """``start`` as a partial solution of ``m`` (its ``x``, ``y`` and ``z``; SCIP completes
        the rest, the packing included)."""
        index = {c.name: i for i, c in enumerate(self.model.clusters)}
        where = {p.stage: {index[a.cluster]: a.replicas for a in p.assignments} for p in start.stages}
        sol = m.createPartialSol()
        for (s, c), var in x.items():
            n = where.get(self.model.stages[s].key, {}).get(c, 0)
            m.setSolVal(sol, var, (1 if n else 0) if self.on[s, c].is_gang else n)
            if (s, c) in y:
                m.setSolVal(sol, y[s, c], 1 if n else 0)
        for s, var in enumerate(z):
            m.setSolVal(sol, var, 1 if where.get(self.model.stages[s].key) else 0)
        m.addSol(sol)

    def _cluster_rows(self, m: Any, quicksum: Any, x: dict[tuple[int, int], Any], c: int, cluster: Any,
                      mine: list[int]) -> None:
        """Capacity in total, GPU pods packed onto the cluster's nodes by patterns (a bound),
        and, where the cluster is refined, every pod onto a node (:func:`bench.nodepack.add_node_rows`)."""
        if not mine:
            return
        gpus, millis, memory = self.usable[c]

        def pods(s: int) -> Any:
            stage = self.on[s, c]
            return stage.pods_per_replica * (stage.replicas * x[s, c] if stage.is_gang else x[s, c])

        def replicas(s: int) -> Any:
            stage = self.on[s, c]
            return stage.replicas * x[s, c] if stage.is_gang else x[s, c]

        m.addCons(quicksum(self.on[s, c].gpus * replicas(s) for s in mine) <= gpus)
        m.addCons(quicksum(self.on[s, c].cpu_millis * replicas(s) for s in mine) <= millis)
        m.addCons(quicksum(self.on[s, c].memory_bytes / 2**20 * replicas(s) for s in mine) <= memory / 2**20)
        if c in self.refined:
            shapes: dict[Shape, list[int]] = {}
            for s in mine:
                stage = self.on[s, c]
                shapes.setdefault((stage.pod_gpus, stage.pod_cpu_millis, stage.pod_memory_bytes), []).append(s)
            add_node_rows(m, quicksum, {shape: quicksum(pods(s) for s in of) for shape, of in shapes.items()},
                          self.nodes[c])
        self._pattern_rows(m, quicksum, c, mine, pods)

    def _pattern_rows(self, m: Any, quicksum: Any, c: int, mine: list[int], pods: Any) -> None:
        """The GPU pods (``pods(s)`` of each stage) covered by maximal patterns of the cluster's
        GPU nodes (Gilmore-Gomory): a valid bound on any packing, stronger than the totals."""
        sizes = sorted({self.on[s, c].pod_gpus for s in mine if self.on[s, c].pod_gpus > 0}, reverse=True)
        if not sizes:
            return
        node_gpus: dict[int, int] = {}
        for node in self.nodes[c]:
            if node[0] > 0:
                node_gpus[node[0]] = node_gpus.get(node[0], 0) + 1
        covered: dict[int, list[Any]] = {g: [] for g in sizes}
        for size, count in node_gpus.items():
            chosen = []
            for pattern in maximal_patterns(size, sizes):
                use = m.addVar(vtype="I", lb=0, ub=count)
                chosen.append(use)
                for g, n in zip(sizes, pattern, strict=True):
                    if n:
                        covered[g].append(n * use)
            m.addCons(quicksum(chosen) <= count)
        for g in sizes:
            m.addCons(quicksum(pods(s) for s in mine if self.on[s, c].pod_gpus == g) <= quicksum(covered[g]))

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
    best = exact["objective"] if exact and exact["optimal"] else None
    for name in ("fleetc", "exact", "greedy-strong"):
        if name in result:
            lines.append(f"  {name:<14} " + _line(result[name], result["stages"], None if name == "exact" else best))
    if exact:
        lines += _exact_lines(exact)
    return lines


def _line(run: dict[str, Any], stages: int, best: float | None) -> str:
    """One placement's figures and verdicts (SCIP's: also whether it is proven optimal)."""
    time_taken = f"{run['cpu']:.1f}s CPU ({run['wall']:.1f}s wall)"
    if "rounds" in run and run["objective"] is None:
        bound = run["bound"]
        if bound is None or bound >= 1e19:
            return f"no placement that packs found in the time limit, no bound, {time_taken}"
        return f"no placement that packs found in the time limit, bound {bound:.4f}, {time_taken}"
    short = "" if best is None else f", {1 - run['objective'] / best:+.3%} below the optimum"
    verdict = f"verifier: {'accepts it' if not run['verifier'] else run['verifier'][0]}"
    packs = ("packs onto the nodes" if not run["unpacked"]
             else f"does not pack onto the nodes of {', '.join(run['unpacked'])}")
    proof = ""
    if "rounds" in run:
        proof = f", {'optimal (1e-6)' if run['optimal'] else 'not proven optimal'}, bound {run['bound']:.4f}"
    return (f"{run['placed']}/{stages} placed, objective {run['objective']:.4f}{short}, {time_taken}{proof}, "
            f"{packs} (bench.nodepack), {verdict}")


def _exact_lines(exact: dict[str, Any]) -> list[str]:
    """Whether every stage can be placed, and the clusters the lazy refinement packed per node."""
    every = ("every stage placed" if exact["every_stage"] else
             "no placement of every stage (proven)" if exact["every_stage_status"] == "infeasible" else
             f"no placement of every stage found, none proven impossible ({exact['every_stage_status']})")
    lines = [f"  {'':<14} {every}"]
    lines += [f"  {'':<14} solve {i + 1}'s pods did not pack onto the nodes of {', '.join(names)}: packed per node"
              for i, names in enumerate(exact["rounds"])]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance", nargs="+", type=fleet_size, default=[(50, 1000)],
                        help="CLUSTERSxSTAGES, one or more (default 50x1000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--nodes", nargs="+", default=["default", "6,8,8"],
                        help="node shapes: 'default' (8 GPUs) or GPUs per node as bench.generate --node-gpus")
    parser.add_argument("--time-limit", type=float, default=600.0, help="per SCIP solve (CPU s)")
    parser.add_argument("--diverse", action="store_true", help="stages that hardly repeat (bench.generate --diverse)")
    parser.add_argument("--no-exact", action="store_true", help="leave SCIP out: fleetc against the strong greedy")
    parser.add_argument("--save", type=Path, help="a folder: each instance's figures and placements as JSON")
    parser.add_argument("--lazy", action="store_true",
                        help="pack pods per node only on the clusters where SCIP's answer does not pack, re-solving")
    args = parser.parse_args(argv)
    for (clusters, stages), nodes, seed in itertools.product(args.instance, args.nodes, args.seeds):
        shapes = () if nodes == "default" else node_sizes(nodes)
        spec = Spec(clusters, stages, args.load, seed, node_gpus=shapes, diverse=args.diverse)
        result = check(spec, None if args.no_exact else args.time_limit, lazy=args.lazy)
        print("\n".join(report(result)), flush=True)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            name = f"{clusters}x{stages}-load{args.load:g}-nodes{nodes}-seed{seed}.json"
            (args.save / name).write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
