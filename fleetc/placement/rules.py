"""The hard rules of placement, stated once, as plain functions in whole units.

A placement is sound when every stage is placed once, whole (:func:`replicas_sound`; a
serving stage running degraded with the replicas that fit, :func:`least_replicas`,
:func:`room_left`), on
clusters that may run it (:func:`exclusions`: cordons, data sovereignty, GPUs and their type,
pods that fit no node, taints), on every cluster ``multiCluster`` runs it on with at least its per-cluster minimum
(:func:`ha_clusters`, :func:`min_replicas_per_cluster`), and when what is placed on each
cluster (:func:`usage`) fits its usable capacity (:func:`usable_capacity`, :func:`overuse`) and
the failover headroom its platform asks for (:func:`failover_groups`, :func:`failover_shortfalls`).
Against a previous placement, one more rule bounds churn (:func:`unjustified_moves`): a stage
the change did not touch moves only when the move gains more than ``moveCost``.

Everything here counts integers: GPUs (per replica as asked, ``Stage.gpus``, split into pods
per cluster by node fit, :func:`on_cluster`), time-sliced GPU slots, millicores and bytes.
What is placed on a cluster must also pack onto its nodes (:func:`unpacked`, an actual
assignment of pods to nodes, :mod:`fleetc.nodefit`). The verifier
(:mod:`fleetc.placement.verify`) reads these functions and nothing of the solvers; the solvers
vectorise the same rules in floats (:mod:`fleetc.placement.program`, :mod:`fleetc.placement.colgen`,
the filters in :mod:`fleetc.placement.scoring`), and ``tests/test_rules.py`` holds the two against
each other on generated fleets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fleetc import nodefit
from fleetc.model import (
    Cluster,
    FleetModel,
    GPUOption,
    Stage,
    StageType,
    Taint,
    Toleration,
    degraded_platforms,
    untolerated,
)

#: Stage types that never run on time-sliced GPU slots: they need whole GPUs.
EXCLUSIVE_TYPES = (StageType.TRAINING, StageType.FINETUNING)

#: Free memory is counted in whole MiB: the optimizer's float GiB then never meets a capacity a
#: few bytes below a demand, which its feasibility tolerance would let through.
MIB = 2**20

_ROUNDING = 1e-9

#: The resources capacity is counted in, in the order of :func:`usable_capacity`.
RESOURCES = ("GPUs", "CPU millicores", "memory bytes")


# --- where a stage may run ---------------------------------------------------------------------


def outside_jurisdiction(stage: Stage, cluster: Cluster) -> bool:
    """Data sovereignty: the stage reads data of a jurisdiction the cluster is not in."""
    return stage.jurisdiction is not None and cluster.jurisdiction != stage.jurisdiction


def lacks_gpus(stage: Stage, cluster: Cluster) -> bool:
    """The stage needs GPUs and the cluster has none."""
    return stage.gpus > 0 and (cluster.gpu_type is None or cluster.gpus <= 0)


def lacks_gpu_type(stage: Stage, cluster: Cluster) -> bool:
    """The stage names GPU types (``gpuType``, one or alternatives) and the cluster's is none
    of them, or it asks for throughput and has no GPU count for the cluster's type (the Fleet
    states no throughput for it). Every cluster has one GPU type, so a gang, placed whole on
    one cluster, runs on one type; a serving stage may run on clusters of different types
    among its alternatives."""
    if stage.gpus <= 0:
        return False
    if stage.throughput is not None and option_of(stage, cluster.gpu_type) is None:
        return True
    return stage.preference(cluster.gpu_type) is None


def option_of(stage: Stage, gpu_type: str | None) -> GPUOption | None:
    """The :class:`GPUOption` of a stage asking for throughput on ``gpu_type`` (None: none)."""
    return next((o for o in stage.gpu_options if o.gpu_type == gpu_type), None)


def on_cluster(stage: Stage, cluster: Cluster) -> Stage:
    """``stage`` as it runs on ``cluster``: a stage asking for throughput with the GPUs per
    replica of the cluster's GPU type, and a gang's replica split into the pods that fit a node
    of this cluster (node fit, :func:`fleetc.nodefit.pods_per_replica`: the cluster's own
    nodes, never another's); any other stage as it is. Every per-pair count (usage, the
    packing, the verifier, the rendered requests) reads the stage through this."""
    option = option_of(stage, cluster.gpu_type) if stage.gpu_options else None
    gpus = stage.gpus if option is None else option.gpus
    pods = nodefit.pods_per_replica(gpus, cluster.gpus_per_node if cluster.gpus > 0 else 0) if stage.is_gang else 1
    if gpus == stage.gpus and pods == stage.pods_per_replica:
        return stage
    return replace(stage, gpus=gpus, pods_per_replica=pods)


def rendered_on(stage: Stage, cluster: Cluster) -> Stage:
    """``stage`` as its pods are rendered on ``cluster``: :func:`on_cluster`, tolerating the
    cluster's derived GPU taint where it does not already (:func:`preferred_off`: a CPU-only
    stage on a GPU cluster). The counts do not read tolerations, so only rendering does this."""
    stage = on_cluster(stage, cluster)
    missing = preferred_off(stage, cluster)
    if not missing:
        return stage
    return replace(stage, tolerations=stage.tolerations + tuple(
        Toleration(t.key, "Equal", t.value, t.effect) for t in missing))


def preferred_off(stage: Stage, cluster: Cluster) -> tuple[Taint, ...]:
    """The cluster's derived GPU taint (``gpu-type=<type>:NoSchedule``, where it states no
    taints) when the stage does not tolerate it: a CPU-only stage. fleetc wrote that taint, not
    the user, and real GPU clusters run CPU pods on their CPU nodes, so it never keeps a stage
    off: the stage prefers other clusters (``scoring.GPU_TAINT_PENALTY``), and its pods
    tolerate the taint where it runs there (:func:`rendered_on`)."""
    return untolerated(cluster.taints, stage.tolerations) if cluster.taints_derived else ()


def gpu_types_named(stage: Stage) -> str:
    """The stage's GPU types as messages name them: ``h100`` or ``h100 or a100``."""
    return " or ".join(stage.gpu_types)


