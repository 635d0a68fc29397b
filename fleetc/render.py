"""Render a placement as plain Kubernetes manifests: one folder per cluster, for Argo CD / Flux.

:func:`render` is a pure function of the model and the placement: the same input gives the same
bytes (everything is sorted; no timestamps, versions or environment are read). Its output maps
relative POSIX paths to file text:

* ``placement.yaml``: fleetc's own report of the placement (not a Kubernetes object);
* ``clusters/<cluster>/<kind>-<name>.yaml`` for cluster-scoped objects and
  ``clusters/<cluster>/<kind>-<namespace>-<name>.yaml`` for namespaced ones (kind in lower case),
  one object per file, for every cluster that runs at least one assignment;
* ``clusters/<cluster>/kustomization.yaml`` listing those files, sorted.

Per cluster: a Namespace per pipeline namespace, a Volcano Queue ``fleetc-<class>`` per workload
class, a Volcano Job per gang stage (the whole gang), and a Deployment (this cluster's share of
the replicas) plus a ClusterIP Service per Deployment stage. Secrets are never rendered.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetc.errors import InternalError
from fleetc.model import (
    Assignment,
    ClassWeights,
    Cluster,
    FleetModel,
    Input,
    Placement,
    Stage,
    StagePlacement,
    Toleration,
    WorkloadClass,
)
from fleetc.yamlout import dump

__all__ = [
    "GPU_PRODUCT_LABELS",
    "cpu_quantity",
    "deployment",
    "memory_quantity",
    "namespace",
    "object_name",
    "placement_report",
    "queue",
    "render",
    "service",
    "stage_labels",
    "volcano_job",
]

Obj = dict[str, Any]

#: fleetc's GPU type names -> the ``nvidia.com/gpu.product`` node label GPU feature discovery sets.
GPU_PRODUCT_LABELS: Mapping[str, str] = {
    "a100": "NVIDIA-A100-SXM4-80GB",
    "h100": "NVIDIA-H100-80GB-HBM3",
    "t4": "Tesla-T4",
    "v100": "Tesla-V100-SXM2-32GB",
    "l4": "NVIDIA-L4",
    "a10": "NVIDIA-A10",
}

MANAGED_BY = {"app.kubernetes.io/managed-by": "fleetc"}
GPU_RESOURCE = "nvidia.com/gpu"
HTTP_PORT = 8080
SERVICE_PORT = 80
MAX_RETRY = 3

_GI = 1024**3
_MI = 1024**2
_MAX_NAME = 63
_NAME_HASH_LEN = 8
_ENV_UNSAFE = re.compile(r"[^A-Z0-9_]")


# --------------------------------------------------------------------------- entry point
def render(model: FleetModel, placement: Placement) -> dict[str, str]:
    """Every output file, keyed by its relative POSIX path, in sorted order."""
    fleet = _Fleet.of(model)
    files = {"placement.yaml": dump(placement_report(model, placement))}
    work = _work_by_cluster(_placements(model, placement))
    for cluster in model.clusters:
        if cluster.name in work:
            objects = _cluster_objects(fleet, cluster, work[cluster.name])
            files.update(_cluster_files(cluster.name, objects))
    return dict(sorted(files.items()))


@dataclass(frozen=True)
class _Fleet:
    """Look-ups over the model, built once per render so rendering stays linear in its size."""

    class_weights: ClassWeights
    output_urls: Mapping[tuple[str, str], str]  # (stage key, output name) -> url
    namespace_pipelines: Mapping[str, frozenset[str]]  # namespace -> pipelines using it

    @classmethod
    def of(cls, model: FleetModel) -> _Fleet:
        pipelines: dict[str, set[str]] = defaultdict(set)
        for s in model.stages:
            pipelines[s.namespace].add(s.pipeline)
        return cls(
            class_weights=model.class_weights,
            output_urls={(s.key, o.name): o.url for s in model.stages for o in s.outputs},
            namespace_pipelines={ns: frozenset(p) for ns, p in pipelines.items()},
        )


def _placements(model: FleetModel, placement: Placement) -> list[tuple[Stage, StagePlacement]]:
    """Each model stage with its placement, in model order."""
    by_key = {p.stage: p for p in placement.stages}
    missing = [s.key for s in model.stages if s.key not in by_key]
    if missing:
        raise InternalError(f"placement has no entry for stage(s): {', '.join(missing)}")
    return [(s, by_key[s.key]) for s in model.stages]


def _work_by_cluster(placed: list[tuple[Stage, StagePlacement]]) -> dict[str, list[tuple[Stage, Assignment]]]:
    """Cluster name -> the stages that run pods there with their assignment, in model order."""
    work: dict[str, list[tuple[Stage, Assignment]]] = defaultdict(list)
    for stage, p in placed:
        for a in p.assignments:
            if a.replicas > 0:
                work[a.cluster].append((stage, a))
    return dict(work)


# --------------------------------------------------------------------------- placement.yaml
def placement_report(model: FleetModel, placement: Placement) -> Obj:
    """fleetc's report: the solver's figures and where each stage went."""
    return {
        "apiVersion": "fleetc.dev/v1alpha1",
        "kind": "Placement",
        "fleet": model.name,
        "method": placement.method,
        "objective": round(placement.objective, 6),
        "bound": round(placement.bound, 6),
        "gap": round(placement.gap, 6),
        "stages": [_stage_report(s, p) for s, p in _placements(model, placement)],
    }


def _stage_report(stage: Stage, placement: StagePlacement) -> Obj:
    report: Obj = {
        "pipeline": stage.pipeline,
        "stage": stage.name,
        "type": str(stage.type),
        "class": str(stage.workload_class),
        "gpuType": stage.gpu_type,
        "gpusPerReplica": stage.gpus,
        "replicas": stage.replicas,
        "clusters": [{"name": a.cluster, "replicas": a.replicas, "gpus": a.gpus} for a in placement.assignments],
        "score": round(placement.score, 6),
    }
    if not placement.assignments:
        report["unplaced"] = True
    return report


# --------------------------------------------------------------------------- per cluster
def _cluster_objects(fleet: _Fleet, cluster: Cluster, work: list[tuple[Stage, Assignment]]) -> list[Obj]:
    """All objects for one cluster: namespaces, queues, then each stage's workload objects."""
    namespaces = sorted({stage.namespace for stage, _ in work})
    classes = sorted({stage.workload_class for stage, _ in work})
    objects = [namespace(name, fleet.namespace_pipelines[name]) for name in namespaces]
    objects += [queue(cluster, c, fleet.class_weights) for c in classes]
    for stage, assignment in work:
        env = _env_vars(fleet, stage)
        if stage.is_gang:
            objects.append(volcano_job(cluster, stage, env))
        else:
            objects += [deployment(cluster, stage, env, assignment.replicas), service(stage)]
    return objects


