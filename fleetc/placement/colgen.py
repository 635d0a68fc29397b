"""The large-instance path of :func:`fleetc.placement.optimize.place` (method ``colgen-lp-round``).

The LP is solved whole over kinds of alike stages when they are few (:func:`_alike`), else by
column generation over every allowed pair while the HiGHS master holds only a few per stage
(:mod:`fleetc.placement.highs`, warm-started between rounds); the stages the LP places in whole
units keep that, a MILP rounds the rest (growing once into the fixed stages around it when it
cannot), and a greedy repair with one-level eviction places what is still out.
``docs/optimizer.md`` describes the algorithm, its budgets and its measured gaps.

Every budget here counts work (pairs priced, branch-and-bound nodes, groups of stages tried,
neighbourhood pairs), never seconds, so the same input gives the same placement on any
machine. The one clock is the user's ``--time-limit`` (``Budget.deadline``), a safety net:
when it cuts a step short the placement depends on the machine's speed, and the placement
says so (``timeLimitReached``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from fleetc.model import Stage
from fleetc.placement import highs, rules
from fleetc.placement.problem import Budget, Problem, time_sliced_gpus_per_cluster
from fleetc.placement.program import OutOfTime, Program, Solved, build_program, replicas_of, solve_program
from fleetc.placement.rules import time_sliced_gpus
from fleetc.placement.scoring import alike_rows

#: Branch-and-bound nodes each rounding MILP may explore: a count, not seconds, so that every
#: machine rounds the same way (the ones measured, up to 400 x 8,000, closed at the root node).
ROUNDING_NODES = 1_000
#: How close to an integer an LP share must be to count as placed in whole units.
_WHOLE = 1e-6


@dataclass(frozen=True, eq=False)
class _Large:
    """A large part in the column generation's terms (see ``docs/optimizer.md``).

    One column per allowed pair, in stage units: ``t[p]`` is the share of stage ``pair_stage``'s
    replicas on ``pair_cluster`` (a gang: 0 or 1; a Deployment: replicas there / replicas).
    Rows: one per stage (``sum t + unplaced = 1``), GPUs / cores / GiB per cluster, shared slots
    per cluster (time-slicing only), one per kept Deployment pair (``k - t <= 0``), the failover
    headroom rows (:class:`_Headroom`), one per ``multiCluster`` pair
    (``t + floor * unplaced >= floor``: the floor holds only while the
    stage is placed, so a stage the HA clusters cannot hold is left out, not the LP). Further
    columns: ``unplaced`` per stage (penalised), ``w`` per cluster (GPUs given to slots), ``k``
    per kept Deployment pair (the move-cost reward).
    """

    pair_stage: np.ndarray  # sorted, int32
    pair_cluster: np.ndarray  # int32
    gain: np.ndarray  # value_s * (1 + total): what placing the whole stage there scores
    move: np.ndarray  # the move-cost reward of a gang pair on its previous cluster (else 0)
    pair_lower: np.ndarray  # min / replicas on a multiCluster cluster, else 0: t's floor while placed
    coefficients: np.ndarray  # (4, S): per stage unit, exclusive GPUs, cores, GiB, shared slots
    replicas: np.ndarray  # (S,) float
    stages: int
    clusters: int
    shared: bool  # slot rows and w columns exist
    slots: np.ndarray  # (C,) slots per GPU (1 where the device plugin is not configured)
    unit: np.ndarray  # (C,) GPUs turned time-sliced at once (whole nodes where configured)
    capacity: np.ndarray  # (3, C) usable
    keep_pair: np.ndarray  # kept Deployment pairs (indices into the pairs)
    keep_upper: np.ndarray  # their previous share (previous replicas / replicas)
    keep_reward: np.ndarray  # move_cost * value_s per unit of k
    penalty: np.ndarray  # per stage and unit left unplaced
    headroom: _Headroom
    caps: _Caps
    #: (S,) stages each row stands for: 1, or in the LP of alike stages (:func:`_alike`) how
    #: many stages the row's representative stands for (its row and its columns count units of them)
    count: np.ndarray

    @cached_property
    def pair_range(self) -> np.ndarray:
        """(S + 1,) stage ``s``'s pairs are ``pair_range[s]:pair_range[s + 1]``."""
        return np.searchsorted(self.pair_stage, np.arange(self.stages + 1))

    @cached_property
    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each stage's pairs start, for the stages that have any (what ``reduceat``
        takes); and those stages."""
        stages = np.flatnonzero(np.diff(self.pair_range))
        return self.pair_range[stages], stages

    @cached_property
    def best_gain(self) -> np.ndarray:
        """(S,) each stage's largest gain over its pairs (-inf without pairs)."""
        best = np.full(self.stages, -np.inf)
        starts, stages = self.segments
        if len(starts):
            best[stages] = np.maximum.reduceat(self.gain, starts)
        return best

    @cached_property
    def floored(self) -> np.ndarray:
        """The pairs with a lower bound (multiCluster minimums)."""
        return np.flatnonzero(self.pair_lower > 0)

    @property
    def headroom_rows(self) -> int:
        """The first failover headroom row (after the stage, capacity and kept-pair rows)."""
        return self.stages + (4 if self.shared else 3) * self.clusters + len(self.keep_pair)

    @property
    def cap_rows(self) -> int:
        """The first team quota or cost cap row (after the failover headroom rows)."""
        return self.headroom_rows + len(self.headroom.bound)

    @property
    def relaxed_rows(self) -> int:
        """The rows before the multiCluster rows: the stage rows, then the ``<=`` rows the
        Lagrangian bound relaxes (capacity, kept pairs, failover headroom, caps)."""
        return self.cap_rows + len(self.caps.bound)

    def headroom_coefficients(self, row: int, pairs: np.ndarray) -> np.ndarray:
        """Failover headroom row ``row``'s coefficients of ``pairs`` (per stage unit)."""
        return self.headroom.coefficients(row, self.pair_stage[pairs], self.pair_cluster[pairs],
                                          self.coefficients, self.slots)

    @property
    def rows(self) -> int:
        return self.relaxed_rows + len(self.floored)

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
        for row in range(len(self.headroom.bound)):
            coefficient = self.headroom_coefficients(row, pairs)
            nonzero = coefficient != 0
            rows.append(np.full(int(nonzero.sum()), self.headroom_rows + row))
            data.append(coefficient[nonzero])
            index.append(cols[nonzero])
        for row in range(len(self.caps.bound)):
            coefficient = self.caps.coefficients(row, stage, cluster) * self.replicas[stage] * self.caps.scale[row]
            nonzero = coefficient != 0
            rows.append(np.full(int(nonzero.sum()), self.cap_rows + row))
            data.append(coefficient[nonzero])
            index.append(cols[nonzero])
        is_floored = self.pair_lower[pairs] > 0
        if is_floored.any():
            rows.append(self.relaxed_rows + np.searchsorted(self.floored, pairs[is_floored]))
            data.append(np.ones(int(is_floored.sum())))
            index.append(cols[is_floored])
        return sp.csc_matrix(
            (np.concatenate(data), (np.concatenate(rows), np.concatenate(index))), shape=(self.rows, n)
        )

    def fixed_block(self) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
        """The columns that are always there: unplaced per stage, w per cluster, k per kept pair;
        with their upper bounds and their (maximised) objective without penalties."""
        s, c, q = self.stages, self.clusters, len(self.keep_pair)
        floored = self.floored
        rows = [np.arange(s), self.relaxed_rows + np.arange(len(floored))]
        data = [np.ones(s), self.pair_lower[floored]]
        index = [np.arange(s), self.pair_stage[floored]]
        upper = [self.count]
        gain = [np.zeros(s)]
        if self.shared:
            w = s + np.arange(c)
            rows += [self.stages + np.arange(c), self.stages + 3 * c + np.arange(c)]
            data += [self.unit, -self.slots * self.unit]  # w: time-sliced units (nodes)
            index += [w, w]
            for row in np.flatnonzero(self.headroom.resource == 0):  # w counts units of GPUs the others use
                others = np.flatnonzero(self.headroom.others[row])
                rows.append(np.full(len(others), self.headroom_rows + row))
                data.append(self.unit[others].astype(float))
                index.append(w[others])
            upper.append(np.floor(np.maximum(self.capacity[0], 0.0) / self.unit))
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
        upper = [self.count, self.capacity.ravel()]
        if self.shared:
            upper.append(np.zeros(c))
        upper.append(np.zeros(len(self.keep_pair)))
        upper.append(self.headroom.bound)
        upper.append(self.caps.bound * self.caps.scale)
        upper.append(np.full(len(self.floored), highs.INF))
        lower = np.full(self.rows, -highs.INF)
        lower[: self.stages] = self.count
        lower[self.relaxed_rows:] = self.pair_lower[self.floored]
        return lower, np.concatenate(upper)

    def reduced_costs(self, row_dual: np.ndarray, objective: np.ndarray) -> np.ndarray:
        """``-objective - A^T row_dual`` of every pair column (the master minimises)."""
        c = self.clusters
        reduced: np.ndarray = -objective - row_dual[self.pair_stage]
        for r in range(4 if self.shared else 3):
            dual = row_dual[self.stages + r * c: self.stages + (r + 1) * c]
            if dual.any():  # a resource no cluster is short of costs nothing: skip 10M products
                reduced -= self.coefficients[r, self.pair_stage] * dual[self.pair_cluster]
        every = np.arange(len(self.pair_stage))
        for row in np.flatnonzero(row_dual[self.headroom_rows: self.cap_rows]):
            reduced -= self.headroom_coefficients(int(row), every) * row_dual[self.headroom_rows + row]
        for row in np.flatnonzero(row_dual[self.cap_rows: self.relaxed_rows]):
            coefficient = self.caps.coefficients(int(row), self.pair_stage, self.pair_cluster)
            price = self.caps.scale[row] * row_dual[self.cap_rows + row]
            reduced -= coefficient * self.replicas[self.pair_stage] * price
        return reduced


