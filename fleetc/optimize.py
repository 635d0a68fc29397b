"""Place every stage on the fleet with a mixed-integer linear program (cvxpy + HiGHS).

The formulation, the policy fields it reads and the large-instance path are documented in
``docs/optimizer.md``; in short, variables exist only for (stage, cluster) pairs the filters
allow (:func:`fleetc.scoring.score_matrix`) and form one vector ``v = [x | y | u | z | w | k]``:

- ``x[p]`` binary per allowed pair of a gang stage: the whole gang runs on that cluster.
- ``y[p]`` integer in [0, replicas] per allowed pair of a Deployment: replicas served there;
  ``u[p]`` binary says the cluster serves at all, with ``min * u <= y <= replicas * u``.
- ``z[s]`` binary per stage: placed (``sum(replicas placed) = replicas * z``).
- ``w[c]`` integer per cluster, only when GPUs are time-sliced: GPUs given over to shared slots.
- ``k[q]`` integer per Deployment pair that held replicas in the previous placement: replicas
  kept there (``k <= y``, ``k <= previous``), rewarded by the move cost.

Constraints (all ``scipy.sparse`` matrices times ``v``): per cluster, exclusive GPUs + ``w`` <=
usable GPUs (:func:`fleetc.verify.usable_capacity`: utilisation and defragmentation headroom),
shared slots <= ``slots_per_gpu * w``, cores and GiB <= usable; ``multiCluster`` forces
``u >= z`` on every HA cluster of a serving stage.

Objective: maximise ``sum value_s / replicas_s * (1 + total[s, c])`` per placed replica plus
``move_cost * value_s / replicas_s`` per replica left where the previous placement had it, where
``value_s = class_weight * max(total_gpus, 1)`` (a zero class weight counts as ``EPSILON``).
The reported ``objective`` and ``bound`` leave the move-cost terms out: they measure where the
stages are, not where they were, so the report never depends on the previous placement.

The stage-cluster graph of allowed pairs is split into connected components that are solved
separately and merged in stage order. Every stage must be placed, so each solve fixes ``z = 1``;
when that is infeasible, a second solve lets ``z`` go to 0 (run until within half the smallest
stage value of optimal, so no stage that still fits is left out) and the stages it leaves out
are reported, or returned unplaced with ``allow_unplaced``. ``bound`` is the LP relaxation
(without move costs), a valid upper bound on ``objective``.

Components with more than :data:`LARGE` allowed pairs take the large path (method
``colgen-lp-round``, :func:`_solve_large`): column generation solves the LP over every pair
while the master holds only a few per stage (HiGHS directly through :mod:`fleetc.highs`,
warm-started), the stages it places in whole units keep that, a MILP under a deadline places
the rest (growing once into the fixed stages around it when it cannot), a greedy repair with
one-level eviction places what is still out, and what fits nowhere is diagnosed as above. Its
stages are left out only when that repair fails, not by an exact second solve.

HiGHS runs single-threaded with a fixed seed, so identical input gives an identical placement;
only a solve that hits its time limit may end differently from run to run.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import cvxpy as cp
import cvxpy.settings as cvxpy_status
import highspy
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from fleetc import highs
from fleetc.errors import InternalError, PlacementError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.scoring import GIB, Scores, score_matrix
from fleetc.verify import (
    ha_clusters,
    min_replicas_per_cluster,
    slots_per_gpu,
    usable_capacity,
    uses_shared_slots,
    verify,
)

#: A previous placement: stage key -> cluster name -> replicas (see :mod:`fleetc.previous`).
Previous = Mapping[str, Mapping[str, int]]

#: The value of a stage whose workload class has weight 0: it still must be placed.
EPSILON = 1e-3

#: Allowed pairs in one component above which the exact MILP gives way to column generation;
#: ``FLEETC_LARGE`` overrides it (``FLEETC_LARGE=0`` sends every instance down the large path).
LARGE = int(os.environ.get("FLEETC_LARGE", "2000"))

#: Seconds the rounded MILP may use on a large component (less when the time limit leaves less).
ROUNDED_MILP_SECONDS = 10.0

_SOLVER_OPTIONS = {"threads": 1, "random_seed": 0, "output_flag": False}

_SOLUTION_STATUSES = (cvxpy_status.OPTIMAL, cvxpy_status.OPTIMAL_INACCURATE)
_INFEASIBLE_STATUSES = (
    cvxpy_status.INFEASIBLE,
    cvxpy_status.INFEASIBLE_INACCURATE,
    cvxpy_status.INFEASIBLE_OR_UNBOUNDED,
)
_WHOLE = 1e-6


@dataclass(frozen=True, eq=False)
class _Part:
    """One independent subproblem: stage and cluster indices into the full model."""

    stages: np.ndarray
    clusters: np.ndarray


def place(
    model: FleetModel,
    *,
    time_limit: float | None = None,
    previous: Previous | None = None,
    allow_unplaced: bool = False,
) -> Placement:
    """Place every stage of ``model``, or raise :class:`PlacementError` saying why not.

    ``time_limit`` bounds the solving in seconds; a time-limited solve that found a placement
    returns it (its ``gap`` shows how far from proven optimal it may be). ``previous`` makes
    moving a stage away from where it was cost ``model.move_cost``. With ``allow_unplaced`` the
    stages that do not fit come back with no assignments and a ``reason``.
    """
    if not model.stages:
        return Placement(stages=(), objective=0.0, bound=0.0, method="milp")
    canonical = _canonical(model)
    if canonical != model:
        solved = place(canonical, time_limit=time_limit, previous=previous, allow_unplaced=allow_unplaced)
        by_key = {p.stage: p for p in solved.stages}
        return replace(solved, stages=tuple(by_key[stage.key] for stage in model.stages))
    deadline = None if time_limit is None else time.monotonic() + time_limit
    scores = score_matrix(model)
    blocked = _blocked(model, scores)
    kept = _previous_matrix(model, previous or {})
    replicas_at = np.zeros(scores.allowed.shape, dtype=np.int32)
    objective = bound = 0.0
    methods = set()
    for part in _parts(scores.allowed):
        try:
            solved = _solve_part(model, scores, blocked, kept, part, deadline)
        except _OutOfTime:
            raise _time_limit_error(time_limit) from None
        replicas_at[np.ix_(part.stages, part.clusters)] = solved.replicas_at
        objective += solved.objective
        bound += solved.bound
        methods.add(solved.method)
    unplaced = _unplaced(model, scores, blocked, replicas_at)
    if unplaced and not allow_unplaced:
        raise PlacementError(list(unplaced.values()))
    placement = Placement(
        stages=tuple(
            _stage_placement(stage, model.clusters, replicas_at[s], scores.total[s], unplaced.get(s, ""))
            for s, stage in enumerate(model.stages)
        ),
        objective=round(objective, 6),
        bound=round(max(bound, objective), 6),
        method="colgen-lp-round" if "colgen-lp-round" in methods else "milp",
    )
    problems = verify(model, placement, allow_unplaced=allow_unplaced)
    if problems:
        raise InternalError(
            "the solver's placement breaks hard constraints:\n" + "\n".join(problems)
        )
    return placement


def _canonical(model: FleetModel) -> FleetModel:
    """The model with clusters sorted by name and stages by key, so the order the policies
    list them in never changes the placement (ties included)."""
    return replace(
        model,
        clusters=tuple(sorted(model.clusters, key=lambda c: c.name)),
        stages=tuple(sorted(model.stages, key=lambda s: s.key)),
    )


def _parts(allowed: np.ndarray) -> list[_Part]:
    """Connected components of the bipartite stage-cluster graph, ordered by first stage.

    Capacity only couples stages that share an allowed cluster, so each component is an
    independent problem; clusters no stage may use are left out.
    """
    n_stages, n_clusters = allowed.shape
    pairs = sp.csr_matrix(allowed)  # stage rows; built straight as CSR: no index triplets at scale
    indptr = np.concatenate([pairs.indptr, np.full(n_clusters, pairs.indptr[-1])])
    graph = sp.csr_matrix(
        (np.ones(pairs.nnz), pairs.indices + n_stages, indptr), shape=(n_stages + n_clusters,) * 2
    )
    _, labels = connected_components(graph, directed=False)
    parts = []
    for label in dict.fromkeys(labels[:n_stages].tolist()):
        members = np.flatnonzero(labels == label)
        parts.append(_Part(members[members < n_stages], members[members >= n_stages] - n_stages))
    return parts


def _blocked(model: FleetModel, scores: Scores) -> dict[int, str]:
    """Serving stages ``multiCluster`` makes unplaceable whatever the capacity, and why."""
    names = {c.name: i for i, c in enumerate(model.clusters)}
    blocked = {}
    for s, stage in enumerate(model.stages):
        ha = ha_clusters(model, stage)
        minimum = min_replicas_per_cluster(stage)
        filtered = [
            f"{name} is not in the fleet" if names.get(name) is None
            else f"{name} is filtered out ({scores.reasons[(s, names[name])]})"
            for name in ha
            if names.get(name) is None or not scores.allowed[s, names[name]]
        ]
        if filtered:
            blocked[s] = f"{stage.key}: multiCluster runs it on {', '.join(ha)}, but {'; '.join(filtered)}"
        elif len(ha) * minimum > stage.replicas:
            blocked[s] = (
                f"{stage.key}: multiCluster runs it on {len(ha)} clusters ({', '.join(ha)}) "
                f"with at least {minimum} replicas each, the stage has {stage.replicas}"
            )
    return blocked


def _previous_matrix(model: FleetModel, previous: Previous) -> np.ndarray:
    """(S, C) replicas each stage had on each cluster (capped at its replicas); unknown stages
    and clusters are ignored."""
    kept = np.zeros((len(model.stages), len(model.clusters)), dtype=np.int32)
    names = {c.name: i for i, c in enumerate(model.clusters)}
    for s, stage in enumerate(model.stages):
        for name, replicas in previous.get(stage.key, {}).items():
            if name in names and replicas > 0:
                kept[s, names[name]] = min(int(replicas), stage.replicas)
    return kept


@dataclass(frozen=True, eq=False)
class _Solved:
    replicas_at: np.ndarray  # (stages, clusters) of the part
    objective: float
    bound: float
    method: str


def _solve_part(
    model: FleetModel,
    scores: Scores,
    blocked: dict[int, str],
    kept: np.ndarray,
    part: _Part,
    deadline: float | None,
) -> _Solved:
    """Solve one component: all stages placed if possible, else the best partial placement."""
    if int(scores.allowed[np.ix_(part.stages, part.clusters)].sum()) > LARGE:
        return _solve_large(model, scores, blocked, kept, part, deadline)
    program = _build_program(model, scores, blocked, kept, part)
    result = _Result(values=None, optimal=False, infeasible=bool(program.blocked.any()))
    if not result.infeasible:
        result = _solve(program, require_all=True, integral=True, deadline=deadline)
    require_all = not result.infeasible
    if result.infeasible:
        result = _solve(program, require_all=False, integral=True, deadline=deadline)
    if result.values is None:
        raise _OutOfTime
    scored = replace(program, objective=program.score)
    relaxed = _solve(scored, require_all=require_all, integral=False, deadline=deadline)
    objective = float(program.score @ result.values)
    if relaxed.optimal and relaxed.values is not None:
        bound = float(program.score @ relaxed.values)
    else:
        bound = float(np.sum(np.maximum(program.score, 0.0) * program.upper))
    return _Solved(_replicas_at(program, result.values), objective, max(bound, objective), "milp")


@dataclass(frozen=True, eq=False)
class _Large:
    """A large part in the column generation's terms (see ``docs/optimizer.md``).

    One column per allowed pair, in stage units: ``t[p]`` is the share of stage ``pair_stage``'s
    replicas on ``pair_cluster`` (a gang: 0 or 1; a Deployment: replicas there / replicas).
    Rows: one per stage (``sum t + unplaced = 1``), GPUs / cores / GiB per cluster, shared slots
    per cluster (time-slicing only), one per kept Deployment pair (``k - t <= 0``). Further
    columns: ``unplaced`` per stage (penalised), ``w`` per cluster (GPUs given to slots), ``k``
    per kept Deployment pair (the move-cost reward).
    """

    pair_stage: np.ndarray  # sorted, int32
    pair_cluster: np.ndarray  # int32
    gain: np.ndarray  # value_s * (1 + total): what placing the whole stage there scores
    move: np.ndarray  # the move-cost reward of a gang pair on its previous cluster (else 0)
    pair_lower: np.ndarray  # min / replicas on a multiCluster cluster, else 0
    coefficients: np.ndarray  # (4, S): per stage unit, exclusive GPUs, cores, GiB, shared slots
    replicas: np.ndarray  # (S,) float
    stages: int
    clusters: int
    shared: bool  # slot rows and w columns exist
    slots: int
    capacity: np.ndarray  # (3, C) usable
    keep_pair: np.ndarray  # kept Deployment pairs (indices into the pairs)
    keep_upper: np.ndarray  # their previous share (previous replicas / replicas)
    keep_reward: np.ndarray  # move_cost * value_s per unit of k
    penalty: np.ndarray  # per stage and unit left unplaced

    @property
    def rows(self) -> int:
        return self.stages + (4 if self.shared else 3) * self.clusters + len(self.keep_pair)

    def block(self, pairs: np.ndarray) -> sp.csc_matrix:
        """The matrix columns of ``pairs``."""
        stage, cluster = self.pair_stage[pairs], self.pair_cluster[pairs]
        n, c = len(pairs), self.clusters
        cols = np.arange(n)
        rows = [stage]
        data = [np.ones(n)]
        index = [cols]
        for r in range(4 if self.shared else 3):
            coefficient = self.coefficients[r, stage]
            nonzero = coefficient != 0
            rows.append(self.stages + r * c + cluster[nonzero])
            data.append(coefficient[nonzero])
            index.append(cols[nonzero])
        kept = np.searchsorted(self.keep_pair, pairs)
        is_kept = np.isin(pairs, self.keep_pair)
        if is_kept.any():
            base = self.stages + (4 if self.shared else 3) * c
            rows.append(base + kept[is_kept])
            data.append(-np.ones(int(is_kept.sum())))
            index.append(cols[is_kept])
        return sp.csc_matrix(
            (np.concatenate(data), (np.concatenate(rows), np.concatenate(index))), shape=(self.rows, n)
        )

    def fixed_block(self) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
        """The columns that are always there: unplaced per stage, w per cluster, k per kept pair;
        with their upper bounds and their (maximised) objective without penalties."""
        s, c, q = self.stages, self.clusters, len(self.keep_pair)
        rows, data, index = [np.arange(s)], [np.ones(s)], [np.arange(s)]
        upper = [np.ones(s)]
        gain = [np.zeros(s)]
        if self.shared:
            w = s + np.arange(c)
            rows += [self.stages + np.arange(c), self.stages + 3 * c + np.arange(c)]
            data += [np.ones(c), np.full(c, -float(self.slots))]
            index += [w, w]
            upper.append(self.capacity[0])
            gain.append(np.zeros(c))
        first_k = s + (c if self.shared else 0)
        base = self.stages + (4 if self.shared else 3) * c
        rows.append(base + np.arange(q))
        data.append(np.ones(q))
        index.append(first_k + np.arange(q))
        upper.append(self.keep_upper)
        gain.append(self.keep_reward)
        size = first_k + q
        matrix = sp.csc_matrix(
            (np.concatenate(data), (np.concatenate(rows), np.concatenate(index))), shape=(self.rows, size)
        )
        return matrix, np.concatenate(upper), np.concatenate(gain)

    def row_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.clusters
        upper = [np.ones(self.stages), self.capacity.ravel()]
        if self.shared:
            upper.append(np.zeros(c))
        upper.append(np.zeros(len(self.keep_pair)))
        lower = np.full(self.rows, -highs.INF)
        lower[: self.stages] = 1.0
        return lower, np.concatenate(upper)

    def reduced_costs(self, row_dual: np.ndarray, objective: np.ndarray) -> np.ndarray:
        """``-objective - A^T row_dual`` of every pair column (the master minimises)."""
        c = self.clusters
        reduced = -objective - row_dual[self.pair_stage]
        for r in range(4 if self.shared else 3):
            dual = row_dual[self.stages + r * c: self.stages + (r + 1) * c]
            reduced -= self.coefficients[r, self.pair_stage] * dual[self.pair_cluster]
        return reduced


#: Relative objective a later cluster (by name) gives up against an equal earlier one.
TIE_BREAK = 1e-6
#: What leaving a unit of a stage out costs in the master, in stage values. Any penalty keeps
#: the bound valid (the master's gain at its optimum is at least the LP optimum with every stage
#: placed); a large one makes the master place whatever fits, but inflates the duals.
UNPLACED_PENALTY = 10.0
#: Candidate clusters per stage in the first restricted master (best gain first).
START_CANDIDATES = 3
#: Column generation stops when the Lagrangian bound is this close (relative) to the master.
COLUMN_GAP = 1e-4
#: Seconds column generation may take (then the Lagrangian bound is the bound).
COLUMN_SECONDS = 30.0
#: Improving pair columns each stage may add to the master per round (most improving first).
COLUMNS_PER_ROUND = 3
#: Reduced cost below which a column improves the master, relative to the largest gain.
PRICING_TOLERANCE = 1e-7


def _large(model: FleetModel, scores: Scores, blocked: dict[int, str], kept: np.ndarray, part: _Part) -> _Large:
    stages = tuple(model.stages[s] for s in part.stages)
    clusters = tuple(model.clusters[c] for c in part.clusters)
    allowed = scores.allowed[np.ix_(part.stages, part.clusters)]
    is_blocked = np.array([int(s) in blocked for s in part.stages], dtype=bool)
    allowed[is_blocked] = False
    pair_stage, pair_cluster = (a.astype(np.int32) for a in np.nonzero(allowed))
    del allowed
    total = scores.total[part.stages[pair_stage], part.clusters[pair_cluster]]
    values = _stage_values(model, stages)
    replicas = np.array([s.replicas for s in stages], dtype=float)
    gang = np.array([s.is_gang for s in stages], dtype=bool)
    shared_stage = np.array([uses_shared_slots(model, s) for s in stages], dtype=bool)
    demand = _demand(stages) * replicas
    coefficients = np.stack([np.where(shared_stage, 0.0, demand[0]), demand[1], demand[2],
                             np.where(shared_stage, demand[0], 0.0)])
    previous = kept[part.stages[pair_stage], part.clusters[pair_cluster]]
    move = np.where(gang[pair_stage], model.move_cost * values[pair_stage] * previous / replicas[pair_stage], 0.0)
    keep_pair = np.flatnonzero((previous > 0) & ~gang[pair_stage])
    minimum = np.array([min_replicas_per_cluster(s) for s in stages], dtype=float)
    pair_lower = np.zeros(len(pair_stage))
    names = {c.name: i for i, c in enumerate(clusters)}
    key = pair_stage.astype(np.int64) * len(clusters) + pair_cluster
    for s, stage in enumerate(stages):
        for name in ha_clusters(model, stage) if not is_blocked[s] else ():
            hit = np.searchsorted(key, s * len(clusters) + names[name])  # not blocked: allowed here
            pair_lower[hit] = minimum[s] / replicas[s]
    # Ties go to the first cluster by name: a later cluster gives up a relative TIE_BREAK at most
    # (the objective is computed from the scores, the bound divides by 1 - TIE_BREAK).
    gain = values[pair_stage] * (1.0 + total) * (1.0 - TIE_BREAK * pair_cluster / len(clusters))
    return _Large(
        pair_stage=pair_stage,
        pair_cluster=pair_cluster,
        gain=gain,
        move=move,
        pair_lower=pair_lower,
        coefficients=coefficients,
        replicas=replicas,
        stages=len(stages),
        clusters=len(clusters),
        shared=bool(shared_stage.any()),
        slots=slots_per_gpu(model),
        capacity=_capacity(model, clusters),
        keep_pair=keep_pair,
        keep_upper=previous[keep_pair] / replicas[pair_stage[keep_pair]],
        keep_reward=model.move_cost * values[pair_stage[keep_pair]],
        penalty=UNPLACED_PENALTY * values,
    )


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


def _start_master(large: _Large) -> _Master:
    order = np.lexsort((-large.gain, large.pair_stage))
    starts = np.searchsorted(large.pair_stage[order], np.arange(large.stages))
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    holds = np.zeros(len(large.pair_stage), dtype=bool)
    holds[order[rank < START_CANDIDATES]] = True
    holds[_greedy_start(large)] = True
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
        np.concatenate([np.zeros(fixed.shape[1]), large.pair_lower[pairs]]),
        np.concatenate([fixed_upper, np.ones(len(pairs))]),
        sp.hstack([fixed, block], format="csc"),
        row_lower,
        row_upper,
    )
    return _Master(lp, pairs, holds, fixed.shape[1], fixed, cost, fixed_upper)


def _greedy_start(large: _Large) -> np.ndarray:
    """Pairs of a rough greedy placement, so the first master is (nearly) feasible and its duals
    price capacity from the start: each stage (largest gain first) goes whole to its best
    cluster with room, counting shared slots as fractions of a GPU; a stage that fits nowhere
    adds nothing (its unplaced column covers it until pricing finds room)."""
    demand = np.stack([large.coefficients[0] + large.coefficients[3] / large.slots, *large.coefficients[1:3]])
    free = large.capacity.copy()
    starts = np.searchsorted(large.pair_stage, np.arange(large.stages + 1))
    best = np.maximum.reduceat(large.gain, starts[:-1]) if len(large.gain) else np.zeros(0)
    chosen = []
    for s in np.argsort(-best, kind="stable").tolist():
        pairs = np.arange(starts[s], starts[s + 1])
        if not len(pairs):
            continue
        clusters = large.pair_cluster[pairs]
        room = np.all(free[:, clusters] >= demand[:, s, None] - 1e-9, axis=0)
        if room.any():
            pick = int(np.argmax(np.where(room, large.gain[pairs], -np.inf)))
            free[:, clusters[pick]] -= demand[:, s]
            chosen.append(pairs[pick])
    return np.array(chosen, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class _Relaxed:
    """The master's final solution: values of its fixed and pair columns, and its objective."""

    fixed: np.ndarray
    pairs: np.ndarray  # pair indices
    shares: np.ndarray  # their t
    objective: float  # maximised, penalties included
    reduced: np.ndarray  # reduced costs of every pair at the end
    upper: float  # bound on the LP over every pair (maximised, penalties included)
    row_dual: np.ndarray
    converged: bool  # within COLUMN_GAP of the bound, not stopped by a budget