def pod_of(stage: Stage) -> nodefit.Shape:
    """What each of the stage's pods asks for: GPUs, millicores, bytes."""
    return nodefit.Shape(stage.pod_gpus, stage.pod_cpu_millis, stage.pod_memory_bytes)


def fits_no_node(stage: Stage, cluster: Cluster) -> bool:
    """Node fit: the stage's pods ask for more GPUs, cores or memory than one node of the
    cluster offers (:func:`fleetc.nodefit.node_of`), so no node could run them."""
    return not pod_of(on_cluster(stage, cluster)).fits(nodefit.node_of(cluster))


def shape_words(shape: nodefit.Shape) -> str:
    """``4 GPUs, 16 cores, 64Gi`` (GPUs left out when there are none)."""
    gpus = [f"{shape.gpus} GPU{'s' if shape.gpus != 1 else ''}"] if shape.gpus else []
    return ", ".join([*gpus, f"{shape.millis / 1000:g} cores", f"{round(shape.memory / (1024 * MIB), 2):g}Gi"])


def repelling_taints(stage: Stage, cluster: Cluster) -> tuple[Taint, ...]:
    """The cluster's hard taints (not PreferNoSchedule) none of the stage's tolerations covers;
    the user's only: a derived GPU taint is a preference (:func:`preferred_off`)."""
    return () if cluster.taints_derived else untolerated(cluster.taints, stage.tolerations)


