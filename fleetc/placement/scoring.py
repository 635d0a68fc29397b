"""Which clusters may run each stage, and how well each one suits it.

:func:`score_matrix` turns a :class:`~fleetc.model.FleetModel` into matrices over
S stages x C clusters, both in model order. It is pure: same model, same arrays.

Filters (hard; a failing pair is not ``allowed`` and gets a short reason, the first that applies):

- ``cordoned`` (the Fleet's ``cordoned``) or ``drained`` (``--drain``): the cluster takes no work.
- ``in eu, outside the data's jurisdiction cn``: data sovereignty; the stage reads
  data of a jurisdiction (``Stage.jurisdiction``, set by :mod:`fleetc.resolve`) the cluster is
  not in.
- ``no GPUs``: the stage needs GPUs and the cluster has none.
- ``no a100``: the stage names a GPU type the cluster does not have.
- ``untolerated taint k=v:Effect``: a hard taint (not PreferNoSchedule) no toleration covers,
  of those the Fleet states: the GPU taint fleetc derives for a cluster that states none is a
  preference instead (``GPU_TAINT_PENALTY`` below).
- ``too small: 256Gi memory per replica, cluster has 128Gi``: one replica's GPUs, cores or
  memory exceed the cluster's total capacity. Free capacity is the optimizer's business, not a
  filter: it depends on what else is placed.
- ``nodes too small for its pods: 2 GPUs, 200 cores, 64Gi per pod, a node has 8 GPUs, 128
  cores, 1024Gi``: node fit (:func:`fleetc.placement.rules.fits_no_node`): one pod asks for more than
  one node of the cluster offers.

Score terms, each in [0, 1] and 0 on pairs that are not allowed:

- ``compute = 0.5*gpu_compat + 0.3*balance + 0.2*utilisation``. ``gpu_compat`` is 1.0 when a
  GPU stage meets an (allowed, hence matching) GPU cluster; a CPU-only stage scores 1.0 on
  clusters without GPUs and 0.5 on GPU clusters, which keeps CPU work off scarce GPUs.
  ``balance = 1 - |rs - rc| / (rs + rc)`` compares the GiB-per-core ratio of the stage and the
  cluster (a side with no cores has ratio 0; two zero ratios balance perfectly).
  ``utilisation = 1 - cluster.utilization`` prefers idle clusters.
- ``cost``: the hourly price of the stage's whole demand on the cluster (per replica GPUs x
  GPU-hour + cores x core-hour + GiB x GiB-hour, times replicas); the score is the cheapest
  allowed price for that stage divided by this one, 1.0 when this one is free.
- ``network = 0.6*data_locality + 0.4*link``. ``data_locality`` averages, over the pieces of
  data the stage reads, 1.0 when the data is in the cluster's region, 0.25 when it is only in
  other regions and 0.5 when its location is unknown; 1.0 when the stage reads nothing. The
  pieces are the stage's inputs plus one per *bare* dependency (a ``dependencies:`` entry it
  takes no ``from:`` input of). Where a piece lives: an input's own ``location`` (for a
  ``from:`` input, the producing output's); otherwise, for a ``from:`` input or a bare
  dependency, where the stage it depends on keeps its data, ``D(d)`` = the regions of ``d``'s
  located outputs or, when none is located, of its located inputs (one level, not
  transitively). A bare dependency with an empty ``D(d)`` is no piece at all, so a stage
  scores as before when nothing is known about its dependencies. A piece located in several
  regions scores 1.0 in each of them. This co-locates a stage with its dependencies' data
  and stays linear: it depends on where that data is, never on where the dependency is placed.
  ``link`` is 1.0 or 0.5 for Deployments on low-latency or other clusters, and 1.0 / 0.5 /
  0.25 for other stages on high-performance / standard / low network tiers.
- ``energy = cluster.energy_efficiency``.

``total`` is the weighted sum with ``model.score_weights`` divided by the weights' sum, so it
stays in [0, 1] even when the weights do not add up to one, less the **GPU type preference**:
a stage that lists GPU types in order of preference (``gpuType: [h100, a100]``) loses
``PREFERENCE_PENALTY`` (0.1) per rank on a cluster of a later type, 0 on its first choice
(``preference``, in [0, 0.7]: at most 8 types are listed). The penalty is a tenth of the total's
range: a later alternative wins only where it scores at least 0.1 per rank more on the four
terms (a much cheaper or closer cluster), or where the earlier types have no room left. A
stage that does not tolerate a cluster's *derived* GPU taint (``gpu-type=<type>:NoSchedule``,
which fleetc gives a GPU cluster stating no taints: a CPU-only stage) loses
``GPU_TAINT_PENALTY`` (0.5) there, so it runs on a GPU cluster only as a fallback, and its pods
there tolerate the taint (:func:`fleetc.placement.rules.rendered_on`).

At fleet scale (1,000 clusters x 20,000 stages, 20M pairs) nothing here loops over pairs in
Python. Stages and clusters become columns of numbers (text such as GPU types, jurisdictions
and taint sets becomes integer codes; the taint check runs once per distinct pair of toleration
and taint sets, then is looked up), and every filter and term is an array operation over a
block of rows, so the temporaries stay a few MB. Only ``allowed`` (bool) and ``total`` (the
optimizer's input) are kept for every pair; the reasons and the four terms are computed when
asked for. ``total`` stays float64 although float32 would hold a score in [0, 1] well enough:
under numpy 2's promotion rules ``python_float + float32`` is float32, so float32 scores would
silently turn the callers' sums (objectives over 20,000 stages) into float32 arithmetic.
"""