def _generate_columns(large: _Large, master: _Master, objective: np.ndarray, deadline: float | None) -> _Relaxed:
    """Solve the master, add each stage's most improving pair columns, repeat until no pair
    column improves it (then the master's optimum is the LP optimum over all pairs), or until
    the Lagrangian bound is within :data:`COLUMN_GAP` of it, or :data:`COLUMN_SECONDS` or the
    deadline run out."""
    tolerance = PRICING_TOLERANCE * max(1.0, float(objective.max(initial=1.0)))
    starts = np.flatnonzero(np.diff(large.pair_stage, prepend=-1))
    budget = time.monotonic() + COLUMN_SECONDS
    deadline = budget if deadline is None else min(deadline, budget)
    last: _Relaxed | None = None
    while True:
        solution = master.lp.solve(deadline)
        if solution.values is None:  # out of time mid-solve: the last round's answer stands
            if last is None:
                raise _OutOfTime
            return last
        value = -solution.objective
        upper = _upper_bound(large, master, solution.row_dual, objective)
        reduced = large.reduced_costs(solution.row_dual, objective)
        pricing = np.where(master.holds, 0.0, reduced)
        best = np.minimum.reduceat(pricing, starts)
        values = solution.values
        converged = best.min(initial=0.0) >= -tolerance or upper - value <= COLUMN_GAP * abs(upper)
        last = _Relaxed(values[: master.fixed], master.pairs, values[master.fixed:], value, reduced, upper,
                        solution.row_dual, converged)
        if converged or time.monotonic() >= deadline:
            return last
        hit = np.flatnonzero(pricing < -tolerance)
        order = hit[np.lexsort((pricing[hit], large.pair_stage[hit]))]
        first = np.flatnonzero(np.diff(large.pair_stage[order], prepend=-1))
        rank = np.arange(len(order)) - np.repeat(first, np.diff(np.append(first, len(order))))
        new = np.sort(order[rank < COLUMNS_PER_ROUND])
        master.lp.add_columns(-objective[new], large.pair_lower[new], np.ones(len(new)), large.block(new))
        master.holds[new] = True
        master.pairs = np.concatenate([master.pairs, new])