def _file_name(obj: Obj) -> str:
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(p for p in parts if p) + ".yaml"


def _cluster_files(cluster: str, objects: Iterable[Obj]) -> dict[str, str]:
    """One file per object plus the kustomization listing them; name clashes are bugs."""
    files: dict[str, str] = {}
    for obj in objects:
        name = _file_name(obj)
        if name in files:
            raise InternalError(f"two objects would both be written to clusters/{cluster}/{name}")
        files[name] = dump(obj)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    files["kustomization.yaml"] = dump(kustomization)
    return {f"clusters/{cluster}/{name}": text for name, text in sorted(files.items())}


# --------------------------------------------------------------------------- names, labels
def object_name(stage: Stage) -> str:
    """``<pipeline>-<stage>``, cut to 54 characters plus ``-<8 hex of sha256>`` past 63."""
    return _dns_label(f"{stage.pipeline}-{stage.name}")


def _dns_label(name: str) -> str:
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_NAME_HASH_LEN]
    return f"{name[: _MAX_NAME - _NAME_HASH_LEN - 1]}-{digest}"


def _selector(stage: Stage) -> dict[str, str]:
    """The labels that identify a stage's pods (stable: Deployment selectors are immutable)."""
    return {"fleetc.dev/pipeline": _dns_label(stage.pipeline), "fleetc.dev/stage": _dns_label(stage.name)}


def stage_labels(stage: Stage) -> dict[str, str]:
    """Labels on every object (and pod template) that belongs to one stage."""
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": _dns_label(stage.name),
        "app.kubernetes.io/part-of": _dns_label(stage.pipeline),
        **_selector(stage),
    }


def _stage_metadata(stage: Stage) -> Obj:
    return {
        "name": object_name(stage),
        "namespace": stage.namespace,
        "labels": stage_labels(stage),
        "annotations": {"fleetc.dev/source": f"{stage.source.path}#{stage.source.field}"},
    }