from __future__ import annotations

import mmap
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property

import numpy as np

from fleetc import nodefit
from fleetc.infra import forkmap
from fleetc.model import Cluster, FleetModel, Stage, StageType, untolerated
from fleetc.placement import rules

GIB = 2**30

_TIER_LINK = {"high-performance": 1.0, "standard": 0.5, "low": 0.25}

#: Score a stage loses per rank its cluster's GPU type comes after its first choice (the
#: module docstring); a tenth of the total's range.
PREFERENCE_PENALTY = 0.1
#: What a stage loses on a cluster whose derived GPU taint it does not tolerate (a CPU-only
#: stage on a GPU cluster that states no taints): half the total's range, so it runs there only
#: where no cluster without GPUs has room for it or is allowed (a fallback, never a filter);
#: with the preference at most 0.7 below, ``1 + total`` stays positive: placing it always pays.
GPU_TAINT_PENALTY = 0.5

#: Pairs per block of rows: bounds each temporary array to about 8 MB whatever the fleet's size.
_BLOCK_PAIRS = 1 << 20

class Reasons(Mapping[tuple[int, int], str]):
    """``(stage index, cluster index) -> why not allowed`` for every pair that is not allowed.

    Reads like the dict it replaces (``[key]``, ``.get``, ``in``, iteration in row-major order,
    ``==`` with a dict) but keeps no strings: a fleet of 20M pairs may reject ten million of
    them and a compile reads a handful. Each text comes from :func:`filter_reason` when asked.
    """

    def __init__(self, model: FleetModel, allowed: np.ndarray):
        self._stages = model.stages
        self._clusters = model.clusters
        self._allowed = allowed

    def __getitem__(self, key: tuple[int, int]) -> str:
        if key not in self:
            raise KeyError(key)
        s, c = key
        return filter_reason(self._stages[s], self._clusters[c])

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        s, c = key
        if not isinstance(s, int | np.integer) or not isinstance(c, int | np.integer):
            return False
        n_stages, n_clusters = self._allowed.shape
        return 0 <= s < n_stages and 0 <= c < n_clusters and not self._allowed[s, c]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for s, row in enumerate(self._allowed):
            for c in np.flatnonzero(~row).tolist():
                yield (s, c)

    def __len__(self) -> int:
        return int(self._allowed.size - np.count_nonzero(self._allowed))


@dataclass(frozen=True, eq=False)
class Scores:
    """Filter result and score terms, each an (S, C) array in model order.

    ``allowed`` and ``total`` are computed up front; ``reasons`` and the terms ``compute``,
    ``cost``, ``network`` and ``energy`` on first use (see the module docstring).
    """

    allowed: np.ndarray  # bool
    reasons: Reasons  # (stage index, cluster index) -> why not allowed
    total: np.ndarray
    _kinds: _Columns = field(repr=False)  # one row per kind of stage (:func:`_kinds`)
    _kind_of: np.ndarray = field(repr=False)  # (S,) each stage's row in ``_kinds``

    @cached_property
    def compute(self) -> np.ndarray:
        return self._term("compute")

    @cached_property
    def cost(self) -> np.ndarray:
        return self._term("cost")

    @cached_property
    def network(self) -> np.ndarray:
        return self._term("network")

    @cached_property
    def energy(self) -> np.ndarray:
        return self._term("energy")

    def preference_of(self, stage: int) -> np.ndarray:
        """One stage's GPU type preference penalty over all clusters (0 where not allowed)."""
        row: np.ndarray = self._block_of(stage).preference[0]
        return row

    def terms_of(self, stage: int) -> dict[str, np.ndarray]:
        """One stage's four terms over all clusters, without building the full matrices (what
        ``explain`` needs: a row, not 4 x S x C floats)."""
        block = self._block_of(stage)
        return {name: getattr(block, name)[0] for name in ("compute", "cost", "network", "energy")}

    def _block_of(self, stage: int) -> _Block:
        kind = int(self._kind_of[stage])
        return _Block.of(self._kinds, slice(kind, kind + 1))

    def _term(self, name: str) -> np.ndarray:
        matrix = np.empty((len(self._kinds.s_gpus), self.allowed.shape[1]))
        for rows in _blocks(self._kinds):
            matrix[rows] = getattr(_Block.of(self._kinds, rows), name)
        return _by_stage(matrix, self._kind_of)


