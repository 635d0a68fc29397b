"""Karmada-style greedy baselines to measure fleetc's optimizer against.

Same hard filters and the same score matrix as fleetc (:func:`fleetc.placement.scoring.score_matrix`),
then one pass over the stages, best first, each placed where it scores best among the clusters
that still have room, never moved again:

* a gang (every stage but a Deployment) goes whole to the best-scoring allowed cluster with
  free GPUs, cores and memory for all its replicas;
* a Deployment's replicas are divided over the allowed clusters in proportion to how many
  replicas each still has room for (Karmada's dynamic weight division), dropping clusters that
  would get fewer than the stage's minimum per cluster.

A stage that fits nowhere stays unplaced (empty assignments, a reason). Two orders:

* ``class-weight``: by class weight, then in input order (a priority queue, as a scheduler
  sees jobs arrive);
* ``value-per-gpu``: by the objective a stage earns per GPU it uses (class weight times one plus
  its best score), ties broken by size, biggest first (first-fit decreasing): the strong
  baseline.

:func:`objective` mirrors :mod:`fleetc.placement.optimize`'s objective exactly (without a previous
placement, whose move-cost term is then 0), so greedy and fleetc placements compare in the same
units. Capacity is what :func:`fleetc.placement.rules.usable_capacity` allows, with time-sliced GPU slots
for shared stages, and ``multiCluster`` serving clusters get their minimum first. Team quotas and
cost caps are kept as fleetc keeps them (:class:`bench.caps.CapRoom`): a stage goes only where
they leave room for it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.caps import CapRoom
from fleetc.model import Assignment, FleetModel, Placement, Stage, StagePlacement
from fleetc.placement.problem import EPSILON
from fleetc.placement.rules import (
    ha_clusters,
    min_replicas_per_cluster,
    slots_on,
    slots_per_gpu,
    usable_capacity,
    uses_shared_slots,
)
from fleetc.placement.scoring import Scores, score_matrix

ORDERS = ("class-weight", "value-per-gpu")


def stage_value(model: FleetModel, stage: Stage) -> float:
    """``class_weight * max(total_gpus, 1)``, with ``EPSILON`` for a zero class weight."""
    return (model.class_weights.of(stage.workload_class) or EPSILON) * max(stage.total_gpus, 1)


def objective(model: FleetModel, placement: Placement, scores: Scores | None = None) -> float:
    """``sum value_s / replicas_s * (1 + total[s, c])`` over every placed replica."""
    scores = scores if scores is not None else score_matrix(model)
    index = {c.name: i for i, c in enumerate(model.clusters)}
    by_key = {s.key: (i, s) for i, s in enumerate(model.stages)}
    total = 0.0
    for stage_placement in placement.stages:
        s, stage = by_key[stage_placement.stage]
        per_replica = stage_value(model, stage) / stage.replicas
        for a in stage_placement.assignments:
            total += per_replica * (1.0 + scores.total[s, index[a.cluster]]) * a.replicas
    return round(total, 6)


def time_sliced(model: FleetModel) -> bool:
    """Whether every GPU cluster time-slices GPUs (:func:`fleetc.placement.rules.slots_on`): the
    baselines keep one demand per stage, time-sliced everywhere or nowhere (generated fleets:
    nowhere, their device plugins are not configured)."""
    return all(slots_on(model, c) > 1 for c in model.clusters if c.gpus)


def gpu_share(model: FleetModel, stage: Stage) -> float:
    """The GPUs one GPU of ``stage`` takes: 1, or ``1 / slots`` when time-sliced."""
    return 1.0 / slots_per_gpu(model) if time_sliced(model) and uses_shared_slots(model, stage) else 1.0


def gpus_demanded(model: FleetModel) -> float:
    """GPUs every stage together needs (time-sliced GPUs count as their share)."""
    return sum(s.total_gpus * gpu_share(model, s) for s in model.stages)


def gpus_placed(model: FleetModel, placement: Placement) -> float:
    """GPUs the placed replicas use, counted like :func:`gpus_demanded`."""
    share = {s.key: gpu_share(model, s) for s in model.stages}
    return sum(a.gpus * share[p.stage] for p in placement.stages for a in p.assignments)


def gpus_usable(model: FleetModel) -> int:
    return sum(usable_capacity(model, c)[0] for c in model.clusters)


def place_greedy(model: FleetModel, order: str = "value-per-gpu",
                 scores: Scores | None = None) -> Placement:
    """Place ``model``'s stages greedily in ``order`` (one of :data:`ORDERS`)."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; one of {', '.join(ORDERS)}")
    scores = scores if scores is not None else score_matrix(model)
    demand, free = _demand_and_capacity(model)
    index = {c.name: i for i, c in enumerate(model.clusters)}
    caps = CapRoom(model)
    placed: dict[int, dict[int, int]] = {}
    for s in _order(model, scores, order):
        stage = model.stages[s]
        candidates = np.flatnonzero(scores.allowed[s])
        within = caps.room(s, candidates)  # the team quotas and cost caps, as fleetc keeps them
        if stage.is_gang:
            share = _place_gang(stage, candidates[within >= stage.replicas], demand[s], free, scores.total[s])
        else:
            required = [index[name] for name in ha_clusters(model, stage)]
            share = _place_deployment(stage, candidates, demand[s], free, scores.total[s],
                                      required, dict(zip(candidates.tolist(), within.tolist(), strict=True)))
        if share and not caps.fits(s, share):  # a Deployment over a cap's total: left out
            share = {}
        if share:
            for c, replicas in share.items():
                free[:, c] -= demand[s] * replicas
            caps.add(s, share)
            placed[s] = share
    stages = tuple(_stage_placement(model, s, placed.get(s, {}), scores.total[s])
                   for s in range(len(model.stages)))
    result = Placement(stages=stages, objective=0.0, bound=0.0, method=f"greedy-{order}")
    value = objective(model, result, scores)
    # A greedy pass proves no bound: ``bound`` is its own objective; compare with fleetc's.
    return Placement(stages=stages, objective=value, bound=value, method=result.method)


