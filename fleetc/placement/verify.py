"""Re-check a placement against every hard constraint, independently of the solver.

The optimizer's answer is only trusted after this pass agrees: it reads the hard rules as
:mod:`fleetc.placement.rules` states them, in the model's integer base units (millicores,
bytes, GPUs, time-sliced slots), and nothing of the solvers' arithmetic, so a modelling or
numerical mistake there shows up here as a list of readable problems.

Given the previous placement it also checks the churn rule (:func:`rules.unjustified_moves`):
each stage the change did not touch that moved gains more than ``moveCost`` per replica
moved, in the scores of :func:`fleetc.placement.scoring.score_matrix` (the objective's, not a
hard rule's: they are read only for the stages that moved).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fleetc.model import Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.placement import rules

if TYPE_CHECKING:
    import numpy as np


def verify(model: FleetModel, placement: Placement, *, allow_unplaced: bool = False,
           previous: Mapping[str, Mapping[str, int]] | None = None, total: np.ndarray | None = None) -> list[str]:
    """Every hard constraint ``placement`` breaks, as readable sentences; [] when it is sound.

    ``allow_unplaced`` accepts stages with no assignments at all (``--allow-unplaced``).
    ``previous`` (stage key -> cluster -> replicas) adds the churn rule against it; ``total``
    is the model's score matrix when the caller has it (else it is computed when needed).
    """
    problems = _stage_order_problems(model, placement)
    known = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    ledger: list[rules.Ledger] = []  # built for the first stage placed short
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        if stage is None or (allow_unplaced and not stage_placement.assignments):
            continue
        problems += _stage_problems(model, stage, stage_placement, known)
        problems += _short_problems(model, stage, stage_placement, placement, ledger)
        problems += _ha_problems(model, stage, stage_placement)
    problems += _capacity_problems(model, placement)
    problems += _headroom_problems(model, placement)
    problems += cap_problems(model, placement)
    if previous and not problems:
        problems += churn_problems(model, placement, previous, total)
    return problems


def cap_problems(model: FleetModel, placement: Placement) -> list[str]:
    """Each team quota and cost cap the placement exceeds, counted over the whole fleet
    (:func:`rules.caps_used`, :func:`rules.cap_overuse`): ``team research: 48 h100 placed,
    quota 32``."""
    stages = {s.key: s for s in model.stages}
    clusters = {c.name: c for c in model.clusters}
    placed = ((stages[p.stage], clusters[a.cluster], a.replicas) for p in placement.stages if p.stage in stages
              for a in p.assignments if a.cluster in clusters)
    return [f"{cap.name}: {problem}" for cap, used in rules.caps_used(model, placed)
            for problem in rules.cap_overuse(model, cap, used)]


def churn_problems(model: FleetModel, placement: Placement, previous: Mapping[str, Mapping[str, int]],
                   total: np.ndarray | None = None) -> list[str]:
    """Each stage the change did not touch that moved from where ``previous`` had it gaining no
    more than ``moveCost`` per replica moved (:func:`rules.unjustified_moves`)."""
    now = {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in placement.stages}
    if not any(rules.moved_replicas(before, now.get(key, {})) for key, before in previous.items()):
        return []
    if total is None:
        from fleetc.placement.scoring import score_matrix

        total = score_matrix(model).total
    scores = total
    stage_index = {s.key: i for i, s in enumerate(model.stages)}
    cluster_index = {c.name: i for i, c in enumerate(model.clusters)}

    def score(key: str, cluster: str) -> float:
        c = cluster_index.get(cluster)
        return 0.0 if c is None else float(scores[stage_index[key], c])

    return [f"{key}: moved from {_where(previous[key])} to {_where(now.get(key, {}))}, gaining {gain:+.6f} "
            f"per replica moved, not more than moveCost {model.move_cost:g}, though the change did not touch it"
            for key, gain in sorted(rules.unjustified_moves(model, previous, now, score).items())]


def _where(placed: Mapping[str, int]) -> str:
    return ", ".join(f"{cluster} x{n}" for cluster, n in sorted(placed.items()))


def _stage_order_problems(model: FleetModel, placement: Placement) -> list[str]:
    wanted = [s.key for s in model.stages]
    got = [p.stage for p in placement.stages]
    if got == wanted:
        return []
    counts = Counter(got)
    problems = [f"{key}: not placed" for key in wanted if key not in counts]
    problems += [f"{key}: placed {n} times" for key, n in sorted(counts.items()) if n > 1]
    problems += [f"{key}: not a stage of the fleet" for key in sorted(counts) if key not in wanted]
    return problems or ["stages are not in the fleet's order"]


def _stage_problems(
    model: FleetModel, stage: Stage, placement: StagePlacement, clusters: dict[str, Cluster]
) -> list[str]:
    key = stage.key
    names = [a.cluster for a in placement.assignments]
    problems = []
    if names != sorted(set(names)):
        problems.append(f"{key}: assignments are not sorted by unique cluster name")
    problems += [f"{key}: {p}" for p in rules.replicas_sound(
        stage, [a.replicas for a in placement.assignments], rules.least_replicas(model, stage))]
    for assignment in placement.assignments:
        cluster = clusters.get(assignment.cluster)
        if cluster is None:
            problems.append(f"{key}: unknown cluster {assignment.cluster}")
            continue
        problems += [
            f"{key} on {cluster.name}: {p}"
            for p in _assignment_problems(rules.on_cluster(stage, cluster), cluster, assignment.replicas,
                                          assignment.gpus)
        ]
    return problems


def _short_problems(model: FleetModel, stage: Stage, stage_placement: StagePlacement, placement: Placement,
                    ledger: list[rules.Ledger]) -> list[str]:
    """A serving stage running degraded with fewer replicas than it has, but at least
    :func:`rules.least_replicas`: accepted only when no cluster it may use has room for one
    more replica (its per-cluster minimum where it does not run yet), :func:`rules.room_left`.
    ``ledger`` holds the placement's :class:`rules.Ledger` once built."""
    here = {a.cluster: a.replicas for a in stage_placement.assignments}
    placed = sum(here.values())
    if not rules.least_replicas(model, stage) <= placed < stage.replicas:
        return []
    if not ledger:
        stages = {s.key: s for s in model.stages}
        known = {c.name for c in model.clusters}
        ledger.append(rules.Ledger(model, (
            (stages[p.stage], a.cluster, a.replicas) for p in placement.stages if p.stage in stages
            for a in p.assignments if a.cluster in known)))
    room = rules.room_left(model, stage, here, ledger[0])
    if not room:
        return []
    cluster, more = room[0]
    return [f"{stage.key}: {placed} of {stage.replicas} replicas placed while it runs degraded, "
            f"but {cluster} has room for {more} more"]