def score_matrix(model: FleetModel) -> Scores:
    """Filter every (stage, cluster) pair and score the allowed ones; see the module docstring.

    Each kind of stage (:func:`_kinds`: stages whose columns are equal, byte for byte) is
    scored once and its rows copied to its stages: a generated 1,000 x 20,000 fleet has ~150
    kinds. A large fleet's blocks of kinds are filled on every core (:func:`forkmap.fork_map`), into
    arrays the forked processes share with this one (an anonymous shared mapping, nothing
    pickled): rows are independent, so where a block starts, or which stage's row a kind's is,
    changes no bit, and a block a child failed to fill is filled here again."""
    columns = _Columns.of(model)
    first, kind_of = _kinds(columns)
    kinds = columns if len(first) == len(model.stages) else columns.of_stages(first)
    allowed, total = _scored(model, kinds)
    allowed, total = _by_stage(allowed, kind_of), _by_stage(total, kind_of)
    return Scores(allowed, Reasons(model, allowed), total, kinds, kind_of)


def _scored(model: FleetModel, columns: _Columns) -> tuple[np.ndarray, np.ndarray]:
    """``allowed`` and ``total`` of the stages in ``columns``, in their order."""
    shape = (len(columns.s_gpus), len(model.clusters))
    shared = shape[0] * shape[1] * _PAIR_COST >= forkmap.MIN_PARALLEL_SIZE
    blocks = list(_blocks(columns, pieces=forkmap.usable_cores() if shared else 1))
    allowed = _shared_zeros(shape, np.bool_) if shared else np.zeros(shape, dtype=bool)
    total = _shared_zeros(shape, np.float64) if shared else np.zeros(shape)

    def fill(rows: slice) -> None:
        block = _Block.of(columns, rows)
        allowed[rows] = block.allowed
        total[rows] = _total(model, block)

    if shared:
        forkmap.fork_map(fill, blocks, [(rows.stop - rows.start) * shape[1] * _PAIR_COST for rows in blocks])
    else:
        for rows in blocks:
            fill(rows)
    return allowed, total


def _kinds(columns: _Columns) -> tuple[np.ndarray, np.ndarray]:
    """The stages alike for scoring: the first stage of each kind (stages whose per-stage
    columns hold the same bytes, so that their rows are the same bits), and each stage's kind;
    where every stage is its own kind, the stages in their order."""
    count = len(columns.s_gpus)
    if count < 2:
        return np.arange(count), np.arange(count)
    parts = [np.ascontiguousarray(np.moveaxis(getattr(columns, name), _STAGE_AXIS.get(name, 0), 0))
             .reshape(count, -1).view(np.uint8) for name in _STAGE_COLUMNS]
    kind_of, first = alike_rows(np.concatenate(parts, axis=1))
    if len(first) == count:
        return np.arange(count), np.arange(count)
    return first, kind_of


