"""Which clusters may run each stage, and how well each one suits it.

:func:`score_matrix` turns a :class:`~fleetc.model.FleetModel` into matrices over
S stages x C clusters, both in model order. It is pure: same model, same arrays.

Filters (hard; a failing pair is not ``allowed`` and gets a short reason, the first that applies):

- ``cordoned``: the cluster takes no work (the Fleet's ``cordoned`` or ``--drain``).
- ``in eu, outside the data's jurisdiction cn``: data sovereignty; the stage reads
  data of a jurisdiction (``Stage.jurisdiction``, set by :mod:`fleetc.resolve`) the cluster is
  not in.
- ``no GPUs``: the stage needs GPUs and the cluster has none.
- ``no a100``: the stage names a GPU type the cluster does not have.
- ``untolerated taint k=v:Effect``: a hard taint (not PreferNoSchedule) no toleration covers.
- ``too small: 256Gi memory per replica, cluster has 128Gi``: one replica's GPUs, cores or
  memory exceed the cluster's total capacity. Free capacity is the optimizer's business, not a
  filter: it depends on what else is placed.

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
- ``network = 0.6*data_locality + 0.4*link``. ``data_locality`` averages over the stage's
  inputs 1.0 (data in the cluster's region), 0.5 (location unknown, including outputs of
  other stages) or 0.25 (another region); 1.0 when the stage has no inputs. ``link`` is 1.0 or
  0.5 for Deployments on low-latency or other clusters, and 1.0 / 0.5 / 0.25 for other stages
  on high-performance / standard / low network tiers.
- ``energy = cluster.energy_efficiency``.

``total`` is the weighted sum with ``model.score_weights`` divided by the weights' sum, so it
stays in [0, 1] even when the weights do not add up to one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleetc.model import Cluster, FleetModel, Stage, StageType, untolerated

GIB = 2**30

_TIER_LINK = {"high-performance": 1.0, "standard": 0.5, "low": 0.25}


@dataclass(frozen=True, eq=False)
class Scores:
    """Filter result and score terms, each an (S, C) array in model order."""

    allowed: np.ndarray
    reasons: dict[tuple[int, int], str]  # (stage index, cluster index) -> why not allowed
    compute: np.ndarray
    cost: np.ndarray
    network: np.ndarray
    energy: np.ndarray
    total: np.ndarray


@dataclass(frozen=True, eq=False)
class _Fleet:
    """Per-cluster columns as arrays, so each stage is scored against all clusters at once."""

    gpus: np.ndarray
    cores: np.ndarray
    memory_gib: np.ndarray
    has_gpus: np.ndarray
    gpu_hour_cost: np.ndarray
    cpu_hour_cost: np.ndarray
    memory_gib_hour_cost: np.ndarray
    idle: np.ndarray
    energy: np.ndarray
    regions: np.ndarray
    low_latency: np.ndarray
    tier_link: np.ndarray

    @classmethod
    def of(cls, clusters: tuple[Cluster, ...]) -> _Fleet:
        def column(getter: Callable[[Cluster], object], dtype: type = float) -> np.ndarray:
            return np.array([getter(c) for c in clusters], dtype=dtype)

        return cls(
            gpus=column(lambda c: c.gpus),
            cores=column(lambda c: c.cpu_millis / 1000),
            memory_gib=column(lambda c: c.memory_bytes / GIB),
            has_gpus=column(lambda c: c.gpu_type is not None and c.gpus > 0, bool),
            gpu_hour_cost=column(lambda c: c.gpu_hour_cost),
            cpu_hour_cost=column(lambda c: c.cpu_hour_cost),
            memory_gib_hour_cost=column(lambda c: c.memory_gib_hour_cost),
            idle=np.clip(1.0 - column(lambda c: c.utilization), 0.0, 1.0),
            energy=np.clip(column(lambda c: c.energy_efficiency), 0.0, 1.0),
            regions=column(lambda c: c.region, object),
            low_latency=column(lambda c: c.low_latency, bool),
            tier_link=column(lambda c: _TIER_LINK[c.network_tier]),
        )


def score_matrix(model: FleetModel) -> Scores:
    """Filter every (stage, cluster) pair and score the allowed ones; see the module docstring."""
    fleet = _Fleet.of(model.clusters)
    allowed, reasons = _filter(model)
    compute = _per_stage(_compute_row, model.stages, fleet, allowed)
    network = _per_stage(_network_row, model.stages, fleet, allowed)
    cost = _cost_scores(model.stages, fleet, allowed)
    energy = np.where(allowed, fleet.energy[np.newaxis, :], 0.0)
    weights = model.score_weights
    weighted = (
        weights.compute * compute
        + weights.cost * cost
        + weights.network * network
        + weights.energy * energy
    )
    weight_sum = weights.compute + weights.cost + weights.network + weights.energy
    total = weighted / weight_sum if weight_sum > 0 else np.zeros_like(weighted)
    return Scores(allowed, reasons, compute, cost, network, energy, total)


def _filter(model: FleetModel) -> tuple[np.ndarray, dict[tuple[int, int], str]]:
    """The allowed mask and the reason for every pair that is not allowed.

    One Python call per pair: taints and tolerations do not vectorise, and the reasons are
    strings per pair anyway.
    """
    allowed = np.zeros((len(model.stages), len(model.clusters)), dtype=bool)
    reasons: dict[tuple[int, int], str] = {}
    for s, stage in enumerate(model.stages):
        for c, cluster in enumerate(model.clusters):
            reason = filter_reason(stage, cluster)
            if reason:
                reasons[(s, c)] = reason
            else:
                allowed[s, c] = True
    return allowed, reasons


def filter_reason(stage: Stage, cluster: Cluster) -> str:
    """Why ``stage`` may never run on ``cluster``, or '' when it may."""
    if cluster.cordoned:
        return "cordoned"
    if stage.jurisdiction is not None and cluster.jurisdiction != stage.jurisdiction:
        return f"in {cluster.jurisdiction}, outside the data's jurisdiction {stage.jurisdiction}"
    if stage.gpus > 0 and (cluster.gpu_type is None or cluster.gpus <= 0):
        return "no GPUs"
    if stage.gpus > 0 and stage.gpu_type and stage.gpu_type != cluster.gpu_type:
        return f"no {stage.gpu_type}"
    repelling = untolerated(cluster.taints, stage.tolerations)
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
    return ""


def _per_stage(
    row: Callable[[Stage, _Fleet], np.ndarray],
    stages: tuple[Stage, ...],
    fleet: _Fleet,
    allowed: np.ndarray,
) -> np.ndarray:
    """Stack one row per stage into an (S, C) matrix that is 0 where the pair is not allowed."""
    matrix = np.array([row(stage, fleet) for stage in stages]).reshape(allowed.shape)
    return np.where(allowed, matrix, 0.0)


def _cores(millis: int) -> str:
    return f"{millis / 1000:g}"


def _gib(memory_bytes: int) -> str:
    return f"{round(memory_bytes / GIB, 2):g}"


def _compute_row(stage: Stage, fleet: _Fleet) -> np.ndarray:
    gpu_compat = np.ones_like(fleet.gpus) if stage.gpus > 0 else np.where(fleet.has_gpus, 0.5, 1.0)
    stage_ratio = _gib_per_core(
        np.array(stage.memory_bytes / GIB), np.array(stage.cpu_millis / 1000)
    )
    cluster_ratio = _gib_per_core(fleet.memory_gib, fleet.cores)
    ratio_sum = stage_ratio + cluster_ratio
    safe_sum = np.where(ratio_sum > 0, ratio_sum, 1.0)
    balance = np.where(ratio_sum > 0, 1.0 - np.abs(stage_ratio - cluster_ratio) / safe_sum, 1.0)
    return 0.5 * gpu_compat + 0.3 * balance + 0.2 * fleet.idle


def _gib_per_core(memory_gib: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Memory per core; 0 where there are no cores."""
    return np.where(cores > 0, memory_gib / np.where(cores > 0, cores, 1.0), 0.0)


