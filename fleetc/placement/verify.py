"""Re-check a placement against every hard constraint, independently of the solver.

The optimizer's answer is only trusted after this pass agrees: it works on the model's integer
base units (millicores, bytes, GPUs) and shares no code with the MILP, so a modelling or
numerical mistake there shows up here as a list of readable problems.

The policy semantics both sides obey live here as small public functions (the optimizer reads
them, never the other way round): :func:`usable_capacity` (utilisation and GPU headroom),
:func:`slots_per_gpu` and :func:`uses_shared_slots` (time-slicing), :func:`ha_clusters`
(``multiCluster``) and :func:`min_replicas_per_cluster`.
"""

from __future__ import annotations

import math
from collections import Counter

from fleetc.model import (
    Cluster,
    FleetModel,
    Placement,
    Stage,
    StagePlacement,
    StageType,
    untolerated,
)

#: Stage types that never run on time-sliced GPU slots: they need whole GPUs.
EXCLUSIVE_TYPES = (StageType.TRAINING, StageType.FINETUNING)

_ROUNDING = 1e-9

#: Free memory is counted in whole MiB: the optimizer's float GiB then never meets a capacity a
#: few bytes below a demand, which its feasibility tolerance would let through.
MIB = 2**20


def min_replicas_per_cluster(stage: Stage) -> int:
    """The fewest replicas a serving cluster runs: at least 1, at most the stage's replicas.

    A minimum above the replica count would make every placement impossible, so it is read as
    "all replicas on one cluster".
    """
    return max(1, min(stage.min_replicas_per_cluster, stage.replicas))


def usable_capacity(model: FleetModel, cluster: Cluster) -> tuple[int, int, int]:
    """GPUs, millicores and bytes fleetc may allocate on ``cluster``.

    Work fleetc does not place already uses ``utilization`` of everything: free is
    ``total * (1 - utilization)``, rounded down (memory to whole MiB). The GPU policy's ``defragmentThreshold`` keeps
    ``(1 - threshold)`` of the GPUs free overall, so used GPUs (that outside work included) stay
    at most ``threshold * gpus``: fleetc gets ``floor(gpus * (threshold - utilization))`` GPUs
    (threshold 1 without a GPU policy), never below 0. Headroom is about GPUs only.
    """
    utilization = min(max(cluster.utilization, 0.0), 1.0)
    threshold = 1.0
    if model.gpu_policy is not None and model.gpu_policy.defragment_threshold is not None:
        threshold = min(max(model.gpu_policy.defragment_threshold, 0.0), 1.0)
    gpus = max(0, math.floor(cluster.gpus * (threshold - utilization) + _ROUNDING))
    millis = max(0, math.floor(cluster.cpu_millis * (1.0 - utilization) + _ROUNDING))
    memory = max(0, math.floor(cluster.memory_bytes * (1.0 - utilization) / MIB + _ROUNDING)) * MIB
    return gpus, millis, memory


def slots_per_gpu(model: FleetModel) -> int:
    """How many sharers one time-sliced GPU serves: the time-slicing replicas, at most
    ``maxSharers`` when the sharing strategy is on; 1 means no sharing."""
    policy = model.gpu_policy
    if policy is None:
        return 1
    slots = max(1, policy.time_slicing_replicas)
    return min(slots, max(1, policy.max_sharers)) if policy.sharing_enabled else slots


def uses_shared_slots(model: FleetModel, stage: Stage) -> bool:
    """Whether ``stage``'s GPUs are time-sliced slots (``1 / slots_per_gpu`` of a GPU each)."""
    return (
        stage.shared_gpu
        and stage.gpus > 0
        and stage.type not in EXCLUSIVE_TYPES
        and slots_per_gpu(model) > 1
    )


def ha_clusters(model: FleetModel, stage: Stage) -> tuple[str, ...]:
    """The clusters a serving stage must run on, each with at least its per-cluster minimum:
    the primary and every secondary of each platform governing its pipeline (first seen first),
    but for the cordoned or drained ones: they drop out of the active-active set, which then
    runs degraded on the others (compile warns about it)."""
    if stage.type is not StageType.DEPLOYMENT:
        return ()
    names: list[str] = []
    for platform in model.platforms:
        if platform.primary_cluster and stage.pipeline in platform.pipelines:
            names += [platform.primary_cluster, *platform.secondary_clusters]
    lost = {c.name for c in model.clusters if c.cordoned}
    return tuple(name for name in dict.fromkeys(names) if name not in lost)