def _upper_bound(large: _Large, master: _Master, row_dual: np.ndarray, objective: np.ndarray) -> float:
    """A bound on the master's LP over every pair from any capacity duals (Lagrangian: relax the
    capacity rows, keep each stage's ``sum t + unplaced = 1``); equal to the master's optimum
    once no column improves it, valid before."""
    s = large.stages
    mu = np.minimum(row_dual[s:], 0.0)  # <= rows of a minimisation
    link = mu[len(mu) - len(large.keep_pair):] if len(large.keep_pair) else np.zeros(0)
    cost = large.reduced_costs(np.concatenate([np.zeros(s), mu]), objective)  # cost - mu . column
    cost[large.keep_pair] += link
    starts = np.flatnonzero(np.diff(large.pair_stage, prepend=-1))
    stages = large.pair_stage[starts]
    best = np.minimum(np.minimum.reduceat(cost, starts), master.fixed_cost[stages])
    lower = np.bincount(large.pair_stage, weights=large.pair_lower, minlength=s)[stages]
    lower_cost = np.bincount(large.pair_stage, weights=large.pair_lower * cost, minlength=s)[stages]
    others = master.fixed_cost[s:] - master.fixed_matrix[s:, s:].T @ mu
    _, row_upper = large.row_bounds()
    lagrangian = mu @ row_upper[s:] + float(np.sum(lower_cost + (1.0 - lower) * best))
    return -(lagrangian + float(np.minimum(others, 0.0) @ master.fixed_upper[s:]))


