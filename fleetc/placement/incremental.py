"""Recompile after a small change: keep what the change did not touch, solve the rest exactly.

:func:`recompile` is what :func:`fleetc.placement.optimize.place` tries first, through its
solver :class:`fleetc.placement.solver.Incremental` (:func:`fleetc.placement.solver.fleet_solver`),
when it is given a previous placement of a fleet with more than :data:`INCREMENTAL` allowed
pairs (below that the full exact solve is fast and proven optimal):

1. **What the change touches** (:func:`touched_stages`): stages that are new or were left out,
   whose recorded figures changed (type, GPU types, GPUs per replica, replicas: what the previous
   ``placement.yaml`` says of each, :class:`~fleetc.placement.previous.Recorded`), whose previous
   clusters are gone, cordoned or drained, or no longer allow them or hold their replica split
   (:func:`fleetc.placement.rules.may_stay` in vector form), and, while they are few, those whose
   score where they run changed (a cluster's attributes or prices moved). Every other stage is
   kept where it was; the stages on a cluster whose capacity no longer holds them are touched
   too.
2. **The neighbourhood**: the touched stages may go to any cluster they are allowed on, in the
   room the kept stages leave (:func:`fleetc.placement.program.build_program` with the kept
   stages as ``taken``), solved exactly by HiGHS (:func:`~fleetc.placement.program.solve_program`,
   the large path's tool), every stage placed, with the move cost rewarding residents that stay.
   Pairs where the least the stage may place does not fit the room left are dropped first
   (:func:`_fits`). When that cannot place them all, the residents of the best-scoring clusters
   of each stage left out may move too (:data:`GROWTH`), and again, wider.
3. **Fall back** (None; its solver declines): to the full solve when the touched stages are more than
   :data:`TOUCHED_SHARE` of the fleet, when the neighbourhood holds more than
   :data:`NEIGHBOURHOOD_PAIRS` pairs, when the grown neighbourhood still cannot place what the
   full solve might (only stages that were left out before, unchanged, may stay out, and only
   with ``--allow-unplaced``: nothing is ever claimed infeasible that the full solve did not
   prove), when the fleet has team quotas, cost caps or failover headroom (rows that couple
   stages across the fleet), or when the time limit ran out.

The result keeps the full solve's guarantees: the verifier checks it (the hard rules and the
churn rule against the previous placement), and its bound is valid for the whole fleet (the
full solve's relaxation, :func:`fleetc.placement.colgen.solve.relaxation_bound`, else
:func:`lagrangian_bound`; ``docs/optimizer.md`` derives both), so the reported gap is honest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fleetc.model import FleetModel
from fleetc.placement import LARGE, rules
from fleetc.placement.colgen.solve import relaxation_bound
from fleetc.placement.previous import Recorded
from fleetc.placement.problem import (
    Budget,
    PreviousClusters,
    Problem,
    free_room,
    taken_per_cluster,
)
from fleetc.placement.program import HighsDirect, Solved, most_valuable, replicas_of, solve_neighbourhood

#: Allowed pairs (the whole fleet) above which a recompile re-solves only what the change touches.
INCREMENTAL = LARGE
#: A change touching more than this share of the stages is solved again in full.
TOUCHED_SHARE = 0.1
#: Per stage the neighbourhood leaves out, the residents of its best-scoring clusters (this
#: many; None: all it may use) may move too, one growth after another.
GROWTH: tuple[int | None, ...] = (1, 2, 4, 16, None)
#: A neighbourhood of more allowed pairs than this is no longer small: the full solve decides.
NEIGHBOURHOOD_PAIRS = 250_000
#: Branch-and-bound nodes per neighbourhood MILP (a work budget, never seconds).
NODES = 5000
#: Rounds of raising the bound's prices, and of moving them to where it is least
#: (:func:`lagrangian_bound`): each is a few passes over (kinds, C) arrays, cheap where stages
#: are alike; at 1,000 x 20,000 more than 8 lower the bound no further.
BOUND_STEPS = 8


@dataclass(frozen=True, eq=False)
class Recompiled(Solved):
    """A placement of the whole fleet made by re-solving only what the change touched: as every
    solver returns it (:class:`~fleetc.placement.program.Solved`, method ``incremental``):
    ``replicas_at`` (S, C), its objective (no move-cost terms), a valid upper bound on every
    placement's objective (the relaxation's, else :func:`lagrangian_bound`), and ``proven`` False when stages left out
    before stay out without a proof that nothing places them; and ``touched`` the stages the
    change touched, ``candidates`` the stages the last neighbourhood MILP re-placed (touched
    ones and the residents it let move), ``lp_bound`` whether the bound is the relaxation's."""

    touched: int = 0
    candidates: int = 0
    lp_bound: bool = False


