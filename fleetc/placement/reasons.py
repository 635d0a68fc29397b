"""Why a stage is left out: kube-scheduler style reasons per cluster (``0/3 clusters fit p/s:
2 have no a100, 1 has 8 of 16 free a100``) against the capacity and the caps the placed stages
leave, for the stages a placement leaves out (:func:`unplaced`)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement import rules
from fleetc.placement.scoring import GIB, Scores


def unplaced(
    model: FleetModel, scores: Scores, blocked: dict[int, str], replicas_at: np.ndarray
) -> dict[int, str]:
    """Each stage ``replicas_at`` leaves out, and why: its ``multiCluster`` conflict, else
    kube-scheduler style against the capacity the placed stages leave free."""
    left_out = np.flatnonzero(~replicas_at.any(axis=1)).tolist()
    if not left_out:
        return {}
    placed = _placed(model, replicas_at)
    used = [rules.usage(model, on) for on in placed]
    capped = _cap_used(model, replicas_at)
    return {s: blocked.get(s) or _unplaced_reason(model, scores, s, used, capped, placed) for s in left_out}


def _cap_used(model: FleetModel, replicas_at: np.ndarray) -> list[tuple[rules.Cap, rules.CapUsage]]:
    """Each cap (:func:`rules.caps_used`) with what the whole of ``replicas_at`` takes of it."""
    stage_of, cluster_of = np.nonzero(replicas_at)
    return rules.caps_used(model, ((model.stages[s], model.clusters[c], int(replicas_at[s, c]))
                                   for s, c in zip(stage_of.tolist(), cluster_of.tolist(), strict=True)))


def _cap_reason(model: FleetModel, stage: Stage, cluster: Cluster,
                capped: list[tuple[rules.Cap, rules.CapUsage]]) -> str:
    """The first cap over ``stage`` that leaves too little for it on ``cluster``
    (:func:`rules.cap_shortfalls`), in its one wording: ``over team research's h100 quota
    (8 of 32 left)``; '' when none does."""
    short = rules.cap_shortfalls(model, capped, stage, cluster)
    return short[0].words(model) if short else ""


def _placed(model: FleetModel, replicas_at: np.ndarray) -> list[list[tuple[Stage, int]]]:
    """The ``(stage as it runs there, replicas)`` ``replicas_at`` places on each cluster."""
    placed: list[list[tuple[Stage, int]]] = [[] for _ in model.clusters]
    for c in np.flatnonzero(replicas_at.any(axis=0)).tolist():
        placed[c] = [(rules.on_cluster(model.stages[s], model.clusters[c]), int(replicas_at[s, c]))
                     for s in np.flatnonzero(replicas_at[:, c]).tolist()]
    return placed


def _unplaced_reason(
    model: FleetModel, scores: Scores, s: int, used: list[rules.Usage],
    capped: list[tuple[rules.Cap, rules.CapUsage]], placed: list[list[tuple[Stage, int]]],
) -> str:
    """``0/3 clusters fit p/s: 2 have no a100, 1 has 8 of 16 free a100`` for stage index ``s``,
    beside what the placed stages take of each cluster (``used``; ``placed``, to pack them) and
    of each cap (``capped``)
    (a ``multiCluster`` conflict is reported by
    :func:`fleetc.placement.problem.multicluster_conflicts` instead)."""
    stage = model.stages[s]
    capped = [(cap, used) for cap, used in capped if stage.pipeline in cap.pipelines]  # the others never bind it
    why = [
        _capacity_reason(model, stage, cluster, used[c], capped, placed[c])
        if scores.allowed[s, c]
        else scores.reasons[(s, c)]
        for c, cluster in enumerate(model.clusters)
    ]
    groups = sorted(Counter(why).items(), key=lambda item: (-item[1], item[0]))
    detail = ", ".join(_counted(count, reason) for reason, count in groups)
    return f"0/{len(model.clusters)} clusters fit {stage.key}: {detail or 'the fleet has no clusters'}"


def _counted(count: int, reason: str) -> str:
    """``2 have no a100``, ``1 is too small: ...``: the verb agrees with the count."""
    is_state = reason.startswith(("too small", "cordoned", "drained", "in ", "over "))
    singular, plural = ("is", "are") if is_state else ("has", "have")
    return f"{count} {singular if count == 1 else plural} {reason}"


def _capacity_reason(model: FleetModel, stage: Stage, cluster: Cluster, used: rules.Usage,
                     capped: list[tuple[rules.Cap, rules.CapUsage]] | None = None,
                     placed: list[tuple[Stage, int]] | None = None) -> str:
    """What ``cluster`` lacks for ``stage`` beside ``used`` (what is placed there, ``placed``),
    counted as the rules count it (:func:`rules.overuse`: time-sliced slots in whole time-sliced
    units, :func:`rules.taken`), or when it has the room, the cap of ``capped`` that leaves too
    little (:func:`_cap_reason`, read only then), or that its pods pack onto no assignment to
    the nodes beside the pods placed there (:func:`rules.unpacked`).

    A gang needs all its replicas at once; a Deployment needs its per-cluster minimum here and
    is short overall when the clusters together have room for fewer replicas than it has.
    Free GPUs are told in whole time-sliced units for a stage on time-sliced slots.
    """
    need = rules.least_on_cluster(stage)
    asked, stage = stage, rules.on_cluster(stage, cluster)
    over = rules.overuse(model, cluster, used + rules.replica_usage(model, stage, need))
    if over:
        resource = rules.RESOURCES.index(over[0][0])
        usable = rules.usable_capacity(model, cluster)[resource]
        free = usable - rules.taken(model, cluster, used)[resource]
        unit = rules.time_sliced_unit(cluster) if rules.uses_shared_slots(model, stage) else 1
        if resource > 0 or unit == 1:
            return _free_of(resource, free, usable, cluster)
        return f"{_free_of(resource, free - free % unit, usable, cluster)} (whole nodes of {unit}, as time-sliced)"
    over_cap = _cap_reason(model, asked, cluster, capped) if capped else ""
    if over_cap:
        return over_cap
    if placed is not None and rules.unpacked(model, cluster, [*placed, (stage, need)]):
        resource = 0 if stage.gpus else 1  # pods without GPUs are short of a node's cores (or memory)
        usable = rules.usable_capacity(model, cluster)[resource]
        free = usable - rules.taken(model, cluster, used)[resource]
        pods = f"of {stage.pod_gpus}" if stage.gpus else f"({rules.shape_words(rules.pod_of(stage))})"
        return (f"{_free_of(resource, free, usable, cluster)}, but not on nodes its pods {pods} fit beside "
                f"the pods placed there")
    return f"room for {_fitting_replicas(model, stage, cluster, used)} of {stage.replicas} replicas"


def _free_of(resource: int, free: int, total: int, cluster: Cluster) -> str:
    """``8 of 16 free a100``, ``1.5 of 64 free cores``, ``12Gi of 512Gi free memory``."""
    if resource == 0:
        return f"{free:g} of {total:g} free {cluster.gpu_type}"
    if resource == 1:
        return f"{round(free / 1000, 3):g} of {round(total / 1000, 3):g} free cores"
    return f"{round(free / GIB, 2):g}Gi of {round(total / GIB, 2):g}Gi free memory"


def _fitting_replicas(model: FleetModel, stage: Stage, cluster: Cluster, used: rules.Usage) -> int:
    """The most replicas of ``stage`` (at most all of them) that fit ``cluster`` beside
    ``used`` (:func:`rules.overuse`; more replicas never take less), by bisection."""
    low, high = 0, stage.replicas
    while low < high:
        middle = (low + high + 1) // 2
        if rules.overuse(model, cluster, used + rules.replica_usage(model, stage, middle)):
            high = middle - 1
        else:
            low = middle
    return low