def alike_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``rows`` (2-D) equal byte for byte, as kinds: each row's kind, numbered by
    the first row of each, and that first row of each kind. Row indexes are sorted and neighbours
    compared a block at a time: ``np.unique`` copied the rows twice (2 x 160 MB at 1,000 x 20,000)."""
    keys = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel()
    order = np.argsort(keys, kind="stable")  # stable: a kind's first row comes first
    starts = np.ones(len(rows), dtype=bool)  # where a kind starts, in sorted order
    for low in range(1, len(rows), _ALIKE_BLOCK):
        here = order[low: low + _ALIKE_BLOCK]
        starts[low: low + len(here)] = keys[here] != keys[order[low - 1: low - 1 + len(here)]]
    first = order[starts]  # each kind's first row, kinds in sorted order
    kind = np.empty(len(rows), dtype=np.int64)
    kind[order] = np.cumsum(starts) - 1
    by_first = np.argsort(first, kind="stable")
    return np.argsort(by_first)[kind], first[by_first]  # argsort of a permutation: its inverse


_ALIKE_BLOCK = 1024  # rows alike_rows compares at a time


def _by_stage(matrix: np.ndarray, kind_of: np.ndarray) -> np.ndarray:
    """Rows of kinds -> rows of stages (``matrix`` itself where every stage is its own kind)."""
    return matrix if len(kind_of) == len(matrix) else matrix[kind_of]


#: About what scoring one pair costs, in the unit :data:`forkmap.MIN_PARALLEL_SIZE` weighs (a
#: byte of YAML read): a fleet of ~100,000 pairs or more is scored on every core.
_PAIR_COST = 10


def _shared_zeros(shape: tuple[int, int], dtype: type) -> np.ndarray:
    """A zeroed array in memory that processes forked from here share (their writes are seen)."""
    size = max(1, shape[0] * shape[1] * np.dtype(dtype).itemsize)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=shape[0] * shape[1]).reshape(shape)


def stage_totals(model: FleetModel, stages: Iterable[int]) -> dict[int, np.ndarray]:
    """The ``total`` row (all clusters) of each of ``stages`` (model indices), without the
    full matrix: for the few stages a report explains."""
    columns = _Columns.of(model)
    return {s: _total(model, _Block.of(columns, slice(s, s + 1)))[0] for s in stages}


def _total(model: FleetModel, block: _Block) -> np.ndarray:
    """The weighted terms over the weights' sum (0 when they sum to 0), less the preference and
    the derived GPU taint's penalty."""
    weights = model.score_weights
    weight_sum = weights.compute + weights.cost + weights.network + weights.energy
    if weight_sum <= 0:
        none: np.ndarray = 0.0 - block.preference - block.gpu_taint  # 0.0, never -0.0, where there is none
        return none
    weighted = (
        weights.compute * block.compute
        + weights.cost * block.cost
        + weights.network * block.network
        + weights.energy * block.energy
    )
    total: np.ndarray = weighted / weight_sum - block.preference - block.gpu_taint
    return total


def filter_reason(stage: Stage, cluster: Cluster) -> str:
    """Why ``stage`` may never run on ``cluster``, or '' when it may.

    The filters worded for users, over the rules of :mod:`fleetc.placement.rules` (and ``too
    small``, which capacity implies): :class:`_Block` computes the same verdict on arrays (a
    property test checks they agree) and :class:`Reasons` takes its texts from here.
    """
    if cluster.cordoned:
        return "drained" if cluster.drained else "cordoned"
    if rules.outside_jurisdiction(stage, cluster):
        return f"in {cluster.jurisdiction}, outside the data's jurisdiction {stage.jurisdiction}"
    if rules.lacks_gpus(stage, cluster):
        return "no GPUs"
    if rules.lacks_gpu_type(stage, cluster):
        named = rules.gpu_types_named(stage)
        return f"no {named}" if named else f"no throughput stated for {cluster.gpu_type}"
    stage = rules.on_cluster(stage, cluster)
    repelling = rules.repelling_taints(stage, cluster)
    if repelling:
        taint = repelling[0]
        return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    if stage.gpus > cluster.gpus:
        return f"too small: {stage.gpus} GPUs per replica, cluster has {cluster.gpus}"
    if stage.cpu_millis > cluster.cpu_millis:
        need, have = _cores(stage.cpu_millis), _cores(cluster.cpu_millis)
        return f"too small: {need} cores per replica, cluster has {have}"
    if stage.memory_bytes > cluster.memory_bytes:
        need, have = _gib(stage.memory_bytes), _gib(cluster.memory_bytes)
        return f"too small: {need}Gi memory per replica, cluster has {have}Gi"
    if rules.fits_no_node(stage, cluster):
        return (f"nodes too small for its pods: {rules.shape_words(rules.pod_of(stage))} per pod, "
                f"a node has {rules.shape_words(nodefit.node_of(cluster))}")
    return ""


def _cores(millis: int) -> str:
    return f"{millis / 1000:g}"


def _gib(memory_bytes: int) -> str:
    return f"{round(memory_bytes / GIB, 2):g}"


# --- columns: the model as arrays --------------------------------------------------------------


def _encode(values: Iterable[Hashable], table: dict[Hashable, int]) -> np.ndarray:
    """Integer codes of ``values``, adding unseen ones to ``table``; equal values, equal codes."""
    return np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int64)