def failover_groups(model: FleetModel) -> list[tuple[str, tuple[str, ...], frozenset[str]]]:
    """Per platform asking for failover headroom: its name, its active-active clusters (those
    not cordoned) and the keys of its serving stages. The hard rule, read by the program and
    the verifier alike: for each of those clusters ``h`` and each resource, what the platform's
    serving stages use on ``h`` (time-sliced GPUs as ``slots / slots_per_gpu``) fits in what
    the other clusters of the set leave free (:func:`usable_capacity` less everything placed)."""
    groups = []
    for platform in model.platforms:
        if not (platform.failover_headroom and platform.primary_cluster):
            continue
        serving = frozenset(s.key for s in model.stages
                            if s.type is StageType.DEPLOYMENT and s.pipeline in platform.pipelines)
        clusters = next((ha_clusters(model, s) for s in model.stages if s.key in serving), ())
        if len(clusters) > 1 and serving:
            groups.append((platform.name, clusters, serving))
    return groups


def verify(model: FleetModel, placement: Placement, *, allow_unplaced: bool = False) -> list[str]:
    """Every hard constraint ``placement`` breaks, as readable sentences; [] when it is sound.

    ``allow_unplaced`` accepts stages with no assignments at all (``--allow-unplaced``).
    """
    problems = _stage_order_problems(model, placement)
    known = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        if stage is None or (allow_unplaced and not stage_placement.assignments):
            continue
        problems += _stage_problems(stage, stage_placement, known)
        problems += _ha_problems(model, stage, stage_placement)
    problems += _capacity_problems(model, placement)
    problems += _headroom_problems(model, placement)
    return problems


def _headroom_problems(model: FleetModel, placement: Placement) -> list[str]:
    """:func:`failover_groups`' rule, in whole units: GPUs are counted in slots (``slots_per_gpu``
    to a GPU) so time-sliced replicas need no fractions."""
    slots = slots_per_gpu(model)
    stages = {s.key: s for s in model.stages}
    used = _used(model, placement)
    problems = []
    for name, members, serving in failover_groups(model):
        need: dict[str, list[int]] = {h: [0, 0, 0] for h in members}
        for stage_placement in placement.stages:
            stage = stages.get(stage_placement.stage)
            if stage is None or stage.key not in serving:
                continue
            per_gpu = 1 if uses_shared_slots(model, stage) else slots
            for a in stage_placement.assignments:
                if a.cluster in need:
                    for r, amount in enumerate((a.replicas * stage.gpus * per_gpu, a.replicas * stage.cpu_millis,
                                                a.replicas * stage.memory_bytes)):
                        need[a.cluster][r] += amount
        for lost in members:
            others = [model.cluster(o) for o in members if o != lost]
            free = [sum(usable_capacity(model, c)[r] * (slots if r == 0 else 1) - used[c.name][r] for c in others)
                    for r in range(3)]
            for what, n, f in zip(("GPU slots" if slots > 1 else "GPUs", "CPU millicores", "memory bytes"),
                                  need[lost], free, strict=True):
                if n > f:
                    problems.append(f"failover headroom of {name}: losing {lost} leaves {f} {what} free on "
                                    f"{', '.join(c.name for c in others)} for its {n}")
    return problems