def _demand_and_capacity(model: FleetModel) -> tuple[np.ndarray, np.ndarray]:
    """(S, 3) per-replica demand and (3, C) usable capacity, in GPU slots, millicores, bytes.

    Counting GPUs in time-slicing slots (a whole GPU is ``slots_per_gpu`` slots, a shared
    replica's GPU one slot) is exactly :func:`fleetc.placement.verify.verify`'s rule ``exclusive +
    ceil(shared slots / slots) <= usable GPUs``, since exclusive GPUs are whole numbers, where
    shared replicas are time-sliced (:func:`time_sliced`; the baselines do not model that
    configured clusters time-slice whole nodes).
    """
    slots = slots_per_gpu(model)
    sliced = time_sliced(model)
    demand = np.array(
        [[s.gpus * (1 if sliced and uses_shared_slots(model, s) else slots), s.cpu_millis, s.memory_bytes]
         for s in model.stages], dtype=float).reshape(len(model.stages), 3)
    usable = [usable_capacity(model, c) for c in model.clusters]
    free = np.array([[gpus * slots, millis, memory] for gpus, millis, memory in usable],
                    dtype=float).reshape(len(model.clusters), 3).T.copy()
    return demand, free


def _order(model: FleetModel, scores: Scores, order: str) -> list[int]:
    weights = [model.class_weights.of(s.workload_class) for s in model.stages]
    if order == "class-weight":
        key: Callable[[int], tuple[float, ...]] = lambda s: (-weights[s], s)  # noqa: E731
    else:
        best = np.max(np.where(scores.allowed, scores.total, 0.0), axis=1)
        density = [stage_value(model, st) * (1.0 + best[i]) / max(st.total_gpus, 1)
                   for i, st in enumerate(model.stages)]
        key = lambda s: (-density[s], -model.stages[s].total_gpus, s)  # noqa: E731
    return sorted(range(len(model.stages)), key=key)