@dataclass(frozen=True, eq=False)
class _Columns:
    """Per-cluster (``c_*``, shape (C,)) and per-stage (``s_*``, shape (S,)) columns, so that a
    block of stages is filtered and scored against all clusters at once."""

    c_usable: np.ndarray  # not cordoned
    c_jurisdiction: np.ndarray  # code
    c_has_gpus: np.ndarray
    c_gpu_type: np.ndarray  # code (None has one too)
    c_taints: np.ndarray  # code of the cluster's taint tuple (the user's: () where derived)
    c_derived_taints: np.ndarray  # code of the cluster's derived GPU taint tuple (() where the user's)
    c_gpus: np.ndarray
    c_cpu_millis: np.ndarray
    c_memory_bytes: np.ndarray
    c_node: np.ndarray  # (3, C) one node's GPUs, millicores, bytes (fleetc.nodefit.node_of)
    c_node_kind: np.ndarray  # code of (GPU type, GPUs per node): what node fit reads of a cluster
    c_ratio: np.ndarray  # GiB per core
    c_gpu_hour_cost: np.ndarray
    c_cpu_hour_cost: np.ndarray
    c_memory_gib_hour_cost: np.ndarray
    c_idle: np.ndarray
    c_energy: np.ndarray
    c_region: np.ndarray  # code, an index into s_locality's columns
    c_latency_link: np.ndarray  # link score for Deployments
    c_tier_link: np.ndarray  # link score for the other stages
    s_jurisdiction: np.ndarray  # code; -1 when the stage may run anywhere
    s_needs_gpus: np.ndarray
    s_rank: np.ndarray  # (S, GPU type codes): the type's rank among the stage's; -1: not one
    s_tolerations: np.ndarray  # code of the stage's toleration tuple
    s_gpus: np.ndarray
    s_type_gpus: np.ndarray  # (S, GPU type codes): GPUs per replica on each type (throughput)
    s_cpu_millis: np.ndarray
    s_memory_bytes: np.ndarray
    s_pod: np.ndarray  # (3, S, K) one pod's GPUs, millicores, bytes on each node kind code (rules.pod_of)
    s_ratio: np.ndarray
    s_replicas: np.ndarray
    s_cores: np.ndarray
    s_memory_gib: np.ndarray
    s_deployment: np.ndarray
    s_locality: np.ndarray  # (S, regions): data_locality of the stage in each cluster region
    tolerated: np.ndarray  # (toleration tuples, taint tuples): no hard taint left uncovered

    @classmethod
    def of(cls, model: FleetModel) -> _Columns:
        codes = _Codes()
        clusters = _cluster_codes(model.clusters, codes)
        stage_tolerations = _encode((s.tolerations for s in model.stages), codes.toleration_sets)
        return cls(
            **clusters,
            **_cluster_room(model.clusters),
            **_cluster_prices(model.clusters),
            **_stage_columns(model.stages, codes),
            s_tolerations=stage_tolerations,
            s_pod=_kind_pods(model.stages, [model.clusters[int(np.flatnonzero(clusters["c_node_kind"] == k)[0])]
                                            for k in range(len(codes.node_kinds))]),
            s_locality=_locality(model.stages, codes.regions),
            tolerated=_tolerated(codes),
        )

    def of_stages(self, stages: np.ndarray) -> _Columns:
        """These columns for ``stages`` (indices) only; the clusters' stay as they are."""
        return replace(self, **{name: np.take(getattr(self, name), stages, axis=_STAGE_AXIS.get(name, 0))
                                for name in _STAGE_COLUMNS})


@dataclass(frozen=True)
class _Codes:
    """The tables :func:`_encode` fills while the columns are built: each value seen, its code."""

    jurisdictions: dict[Hashable, int] = field(default_factory=dict)
    gpu_types: dict[Hashable, int] = field(default_factory=dict)
    node_kinds: dict[Hashable, int] = field(default_factory=dict)
    taint_sets: dict[Hashable, int] = field(default_factory=dict)
    toleration_sets: dict[Hashable, int] = field(default_factory=dict)
    regions: dict[Hashable, int] = field(default_factory=dict)


def _column(values: Iterable[object], count: int, dtype: type = float) -> np.ndarray:
    """One column of ``count`` ``values``."""
    return np.fromiter(values, dtype=dtype, count=count)


def _cluster_codes(clusters: tuple[Cluster, ...], codes: _Codes) -> dict[str, np.ndarray]:
    """The clusters' coded columns of :class:`_Columns` (jurisdiction, GPU type, node kind,
    taints, region), their values added to ``codes``."""
    return {
        "c_jurisdiction": _encode((c.jurisdiction for c in clusters), codes.jurisdictions),
        "c_gpu_type": _encode((c.gpu_type for c in clusters), codes.gpu_types),
        "c_node_kind": _encode(((c.gpu_type, c.gpus_per_node if c.gpus > 0 else 0) for c in clusters),
                               codes.node_kinds),
        "c_taints": _encode((() if c.taints_derived else c.taints for c in clusters), codes.taint_sets),
        "c_derived_taints": _encode((c.taints if c.taints_derived else () for c in clusters), codes.taint_sets),
        "c_region": _encode((c.region for c in clusters), codes.regions),
    }


