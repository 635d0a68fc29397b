"""Rounding the LP (:func:`_round`): the stages it places in whole units keep that, a MILP over
the rest on their LP clusters and a few alternatives, then the repair and the neighbourhoods."""

from __future__ import annotations

import numpy as np

from fleetc.placement.colgen.columns import _Relaxed
from fleetc.placement.colgen.large import _Large
from fleetc.placement.colgen.reach import _reach
from fleetc.placement.colgen.repair import _repair
from fleetc.placement.colgen.room import _fixed_need, _free, _room, _Rounding, _take_plan, _taken
from fleetc.placement.colgen.shift import _shift
from fleetc.placement.highs import OptionValue
from fleetc.placement.problem import Budget
from fleetc.placement.program import build_program, replicas_of, solve_program

#: Branch-and-bound nodes each rounding MILP may explore: a count, not seconds, so that every
#: machine rounds the same way (the ones measured, up to 400 x 8,000, closed at the root node).
ROUNDING_NODES = 1_000


#: HiGHS options of each rounding MILP: it stops within a relative 5e-4 of optimal (other
#: MILPs 1e-4), without the root reduced-cost heuristic (a sub-MIP over the columns the root
#: LP's reduced costs leave free).
#:
#: The heuristic took a quarter of their time on the quota fleets (``bench.generate --clusters
#: 100 --stages 2000 --load 0.9 --platform --quotas 0.9 --budget 0.9``, seeds 0-9: 27.0 s of
#: rounding with it, 20.5 s without, in the compiles); the placements moved within each MILP's
#: 1e-4 gap (seed 0's objective rose by 0.006, seed 6's fell by 0.054 of 1888; placement
#: version 19).
#:
#: The gap: the second MILP of those fleets' seeds 4, 6 and 8 found its placement within
#: 0.02% of its bound and then spent as long again proving the last hundredth of a percent
#: (cut rounds, a restart, tens of nodes); with 5e-4 their rounding took 2.7, 4.2 and 2.0 s of
#: CPU against 5.0, 6.7 and 4.0 s (seeds 0-9: 19.1 s against 26.8 s), and every quota, plain,
#: sovereign, HA and ``--diverse`` fleet of those seeds placed byte for byte the same (placement
#: version 20, bench/RESULTS.md). What the rounding leaves short of the LP bound is 0.2-0.5%,
#: not the MILP's proof.
#:
#: HiGHS 1.10 and older have no such heuristic (1.11 has): they refuse the option, which
#: :func:`fleetc.placement.highs._new` does not read, and run it.
ROUNDING_OPTIONS: dict[str, OptionValue] = {"mip_rel_gap": 5e-4, "mip_heuristic_run_root_reduced_cost": False}


#: How close to an integer an LP share must be to count as placed in whole units.
_WHOLE = 1e-6


#: Extra clusters per left-over stage in the rounding MILP, by the LP's reduced cost.
ALTERNATIVES = 3


#: Candidate pairs above which the rounding MILP grows no further.
ROUNDING_PAIRS = 50_000


def _round(r: _Rounding) -> tuple[np.ndarray, bool]:
    """(S, C) replicas of the part: the stages the LP places in whole units as it places them
    (:func:`_whole_units`), a MILP over the rest on their LP clusters plus a few alternatives,
    a greedy repair, and exact MILPs around what is still left out (:func:`_reach`, then
    :func:`_shift`); and whether what it leaves out is proven not to fit."""
    replicas_at, fixed = _whole_units(r)
    rest = np.flatnonzero(~fixed & ~r.problem.blocked)
    if len(rest):
        _round_rest(r, rest, replicas_at)
    _repair(r.problem, r.large, replicas_at)
    return replicas_at, _reach(r, replicas_at, r.problem.blocked) or _shift(r, replicas_at, r.problem.blocked)


