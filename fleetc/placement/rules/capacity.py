"""Capacity per cluster: what fleetc may allocate (:func:`usable_capacity`), what replicas take
(:class:`Usage`), whether it fits (:func:`overuse`) and packs onto the nodes (:func:`unpacked`),
and the failover headroom a platform asks for (:func:`failover_shortfalls`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload

from fleetc import nodefit
from fleetc.model import Cluster, FleetModel, Stage, StageType
from fleetc.placement.rules.filters import pod_of, shape_words
from fleetc.placement.rules.replicas import ha_clusters
from fleetc.placement.rules.units import EXCLUSIVE_TYPES, MIB, RESOURCES, ROUNDING

if TYPE_CHECKING:  # the rules count in plain integers; the solvers pass arrays of pairs
    import numpy as np


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
    gpus = max(0, math.floor(cluster.gpus * (threshold - utilization) + ROUNDING))
    millis = max(0, math.floor(cluster.cpu_millis * (1.0 - utilization) + ROUNDING))
    memory = max(0, math.floor(cluster.memory_bytes * (1.0 - utilization) / MIB + ROUNDING)) * MIB
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
    slots (:func:`gpus_as`). A stage comes as it runs on the cluster (:func:`on_cluster`)."""
    whole, slots = gpus_as(replicas * stage.gpus, uses_shared_slots(model, stage))
    return Usage(whole, slots, replicas * stage.cpu_millis, replicas * stage.memory_bytes)


@overload
def gpus_as(gpus: int, shared: bool) -> tuple[int, int]: ...


@overload
def gpus_as(gpus: np.ndarray, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


def gpus_as(gpus: Any, shared: Any) -> tuple[Any, Any]:
    """``gpus`` a replica takes, as (whole GPUs, time-sliced slots): all slots where it uses
    shared slots (``shared``, :func:`uses_shared_slots`), else all whole GPUs. Plain integers,
    or numpy arrays of pairs alike: the ledger counts a replica so (:func:`replica_usage`), and
    the solvers' capacity rows read the same
    (:meth:`fleetc.placement.problem.Problem.use_at`)."""
    slots = gpus * shared
    return gpus - slots, slots


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
    any other. Pods without GPUs then pack onto the cores and memory left on the cluster's
    nodes (:func:`_cpu_packing`); where they do not beside that packing of the GPU pods (and no
    pod is time-sliced), all pods are packed together, so that the GPU pods may spread out."""
    node = nodefit.node_of(cluster)
    slots = slots_on(model, cluster)
    whole: list[nodefit.Shape] = []
    shared: list[nodefit.Shape] = []
    cpu: list[nodefit.Shape] = []
    for stage, replicas in placed:
        if replicas <= 0:
            continue
        time_sliced = slots > 1 and uses_shared_slots(model, stage)
        pods = cpu if stage.gpus <= 0 else shared if time_sliced else whole
        pods.extend([pod_of(stage)] * (replicas * stage.pods_per_replica))
    per_node = max(node.gpus, 1)
    sliced_gpus = time_sliced_gpus(sum(p.gpus for p in shared), slots, time_sliced_unit(cluster))
    left = max(0, usable_capacity(model, cluster)[0] - sliced_gpus)
    exclusive = [node] * (left // per_node) + ([replace(node, gpus=left % per_node)] if left % per_node else [])
    sliced = [nodefit.Shape(per_node * slots, node.millis, node.memory)] * (sliced_gpus // per_node)
    found = nodefit.pack(whole, exclusive) if whole else ()
    more = nodefit.pack(shared, sliced) if shared else ()
    if found is None or more is None:
        return Packing((*whole, *shared, *cpu), (*exclusive, *sliced), None)
    found += tuple(len(exclusive) + j for j in more)
    if not cpu:
        return Packing((*whole, *shared), (*exclusive, *sliced), found)
    nodes = _cpu_nodes(cluster, [*exclusive, *sliced])
    both = _cpu_packing([*whole, *shared], found, cpu, nodes)
    if both is None and not shared:  # another assignment of the GPU pods may leave the room the others need
        both = nodefit.pack([*whole, *cpu], nodes)
    return Packing((*whole, *shared, *cpu), tuple(nodes), both)


def _cpu_nodes(cluster: Cluster, gpu_nodes: Sequence[nodefit.Shape]) -> list[nodefit.Shape]:
    """The nodes pods without GPUs may run on: those the GPU pods pack onto, then the rest of
    the cluster's nodes (:func:`fleetc.nodefit.nodes_of`: nodes of GPUs fleetc does not give
    out still have cores and memory; what it may use in total :func:`overuse` counts)."""
    rest = replace(nodefit.node_of(cluster), gpus=0)  # GPUs fleetc does not give out
    return [*gpu_nodes, *[rest] * max(0, nodefit.nodes_of(cluster) - len(gpu_nodes))]


def _cpu_packing(gpu_pods: Sequence[nodefit.Shape], found: tuple[int, ...], cpu: Sequence[nodefit.Shape],
                 nodes: Sequence[nodefit.Shape]) -> tuple[int, ...] | None:
    """The GPU pods' packing ``found`` (onto the first ``nodes``) with the ``cpu`` pods packed
    onto the cores and memory left on each node (:func:`fleetc.nodefit.pack`); None when they
    do not pack so."""
    left = [[n.millis, n.memory] for n in nodes]
    for pod, j in zip(gpu_pods, found, strict=True):
        left[j][0] -= pod.millis
        left[j][1] -= pod.memory
    more = nodefit.pack(cpu, [nodefit.Shape(0, max(0, millis), max(0, memory)) for millis, memory in left])
    return None if more is None else (*found, *more)


def unpacked(model: FleetModel, cluster: Cluster, placed: Iterable[tuple[Stage, int]]) -> str:
    """Why the pods placed on ``cluster`` do not pack onto its nodes (:func:`packing`), as a
    phrase; '' when they pack."""
    found = packing(model, cluster, placed)
    if found.found is not None:
        return ""
    return (f"its pods ({_counted(found.pods)}) pack onto no assignment to its nodes "
            f"({_counted(found.nodes)})")


def _counted(shapes: Sequence[nodefit.Shape]) -> str:
    """``2 x 6 GPUs, 1 x 4 GPUs`` (GPUs only: the count that decides most packings; cores and
    memory for a shape without GPUs: ``3 x (2.5 cores, 1Gi)``)."""
    counts: dict[tuple[int, str], int] = {}
    for shape in shapes:
        key = (shape.gpus, f"{shape.gpus} GPU{'s' if shape.gpus != 1 else ''}" if shape.gpus
               else f"({shape_words(shape)})")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} x {words}" for (_, words), n in sorted(counts.items(), reverse=True))


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