#: Relative objective a later cluster (by name) gives up against an equal earlier one.
TIE_BREAK = 1e-6
#: What leaving a unit of a stage out costs in the master, in stage values. Any penalty keeps
#: the bound valid (the master's gain at its optimum is at least the LP optimum with every stage
#: placed); a large one makes the master place whatever fits, but inflates the duals.
UNPLACED_PENALTY = 10.0
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
#: A master holds every pair from the start when there are at most this many: the LP is then
#: solved whole in one round (the LP of alike stages, :func:`_alike`, usually is).
WHOLE_LP_PAIRS = 300_000
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
#: A stage's extra columns in a round improve the master at least this share of its best one.
SHORTLIST = 0.5
#: Improving pair columns each stage may add to the master per round (most improving first).
COLUMNS_PER_ROUND = 10
#: Reduced cost below which a column improves the master, relative to the largest gain.
PRICING_TOLERANCE = 1e-7


def _large(problem: Problem, count: np.ndarray | None = None) -> _Large:
    """``problem`` in the column generation's terms; ``count``: how many stages each of its
    stages stands for (None: one each)."""
    allowed = problem.allowed.copy()
    allowed[problem.blocked] = False
    pair_stage, pair_cluster = (a.astype(np.int32) for a in np.nonzero(allowed))
    del allowed
    total = problem.total_at(pair_stage, pair_cluster)
    values, replicas, gang, shared_stage = problem.values, problem.replicas, problem.gang, problem.shared
    n_clusters = len(problem.clusters)
    demand = problem.demand * replicas
    coefficients = np.stack([np.where(shared_stage, 0.0, demand[0]), demand[1], demand[2],
                             np.where(shared_stage, demand[0], 0.0)])
    previous = problem.previous_at(pair_stage, pair_cluster)
    move = np.where(gang[pair_stage], problem.move_cost * values[pair_stage] * previous / replicas[pair_stage], 0.0)
    keep_pair = np.flatnonzero((previous > 0) & ~gang[pair_stage])
    pair_lower = np.zeros(len(pair_stage))
    key = pair_stage.astype(np.int64) * n_clusters + pair_cluster
    for s in np.flatnonzero(~problem.blocked).tolist():
        for c in problem.ha[s]:
            hit = np.searchsorted(key, s * n_clusters + c)  # not blocked: allowed here
            pair_lower[hit] = problem.minimum[s] / replicas[s]
    # Ties go to the first cluster by name: a later cluster gives up a relative TIE_BREAK at most
    # (the objective is computed from the scores, the bound divides by 1 - TIE_BREAK).
    gain = values[pair_stage] * (1.0 + total) * (1.0 - TIE_BREAK * pair_cluster / n_clusters)
    return _Large(
        pair_stage=pair_stage,
        pair_cluster=pair_cluster,
        gain=gain,
        move=move,
        pair_lower=pair_lower,
        coefficients=coefficients,
        replicas=replicas,
        stages=len(problem.stages),
        clusters=n_clusters,
        shared=bool(shared_stage.any()),
        slots=problem.slots,
        unit=problem.unit,
        capacity=problem.capacity,
        keep_pair=keep_pair,
        keep_upper=previous[keep_pair] / replicas[pair_stage[keep_pair]],
        keep_reward=problem.move_cost * values[pair_stage[keep_pair]],
        penalty=UNPLACED_PENALTY * values,
        headroom=_Headroom.of(problem),
        caps=_Caps.of(problem),
        count=np.ones(len(problem.stages)) if count is None else count.astype(float),
    )


