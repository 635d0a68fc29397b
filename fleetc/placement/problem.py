"""The placement problem, built once per component from the model: what every solver reads.

:func:`problems` splits the fleet's allowed (stage, cluster) pairs into connected components
(capacity only couples stages that share a cluster) and builds one :class:`Problem` each: the
pairs the filters allow, each stage's value, replicas, demand, per-cluster minimum, HA clusters
and previous replicas, each cluster's usable capacity, the time-slicing slots, and the failover
headroom groups, as arrays indexed by the component's own stage and cluster numbers. They are
the rules of :mod:`fleetc.placement.rules` in vector form; ``tests/test_rules.py`` holds the
two together.

Every solver takes a problem and a :class:`Budget` and returns a placement of the component
(:class:`~fleetc.placement.program.Solved`): the exact path (:mod:`fleetc.placement.cvx` over
the program :func:`fleetc.placement.program.build_program` writes of it), and the large path's
column generation, rounding, repair and reach (:mod:`fleetc.placement.colgen`), whose smaller
MILPs solve :meth:`Problem.restrict`-ed problems.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement import rules
from fleetc.placement.previous import Recorded
from fleetc.placement.scoring import GIB, Scores
from fleetc.placement.solvers import DEFAULT_SOLVER

#: A previous placement: stage key -> cluster name -> replicas (see :mod:`fleetc.placement.previous`).
PreviousClusters = Mapping[str, Mapping[str, int]]

#: The value of a stage whose workload class has weight 0: it still must be placed.
EPSILON = 1e-3


@dataclass(frozen=True, eq=False)
class Part:
    """One independent subproblem: stage and cluster indices into the full model."""

    stages: np.ndarray
    clusters: np.ndarray


@dataclass(frozen=True)
class Budget:
    """What a solver may spend: the time left (``deadline``, a ``time.monotonic()`` instant, or
    None), the MILP solver cvxpy runs the exact path on, and who hears the large path's gap
    after each round of column generation (progress)."""

    deadline: float | None = None
    solver: str = DEFAULT_SOLVER
    on_gap: Callable[[float], None] = field(default=lambda gap: None, compare=False)
    #: Who hears how many of the fleet's stages are solved, after each independent part.
    on_placed: Callable[[int, int], None] = field(default=lambda done, total: None, compare=False)
    #: What the exact path's solves under this budget found, by the program they solved
    #: (:func:`fleetc.placement.cvx.solve_program`): the parts of a fleet that are alike, byte
    #: for byte, are solved once. It lives as long as the budget: one placement.
    solved: dict[bytes, object] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Settings:
    """What a caller asks of :func:`fleetc.placement.optimize.place` besides the model (the
    compiler builds it from its ``Options``); the :class:`Budget` of every solve is made of it.

    ``time_limit`` bounds the solving in seconds. ``previous`` makes moving a stage away from
    where it was cost ``model.move_cost``; with it, a fleet of more than ``incremental`` allowed
    pairs (None: :data:`~fleetc.placement.incremental.INCREMENTAL`) is recompiled incrementally
    where it can be, ``recorded`` (what the previous report says of each stage,
    :class:`~fleetc.placement.previous.Recorded`) telling the stages whose figures changed. With
    ``allow_unplaced`` the stages that do not fit come back unplaced with a reason. Components
    of more than ``large`` allowed pairs (None: :data:`~fleetc.placement.LARGE`) take the large
    path; ``solver`` is the MILP solver cvxpy runs the exact path on. ``on_gap`` hears the large
    path's gap after each round of column generation, ``on_placed`` how many stages are solved
    after each independent part (progress)."""

    time_limit: float | None = None
    previous: PreviousClusters | None = None
    recorded: Mapping[str, Recorded] | None = None
    allow_unplaced: bool = False
    large: int | None = None
    incremental: int | None = None
    solver: str = DEFAULT_SOLVER
    on_gap: Callable[[float], None] = field(default=lambda gap: None, compare=False)
    on_placed: Callable[[int, int], None] = field(default=lambda done, total: None, compare=False)

    def budget(self, deadline: float | None) -> Budget:
        """The budget of every solve, until ``deadline`` (a ``time.monotonic()`` instant)."""
        return Budget(deadline, self.solver, self.on_gap, self.on_placed)


@dataclass(frozen=True, eq=False)
class CapRows:
    """One cap (:func:`rules.caps`) in a problem's numbers: which of its stages it covers, one
    ``(clusters of the GPU type, quota in slots)`` per GPU type it caps, and its cost cap in
    micros (None: none). A cap couples every stage it covers, so :func:`problems` keeps them in
    one component."""

    name: str
    members: np.ndarray  # (S,) bool
    quotas: tuple[tuple[str, np.ndarray, int], ...]  # (GPU type, (C,) bool, quota in slots)
    cost: int | None


def _type_gpus(stages: tuple[Stage, ...], codes: Mapping[str | None, int]) -> np.ndarray:
    """(S, GPU types): GPUs per replica of each stage on each GPU type (``codes``: type -> column),
    its ``gpus`` unless a GPU option names that type."""
    type_gpus = np.array([[s.gpus] * len(codes) for s in stages], dtype=float).reshape(len(stages), len(codes))
    for s, stage in enumerate(stages):
        for option in stage.gpu_options:
            if option.gpu_type in codes:
                type_gpus[s, codes[option.gpu_type]] = option.gpus
    return type_gpus


def _failover(model: FleetModel, stages: tuple[Stage, ...], local: Mapping[str, int]
              ) -> tuple[tuple[tuple[int, ...], np.ndarray], ...]:
    """Each failover group: its members among the clusters (``local``: name -> index) and
    which ``stages`` it serves."""
    return tuple(
        (tuple(local[n] for n in members if n in local), np.array([s.key in serving for s in stages], dtype=bool))
        for _name, members, serving in rules.failover_groups(model)
    )


def _ha_sets(model: FleetModel, stages: tuple[Stage, ...], local: Mapping[str, int]) -> tuple[tuple[int, ...], ...]:
    """Each stage's HA set (:func:`rules.ha_clusters`) among the clusters (``local``: name -> index)."""
    return tuple(tuple(local[n] for n in rules.ha_clusters(model, s) if n in local) for s in stages)