def recompile(whole: Problem, previous: PreviousClusters, recorded: Mapping[str, Recorded] | None, budget: Budget,
              *, allow_unplaced: bool) -> Recompiled | None:
    """The placement of the fleet ``whole`` (its problem over every stage and cluster, ``kept``
    the replicas ``previous`` gave each pair, :func:`~fleetc.placement.problem.previous_matrix`)
    that keeps every stage the change did not touch where ``previous`` had it and solves the
    touched ones (and what they displace) exactly; None when the full solve must decide (see the
    module docstring). :class:`fleetc.placement.solver.Incremental` is its solver."""
    model = whole.model
    if coupled(model):
        return None
    kept = whole.kept
    changed = _changed_mask(model, recorded)
    touched = touched_stages(whole, previous, recorded, changed)
    base = _Pairs.of(kept).without(touched)
    touched |= base.holding(_overfull(whole, _taken(whole, base)), len(model.stages))
    if touched.sum() > TOUCHED_SHARE * len(model.stages):
        return None
    base = base.without(touched)
    placeable = touched & ~whole.blocked & whole.allowed.any(axis=1)
    was_out = np.array([not previous.get(s.key) and (recorded is None or s.key in recorded) for s in model.stages])
    may_stay_out = was_out & touched & ~changed if allow_unplaced else np.zeros_like(touched)
    solved = _solve_neighbourhood(whole, base, placeable, may_stay_out, budget)
    if solved is None:
        return None
    placed, movable, proven = solved
    objective = whole.score_of_pairs(placed.stage, placed.cluster, placed.count)
    left_out = bool(np.any(whole.allowed.any(axis=1) & ~whole.blocked
                           & ~np.isin(np.arange(len(model.stages)), placed.stage)))
    bound = relaxation_bound(whole, left_out, budget.deadline)
    lp_bound = bool(np.isfinite(bound))
    if not lp_bound:  # stages too diverse for the relaxation's kinds
        bound = _bound(whole, placed, BOUND_STEPS)
    # The previous placement's matrix becomes the new one (no second (S, C) matrix): every
    # stage but the touched and moved ones is as it was.
    replicas_at, rows = kept, touched | movable
    replicas_at[rows] = 0
    mine = rows[placed.stage]
    replicas_at[placed.stage[mine], placed.cluster[mine]] = placed.count[mine]
    return Recompiled(replicas_at, objective, max(bound, objective), "incremental", proven,
                      int(touched.sum()), int(movable.sum()), lp_bound)


def coupled(model: FleetModel) -> bool:
    """Whether rows couple stages across the whole fleet (team quotas, cost caps, failover
    headroom): the incremental path then leaves the fleet to the full solve."""
    return bool(rules.caps(model) or rules.failover_groups(model))


def touched_stages(whole: Problem, previous: PreviousClusters, recorded: Mapping[str, Recorded] | None,
                   changed: np.ndarray) -> np.ndarray:
    """(S,) bool: the stages the change touched (step 1 of the module docstring), but for those
    displaced from clusters that no longer hold what stays; ``changed`` the stages whose figures
    changed (:func:`_changed_mask`)."""
    model = whole.model
    names = {c.name: i for i, c in enumerate(model.clusters)}
    touched = changed.copy()
    serving_ha = any(p.primary_cluster for p in model.platforms)  # else no stage has multiCluster clusters
    rescored = np.zeros(len(model.stages), dtype=bool)
    for s, stage in enumerate(model.stages):
        before = previous.get(stage.key) or {}
        if touched[s] or whole.blocked[s] or not before or not _may_stay(whole, s, before, names, serving_ha):
            touched[s] = True
        elif recorded is not None:
            placed = sum(before.values())
            score = sum(n * float(whole.total[s, names[c]]) for c, n in before.items()) / placed
            rescored[s] = abs(round(score, 6) - recorded[stage.key].score) > 1.5e-6
    if rescored.sum() + touched.sum() <= TOUCHED_SHARE * len(model.stages):
        touched |= rescored
    return touched


