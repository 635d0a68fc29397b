"""Column generation: the restricted master LP (:class:`_Master`), its first pairs, and the
rounds that price every pair against its duals and add the improving ones, with the
Lagrangian bound (:func:`_generate_columns`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fleetc.placement import highs
from fleetc.placement.colgen.large import _Large, _past
from fleetc.placement.program import OutOfTime

#: Candidate clusters per stage in the first restricted master (best gain first).
START_CANDIDATES = 3


#: Demand, in multiples of each cluster's capacity, of the contenders the first master holds for it.
CONTENTION = 2.0


#: Column generation stops when the Lagrangian bound is this close (relative) to the master.
COLUMN_GAP = 1e-4


#: The same for the second column generation that only finds the bound without move rewards
#: (after a previous placement): each round there re-prices most columns and costs ~5 s at
#: 1,000 x 20,000, and a bound 0.1% looser only shows in the reported gap.
BOUND_GAP = 1e-3


#: Column generation stops once its rounds have priced this many pairs in all (then the
#: Lagrangian bound is the bound): a measure of work, not of time, so that the same fleet gets
#: the same placement on every machine. At 1,000 x 20,000 (10.4 million pairs) that is 5
#: rounds, ~30 s here; a fleet of a few hundred thousand pairs converges long before.
COLUMN_WORK = 60_000_000


#: A master of an LP over kinds of alike stages, or of one with team quotas or cost caps,
#: holds every pair from the start when there are at most this many: the LP is then solved
#: whole in one round (the LP of alike stages, :func:`_alike`, usually is). An LP over stages
#: without caps takes column generation whatever its size: ``bench.generate --clusters 100
#: --stages 2000 --load 0.9 --diverse`` (seeds 0-4, 112,000 pairs) took 2.9-5.2 s to place
#: whole and 1.8-4.5 s so (``bench.cliphases``' place phase), every stage placed, the
#: objectives 0.02% apart or closer either way. With caps, column generation placed fewer
#: stages or scored less on 9 of 10 quota fleets (bench/RESULTS.md), so those stay whole.
WHOLE_LP_PAIRS = 300_000


#: A stage's extra columns in a round improve the master at least this share of its best one.
SHORTLIST = 0.5


#: Improving pair columns each stage may add to the master per round (most improving first).
COLUMNS_PER_ROUND = 10


#: Reduced cost below which a column improves the master, relative to the largest gain.
PRICING_TOLERANCE = 1e-7


@dataclass
class _Master:
    """The restricted master LP and which pairs it holds (its columns after the fixed ones)."""

    lp: highs.MasterLP
    pairs: np.ndarray
    holds: np.ndarray  # per pair: in the master
    fixed: int  # columns before the first pair
    fixed_matrix: sp.csc_matrix
    fixed_cost: np.ndarray  # as the master has them now
    fixed_upper: np.ndarray


def _start_master(large: _Large, whole: bool) -> _Master:
    """The first restricted master: every pair when ``whole`` allows it and there are at most
    :data:`WHOLE_LP_PAIRS` (the LP is then solved whole, in one round), else a start
    (:func:`_start_pairs`), the contenders, and the multiCluster, kept and previous pairs."""
    holds = np.zeros(len(large.pair_stage), dtype=bool)
    if whole and len(large.pair_stage) <= WHOLE_LP_PAIRS:
        holds[:] = True
    else:
        holds[_start_pairs(large)] = True
        holds[_contenders(large)] = True
    holds[large.pair_lower > 0] = True
    holds[large.keep_pair] = True
    holds[large.move > 0] = True
    pairs = np.flatnonzero(holds)
    fixed, fixed_upper, fixed_gain = large.fixed_block()
    cost = -fixed_gain
    cost[: large.stages] = large.penalty
    row_lower, row_upper = large.row_bounds()
    block = large.block(pairs)
    lp = highs.MasterLP(
        np.concatenate([cost, -(large.gain[pairs] + large.move[pairs])]),
        np.zeros(fixed.shape[1] + len(pairs)),
        np.concatenate([fixed_upper, large.count[large.pair_stage[pairs]]]),
        sp.hstack([fixed, block], format="csc"),
        row_lower,
        row_upper,
    )
    return _Master(lp, pairs, holds, fixed.shape[1], fixed, cost, fixed_upper)


def _start_pairs(large: _Large) -> np.ndarray:
    """Each stage's :data:`START_CANDIDATES` best pairs by gain, and the pairs of a rough
    fractional placement, so that the first master places every stage the fleet has room for
    and its duals price capacity from the start (a master that leaves stages out prices with
    the unplaced penalty instead, and its duals swing for many rounds).

    The most constrained stage first (the least room, in stage units, on the clusters it may
    use), each fills its best clusters by gain with the share of it that still fits each one
    (a gang may be split: this is the LP's start, not a placement), counting shared slots as
    fractions of a GPU (as many slots to a GPU as the most of any cluster: a start, not a
    count). A stage that does not fit whole brings every pair it has: the first master then
    has what it needs to place all it can.
    """
    slots = large.slots.max(initial=1.0)
    demand = np.stack([large.coefficients[0] + large.coefficients[3] / slots, *large.coefficients[1:3]])
    free = large.capacity.copy()
    starts = large.pair_range
    room = np.bincount(large.pair_stage, weights=large.capacity[0, large.pair_cluster], minlength=large.stages)
    room = np.where(demand[0] > 0, room / np.maximum(demand[0], 1e-9), np.inf)
    best = large.best_gain
    chosen = []
    for s in np.lexsort((np.arange(large.stages), -best, room)).tolist():
        pairs = np.arange(starts[s], starts[s + 1])
        if not len(pairs):
            continue
        pairs = pairs[np.argsort(-large.gain[pairs], kind="stable")]
        chosen.append(pairs[:START_CANDIDATES])
        chosen.append(_fill(pairs, large.pair_cluster[pairs], demand[:, s], free))
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def _fill(pairs: np.ndarray, clusters: np.ndarray, need: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Put one stage unit on ``clusters`` in order, the share that fits each, taking it from
    ``free`` (in place); the pairs used, or all of them when the unit does not fit whole."""
    positive = need > 0
    fits = np.clip(np.min(free[positive][:, clusters] / need[positive, None], axis=0, initial=np.inf), 0.0, 1.0)
    filled = np.cumsum(fits)
    if filled[-1] < 1.0 - 1e-9:
        free[:, clusters] -= need[:, None] * fits
        return pairs
    last = int(np.searchsorted(filled, 1.0 - 1e-9))
    take = fits[: last + 1]
    take[last] -= filled[last] - 1.0
    used = take > 1e-12
    free[:, clusters[: last + 1][used]] -= need[:, None] * take[used]
    taken: np.ndarray = pairs[: last + 1][used]
    return taken


def _contenders(large: _Large) -> np.ndarray:
    """Per cluster, the stages that lose least by running there rather than on their best
    cluster (per unit of its scarce resource, :func:`_size`), until they ask for
    :data:`CONTENTION` times what it has: the competition for each cluster that its capacity
    dual must price. Without them a cluster the master holds no columns for looks free, every
    stage prices it as its best, and the bound stays loose for many rounds."""
    best = large.best_gain
    size = _size(large, np.arange(len(large.pair_stage)))
    asks = np.flatnonzero(size > 0)  # a stage without GPUs does not contend for a GPU cluster
    loss = (best[large.pair_stage[asks]] - large.gain[asks]) / size[asks]
    order = asks[np.lexsort((loss, large.pair_cluster[asks]))]
    asked, limit = _asked_of_clusters(large, order, size[order])
    contenders: np.ndarray = order[asked - size[order] < limit]
    return contenders


def _asked_of_clusters(large: _Large, pairs: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``pairs`` sorted by cluster, each asking ``size`` of its cluster's scarce resource:
    what the pairs up to and including each one ask of that cluster, and the cluster's limit
    (:data:`CONTENTION` times its scarce capacity)."""
    cluster = large.pair_cluster[pairs]
    asked = np.cumsum(size)
    asked -= np.concatenate([[0.0], asked])[np.searchsorted(cluster, np.arange(large.clusters))][cluster]
    return asked, CONTENTION * _scarce_capacity(large)[cluster]


def _scarce_capacity(large: _Large) -> np.ndarray:
    """(C,) what each cluster has of the resource its contenders are counted in: GPUs, or
    cores on a cluster without GPUs."""
    scarce: np.ndarray = np.where(large.capacity[0] > 0, large.capacity[0], large.capacity[1])
    return scarce


def _size(large: _Large, pairs: np.ndarray) -> np.ndarray:
    """What each pair's stage asks of its cluster's scarce resource: GPUs (shared slots as
    fractions of a GPU), or cores on a cluster without GPUs."""
    stage, cluster = large.pair_stage[pairs], large.pair_cluster[pairs]
    gpus = large.coefficients[0, stage] + large.coefficients[3, stage] / large.slots[cluster]
    size: np.ndarray = np.where(large.capacity[0, cluster] > 0, gpus, large.coefficients[1, stage])
    return size


@dataclass(frozen=True, eq=False)
class _Relaxed:
    """The master's final solution: values of its fixed and pair columns, and its objective."""

    fixed: np.ndarray
    pairs: np.ndarray  # pair indices
    shares: np.ndarray  # their t
    objective: float  # maximised, penalties included
    reduced: np.ndarray  # reduced costs of every pair at the end
    upper: float  # bound on the LP over every pair (maximised, penalties included)
    bound_dual: np.ndarray  # the row duals it was found at
    converged: bool  # within COLUMN_GAP of the bound, not stopped by a budget


def _generate_columns(large: _Large, master: _Master, objective: np.ndarray, deadline: float | None,
                      on_gap: Callable[[float], None] = lambda gap: None, stop_gap: float = COLUMN_GAP
                      ) -> _Relaxed:
    """Solve the master, add the most improving pair columns (:func:`_new_columns`), repeat until
    no pair column improves it (then the master's optimum is the LP optimum over all pairs), or
    until the best Lagrangian bound so far is within ``stop_gap`` of it, or its rounds have
    priced :data:`COLUMN_WORK` pairs, or the user's deadline runs out."""
    tolerance = PRICING_TOLERANCE * max(1.0, float(objective.max(initial=1.0)))
    last: _Relaxed | None = None
    rounds = 0
    while True:
        solution = master.lp.solve(deadline)
        if solution.values is None:  # out of time mid-solve: the last round's answer stands
            if last is None:
                raise OutOfTime
            return last
        assert solution.row_dual is not None  # the master's solve always returns its duals
        value = -solution.objective
        upper, reduced = _lagrangian(large, master, solution.row_dual, objective)
        pricing = np.where(master.holds, 0.0, reduced)
        improving = pricing < -tolerance
        values = solution.values
        if last is None or upper < last.upper:
            bound, bound_dual = upper, solution.row_dual
        else:
            bound, bound_dual = last.upper, last.bound_dual
        converged = not improving.any() or bound - value <= stop_gap * abs(bound)
        last = _Relaxed(values[: master.fixed], master.pairs, values[master.fixed:], value, reduced, bound,
                        bound_dual, converged)
        on_gap(max(0.0, 1.0 - value / bound) if bound > 0 else 0.0)
        rounds += 1
        if converged or (rounds + 1) * len(large.pair_stage) > COLUMN_WORK or _past(deadline):
            return last
        new = _new_columns(large, pricing, improving)
        master.lp.add_columns(-objective[new], np.zeros(len(new)), large.count[large.pair_stage[new]],
                                large.block(new))
        master.holds[new] = True
        master.pairs = np.concatenate([master.pairs, new])


def _new_columns(large: _Large, pricing: np.ndarray, improving: np.ndarray) -> np.ndarray:
    """The pair columns to add to the master this round (sorted).

    Each improving stage brings its best column, and up to :data:`COLUMNS_PER_ROUND` more among
    those that improve at least :data:`SHORTLIST` times as much; but a cluster takes these extra
    columns only up to :data:`CONTENTION` times its capacity (best per unit of demand first):
    many stages price the same few clusters best, and columns beyond what a cluster can hold
    only make the master slower.
    """
    best = np.full(large.stages, np.inf)
    starts, stages = large.segments
    best[stages] = np.minimum.reduceat(pricing, starts)
    shortlist = np.flatnonzero(improving & (pricing <= SHORTLIST * best[large.pair_stage]))
    order = shortlist[np.lexsort((pricing[shortlist], large.pair_stage[shortlist]))]
    first = np.flatnonzero(np.diff(large.pair_stage[order], prepend=-1))
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.append(first, len(order))))
    head, extra = order[rank == 0], order[(rank > 0) & (rank < COLUMNS_PER_ROUND)]
    size = _size(large, extra)
    by_cluster = np.lexsort((pricing[extra] / np.maximum(size, 1e-9), large.pair_cluster[extra]))
    extra, size = extra[by_cluster], size[by_cluster]
    asked, limit = _asked_of_clusters(large, extra, size)
    return np.sort(np.concatenate([head, extra[asked <= limit]]))


