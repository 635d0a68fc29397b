"""The large path's front door (:func:`solve_large`): the LP by column generation or over the
kinds of alike stages (:func:`_alike`, :func:`_solve_by_kinds`), its bound, then the rounding."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from fleetc.placement.colgen import columns as column_generation
from fleetc.placement.colgen.columns import BOUND_GAP, _generate_columns, _lagrangian, _Master, _Relaxed, _start_master
from fleetc.placement.colgen.improve import _improve
from fleetc.placement.colgen.large import _PAIR_CHUNK, TIE_BREAK, _Large, _large, stage_coefficients
from fleetc.placement.colgen.reach import _reach
from fleetc.placement.colgen.repair import _repair
from fleetc.placement.colgen.room import _Rounding
from fleetc.placement.colgen.rounding import _round, _round_by_lp, _whole_units
from fleetc.placement.colgen.shift import _shift
from fleetc.placement.problem import Budget, Problem
from fleetc.placement.program import OutOfTime, Solved
from fleetc.placement.scoring import alike_rows

#: Pairs above which stages that all differ but for cores and memory are placed from the
#: relaxation's LP over their kinds (:func:`_solve_by_kinds`), not by column generation over
#: them: at 500 x 10,000 ``--diverse`` (2.6 million pairs) column generation converges in 5
#: rounds (61 s of CPU) and places every stage; at 1,000 x 20,000 (10.4 million) its master
#: re-solves took 30-89 s of CPU each, where the relaxation's path takes ~37 s in all. Below
#: it, column generation also places more where cores and memory bind (200 x 4,000 at full
#: load: every stage against 3,997 and 3,994 from the relaxation).
KINDS_PAIRS = 5_000_000


#: The LP is solved over alike stages (:func:`_alike`) when they form at most this share of the
#: stages: many fleets repeat the same pipelines (1,000 x 20,000 generated: 216 kinds of stage).
ALIKE_SHARE = 0.5


def solve_large(problem: Problem, budget: Budget) -> Solved:
    """Column generation for the LP (over the kinds of alike stages when there are few,
    :func:`_alike`), fix what it places whole, a small MILP over the rest, then a greedy
    repair; see ``docs/optimizer.md``. ``budget.on_gap`` hears the LP's gap to its bound after
    each round. Where stages all differ but for cores and memory and their LP has more than
    :data:`KINDS_PAIRS` pairs, :func:`_solve_by_kinds` places them from the relaxation instead."""
    large = _large(problem)
    alike = _alike(problem, large)
    if alike is None and len(large.pair_stage) > KINDS_PAIRS:
        kinds = _alike(problem, large, cores_and_memory=False)
        if kinds is not None:
            return _solve_by_kinds(problem, large, kinds, budget)
    if alike is None:
        lp = large
    else:
        type_of, representatives = alike
        lp = _large(problem.restrict(representatives), np.bincount(type_of))
    master = _start_master(lp, whole=alike is not None or bool(problem.caps))
    relaxed = _generate_columns(lp, master, lp.gain + lp.move, budget.deadline, budget.on_gap)
    stage_relaxed = relaxed if alike is None else _spread(large, lp, relaxed, alike[0])
    replicas_at, proven = _round(_Rounding(problem, large, stage_relaxed, budget.deadline))
    objective = problem.score_of(replicas_at)
    left_out = _leaves_out(large, replicas_at)
    bound = _bound(lp, master, relaxed, left_out, budget.deadline)
    if not relaxed.converged:  # its Lagrangian bound may be loose: a relaxation's may be tighter
        bound = min(bound, _least_demand_bound(problem, large, left_out, budget.deadline))
    return Solved(replicas_at, objective, max(bound, objective), "colgen-lp-round", proven)


def _leaves_out(large: _Large, replicas_at: np.ndarray) -> bool:
    """Whether ``replicas_at`` leaves out a stage the LP may place (multiCluster conflicts,
    which have no pairs, do not count)."""
    in_lp = np.diff(large.pair_range) > 0  # not a count of pair_stage: it would copy it as int64
    return bool(np.any(in_lp & ~replicas_at.any(axis=1)))


def _solve_by_kinds(problem: Problem, large: _Large, kinds: tuple[np.ndarray, np.ndarray], budget: Budget
                    ) -> Solved:
    """Place stages that all differ (``bench.generate --diverse``) from the LP of
    :func:`_least_demand_bound`'s relaxation, whose kinds are stages alike but for cores and
    memory, each asking the least of its stages: spread over the stages (:func:`_spread`),
    the stages it places whole where they fit as they are, an LP over the rest and the stages
    of the clusters they overfill (:func:`_round_by_lp`), a greedy repair, relocations and
    swaps of gangs (:func:`_improve`), then :func:`_reach` and :func:`_shift` for what is still
    left out. The bound is that relaxation's.

    Column generation over 20,000 such stages re-solved its master for 30-90 s of CPU a round
    and stopped at its work budget (1,000 x 20,000: ~320 s of CPU in all); the relaxation's LP
    has one row per kind and converges in a few cheap rounds."""
    lp, master, relaxed = _relaxation(problem, large.coefficients, kinds, budget.deadline, budget.on_gap)
    r = _Rounding(problem, large, _spread(large, lp, relaxed, kinds[0]), budget.deadline)
    replicas_at, fixed = _whole_units(r)
    rest = np.flatnonzero(~fixed & ~problem.blocked)
    if len(rest):
        _round_by_lp(r, rest, replicas_at)
    _repair(problem, large, replicas_at)
    _improve(problem, large, replicas_at, budget.deadline)
    proven = _reach(r, replicas_at, problem.blocked) or _shift(r, replicas_at, problem.blocked)
    objective = problem.score_of(replicas_at)
    bound = _bound(lp, master, relaxed, _leaves_out(large, replicas_at), budget.deadline)
    return Solved(replicas_at, objective, max(bound, objective), "colgen-lp-round", proven)


def _least_demand_bound(problem: Problem, large: _Large, left_out: bool, deadline: float | None) -> float:
    """A bound on the LP over stages from a relaxation of it: stages alike but for their
    cores and memory (:func:`_alike` with ``cores_and_memory`` False) are one kind, each kind
    asking the least cores and GiB of its stages; inf when such kinds are not few either.

    Any solution of the LP over stages adds up to one of the relaxation with the same
    objective (a kind's share of a cluster is its stages' shares, each asking at least the
    kind's cores and GiB), so the relaxation's optimum is at least the LP optimum: a valid
    bound, tight where cores and memory do not bind. Its LP has one row per kind, not per
    stage, and column generation converges there in a few cheap rounds, where the LP over
    20,000 stages that all differ (``bench.generate --diverse``) stopped at its work budget
    with its Lagrangian bound 2.6% above its master."""
    kinds = _alike(problem, large, cores_and_memory=False)
    if kinds is None:
        return math.inf
    try:
        lp, master, relaxed = _relaxation(problem, large.coefficients, kinds, deadline)
    except OutOfTime:  # the user's deadline: the bound of the LP over stages stands
        return math.inf
    return _bound(lp, master, relaxed, left_out, deadline)


def relaxation_bound(problem: Problem, left_out: bool, deadline: float | None) -> float:
    """An upper bound on the objective (no move-cost terms) of every placement of ``problem``
    that places every stage (any placement, when ``left_out``): the LP over kinds of alike
    stages (:func:`_alike`), else :func:`_least_demand_bound`'s relaxation, of the problem
    without its previous placement (the churn rule only takes placements away, so this bounds
    those that keep it too); inf when neither has few kinds.

    Built over the kinds only, never over every stage's pairs (:func:`_large` of 1,000 x 20,000
    makes 10.4 million: 1.8 s of CPU, twice the bound's own cost): what the incremental
    recompile reports its gap against (:mod:`fleetc.placement.incremental`)."""
    fresh = replace(problem, kept=np.broadcast_to(np.int32(0), problem.kept.shape))  # no previous: no copy
    own = _own_kinds(fresh)
    kinds = _kinds(fresh, own, cores_and_memory=True) or _kinds(fresh, own, cores_and_memory=False)
    if kinds is None:
        return math.inf
    try:
        lp, master, relaxed = _relaxation(fresh, stage_coefficients(fresh), kinds, deadline)
        return _bound(lp, master, relaxed, left_out, deadline)
    except OutOfTime:  # the user's deadline: the caller's own bound stands
        return math.inf


def _relaxation(problem: Problem, coefficients: np.ndarray, kinds: tuple[np.ndarray, np.ndarray],
                deadline: float | None, on_gap: Callable[[float], None] = lambda gap: None
                ) -> tuple[_Large, _Master, _Relaxed]:
    """The LP of :func:`_least_demand_bound`'s relaxation over ``kinds`` (each stage's kind,
    each kind's first stage; ``coefficients`` every stage's, :func:`stage_coefficients`),
    solved by column generation: its terms, master and solution."""
    type_of, representatives = kinds
    lp = _large(problem.restrict(representatives), np.bincount(type_of))
    least = lp.coefficients.copy()
    for r in (1, 2):  # cores, GiB
        least[r] = np.inf
        np.minimum.at(least[r], type_of, coefficients[r])
    lp = replace(lp, coefficients=least)
    master = _start_master(lp, whole=True)
    return lp, master, _generate_columns(lp, master, lp.gain + lp.move, deadline, on_gap)


def _alike(problem: Problem, large: _Large, cores_and_memory: bool = True
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """Stages alike in every number the LP reads, as kinds: each stage's kind (numbered by
    their first stage) and each kind's first stage; None when the kinds are more than
    :data:`ALIKE_SHARE` of the stages, or their LP has more than
    :data:`~fleetc.placement.colgen.columns.WHOLE_LP_PAIRS` pairs.
    Without ``cores_and_memory``, stages that differ only in cores and memory per replica are
    alike too, and their LP may be larger (:func:`_least_demand_bound` solves it by column
    generation).

    Alike: the same clusters allowed with the same scores, value, replicas, least replicas,
    gang, per-cluster minimum, time-slicing, demand, GPUs per GPU type, failover groups served,
    caps and what a replica counts against them. A stage with multiCluster clusters or a
    previous placement (its own rows) is a kind of its own. The LP over kinds, a kind's row
    and columns counting its stages, has the same optimum as the LP over stages (split a
    kind's share on each cluster among its stages; add its stages' shares back), and every
    pair's reduced cost there is its kind's."""
    own = _own_kinds(problem)
    own[large.pair_stage[(large.move > 0)]] = True
    own[large.pair_stage[large.keep_pair]] = True
    kinds = _kinds(problem, own, cores_and_memory)
    if (kinds is not None and cores_and_memory
            and int(np.diff(large.pair_range)[kinds[1]].sum()) > column_generation.WHOLE_LP_PAIRS):
        return None
    return kinds


def _own_kinds(problem: Problem) -> np.ndarray:
    """(S,) the stages that are a kind of their own whatever their numbers: blocked ones and
    those with multiCluster clusters (their own rows)."""
    own: np.ndarray = problem.blocked | np.array([len(h) > 0 for h in problem.ha], dtype=bool)
    return own


def _kinds(problem: Problem, own: np.ndarray, cores_and_memory: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_alike`'s kinds, the stages ``own`` each a kind of its own; None when they are
    more than :data:`ALIKE_SHARE` of the stages."""
    n_stages = len(problem.stages)
    if n_stages < 2:
        return None
    features = [problem.values, problem.replicas, problem.least, problem.gang, problem.minimum, problem.shared,
                *(problem.demand if cores_and_memory else problem.demand[:1]),
                *problem.type_gpus.T, *(serving for _, serving in problem.failover),
                np.where(own, np.arange(n_stages), -1)]
    if problem.caps:
        features += [*(cap.members for cap in problem.caps), problem.quota_unit, *problem.billed]
    rows = np.empty((n_stages, len(features) + len(problem.clusters)))
    rows[:, : len(features)] = np.stack(features, axis=1)
    for start in range(0, n_stages, 1024):  # the scores a block at a time: no second copy of them all
        block = problem.part.stages[start: start + 1024]
        rows[start: start + len(block), len(features):] = problem.total[np.ix_(block, problem.part.clusters)]
    np.copyto(rows[:, len(features):], -np.inf, where=~(problem.allowed & ~problem.blocked[:, None]))
    type_of, representatives = alike_rows(rows)  # kinds numbered by their first stage
    del rows
    if len(representatives) > ALIKE_SHARE * n_stages:
        return None
    return type_of, representatives