def _network_row(stage: Stage, fleet: _Fleet) -> np.ndarray:
    locality = np.ones_like(fleet.gpus)
    if stage.inputs:
        per_input = [
            np.full_like(fleet.gpus, 0.5)
            if item.location is None
            else np.where(fleet.regions == item.location, 1.0, 0.25)
            for item in stage.inputs
        ]
        locality = np.mean(per_input, axis=0)
    if stage.type is StageType.DEPLOYMENT:
        link = np.where(fleet.low_latency, 1.0, 0.5)
    else:
        link = fleet.tier_link
    return 0.6 * locality + 0.4 * link


def _cost_row(stage: Stage, fleet: _Fleet) -> np.ndarray:
    per_replica = (
        stage.gpus * fleet.gpu_hour_cost
        + stage.cpu_millis / 1000 * fleet.cpu_hour_cost
        + stage.memory_bytes / GIB * fleet.memory_gib_hour_cost
    )
    return stage.replicas * per_replica


def _cost_scores(stages: tuple[Stage, ...], fleet: _Fleet, allowed: np.ndarray) -> np.ndarray:
    cost = np.array([_cost_row(stage, fleet) for stage in stages]).reshape(allowed.shape)
    cheapest = np.min(np.where(allowed, cost, np.inf), axis=1, keepdims=True)
    ratio = np.divide(cheapest, cost, out=np.ones_like(cost), where=cost > 0)
    return np.where(allowed, np.clip(ratio, 0.0, 1.0), 0.0)
