"""The ledger: what a placement takes of each cluster, of each platform's failover headroom
and of each cap (:class:`Ledger`, for the optimizer and the verifier), and of each cluster's
GPUs and cost per hour (:class:`FleetUsage`, :class:`GPUTally`, for the report), counted once
by the rules of this package."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from fleetc.model import FleetModel, Placement, Stage
from fleetc.placement.rules.capacity import (
    Usage,
    failover_groups,
    failover_shortfalls,
    overuse,
    replica_usage,
    slots_on,
    slots_per_gpu,
    time_sliced_gpus,
    time_sliced_unit,
    unpacked,
    uses_shared_slots,
)
from fleetc.placement.rules.filters import excluded, on_cluster
from fleetc.placement.rules.quotas import CapUsage, cap_overuse, cap_usage, caps
from fleetc.placement.rules.replicas import min_replicas_per_cluster
from fleetc.placement.rules.units import MIB


class Ledger:
    """What is placed on each cluster (:class:`Usage`), and what the serving stages of each
    platform asking for failover headroom take of each of its clusters: whether a few more
    replicas of a stage fit a cluster (:meth:`room_for`), for the optimizer and the verifier
    alike."""

    def __init__(self, model: FleetModel, placed: Iterable[tuple[Stage, str, int]]) -> None:
        self.model = model
        self.clusters = {c.name: c for c in model.clusters}
        self.used = {name: Usage() for name in self.clusters}
        #: cluster -> stage key -> (the stage as it runs there, replicas): what :func:`unpacked` reads
        self.on: dict[str, dict[str, tuple[Stage, int]]] = {name: {} for name in self.clusters}
        self.groups = failover_groups(model)
        self.serving = [{h: Usage() for h in members} for _, members, _ in self.groups]
        self.caps = caps(model)
        self.capped = [CapUsage() for _ in self.caps]
        for stage, cluster, replicas in placed:
            self.add(stage, cluster, replicas)

    def add(self, stage: Stage, cluster: str, replicas: int) -> None:
        """Count ``replicas`` more (fewer, when negative) of ``stage`` on ``cluster``."""
        here = on_cluster(stage, self.clusters[cluster])
        more = replica_usage(self.model, here, replicas)
        self.used[cluster] += more
        count = self.on[cluster].get(stage.key, (here, 0))[1] + replicas
        if count:
            self.on[cluster][stage.key] = (here, count)
        else:
            self.on[cluster].pop(stage.key, None)
        for (_name, _members, serving), on in zip(self.groups, self.serving, strict=True):
            if stage.key in serving and cluster in on:
                on[cluster] += more
        for i, cap in enumerate(self.caps):
            if stage.pipeline in cap.pipelines:
                more_capped = cap_usage(self.model, cap, [(stage, self.clusters[cluster], abs(replicas))])
                sign = 1 if replicas >= 0 else -1
                slots = dict(self.capped[i].slots)
                for gpu_type, n in more_capped.slots:
                    slots[gpu_type] = slots.get(gpu_type, 0) + sign * n
                self.capped[i] = CapUsage(tuple(sorted(slots.items())), self.capped[i].cost + sign * more_capped.cost)

    def fits(self, cluster: str) -> bool:
        """What is placed on ``cluster`` fits its usable capacity (:func:`overuse`) and packs
        onto its nodes (:func:`unpacked`), and every platform whose active-active set it is in
        keeps its failover headroom."""
        if overuse(self.model, self.clusters[cluster], self.used[cluster]) \
                or unpacked(self.model, self.clusters[cluster], self.on[cluster].values()):
            return False
        return not any(
            failover_shortfalls(self.model, (self.clusters[lost], on[lost]),
                                [(self.clusters[o], self.used[o]) for o in members if o != lost])
            for (_name, members, _serving), on in zip(self.groups, self.serving, strict=True) if cluster in members
            for lost in members)

    def within_caps(self) -> bool:
        """Every cap (:func:`caps`) holds."""
        return not any(cap_overuse(self.model, cap, used) for cap, used in zip(self.caps, self.capped, strict=True))

    def fits_with(self, stage: Stage, placed: Mapping[str, int]) -> bool:
        """Whether ``stage`` placed so (cluster -> replicas) fits beside everything else, within
        the caps its pipeline is under."""
        for cluster, replicas in placed.items():
            self.add(stage, cluster, replicas)
        try:
            return all(self.fits(cluster) for cluster in placed) and self.within_caps()
        finally:
            for cluster, replicas in placed.items():
                self.add(stage, cluster, -replicas)

    def room_for(self, stage: Stage, cluster: str, replicas: int) -> bool:
        """Whether ``replicas`` more of ``stage`` fit ``cluster`` where everything else is, within
        the caps its pipeline is under."""
        self.add(stage, cluster, replicas)
        try:
            return self.fits(cluster) and self.within_caps()
        finally:
            self.add(stage, cluster, -replicas)


def room_left(model: FleetModel, stage: Stage, here: dict[str, int], ledger: Ledger) -> list[tuple[str, int]]:
    """The clusters that may run ``stage`` (:func:`exclusions`) with room (:meth:`Ledger.room_for`)
    for more of its replicas, placed ``here`` (cluster -> replicas), each with the replicas it
    would take next: one where the stage runs, its per-cluster minimum elsewhere; never beyond
    the stage's replicas. A stage running degraded and short has none (:func:`least_replicas`)."""
    placed = sum(here.values())
    found = []
    for cluster in model.clusters:
        more = 1 if here.get(cluster.name) else min_replicas_per_cluster(stage)
        if placed + more <= stage.replicas and not excluded(stage, cluster) \
                and ledger.room_for(stage, cluster.name, more):
            found.append((cluster.name, more))
    return found


