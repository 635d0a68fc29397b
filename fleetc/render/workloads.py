"""A stage's workload objects: Volcano Jobs for gangs; Deployment, Service,
HorizontalPodAutoscaler and PodDisruptionBudget for serving; the training PriorityClass.

Where the platform's ``performance`` settings go:

* ``trainingPriority`` -> ``priorityClassName: fleetc-training-<level>`` on every Volcano Job
  (and its pods) of a governed pipeline, with the PriorityClass rendered on that cluster. The
  values are :data:`PRIORITY_VALUES`: far apart so other teams can slot classes in between,
  and all below 1,000,000,000, which Kubernetes reserves for system-critical pods.
* ``inferenceTimeout`` -> the serving container's ``FLEETC_INFERENCE_TIMEOUT_SECONDS`` env var
  (the server enforces it per request: Kubernetes has no per-request timeout of its own for a
  ClusterIP Service, so no Service field or annotation carries it) and the readiness probe's
  ``timeoutSeconds`` (rounded up): a replica whose health check cannot answer within the
  request budget cannot answer requests either, so it must not receive traffic.

The warm minimum (the seed's answer to cold starts) is the replicas the placement put on the
cluster: the HPA scales the Deployment up to them and never below (``minReplicas``; it does
so without metrics, within its sync period) and the PodDisruptionBudget keeps all but one of
them ready through voluntary disruptions. The Deployment itself names no replica count, as
Kubernetes advises for a Deployment under an HPA: Flux applies every field of a manifest on
each reconcile and would reset what the HPA scaled to, back to the warm minimum.
"""

from __future__ import annotations

import math
import re

from fleetc.model import Cluster, Stage, StageType, Toleration
from fleetc.render.common import (
    GPU_RESOURCE,
    Obj,
    cpu_quantity,
    memory_quantity,
    metadata,
    object_name,
    selector,
    stage_labels,
    stage_metadata,
)
from fleetc.render.context import Context
from fleetc.render.data import CacheMounts, cache_mounts

#: fleetc's GPU type names -> the ``nvidia.com/gpu.product`` node label GPU feature discovery sets.
GPU_PRODUCT_LABELS: dict[str, str] = {
    "a100": "NVIDIA-A100-SXM4-80GB",
    "h100": "NVIDIA-H100-80GB-HBM3",
    "t4": "Tesla-T4",
    "v100": "Tesla-V100-SXM2-32GB",
    "l4": "NVIDIA-L4",
    "a10": "NVIDIA-A10",
}
#: GPU feature discovery appends this to the product label of nodes whose GPUs are time-sliced
#: (the device plugin's default ``renameByDefault: false``), so shared and exclusive nodes differ.
SHARED_PRODUCT_SUFFIX = "-SHARED"

#: ``trainingPriority`` -> PriorityClass value.
PRIORITY_VALUES: dict[str, int] = {"low": 1_000, "medium": 10_000, "high": 100_000, "critical": 1_000_000}

HTTP_PORT = 8080
SERVICE_PORT = 80
MAX_RETRY = 3
HPA_MAX_FACTOR = 2  # maxReplicas = this x the warm minimum
HPA_CPU_UTILIZATION = 70  # percent of the CPU request
TIMEOUT_ENV = "FLEETC_INFERENCE_TIMEOUT_SECONDS"

_ENV_UNSAFE = re.compile(r"[^A-Z0-9_]")


# --------------------------------------------------------------------------- platform settings
def priority_class_name(level: str) -> str:
    return f"fleetc-training-{level}"


def training_priority(ctx: Context, stage: Stage) -> str | None:
    """The highest ``trainingPriority`` of the platforms governing the stage's pipeline."""
    levels = [p.training_priority for p in ctx.platforms(stage.pipeline)]
    return max(levels, key=PRIORITY_VALUES.__getitem__) if levels else None