def _solve_large(
    model: FleetModel, scores: Scores, blocked: dict[int, str], kept: np.ndarray, part: _Part, deadline: float | None
) -> _Solved:
    """Column generation for the LP, fix what it places whole, a small MILP over the rest (with a
    deadline), then a greedy repair; see ``docs/optimizer.md``."""
    _silence_highs_banner()
    large = _large(model, scores, blocked, kept, part)
    master = _start_master(large)
    relaxed = _generate_columns(large, master, large.gain + large.move, deadline)
    replicas_at = _round(model, large, part, relaxed, scores, blocked, kept, deadline)
    objective = _score_of(model, part, scores, replicas_at)
    in_lp = np.bincount(large.pair_stage, minlength=large.stages) > 0  # multiCluster conflicts are not
    left_out = bool(np.any(in_lp & ~replicas_at.any(axis=1)))
    bound = _bound(large, master, relaxed, left_out, deadline)
    return _Solved(replicas_at, objective, max(bound, objective), "colgen-lp-round")


def _bound(large: _Large, master: _Master, relaxed: _Relaxed, left_out: bool, deadline: float | None) -> float:
    """A bound on the LP optimum without move rewards, every stage placed (unless the placement
    leaves one out: then stages may be left out in the LP too, as in the exact path)."""
    if large.move.any() or len(large.keep_pair) or left_out:
        master.fixed_cost = np.zeros(master.fixed)
        master.fixed_cost[: large.stages] = 0.0 if left_out else large.penalty
        if not relaxed.converged:  # no time to solve again: any scaling of the duals bounds it too
            scaled = [relaxed.row_dual * (0.5 ** k) for k in range(6)] + [np.zeros_like(relaxed.row_dual)]
            return min(_upper_bound(large, master, dual, large.gain) for dual in scaled) / (1.0 - TIE_BREAK)
        master.lp.change_costs(np.arange(master.fixed), master.fixed_cost)
        master.lp.change_costs(master.fixed + np.arange(len(master.pairs)), -large.gain[master.pairs])
        relaxed = _generate_columns(large, master, large.gain, deadline)
    return relaxed.upper / (1.0 - TIE_BREAK)


#: Extra clusters per left-over stage in the rounding MILP, by the LP's reduced cost.
ALTERNATIVES = 3
#: Times the rounding MILP may take in the fixed stages around it when it cannot place the rest.
EXPANSIONS = 1
#: Candidate pairs above which the rounding MILP grows no further.
ROUNDING_PAIRS = 50_000


def _round(
    model: FleetModel,
    large: _Large,
    part: _Part,
    relaxed: _Relaxed,
    scores: Scores,
    blocked: dict[int, str],
    kept: np.ndarray,
    deadline: float | None,
) -> np.ndarray:
    """(S, C) replicas of the part: the stages the LP places in whole units as it places them,
    a MILP over the rest on their LP clusters plus a few alternatives, a greedy repair last."""
    stages = [model.stages[s] for s in part.stages]
    replicas = np.array([s.replicas for s in stages])
    gang = np.array([s.is_gang for s in stages], dtype=bool)
    minimum = np.array([min_replicas_per_cluster(s) for s in stages])
    is_blocked = np.array([int(s) in blocked for s in part.stages], dtype=bool)
    stage, cluster = large.pair_stage[relaxed.pairs], large.pair_cluster[relaxed.pairs]
    units = relaxed.shares * np.where(gang[stage], 1, replicas[stage])
    whole = np.rint(units)
    ok = (np.abs(units - whole) <= _WHOLE) & ((whole == 0) | gang[stage] | (whole >= minimum[stage]))
    placed = (whole * np.where(gang[stage], replicas[stage], 1)).astype(np.int32)
    per_stage = np.bincount(stage, weights=placed, minlength=large.stages)
    broken = np.bincount(stage, weights=~ok, minlength=large.stages) > 0
    fixed = ~broken & (per_stage == replicas) & ~is_blocked
    replicas_at = np.zeros((large.stages, large.clusters), dtype=np.int32)
    keep = fixed[stage] & (placed > 0)
    replicas_at[stage[keep], cluster[keep]] = placed[keep]
    rest = np.flatnonzero(~fixed & ~is_blocked)
    if len(rest):
        _round_rest(model, large, part, relaxed, scores, blocked, kept, deadline, rest, replicas_at)
    _repair(model, large, part, replicas_at, is_blocked)
    return replicas_at


def _round_rest(
    model: FleetModel,
    large: _Large,
    part: _Part,
    relaxed: _Relaxed,
    scores: Scores,
    blocked: dict[int, str],
    kept: np.ndarray,
    deadline: float | None,
    rest: np.ndarray,
    replicas_at: np.ndarray,
) -> None:
    """The MILP over the ``rest`` stages in the capacity the fixed ones leave (in place).

    When it cannot place them all, the fixed stages on its clusters join it (their capacity was
    what was missing) and it runs again, up to :data:`EXPANSIONS` times while it stays below
    :data:`ROUNDING_PAIRS` pairs; the last attempt places what it can.
    """
    start = time.monotonic()
    first = None
    for _attempt in range(EXPANSIONS + 1):
        candidates, columns = _candidates(large, relaxed, rest)
        sub = _Part(part.stages[rest], part.clusters[columns])
        saved = replicas_at[rest].copy()
        replicas_at[rest] = 0
        taken = _taken(large, replicas_at)[:, columns]
        program = _build_program(model, scores, blocked, kept, sub, allowed=candidates[:, columns], taken=taken)
        first = first or (rest, columns, program)
        values = _solve_direct(program, require_all=True, seconds=_budget(start, deadline))
        if values is not None:
            replicas_at[np.ix_(rest, columns)] = _replicas_at(program, values)
            return
        replicas_at[rest] = saved
        released = np.flatnonzero(replicas_at[:, columns].any(axis=1))
        rest = np.union1d(rest, released)
        if len(released) == 0 or _candidates(large, relaxed, rest)[0].sum() > ROUNDING_PAIRS:
            break
    # Place what fits of the first (smallest) rest; the repair takes the others.
    rest, columns, program = first
    values = _solve_direct(program, require_all=False, seconds=_budget(start, deadline), exact=False)
    replicas_at[rest] = 0
    if values is not None:
        replicas_at[np.ix_(rest, columns)] = _replicas_at(program, values)