def _cluster_room(clusters: tuple[Cluster, ...]) -> dict[str, np.ndarray]:
    """The clusters' columns of :class:`_Columns` the filters read: whether usable, their
    resources, one node's and the memory per core."""
    n = len(clusters)
    memory_gib = _column((c.memory_bytes / GIB for c in clusters), n)
    cores = _column((c.cpu_millis / 1000 for c in clusters), n)
    return {
        "c_usable": _column((not c.cordoned for c in clusters), n, bool),
        "c_has_gpus": _column((c.gpu_type is not None and c.gpus > 0 for c in clusters), n, bool),
        "c_gpus": _column((c.gpus for c in clusters), n, np.int64),
        "c_cpu_millis": _column((c.cpu_millis for c in clusters), n, np.int64),
        "c_memory_bytes": _column((c.memory_bytes for c in clusters), n, np.int64),
        "c_node": np.array([_shape(nodefit.node_of(c)) for c in clusters], dtype=np.int64).reshape(-1, 3).T,
        "c_ratio": _gib_per_core(memory_gib, cores),
    }


def _cluster_prices(clusters: tuple[Cluster, ...]) -> dict[str, np.ndarray]:
    """The clusters' columns of :class:`_Columns` the score terms read: prices, idle share,
    energy efficiency and link scores."""
    n = len(clusters)
    return {
        "c_gpu_hour_cost": _column((c.gpu_hour_cost for c in clusters), n),
        "c_cpu_hour_cost": _column((c.cpu_hour_cost for c in clusters), n),
        "c_memory_gib_hour_cost": _column((c.memory_gib_hour_cost for c in clusters), n),
        "c_idle": np.clip(1.0 - _column((c.utilization for c in clusters), n), 0.0, 1.0),
        "c_energy": np.clip(_column((c.energy_efficiency for c in clusters), n), 0.0, 1.0),
        "c_latency_link": np.where(_column((c.low_latency for c in clusters), n, bool), 1.0, 0.5),
        "c_tier_link": _column((_TIER_LINK[c.network_tier] for c in clusters), n),
    }


def _stage_columns(stages: tuple[Stage, ...], codes: _Codes) -> dict[str, np.ndarray]:
    """The stages' plain columns of :class:`_Columns` (all but tolerations, pods and locality),
    a jurisdiction no cluster has added to ``codes``."""
    n = len(stages)
    memory_gib = _column((s.memory_bytes / GIB for s in stages), n)
    cores = _column((s.cpu_millis / 1000 for s in stages), n)
    jurisdictions = codes.jurisdictions
    return {
        "s_jurisdiction": _column(
            (-1 if s.jurisdiction is None else jurisdictions.setdefault(s.jurisdiction, len(jurisdictions))
             for s in stages), n, np.int64),
        "s_needs_gpus": _column((s.gpus > 0 for s in stages), n, bool),
        "s_rank": _ranks(stages, codes.gpu_types),
        "s_gpus": _column((s.gpus for s in stages), n, np.int64),
        "s_type_gpus": _type_gpus(stages, codes.gpu_types),
        "s_cpu_millis": _column((s.cpu_millis for s in stages), n, np.int64),
        "s_memory_bytes": _column((s.memory_bytes for s in stages), n, np.int64),
        "s_ratio": _gib_per_core(memory_gib, cores),
        "s_replicas": _column((s.replicas for s in stages), n, np.int64),
        "s_cores": cores,
        "s_memory_gib": memory_gib,
        "s_deployment": _column((s.type is StageType.DEPLOYMENT for s in stages), n, bool),
    }


def _tolerated(codes: _Codes) -> np.ndarray:
    """(toleration tuples, taint tuples): whether the tolerations leave no hard taint uncovered."""
    return np.array(
        [[not untolerated(taints, tolerations) for taints in codes.taint_sets]  # type: ignore[arg-type]
         for tolerations in codes.toleration_sets],
        dtype=np.bool_,
    ).reshape(len(codes.toleration_sets), len(codes.taint_sets))


#: The per-stage columns of :class:`_Columns`: a stage's row in them is all its scoring reads.
_STAGE_COLUMNS = tuple(f.name for f in fields(_Columns) if f.name.startswith("s_"))
#: The axis of stages in a per-stage column where it is not the first.
_STAGE_AXIS = {"s_pod": 1}


