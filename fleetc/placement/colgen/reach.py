"""The neighbourhood MILP of the large path (:func:`_reach`): the stages the repair left out,
and the stages on the clusters they may use, placed exactly together."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from fleetc.placement.colgen.large import _past
from fleetc.placement.colgen.room import _fixed_need, _free, _Rounding, _taken
from fleetc.placement.problem import Budget
from fleetc.placement.program import (
    HighsDirect,
    Program,
    ProgramSolver,
    Result,
    column_stages,
    most_valuable,
    replicas_of,
    solve_neighbourhood,
    solve_program,
    values_of,
)

#: Pairs above which a neighbourhood of :func:`_reach` grows no further.
REACH_PAIRS = 60_000


#: Pairs the neighbourhoods :func:`_reach` tries may hold in all: a measure of work, not of
#: time, so that every machine tries the same neighbourhoods and places the same stages.
REACH_WORK = 2 * REACH_PAIRS


#: Branch-and-bound nodes one neighbourhood MILP may explore (a count, like the rest of the
#: budget; the ones measured closed at the root node, in 1-13 s here).
REACH_NODES = 1_000


#: Pairs above which :func:`_place_most` keeps the repair's placement of a closed neighbourhood
#: instead of solving its most-valuable MILP. A count, not seconds: every machine places the
#: same. Node limits do not bound that MILP, whose work is at its root (cuts, sub-MIPs): with
#: team quotas and cost caps over the whole fleet (``bench.generate --clusters 50 --stages
#: 1000 --load 0.9 --platform --quotas 0.9 --budget 0.9``, seeds 0-4) the neighbourhood is the
#: fleet, 26,000-29,000 pairs, and its MILP took 11-34 s of CPU (the compile 16-41 s; without
#: it 4.8-5.7 s, the plain fleets 2.7-3.5 s) to raise the objective by 0-0.22% and place at
#: most one more stage; the strong greedy places 557-600 of those 1,000 stages where the repair
#: places 827-841. Below it, the sovereign fleets of 100 x 2,000 (seeds 0-4: 800-14,700 pairs,
#: 0.01-3.6 s each) keep theirs, which placed up to 6 more stages.
MOST_VALUABLE_PAIRS = 20_000


def _reach(r: _Rounding, replicas_at: np.ndarray, is_blocked: np.ndarray) -> bool:
    """Place the stages the repair left out (in place) by an exact MILP over a neighbourhood:
    them and every stage on a cluster they may use, each free to go to any cluster it may use,
    in the capacity the other stages leave, every one of them placed. When that is impossible
    the neighbourhood grows by the stages on the clusters its stages may use, up to
    :data:`REACH_PAIRS` pairs, while the neighbourhoods tried hold :data:`REACH_WORK` pairs in
    all (each MILP within :data:`REACH_NODES` nodes; the user's deadline a safety net). When
    that growth is over :data:`REACH_PAIRS`, the neighbourhood grows first by the stages on the
    clusters its stages may use that have GPUs free (:func:`_grown`).

    The repair moves one or two stages out of the way; a full fleet can need a chain of moves
    across many clusters, which the MILP finds as a whole. Whether the stages left out are
    proven unplaceable: True when a neighbourhood that shares no cluster with any other stage
    (so nothing outside it could make room) cannot place them all.
    """
    members = ~replicas_at.any(axis=1) & ~is_blocked
    if not members.any():
        return True
    large = r.large
    allowed = np.zeros((large.stages, large.clusters), dtype=bool)
    allowed[large.pair_stage, large.pair_cluster] = True
    work = 0
    tried = np.zeros_like(members)  # the last neighbourhood solved: a growth must add to it
    while True:
        grown = _grown(r, members, allowed, replicas_at)
        stages = np.flatnonzero(grown)
        pairs = int(allowed[stages].sum())
        work += pairs
        if pairs > REACH_PAIRS or work > REACH_WORK or _past(r.deadline) or not (grown & ~tried).any():
            return False
        tried = grown
        columns = np.union1d(np.flatnonzero(allowed[stages].any(axis=0)), large.headroom.members)
        before = replicas_at[stages].copy()
        replicas_at[stages] = 0
        program, result = solve_neighbourhood(
            r.problem.restrict(stages, columns), allowed[np.ix_(stages, columns)],
            _taken(large, replicas_at)[:, columns], Budget(r.deadline),
            _CountingFirst(HighsDirect(REACH_NODES, relaxation_first=True)),  # most of them prove no placement
            fixed_need=_fixed_need(r, replicas_at), cap_taken=large.caps.used(replicas_at))
        if result.values is not None:
            replicas_at[np.ix_(stages, columns)] = replicas_of(program, result.values)
            return True
        replicas_at[stages] = before
        closed = not np.any(replicas_at[:, columns], axis=1)[~grown].any()  # np.any: an array to mypy too
        if closed and result.infeasible and pairs <= MOST_VALUABLE_PAIRS:
            _place_most(r, program, stages, columns, replicas_at)
        if not result.infeasible or closed:
            return result.infeasible and closed
        members = grown


def _grown(r: _Rounding, members: np.ndarray, allowed: np.ndarray, replicas_at: np.ndarray) -> np.ndarray:
    """:func:`_reach`'s next neighbourhood around ``members``: them and the stages on every
    cluster they may use; when that is over :data:`REACH_PAIRS` pairs, them and the stages on
    those of these clusters with GPUs (or time-sliced slots) free, whose stages hold that room
    behind their cores or memory, and could make it usable by moving.

    On a full fleet the room a stage left out needs can be there, scattered over a few clusters
    and stranded: ``bench.generate`` 100 x 2,000 at load 1.0, nodes of 6, 8 and 8 GPUs, seed 3,
    left a 4-GPU h100 gang out with 4 GPUs free (2 on c0001-h100, 1 on c0020-h100, 1 on
    c0014-a100, whose cores were all taken). The first neighbourhood (the gang and the 213
    stages on h100 clusters, 9,612 pairs) could not place it, and the whole next ring was the
    whole fleet (104,594 pairs); adding the 19 stages of c0014-a100 (11,385 pairs) places all
    2,000, the verifier accepting it."""
    reachable = allowed[members].any(axis=0)
    grown: np.ndarray = members | replicas_at[:, reachable].any(axis=1)
    if int(allowed[grown].sum()) <= REACH_PAIRS:
        return grown
    free = _free(r.large, _taken(r.large, replicas_at))
    roomy = reachable & ((free[0] > 1e-9) | (free[3] > 1e-9))
    narrow: np.ndarray = members | replicas_at[:, roomy].any(axis=1)
    return narrow


def _place_most(r: _Rounding, program: Program, stages: np.ndarray, columns: np.ndarray,
                replicas_at: np.ndarray) -> None:
    """Re-place ``stages`` (in place), which cannot all be placed, by the most valuable placement
    near where the repair left them (:func:`_most_valuable_near`); kept when it places more
    stages than they have now, or as many scoring more."""
    if _past(r.deadline):
        return
    before = replicas_at[stages]
    result = _most_valuable_near(program, before[:, columns], Budget(r.deadline))
    if result is None or result.values is None:
        return
    after = np.zeros_like(replicas_at[stages])
    after[:, columns] = replicas_of(program, result.values)
    placed = (int(after.any(axis=1).sum()), r.problem.score_of(after, stages))
    if placed > (int(before.any(axis=1).sum()), r.problem.score_of(before, stages)):
        replicas_at[stages] = after


def _most_valuable_near(program: Program, replicas_at: np.ndarray, budget: Budget) -> Result | None:
    """The most valuable placement of ``program`` near ``replicas_at`` (its stages on its
    clusters, where the repair placed them), the exact path's second MILP
    (:func:`~fleetc.placement.program.most_valuable`) over a neighbourhood the LP relaxation
    induces (RINS: Danna, Rothberg and Le Pape, *Exploring relaxation induced neighborhoods to
    improve MIP solutions*, Math. Programming 102, 2005): of each stage the repair places and
    the LP places whole (``z`` 1 in both), every column whose value in the LP's optimum is the
    repair's is fixed to it; the other stages and the time-sliced units are free. The
    repair's point is feasible there, so is every answer's; the MILP stops within half the
    smallest stage value of the neighbourhood's optimum, so no stage it leaves out fits the
    room it leaves (its columns are all free, and placing it would gain more than that).

    On the sovereign fleets of 100 x 2,000 (``bench.generate --load 0.9 --platform
    --sovereignty``, seeds 0-4) the whole MILP of the five largest neighbourhoods (9,329-14,381
    columns) took 0.7-3.7 s of CPU, its work at the root (presolve, cuts, sub-MIPs); with the
    neighbourhood's instead, the place phase took 2.2-3.4 s against 3.0-6.7 s
    (``bench.cliphases``), each objective within 0.03 of the whole MILP's (its gap there is
    0.05), as many stages placed or more (seed 4: 1,709 against 1,703; bench/RESULTS.md).
    None, no MILP solved, where the repair's placement is within that gap of the LP's bound
    already (the MILP could answer with it) or the LP found no optimum (the deadline); the
    whole MILP where the repair's placement is no point of the program."""
    start = values_of(program, replicas_at)
    solve = HighsDirect(REACH_NODES)
    if start is None:
        return most_valuable(program, budget, solve)
    relaxed = solve_program(program, budget, require_all=False, integral=False)
    if not relaxed.optimal or relaxed.values is None:
        return None
    bound = float(program.objective @ relaxed.values)
    if float(program.objective @ start) >= bound - max(0.5 * program.smallest_value, 1e-9 * max(1.0, abs(bound))):
        return None
    stage = column_stages(program)
    agrees = np.abs(relaxed.values - start) <= 1e-6
    may_leave = np.append(~agrees[program.z] | (start[program.z] < 0.5), True)  # index -1: w, never fixed
    fixed = agrees & ~may_leave[stage]
    near = replace(program, lower=np.where(fixed, start, program.lower), upper=np.where(fixed, start, program.upper))
    return most_valuable(near, budget, solve)