def _changed_mask(model: FleetModel, recorded: Mapping[str, Recorded] | None) -> np.ndarray:
    """(S,) bool: stages whose figures differ from what the previous report recorded of them
    (all False without a report)."""
    if recorded is None:
        return np.zeros(len(model.stages), dtype=bool)
    return np.array([s.key not in recorded or recorded[s.key] != Recorded.of(s) for s in model.stages], dtype=bool)


def _may_stay(whole: Problem, s: int, before: Mapping[str, int], names: Mapping[str, int], serving_ha: bool) -> bool:
    """:func:`rules.may_stay` with the filters read from ``whole.allowed`` (the same rules,
    :func:`fleetc.placement.scoring.score_matrix`): all its replicas, on clusters of the fleet
    that may run it, its split sound and every ``multiCluster`` cluster served."""
    model, stage = whole.model, whole.stages[s]
    if any(name not in names or not whole.allowed[s, names[name]] for name in before):
        return False
    if sum(before.values()) != stage.replicas or rules.replicas_sound(stage, list(before.values())):
        return False
    if any(rules.below_minimum(stage, n) for n in before.values()):
        return False
    minimum = rules.min_replicas_per_cluster(stage)
    return not serving_ha or all(before.get(name, 0) >= minimum for name in rules.ha_clusters(model, stage))


@dataclass(frozen=True, eq=False)
class _Pairs:
    """Replicas placed, as (stage, cluster, count) triplets in row-major order: the kept stages
    of a fleet without a pass over its (S, C) matrix each time they are read."""

    stage: np.ndarray
    cluster: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, replicas_at: np.ndarray) -> _Pairs:
        stage, cluster = np.nonzero(replicas_at)
        return cls(stage, cluster, replicas_at[stage, cluster])

    def without(self, stages: np.ndarray) -> _Pairs:
        """These pairs but for the stages ``stages`` ((S,) bool) marks."""
        keep = ~stages[self.stage]
        return _Pairs(self.stage[keep], self.cluster[keep], self.count[keep])

    def holding(self, clusters: np.ndarray, n_stages: int) -> np.ndarray:
        """(S,) bool: the stages with replicas on a cluster ``clusters`` ((C,) bool) marks."""
        found = np.zeros(n_stages, dtype=bool)
        found[self.stage[clusters[self.cluster]]] = True
        return found

    def with_placed(self, stages: np.ndarray, clusters: np.ndarray, placed: np.ndarray) -> _Pairs:
        """These pairs and ``placed`` ((len(stages), len(clusters)) replicas), in row-major order."""
        stage, cluster = np.nonzero(placed)
        stage = np.concatenate([self.stage, stages[stage]])
        cluster = np.concatenate([self.cluster, clusters[cluster]])
        count = np.concatenate([self.count, placed[np.nonzero(placed)]])
        order = np.lexsort((cluster, stage))
        return _Pairs(stage[order], cluster[order], count[order])


def _taken(problem: Problem, pairs: _Pairs) -> np.ndarray:
    """(4, C) what ``pairs`` use of each cluster in the program's rows: exclusive GPUs,
    cores, GiB, time-sliced slots (each pair's GPUs on its cluster's type)."""
    per_replica = problem.use_at(pairs.stage, pairs.cluster)
    return taken_per_cluster(pairs.cluster, per_replica, pairs.count.astype(float), len(problem.clusters))