def _budget(start: float, deadline: float | None) -> float:
    """Seconds the rounding MILPs have left: :data:`ROUNDED_MILP_SECONDS` in all, within the deadline."""
    seconds = ROUNDED_MILP_SECONDS - (time.monotonic() - start)
    if deadline is not None:
        seconds = min(seconds, deadline - time.monotonic())
    return max(0.0, seconds)


def _candidates(large: _Large, relaxed: _Relaxed, rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(len(rest), C) candidate pairs of the ``rest`` stages: their LP support, multiCluster and
    kept clusters, and the :data:`ALTERNATIVES` best by reduced cost; and the clusters used."""
    position = np.full(large.stages, -1)
    position[rest] = np.arange(len(rest))
    in_rest = np.flatnonzero(position[large.pair_stage] >= 0)
    candidates = np.zeros((len(rest), large.clusters), dtype=bool)
    support = relaxed.pairs[(relaxed.shares > 1e-9) & (position[large.pair_stage[relaxed.pairs]] >= 0)]
    order = in_rest[np.lexsort((relaxed.reduced[in_rest], large.pair_stage[in_rest]))]
    starts = np.flatnonzero(np.diff(large.pair_stage[order], prepend=-1))
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    wanted = np.concatenate([
        support,
        order[rank < ALTERNATIVES],
        in_rest[large.pair_lower[in_rest] > 0],
        large.keep_pair[position[large.pair_stage[large.keep_pair]] >= 0],
    ]).astype(np.int64)
    candidates[position[large.pair_stage[wanted]], large.pair_cluster[wanted]] = True
    return candidates, np.flatnonzero(candidates.any(axis=0))


def _solve_direct(program: _Program, *, require_all: bool, seconds: float, exact: bool = True) -> np.ndarray | None:
    """The MILP through :mod:`fleetc.highs` (no cvxpy compile), or None when it found nothing."""
    lower = program.lower.copy()
    if require_all:
        lower[program.z] = 1.0
    matrix = sp.vstack([program.placement, program.usage, program.linking], format="csc")
    rows = (program.placement.shape[0], program.usage.shape[0], program.linking.shape[0])
    row_lower = np.concatenate([np.zeros(rows[0]), np.full(rows[1] + rows[2], -highs.INF)])
    row_upper = np.concatenate([np.zeros(rows[0]), program.capacity, np.zeros(rows[2])])
    solution = highs.solve_milp(
        -program.objective, lower, program.upper, matrix, row_lower, row_upper,
        np.ones(program.size, dtype=bool), seconds,
        absolute_gap=None if require_all or not exact else 0.5 * program.smallest_value,
    )
    if solution.values is None or not _feasible(program, solution.values, lower):
        return None
    return solution.values


def _taken(large: _Large, replicas_at: np.ndarray) -> np.ndarray:
    """(4, C) what ``replicas_at`` uses per cluster: exclusive GPUs, cores, GiB, shared slots."""
    stage, cluster = np.nonzero(replicas_at)
    count = replicas_at[stage, cluster]
    per_replica = large.coefficients / large.replicas
    return np.stack([
        np.bincount(cluster, weights=per_replica[r, stage] * count, minlength=large.clusters) for r in range(4)
    ]).astype(float)


def _repair(model: FleetModel, large: _Large, part: _Part, replicas_at: np.ndarray, is_blocked: np.ndarray) -> None:
    """Place each stage still left out greedily (in place): most valuable per GPU first, on its
    best-scoring clusters with room left; a stage that fits nowhere stays out."""
    stages = [model.stages[s] for s in part.stages]
    taken = _taken(large, replicas_at)
    left = [s for s in range(large.stages) if not is_blocked[s] and not replicas_at[s].any()]
    if not left:
        return
    values = _stage_values(model, tuple(stages))
    left.sort(key=lambda s: (-values[s] / max(stages[s].total_gpus, 1), s))
    starts = np.searchsorted(large.pair_stage, np.arange(large.stages + 1))
    names = {model.clusters[c].name: i for i, c in enumerate(part.clusters)}
    per_replica = large.coefficients / large.replicas
    room = _Room(large.capacity, taken, large.slots)

    def plan_of(s: int, avoid: int = -1) -> dict[int, int]:
        pairs = np.arange(starts[s], starts[s + 1])
        by_score = [c for c in large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]].tolist()
                    if c != avoid]
        ha = [names[name] for name in ha_clusters(model, stages[s])]
        return _greedy_plan(stages[s], per_replica[:, s], by_score, ha, room)

    def apply(s: int, plan: dict[int, int], sign: int) -> None:
        for c, count in plan.items():
            replicas_at[s, c] += sign * count

    until = time.monotonic() + EVICTION_SECONDS
    for s in left:
        plan = plan_of(s)
        if not plan and time.monotonic() < until:
            plan = _evict(s, plan_of, apply, replicas_at, room, per_replica, large, starts)
        apply(s, plan, 1)


#: Clusters the eviction repair tries per left-out stage, and stages it may move off one cluster.
EVICTION_CLUSTERS = 20
EVICTION_STAGES = 8
#: Seconds the eviction repair may take in all (the plain greedy pass always runs to the end).
EVICTION_SECONDS = 10.0


def _evict(s: int, plan_of: Callable[..., dict[int, int]], apply: Callable[[int, dict[int, int], int], None],
           replicas_at: np.ndarray, room: _Room, per_replica: np.ndarray, large: _Large,
           starts: np.ndarray) -> dict[int, int]:
    """Make room for stage ``s`` on one of its best clusters by moving stages there elsewhere
    (a one-level ejection chain: each resident alone, then the first 2, 3, ... together, the
    most movable first); the plan for ``s``, or {} (nothing changed)."""
    pairs = np.arange(starts[s], starts[s + 1])
    clusters = large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]][:EVICTION_CLUSTERS]
    for c in clusters.tolist():
        residents = np.flatnonzero(replicas_at[:, c])
        choices = starts[residents + 1] - starts[residents]
        size = large.coefficients[0, residents] + large.coefficients[3, residents]
        residents = residents[np.lexsort((size, -choices))][:EVICTION_STAGES].tolist()
        groups = [[r] for r in residents] + [residents[:n] for n in range(2, len(residents) + 1)]
        for group in groups:
            plan = _move_away(s, c, group, plan_of, apply, replicas_at, room, per_replica)
            if plan:
                return plan
    return {}


def _move_away(s: int, c: int, group: list[int], plan_of: Callable[..., dict[int, int]],
               apply: Callable[[int, dict[int, int], int], None], replicas_at: np.ndarray, room: _Room,
               per_replica: np.ndarray) -> dict[int, int]:
    """Take the ``group`` of stages off (all their clusters), place ``s``, re-place the group
    avoiding ``c``; the plan for ``s`` when all of that works, else {} with nothing changed."""
    saved_taken = room.taken.copy()
    moved = []
    for resident in group:
        old = {int(k): int(replicas_at[resident, k]) for k in np.flatnonzero(replicas_at[resident])}
        for k, count in old.items():
            room.take(k, per_replica[:, resident], -count)
        apply(resident, old, -1)
        moved.append((resident, old))
    plan = plan_of(s)
    replaced = [(resident, plan_of(resident, avoid=c)) for resident, _ in moved] if plan else []
    if plan and all(new for _, new in replaced):
        for resident, new in replaced:
            apply(resident, new, 1)
        return plan
    room.taken = saved_taken
    for resident, old in moved:
        apply(resident, old, 1)
    return {}


class _Room:
    """Residual capacity per cluster while the greedy repair places stages."""

    def __init__(self, capacity: np.ndarray, taken: np.ndarray, slots: int) -> None:
        self.capacity = capacity
        self.taken = taken.copy()
        self.slots = slots

    def fits(self, c: int, demand: np.ndarray) -> int:
        """Replicas of per-replica ``demand`` (exclusive GPUs, cores, GiB, slots) that fit ``c``."""
        excl, cores, gib, slots = self.taken[:, c]
        limits = []
        if demand[0] > 0:
            free = self.capacity[0, c] - excl - math.ceil(slots / self.slots - 1e-9)
            limits.append(math.floor(free / demand[0] + 1e-9))
        if demand[3] > 0:
            free_slots = (self.capacity[0, c] - excl) * self.slots - slots
            limits.append(math.floor(free_slots / demand[3] + 1e-9))
        for r, used in ((1, cores), (2, gib)):
            if demand[r] > 0:
                limits.append(math.floor((self.capacity[r, c] - used) / demand[r] + 1e-9))
        return max(0, min(limits, default=1 << 30))

    def take(self, c: int, demand: np.ndarray, count: int) -> None:
        self.taken[:, c] += demand * count


def _greedy_plan(stage: Stage, demand: np.ndarray, by_score: list[int], ha: list[int], room: _Room) -> dict[int, int]:
    """Clusters and replicas for ``stage`` in ``room`` (taken from it), or {} when it does not fit."""
    if stage.is_gang:
        for c in by_score:
            if room.fits(c, demand) >= stage.replicas:
                room.take(c, demand, stage.replicas)
                return {c: stage.replicas}
        return {}
    minimum = min_replicas_per_cluster(stage)
    plan: dict[int, int] = {}
    remaining = stage.replicas
    for c in ha:
        if room.fits(c, demand) < minimum:
            break
        room.take(c, demand, minimum)
        plan[c] = minimum
        remaining -= minimum
    else:
        for c in by_score:
            if not remaining:
                break
            count = min(room.fits(c, demand), remaining)
            if count and (c in plan or count >= minimum):
                room.take(c, demand, count)
                plan[c] = plan.get(c, 0) + count
                remaining -= count
    if remaining or len(plan) < len(ha):
        for c, count in plan.items():
            room.take(c, demand, -count)
        return {}
    return plan


def _score_of(model: FleetModel, part: _Part, scores: Scores, replicas_at: np.ndarray) -> float:
    """The reported objective of ``replicas_at`` (no move-cost terms)."""
    stage, cluster = np.nonzero(replicas_at)
    stages = tuple(model.stages[s] for s in part.stages)
    values = _stage_values(model, stages)
    replicas = np.array([s.replicas for s in stages], dtype=float)
    total = scores.total[part.stages[stage], part.clusters[cluster]]
    return float(np.sum(values[stage] / replicas[stage] * (1.0 + total) * replicas_at[stage, cluster]))


@dataclass(frozen=True, eq=False)
class _Columns:
    """Where each part of ``v = [x | y | u | z | w | k]`` lives; pairs sorted by stage, cluster."""

    x_stage: np.ndarray
    x_cluster: np.ndarray
    y_stage: np.ndarray
    y_cluster: np.ndarray
    stages: int
    shared: int  # w entries: one per cluster when GPUs are time-sliced, else none
    keep: np.ndarray  # y pairs (indices) that held replicas in the previous placement

    @classmethod
    def of(cls, stages: tuple[Stage, ...], allowed: np.ndarray, shared: int, kept: np.ndarray) -> _Columns:
        pair_stage, pair_cluster = np.nonzero(allowed)
        gang = np.array([s.is_gang for s in stages], dtype=bool)[pair_stage]
        y_stage, y_cluster = pair_stage[~gang], pair_cluster[~gang]
        keep = np.flatnonzero(kept[y_stage, y_cluster] > 0)
        return cls(pair_stage[gang], pair_cluster[gang], y_stage, y_cluster, len(stages), shared, keep)

    @property
    def units(self) -> int:
        """The ``x`` and ``y`` entries: the ones that carry replicas."""
        return len(self.x_stage) + len(self.y_stage)

    @property
    def y(self) -> np.ndarray:
        return len(self.x_stage) + np.arange(len(self.y_stage))

    @property
    def u(self) -> np.ndarray:
        return self.units + np.arange(len(self.y_stage))

    @property
    def z(self) -> np.ndarray:
        return self.units + len(self.y_stage) + np.arange(self.stages)

    @property
    def w(self) -> np.ndarray:
        return self.units + len(self.y_stage) + self.stages + np.arange(self.shared)

    @property
    def k(self) -> np.ndarray:
        return self.units + len(self.y_stage) + self.stages + self.shared + np.arange(len(self.keep))

    @property
    def size(self) -> int:
        return self.units + len(self.y_stage) + self.stages + self.shared + len(self.keep)


@dataclass(frozen=True, eq=False)
class _Program:
    """The MILP of one part in matrix form (see the module docstring).

    ``unit_*`` describe the first ``x`` + ``y`` entries: which stage and cluster (indices in the
    part) each belongs to and how many replicas one unit of it is (the gang's replicas for
    ``x``, 1 for ``y``).
    """

    unit_stage: np.ndarray
    unit_cluster: np.ndarray
    unit_replicas: np.ndarray
    objective: np.ndarray
    placement: sp.csr_matrix  # placement @ v == 0, one row per stage
    usage: sp.csr_matrix  # usage @ v <= capacity
    capacity: np.ndarray
    linking: sp.csr_matrix  # linking @ v <= 0
    lower: np.ndarray
    upper: np.ndarray
    z: np.ndarray  # the z columns
    blocked: np.ndarray  # per stage of the part: multiCluster makes it unplaceable
    clusters: int
    gangs: int  # the x columns come first
    smallest_value: float
    #: ``objective`` without the move-cost terms: what the placement reports, so the report
    #: depends on where stages are, never on where they were.
    score: np.ndarray

    @property
    def size(self) -> int:
        return len(self.objective)

    @property
    def binaries(self) -> int:
        """Binary pairs: one ``x`` per gang pair, one ``u`` per Deployment pair."""
        return len(self.unit_stage)


def _stage_values(model: FleetModel, stages: tuple[Stage, ...]) -> np.ndarray:
    """Each stage's worth: its class weight (``EPSILON`` if 0) times its GPUs (at least 1)."""
    return np.array(
        [(model.class_weights.of(s.workload_class) or EPSILON) * max(s.total_gpus, 1) for s in stages],
        dtype=float,
    )


def _demand(stages: tuple[Stage, ...]) -> np.ndarray:
    """(3, S) per-replica demand: GPUs, cores, GiB."""
    return (
        np.array([[s.gpus, s.cpu_millis / 1000, s.memory_bytes / GIB] for s in stages], dtype=float)
        .reshape(len(stages), 3)
        .T
    )


def _capacity(model: FleetModel, clusters: tuple[Cluster, ...]) -> np.ndarray:
    """(3, C) usable capacity: GPUs, cores, GiB."""
    usable = [usable_capacity(model, c) for c in clusters]
    return (
        np.array([[g, millis / 1000, memory / GIB] for g, millis, memory in usable], dtype=float)
        .reshape(len(clusters), 3)
        .T
    )


def _build_program(
    model: FleetModel,
    scores: Scores,
    blocked: dict[int, str],
    kept: np.ndarray,
    part: _Part,
    allowed: np.ndarray | None = None,
    taken: np.ndarray | None = None,
) -> _Program:
    """The program of ``part``; ``allowed`` narrows its pairs (the large path's candidates) and
    ``taken`` (4, C) is what fixed stages already use of each cluster: GPUs, cores, GiB, and
    shared slots."""
    stages = tuple(model.stages[s] for s in part.stages)
    clusters = tuple(model.clusters[c] for c in part.clusters)
    if allowed is None:
        allowed = scores.allowed[np.ix_(part.stages, part.clusters)]
    total = scores.total[np.ix_(part.stages, part.clusters)]
    part_kept = kept[np.ix_(part.stages, part.clusters)]
    slots = slots_per_gpu(model)
    shared_stage = np.array([uses_shared_slots(model, s) for s in stages], dtype=bool)
    taken = np.zeros((4, len(clusters))) if taken is None else taken
    any_shared = bool(shared_stage.any() or taken[3].any())
    columns = _Columns.of(stages, allowed, len(clusters) if any_shared else 0, part_kept)
    replicas = np.array([s.replicas for s in stages], dtype=float)
    unit_stage = np.concatenate([columns.x_stage, columns.y_stage])
    unit_cluster = np.concatenate([columns.x_cluster, columns.y_cluster])
    unit_replicas = np.concatenate([replicas[columns.x_stage], np.ones(len(columns.y_stage))])
    values = _stage_values(model, stages)
    capacity = _capacity(model, clusters) - taken[:3]

    score = np.zeros(columns.size)
    per_replica = values[unit_stage] / replicas[unit_stage]
    score[: columns.units] = per_replica * (1.0 + total[unit_stage, unit_cluster]) * unit_replicas
    objective = score.copy()
    gang_kept = part_kept[columns.x_stage, columns.x_cluster] / replicas[columns.x_stage]
    objective[: len(columns.x_stage)] += model.move_cost * values[columns.x_stage] * gang_kept
    objective[columns.k] = model.move_cost * per_replica[len(columns.x_stage) + columns.keep]

    lower = np.zeros(columns.size)
    upper = np.ones(columns.size)
    upper[columns.y] = replicas[columns.y_stage]
    is_blocked = np.array([int(s) in blocked for s in part.stages], dtype=bool)
    upper[columns.z[is_blocked]] = 0.0
    if columns.shared:
        upper[columns.w] = capacity[0]
    upper[columns.k] = part_kept[columns.y_stage[columns.keep], columns.y_cluster[columns.keep]]
    usage, usable = _usage_rows(columns, unit_stage, unit_cluster, unit_replicas, _demand(stages),
                                shared_stage, capacity, slots, taken[3])
    return _Program(
        unit_stage=unit_stage,
        unit_cluster=unit_cluster,
        unit_replicas=unit_replicas,
        objective=objective,
        placement=_placement_rows(columns, unit_stage, unit_replicas, replicas),
        usage=usage,
        capacity=usable,
        linking=_linking_rows(model, columns, stages, clusters, replicas),
        lower=lower,
        upper=upper,
        z=columns.z,
        blocked=is_blocked,
        clusters=len(clusters),
        gangs=len(columns.x_stage),
        smallest_value=float(values.min()),
        score=score,
    )


def _sparse(
    entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]], shape: tuple[int, int]
) -> sp.csr_matrix:
    """A CSR matrix from (values, rows, columns) triplets."""
    data, rows, cols = (np.concatenate(part) for part in zip(*entries, strict=True))
    return sp.csr_matrix((data, (rows, cols)), shape=shape)