# --- churn: moves against the previous placement -----------------------------------------------


# --- what a placement takes of the fleet, for the report ---------------------------------------


class GPUTally:
    """GPUs taken per cluster and GPU type: exclusive GPUs plus the whole time-sliced units the
    shared slots take (:func:`time_sliced_gpus`; ``units``: cluster -> GPUs per unit, one GPU
    where not given). :class:`FleetUsage` tallies a placement with it, and the report a committed
    ``placement.yaml`` read without its policies."""

    def __init__(self, slots_per_gpu: int, units: Mapping[str, int]) -> None:
        self.slots_per_gpu = max(1, slots_per_gpu)
        self.units = units
        self.exclusive: dict[tuple[str, str], int] = defaultdict(int)
        self.slots: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, cluster: str, gpu_type: str, count: int, *, shared: bool) -> None:
        """Count ``count`` more GPUs (time-sliced slots when ``shared``) of ``gpu_type`` on ``cluster``."""
        if count:
            (self.slots if shared else self.exclusive)[(cluster, gpu_type)] += count

    def gpus(self) -> dict[str, dict[str, int]]:
        """Cluster -> GPU type -> GPUs taken, for the clusters given any (by name)."""
        taken: dict[str, dict[str, int]] = defaultdict(dict)
        for key in sorted(set(self.exclusive) | set(self.slots)):
            taken[key[0]][key[1]] = self.exclusive[key] + time_sliced_gpus(self.slots[key], self.slots_per_gpu,
                                                                            self.units.get(key[0], 1))
        return dict(taken)


class FleetUsage:
    """What a placement takes of each cluster, as the report shows it: the GPUs taken
    (:meth:`gpus`, time-sliced slots in whole time-sliced units, as the rules count them,
    :func:`taken`) and the cluster's cost per hour (:meth:`cost_per_hour`): the GPUs taken x
    GPU-hour cost + cores x core-hour cost + GiB x GiB-hour cost. A cluster pays for the whole
    time-sliced units it gives over; a cap charges each replica its share of them
    (:func:`replica_cost_micros`)."""

    def __init__(self, model: FleetModel, placement: Placement) -> None:
        clusters = {c.name: c for c in model.clusters}
        stages = {s.key: s for s in model.stages}
        self.clusters = clusters
        self.tally = GPUTally(slots_per_gpu(model), {c.name: time_sliced_unit(c) for c in model.clusters})
        self._cores_and_memory: dict[str, float] = defaultdict(float)
        for p in placement.stages:
            stage = stages[p.stage]
            for a in p.assignments:
                if a.replicas <= 0:
                    continue
                cluster = clusters[a.cluster]
                self.tally.add(a.cluster, cluster.gpu_type or "gpu", a.gpus,
                               shared=uses_shared_slots(model, stage) and slots_on(model, cluster) > 1)
                self._cores_and_memory[a.cluster] += (
                    a.replicas * stage.cpu_millis / 1000 * cluster.cpu_hour_cost
                    + a.replicas * stage.memory_bytes / (1024 * MIB) * cluster.memory_gib_hour_cost)

    def gpus(self) -> dict[str, dict[str, int]]:
        """Cluster -> GPU type -> GPUs taken (:class:`GPUTally`)."""
        return self.tally.gpus()

    def cost_per_hour(self) -> dict[str, float]:
        """Cluster -> cost per hour of what is placed on it, for each cluster that runs anything."""
        cost = dict(self._cores_and_memory)
        for name, per_type in self.gpus().items():
            cost[name] = cost.get(name, 0.0) + sum(per_type.values()) * self.clusters[name].gpu_hour_cost
        return cost