def _whole_units(r: _Rounding) -> tuple[np.ndarray, np.ndarray]:
    """(S, C) replicas of the stages the LP places in whole units, as it places them, but for
    the stages of clusters they would overfill; and (S,) which stages those are."""
    large, relaxed, problem = r.large, r.relaxed, r.problem
    replicas = problem.replicas.astype(int)
    gang = problem.gang
    minimum = problem.minimum.astype(int)
    stage, cluster = large.pair_stage[relaxed.pairs], large.pair_cluster[relaxed.pairs]
    units = relaxed.shares * np.where(gang[stage], 1, replicas[stage])
    whole = np.rint(units)
    ok = (np.abs(units - whole) <= _WHOLE) & ((whole == 0) | gang[stage] | (whole >= minimum[stage]))
    placed = (whole * np.where(gang[stage], replicas[stage], 1)).astype(np.int32)
    per_stage = np.bincount(stage, weights=placed, minlength=large.stages)
    broken = np.bincount(stage, weights=~ok, minlength=large.stages) > 0
    fixed = ~broken & (per_stage == replicas) & ~problem.blocked
    replicas_at = np.zeros((large.stages, large.clusters), dtype=np.int32)
    keep = fixed[stage] & (placed > 0)
    replicas_at[stage[keep], cluster[keep]] = placed[keep]
    # The LP gives shared slots fractional time-sliced units (and a relaxation's, the least
    # cores and memory of a kind): a cluster whose whole stages need more than it has gives
    # them all back to the rounding.
    fixed &= ~_give_back_overfull(large, replicas_at, fixed)
    return replicas_at, fixed