def _placement_rows(
    columns: _Columns, unit_stage: np.ndarray, unit_replicas: np.ndarray, replicas: np.ndarray
) -> sp.csr_matrix:
    """One row per stage: replicas placed - replicas * z == 0."""
    stages = np.arange(columns.stages)
    return _sparse(
        [(unit_replicas, unit_stage, np.arange(columns.units)), (-replicas, stages, columns.z)],
        (columns.stages, columns.size),
    )


def _usage_rows(
    columns: _Columns,
    unit_stage: np.ndarray,
    unit_cluster: np.ndarray,
    unit_replicas: np.ndarray,
    demand: np.ndarray,
    shared_stage: np.ndarray,
    capacity: np.ndarray,
    slots: int,
    taken_slots: np.ndarray,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``r * C + c`` for resource ``r`` (GPUs, cores, GiB) of cluster ``c``, then (with
    time-slicing) one slot row per cluster: ``slots used - slots_per_gpu * w <= 0``. A shared
    stage's GPUs count as slots, and the GPU row counts ``w`` instead."""
    clusters = capacity.shape[1]
    units = np.arange(columns.units)
    shared_unit = shared_stage[unit_stage]
    gpus = demand[0, unit_stage] * unit_replicas
    entries = [
        (np.where(shared_unit, 0.0, gpus), unit_cluster, units),
        *((demand[r, unit_stage] * unit_replicas, r * clusters + unit_cluster, units) for r in (1, 2)),
    ]
    rows = 3 * clusters
    usable = capacity.ravel()
    if columns.shared:
        cluster_ids = np.arange(clusters)
        entries += [
            (np.ones(clusters), cluster_ids, columns.w),
            (np.where(shared_unit, gpus, 0.0), rows + unit_cluster, units),
            (np.full(clusters, -float(slots)), rows + cluster_ids, columns.w),
        ]
        rows += clusters
        usable = np.concatenate([usable, -taken_slots])
    return _sparse(entries, (rows, columns.size)), usable


def _linking_rows(
    model: FleetModel,
    columns: _Columns,
    stages: tuple[Stage, ...],
    clusters: tuple[Cluster, ...],
    replicas: np.ndarray,
) -> sp.csr_matrix:
    """Rows ``<= 0``: ``y - replicas * u`` and ``min * u - y`` per Deployment pair, ``z - u`` per
    pair on a ``multiCluster`` cluster, ``k - y`` per kept pair."""
    n_y = len(columns.y_stage)
    minimum = np.array([min_replicas_per_cluster(s) for s in stages], dtype=float)[columns.y_stage]
    rows = np.arange(n_y)
    ha_of = [set(ha_clusters(model, stage)) for stage in stages]
    ha = np.array(
        [clusters[c].name in ha_of[s] for s, c in zip(columns.y_stage, columns.y_cluster, strict=True)],
        dtype=bool,
    )
    ha_pairs = np.flatnonzero(ha)
    ha_rows = 2 * n_y + np.arange(len(ha_pairs))
    keep_rows = 2 * n_y + len(ha_pairs) + np.arange(len(columns.keep))
    return _sparse(
        [
            (np.ones(n_y), rows, columns.y),
            (-replicas[columns.y_stage], rows, columns.u),
            (minimum, n_y + rows, columns.u),
            (-np.ones(n_y), n_y + rows, columns.y),
            (np.ones(len(ha_pairs)), ha_rows, columns.z[columns.y_stage[ha_pairs]]),
            (-np.ones(len(ha_pairs)), ha_rows, columns.u[ha_pairs]),
            (np.ones(len(columns.keep)), keep_rows, columns.k),
            (-np.ones(len(columns.keep)), keep_rows, columns.y[columns.keep]),
        ],
        (2 * n_y + len(ha_pairs) + len(columns.keep), columns.size),
    )


@dataclass(frozen=True, eq=False)
class _Result:
    """What one solve produced: ``values`` of ``v`` (None when there are none) and whether they
    are proven optimal (as opposed to the best found before the time limit)."""

    values: np.ndarray | None
    optimal: bool
    infeasible: bool = False


def _solve(
    program: _Program, *, require_all: bool, integral: bool, deadline: float | None
) -> _Result:
    """Solve the MILP (or its LP relaxation); ``require_all`` fixes every stage's ``z`` to 1.

    Integral values are rounded to the integers HiGHS found them within tolerance of.
    """
    _silence_highs_banner()
    lower = program.lower.copy()
    if require_all:
        if program.blocked.any():
            return _Result(values=None, optimal=False, infeasible=True)
        lower[program.z] = 1.0
    v = cp.Variable(program.size, integer=integral, bounds=[lower, program.upper])
    constraints = [program.placement @ v == 0, program.usage @ v <= program.capacity]
    if program.linking.shape[0]:
        constraints.append(program.linking @ v <= 0)
    problem = cp.Problem(cp.Maximize(program.objective @ v), constraints)
    options: dict[str, float | int | bool] = dict(_SOLVER_OPTIONS)
    if deadline is not None:
        options["time_limit"] = max(0.01, deadline - time.monotonic())
    if not require_all:
        # Stop only within half the smallest stage value of the optimum: then no stage that
        # still fits the capacity left over is left out, and the diagnosis names real misfits.
        options["mip_rel_gap"] = 0.0
        options["mip_abs_gap"] = 0.5 * program.smallest_value
    try:
        with warnings.catch_warnings():  # the status is handled below, not by a warning
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=cp.HIGHS, **options)
    except cp.error.SolverError as err:
        raise InternalError(f"the HiGHS solver failed: {err}") from err
    return _result(program, problem.status, v.value, lower, integral)