def inference_timeout(ctx: Context, stage: Stage) -> float | None:
    """The strictest (smallest) ``inferenceTimeout`` of the governing platforms."""
    timeouts = [p.inference_timeout_seconds for p in ctx.platforms(stage.pipeline)]
    return min(timeouts) if timeouts else None


def priority_class(ctx: Context, level: str, pipeline: str) -> Obj:
    """The PriorityClass a governed gang stage names; its source is the first governing platform
    asking for this level (the object is the same whichever platform it came from)."""
    platform = next(p for p in ctx.platforms(pipeline) if p.training_priority == level)
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": metadata(priority_class_name(level), source=platform.source,
                             field="spec.performance.trainingPriority"),
        "value": PRIORITY_VALUES[level],
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"fleetc: training work of platforms with trainingPriority {level}",
    }


# --------------------------------------------------------------------------- pods
def _env_name(prefix: str, name: str) -> str:
    return prefix + _ENV_UNSAFE.sub("_", name.upper())


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def env_vars(ctx: Context, stage: Stage, cached_paths: dict[str, str]) -> list[Obj]:
    """The container's environment, sorted by name:

    * ``FLEETC_INPUT_<NAME>`` / ``FLEETC_OUTPUT_<NAME>``: the data URLs;
    * ``FLEETC_INPUT_<NAME>_PATH``: where a cached input is mounted (``cached_paths``, from
      :func:`.data.cache_mounts`);
    * DataProc stages, with a data policy: ``FLEETC_PREPROCESS_PARALLELISM`` and
      ``FLEETC_PREPROCESS_COMPRESSION`` (``preprocessing``; env vars rather than more task
      replicas, because the gang's size and resources are what the placement reserved);
    * Deployment stages of a governed pipeline: :data:`TIMEOUT_ENV`.
    """
    env = {_env_name("FLEETC_INPUT_", i.name): ctx.input_url(stage, i) for i in stage.inputs}
    env |= {_env_name("FLEETC_INPUT_", name) + "_PATH": path for name, path in cached_paths.items()}
    env |= {_env_name("FLEETC_OUTPUT_", o.name): o.url for o in stage.outputs}
    data = ctx.data_policy
    if data is not None and stage.type is StageType.DATAPROC:
        env["FLEETC_PREPROCESS_PARALLELISM"] = str(data.parallelization)
        env["FLEETC_PREPROCESS_COMPRESSION"] = "true" if data.compression else "false"
    timeout = inference_timeout(ctx, stage)
    if timeout is not None and stage.type is StageType.DEPLOYMENT:
        env[TIMEOUT_ENV] = _seconds(timeout)
    return [{"name": name, "value": env[name]} for name in sorted(env)]