@dataclass(frozen=True, eq=False)
class _Caps:
    """The team quotas and cost caps of a problem (:class:`~fleetc.placement.problem.CapRows`)
    as rows, in :func:`~fleetc.placement.program.cap_rows`' order (per cap, one row per GPU type
    it caps, then its cost): row ``i`` covers the stages ``members[i]`` on the clusters ``on[i]``
    and counts, per replica, quota slots (``cost[i]`` False) or cost micros (True), at most
    ``bound[i]``. The master LP carries cost rows in currency units (``scale``), which keeps
    its coefficients near the others'; everything else counts the rule's integers."""

    problem: Problem
    members: np.ndarray  # (K, S) bool
    on: np.ndarray  # (K, C) bool
    cost: np.ndarray  # (K,) bool
    bound: np.ndarray  # (K,)

    @classmethod
    def of(cls, problem: Problem) -> _Caps:
        members, on, cost, bound = [], [], [], []
        everywhere = np.ones(len(problem.clusters), dtype=bool)
        for cap in problem.caps:
            for _gpu_type, of_type, quota in cap.quotas:
                members.append(cap.members)
                on.append(of_type)
                cost.append(False)
                bound.append(float(quota))
            if cap.cost is not None:
                members.append(cap.members)
                on.append(everywhere)
                cost.append(True)
                bound.append(float(cap.cost))
        n_stages, n_clusters = len(problem.stages), len(problem.clusters)
        return cls(problem, np.array(members, dtype=bool).reshape(len(members), n_stages),
                   np.array(on, dtype=bool).reshape(len(on), n_clusters), np.array(cost, dtype=bool),
                   np.array(bound, dtype=float))

    @property
    def scale(self) -> np.ndarray:
        """(K,) what the master LP multiplies each row by."""
        scale: np.ndarray = np.where(self.cost, 1.0 / rules.MICROS, 1.0)
        return scale

    def coefficients(self, row: int, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """Row ``row``'s use per replica of each (``stage``, ``cluster``) pair."""
        hit = self.members[row, stage] & self.on[row, cluster]
        per_replica = self.problem.cost_at(stage, cluster) if self.cost[row] else self.problem.quota_at(stage, cluster)
        coefficient: np.ndarray = np.where(hit, per_replica, 0.0)
        return coefficient

    @cached_property
    def rows_of(self) -> list[list[int]]:
        """Per stage, the rows that cover it (a few: its team's and its pipeline's)."""
        rows: list[list[int]] = [[] for _ in range(self.members.shape[1])]
        for row, s in zip(*np.nonzero(self.members), strict=True):
            rows[int(s)].append(int(row))
        return rows

    def per_replica(self, row: int, s: int, c: int) -> float:
        """:meth:`coefficients` of one pair (the same operations on scalars), for the repair."""
        if not (self.members[row, s] and self.on[row, c]):
            return 0.0
        if self.problem.counts_per_pair:  # throughput or whole GPUs by cluster: each pair's own count
            return float(self.coefficients(row, np.array([s]), np.array([c]))[0])
        if not self.cost[row]:
            return float(self.problem.quota_unit[s])
        b, p = self.problem.billed, self.problem.prices
        return float(round(rules.MICROS * (b[0, s] * p[0, c] + b[1, s] * p[1, c] + b[2, s] * p[2, c])))

    def used(self, replicas_at: np.ndarray) -> np.ndarray:
        """(K,) what ``replicas_at`` takes of each row."""
        stage, cluster = np.nonzero(replicas_at)
        count = replicas_at[stage, cluster]
        return np.array([float(self.coefficients(row, stage, cluster) @ count) for row in range(len(self.bound))])


@dataclass(frozen=True, eq=False)
class _Headroom:
    """The failover headroom rule (:func:`~fleetc.placement.rules.failover_groups`) as rows over
    a problem: row ``i`` says that what the HA clusters other than ``lost[i]`` use of
    ``resource[i]`` (GPUs, cores, GiB), plus what the platform's serving stages use on
    ``lost[i]``, stays within what those others may use (``bound[i]``). Time-sliced GPUs count
    as ``1 / slots`` of a GPU on ``lost[i]`` (its slots per GPU); on the others they count through ``w`` (the
    master) or as that fraction (the greedy repair)."""

    lost: np.ndarray  # (H,) cluster index
    resource: np.ndarray  # (H,)
    others: np.ndarray  # (H, C) bool
    serving: np.ndarray  # (H, S) bool
    bound: np.ndarray  # (H,)
    keys: list[tuple[int, int]]  # per row: the group's index, the lost cluster's index in the model
    members: np.ndarray  # the clusters of every group

    @classmethod
    def of(cls, problem: Problem) -> _Headroom:
        clusters, capacity = len(problem.clusters), problem.capacity
        keys, lost, resource, others, serving = [], [], [], [], []
        groups = rules.failover_groups(problem.model)
        for group, (ha, is_serving) in enumerate(problem.failover):
            if not is_serving.any() or len(ha) < len(groups[group][1]):
                continue  # the group's serving stages are in another component
            for h in ha:
                mask = np.zeros(clusters, dtype=bool)
                mask[[o for o in ha if o != h]] = True
                for r in range(3):
                    keys.append((group, int(problem.part.clusters[h])))
                    lost.append(h)
                    resource.append(r)
                    others.append(mask)
                    serving.append(is_serving)
        others_matrix = np.array(others, dtype=bool).reshape(len(others), clusters)
        resources = np.array(resource, dtype=np.int64)
        bound = np.array([capacity[r, mask].sum() for r, mask in zip(resources, others_matrix, strict=True)])
        return cls(np.array(lost, dtype=np.int64), resources, others_matrix,
                   np.array(serving, dtype=bool).reshape(len(serving), len(problem.stages)), bound, keys,
                   np.unique(np.array(lost, dtype=np.int64)))

    def coefficients(self, row: int, stage: np.ndarray, cluster: np.ndarray, per_unit: np.ndarray,
                     slots: np.ndarray, shared_on_others: bool = False) -> np.ndarray:
        """Row ``row``'s coefficients of (``stage``, ``cluster``) pairs given the (4, S)
        ``per_unit`` use (exclusive GPUs, cores, GiB, shared slots): on the others, their use
        of the resource (exclusive GPUs only, shared ones counting through ``w``, unless
        ``shared_on_others``); on the lost cluster, a serving stage's use (shared slots as
        ``1 / slots`` of a GPU each, ``slots`` (C,) per GPU of each cluster)."""
        r = int(self.resource[row])
        need = per_unit[0, stage] + per_unit[3, stage] / slots[cluster] if r == 0 else per_unit[r, stage]
        use = need if shared_on_others else per_unit[r, stage]
        on_lost = self.serving[row, stage] & (cluster == self.lost[row])
        coefficient: np.ndarray = np.where(self.others[row, cluster], use, 0.0) + np.where(on_lost, need, 0.0)
        return coefficient

    def fixed_need(self, replicas_at: np.ndarray, per_replica: np.ndarray, slots: np.ndarray
                   ) -> dict[tuple[int, int], np.ndarray]:
        """What the serving stages placed in ``replicas_at`` need back per (group, lost cluster's
        index in the model): GPUs (shared slots as fractions), cores, GiB."""
        need: dict[tuple[int, int], np.ndarray] = {}
        for row, key in enumerate(self.keys):
            r, h = int(self.resource[row]), int(self.lost[row])
            use = per_replica[0] + per_replica[3] / slots[h] if r == 0 else per_replica[r]
            need.setdefault(key, np.zeros(3))[r] = float((replicas_at[:, h] * self.serving[row]) @ use)
        return need


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
    """The first restricted master: every pair when there are at most :data:`WHOLE_LP_PAIRS`
    (the LP is then solved whole, in one round), else a start (:func:`_start_pairs`), the
    contenders, and the multiCluster, kept and previous pairs."""
    holds = np.zeros(len(large.pair_stage), dtype=bool)
    if len(large.pair_stage) <= WHOLE_LP_PAIRS:
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
    master = _start_master(lp)
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
    in_lp = np.bincount(large.pair_stage, minlength=large.stages) > 0
    return bool(np.any(in_lp & ~replicas_at.any(axis=1)))


def _solve_by_kinds(problem: Problem, large: _Large, kinds: tuple[np.ndarray, np.ndarray], budget: Budget
                    ) -> Solved:
    """Place stages that all differ (``bench.generate --diverse``) from the LP of
    :func:`_least_demand_bound`'s relaxation, whose kinds are stages alike but for cores and
    memory, each asking the least of its stages: spread over the stages (:func:`_spread`),
    the stages it places whole where they fit as they are, an LP over the rest and the stages
    of the clusters they overfill (:func:`_round_by_lp`), a greedy repair, then relocations
    and swaps of gangs (:func:`_improve`). The bound is that relaxation's.

    Column generation over 20,000 such stages re-solved its master for 30-90 s of CPU a round
    and stopped at its work budget (1,000 x 20,000: ~320 s of CPU in all); the relaxation's LP
    has one row per kind and converges in a few cheap rounds."""
    lp, master, relaxed = _relaxation(problem, large, kinds, budget.deadline, budget.on_gap)
    r = _Rounding(problem, large, _spread(large, lp, relaxed, kinds[0]), budget.deadline)
    replicas_at, fixed = _whole_units(r)
    rest = np.flatnonzero(~fixed & ~problem.blocked)
    if len(rest):
        _round_by_lp(r, rest, replicas_at)
    _repair(problem, large, replicas_at)
    _improve(problem, large, replicas_at, budget.deadline)
    proven = _reach(r, replicas_at, problem.blocked)
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
        lp, master, relaxed = _relaxation(problem, large, kinds, deadline)
    except OutOfTime:  # the user's deadline: the bound of the LP over stages stands
        return math.inf
    return _bound(lp, master, relaxed, left_out, deadline)


def _relaxation(problem: Problem, large: _Large, kinds: tuple[np.ndarray, np.ndarray], deadline: float | None,
                on_gap: Callable[[float], None] = lambda gap: None) -> tuple[_Large, _Master, _Relaxed]:
    """The LP of :func:`_least_demand_bound`'s relaxation over ``kinds`` (each stage's kind,
    each kind's first stage), solved by column generation: its terms, master and solution."""
    type_of, representatives = kinds
    lp = _large(problem.restrict(representatives), np.bincount(type_of))
    least = lp.coefficients.copy()
    for r in (1, 2):  # cores, GiB
        least[r] = np.inf
        np.minimum.at(least[r], type_of, large.coefficients[r])
    lp = replace(lp, coefficients=least)
    master = _start_master(lp)
    return lp, master, _generate_columns(lp, master, lp.gain + lp.move, deadline, on_gap)


def _alike(problem: Problem, large: _Large, cores_and_memory: bool = True
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """Stages alike in every number the LP reads, as kinds: each stage's kind (numbered by
    their first stage) and each kind's first stage; None when the kinds are more than
    :data:`ALIKE_SHARE` of the stages, or their LP has more than :data:`WHOLE_LP_PAIRS` pairs.
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
    n_stages = large.stages
    if n_stages < 2:
        return None
    own = problem.blocked | np.array([len(h) > 0 for h in problem.ha], dtype=bool)
    own[large.pair_stage[(large.move > 0)]] = True
    own[large.pair_stage[large.keep_pair]] = True
    features = [problem.values, problem.replicas, problem.least, problem.gang, problem.minimum, problem.shared,
                *(problem.demand if cores_and_memory else problem.demand[:1]),
                *problem.type_gpus.T, *(serving for _, serving in problem.failover),
                np.where(own, np.arange(n_stages), -1)]
    if problem.caps:
        features += [*(cap.members for cap in problem.caps), problem.quota_unit, *problem.billed]
    rows = np.empty((n_stages, len(features) + large.clusters))
    rows[:, : len(features)] = np.stack(features, axis=1)
    for start in range(0, n_stages, 1024):  # the scores a block at a time: no second copy of them all
        block = problem.part.stages[start: start + 1024]
        rows[start: start + len(block), len(features):] = problem.total[np.ix_(block, problem.part.clusters)]
    np.copyto(rows[:, len(features):], -np.inf, where=~(problem.allowed & ~problem.blocked[:, None]))
    type_of, representatives = alike_rows(rows)  # kinds numbered by their first stage
    del rows
    if len(representatives) > ALIKE_SHARE * n_stages:
        return None
    if cores_and_memory and int(np.diff(large.pair_range)[representatives].sum()) > WHOLE_LP_PAIRS:
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
    per_stage = np.diff(large.pair_range)
    offset = np.repeat(lp.pair_range[type_of] - large.pair_range[:-1], per_stage)
    reduced = relaxed.reduced[np.arange(len(large.pair_stage)) + offset]
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


#: Extra clusters per left-over stage in the rounding MILP, by the LP's reduced cost.
ALTERNATIVES = 3
#: Candidate pairs above which the rounding MILP grows no further.
ROUNDING_PAIRS = 50_000


@dataclass(frozen=True, eq=False)
class _Rounding:
    """What every rounding step reads: the component's problem, in the column generation's
    terms, and its LP solution."""

    problem: Problem
    large: _Large
    relaxed: _Relaxed
    deadline: float | None


def _round(r: _Rounding) -> tuple[np.ndarray, bool]:
    """(S, C) replicas of the part: the stages the LP places in whole units as it places them
    (:func:`_whole_units`), a MILP over the rest on their LP clusters plus a few alternatives,
    a greedy repair, and exact MILPs around what is still left out (:func:`_reach`); and
    whether what it leaves out is proven not to fit."""
    replicas_at, fixed = _whole_units(r)
    rest = np.flatnonzero(~fixed & ~r.problem.blocked)
    if len(rest):
        _round_rest(r, rest, replicas_at)
    _repair(r.problem, r.large, replicas_at)
    return replicas_at, _reach(r, replicas_at, r.problem.blocked)


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


def _room(large: _Large, replicas_at: np.ndarray) -> _Room:
    """The room ``replicas_at`` leaves, as the greedy repair counts it."""
    return _Room(large.capacity, _taken(large, replicas_at), large.slots, large.unit, large.headroom,
                 large.coefficients / large.replicas, replicas_at, large.caps)


def _take_plan(room: _Room, s: int, plan: dict[int, int]) -> bool:
    """Take ``plan`` (cluster -> replicas of stage ``s``) from ``room`` if all of it fits, one
    cluster after the other (failover headroom and caps couple them); whether it did."""
    taken: list[tuple[int, int]] = []
    for c, count in plan.items():
        if room.fits(c, s) < count:
            for d, back in taken:
                room.take(d, s, -back)
            return False
        room.take(c, s, count)
        taken.append((c, count))
    return True


#: Pairs above which a neighbourhood of :func:`_reach` grows no further.
REACH_PAIRS = 60_000
#: Pairs the neighbourhoods :func:`_reach` tries may hold in all: a measure of work, not of
#: time, so that every machine tries the same neighbourhoods and places the same stages.
REACH_WORK = 2 * REACH_PAIRS
#: Branch-and-bound nodes one neighbourhood MILP may explore (a count, like the rest of the
#: budget; the ones measured closed at the root node, in 1-13 s here).
REACH_NODES = 1_000


def _reach(r: _Rounding, replicas_at: np.ndarray, is_blocked: np.ndarray) -> bool:
    """Place the stages the repair left out (in place) by an exact MILP over a neighbourhood:
    them and every stage on a cluster they may use, each free to go to any cluster it may use,
    in the capacity the other stages leave, every one of them placed. When that is impossible
    the neighbourhood grows by the stages on the clusters its stages may use, up to
    :data:`REACH_PAIRS` pairs, while the neighbourhoods tried hold :data:`REACH_WORK` pairs in
    all (each MILP within :data:`REACH_NODES` nodes; the user's deadline a safety net).

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
    while True:
        grown = members | replicas_at[:, allowed[members].any(axis=0)].any(axis=1)
        stages = np.flatnonzero(grown)
        pairs = int(allowed[stages].sum())
        work += pairs
        if pairs > REACH_PAIRS or work > REACH_WORK or _past(r.deadline):
            return False
        columns = np.union1d(np.flatnonzero(allowed[stages].any(axis=0)), large.headroom.members)
        before = replicas_at[stages].copy()
        replicas_at[stages] = 0
        program = build_program(r.problem.restrict(stages, columns), allowed=allowed[np.ix_(stages, columns)],
                                taken=_taken(large, replicas_at)[:, columns], fixed_need=_fixed_need(r, replicas_at),
                                cap_taken=large.caps.used(replicas_at))
        result = solve_program(program, Budget(r.deadline), require_all=True, integral=True, nodes=REACH_NODES)
        if result.values is not None:
            replicas_at[np.ix_(stages, columns)] = replicas_of(program, result.values)
            return True
        replicas_at[stages] = before
        closed = not np.any(replicas_at[:, columns], axis=1)[~grown].any()  # np.any: an array to mypy too
        if closed and result.infeasible:
            _place_most(r, program, stages, columns, replicas_at)
        if not result.infeasible or closed:
            return result.infeasible and closed
        members = grown


def _place_most(r: _Rounding, program: Program, stages: np.ndarray, columns: np.ndarray,
                replicas_at: np.ndarray) -> None:
    """Re-place ``stages`` (in place), which cannot all be placed, by the exact path's second
    MILP over ``program``: the most valuable placement, within half the smallest stage value of
    optimal; kept when it places more stages than they have now, or as many scoring more."""
    if _past(r.deadline):
        return
    result = solve_program(program, Budget(r.deadline), require_all=False, integral=True,
                           absolute_gap=0.5 * program.smallest_value, nodes=REACH_NODES)
    if result.values is None:
        return
    after = np.zeros_like(replicas_at[stages])
    after[:, columns] = replicas_of(program, result.values)
    before = replicas_at[stages]
    placed = (int(after.any(axis=1).sum()), r.problem.score_of(after, stages))
    if placed > (int(before.any(axis=1).sum()), r.problem.score_of(before, stages)):
        replicas_at[stages] = after


def _past(deadline: float | None) -> bool:
    """Whether the user's deadline (``--time-limit``, the only clock here) has passed."""
    return deadline is not None and time.monotonic() >= deadline


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
                               nodes=ROUNDING_NODES)
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


def _free(large: _Large, taken: np.ndarray) -> np.ndarray:
    """(4, C) room left per cluster in the master's rows (exclusive GPUs, cores, GiB, shared
    slots), counting shared slots against GPUs as the MILP does when they take whole GPUs."""
    unshared = large.capacity[0] - taken[0]
    shared_gpus = time_sliced_gpus_per_cluster(taken[3], large.slots, large.unit)
    whole_units = np.floor(np.maximum(unshared, 0.0) / large.unit) * large.unit
    return np.stack([unshared - shared_gpus, large.capacity[1] - taken[1],
                     large.capacity[2] - taken[2], whole_units * large.slots - taken[3]])


def _fixed_need(r: _Rounding, replicas_at: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """What the serving stages placed in ``replicas_at`` need back per (group, lost cluster)."""
    large = r.large
    return large.headroom.fixed_need(replicas_at, large.coefficients / large.replicas, large.slots)


def _taken(large: _Large, replicas_at: np.ndarray) -> np.ndarray:
    """(4, C) what ``replicas_at`` uses per cluster: exclusive GPUs, cores, GiB, shared slots."""
    stage, cluster = np.nonzero(replicas_at)
    count = replicas_at[stage, cluster]
    per_replica = large.coefficients / large.replicas
    return np.stack([
        np.bincount(cluster, weights=per_replica[r, stage] * count, minlength=large.clusters) for r in range(4)
    ]).astype(float)


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

    def plan_of(s: int, avoid: int = -1) -> dict[int, int]:
        pairs = np.arange(starts[s], starts[s + 1])
        by_score = [c for c in large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]].tolist()
                    if c != avoid]
        ha = list(problem.ha[s])
        return _greedy_plan(stages[s], s, int(problem.minimum[s]), by_score, ha, room, int(problem.least[s]))

    def apply(s: int, plan: dict[int, int], sign: int) -> None:
        for c, count in plan.items():
            replicas_at[s, c] += sign * count

    moves = EVICTION_MOVES
    for s in left:
        plan = plan_of(s)
        if not plan and moves > 0:
            plan, tried = _evict(s, plan_of, apply, replicas_at, room, large, moves)
            moves -= tried
        apply(s, plan, 1)


#: Clusters the eviction repair tries per left-out stage, and stages it may move off one cluster.
EVICTION_CLUSTERS = 20
EVICTION_STAGES = 8
#: Groups of stages the eviction repair may try to move in all (a count, not seconds, so the
#: repair ends the same way on every machine; the plain greedy pass always runs to the end).
EVICTION_MOVES = 5_000


def _evict(s: int, plan_of: Callable[..., dict[int, int]], apply: Callable[[int, dict[int, int], int], None],
           replicas_at: np.ndarray, room: _Room, large: _Large, budget: int) -> tuple[dict[int, int], int]:
    """Make room for stage ``s`` on one of its best clusters by moving stages there elsewhere
    (a one-level ejection chain: each resident alone, then the first 2, 3, ... together, the
    most movable first), trying at most ``budget`` groups; the plan for ``s`` ({} when nothing
    changed) and the groups tried."""
    starts = large.pair_range
    pairs = np.arange(starts[s], starts[s + 1])
    clusters = large.pair_cluster[pairs[np.argsort(-large.gain[pairs], kind="stable")]][:EVICTION_CLUSTERS]
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
            plan = _move_away(s, c, group, plan_of, apply, replicas_at, room)
            if plan:
                return plan, tried
    return {}, tried


def _move_away(s: int, c: int, group: list[int], plan_of: Callable[..., dict[int, int]],
               apply: Callable[[int, dict[int, int], int], None], replicas_at: np.ndarray,
               room: _Room) -> dict[int, int]:
    """Take the ``group`` of stages off (all their clusters), place ``s``, re-place the group
    avoiding ``c``; the plan for ``s`` when all of that works, else {} with nothing changed."""
    saved = room.saved()
    moved = []
    for resident in group:
        old = {int(k): int(replicas_at[resident, k]) for k in np.flatnonzero(replicas_at[resident])}
        for k, count in old.items():
            room.take(k, resident, -count)
        apply(resident, old, -1)
        moved.append((resident, old))
    plan = plan_of(s)
    replaced = [(resident, plan_of(resident, avoid=c)) for resident, _ in moved] if plan else []
    if plan and all(new for _, new in replaced):
        for resident, new in replaced:
            apply(resident, new, 1)
        return plan
    room.restore(saved)
    for resident, old in moved:
        apply(resident, old, 1)
    return {}


class _Room:
    """Residual capacity per cluster, and failover headroom left per headroom row, while the
    greedy repair places stages (``per_replica`` (4, S): exclusive GPUs, cores, GiB, slots).

    The GPU rows of the headroom are counted as the rule is (:func:`rules.failover_shortfalls`),
    in slots and whole time-sliced units: what the serving stages need back for the lost cluster
    (``lost_slots``), against the GPUs the other clusters leave free, their time-sliced slots
    taking whole units (:func:`rules.time_sliced_gpus`). Counted as fractions of a GPU there,
    the repair could place replicas the verifier refuses."""

    def __init__(self, capacity: np.ndarray, taken: np.ndarray, slots: np.ndarray, unit: np.ndarray,
                 headroom: _Headroom, per_replica: np.ndarray, replicas_at: np.ndarray, caps: _Caps) -> None:
        self.capacity = capacity
        self.taken = taken.copy()
        self.slots = slots  # (C,) slots per GPU: 1 where the device plugin is not configured
        self.unit = unit  # GPUs turned time-sliced at once: slots come in whole nodes where configured
        self.headroom = headroom
        self.per_replica = per_replica
        stage, cluster = np.nonzero(replicas_at)
        count = replicas_at[stage, cluster]
        self.used = np.array([self._headroom_of(row, stage, cluster) @ count for row in range(len(headroom.bound))])
        self.caps = caps
        self.capped = caps.used(replicas_at)
        self.lost_slots = np.array([self._lost_slots_of(row, stage, cluster) @ count
                                    for row in range(len(headroom.bound))])

    def _lost_slots_of(self, row: int, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """Slots per replica a serving stage on row ``row``'s lost cluster needs back (GPU rows)."""
        if self.headroom.resource[row] != 0:
            return np.zeros(len(stage))
        on_lost = self.headroom.serving[row, stage] & (cluster == self.headroom.lost[row])
        scale = int(max(self.slots.max(initial=1), 1))  # the rule's slots per GPU; 1 where not time-sliced
        per_slot = scale // np.maximum(self.slots[cluster], 1)
        need: np.ndarray = np.where(on_lost, self.per_replica[0, stage] * scale + self.per_replica[3, stage] * per_slot,
                                    0.0)
        return need

    def _headroom_of(self, row: int, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        return self.headroom.coefficients(row, stage, cluster, self.per_replica, self.slots, shared_on_others=True)

    def saved(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.taken.copy(), self.used.copy(), self.capped.copy(), self.lost_slots.copy()

    def restore(self, saved: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.taken, self.used, self.capped, self.lost_slots = saved

    def fits(self, c: int, s: int) -> int:
        """Replicas of stage ``s`` that fit ``c``: its capacity, and the failover headroom."""
        demand = self.per_replica[:, s]
        limits = [self.capacity_fits(c, demand)]
        gpu_rows = []
        for row in range(len(self.headroom.bound)):
            coefficient = float(self._headroom_of(row, np.array([s]), np.array([c]))[0])
            if coefficient <= 0:
                continue
            if self.headroom.resource[row] == 0:
                gpu_rows.append(row)
            else:
                limits.append(math.floor((self.headroom.bound[row] - self.used[row]) / coefficient + 1e-9))
        for row in self.caps.rows_of[s]:  # whole numbers: integer division is exact
            coefficient = self.caps.per_replica(row, s, c)
            if coefficient > 0:
                limits.append(int((self.caps.bound[row] - self.capped[row]) // coefficient))
        fitting = max(0, min(limits))
        for row in gpu_rows:
            while fitting > 0 and not self._gpu_headroom_holds(row, c, s, fitting):
                fitting -= 1
        return fitting

    def _gpu_headroom_holds(self, row: int, c: int, s: int, replicas: int) -> bool:
        """Whether GPU headroom row ``row`` holds with ``replicas`` more of stage ``s`` on ``c``:
        the serving stages' slots on the lost cluster fit in the slots of the GPUs the others
        leave free, time-sliced ones taking whole units (the rule, in whole numbers)."""
        headroom, scale = self.headroom, int(max(self.slots.max(initial=1), 1))
        need = float(self.lost_slots[row]) + replicas * float(self._lost_slots_of(row, np.array([s]), np.array([c]))[0])
        free = 0
        for o in np.flatnonzero(headroom.others[row]).tolist():
            exclusive, shared = self.taken[0, o], self.taken[3, o]
            if o == c:
                exclusive += replicas * self.per_replica[0, s]
                shared += replicas * self.per_replica[3, s]
            busy = round(exclusive) + time_sliced_gpus(round(shared), int(self.slots[o]), int(self.unit[o]))
            free += (round(self.capacity[0, o]) - busy) * scale
        return need <= free + 1e-9

    def capacity_fits(self, c: int, demand: np.ndarray) -> int:
        """Replicas of per-replica ``demand`` (exclusive GPUs, cores, GiB, slots) ``c`` has room for."""
        excl, cores, gib, slots = self.taken[:, c]
        limits = []
        unit, per_gpu = int(self.unit[c]), int(self.slots[c])
        if demand[0] > 0:
            free = self.capacity[0, c] - excl - time_sliced_gpus(round(slots), per_gpu, unit)
            limits.append(math.floor(free / demand[0] + 1e-9))
        if demand[3] > 0:
            free_slots = (self.capacity[0, c] - excl) // unit * unit * per_gpu - slots
            limits.append(math.floor(free_slots / demand[3] + 1e-9))
        for r, used in ((1, cores), (2, gib)):
            if demand[r] > 0:
                limits.append(math.floor((self.capacity[r, c] - used) / demand[r] + 1e-9))
        return max(0, min(limits, default=1 << 30))

    def take(self, c: int, s: int, count: int) -> None:
        self.taken[:, c] += self.per_replica[:, s] * count
        for row in range(len(self.headroom.bound)):
            self.used[row] += float(self._headroom_of(row, np.array([s]), np.array([c]))[0]) * count
            self.lost_slots[row] += float(self._lost_slots_of(row, np.array([s]), np.array([c]))[0]) * count
        for row in self.caps.rows_of[s]:
            self.capped[row] += self.caps.per_replica(row, s, c) * count


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


#: Passes of the relocate/swap search over the placed gangs (:func:`_improve`).
IMPROVE_PASSES = 2
#: Better clusters (best first) on which a gang looks for a gang to swap with.
SWAP_CLUSTERS = 8


def _improve(problem: Problem, large: _Large, replicas_at: np.ndarray, deadline: float | None) -> None:
    """Raise the LP's objective by moving placed gangs (in place), the moves of
    ``bench/strong.py``: each gang takes the best of moving whole to a better cluster with room
    and swapping clusters with a gang on one of its :data:`SWAP_CLUSTERS` best better
    clusters, if that gains. At most :data:`IMPROVE_PASSES` passes; after the first, a pass
    visits only the gangs whose cluster or better clusters changed since their last visit.
    Every move keeps the placement sound, so the user's ``deadline`` stops it between gangs."""
    gangs = _Gangs(problem, large, replicas_at)
    for _ in range(IMPROVE_PASSES):
        if not gangs.improve_all(deadline):
            return


class _Gangs:
    """The placed gangs of ``replicas_at`` while :func:`_improve` moves them (in place).
    Whether a move fits is the repair's :class:`_Room` (capacity, time-slicing, failover
    headroom, caps); the arrays here only skip what cannot fit."""

    def __init__(self, problem: Problem, large: _Large, replicas_at: np.ndarray) -> None:
        self.large, self.replicas_at = large, replicas_at
        self.objective = large.gain + large.move
        by_cluster = np.argsort(large.pair_cluster, kind="stable").astype(np.int32)  # stages in order
        self.by_cluster, self.stage_by_cluster = by_cluster, large.pair_stage[by_cluster]
        self.cluster_range = np.searchsorted(large.pair_cluster[by_cluster], np.arange(large.clusters + 1))
        self.room = _room(large, replicas_at)
        self.stages = np.flatnonzero(problem.gang & replicas_at.any(axis=1))
        self.where = np.full(large.stages, -1)
        self.where[self.stages] = np.argmax(replicas_at[self.stages], axis=1)
        self.value = np.zeros(large.stages)  # the objective of each gang where it is
        key = large.pair_stage.astype(np.int64) * large.clusters + large.pair_cluster
        self.value[self.stages] = self.objective[np.searchsorted(key, self.stages * large.clusters
                                                                 + self.where[self.stages])]
        self.on: list[set[int]] = [set() for _ in range(large.clusters)]
        for s in self.stages.tolist():
            self.on[int(self.where[s])].add(s)
        self.whole = large.coefficients  # a gang's exclusive GPUs, cores, GiB, shared slots
        self.changed = np.zeros(large.clusters, dtype=np.int64)  # when each cluster last changed
        self.visited = np.full(large.stages, -1, dtype=np.int64)  # when each gang was last weighed
        self.clock = 0

    def _values_at(self, stages: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``stages`` may run on cluster ``c``, and the objective of each there (0
        where not)."""
        start, stop = self.cluster_range[c], self.cluster_range[c + 1]
        found = start + np.searchsorted(self.stage_by_cluster[start:stop], stages)
        found = np.minimum(found, stop - 1)
        allowed = (found >= start) & (self.stage_by_cluster[np.maximum(found, 0)] == stages)
        values: np.ndarray = np.where(allowed, self.objective[self.by_cluster[np.maximum(found, 0)]], 0.0)
        return allowed, values

    def _put(self, s: int, c: int, sign: int) -> None:
        n = int(self.large.replicas[s])
        self.room.take(c, s, sign * n)
        self.replicas_at[s, c] = n if sign > 0 else 0
        if sign > 0:
            self.where[s] = c
            self.on[c].add(s)
        else:
            self.on[c].discard(s)

    def _fits(self, s: int, c: int) -> bool:
        return self.room.fits(c, s) >= int(self.large.replicas[s])

    def improve_all(self, deadline: float | None) -> bool:
        """One pass, unless ``deadline`` passes; whether any gang moved."""
        improved = False
        for s in self.stages.tolist():
            if _past(deadline):
                return False
            improved = self._improve(s) or improved
        return improved

    def _improve(self, s: int) -> bool:
        """Move gang ``s`` or swap it, whichever gains more (if anything); whether it did."""
        large, objective = self.large, self.objective
        here = int(self.where[s])
        pairs = np.arange(large.pair_range[s], large.pair_range[s + 1])
        better = pairs[objective[pairs] > self.value[s] + 1e-12]
        clusters = large.pair_cluster[better]
        last, self.visited[s] = self.visited[s], self.clock
        if not len(better) or (last >= 0 and self.changed[here] <= last and self.changed[clusters].max() <= last):
            return False  # nothing better, or nothing changed since it was last weighed
        order = np.argsort(-objective[better], kind="stable")
        better, clusters = better[order], clusters[order]
        gains = objective[better] - self.value[s]
        self._put(s, here, -1)  # off while its moves are weighed
        free = self._free()
        roomy = np.flatnonzero(np.all(free[:, clusters] >= self.whole[:, s, None] - 1e-9, axis=0))
        swap_gain, residents, swap_to = self._swaps(s, here, clusters[:SWAP_CLUSTERS], gains[:SWAP_CLUSTERS], free)
        gain_of = np.concatenate([gains[roomy], swap_gain])
        partner_of = np.concatenate([np.full(len(roomy), -1), residents])
        target_of = np.concatenate([clusters[roomy], swap_to])
        for best in np.argsort(-gain_of, kind="stable").tolist():  # the best move that fits
            if gain_of[best] <= 1e-9:
                break
            if self._moved(s, here, int(target_of[best]), int(partner_of[best])):
                return True
        self._put(s, here, 1)
        return False

    def _free(self) -> np.ndarray:
        """(4, C) room left (:func:`_free`): what a move must fit in, but for the failover
        headroom and the caps, and time-sliced GPUs taking whole units."""
        return _free(self.large, self.room.taken)

    def _swaps(self, s: int, here: int, theirs: np.ndarray, gain_of_s: np.ndarray, free: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With ``s`` off ``here`` and ``free`` room left: what swapping it with each gang on
        ``theirs`` (clusters where ``s`` gains ``gain_of_s``) that may fit gains, those gangs
        and their clusters."""
        on = [sorted(self.on[there]) for there in theirs.tolist()]
        residents = np.fromiter(itertools.chain.from_iterable(on), dtype=np.int64)
        counts = [len(r) for r in on]
        there, gain = np.repeat(theirs, counts), np.repeat(gain_of_s, counts)
        allowed, value_here = self._values_at(residents, here)
        whole = self.whole
        may_fit = (allowed
                   & np.all(free[:, there] + whole[:, residents] - whole[:, s, None] >= -1e-9, axis=0)
                   & np.all(free[:, here, None] - whole[:, residents] >= -1e-9, axis=0))
        swap_gain: np.ndarray = gain[may_fit] + value_here[may_fit] - self.value[residents[may_fit]]
        return swap_gain, residents[may_fit], there[may_fit]

    def _moved(self, s: int, here: int, there: int, r: int) -> bool:
        """Put ``s`` (off ``here``) on ``there``, and gang ``r`` from ``there`` on ``here``
        (no gang when -1), if that fits; whether it did."""
        if r >= 0:
            self._put(r, there, -1)
        if not self._fits(s, there):
            if r >= 0:
                self._put(r, there, 1)
            return False
        self._put(s, there, 1)
        if r >= 0 and not self._fits(r, here):
            self._put(s, there, -1)
            self._put(r, there, 1)
            return False
        self.clock += 1
        self.changed[[here, there]] = self.clock
        self.value[s] = self._values_at(np.array([s]), there)[1][0]
        if r >= 0:
            self._put(r, here, 1)
            self.value[r] = self._values_at(np.array([r]), here)[1][0]
        return True