@dataclass(frozen=True, eq=False)
class Problem:
    """The placement problem of one component, in its own stage and cluster numbers.

    Per stage (shape (S,)): ``values`` (class weight times GPUs), ``replicas`` (float),
    ``least`` (the fewest it may be placed with, :func:`rules.least_replicas`: fewer than
    ``replicas`` only for serving running degraded), ``gang``, ``minimum`` (replicas per
    serving cluster, :func:`rules.min_replicas_per_cluster`),
    ``shared`` (GPUs as time-sliced slots), ``blocked`` (``multiCluster`` makes it unplaceable)
    and ``ha`` (the clusters it must serve on); ``demand`` (3, S) per replica: GPUs, cores,
    GiB. Per cluster: ``capacity`` (3, C) usable (:func:`rules.usable_capacity`), ``slots`` (C,)
    the time-sliced slots one of its GPUs holds (:func:`rules.slots_on`: 1 where its device
    plugin is not configured, so a time-sliced replica takes whole GPUs there) and ``unit`` (C,)
    the GPUs it turns time-sliced at once (:func:`rules.time_sliced_unit`: whole nodes where
    its device plugin is configured). A stage asking for throughput has GPUs per replica that
    depend on the cluster's GPU type: :meth:`gpus_at` gives each pair's (``type_gpus`` (S, T)
    over the GPU type codes, ``cluster_type`` (C,) each cluster's code); its ``demand`` GPU
    entry is the most of them, a safe figure for code that counts per stage. ``allowed``
    (S, C): the pairs the filters allow. ``failover``: per platform asking for failover
    headroom, its clusters here and which stages serve it. Scores and previous replicas are
    read per pair from the fleet-wide matrices (:meth:`total_at`, :meth:`previous_at`), never
    copied whole.
    """

    model: FleetModel
    part: Part
    stages: tuple[Stage, ...]
    clusters: tuple[Cluster, ...]
    allowed: np.ndarray
    blocked: np.ndarray
    values: np.ndarray
    replicas: np.ndarray
    least: np.ndarray
    gang: np.ndarray
    minimum: np.ndarray
    shared: np.ndarray
    demand: np.ndarray
    capacity: np.ndarray
    slots: np.ndarray  # (C,) slots per GPU: :func:`rules.slots_on`
    unit: np.ndarray  # (C,) GPUs turned time-sliced at once: :func:`rules.time_sliced_unit`
    ha: tuple[tuple[int, ...], ...]
    failover: tuple[tuple[tuple[int, ...], np.ndarray], ...]
    move_cost: float
    type_gpus: np.ndarray  # (S, T) GPUs per replica on each GPU type code
    cluster_type: np.ndarray  # (C,) each cluster's GPU type code
    total: np.ndarray = field(repr=False)  # (all stages, all clusters) of the model: scores
    kept: np.ndarray = field(repr=False)  # (all stages, all clusters): previous replicas
    #: Team quotas and cost caps (:class:`CapRows`), with what each stage's replica counts
    #: against them: ``quota_unit`` (S,) its quota slots (:func:`rules.quota_slots`), ``billed``
    #: (3, S) its billed GPUs, cores and GiB and ``prices`` (3, C) each cluster's prices for them
    #: (:meth:`cost_at`).
    caps: tuple[CapRows, ...] = ()
    quota_unit: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    billed: np.ndarray = field(default_factory=lambda: np.zeros((3, 0)), repr=False)
    prices: np.ndarray = field(default_factory=lambda: np.zeros((3, 0)), repr=False)

    @classmethod
    def of(cls, model: FleetModel, scores: Scores, blocked: Mapping[int, str], kept: np.ndarray,
           part: Part) -> Problem:
        """The problem of ``part``: ``blocked`` names the model's stages ``multiCluster`` makes
        unplaceable (:func:`multicluster_conflicts`), ``kept`` the replicas each had on each
        cluster (:func:`previous_matrix`)."""
        stages = tuple(model.stages[s] for s in part.stages)
        clusters = tuple(model.clusters[c] for c in part.clusters)
        local = {c.name: i for i, c in enumerate(clusters)}
        codes: dict[str | None, int] = {t: i for i, t in enumerate(dict.fromkeys(c.gpu_type for c in model.clusters))}
        type_gpus = _type_gpus(stages, codes)
        failover = _failover(model, stages, local)
        caps, quota_unit, billed, prices = _cap_fields(model, stages, clusters)
        return cls(
            model=model,
            part=part,
            stages=stages,
            clusters=clusters,
            allowed=_rows_and_columns(scores.allowed, part),
            blocked=np.array([int(s) in blocked for s in part.stages], dtype=bool),
            values=stage_values(model, stages),
            replicas=np.array([s.replicas for s in stages], dtype=float),
            least=np.array([rules.least_replicas(model, s) for s in stages], dtype=float),
            gang=np.array([s.is_gang for s in stages], dtype=bool),
            minimum=np.array([rules.min_replicas_per_cluster(s) for s in stages], dtype=float),
            shared=np.array([rules.uses_shared_slots(model, s) for s in stages], dtype=bool),
            demand=demand_of(stages),
            capacity=capacity_of(model, clusters),
            type_gpus=type_gpus,
            cluster_type=np.array([codes[c.gpu_type] for c in clusters], dtype=np.int64),
            slots=np.array([rules.slots_on(model, c) for c in clusters], dtype=float),
            unit=np.array([rules.time_sliced_unit(c) for c in clusters], dtype=float),
            ha=_ha_sets(model, stages, local),
            failover=failover,
            move_cost=model.move_cost,
            total=scores.total,
            kept=kept,
            caps=caps,
            quota_unit=quota_unit,
            billed=billed,
            prices=prices,
        )

    @property
    def pairs(self) -> int:
        """How many (stage, cluster) pairs the filters allow."""
        return int(self.allowed.sum())

    def total_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """The score of each (``stage``, ``cluster``) pair, in this problem's numbers."""
        total: np.ndarray = self.total[self.part.stages[stage], self.part.clusters[cluster]]
        return total

    def gpus_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """GPUs per replica of each (``stage``, ``cluster``) pair (:func:`rules.on_cluster`)."""
        gpus: np.ndarray = self.type_gpus[stage, self.cluster_type[cluster]]
        return gpus

    def use_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """(4, pairs) what one replica of each (``stage``, ``cluster``) pair takes of its
        cluster, as the ledger counts it (:func:`rules.replica_usage` of the stage as it runs
        there, its GPUs split by :func:`rules.gpus_as`): whole GPUs, cores, GiB, time-sliced
        slots. The exact program's capacity rows and the incremental path read it;
        ``tests/test_ledger.py`` holds both to :class:`rules.Ledger`."""
        whole, slots = rules.gpus_as(self.gpus_at(stage, cluster), self.shared[stage])
        return np.stack([whole, self.demand[1, stage], self.demand[2, stage], slots])

    def previous_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """The replicas each (``stage``, ``cluster``) pair had in the previous placement."""
        kept: np.ndarray = self.kept[self.part.stages[stage], self.part.clusters[cluster]]
        return kept

    def restrict(self, stages: np.ndarray, clusters: np.ndarray | None = None) -> Problem:
        """The problem of ``stages`` on ``clusters`` (None: all) only, numbered in their order."""
        clusters = np.arange(len(self.clusters)) if clusters is None else clusters
        position = np.full(len(self.clusters), -1)
        position[clusters] = np.arange(len(clusters))

        def renumber(indices: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(int(position[c]) for c in indices if position[c] >= 0)

        return Problem(
            model=self.model,
            part=Part(self.part.stages[stages], self.part.clusters[clusters]),
            stages=tuple(self.stages[s] for s in stages.tolist()),
            clusters=tuple(self.clusters[c] for c in clusters.tolist()),
            allowed=self.allowed[np.ix_(stages, clusters)],
            blocked=self.blocked[stages],
            values=self.values[stages],
            replicas=self.replicas[stages],
            least=self.least[stages],
            gang=self.gang[stages],
            minimum=self.minimum[stages],
            shared=self.shared[stages],
            demand=self.demand[:, stages],
            capacity=self.capacity[:, clusters],
            slots=self.slots[clusters],
            unit=self.unit[clusters],
            ha=tuple(renumber(self.ha[s]) for s in stages.tolist()),
            failover=tuple((renumber(members), serving[stages]) for members, serving in self.failover),
            move_cost=self.move_cost,
            type_gpus=self.type_gpus[stages],
            cluster_type=self.cluster_type[clusters],
            total=self.total,
            kept=self.kept,
            **self._restricted_caps(stages, clusters),
        )

    def _restricted_caps(self, stages: np.ndarray, clusters: np.ndarray) -> dict[str, Any]:
        """The cap fields of :meth:`restrict`: none when the problem has no caps."""
        if not self.caps:
            return {}
        return {
            "caps": tuple(CapRows(cap.name, cap.members[stages],
                                  tuple((t, on[clusters], quota) for t, on, quota in cap.quotas), cap.cost)
                          for cap in self.caps),
            "quota_unit": self.quota_unit[stages],
            "billed": self.billed[:, stages],
            "prices": self.prices[:, clusters],
        }

    def quota_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """The quota slots one replica of each (``stage``, ``cluster``) pair takes
        (:func:`rules.quota_slots` of the stage as it runs there, :func:`rules.on_cluster`)."""
        if not self.counts_per_pair:
            unit: np.ndarray = self.quota_unit[stage]
            return unit
        whole = rules.slots_per_gpu(self.model)
        per_gpu = np.where(self.shared[stage], whole / self.slots[cluster], whole)
        slots: np.ndarray = self.gpus_at(stage, cluster) * per_gpu
        return slots

    @cached_property
    def counts_per_pair(self) -> bool:
        """Whether a replica's quota slots and billed GPUs depend on its cluster: a stage asking
        for throughput (its GPUs on the cluster's type, which need not be its first option's
        even where the component has one type), or a time-sliced stage beside a cluster whose
        device plugin does not time-slice (:func:`rules.slots_on`: whole GPUs there)."""
        whole = rules.slots_per_gpu(self.model)
        throughput = any(s.gpu_options for s in self.stages)
        return throughput or bool(np.any(self.shared) and np.any(self.slots != whole))

    def cost_at(self, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """The hourly cost of one replica of each (``stage``, ``cluster``) pair, in micros:
        :func:`rules.replica_cost_micros` vectorised (the same floating-point operations, so the
        same integers)."""
        b, p = self.billed, self.prices
        gpus = b[0, stage]
        if self.counts_per_pair:  # its GPUs on each pair's type, time-sliced or whole
            pair = self.gpus_at(stage, cluster)
            gpus = np.where(self.shared[stage], pair / self.slots[cluster], pair)
        per_hour = gpus * p[0, cluster] + b[1, stage] * p[1, cluster] + b[2, stage] * p[2, cluster]
        cost: np.ndarray = np.rint(rules.MICROS * per_hour)
        return cost

    def score_of(self, replicas_at: np.ndarray, stages: np.ndarray | None = None) -> float:
        """The reported objective (no move-cost terms) of ``replicas_at``, (S, C) or, with
        ``stages``, the rows of those stages."""
        rows = np.arange(len(self.stages)) if stages is None else stages
        stage, cluster = np.nonzero(replicas_at)
        return self.score_of_pairs(rows[stage], cluster, replicas_at[stage, cluster])

    def score_of_pairs(self, stage: np.ndarray, cluster: np.ndarray, replicas: np.ndarray) -> float:
        """:meth:`score_of` a placement given as its pairs with replicas (row-major order)."""
        total = self.total_at(stage, cluster)
        return float(np.sum(self.values[stage] / self.replicas[stage] * (1.0 + total) * replicas))


def _rows_and_columns(matrix: np.ndarray, part: Part) -> np.ndarray:
    """``matrix`` (all stages, all clusters) restricted to ``part``: the matrix itself (read
    only, no copy) when the part is the whole fleet."""
    stages, clusters = matrix.shape
    if np.array_equal(part.stages, np.arange(stages)) and np.array_equal(part.clusters, np.arange(clusters)):
        return matrix
    restricted: np.ndarray = matrix[np.ix_(part.stages, part.clusters)]
    return restricted


def problems(model: FleetModel, scores: Scores, previous: PreviousClusters) -> tuple[list[Problem], dict[int, str]]:
    """The problem of each connected component of ``scores.allowed`` (first stage first), and
    the stages ``multiCluster`` makes unplaceable with why (:func:`multicluster_conflicts`)."""
    blocked = multicluster_conflicts(model, scores)
    kept = previous_matrix(model, previous)
    linked = [np.array([s for s, stage in enumerate(model.stages) if stage.pipeline in cap.pipelines], dtype=np.int64)
              for cap in rules.caps(model)]
    return [Problem.of(model, scores, blocked, kept, part) for part in components(scores.allowed, linked)], blocked


def components(allowed: np.ndarray, linked: list[np.ndarray] | None = None) -> list[Part]:
    """Connected components of the bipartite stage-cluster graph, ordered by first stage.

    Capacity only couples stages that share an allowed cluster, and a cap (a team quota, a cost
    cap) the stages it covers: each group of ``linked`` stages (indices) is kept in one
    component, through a node of its own. So each component is an independent problem;
    clusters no stage may use are left out.
    """
    from scipy.sparse.csgraph import connected_components  # scipy.linalg with it: ~0.1 s, not on a recompile

    n_stages, n_clusters = allowed.shape
    linked = [group for group in linked or [] if len(group) > 1]
    pairs = sp.csr_matrix(allowed)  # stage rows; built straight as CSR: no index triplets at scale
    if linked:  # one extra column per group, joined to each of its stages
        extra = sp.csr_matrix((np.ones(sum(len(g) for g in linked)),
                               (np.concatenate(linked), np.repeat(np.arange(len(linked)), [len(g) for g in linked]))),
                              shape=(n_stages, len(linked)))
        pairs = sp.hstack([pairs, extra], format="csr")
    n_columns = pairs.shape[1]
    indptr = np.concatenate([pairs.indptr, np.full(n_columns, pairs.indptr[-1])])
    graph = sp.csr_matrix(
        (np.ones(pairs.nnz), pairs.indices + n_stages, indptr), shape=(n_stages + n_columns,) * 2
    )
    _, labels = connected_components(graph, directed=False)
    parts = []
    for label in dict.fromkeys(labels[:n_stages].tolist()):
        members = np.flatnonzero(labels[: n_stages + n_clusters] == label)
        parts.append(Part(members[members < n_stages], members[members >= n_stages] - n_stages))
    return parts


def _cap_fields(model: FleetModel, stages: tuple[Stage, ...], clusters: tuple[Cluster, ...]
                ) -> tuple[tuple[CapRows, ...], np.ndarray, np.ndarray, np.ndarray]:
    """The :class:`Problem` fields of the caps (:func:`rules.caps`) over ``stages`` and
    ``clusters``: ``caps``, ``quota_unit``, ``billed`` and ``prices`` (empty when no cap covers
    any of the stages)."""
    found = [cap for cap in rules.caps(model) if any(s.pipeline in cap.pipelines for s in stages)]
    if not found:
        return (), np.zeros(0), np.zeros((3, 0)), np.zeros((3, 0))
    slots = rules.slots_per_gpu(model)
    types = np.array([c.gpu_type or "" for c in clusters], dtype=object)
    shared = [rules.uses_shared_slots(model, s) for s in stages]
    return (
        tuple(CapRows(cap.name, np.array([s.pipeline in cap.pipelines for s in stages], dtype=bool),
                      tuple((t, types == t, quota * slots) for t, quota in cap.gpu_quota), cap.max_cost_micros)
              for cap in found),
        # per stage where the cluster does not matter (:attr:`Problem.counts_per_pair`): every
        # cluster time-slices, so a time-sliced replica takes a slot a GPU it asks for
        np.array([s.gpus if sh else s.gpus * slots for s, sh in zip(stages, shared, strict=True)], dtype=float),
        np.array([[s.gpus / slots if sh else float(s.gpus), s.cpu_millis / 1000, s.memory_bytes / 2**30]
                  for s, sh in zip(stages, shared, strict=True)], dtype=float).reshape(len(stages), 3).T,
        np.array([[c.gpu_hour_cost, c.cpu_hour_cost, c.memory_gib_hour_cost] for c in clusters],
                 dtype=float).reshape(len(clusters), 3).T,
    )


def multicluster_conflicts(model: FleetModel, scores: Scores) -> dict[int, str]:
    """Serving stages ``multiCluster`` makes unplaceable whatever the capacity, and why."""
    names = {c.name: i for i, c in enumerate(model.clusters)}
    blocked = {}
    for s, stage in enumerate(model.stages):
        ha = rules.ha_clusters(model, stage)
        minimum = rules.min_replicas_per_cluster(stage)
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


def previous_matrix(model: FleetModel, previous: PreviousClusters) -> np.ndarray:
    """(S, C) replicas each stage had on each cluster (capped at its replicas); unknown stages
    and clusters are ignored."""
    kept = np.zeros((len(model.stages), len(model.clusters)), dtype=np.int32)
    names = {c.name: i for i, c in enumerate(model.clusters)}
    stage_of, cluster_of, counts = [], [], []
    for s, stage in enumerate(model.stages):
        for name, replicas in previous.get(stage.key, {}).items():
            if name in names and replicas > 0:
                stage_of.append(s)
                cluster_of.append(names[name])
                counts.append(min(int(replicas), stage.replicas))
    kept[stage_of, cluster_of] = counts
    return kept


def time_sliced_gpus_per_cluster(slots_taken: np.ndarray, slots: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """:func:`rules.time_sliced_gpus` per cluster: the GPUs ``slots_taken`` (C,) time-sliced
    slots take where one GPU holds ``slots`` and GPUs turn time-sliced ``unit`` at a time."""
    gpus: np.ndarray = np.ceil(slots_taken / (slots * unit) - 1e-9) * unit
    return gpus


def taken_per_cluster(cluster: np.ndarray, per_replica: np.ndarray, count: np.ndarray, clusters: int) -> np.ndarray:
    """(4, C) what ``count`` replicas on ``cluster`` (one entry per placed pair), each taking
    ``per_replica`` (4, pairs: exclusive GPUs, cores, GiB, time-sliced slots), take of each
    cluster; :func:`free_room` says what that leaves."""
    return np.stack([np.bincount(cluster, weights=per_replica[r] * count, minlength=clusters)
                     for r in range(4)]).astype(float)


def free_room(capacity: np.ndarray, slots: np.ndarray, unit: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """(4, C) what ``taken`` (4, C: exclusive GPUs, cores, GiB, time-sliced slots) leaves of each
    cluster's usable ``capacity`` (3, C), as the rules count it (:func:`rules.taken`): the shared
    slots take whole time-sliced units of ``unit`` GPUs (:func:`time_sliced_gpus_per_cluster`),
    and the slots left are those of the whole units the GPUs left could still give over. The
    one count of room the solvers' own loops read (column generation's rounding and repair, the
    incremental path's neighbourhood); ``tests/test_ledger.py`` holds it to the ledger."""
    unshared = capacity[0] - taken[0]
    shared_gpus = time_sliced_gpus_per_cluster(taken[3], slots, unit)
    whole_units = np.floor(np.maximum(unshared, 0.0) / unit) * unit
    return np.stack([unshared - shared_gpus, capacity[1] - taken[1], capacity[2] - taken[2],
                     whole_units * slots - taken[3]])


def stage_values(model: FleetModel, stages: tuple[Stage, ...]) -> np.ndarray:
    """Each stage's worth: its class weight (``EPSILON`` if 0) times its GPUs (at least 1)."""
    return np.array(
        [(model.class_weights.of(s.workload_class) or EPSILON) * max(s.total_gpus, 1) for s in stages],
        dtype=float,
    )


def demand_of(stages: tuple[Stage, ...]) -> np.ndarray:
    """(3, S) per-replica demand: GPUs (for a stage asking for throughput, the most any of its
    GPU types takes: never less than a pair's, :meth:`Problem.gpus_at`), cores, GiB."""
    return (
        np.array([[max([s.gpus, *(o.gpus for o in s.gpu_options)]), s.cpu_millis / 1000, s.memory_bytes / GIB]
                  for s in stages], dtype=float)
        .reshape(len(stages), 3)
        .T
    )


def capacity_of(model: FleetModel, clusters: tuple[Cluster, ...]) -> np.ndarray:
    """(3, C) usable capacity (:func:`rules.usable_capacity`): GPUs, cores, GiB."""
    usable = [rules.usable_capacity(model, c) for c in clusters]
    return (
        np.array([[g, millis / 1000, memory / GIB] for g, millis, memory in usable], dtype=float)
        .reshape(len(clusters), 3)
        .T
    )