def _resources(stage: Stage) -> Obj:
    """One pod's share of a replica (a replica split over nodes shares CPU and memory evenly):
    the GPUs it asks for, not the rounded reservation (:mod:`fleetc.nodefit`)."""
    split = stage.pods_per_replica
    amounts = {"cpu": cpu_quantity(-(-stage.cpu_millis // split)),
               "memory": memory_quantity(-(-stage.memory_bytes // split))}
    if stage.pod_gpus > 0:
        amounts[GPU_RESOURCE] = str(stage.pod_gpus)
    return {"requests": amounts, "limits": dict(amounts)}


def _container(ctx: Context, stage: Stage, cache: CacheMounts) -> Obj:
    container: Obj = {"name": stage.type.value.lower(), "image": stage.image}
    if stage.command:
        container["command"] = list(stage.command)
    env = env_vars(ctx, stage, cache.paths)
    if env:
        container["env"] = env
    container["resources"] = _resources(stage)
    if cache.mounts:
        container["volumeMounts"] = cache.mounts
    return container


def _toleration(t: Toleration) -> Obj:
    fields = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in fields.items() if v}


def _pod_spec(ctx: Context, cluster: Cluster, stage: Stage, container: Obj, cache: CacheMounts,
              **extra: str) -> Obj:
    """Pod spec: ``extra`` fields (restart policy, priority class), the GPU node selector (known
    GPU types only; the ``-SHARED`` product on time-sliced nodes), tolerations."""
    spec: Obj = dict(extra)
    product = GPU_PRODUCT_LABELS.get(cluster.gpu_type or "")
    if stage.gpus > 0 and product:
        suffix = SHARED_PRODUCT_SUFFIX if ctx.shares_gpus(stage) else ""
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product + suffix}
    if stage.tolerations:
        spec["tolerations"] = [_toleration(t) for t in stage.tolerations]
    spec["containers"] = [container]
    if cache.volumes:
        spec["volumes"] = cache.volumes
    return spec


# --------------------------------------------------------------------------- stage objects
def volcano_job(ctx: Context, cluster: Cluster, stage: Stage) -> Obj:
    """A gang stage as a Volcano Job: all its pods (``stage.replicas``, each split into
    ``pods_per_replica`` that fit a node) start together or not at all."""
    level = training_priority(ctx, stage)
    priority = {"priorityClassName": priority_class_name(level)} if level else {}
    cache = cache_mounts(ctx, stage)
    pod = _pod_spec(ctx, cluster, stage, _container(ctx, stage, cache), cache, restartPolicy="OnFailure",
                    **priority)
    template = {"metadata": {"labels": stage_labels(stage)}, "spec": pod}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": stage_metadata(stage),
        "spec": {
            "schedulerName": "volcano",
            "queue": f"fleetc-{stage.workload_class}",
            **priority,
            "minAvailable": stage.pods,
            "maxRetry": MAX_RETRY,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [{"name": "worker", "replicas": stage.pods, "template": template}],
        },
    }


def _readiness_probe(ctx: Context, stage: Stage) -> Obj:
    probe: Obj = {"httpGet": {"path": "/healthz", "port": "http"}}
    timeout = inference_timeout(ctx, stage)
    if timeout is not None:
        probe["timeoutSeconds"] = max(1, math.ceil(timeout))
    return probe


def deployment(ctx: Context, cluster: Cluster, stage: Stage) -> Obj:
    """A serving stage's share on this cluster: pods behind a readiness probe, as many as its
    HPA says (see the module docstring)."""
    cache = cache_mounts(ctx, stage)
    container = _container(ctx, stage, cache)
    container["ports"] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    container["readinessProbe"] = _readiness_probe(ctx, stage)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": stage_metadata(stage),
        "spec": {
            "selector": {"matchLabels": selector(stage)},
            "template": {
                "metadata": {"labels": stage_labels(stage)},
                "spec": _pod_spec(ctx, cluster, stage, container, cache),
            },
        },
    }


def service(stage: Stage) -> Obj:
    """ClusterIP Service in front of a Deployment stage: port 80 -> the pods' ``http`` port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": stage_metadata(stage),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(stage),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def autoscaler(stage: Stage, replicas: int) -> Obj:
    """HPA over the Deployment: never below the warm minimum the placement reserved, up to
    :data:`HPA_MAX_FACTOR` times it on CPU load. Replicas past the minimum were not placed by the
    optimizer: they run where the cluster has room, else stay Pending (never evicting others)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": stage_metadata(stage),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": object_name(stage)},
            "minReplicas": replicas,
            "maxReplicas": HPA_MAX_FACTOR * replicas,
            "metrics": [{
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                       "averageUtilization": HPA_CPU_UTILIZATION}},
            }],
        },
    }


def disruption_budget(stage: Stage, replicas: int) -> Obj:
    """PDB: ``minAvailable = max(1, replicas - 1)``: a drain takes one warm replica at a time and
    never the last one (a one-replica share waits until the HPA or a reschedule adds another)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": stage_metadata(stage),
        "spec": {"minAvailable": max(1, replicas - 1), "selector": {"matchLabels": selector(stage)}},
    }