# --------------------------------------------------------------------------- quantities
def cpu_quantity(millis: int) -> str:
    """Whole cores as ``"16"``, anything else in millicores (``"500m"``)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(size: int) -> str:
    """``"64Gi"`` when a whole number of GiB, else ``"<n>Mi"``, else plain bytes."""
    if size % _GI == 0:
        return f"{size // _GI}Gi"
    if size % _MI == 0:
        return f"{size // _MI}Mi"
    return str(size)


def _resources(stage: Stage) -> Obj:
    amounts = {"cpu": cpu_quantity(stage.cpu_millis), "memory": memory_quantity(stage.memory_bytes)}
    if stage.gpus > 0:
        amounts[GPU_RESOURCE] = str(stage.gpus)
    return {"requests": amounts, "limits": dict(amounts)}


# --------------------------------------------------------------------------- cluster-wide objects
def namespace(name: str, pipelines: frozenset[str]) -> Obj:
    """A Namespace; labelled with its pipeline only when exactly one pipeline (in the whole
    fleet, so the object is the same on every cluster) uses it."""
    labels = dict(MANAGED_BY)
    if len(pipelines) == 1:
        labels["fleetc.dev/pipeline"] = _dns_label(next(iter(pipelines)))
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def queue(cluster: Cluster, workload_class: WorkloadClass, weights: ClassWeights) -> Obj:
    """The Volcano Queue of one workload class, weighted by the Fleet, capped at the cluster."""
    capability = {"cpu": cpu_quantity(cluster.cpu_millis), "memory": f"{cluster.memory_bytes // _GI}Gi"}
    if cluster.gpus > 0:
        capability[GPU_RESOURCE] = str(cluster.gpus)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": f"fleetc-{workload_class}", "labels": dict(MANAGED_BY)},
        "spec": {
            "weight": max(1, round(weights.of(workload_class) * 10)),
            "reclaimable": True,
            "capability": capability,
        },
    }


# --------------------------------------------------------------------------- pods
def _input_url(fleet: _Fleet, stage: Stage, spec: Input) -> str:
    """A ``source:`` input's URL, or the URL of the output a ``from:`` input names."""
    if spec.url is not None:
        return spec.url
    ref = (f"{stage.pipeline}/{spec.from_stage}", str(spec.from_output))
    if ref not in fleet.output_urls:
        raise InternalError(f"{stage.key}: input {spec.name!r} refers to unknown output {ref[0]}.{ref[1]}")
    return fleet.output_urls[ref]


def _env_name(prefix: str, name: str) -> str:
    return prefix + _ENV_UNSAFE.sub("_", name.upper())


def _env_vars(fleet: _Fleet, stage: Stage) -> list[Obj]:
    """``FLEETC_INPUT_<NAME>`` / ``FLEETC_OUTPUT_<NAME>`` = the data URLs, sorted by name."""
    env = {_env_name("FLEETC_INPUT_", i.name): _input_url(fleet, stage, i) for i in stage.inputs}
    env |= {_env_name("FLEETC_OUTPUT_", o.name): o.url for o in stage.outputs}
    return [{"name": name, "value": env[name]} for name in sorted(env)]


def _container(stage: Stage, env: list[Obj]) -> Obj:
    container: Obj = {"name": stage.type.value.lower(), "image": stage.image}
    if stage.command:
        container["command"] = list(stage.command)
    if env:
        container["env"] = env
    container["resources"] = _resources(stage)
    return container


def _toleration(t: Toleration) -> Obj:
    fields = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in fields.items() if v}


def _pod_spec(cluster: Cluster, stage: Stage, container: Obj, restart_policy: str | None = None) -> Obj:
    """Pod spec: restart policy, GPU node selector (known GPU types only), tolerations."""
    spec: Obj = {}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    product = GPU_PRODUCT_LABELS.get(cluster.gpu_type or "")
    if stage.gpus > 0 and product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    if stage.tolerations:
        spec["tolerations"] = [_toleration(t) for t in stage.tolerations]
    spec["containers"] = [container]
    return spec


# --------------------------------------------------------------------------- stage objects
def volcano_job(cluster: Cluster, stage: Stage, env: list[Obj]) -> Obj:
    """A gang stage as a Volcano Job: all ``stage.replicas`` pods start together or not at all."""
    template = {
        "metadata": {"labels": stage_labels(stage)},
        "spec": _pod_spec(cluster, stage, _container(stage, env), restart_policy="OnFailure"),
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": _stage_metadata(stage),
        "spec": {
            "schedulerName": "volcano",
            "queue": f"fleetc-{stage.workload_class}",
            "minAvailable": stage.replicas,
            "maxRetry": MAX_RETRY,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [{"name": "worker", "replicas": stage.replicas, "template": template}],
        },
    }


def deployment(cluster: Cluster, stage: Stage, env: list[Obj], replicas: int) -> Obj:
    """A serving stage's share on this cluster: ``replicas`` pods behind a readiness probe."""
    container = _container(stage, env)
    container["ports"] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": "http"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _stage_metadata(stage),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": _selector(stage)},
            "template": {
                "metadata": {"labels": stage_labels(stage)},
                "spec": _pod_spec(cluster, stage, container),
            },
        },
    }


def service(stage: Stage) -> Obj:
    """ClusterIP Service in front of a Deployment stage: port 80 -> the pods' ``http`` port."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _stage_metadata(stage),
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(stage),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