def _give_back_overfull(large: _Large, replicas_at: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Take the stages of ``among`` (S,) off every cluster that ``replicas_at`` overfills (in
    place); (S,) which those are."""
    overfull = (_free(large, _taken(large, replicas_at))[:3] < -1e-6).any(axis=0)
    returned: np.ndarray = among & replicas_at[:, overfull].any(axis=1)
    replicas_at[returned] = 0
    return returned


def _round_by_lp(r: _Rounding, rest: np.ndarray, replicas_at: np.ndarray) -> None:
    """Place the ``rest`` stages in the capacity the others leave (in place) as the LP over
    their candidate pairs (:func:`_candidates`) places them whole, where they fit as the
    repair counts room (the LP counts time-sliced GPUs in fractions); the others stay out (for
    the repair). An LP, not the MILP of :func:`_round_rest`: over the 2,251 stages a
    relaxation's rounding left at 1,000 x 20,000 ``--diverse`` that MILP took 41 s of CPU and
    left 1,589 out; the LP takes 2.4 s and its solution is whole for most of them."""
    large, problem = r.large, r.problem
    replicas_at[rest] = 0
    taken = _taken(large, replicas_at)
    candidates, columns = _candidates(large, r.relaxed, rest, _free(large, taken))
    columns = np.union1d(columns, large.headroom.members)
    program = build_program(problem.restrict(rest, columns), allowed=candidates[:, columns],
                            taken=taken[:, columns], fixed_need=_fixed_need(r, replicas_at),
                            cap_taken=large.caps.used(replicas_at))
    result = solve_program(program, Budget(r.deadline), require_all=False, integral=False)
    if result.values is None:
        return
    stage = program.unit_stage
    gang = problem.gang[rest]
    units = result.values[: len(stage)] * np.where(gang[stage], 1, program.unit_replicas)  # a gang: x, 0 or 1
    whole = np.rint(units)
    minimum = problem.minimum[rest]
    ok = (np.abs(units - whole) <= _WHOLE) & ((whole == 0) | gang[stage] | (whole >= minimum[stage]))
    after = np.zeros((len(rest), large.clusters), dtype=replicas_at.dtype)
    placed = whole * np.where(gang[stage], program.unit_replicas, 1)
    np.add.at(after, (stage, columns[program.unit_cluster]), placed.astype(replicas_at.dtype))
    broken = np.bincount(stage, weights=~ok, minlength=len(rest)) > 0
    good = ~broken & (after.sum(axis=1) == problem.replicas[rest])
    room = _room(large, replicas_at)
    for i in np.flatnonzero(good).tolist():  # as the repair counts room: whole time-sliced units
        s = int(rest[i])
        plan = {int(c): int(after[i, c]) for c in np.flatnonzero(after[i])}
        if all(after[i, c] >= minimum[i] for c in problem.ha[s]) and _take_plan(room, s, plan):
            replicas_at[s] = after[i]


def _round_rest(r: _Rounding, rest: np.ndarray, replicas_at: np.ndarray) -> None:
    """Place the ``rest`` stages in the capacity the fixed ones leave (in place): a MILP that
    places what fits of them; then, for the stages it leaves out, a second one over them and the
    stages on the clusters the LP put them on (whose capacity was what was missing), kept when
    it places at least the value they had.
    """
    left = _place_what_fits(r, rest, replicas_at)
    if len(left):
        large, relaxed = r.large, r.relaxed
        support = relaxed.pairs[(relaxed.shares > 1e-9) & np.isin(large.pair_stage[relaxed.pairs], left)]
        around = np.flatnonzero(replicas_at[:, np.unique(large.pair_cluster[support])].any(axis=1))
        _place_what_fits(r, np.union1d(left, around), replicas_at)


def _place_what_fits(r: _Rounding, stages: np.ndarray, replicas_at: np.ndarray) -> np.ndarray:
    """Re-place ``stages`` (in place) by a MILP over their candidate pairs in the capacity the
    others leave (within :data:`ROUNDING_NODES` nodes), if it finds at least the value they
    have now; the stages left out after."""
    large = r.large
    before = replicas_at[stages].copy()
    replicas_at[stages] = 0
    taken = _taken(large, replicas_at)
    candidates, columns = _candidates(large, r.relaxed, stages, _free(large, taken))
    columns = np.union1d(columns, large.headroom.members)
    if candidates.sum() <= ROUNDING_PAIRS:
        program = build_program(r.problem.restrict(stages, columns), allowed=candidates[:, columns],
                                taken=taken[:, columns], fixed_need=_fixed_need(r, replicas_at),
                                cap_taken=large.caps.used(replicas_at))
        result = solve_program(program, Budget(r.deadline), require_all=False, integral=True,
                               nodes=ROUNDING_NODES, options=ROUNDING_OPTIONS)
        if result.values is not None:
            after = np.zeros_like(before)
            after[:, columns] = replicas_of(program, result.values)
            if r.problem.score_of(after, stages) >= r.problem.score_of(before, stages) - 1e-9:
                before = after
    replicas_at[stages] = before
    left_out: np.ndarray = stages[~before.any(axis=1)]
    return left_out


def _candidates(large: _Large, relaxed: _Relaxed, rest: np.ndarray, free: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(len(rest), C) candidate pairs of the ``rest`` stages: their LP support, multiCluster and
    kept clusters, the :data:`ALTERNATIVES` best by reduced cost and as many by gain among the
    clusters with ``free`` (4, C) room for the whole stage; and the clusters used."""
    position = np.full(large.stages, -1)
    position[rest] = np.arange(len(rest))
    candidates = np.zeros((len(rest), large.clusters), dtype=bool)
    support = relaxed.pairs[(relaxed.shares > 1e-9) & (position[large.pair_stage[relaxed.pairs]] >= 0)]
    starts = large.pair_range
    alternatives = [_smallest(relaxed.reduced, starts[s], starts[s + 1], ALTERNATIVES) for s in rest.tolist()]
    alternatives += [_roomy(large, s, free, ALTERNATIVES) for s in rest.tolist()]
    floor, kept = large.floored, large.keep_pair
    wanted = np.concatenate([
        support,
        *alternatives,
        floor[position[large.pair_stage[floor]] >= 0],
        kept[position[large.pair_stage[kept]] >= 0],
    ]).astype(np.int64)
    candidates[position[large.pair_stage[wanted]], large.pair_cluster[wanted]] = True
    return candidates, np.flatnonzero(candidates.any(axis=0))


def _roomy(large: _Large, s: int, free: np.ndarray, k: int) -> np.ndarray:
    """Stage ``s``'s ``k`` best pairs by gain on clusters with ``free`` room for all of it."""
    pairs = np.arange(large.pair_range[s], large.pair_range[s + 1])
    need = large.coefficients[:, s]
    roomy = pairs[np.all(free[:, large.pair_cluster[pairs]] >= need[:, None] - 1e-9, axis=0)]
    return roomy[np.argsort(-large.gain[roomy], kind="stable")[:k]]


def _smallest(values: np.ndarray, start: int, stop: int, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest of ``values[start:stop]`` (all when there are fewer)."""
    if stop - start <= k:
        return np.arange(start, stop)
    return start + np.argpartition(values[start:stop], k)[:k]