def _ranks(stages: tuple[Stage, ...], gpu_types: dict[Hashable, int]) -> np.ndarray:
    """(S, T) each GPU type code's rank among each stage's GPU types (:meth:`Stage.preference`),
    -1 where the stage may not run on it; all 0 for a stage that needs no GPUs or names none."""
    ranks = np.zeros((len(stages), len(gpu_types)), dtype=np.int64)
    for s, stage in enumerate(stages):
        if stage.gpus > 0 and (stage.gpu_types or stage.gpu_options):
            ranks[s] = [-1 if (rank := stage.preference(t)) is None  # type: ignore[arg-type]
                        or (stage.throughput is not None and rules.option_of(stage, t) is None)  # type: ignore[arg-type]
                        else rank for t in gpu_types]
    return ranks


def _type_gpus(stages: tuple[Stage, ...], gpu_types: dict[Hashable, int]) -> np.ndarray:
    """(S, T) GPUs per replica of each stage on each GPU type code: ``Stage.gpus`` but for a
    stage asking for throughput (:attr:`Stage.gpu_options`; its first option's on other types,
    where the rank filter keeps it off anyway)."""
    gpus = np.repeat(np.fromiter((s.gpus for s in stages), dtype=np.int64, count=len(stages))[:, np.newaxis],
                     len(gpu_types), axis=1)
    for s, stage in enumerate(stages):
        for option in stage.gpu_options:
            if option.gpu_type in gpu_types:
                gpus[s, gpu_types[option.gpu_type]] = option.gpus
    return gpus


def _kind_pods(stages: tuple[Stage, ...], kinds: list[Cluster]) -> np.ndarray:
    """(3, S, K) each stage's pod (:func:`rules.pod_of`) on each node kind code, ``kinds`` a
    cluster of each: as the stage runs there (:func:`rules.on_cluster`: a gang's replica split
    for that kind's nodes, a stage asking for throughput with its option for the type)."""
    pods = np.repeat(np.array([_shape(rules.pod_of(s)) for s in stages], dtype=np.int64).reshape(-1, 3).T
                     [:, :, np.newaxis], len(kinds), axis=2)
    smallest = min((c.gpus_per_node for c in kinds if c.gpus > 0), default=0)
    for s, stage in enumerate(stages):
        if not (stage.gpu_options or (stage.is_gang and stage.gpus > smallest)):
            continue  # split nowhere: its pod is the same on every kind
        for k, cluster in enumerate(kinds):
            here = rules.on_cluster(stage, cluster)
            if here is not stage:
                pods[:, s, k] = _shape(rules.pod_of(here))
    return pods


def _shape(shape: nodefit.Shape) -> tuple[int, int, int]:
    """GPUs, millicores, bytes (``dataclasses.astuple`` deep-copies: seconds at 20,000 stages)."""
    return shape.gpus, shape.millis, shape.memory


