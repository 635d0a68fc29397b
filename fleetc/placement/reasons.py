"""Why a stage is left out: kube-scheduler style reasons per cluster (``0/3 clusters fit p/s:
2 have no a100, 1 has 8 of 16 free a100``) against the capacity and the caps the placed stages
leave, for the stages a placement leaves out (:func:`unplaced`)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement import rules
from fleetc.placement.problem import capacity_of
from fleetc.placement.scoring import GIB, Scores


def unplaced(
    model: FleetModel, scores: Scores, blocked: dict[int, str], replicas_at: np.ndarray
) -> dict[int, str]:
    """Each stage ``replicas_at`` leaves out, and why: its ``multiCluster`` conflict, else
    kube-scheduler style against the capacity the placed stages leave free."""
    left_out = [s for s in range(len(model.stages)) if not replicas_at[s].any()]
    if not left_out:
        return {}
    total = capacity_of(model, model.clusters)
    free = total - _used(model, replicas_at)
    capped = _cap_used(model, replicas_at)
    return {s: blocked.get(s) or _unplaced_reason(model, scores, s, free, total, capped) for s in left_out}


def _cap_used(model: FleetModel, replicas_at: np.ndarray) -> list[tuple[rules.Cap, rules.CapUsage]]:
    """Each cap (:func:`rules.caps`) with what ``replicas_at`` takes of it."""
    found = rules.caps(model)
    if not found:
        return []
    stage_of, cluster_of = np.nonzero(replicas_at)
    placed = [(model.stages[s], model.clusters[c], int(replicas_at[s, c]))
              for s, c in zip(stage_of.tolist(), cluster_of.tolist(), strict=True)]
    return [(cap, rules.cap_usage(model, cap, placed)) for cap in found]


def _cap_reason(model: FleetModel, stage: Stage, cluster: Cluster,
                capped: list[tuple[rules.Cap, rules.CapUsage]]) -> str:
    """The first cap over ``stage`` that leaves too little for it on ``cluster`` (a gang's
    replicas, a Deployment's per-cluster minimum; :func:`rules.cap_room`): ``over team
    research's h100 quota (8 of 32 left)``; '' when none does."""
    need = stage.replicas if stage.is_gang else rules.min_replicas_per_cluster(stage)
    for cap, used in capped:
        for room in rules.cap_room(model, cap, used, stage, cluster, need):
            if room.short <= 0:
                continue
            if room.gpu_type is not None:
                per_gpu = rules.slots_per_gpu(model)
                return (f"over {cap.name}'s {room.gpu_type} quota ({rules.as_gpus(max(room.left, 0), per_gpu)} of "
                        f"{room.limit // per_gpu} left)")
            return (f"over {cap.name}'s cost cap ({rules.money(max(room.left, 0))}/h of "
                    f"{rules.money(room.limit)}/h left)")
    return ""


def _used(model: FleetModel, replicas_at: np.ndarray) -> np.ndarray:
    """(3, C) what ``replicas_at`` takes of each cluster as the rules count it
    (:func:`rules.taken`: shared slots as whole time-sliced units started): GPUs,
    cores, GiB."""
    used = np.zeros((3, len(model.clusters)))
    for c in np.flatnonzero(replicas_at.any(axis=0)).tolist():
        placed = [(rules.on_cluster(model.stages[s], model.clusters[c]), int(replicas_at[s, c]))
                  for s in np.flatnonzero(replicas_at[:, c]).tolist()]
        gpus, millis, memory = rules.taken(model, model.clusters[c], rules.usage(model, placed))
        used[:, c] = (gpus, millis / 1000, memory / GIB)
    return used


def _unplaced_reason(
    model: FleetModel, scores: Scores, s: int, free: np.ndarray, total: np.ndarray,
    capped: list[tuple[rules.Cap, rules.CapUsage]] | None = None,
) -> str:
    """``0/3 clusters fit p/s: 2 have no a100, 1 has 8 of 16 free a100`` for stage index ``s``,
    against the (3, C) capacity ``free`` the placed stages leave of ``total`` (a
    ``multiCluster`` conflict is reported by :func:`fleetc.placement.problem.multicluster_conflicts` instead)."""
    stage = model.stages[s]
    why = [
        _capacity_reason(model, stage, cluster, free[:, c], total[:, c],
                         _cap_reason(model, stage, cluster, capped or []))
        if scores.allowed[s, c]
        else scores.reasons[(s, c)]
        for c, cluster in enumerate(model.clusters)
    ]
    groups = sorted(Counter(why).items(), key=lambda item: (-item[1], item[0]))
    detail = ", ".join(_counted(count, reason) for reason, count in groups)
    return f"0/{len(model.clusters)} clusters fit {stage.key}: {detail or 'the fleet has no clusters'}"


def _counted(count: int, reason: str) -> str:
    """``2 have no a100``, ``1 is too small: ...``: the verb agrees with the count."""
    is_state = reason.startswith(("too small", "cordoned", "in ", "over "))
    singular, plural = ("is", "are") if is_state else ("has", "have")
    return f"{count} {singular if count == 1 else plural} {reason}"


def _capacity_reason(
    model: FleetModel, stage: Stage, cluster: Cluster, free: np.ndarray, total: np.ndarray, over_cap: str = ""
) -> str:
    """What ``cluster`` lacks for ``stage`` given ``free`` of ``total`` (GPUs, cores, GiB), or
    when it has the room, ``over_cap``: the cap that leaves too little (:func:`_cap_reason`).

    A gang needs all its replicas at once; a Deployment needs its per-cluster minimum here and
    is short overall when the clusters together have room for fewer replicas than it has.
    Time-sliced GPUs count ``1 / slots_on`` of a GPU per requested GPU (a whole GPU where the
    cluster's device plugin is not configured).
    """
    need = stage.replicas if stage.is_gang else rules.min_replicas_per_cluster(stage)
    stage = rules.on_cluster(stage, cluster)
    demand = np.array([stage.gpus, stage.cpu_millis / 1000, stage.memory_bytes / GIB], dtype=float)
    unit = 1
    if rules.uses_shared_slots(model, stage):
        demand[0] /= rules.slots_on(model, cluster)
        unit = rules.time_sliced_unit(cluster)
        free = free.copy()
        free[0] = math.floor(free[0] / unit + 1e-9) * unit  # time-sliced GPUs come in whole nodes
    for r, (have, capacity) in enumerate(zip(free, total, strict=True)):
        required = need * demand[r]
        if have < (math.ceil(required - 1e-9) if r == 0 else required) - 1e-9:
            reason = _free_of(r, have, capacity, cluster)
            return f"{reason} (whole nodes of {unit}, as time-sliced)" if r == 0 and unit > 1 else reason
    return over_cap or f"room for {_fitting_replicas(stage, demand, free)} of {stage.replicas} replicas"


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