@dataclass(frozen=True)
class _CountingFirst:
    """A :class:`~fleetc.placement.program.ProgramSolver`: ``solve``, but a program whose stages
    counting proves cannot all be placed (:func:`_short_of_room`) is infeasible without a
    solve. The neighbourhoods of a full sovereign fleet are: at 100 x 2,000 each of the four
    LPs that proved it (0.01-0.16 s) is proved in 2-7 ms."""

    solve: ProgramSolver

    def __call__(self, program: Program, budget: Budget, *, require_all: bool, integral: bool,
                 absolute_gap: float | None = None) -> Result:
        if require_all and _short_of_room(program):
            return Result(values=None, optimal=False, infeasible=True)
        return self.solve(program, budget, require_all=require_all, integral=integral, absolute_gap=absolute_gap)


#: Pairs times distinct sets of clusters their stages may use above which :func:`_short_of_room`
#: does not count (the LP decides): a bound on its work, some milliseconds; the neighbourhoods
#: of 100 x 2,000 ``--sovereignty`` have 3-6 such sets over 2,000-12,000 pairs.
COUNTING_WORK = 5_000_000


#: How much more than the room counted the stages must need (relative) for
#: :func:`_short_of_room` to hold: far above HiGHS's feasibility tolerances (1e-7 a row), so
#: that the LP relaxation it stands in for is infeasible to HiGHS too.
SHORT_MARGIN = 1e-4


