"""The greedy repair of the large path (:func:`_repair`): each stage still left out, most valuable
per GPU first, on its best clusters with room, evicting one level of stages where it must."""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

from fleetc.model import Stage
from fleetc.placement.colgen.large import _Large
from fleetc.placement.colgen.room import _Room, _taken
from fleetc.placement.problem import Problem


def _repair(problem: Problem, large: _Large, replicas_at: np.ndarray) -> None:
    """Place each stage still left out greedily (in place): most valuable per GPU first, on its
    best-scoring clusters with room left; a stage that fits nowhere stays out."""
    stages = problem.stages
    taken = _taken(large, replicas_at)
    left = [s for s in range(large.stages) if not problem.blocked[s] and not replicas_at[s].any()]
    if not left:
        return
    values = problem.values
    left.sort(key=lambda s: (-values[s] / max(stages[s].total_gpus, 1), s))
    starts = large.pair_range
    per_replica = large.coefficients / large.replicas
    room = _Room(large.capacity, taken, large.slots, large.unit, large.headroom, per_replica, replicas_at, large.caps)

    best_first: dict[int, list[int]] = {}  # a stage's clusters, best-scoring first: asked again and again

    def plan_of(s: int, avoid: int = -1, among: Collection[int] | None = None) -> dict[int, int]:
        if s not in best_first:
            pairs = np.arange(starts[s], starts[s + 1])
            best_first[s] = large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]].tolist()
        by_score = [c for c in best_first[s] if c != avoid and (among is None or c in among)]
        ha = list(problem.ha[s])
        return _greedy_plan(stages[s], s, int(problem.minimum[s]), by_score, ha, room, int(problem.least[s]))

    def apply(s: int, plan: dict[int, int], sign: int) -> None:
        for c, count in plan.items():
            replicas_at[s, c] += sign * count

    moves = EVICTION_MOVES
    for s in left:
        plan = plan_of(s)
        if not plan and moves > 0:
            plan, tried = _evict(s, plan_of, apply, replicas_at, room, large, moves,
                                 freed_only=bool(problem.gang[s]) and _uncoupled(large, s))
            moves -= tried
        apply(s, plan, 1)


#: Clusters the eviction repair tries per left-out stage, and stages it may move off one cluster.
EVICTION_CLUSTERS = 20


EVICTION_STAGES = 8


#: Groups of stages the eviction repair may try to move in all (a count, not seconds, so the
#: repair ends the same way on every machine; the plain greedy pass always runs to the end).
EVICTION_MOVES = 5_000


def _uncoupled(large: _Large, s: int) -> bool:
    """Whether the room for stage ``s`` on a cluster depends on that cluster alone: no failover
    headroom, no cap over ``s`` (both count what other clusters hold)."""
    return not len(large.headroom.bound) and not large.caps.rows_of[s]


def _evict(s: int, plan_of: Callable[..., dict[int, int]], apply: Callable[[int, dict[int, int], int], None],
           replicas_at: np.ndarray, room: _Room, large: _Large, budget: int, *, freed_only: bool
           ) -> tuple[dict[int, int], int]:
    """Make room for stage ``s`` on one of its best clusters by moving stages there elsewhere
    (a one-level ejection chain: each resident alone, then the first 2, 3, ... together, the
    most movable first), trying at most ``budget`` groups; the plan for ``s`` ({} when nothing
    changed) and the groups tried. ``freed_only``: ``s`` goes whole on one cluster, whose room
    depends on it alone (a gang, :func:`_uncoupled`), and fits on none now, so only a cluster a
    group is moved off can take it (:func:`_move_away`)."""
    starts = large.pair_range
    pairs = np.arange(starts[s], starts[s + 1])
    clusters = large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]][:EVICTION_CLUSTERS]
    # Where a cap keeps s off every cluster, only moving a stage under one of its caps can make
    # room; other groups are counted as tried without trying them (the same budget, the same end).
    sharing: np.ndarray | None = None
    if room.capped_everywhere(s, large.pair_cluster[pairs]):
        sharing = np.asarray(large.caps.members[large.caps.rows_of[s]].any(axis=0))
    tried = 0
    for c in clusters.tolist():
        residents = np.flatnonzero(replicas_at[:, c])
        choices = starts[residents + 1] - starts[residents]
        size = large.coefficients[0, residents] + large.coefficients[3, residents]
        residents = residents[np.lexsort((size, -choices))][:EVICTION_STAGES].tolist()
        groups = [[r] for r in residents] + [residents[:n] for n in range(2, len(residents) + 1)]
        for group in groups:
            if tried == budget:
                return {}, tried
            tried += 1
            if sharing is not None and not sharing[group].any():
                continue
            plan = _move_away(s, c, group, plan_of, apply, replicas_at, room, freed_only=freed_only)
            if plan:
                return plan, tried
    return {}, tried


def _move_away(s: int, c: int, group: list[int], plan_of: Callable[..., dict[int, int]],
               apply: Callable[[int, dict[int, int], int], None], replicas_at: np.ndarray,
               room: _Room, *, freed_only: bool) -> dict[int, int]:
    """Take the ``group`` of stages off (all their clusters), place ``s`` (``freed_only``: on
    the clusters they were on, the only ones whose room grew), re-place the group avoiding
    ``c``; the plan for ``s`` when all of that works, else {} with nothing changed."""
    saved = room.saved()
    moved = []
    for resident in group:
        old = {int(k): int(replicas_at[resident, k]) for k in np.flatnonzero(replicas_at[resident])}
        for k, count in old.items():
            room.take(k, resident, -count)
        apply(resident, old, -1)
        moved.append((resident, old))
    plan = plan_of(s, among={k for _, old in moved for k in old} if freed_only else None)
    replaced = _replaced(group, c, plan_of) if plan else None
    if replaced is not None:
        for resident, new in zip(group, replaced, strict=True):
            apply(resident, new, 1)
        return plan
    room.restore(saved)
    for resident, old in moved:
        apply(resident, old, 1)
    return {}


def _replaced(group: list[int], c: int, plan_of: Callable[..., dict[int, int]]) -> list[dict[int, int]] | None:
    """The plans that re-place each stage of ``group`` off cluster ``c`` (taken from the room
    in turn), or None at the first that has none: the caller then restores the room whole, so
    the stages after it need not be tried."""
    plans = []
    for resident in group:
        plan = plan_of(resident, avoid=c)
        if not plan:
            return None
        plans.append(plan)
    return plans


def _greedy_plan(stage: Stage, s: int, minimum: int, by_score: list[int], ha: list[int], room: _Room,
                 least: int) -> dict[int, int]:
    """Clusters and replicas for ``stage`` in ``room`` (taken from it), at least ``minimum`` on each
    cluster that serves a Deployment and at least ``least`` of its replicas (fewer than all only
    when it runs degraded), or {} when it does not fit."""
    if stage.is_gang:
        for c in by_score:
            if room.fits(c, s) >= stage.replicas:
                room.take(c, s, stage.replicas)
                return {c: stage.replicas}
        return {}
    plan: dict[int, int] = {}
    remaining = stage.replicas
    for c in ha:
        if room.fits(c, s) < minimum:
            break
        room.take(c, s, minimum)
        plan[c] = minimum
        remaining -= minimum
    else:
        for c in by_score:
            if not remaining:
                break
            count = min(room.fits(c, s), remaining)
            if count and (c in plan or count >= minimum):
                room.take(c, s, count)
                plan[c] = plan.get(c, 0) + count
                remaining -= count
    if stage.replicas - remaining < least or len(plan) < len(ha):
        for c, count in plan.items():
            room.take(c, s, -count)
        return {}
    return plan
