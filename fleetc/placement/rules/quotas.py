"""Team quotas and cost caps: fleet-wide limits on what the stages of some pipelines take
together, counted in quota slots and cost micros, and the one cap check every reader words
(:func:`cap_shortfalls`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement.rules.capacity import slots_on, slots_per_gpu, uses_shared_slots
from fleetc.placement.rules.filters import on_cluster
from fleetc.placement.rules.replicas import least_on_cluster
from fleetc.placement.rules.units import MICROS, ROUNDING


@dataclass(frozen=True)
class Cap:
    """A fleet-wide cap on what the stages of some pipelines take together: a team's GPU quota
    per type and hourly cost cap (AIGCPlatform ``spec.teams``), or a pipeline's hourly cost cap
    (AIGCPipeline ``spec.maxHourlyCost``). ``name`` is how messages name it (``team research``,
    ``pipeline llm``); ``field`` the policy field (with ``path``, the file) that states it."""

    name: str
    pipelines: frozenset[str]
    gpu_quota: tuple[tuple[str, int], ...]  # (GPU type, GPUs)
    max_cost: float | None  # per hour
    path: str
    field: str

    @property
    def cost_field(self) -> str:
        """The policy field of the cost cap."""
        return self.field if self.field.endswith("maxHourlyCost") else f"{self.field}.maxHourlyCost"

    @property
    def max_cost_micros(self) -> int | None:
        return None if self.max_cost is None else math.floor(self.max_cost * MICROS + ROUNDING)


def caps(model: FleetModel) -> list[Cap]:
    """Every cap of the model that caps anything: the teams' (in model order), then the
    pipelines' budgets."""
    found = [Cap(f"team {t.name}", frozenset(t.pipelines), t.gpu_quota, t.max_hourly_cost, t.source.path,
                 t.source.field)
             for t in model.teams if t.gpu_quota or t.max_hourly_cost is not None]
    found += [Cap(f"pipeline {b.pipeline}", frozenset({b.pipeline}), (), b.max_hourly_cost, b.source.path,
                  b.source.field) for b in model.budgets]
    return found


def quota_slots(model: FleetModel, stage: Stage, cluster: Cluster, replicas: int) -> int:
    """The GPUs ``replicas`` of ``stage`` take of a quota on ``cluster``, counted in time-sliced
    slots (:func:`slots_per_gpu` to a GPU) so that shared replicas need no fractions: an
    exclusive GPU is all of its slots, a time-sliced one a slot where the cluster's device plugin
    time-slices, else all of them, as such a replica takes whole GPUs there (:func:`slots_on`).
    A stage asking for throughput counts its GPUs on the cluster's type (:func:`on_cluster`)."""
    gpus = replicas * on_cluster(stage, cluster).gpus
    whole = slots_per_gpu(model)
    return gpus * whole // slots_on(model, cluster) if uses_shared_slots(model, stage) else gpus * whole


def replica_cost_micros(model: FleetModel, stage: Stage, cluster: Cluster) -> int:
    """The hourly cost of one replica of ``stage`` on ``cluster``, in :data:`MICROS`: its GPUs
    (a time-sliced one ``1 / slots_on`` of a GPU: all of one where the device plugin does not
    time-slice, :func:`slots_on`) x GPU-hour + cores x core-hour + GiB x
    GiB-hour, the prices the cost score uses (:mod:`fleetc.placement.scoring`)."""
    stage = on_cluster(stage, cluster)
    gpus = stage.gpus / slots_on(model, cluster) if uses_shared_slots(model, stage) else float(stage.gpus)
    per_hour = (gpus * cluster.gpu_hour_cost + stage.cpu_millis / 1000 * cluster.cpu_hour_cost
                + stage.memory_bytes / 2**30 * cluster.memory_gib_hour_cost)
    return round(MICROS * per_hour)


@dataclass(frozen=True)
class CapUsage:
    """What stages under a cap take together: quota slots per GPU type, cost in micros."""

    slots: tuple[tuple[str, int], ...] = ()
    cost: int = 0

    def of(self, gpu_type: str) -> int:
        return dict(self.slots).get(gpu_type, 0)


def cap_usage(model: FleetModel, cap: Cap, placed: Iterable[tuple[Stage, Cluster, int]]) -> CapUsage:
    """What the ``(stage, cluster, replicas)`` placed take of ``cap`` (stages of other
    pipelines take nothing): GPUs by the type of the cluster they run on."""
    slots: dict[str, int] = {}
    cost = 0
    for stage, cluster, replicas in placed:
        if stage.pipeline not in cap.pipelines or replicas <= 0:
            continue
        stage = on_cluster(stage, cluster)  # a stage asking for throughput: its GPUs on this type
        if stage.gpus > 0 and cluster.gpu_type is not None:
            slots[cluster.gpu_type] = slots.get(cluster.gpu_type, 0) + quota_slots(model, stage, cluster, replicas)
        cost += replicas * replica_cost_micros(model, stage, cluster)
    return CapUsage(tuple(sorted(slots.items())), cost)