def exclusions(stage: Stage, cluster: Cluster) -> list[str]:
    """Every rule that keeps ``stage`` off ``cluster`` whatever else is placed, as a short
    phrase ([] when it may run there); the filters (:func:`fleetc.placement.scoring.filter_reason`)
    word the first of them for users."""
    why = []
    if cluster.cordoned:
        why.append(f"the cluster is {'drained' if cluster.drained else 'cordoned'}")
    if outside_jurisdiction(stage, cluster):
        why.append(f"data sovereignty keeps it in jurisdiction {stage.jurisdiction}, "
                   f"the cluster is in {cluster.jurisdiction}")
    if lacks_gpus(stage, cluster):
        why.append("needs GPUs, the cluster has none")
    elif lacks_gpu_type(stage, cluster):
        why.append(f"needs {gpu_types_named(stage)}, the cluster has {cluster.gpu_type}" if stage.gpu_types
                   else f"asks for throughput, the Fleet states none for {cluster.gpu_type}")
    elif fits_no_node(stage, cluster):
        pod = pod_of(on_cluster(stage, cluster))
        why.append(f"its pods ({shape_words(pod)}) fit no node of the cluster "
                   f"({shape_words(nodefit.node_of(cluster))} each)")
    why += [f"untolerated taint {t.key}={t.value}:{t.effect}" for t in repelling_taints(stage, cluster)]
    return why


# --- how a stage's replicas are split ----------------------------------------------------------


def min_replicas_per_cluster(stage: Stage) -> int:
    """The fewest replicas a serving cluster runs: at least 1, at most the stage's replicas.

    A minimum above the replica count would make every placement impossible, so it is read as
    "all replicas on one cluster".
    """
    return max(1, min(stage.min_replicas_per_cluster, stage.replicas))


def replicas_sound(stage: Stage, replicas: Sequence[int], least: int | None = None) -> list[str]:
    """What is wrong with ``replicas`` (one count per cluster that runs the stage) as the
    placement of ``stage``: all its replicas placed (at least ``least`` of them when it runs
    degraded, :func:`least_replicas`), a gang on one cluster (a Deployment's per-cluster
    minimum is :func:`below_minimum`)."""
    problems = []
    placed = sum(replicas)
    least = stage.replicas if least is None else least
    if placed > stage.replicas or placed < least:
        floor = f" (at least {least} while it runs degraded)" if placed < least < stage.replicas else ""
        problems.append(f"{placed} replicas placed, the stage has {stage.replicas}{floor}")
    if stage.is_gang and len(replicas) > 1:
        problems.append(f"gang split across {len(replicas)} clusters")
    return problems


def below_minimum(stage: Stage, replicas: int) -> bool:
    """A Deployment's cluster serving fewer than :func:`min_replicas_per_cluster` replicas."""
    return not stage.is_gang and replicas < min_replicas_per_cluster(stage)


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
    if not names:  # no platform governs it: skip reading every cluster (20,000 stages x 1,000)
        return ()
    lost = {c.name for c in model.clusters if c.cordoned}
    return tuple(name for name in dict.fromkeys(names) if name not in lost)


def least_replicas(model: FleetModel, stage: Stage) -> int:
    """The fewest replicas ``stage`` may be placed with: all of them, but for a serving stage
    running degraded (:func:`degraded_platforms`): during the outage it serves with what fits,
    at least its per-cluster minimum on each surviving HA cluster (on one cluster when none
    survives). A placement that runs it short must leave no room for one more of its replicas
    (:func:`room_left`): the replicas that fit are placed."""
    if not degraded_platforms(model, stage):
        return stage.replicas
    return min(stage.replicas, max(1, len(ha_clusters(model, stage))) * min_replicas_per_cluster(stage))


# --- capacity ----------------------------------------------------------------------------------