def _assignment_problems(stage: Stage, cluster: Cluster, replicas: int, gpus: int) -> list[str]:
    problems = []
    if replicas < 1:
        problems.append(f"{replicas} replicas")
    if gpus != replicas * stage.gpus:
        problems.append(f"{gpus} GPUs for {replicas} replicas of {stage.gpus}")
    if rules.below_minimum(stage, replicas):
        problems.append(f"{replicas} replicas, below the minimum of {rules.min_replicas_per_cluster(stage)}")
    return problems + rules.exclusions(stage, cluster)


def _ha_problems(model: FleetModel, stage: Stage, placement: StagePlacement) -> list[str]:
    placed = {a.cluster: a.replicas for a in placement.assignments}
    minimum = rules.min_replicas_per_cluster(stage)
    return [
        f"{stage.key}: multiCluster needs at least {minimum} replicas on {name}, "
        f"{placed.get(name, 0)} placed"
        for name in rules.ha_clusters(model, stage)
        if placed.get(name, 0) < minimum
    ]


def _capacity_problems(model: FleetModel, placement: Placement) -> list[str]:
    """Per cluster: what is placed fits its usable capacity (:func:`rules.overuse`) and its pods
    pack onto its nodes (:func:`rules.unpacked`: an assignment of each pod to a node is found,
    pods without GPUs included, so that every rendered pod has a node with room for it)."""
    placed = _placed(model, placement)
    problems = []
    for cluster in model.clusters:
        over = rules.overuse(model, cluster, rules.usage(model, placed[cluster.name]))
        problems += [f"{cluster.name}: {need} {what} placed, capacity {have}" for what, need, have in over]
        if not over and (why := rules.unpacked(model, cluster, placed[cluster.name])):
            problems.append(f"{cluster.name}: {why}")
    return problems


def _headroom_problems(model: FleetModel, placement: Placement) -> list[str]:
    """:func:`rules.failover_shortfalls` for each cluster of each platform asking for it."""
    if not rules.failover_groups(model):
        return []
    used = _usage(model, placement)
    problems = []
    for name, members, serving in rules.failover_groups(model):
        need = _usage(model, placement, serving)
        for lost in members:
            others = [model.cluster(o) for o in members if o != lost]
            problems += [
                f"failover headroom of {name}: losing {lost} leaves {free} {what} free on "
                f"{', '.join(c.name for c in others)} for its {n}"
                for what, n, free in rules.failover_shortfalls(model, (model.cluster(lost), need[lost]),
                                                             [(c, used[c.name]) for c in others])
            ]
    return problems


def _usage(model: FleetModel, placement: Placement, only: frozenset[str] | None = None) -> dict[str, rules.Usage]:
    """Per cluster of the fleet, what ``placement`` places on it (:func:`rules.usage`), of the
    stages ``only`` names (None: all)."""
    return {name: rules.usage(model, on) for name, on in _placed(model, placement, only).items()}


def _placed(model: FleetModel, placement: Placement, only: frozenset[str] | None = None
            ) -> dict[str, list[tuple[Stage, int]]]:
    """Per cluster of the fleet, the ``(stage as it runs there, replicas)`` ``placement`` places
    on it, of the stages ``only`` names (None: all)."""
    stages = {s.key: s for s in model.stages}
    clusters = {c.name: c for c in model.clusters}
    placed: dict[str, list[tuple[Stage, int]]] = {c.name: [] for c in model.clusters}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        if stage is None or (only is not None and stage.key not in only):
            continue
        for a in stage_placement.assignments:
            if a.cluster in placed:
                placed[a.cluster].append((rules.on_cluster(stage, clusters[a.cluster]), a.replicas))
    return placed