def _overfull(problem: Problem, taken: np.ndarray) -> np.ndarray:
    """(C,) bool: clusters whose usable capacity no longer holds ``taken`` (time-sliced slots in
    whole units of the cluster's time-sliced GPUs, :func:`rules.time_sliced_gpus`)."""
    over: np.ndarray = np.any(free_room(problem.capacity, problem.slots, problem.unit, taken)[:3] < -1e-6, axis=0)
    return over


def _solve_neighbourhood(whole: Problem, base: _Pairs, placeable: np.ndarray, may_stay_out: np.ndarray,
                         budget: Budget) -> tuple[_Pairs, np.ndarray, bool] | None:
    """Place the ``placeable`` stages beside the kept ones (``base``); the whole placement,
    the candidates of the last MILP ((S,) bool) and whether what it leaves out is proven out,
    or None (fall back).

    When the MILP cannot place them all, a neighbourhood that shares its clusters with no kept
    stage (closed: as the full solve would) leaves out what its most valuable placement leaves
    out, proven; one that leaves out only stages ``may_stay_out`` does so, unproven. Otherwise
    the neighbourhood grows: the residents of the best
    clusters of each stage left out may move (:data:`GROWTH`), then the residents of every
    cluster the neighbourhood's stages may use, round after round (a chain of moves), until
    it holds more than :data:`NEIGHBOURHOOD_PAIRS` pairs or grows no more."""
    movable = placeable.copy()
    shape = whole.allowed.shape
    if not movable.any():
        return base, movable, True
    levels = list(GROWTH)
    while True:
        stages = np.flatnonzero(movable)
        clusters = np.flatnonzero(whole.allowed[stages].any(axis=0))
        inside = np.zeros(shape[1], dtype=bool)
        inside[clusters] = True
        fixed = base.without(movable)
        sub = whole.restrict(stages, clusters)
        taken = _taken(whole, fixed)[:, clusters]
        allowed = sub.allowed & _fits(sub, taken)
        if allowed.sum() > NEIGHBOURHOOD_PAIRS:
            return None
        program, result = solve_neighbourhood(sub, allowed, taken, budget, HighsDirect(NODES))
        if result.values is not None:
            return fixed.with_placed(stages, clusters, replicas_of(program, result.values)), movable, True
        most = most_valuable(program, budget, HighsDirect(NODES)) if result.infeasible else result
        if most.values is None:
            return None  # out of time or nodes: the full solve decides
        placed = replicas_of(program, most.values)
        left_out = stages[~placed.any(axis=1)]
        closed = not inside[fixed.cluster].any()  # nothing outside could make room: as proven as the full solve
        if closed or may_stay_out[left_out].all():
            return fixed.with_placed(stages, clusters, placed), movable, closed
        wanted = left_out[~may_stay_out[left_out]]
        grown = movable
        while not (grown & ~movable).any():
            if not levels:  # the residents of every cluster the neighbourhood may use
                grown = movable | base.holding(inside, shape[0])
                if not (grown & ~movable).any():
                    return None  # nothing more can move: the full solve decides
            else:
                grown = movable | _residents(whole, base, wanted, levels.pop(0))
        movable = grown


def _fits(problem: Problem, taken: np.ndarray) -> np.ndarray:
    """(S, C) bool: whether the least a stage may place on a cluster (a gang's replicas, a
    Deployment's per-cluster minimum) fits in the room ``taken`` (4, C) leaves there. Kept
    stages do not move in the neighbourhood, so a pair that fails this can carry no replica:
    leaving it out of the MILP loses nothing (time-sliced GPUs, which come in whole units
    shared with other stages, are left to the MILP)."""
    free = free_room(problem.capacity, problem.slots, problem.unit, taken)
    least = np.where(problem.gang, problem.replicas, problem.minimum)[:, None]
    gpus = problem.type_gpus[:, problem.cluster_type]
    fits: np.ndarray = ((problem.shared[:, None] | (least * gpus <= free[0] + 1e-6))
                        & (least * problem.demand[1][:, None] <= free[1] + 1e-6)
                        & (least * problem.demand[2][:, None] <= free[2] + 1e-6))
    return fits