def _short_of_room(program: Program) -> bool:
    """Whether counting proves that ``program`` cannot place all its stages, even in fractions
    (its LP relaxation with every ``z`` at 1 is infeasible): for the clusters ``K`` some stage
    may use, the stages that may use no cluster outside ``K`` need more of a resource (GPUs,
    cores, GiB, time-sliced slots) than ``K`` has. Each of those stages needs at least its
    fewest replicas (a degraded stage's least) times the least a replica of it takes on any
    of its clusters; ``K`` has the sum of its rows' capacity, each row's other columns (the
    time-sliced units ``w``) at the bound that leaves the most room. The rows read are the
    program's per-cluster resource rows, ``r * C + c`` for resource ``r`` of cluster ``c``
    (:func:`~fleetc.placement.program.build_program`; the slot rows only with time-slicing);
    the rest (failover headroom, caps) are left out, which only weakens the proof."""
    clusters, stages, units = program.clusters, len(program.blocked), len(program.unit_stage)
    resources = 4 if len(program.w) else 3
    rows = program.usage[: resources * clusters].tocsc()
    others = rows[:, units:]
    room = program.capacity[: resources * clusters] - others.multiply(others < 0) @ program.upper[units:]
    entries = rows[:, :units].tocoo()
    per_replica = entries.data / program.unit_replicas[entries.col]
    resource, stage = entries.row // clusters, program.unit_stage[entries.col]
    least = np.full((resources, stages), np.inf)
    np.minimum.at(least, (resource, stage), per_replica)
    counted = np.zeros((resources, stages), dtype=int)
    np.add.at(counted, (resource, stage), 1)
    of_stage = np.bincount(program.unit_stage, minlength=stages)
    least = np.where((counted == of_stage) & (of_stage > 0), least, 0.0)  # a unit without: none
    fewest = -program.placement[:, program.z].diagonal()
    fewest[program.d_of] -= program.upper[program.d]
    need_of = least * fewest
    allowed = sp.csr_matrix((np.ones(units), (program.unit_stage, program.unit_cluster)), shape=(stages, clusters))
    reaches = np.unique(np.packbits(allowed.toarray() > 0, axis=1), axis=0)
    if len(reaches) * units > COUNTING_WORK:
        return False
    room_of = room.reshape(resources, clusters)
    for packed in reaches:
        reach = np.unpackbits(packed, count=clusters).astype(bool)
        within = allowed @ ~reach == 0  # stages with no cluster outside it
        need = need_of[:, within].sum(axis=1)
        if np.any(need > room_of[:, reach].sum(axis=1) + SHORT_MARGIN * np.maximum(need, 1.0)):
            return True
    return False