def usable_capacity(model: FleetModel, cluster: Cluster) -> tuple[int, int, int]:
    """GPUs, millicores and bytes fleetc may allocate on ``cluster``.

    Work fleetc does not place already uses ``utilization`` of everything: free is
    ``total * (1 - utilization)``, rounded down (memory to whole MiB). The GPU policy's
    ``defragmentThreshold`` keeps ``(1 - threshold)`` of the GPUs free overall, so used GPUs
    (that outside work included) stay at most ``threshold * gpus``: fleetc gets
    ``floor(gpus * (threshold - utilization))`` GPUs (threshold 1 without a GPU policy), never
    below 0. Headroom is about GPUs only.
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
    """Whether ``stage``'s GPUs are time-sliced slots: ``1 / slots_on(cluster)`` of a GPU each
    (:func:`slots_on`: a whole GPU where the cluster's device plugin is not configured)."""
    return (
        stage.shared_gpu
        and stage.gpus > 0
        and stage.type not in EXCLUSIVE_TYPES
        and slots_per_gpu(model) > 1
    )


def slots_on(model: FleetModel, cluster: Cluster) -> int:
    """How many time-sliced slots one of ``cluster``'s GPUs holds: :func:`slots_per_gpu` where
    its device plugin reads fleetc's config (attribute ``device-plugin-configured``), else 1.

    Where the plugin is not configured it advertises whole GPUs (NVIDIA/k8s-device-plugin
    ``api/config/v1/config.go``: no ``sharing`` without a config), so a time-sliced pod takes
    as many whole GPUs as it asks for: its slots count one GPU each there, and the renderer
    selects whole GPUs for it (:func:`fleetc.render.workloads.time_sliced`)."""
    return slots_per_gpu(model) if cluster.device_plugin_configured else 1


def time_sliced_unit(cluster: Cluster) -> int:
    """The GPUs a cluster turns over to time-slicing at once: a whole node where its device
    plugin reads fleetc's config (attribute ``device-plugin-configured``), else one GPU.

    The device plugin's config-manager links one config per node, the one its
    ``nvidia.com/device-plugin.config`` label names (NVIDIA/k8s-device-plugin
    ``cmd/config-manager/main.go``: ``updateSymlink``), so a node advertises either
    time-sliced or whole GPUs, never both: shared slots come in whole nodes. Where the plugin
    is not configured no node is time-sliced: its slots are whole GPUs (:func:`slots_on`),
    counted one at a time."""
    return cluster.gpus_per_node if cluster.device_plugin_configured and cluster.gpus_per_node > 0 else 1


def time_sliced_gpus(shared_slots: int, slots: int, unit: int) -> int:
    """The GPUs ``shared_slots`` time-sliced slots take on a cluster whose GPUs turn
    time-sliced ``unit`` at a time (:func:`time_sliced_unit`): whole units of ``slots * unit``
    slots each. Whether the pods then pack onto the nodes is :func:`unpacked`."""
    if shared_slots <= 0:
        return 0
    return -(-shared_slots // (slots * unit)) * unit


@dataclass(frozen=True)
class Usage:
    """What replicas take of one cluster: whole GPUs, time-sliced slots, millicores, bytes."""

    gpus: int = 0
    slots: int = 0
    millis: int = 0
    memory: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.gpus + other.gpus, self.slots + other.slots, self.millis + other.millis,
                     self.memory + other.memory)


def replica_usage(model: FleetModel, stage: Stage, replicas: int) -> Usage:
    """What ``replicas`` of ``stage`` take: its GPUs per replica, as slots when it uses shared
    slots. A stage comes as it runs on the cluster (:func:`on_cluster`)."""
    gpus = replicas * stage.gpus
    shared = uses_shared_slots(model, stage)
    return Usage(0 if shared else gpus, gpus if shared else 0, replicas * stage.cpu_millis,
                 replicas * stage.memory_bytes)


def usage(model: FleetModel, placed: Iterable[tuple[Stage, int]]) -> Usage:
    """What the ``(stage, replicas)`` placed on one cluster take of it together."""
    total = Usage()
    for stage, replicas in placed:
        total += replica_usage(model, stage, replicas)
    return total


def taken(model: FleetModel, cluster: Cluster, used: Usage) -> tuple[int, int, int]:
    """GPUs, millicores and bytes ``used`` takes of ``cluster``'s capacity: time-sliced slots
    take whole time-sliced units (:func:`time_sliced_gpus`: whole nodes where the device
    plugin is configured), :func:`slots_on` slots to a GPU (one where it is not), shared by
    whichever stages use them."""
    shared = time_sliced_gpus(used.slots, slots_on(model, cluster), time_sliced_unit(cluster))
    return used.gpus + shared, used.millis, used.memory


def overuse(model: FleetModel, cluster: Cluster, used: Usage) -> list[tuple[str, int, int]]:
    """``(resource, taken, usable)`` for each resource ``used`` takes more of than ``cluster``'s
    usable capacity; [] when it fits."""
    needed = taken(model, cluster, used)
    return [(what, need, have)
            for what, need, have in zip(RESOURCES, needed, usable_capacity(model, cluster), strict=True)
            if need > have]


# --- packing onto nodes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Packing:
    """Pods and the nodes they are to pack onto: the exclusive pods onto the nodes of the
    cluster's usable whole GPUs, the time-sliced pods onto its time-sliced nodes; ``found`` is
    the node of each pod (in order: exclusive, then time-sliced), None when they do not pack."""

    pods: tuple[nodefit.Shape, ...]
    nodes: tuple[nodefit.Shape, ...]
    found: tuple[int, ...] | None


def packing(model: FleetModel, cluster: Cluster, placed: Iterable[tuple[Stage, int]]) -> Packing:
    """Whether the pods of the ``(stage, replicas)`` placed on ``cluster`` (each stage as it
    runs there, :func:`on_cluster`) pack onto its nodes (:func:`fleetc.nodefit.pack`).

    The nodes are those of its usable GPUs (:func:`usable_capacity`; work fleetc does not place
    is counted as filling whole nodes first, and what is left of a node counts as one smaller
    node), each with a node's cores and memory (:func:`fleetc.nodefit.node_of`). Where the
    device plugin time-slices, the GPUs :func:`time_sliced_gpus` gives over to time-slicing
    are whole nodes of ``gpus-per-node x slots`` slots that the time-sliced pods pack onto, and
    the exclusive pods pack onto the rest; elsewhere a time-sliced pod takes whole GPUs like
    any other. Pods without GPUs are held to the cluster's totals only (:func:`overuse`)."""
    node = nodefit.node_of(cluster)
    slots = slots_on(model, cluster)
    whole: list[nodefit.Shape] = []
    shared: list[nodefit.Shape] = []
    for stage, replicas in placed:
        if stage.gpus <= 0 or replicas <= 0:
            continue
        time_sliced = slots > 1 and uses_shared_slots(model, stage)
        (shared if time_sliced else whole).extend([pod_of(stage)] * (replicas * stage.pods_per_replica))
    per_node = max(node.gpus, 1)
    sliced_gpus = time_sliced_gpus(sum(p.gpus for p in shared), slots, time_sliced_unit(cluster))
    left = max(0, usable_capacity(model, cluster)[0] - sliced_gpus)
    exclusive = [node] * (left // per_node) + ([replace(node, gpus=left % per_node)] if left % per_node else [])
    sliced = [nodefit.Shape(per_node * slots, node.millis, node.memory)] * (sliced_gpus // per_node)
    found = nodefit.pack(whole, exclusive) if whole else ()
    more = nodefit.pack(shared, sliced) if shared else ()
    if found is not None and more is not None:
        found += tuple(len(exclusive) + j for j in more)
    return Packing((*whole, *shared), (*exclusive, *sliced), None if more is None else found)


def unpacked(model: FleetModel, cluster: Cluster, placed: Iterable[tuple[Stage, int]]) -> str:
    """Why the pods placed on ``cluster`` do not pack onto its nodes (:func:`packing`), as a
    phrase; '' when they pack."""
    found = packing(model, cluster, placed)
    if found.found is not None:
        return ""
    return (f"its pods ({_counted(found.pods)}) pack onto no assignment to its nodes "
            f"({_counted(found.nodes)})")


def _counted(shapes: Sequence[nodefit.Shape]) -> str:
    """``2 x 6 GPUs, 1 x 4 GPUs`` (GPUs only: the count that decides most packings)."""
    counts: dict[int, int] = {}
    for shape in shapes:
        counts[shape.gpus] = counts.get(shape.gpus, 0) + 1
    return ", ".join(f"{n} x {g} GPU{'s' if g != 1 else ''}" for g, n in sorted(counts.items(), reverse=True))


# --- failover headroom -------------------------------------------------------------------------


def failover_groups(model: FleetModel) -> list[tuple[str, tuple[str, ...], frozenset[str]]]:
    """Per platform asking for failover headroom: its name, its active-active clusters (those
    not cordoned) and the keys of its serving stages. The rule (:func:`failover_shortfalls`):
    for each of those clusters ``h`` and each resource, what the platform's serving stages use
    on ``h`` fits in what the other clusters of the set leave free."""
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


def failover_shortfalls(model: FleetModel, lost: tuple[Cluster, Usage], others: Iterable[tuple[Cluster, Usage]]
                        ) -> list[tuple[str, int, int]]:
    """``(resource, needed, free)`` for each resource the serving replicas placed on the lost
    cluster (``lost``: it and what they use there) need more of than the ``others`` (each with
    what is placed on it) leave free.

    GPUs are counted in slots, ``slots_per_gpu`` to a GPU, so that time-sliced replicas need
    no fractions: an exclusive GPU needs all of a GPU's slots, a free GPU offers them all; a
    slot on a cluster whose GPUs are not time-sliced (:func:`slots_on`) is a whole GPU."""
    slots = slots_per_gpu(model)
    cluster, used = lost
    need = (used.gpus * slots + used.slots * (slots // slots_on(model, cluster)), used.millis, used.memory)
    free = [0, 0, 0]
    for cluster, used in others:
        scale = (slots, 1, 1)
        busy_of = taken(model, cluster, used)
        for r, (have, busy) in enumerate(zip(usable_capacity(model, cluster), busy_of, strict=True)):
            free[r] += (have - busy) * scale[r]
    names = ("GPU slots" if slots > 1 else "GPUs", *RESOURCES[1:])
    return [(what, n, f) for what, n, f in zip(names, need, free, strict=True) if n > f]


# --- team quotas and cost caps ----------------------------------------------------------------

#: Hourly cost is counted in whole millionths of a currency unit, so that every cap compares
#: integers: the optimizer's rows carry the same integers (:class:`fleetc.placement.problem.Problem`).
MICROS = 1_000_000


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
        return None if self.max_cost is None else math.floor(self.max_cost * MICROS + _ROUNDING)


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
        if placed + more <= stage.replicas and not exclusions(stage, cluster) \
                and ledger.room_for(stage, cluster.name, more):
            found.append((cluster.name, more))
    return found


# --- churn: moves against the previous placement -----------------------------------------------


def moved_replicas(before: Mapping[str, int], after: Mapping[str, int]) -> int:
    """The replicas that left the clusters ``before`` had them on (cluster -> replicas each):
    a stage moved when this is more than 0 (one that only grew where it was did not)."""
    return sum(max(0, replicas - after.get(cluster, 0)) for cluster, replicas in before.items())


def move_gain(before: Mapping[str, int], after: Mapping[str, int], total: Mapping[str, float]) -> float:
    """What a move from ``before`` to ``after`` gains per replica moved (:func:`moved_replicas`),
    in score units: the stage's objective term ``sum(replicas * (1 + score))`` over its clusters
    (``total``: cluster -> score; a cluster without one scores 0), after less before, divided by
    the replicas moved. Moving is worth it to the objective exactly when this is more than the
    Fleet's ``moveCost``, which each replica kept where it was earns."""
    def term(placed: Mapping[str, int]) -> float:
        return sum(replicas * (1.0 + total.get(cluster, 0.0)) for cluster, replicas in placed.items())

    return (term(after) - term(before)) / max(1, moved_replicas(before, after))


def may_stay(model: FleetModel, stage: Stage, before: Mapping[str, int]) -> bool:
    """Whether ``before`` (cluster -> replicas) is still a placement of ``stage`` but for room:
    all its replicas (no fewer, as it had them), on clusters of the fleet that may run it
    (:func:`exclusions`), at least its per-cluster minimum on each and on every cluster
    ``multiCluster`` runs it on."""
    clusters = {c.name: c for c in model.clusters}
    if any(name not in clusters for name in before) or sum(before.values()) != stage.replicas:
        return False
    if replicas_sound(stage, list(before.values())) or any(
            below_minimum(stage, n) or exclusions(stage, clusters[name]) for name, n in before.items()):
        return False
    minimum = min_replicas_per_cluster(stage)
    return all(before.get(name, 0) >= minimum for name in ha_clusters(model, stage))


def untouched_moves(model: FleetModel, previous: Mapping[str, Mapping[str, int]],
                    placed: Mapping[str, Mapping[str, int]], total: Callable[[str, str], float]
                    ) -> dict[str, float]:
    """The stages the change did not touch that moved from where the ``previous`` placement had
    them to where they are ``placed`` (stage key -> cluster -> replicas; :func:`moved_replicas`;
    a stage left out did not move: its reason says why it is out),
    each with its gain per replica moved (:func:`move_gain`, ``total(stage key, cluster)`` its
    score). The churn rule (:func:`unjustified_moves`): each of them gains more than ``moveCost``.

    A stage is touched when it cannot be put back as it was: its own policy changed what it
    needs or where it may run, or its cluster was cordoned or drained (:func:`may_stay`); or
    the room it had is taken by stages that stay (displaced): stages that did not move, new
    ones, touched ones, ones whose move gains more than ``moveCost``, and, in turn, the stages
    they displaced. Stages that only swap room among themselves are not touched: each could go
    back beside the others (:meth:`Ledger.fits_with`). The stages displaced are found as a
    closure, the same whatever the order."""
    stages = {s.key: s for s in model.stages}
    gains: dict[str, float] = {}
    for key, before in previous.items():
        stage, after = stages.get(key), placed.get(key, {})
        if stage is not None and after and moved_replicas(before, after) and may_stay(model, stage, before):
            gains[key] = move_gain(before, after, {name: total(key, name) for name in {*before, *after}})
    if not gains:
        return {}
    suspects = {key for key, gain in gains.items() if gain <= model.move_cost + _ROUNDING}
    ledger = Ledger(model, ((stages[key], name, n) for key, where in placed.items()
                            if key in stages and key not in suspects for name, n in where.items()))
    displaced = True
    while displaced:
        displaced = False
        for key in sorted(suspects):
            if not ledger.fits_with(stages[key], previous[key]):
                suspects.discard(key)
                for name, n in placed.get(key, {}).items():
                    ledger.add(stages[key], name, n)
                displaced = True
    untouched = {key: gains[key] for key in suspects}
    for key in sorted(set(gains) - set(untouched)):
        if gains[key] > model.move_cost + _ROUNDING:
            stage, after = stages[key], placed.get(key, {})
            for name, n in after.items():
                ledger.add(stage, name, -n)
            if ledger.fits_with(stage, previous[key]):
                untouched[key] = gains[key]
            for name, n in after.items():
                ledger.add(stage, name, n)
    return dict(sorted(untouched.items()))


def unjustified_moves(model: FleetModel, previous: Mapping[str, Mapping[str, int]],
                      placed: Mapping[str, Mapping[str, int]], total: Callable[[str, str], float]
                      ) -> dict[str, float]:
    """The churn rule: every stage the change did not touch that moved (:func:`untouched_moves`)
    gains more than ``moveCost`` per replica moved. The stages that break it, with their gain."""
    return {key: gain for key, gain in untouched_moves(model, previous, placed, total).items()
            if gain <= model.move_cost + _ROUNDING}