def _residents(whole: Problem, base: _Pairs, stages: np.ndarray, best: int | None) -> np.ndarray:
    """(S,) bool: the kept stages on the ``best`` best-scoring clusters (None: all) each of
    ``stages`` may use: the ones that may make room for it."""
    clusters = np.zeros(len(whole.clusters), dtype=bool)
    for s in stages.tolist():
        allowed = np.flatnonzero(whole.allowed[s])
        order = np.lexsort((allowed, -whole.total_at(np.full(len(allowed), s), allowed)))
        clusters[allowed[order[:best]]] = True
    return base.holding(clusters, len(whole.stages))


def lagrangian_bound(problem: Problem, replicas_at: np.ndarray, steps: int = BOUND_STEPS) -> float:
    """An upper bound on the objective (score, no move-cost terms) of every placement of
    ``problem``, and on its LP relaxation: for prices ``lam >= 0`` on each cluster's GPUs, cores
    and GiB,

        sum_c lam_c . capacity_c + sum_s max(0, max_c (value_s (1 + total_sc) - replicas_s lam_c . demand_sc))

    over the pairs the filters allow, time-sliced replicas' GPUs at ``1 / slots`` of a GPU
    (``docs/optimizer.md`` derives it). Each cluster is priced on one resource, the one
    ``replicas_at`` fills most there (GPUs on a tie). The prices start at 0 and rise, ``steps``
    times, to the least that keep each stage of ``replicas_at`` where it is: a cluster a stage
    would gain more on than where it runs is priced until it gains no more there, one a stage
    left out could use until it gains nothing there (a price raised makes the stages on that
    cluster look elsewhere, hence the rounds); then, ``steps`` times, each price moves halfway to
    where the bound is least with the others held (:func:`_least_prices`). The least bound met
    on the way is kept.

    Stages alike in every number the bound reads (:func:`_kinds`) have the same terms, so it is
    computed over (K, C) arrays of kinds, each counted times its stages: at 1,000 x 20,000 the
    generated fleet's 216 kinds, not 20,000 rows."""
    return _bound(problem, _Pairs.of(replicas_at), steps)


def _bound(problem: Problem, placement: _Pairs, steps: int) -> float:
    """:func:`lagrangian_bound` at the prices of ``placement``."""
    allowed = problem.allowed & ~problem.blocked[:, None]
    if not allowed.any():
        return 0.0
    kind, first, size = _kinds(problem, allowed)
    n_clusters = len(problem.clusters)
    everywhere = np.arange(n_clusters)
    value = np.where(allowed[first], problem.values[first, None] * (1.0 + _scores(problem, first)), -np.inf)
    gpus = (problem.type_gpus[first][:, problem.cluster_type]
            * np.where(problem.shared[first, None], 1.0 / problem.slots, 1.0))
    replicas = problem.replicas[first]
    stage, cluster, placed = placement.stage, placement.cluster, placement.count
    used = np.stack([np.bincount(cluster, weights=gpus[kind[stage], cluster] * placed, minlength=n_clusters)]
                    + [np.bincount(cluster, weights=problem.demand[r, stage] * placed, minlength=n_clusters)
                       for r in (1, 2)])
    binding = np.argmax(used / np.maximum(problem.capacity, 1e-9), axis=0)
    capacity = problem.capacity[binding, everywhere]
    takes = np.where(binding == 0, gpus, np.where(binding == 1, problem.demand[1, first][:, None],
                                                  problem.demand[2, first][:, None])) * replicas[:, None]
    bids = allowed[first] & (takes > 0)  # the pairs a price can keep a stage off
    per_unit = np.where(bids, takes, 1.0)

    def at(prices: np.ndarray) -> tuple[float, np.ndarray]:
        reduced = value - prices * takes
        return float(prices @ capacity + size @ np.maximum(reduced.max(axis=1), 0.0)), reduced

    prices = np.zeros(n_clusters)
    bound, best = np.inf, prices
    for _ in range(steps + 1):
        now, reduced = at(prices)
        if now < bound:
            bound, best = now, prices
        # What each stage gains where it runs (0: left out), the least of each kind: where one of
        # its stages runs, the price already keeps it (it gains no more there than where it runs).
        here = np.zeros(len(kind))
        np.maximum.at(here, stage, reduced[kind[stage], cluster])
        least = np.full(len(first), np.inf)
        np.minimum.at(least, kind, here)
        raised = np.where(bids, (value - least[:, None]) / per_unit, 0.0).max(axis=0)
        if np.all(raised <= prices + 1e-12):
            break
        prices = np.maximum(prices, raised)
    prices = best
    for _ in range(steps):
        _, reduced = at(prices)
        prices = 0.5 * (prices + _least_prices(reduced, value, takes, size, capacity))
        now, _ = at(prices)
        if now >= bound:
            break
        bound = now
    return bound


