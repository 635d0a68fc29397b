"""The large path's view of a component (:class:`_Large`): its allowed pairs, what each takes
per unit, and the rows of the master LP, the caps' (:class:`_Caps`) and the failover
headroom's (:class:`_Headroom`) among them."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from fleetc.placement import highs, rules
from fleetc.placement.problem import Problem


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
        scale = self.caps.scale
        for row, hit, per_replica in self.caps.covered(range(len(self.caps.bound)), stage, cluster):
            coefficient = per_replica * self.replicas[stage[hit]] * scale[row]
            nonzero = coefficient != 0
            rows.append(np.full(int(nonzero.sum()), self.cap_rows + row))
            data.append(coefficient[nonzero])
            index.append(cols[hit[nonzero]])
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
        priced = np.flatnonzero(row_dual[self.cap_rows: self.relaxed_rows]).tolist()
        for cap_row, hit, per_replica in self.caps.covered(priced, self.pair_stage, self.pair_cluster):
            price = self.caps.scale[cap_row] * row_dual[self.cap_rows + cap_row]
            reduced[hit] -= per_replica * self.replicas[self.pair_stage[hit]] * price
        return reduced


#: Relative objective a later cluster (by name) gives up against an equal earlier one.
TIE_BREAK = 1e-6


#: What leaving a unit of a stage out costs in the master, in stage values. Any penalty keeps
#: the bound valid (the master's gain at its optimum is at least the LP optimum with every stage
#: placed); a large one makes the master place whatever fits, but inflates the duals.
UNPLACED_PENALTY = 10.0


def _large(problem: Problem, count: np.ndarray | None = None) -> _Large:
    """``problem`` in the column generation's terms; ``count``: how many stages each of its
    stages stands for (None: one each)."""
    allowed = problem.allowed.copy()
    allowed[problem.blocked] = False
    pair_stage, pair_cluster = (a.astype(np.int32) for a in np.nonzero(allowed))
    del allowed
    values, replicas, shared_stage = problem.values, problem.replicas, problem.shared
    coefficients = stage_coefficients(problem)
    gain, move, kept = _pair_terms(problem, pair_stage, pair_cluster)
    keep_pair = np.flatnonzero(kept)
    keep_stage, keep_cluster = pair_stage[keep_pair], pair_cluster[keep_pair]
    del kept
    return _Large(
        pair_stage=pair_stage,
        pair_cluster=pair_cluster,
        gain=gain,
        move=move,
        pair_lower=_pair_lower(problem, pair_stage, pair_cluster),
        coefficients=coefficients,
        replicas=replicas,
        stages=len(problem.stages),
        clusters=len(problem.clusters),
        shared=bool(shared_stage.any()),
        slots=problem.slots,
        unit=problem.unit,
        capacity=problem.capacity,
        keep_pair=keep_pair,
        keep_upper=problem.previous_at(keep_stage, keep_cluster) / replicas[keep_stage],
        keep_reward=problem.move_cost * values[keep_stage],
        penalty=UNPLACED_PENALTY * values,
        headroom=_Headroom.of(problem),
        caps=_Caps.of(problem),
        count=np.ones(len(problem.stages)) if count is None else count.astype(float),
    )


def stage_coefficients(problem: Problem) -> np.ndarray:
    """(4, S) what a whole stage of ``problem`` takes: exclusive GPUs, cores, GiB and shared
    slots (the ledger's split, most GPUs of any type: :func:`fleetc.placement.rules.gpus_as`)."""
    demand = problem.demand * problem.replicas
    whole_gpus, shared_slots = rules.gpus_as(demand[0], problem.shared)
    return np.stack([whole_gpus, demand[1], demand[2], shared_slots])


#: Pairs :func:`_pair_terms` computes at a time: each term of a pair is a float, and a
#: fleet's ~10 million pairs at once were ~80 MB per temporary array.
_PAIR_CHUNK = 1 << 20


def _pair_terms(problem: Problem, pair_stage: np.ndarray, pair_cluster: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair's gain (its stage's value times one plus its score, a later cluster giving up
    a relative :data:`TIE_BREAK` at most), its move-cost reward (a gang pair on its previous
    cluster, else 0), and whether it is a kept Deployment pair (previous replicas there),
    computed a chunk of pairs at a time: the same numbers as over all pairs at once."""
    values, replicas, gang, n_clusters = problem.values, problem.replicas, problem.gang, len(problem.clusters)
    gain, kept = np.empty(len(pair_stage)), np.empty(len(pair_stage), dtype=bool)
    move = np.zeros(len(pair_stage))  # only what is not +0.0 is written: pages of zeros take no memory
    for start in range(0, len(pair_stage), _PAIR_CHUNK):
        chunk = slice(start, start + _PAIR_CHUNK)
        stage, cluster = pair_stage[chunk], pair_cluster[chunk]
        previous = problem.previous_at(stage, cluster)
        reward = np.where(gang[stage], problem.move_cost * values[stage] * previous / replicas[stage], 0.0)
        written = np.flatnonzero(reward.view(np.uint64))  # -0.0 too, bit for bit
        move[start + written] = reward[written]
        kept[chunk] = (previous > 0) & ~gang[stage]
        # Ties go to the first cluster by name: a later cluster gives up a relative TIE_BREAK at most
        # (the objective is computed from the scores, the bound divides by 1 - TIE_BREAK).
        gain[chunk] = (values[stage] * (1.0 + problem.total_at(stage, cluster))
                       * (1.0 - TIE_BREAK * cluster / n_clusters))
    return gain, move, kept


def _pair_lower(problem: Problem, pair_stage: np.ndarray, pair_cluster: np.ndarray) -> np.ndarray:
    """Each pair's floor while its stage is placed: min / replicas on a multiCluster
    cluster, else 0."""
    pair_lower = np.zeros(len(pair_stage))
    ha = [s for s in np.flatnonzero(~problem.blocked).tolist() if problem.ha[s]]
    if not ha:
        return pair_lower
    n_clusters = len(problem.clusters)
    key = pair_stage.astype(np.int64) * n_clusters + pair_cluster
    for s in ha:
        for c in problem.ha[s]:
            hit = np.searchsorted(key, s * n_clusters + c)  # not blocked: allowed here
            pair_lower[hit] = problem.minimum[s] / problem.replicas[s]
    return pair_lower


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
        """Row ``row``'s use per replica of each (``stage``, ``cluster``) pair (0 where it does
        not cover the pair)."""
        coefficient = np.zeros(len(stage))
        for _, hit, per_replica in self.covered([row], stage, cluster):
            coefficient[hit] = per_replica
        return coefficient

    def covered(self, rows: Iterable[int], stage: np.ndarray, cluster: np.ndarray
                ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Per row of ``rows`` (a cap's rows together), the (``stage``, ``cluster``) pairs it
        covers (indices, ascending) and its use per replica of each: :meth:`coefficients` where
        it is not 0 by coverage. Each cap's stages are looked up once for all its rows (its GPU
        types' and its cost's), and the use counted only on the pairs covered: a team's share of
        the master LP's ~100,000 pairs, for each of ~100 rows."""
        first, mine = -1, np.zeros(0, dtype=np.int64)
        for row in rows:
            if self._first_alike[row] != first:
                first = int(self._first_alike[row])
                mine = np.flatnonzero(self.members[first, stage])
            hit = mine[self.on[row, cluster[mine]]]
            count = self.problem.cost_at if self.cost[row] else self.problem.quota_at
            yield row, hit, count(stage[hit], cluster[hit])

    @cached_property
    def _first_alike(self) -> np.ndarray:
        """(K,) per row, the first of the rows before it with the same members (one cap's)."""
        first = np.arange(len(self.bound))
        for row in range(1, len(first)):
            if np.array_equal(self.members[row], self.members[row - 1]):
                first[row] = first[row - 1]
        return first

    @cached_property
    def rows_of(self) -> list[list[int]]:
        """Per stage, the rows that cover it (a few: its team's and its pipeline's)."""
        rows: list[list[int]] = [[] for _ in range(self.members.shape[1])]
        for row, s in zip(*np.nonzero(self.members), strict=True):
            rows[int(s)].append(int(row))
        return rows

    def per_replica(self, row: int, s: int, c: int) -> float:
        """:meth:`coefficients` of one pair (:meth:`Problem.cost_at` and :meth:`Problem.quota_at`'s
        operations on scalars: the same floats), for the repair."""
        if not (self.members[row, s] and self.on[row, c]):
            return 0.0
        if self.problem.counts_per_pair:  # throughput or whole GPUs by cluster: each pair's own count
            return self._pair_count(row, s, c)
        if not self.cost[row]:
            return float(self.problem.quota_unit[s])
        return self._micros(s, c, float(self.problem.billed[0, s]))

    def _pair_count(self, row: int, s: int, c: int) -> float:
        """Row ``row``'s use per replica of (``s``, ``c``) on a row that covers it, where a
        replica's GPUs depend on its cluster (:attr:`Problem.counts_per_pair`)."""
        problem = self.problem
        gpus = float(problem.type_gpus[s, problem.cluster_type[c]])
        shared, slots = bool(problem.shared[s]), float(problem.slots[c])
        if self.cost[row]:
            return self._micros(s, c, gpus / slots if shared else gpus)
        whole = rules.slots_per_gpu(problem.model)
        return gpus * (whole / slots if shared else float(whole))

    def _micros(self, s: int, c: int, gpus: float) -> float:
        """The hourly cost in micros of a replica of stage ``s`` on ``c`` billed ``gpus`` GPUs."""
        b, p = self.problem.billed, self.problem.prices
        per_hour = gpus * float(p[0, c]) + float(b[1, s]) * float(p[1, c]) + float(b[2, s]) * float(p[2, c])
        return float(round(rules.MICROS * per_hour))

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


def _past(deadline: float | None) -> bool:
    """Whether the user's deadline (``--time-limit``, the only clock here) has passed."""
    return deadline is not None and time.monotonic() >= deadline