def _used(model: FleetModel, placement: Placement) -> dict[str, list[int]]:
    """Per cluster what ``placement`` uses: GPUs in slots (exclusive GPUs, and shared slots
    rounded up to whole GPUs, times ``slots_per_gpu``), millicores, bytes."""
    slots = slots_per_gpu(model)
    stages = {s.key: s for s in model.stages}
    totals: dict[str, list[int]] = {c.name: [0, 0, 0, 0] for c in model.clusters}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        for a in stage_placement.assignments:
            if stage is not None and a.cluster in totals:
                totals[a.cluster][3 if uses_shared_slots(model, stage) else 0] += a.replicas * stage.gpus
                totals[a.cluster][1] += a.replicas * stage.cpu_millis
                totals[a.cluster][2] += a.replicas * stage.memory_bytes
    return {name: [(exclusive + -(-shared // slots)) * slots, millis, memory]
            for name, (exclusive, millis, memory, shared) in totals.items()}


def _stage_order_problems(model: FleetModel, placement: Placement) -> list[str]:
    wanted = [s.key for s in model.stages]
    got = [p.stage for p in placement.stages]
    if got == wanted:
        return []
    counts = Counter(got)
    problems = [f"{key}: not placed" for key in wanted if key not in counts]
    problems += [f"{key}: placed {n} times" for key, n in sorted(counts.items()) if n > 1]
    problems += [f"{key}: not a stage of the fleet" for key in sorted(counts) if key not in wanted]
    return problems or ["stages are not in the fleet's order"]


def _stage_problems(
    stage: Stage, placement: StagePlacement, clusters: dict[str, Cluster]
) -> list[str]:
    key = stage.key
    names = [a.cluster for a in placement.assignments]
    problems = []
    if names != sorted(set(names)):
        problems.append(f"{key}: assignments are not sorted by unique cluster name")
    placed = sum(a.replicas for a in placement.assignments)
    if placed != stage.replicas:
        problems.append(f"{key}: {placed} replicas placed, the stage has {stage.replicas}")
    if stage.is_gang and len(placement.assignments) > 1:
        problems.append(f"{key}: gang split across {len(placement.assignments)} clusters")
    for assignment in placement.assignments:
        cluster = clusters.get(assignment.cluster)
        if cluster is None:
            problems.append(f"{key}: unknown cluster {assignment.cluster}")
            continue
        problems += [
            f"{key} on {cluster.name}: {p}"
            for p in _assignment_problems(stage, cluster, assignment.replicas, assignment.gpus)
        ]
    return problems


def _assignment_problems(stage: Stage, cluster: Cluster, replicas: int, gpus: int) -> list[str]:
    problems = []
    if replicas < 1:
        problems.append(f"{replicas} replicas")
    if gpus != replicas * stage.gpus:
        problems.append(f"{gpus} GPUs for {replicas} replicas of {stage.gpus}")
    if not stage.is_gang and replicas < min_replicas_per_cluster(stage):
        problems.append(
            f"{replicas} replicas, below the minimum of {min_replicas_per_cluster(stage)}"
        )
    if cluster.cordoned:
        problems.append("the cluster is cordoned")
    if stage.jurisdiction is not None and cluster.jurisdiction != stage.jurisdiction:
        problems.append(
            f"data sovereignty keeps it in jurisdiction {stage.jurisdiction}, "
            f"the cluster is in {cluster.jurisdiction}"
        )
    if stage.gpus > 0 and (cluster.gpu_type is None or cluster.gpus <= 0):
        problems.append("needs GPUs, the cluster has none")
    elif stage.gpus > 0 and stage.gpu_type and stage.gpu_type != cluster.gpu_type:
        problems.append(f"needs {stage.gpu_type}, the cluster has {cluster.gpu_type}")
    problems += [
        f"untolerated taint {t.key}={t.value}:{t.effect}"
        for t in untolerated(cluster.taints, stage.tolerations)
    ]
    return problems


def _ha_problems(model: FleetModel, stage: Stage, placement: StagePlacement) -> list[str]:
    placed = {a.cluster: a.replicas for a in placement.assignments}
    minimum = min_replicas_per_cluster(stage)
    return [
        f"{stage.key}: multiCluster needs at least {minimum} replicas on {name}, "
        f"{placed.get(name, 0)} placed"
        for name in ha_clusters(model, stage)
        if placed.get(name, 0) < minimum
    ]


def _capacity_problems(model: FleetModel, placement: Placement) -> list[str]:
    """Per cluster: exclusive GPUs + ceil(slots / slots_per_gpu) <= usable GPUs; cores and
    memory <= usable."""
    stages = {s.key: s for s in model.stages}
    used: dict[str, list[int]] = {c.name: [0, 0, 0, 0] for c in model.clusters}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        for a in stage_placement.assignments:
            if stage is not None and a.cluster in used:
                totals = used[a.cluster]
                totals[3 if uses_shared_slots(model, stage) else 0] += a.replicas * stage.gpus
                totals[1] += a.replicas * stage.cpu_millis
                totals[2] += a.replicas * stage.memory_bytes
    slots = slots_per_gpu(model)
    problems = []
    for cluster in model.clusters:
        exclusive, millis, memory, shared_slots = used[cluster.name]
        gpus = exclusive + -(-shared_slots // slots)
        for what, use, capacity in zip(
            ("GPUs", "CPU millicores", "memory bytes"),
            (gpus, millis, memory),
            usable_capacity(model, cluster),
            strict=True,
        ):
            if use > capacity:
                problems.append(f"{cluster.name}: {use} {what} placed, capacity {capacity}")
    return problems