def _kinds(problem: Problem, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stages alike in every number :func:`lagrangian_bound` reads (value, replicas, time-slicing,
    GPUs per GPU type, cores and GiB per replica, the clusters allowed and their scores): each
    stage's kind, each kind's first stage and its size, kinds numbered by their first stage.
    Scores are compared on every cluster, allowed or not (stages with the same scores where
    allowed but not elsewhere are two kinds: a finer split, the same bound)."""
    features = np.column_stack([problem.values, problem.replicas, problem.shared, problem.demand[1],
                                problem.demand[2], problem.type_gpus])
    numbers: dict[bytes, int] = {}
    kind = np.empty(len(features), dtype=np.int64)
    whole = problem.total.shape == allowed.shape  # the fleet's own numbering: its score rows as they are
    for start in range(0, len(kind), 1024):  # a block of scores at a time: no copy of them all
        block = np.arange(start, min(start + 1024, len(kind)))
        rows = problem.total[start: start + 1024] if whole else _scores(problem, block)
        for s, row in zip(block.tolist(), rows, strict=True):
            kind[s] = numbers.setdefault(features[s].tobytes() + allowed[s].tobytes() + row.tobytes(), len(numbers))
    first = np.full(len(numbers), len(kind))
    np.minimum.at(first, kind, np.arange(len(kind)))
    return kind, first, np.bincount(kind, minlength=len(numbers)).astype(float)


def _scores(problem: Problem, stages: np.ndarray) -> np.ndarray:
    """(len(stages), C) the scores of ``stages`` on every cluster of ``problem``."""
    total: np.ndarray = problem.total[np.ix_(problem.part.stages[stages], problem.part.clusters)]
    return total


def _least_prices(reduced: np.ndarray, value: np.ndarray, takes: np.ndarray, size: np.ndarray,
                  capacity: np.ndarray) -> np.ndarray:
    """Per cluster, the price at which the bound is least with every other cluster's price held
    (``reduced`` (K, C) the pairs' values less their prices, per kind of ``size`` stages): its
    slope in the price is the capacity less what the stages that would take the cluster at that
    price take of it, so the price is where, taking the stages in order of the most they would
    pay, they first take more than the capacity (0 when they never do)."""
    top = reduced.argmax(axis=1)
    rows = np.arange(len(reduced))
    best = reduced[rows, top]
    kept = reduced[rows, top].copy()
    reduced[rows, top] = -np.inf
    second = reduced.max(axis=1)
    reduced[rows, top] = kept
    other = np.maximum(best, 0.0)[:, None] * np.ones((1, reduced.shape[1]))
    other[rows, top] = np.maximum(second, 0.0)
    row, cluster = np.nonzero((takes > 0) & (value > other))
    pays = (value[row, cluster] - other[row, cluster]) / takes[row, cluster]  # the most it would pay there
    order = np.lexsort((-pays, cluster))
    row, cluster, pays = row[order], cluster[order], pays[order]
    total = np.cumsum(takes[row, cluster] * size[row])
    begin = np.searchsorted(cluster, cluster)  # each bid's cluster's first bid
    before = np.where(begin > 0, total[np.maximum(begin - 1, 0)], 0.0)
    over = np.flatnonzero(total - before > capacity[cluster] + 1e-9)
    first = over[np.r_[True, cluster[over][1:] != cluster[over][:-1]]] if len(over) else over
    prices = np.zeros(len(capacity))
    prices[cluster[first]] = pays[first]
    return prices