@functools.cache
def _silence_highs_banner() -> None:
    """Create the process's first HiGHS object with file descriptor 1 on /dev/null.

    HiGHS prints a banner straight to the process's stdout the first time a solver object is
    created (cvxpy creates one per solve), and fleetc's output must hold only fleetc's text.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _result(
    program: _Program, status: str, value: np.ndarray | None, lower: np.ndarray, integral: bool
) -> _Result:
    if status in _INFEASIBLE_STATUSES:
        return _Result(values=None, optimal=False, infeasible=True)
    if value is None:
        if status == cvxpy_status.USER_LIMIT:
            return _Result(values=None, optimal=False)
        raise InternalError(f"the HiGHS solver ended with status '{status}' and no placement")
    values = np.rint(value) if integral else np.asarray(value, dtype=float)
    if status in _SOLUTION_STATUSES:
        return _Result(values=values, optimal=True)
    if status == cvxpy_status.USER_LIMIT:  # HiGHS reports its last iterate, feasible or not
        return _Result(values=values if _feasible(program, values, lower) else None, optimal=False)
    raise InternalError(f"the HiGHS solver ended with status '{status}'")


def _feasible(
    program: _Program, values: np.ndarray, lower: np.ndarray, tolerance: float = 1e-6
) -> bool:
    return bool(
        np.all(values >= lower - tolerance)
        and np.all(values <= program.upper + tolerance)
        and np.all(np.abs(program.placement @ values) <= tolerance)
        and np.all(program.usage @ values <= program.capacity + tolerance)
        and np.all(program.linking @ values <= tolerance)
    )


class _OutOfTime(Exception):
    """A solve ended at its limits without a placement."""


def _time_limit_error(time_limit: float | None) -> PlacementError:
    limit = "its limits" if time_limit is None else f"the time limit of {time_limit:g}s"
    return PlacementError([f"the solver found no placement within {limit}"])


def _replicas_at(program: _Program, values: np.ndarray) -> np.ndarray:
    replicas_at = np.zeros((len(program.blocked), program.clusters), dtype=int)
    units = values[: len(program.unit_stage)] * program.unit_replicas
    np.add.at(replicas_at, (program.unit_stage, program.unit_cluster), np.rint(units).astype(int))
    return replicas_at


def _stage_placement(
    stage: Stage, clusters: tuple[Cluster, ...], replicas: np.ndarray, total: np.ndarray, reason: str
) -> StagePlacement:
    assignments = tuple(
        sorted(
            (
                Assignment(clusters[c].name, int(replicas[c]), int(replicas[c]) * stage.gpus)
                for c in np.flatnonzero(replicas)
            ),
            key=lambda a: a.cluster,
        )
    )
    placed = int(replicas.sum())
    score = float(replicas @ total) / placed if placed else 0.0
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(score, 6), reason=reason)


def _unplaced(
    model: FleetModel, scores: Scores, blocked: dict[int, str], replicas_at: np.ndarray
) -> dict[int, str]:
    """Each stage ``replicas_at`` leaves out, and why: its ``multiCluster`` conflict, else
    kube-scheduler style against the capacity the placed stages leave free."""
    left_out = [s for s in range(len(model.stages)) if not replicas_at[s].any()]
    if not left_out:
        return {}
    total = _capacity(model, model.clusters)
    free = total - _used(model, replicas_at)
    return {s: blocked.get(s) or _unplaced_reason(model, scores, s, free, total) for s in left_out}


def _used(model: FleetModel, replicas_at: np.ndarray) -> np.ndarray:
    """(3, C) capacity (GPUs, cores, GiB) ``replicas_at`` uses; shared slots count as whole
    GPUs per ``slots_per_gpu`` started."""
    demand = _demand(model.stages)
    shared = np.array([uses_shared_slots(model, s) for s in model.stages], dtype=bool)
    used = np.einsum("rs,sc->rc", demand, replicas_at)
    slots = (demand[0] * shared) @ replicas_at
    used[0] = (demand[0] * ~shared) @ replicas_at + np.ceil(slots / slots_per_gpu(model) - 1e-9)
    return used


def _unplaced_reason(
    model: FleetModel, scores: Scores, s: int, free: np.ndarray, total: np.ndarray
) -> str:
    """``0/3 clusters fit p/s: 2 have no a100, 1 has 8 of 16 free a100`` for stage index ``s``,
    against the (3, C) capacity ``free`` the placed stages leave of ``total`` (a
    ``multiCluster`` conflict is reported by :func:`_blocked` instead)."""
    stage = model.stages[s]
    why = [
        _capacity_reason(model, stage, cluster, free[:, c], total[:, c])
        if scores.allowed[s, c]
        else scores.reasons[(s, c)]
        for c, cluster in enumerate(model.clusters)
    ]
    groups = sorted(Counter(why).items(), key=lambda item: (-item[1], item[0]))
    detail = ", ".join(_counted(count, reason) for reason, count in groups)
    return f"0/{len(model.clusters)} clusters fit {stage.key}: {detail or 'the fleet has no clusters'}"


def _counted(count: int, reason: str) -> str:
    """``2 have no a100``, ``1 is too small: ...``: the verb agrees with the count."""
    is_state = reason.startswith(("too small", "cordoned", "in "))
    singular, plural = ("is", "are") if is_state else ("has", "have")
    return f"{count} {singular if count == 1 else plural} {reason}"


def _capacity_reason(
    model: FleetModel, stage: Stage, cluster: Cluster, free: np.ndarray, total: np.ndarray
) -> str:
    """What ``cluster`` lacks for ``stage`` given ``free`` of ``total`` (GPUs, cores, GiB).

    A gang needs all its replicas at once; a Deployment needs its per-cluster minimum here and
    is short overall when the clusters together have room for fewer replicas than it has.
    Time-sliced GPUs count ``1 / slots_per_gpu`` of a GPU per requested GPU.
    """
    need = stage.replicas if stage.is_gang else min_replicas_per_cluster(stage)
    demand = _demand((stage,))[:, 0]
    if uses_shared_slots(model, stage):
        demand[0] /= slots_per_gpu(model)
    for r, (have, capacity) in enumerate(zip(free, total, strict=True)):
        required = need * demand[r]
        if have < (math.ceil(required - 1e-9) if r == 0 else required) - 1e-9:
            return _free_of(r, have, capacity, cluster)
    return f"room for {_fitting_replicas(stage, demand, free)} of {stage.replicas} replicas"


def _free_of(resource: int, free: float, total: float, cluster: Cluster) -> str:
    if resource == 0:
        return f"{free:g} of {total:g} free {cluster.gpu_type}"
    if resource == 1:
        return f"{round(free, 3):g} of {round(total, 3):g} free cores"
    return f"{round(free, 2):g}Gi of {round(total, 2):g}Gi free memory"


def _fitting_replicas(stage: Stage, demand: np.ndarray, free: np.ndarray) -> int:
    needed = demand > 0
    per_resource = np.floor(free[needed] / demand[needed] + 1e-9)
    return int(min(stage.replicas, *per_resource)) if needed.any() else stage.replicas
