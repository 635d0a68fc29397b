"""Where a stage may run: the filters (cordons, data sovereignty, GPUs and their type, node
fit, taints), and a stage as it runs on a cluster (:func:`on_cluster`)."""

from __future__ import annotations

from dataclasses import replace

from fleetc import nodefit
from fleetc.model import Cluster, GPUOption, Stage, Taint, Toleration, untolerated
from fleetc.placement.rules.units import MIB


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


def excluded(stage: Stage, cluster: Cluster) -> bool:
    """Whether any rule keeps ``stage`` off ``cluster`` (``bool(exclusions(stage, cluster))``),
    answered at the first rule that does, without wording any: the fixes and the checks ask it of
    every stage left out and every cluster (100 x 2,000 ``--sovereignty``: some 70,000 pairs)."""
    return (cluster.cordoned or outside_jurisdiction(stage, cluster) or lacks_gpus(stage, cluster)
            or lacks_gpu_type(stage, cluster) or fits_no_node(stage, cluster)
            or bool(repelling_taints(stage, cluster)))


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