def _room(demand: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Replicas of per-replica ``demand`` each column of ``free`` (3, n) still has room for."""
    needed = demand > 0
    if not needed.any():
        return np.full(free.shape[1], np.iinfo(np.int64).max // 4)
    ratio = free[needed] / demand[needed, np.newaxis]
    return np.floor(np.min(ratio, axis=0) + 1e-9).astype(np.int64)


def _place_gang(stage: Stage, candidates: np.ndarray, demand: np.ndarray, free: np.ndarray,
                total: np.ndarray) -> dict[int, int]:
    if not len(candidates):
        return {}
    fits = candidates[_room(demand, free[:, candidates]) >= stage.replicas]
    if not len(fits):
        return {}
    best = fits[np.argmax(total[fits])]  # first of the best: the lowest cluster index
    return {int(best): stage.replicas}


def _place_deployment(stage: Stage, candidates: np.ndarray, demand: np.ndarray,
                      free: np.ndarray, total: np.ndarray, required: list[int],
                      within: dict[int, int] | None = None) -> dict[int, int]:
    """Divide the replicas in proportion to each cluster's room; drop clusters below the
    minimum per cluster and divide again, until every share is 0 or at least the minimum.

    ``required`` clusters (``multiCluster``) first get the minimum each; the rest is divided.
    ``within``: the replicas each cluster may take within the caps (None: no cap).
    """
    minimum = min_replicas_per_cluster(stage)
    room = dict(zip(candidates.tolist(), _room(demand, free[:, candidates]).tolist(), strict=True))
    if within is not None:
        room = {c: min(n, within[c]) for c, n in room.items()}
    if any(room.get(c, 0) < minimum for c in required):
        return {}
    reserved = {c: minimum for c in required}
    replicas = stage.replicas - minimum * len(required)
    if replicas < 0:
        return {}
    room = {c: n - reserved.get(c, 0) for c, n in room.items()}
    pool = [c for c in candidates.tolist() if c in reserved or room[c] >= minimum]
    return _divide_dropping_small(replicas, pool, room, reserved, minimum, total)


def _divide_dropping_small(replicas: int, pool: list[int], room: dict[int, int], reserved: dict[int, int],
                           minimum: int, total: np.ndarray) -> dict[int, int]:
    """Divide ``replicas`` over ``pool`` on top of ``reserved``, dropping the smallest share
    below ``minimum`` (never a reserved cluster) and dividing again; {} when the room runs out."""
    while pool:
        if sum(room[c] for c in pool) < replicas:
            return {}
        share = _divide(replicas, pool, room, total) if replicas else {}
        small = [c for c in pool if 0 < share.get(c, 0) < minimum and c not in reserved]
        if not small:
            merged = {c: share.get(c, 0) + reserved.get(c, 0) for c in pool}
            return {c: n for c, n in merged.items() if n}
        pool.remove(min(small, key=lambda c: (share[c], total[c], -c)))
    return {}


def _divide(replicas: int, pool: list[int], room: dict[int, int],
            total: np.ndarray) -> dict[int, int]:
    """Largest-remainder division of ``replicas`` in proportion to ``room``, capped by it."""
    available = sum(room[c] for c in pool)
    exact = {c: replicas * room[c] / available for c in pool}
    share = {c: min(room[c], int(exact[c])) for c in pool}
    left = replicas - sum(share.values())
    ranked = sorted(pool, key=lambda c: (-(exact[c] - int(exact[c])), -total[c], c))
    while left > 0:
        progressed = False
        for c in ranked:
            if left and share[c] < room[c]:
                share[c] += 1
                left -= 1
                progressed = True
        if not progressed:
            break
    return share


def _stage_placement(model: FleetModel, s: int, share: dict[int, int],
                     total: np.ndarray) -> StagePlacement:
    stage = model.stages[s]
    if not share:
        return StagePlacement(stage=stage.key, assignments=(), score=0.0,
                              reason="no cluster has room left (greedy)")
    assignments = tuple(sorted(
        (Assignment(model.clusters[c].name, n, n * stage.gpus) for c, n in share.items()),
        key=lambda a: a.cluster))
    score = sum(total[c] * n for c, n in share.items()) / stage.replicas
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(float(score), 6))