@dataclass(frozen=True)
class CapRoom:
    """One limit of a cap as some replicas meet it, in the rule's units: quota slots
    (:func:`quota_slots`) for the quota of ``gpu_type``, cost micros for the cost cap
    (``gpu_type`` None): the ``limit``, what is placed under it already (``used``) and what the
    replicas take (``takes``)."""

    gpu_type: str | None
    limit: int
    used: int
    takes: int

    @property
    def left(self) -> int:
        """What the cap leaves beside what is placed (negative when that is over already)."""
        return self.limit - self.used

    @property
    def short(self) -> int:
        """How much the cap leaves too little for the replicas (> 0: they do not fit it)."""
        return self.takes - self.left


def cap_room(model: FleetModel, cap: Cap, used: CapUsage, stage: Stage, cluster: Cluster,
             replicas: int) -> list[CapRoom]:
    """What ``cap`` leaves for ``replicas`` more of ``stage`` on ``cluster`` beside ``used``
    (:func:`cap_usage` of what else is placed): its quota of the cluster's GPU type (when the
    stage takes GPUs), then its cost cap, each it has; [] when it does not cover the stage's
    pipeline. A limit is :attr:`CapRoom.short` exactly when :func:`cap_overuse` finds it
    exceeded by ``used`` with the replicas added."""
    if stage.pipeline not in cap.pipelines:
        return []
    per_gpu = slots_per_gpu(model)
    gpus = on_cluster(stage, cluster).gpus
    found = [CapRoom(gpu_type, quota * per_gpu, used.of(gpu_type), quota_slots(model, stage, cluster, replicas))
             for gpu_type, quota in cap.gpu_quota if gpus > 0 and cluster.gpu_type == gpu_type]
    limit = cap.max_cost_micros
    if limit is not None:
        found.append(CapRoom(None, limit, used.cost, replicas * replica_cost_micros(model, stage, cluster)))
    return found


def as_gpus(slots: int, per_gpu: int) -> str:
    """Quota slots in GPUs: ``12``, or ``12.5`` where time-sliced slots leave a fraction."""
    return str(slots // per_gpu) if slots % per_gpu == 0 else f"{slots / per_gpu:.3f}".rstrip("0")


def money(micros: int) -> str:
    """Micros as currency with cents: ``123.45``."""
    return f"{micros / MICROS:,.2f}"


def cap_overuse(model: FleetModel, cap: Cap, used: CapUsage) -> list[str]:
    """Each limit of ``cap`` that ``used`` exceeds, as a phrase (``48 h100 placed, quota 32``;
    ``cost 120.50/h, cap 100.00/h``); [] when it holds."""
    per_gpu = slots_per_gpu(model)
    problems = [f"{as_gpus(used.of(gpu_type), per_gpu)} {gpu_type} placed, quota {quota}"
                for gpu_type, quota in cap.gpu_quota if used.of(gpu_type) > quota * per_gpu]
    limit = cap.max_cost_micros
    if limit is not None and used.cost > limit:
        problems.append(f"cost {money(used.cost)}/h, cap {money(limit)}/h")
    return problems


# --- degraded serving: the replicas that fit ---------------------------------------------------


# --- the one cap check ---------------------------------------------------------------------------


def caps_used(model: FleetModel, placed: Iterable[tuple[Stage, Cluster, int]]) -> list[tuple[Cap, CapUsage]]:
    """Each cap of the model (:func:`caps`) with what the ``(stage, cluster, replicas)`` placed
    take of it. A cap is fleet-wide: ``placed`` is the whole placement (every component, every
    cluster), never one cluster's or one component's share of it."""
    found = caps(model)
    if not found:  # no cap: the placement is not read (20,000 stages)
        return []
    placed = list(placed)
    return [(cap, cap_usage(model, cap, placed)) for cap in found]


@dataclass(frozen=True)
class CapShortfall:
    """A limit of ``cap`` that leaves too little (``room``, :attr:`CapRoom.short` > 0) for some
    replicas of a stage on a cluster."""

    cap: Cap
    room: CapRoom

    def words(self, model: FleetModel) -> str:
        """The one wording of a cap that keeps a stage off a cluster: ``over team research's h100
        quota (8 of 32 left)``, ``over pipeline llm's cost cap (12.00/h of 30.00/h left)``."""
        room = self.room
        if room.gpu_type is not None:
            per_gpu = slots_per_gpu(model)
            return (f"over {self.cap.name}'s {room.gpu_type} quota ({as_gpus(max(room.left, 0), per_gpu)} of "
                    f"{room.limit // per_gpu} left)")
        return f"over {self.cap.name}'s cost cap ({money(max(room.left, 0))}/h of {money(room.limit)}/h left)"


def cap_shortfalls(model: FleetModel, capped: Iterable[tuple[Cap, CapUsage]], stage: Stage, cluster: Cluster,
                   replicas: int | None = None) -> list[CapShortfall]:
    """The one cap check: each limit of the caps over ``stage``'s pipeline that leaves too little
    for ``replicas`` of it on ``cluster`` (default :func:`least_on_cluster`: what a cluster that
    runs it takes) beside what is placed under it (``capped``: each cap with its fleet-wide use,
    :func:`caps_used`; with the stage's own replicas given back where the caller asks where else
    it could go), in cap order, the GPU quota before the cost cap; [] when every cap has room.
    The refusal's reasons, the fixes and explain all read this."""
    need = least_on_cluster(stage) if replicas is None else replicas
    return [CapShortfall(cap, room) for cap, used in capped
            for room in cap_room(model, cap, used, stage, cluster, need) if room.short > 0]