def _gib_per_core(memory_gib: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Memory per core; 0 where there are no cores."""
    return np.where(cores > 0, memory_gib / np.where(cores > 0, cores, 1.0), 0.0)


def _locality(stages: tuple[Stage, ...], regions: dict[Hashable, int]) -> np.ndarray:
    """(S, R) ``data_locality`` of each stage in each of the R cluster regions (module docstring).

    Every piece scores 0.25 + 0.75 in its regions, or 0.5 when unlocated; sums of quarters are
    exact, so equal data gives bit-equal scores.
    """
    by_key = {stage.key: stage for stage in stages}
    locality = np.ones((len(stages), len(regions)))
    rows: dict[tuple[frozenset[str], ...], np.ndarray] = {}  # the same pieces recur
    for s, stage in enumerate(stages):
        pieces = tuple(_data_pieces(stage, by_key))
        if not pieces:
            continue
        row = rows.get(pieces)
        if row is None:
            row = np.full(len(regions), sum(0.25 if where else 0.5 for where in pieces))
            for where in pieces:
                for region in where:
                    if region in regions:
                        row[regions[region]] += 0.75
            row = rows[pieces] = row / len(pieces)
        locality[s] = row
    return locality


def _data_pieces(stage: Stage, by_key: dict[str, Stage]) -> list[frozenset[str]]:
    """The regions of each piece of data ``stage`` reads; empty for an unlocated piece."""
    def kept_by(name: str | None) -> frozenset[str]:
        dependency = by_key.get(f"{stage.pipeline}/{name}") if name else None
        return _kept_data(dependency) if dependency is not None else frozenset()

    pieces = [frozenset((item.location,)) if item.location else kept_by(item.from_stage) for item in stage.inputs]
    read_from = {item.from_stage for item in stage.inputs}
    bare = (kept_by(name) for name in stage.dependencies if name not in read_from)
    return pieces + [where for where in bare if where]


def _kept_data(stage: Stage) -> frozenset[str]:
    """``D(d)``: the regions of the stage's located outputs, or else of its located inputs."""
    outputs = frozenset(item.location for item in stage.outputs if item.location)
    return outputs or frozenset(item.location for item in stage.inputs if item.location)


# --- blocks: filters and terms over a block of rows -------------------------------------------


def _blocks(columns: _Columns, pieces: int = 1) -> Iterator[slice]:
    """Row slices of at most ``_BLOCK_PAIRS`` pairs (one row at least), and at least ``pieces``
    of them where there are as many rows (one to score on each core)."""
    n_stages, n_clusters = len(columns.s_gpus), len(columns.c_gpus)
    step = max(1, min(_BLOCK_PAIRS // max(n_clusters, 1), -(-n_stages // pieces)))
    for start in range(0, n_stages, step):
        yield slice(start, min(start + step, n_stages))


@dataclass(frozen=True, eq=False)
class _Block:
    """Filters and terms of the stages in ``rows`` against every cluster, in float64."""

    columns: _Columns
    rows: slice
    allowed: np.ndarray

    @classmethod
    def of(cls, columns: _Columns, rows: slice) -> _Block:
        k = columns
        column = np.s_[rows, np.newaxis]
        jurisdiction = k.s_jurisdiction[column]
        allowed = (
            k.c_usable
            & ((jurisdiction < 0) | (jurisdiction == k.c_jurisdiction))
            & (~k.s_needs_gpus[column] | k.c_has_gpus)
            & (k.s_rank[rows][:, k.c_gpu_type] >= 0)
            & k.tolerated[k.s_tolerations[column], k.c_taints]
            & (k.s_type_gpus[rows][:, k.c_gpu_type] <= k.c_gpus)
            & (k.s_cpu_millis[column] <= k.c_cpu_millis)
            & (k.s_memory_bytes[column] <= k.c_memory_bytes)
            & np.all(k.s_pod[:, rows][:, :, k.c_node_kind] <= k.c_node[:, np.newaxis, :], axis=0)
        )
        return cls(columns, rows, allowed)

    @property
    def compute(self) -> np.ndarray:
        k, column = self.columns, np.s_[self.rows, np.newaxis]
        gpu_compat = np.where(k.s_needs_gpus[column], 1.0, np.where(k.c_has_gpus, 0.5, 1.0))
        stage_ratio = k.s_ratio[column]
        ratio_sum = stage_ratio + k.c_ratio
        safe_sum = np.where(ratio_sum > 0, ratio_sum, 1.0)
        balance = np.where(ratio_sum > 0, 1.0 - np.abs(stage_ratio - k.c_ratio) / safe_sum, 1.0)
        return np.where(self.allowed, 0.5 * gpu_compat + 0.3 * balance + 0.2 * k.c_idle, 0.0)

    @property
    def cost(self) -> np.ndarray:
        k, column = self.columns, np.s_[self.rows, np.newaxis]
        per_replica = (
            k.s_type_gpus[self.rows][:, k.c_gpu_type] * k.c_gpu_hour_cost
            + k.s_cores[column] * k.c_cpu_hour_cost
            + k.s_memory_gib[column] * k.c_memory_gib_hour_cost
        )
        cost = k.s_replicas[column] * per_replica
        cheapest = np.min(np.where(self.allowed, cost, np.inf), axis=1, keepdims=True, initial=np.inf)
        ratio = np.divide(cheapest, cost, out=np.ones_like(cost), where=cost > 0)
        return np.where(self.allowed, np.clip(ratio, 0.0, 1.0), 0.0)

    @property
    def network(self) -> np.ndarray:
        k, column = self.columns, np.s_[self.rows, np.newaxis]
        locality = k.s_locality[self.rows][:, k.c_region]
        link = np.where(k.s_deployment[column], k.c_latency_link, k.c_tier_link)
        return np.where(self.allowed, 0.6 * locality + 0.4 * link, 0.0)

    @property
    def energy(self) -> np.ndarray:
        return np.where(self.allowed, self.columns.c_energy, 0.0)

    @property
    def gpu_taint(self) -> np.ndarray:
        """``GPU_TAINT_PENALTY`` where the stage does not tolerate the cluster's derived GPU
        taint (:func:`fleetc.placement.rules.preferred_off`): a CPU-only stage on a GPU cluster."""
        k = self.columns
        repelled = ~k.tolerated[k.s_tolerations[self.rows, np.newaxis], k.c_derived_taints]
        return np.where(self.allowed & repelled, GPU_TAINT_PENALTY, 0.0)

    @property
    def preference(self) -> np.ndarray:
        """``PREFERENCE_PENALTY`` times the rank of the cluster's GPU type among the stage's."""
        rank = self.columns.s_rank[self.rows][:, self.columns.c_gpu_type]
        return np.where(self.allowed, PREFERENCE_PENALTY * rank, 0.0)