def _lagrangian(large: _Large, master: _Master, row_dual: np.ndarray, objective: np.ndarray
                ) -> tuple[float, np.ndarray]:
    """The Lagrangian bound at the capacity part of ``row_dual`` (relax the capacity and kept
    rows, keep each stage's ``sum t + unplaced = 1`` and its multiCluster floors), and every
    pair's reduced cost at ``row_dual``.

    The bound holds for the master's LP over every pair whatever the duals, and equals the
    master's optimum at its own duals once no column improves it.
    """
    s, relaxed = large.stages, large.relaxed_rows
    mu = np.minimum(row_dual[s:relaxed], 0.0)  # <= rows of a minimisation
    cost = large.reduced_costs(np.concatenate([np.zeros(s), mu]), objective)  # cost - mu . column
    reduced = cost - row_dual[large.pair_stage]
    reduced[large.floored] -= row_dual[relaxed:]
    if len(large.keep_pair):
        cost[large.keep_pair] += mu[large.headroom_rows - s - len(large.keep_pair): large.headroom_rows - s]
    starts, stages = large.segments
    best = np.minimum.reduceat(cost, starts)
    floor, floor_stage = large.floored, large.pair_stage[large.floored]
    lower = np.bincount(floor_stage, weights=large.pair_lower[floor], minlength=s)[stages]
    lower_cost = np.bincount(floor_stage, weights=large.pair_lower[floor] * cost[floor], minlength=s)[stages]
    # Per stage: placed (its multiCluster floors, the rest on its cheapest pair) or left out.
    stage_cost = np.minimum(lower_cost + (1.0 - lower) * best, master.fixed_cost[stages])
    others = master.fixed_cost[s:] - master.fixed_matrix[s:relaxed, s:].T @ mu
    _, row_upper = large.row_bounds()
    lagrangian = mu @ row_upper[s:relaxed] + float(stage_cost @ large.count[stages])
    return -(lagrangian + float(np.minimum(others, 0.0) @ master.fixed_upper[s:])), reduced