def _spread(large: _Large, lp: _Large, relaxed: _Relaxed, type_of: np.ndarray) -> _Relaxed:
    """The LP solution over kinds of alike stages (``lp``, :func:`_alike`) as one over the
    stages of ``large``: each kind's whole units on a cluster go to whole stages (the kind's
    stages in order, its clusters in order), the fractional rest fills the next stages'
    shares in turn, and the stages after those stay out (the rounding places them). Every
    pair's reduced cost is its kind's pair's."""
    members = np.argsort(type_of, kind="stable")
    member_range = np.searchsorted(type_of[members], np.arange(lp.stages + 1))
    used = relaxed.shares > 1e-9
    pairs, shares = relaxed.pairs[used], relaxed.shares[used]
    by_pair = np.argsort(pairs, kind="stable")  # a kind's pairs together, its clusters in order
    pairs, shares = pairs[by_pair], shares[by_pair]
    stage_of, share_of, kind_pair = [], [], []
    kinds = lp.pair_stage[pairs]
    for k in np.unique(kinds).tolist():
        mine = np.flatnonzero(kinds == k)
        stages = members[member_range[k]: member_range[k + 1]]
        units = shares[mine]
        whole = np.floor(units + 1e-9)
        fraction = np.where(units - whole > 1e-9, units - whole, 0.0)
        # whole units first: stage i of the kind takes the i-th whole unit
        first = np.repeat(mine, whole.astype(np.int64))[: len(stages)]
        n_whole = len(first)
        stage_of.append(stages[:n_whole])
        share_of.append(np.ones(n_whole))
        kind_pair.append(pairs[first])
        # then the fractions, in turn, over the next stages
        start = n_whole + np.concatenate([[0.0], np.cumsum(fraction)[:-1]])
        for i in np.flatnonzero(fraction).tolist():
            low, high = start[i], start[i] + fraction[i]
            for j in range(int(math.floor(low + 1e-12)), int(math.ceil(high - 1e-12))):
                part = min(high, j + 1) - max(low, j)
                if part > 1e-9 and j < len(stages):
                    stage_of.append(stages[j: j + 1])
                    share_of.append(np.array([part]))
                    kind_pair.append(pairs[mine[i]: mine[i] + 1])
    stage = np.concatenate(stage_of) if stage_of else np.zeros(0, dtype=np.int64)
    kind_pairs = np.concatenate(kind_pair) if kind_pair else np.zeros(0, dtype=np.int64)
    stage_pairs = large.pair_range[stage] + (kind_pairs - lp.pair_range[type_of[stage]])
    order = np.argsort(stage_pairs, kind="stable")
    # pair p of stage s is pair p + shift[s] of its kind, a chunk of pairs at a time (~10
    # million pairs at 1,000 x 20,000: three arrays of them at once were 240 MB)
    shift = lp.pair_range[type_of] - large.pair_range[:-1]
    reduced = np.empty(len(large.pair_stage))
    for low in range(0, len(large.pair_stage), _PAIR_CHUNK):
        chunk = large.pair_stage[low: low + _PAIR_CHUNK]  # the chunk's pairs' stages
        reduced[low: low + len(chunk)] = relaxed.reduced[np.arange(low, low + len(chunk)) + shift[chunk]]
    return _Relaxed(relaxed.fixed, stage_pairs[order], np.concatenate(share_of)[order] if share_of else np.zeros(0),
                    relaxed.objective, reduced, relaxed.upper, relaxed.bound_dual, relaxed.converged)


def _bound(large: _Large, master: _Master, relaxed: _Relaxed, left_out: bool, deadline: float | None) -> float:
    """A bound on the LP optimum without move rewards, every stage placed (unless the placement
    leaves one out: then stages may be left out in the LP too, as in the exact path)."""
    if large.move.any() or len(large.keep_pair) or left_out:
        master.fixed_cost = np.zeros(master.fixed)
        master.fixed_cost[: large.stages] = 0.0 if left_out else large.penalty
        if not relaxed.converged:  # no time to solve again: any scaling of the duals bounds it too
            scaled = [relaxed.bound_dual, relaxed.bound_dual * 0.5, np.zeros_like(relaxed.bound_dual)]
            return min(_lagrangian(large, master, dual, large.gain)[0] for dual in scaled) / (1.0 - TIE_BREAK)
        master.lp.change_costs(np.arange(master.fixed), master.fixed_cost)
        master.lp.change_costs(master.fixed + np.arange(len(master.pairs)), -large.gain[master.pairs])
        relaxed = _generate_columns(large, master, large.gain, deadline, stop_gap=BOUND_GAP)
    return relaxed.upper / (1.0 - TIE_BREAK)
