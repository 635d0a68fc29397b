"""A model of what rendered manifests do at run time, for the suite.

Schemas say an object is well formed; this says whether the pods it makes would run as the
policies intend. It reads a compile's files (``clusters/<cluster>/*.yaml``) and the model's
clusters, expands every Volcano Job task and Deployment into the pods the controllers create,
and answers:

* **which node each pod fits** (:func:`fit_problems`): a cluster of ``gpu-count`` GPUs has
  ``gpu-count / gpus-per-node`` nodes, each with its share of the cluster's CPU and memory
  (a cluster without GPUs is one node); pods are bound like the scheduler binds them, each
  onto a node with room for all its requests, largest first. Time-sliced pods (those that
  select a ``-SHARED`` product) need a time-sliced node, whose GPUs count as
  ``slots`` each; a node serves one kind or the other. Work fleetc does not place
  (``utilization``) is not modelled: the nodes are the cluster's, whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML

from fleetc.model import FleetModel
from fleetc.placement.verify import slots_per_gpu
from fleetc.policy.quantity import cpu_millis, memory_bytes

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"


@dataclass(frozen=True, eq=False)  # identity: two pods of one task are two pods
class Pod:
    cluster: str
    namespace: str
    owner: str  # "<kind>/<name>"
    stage: str  # "<pipeline>/<stage>" from the pod labels
    task: str  # Volcano task name ('' for a Deployment)
    index: int  # the pod's index in its task / Deployment
    spec: Mapping[str, Any]

    @property
    def container(self) -> Mapping[str, Any]:
        return self.spec["containers"][0]

    def requests(self) -> tuple[int, int, int]:
        """(GPUs, CPU millis, memory bytes) the pod's containers ask for."""
        gpus = millis = memory = 0
        for container in self.spec["containers"]:
            amounts = container.get("resources", {}).get("requests", {})
            gpus += int(amounts.get(GPU, 0))
            millis += cpu_millis(amounts.get("cpu", 0))
            memory += memory_bytes(amounts.get("memory", 0))
        return gpus, millis, memory

    @property
    def ident(self) -> tuple[str, str, str, int]:
        return self.cluster, self.owner, self.task, self.index

    @property
    def shared(self) -> bool:
        return str(self.spec.get("nodeSelector", {}).get(PRODUCT, "")).endswith("-SHARED")


def objects(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(cluster, object) of every object under ``clusters/``."""
    yaml = YAML(typ="safe")
    for path, text in sorted(files.items()):
        parts = path.split("/")
        if parts[0] == "clusters" and len(parts) == 3 and parts[2] != "kustomization.yaml":
            yield parts[1], yaml.load(text)


def pods(files: Mapping[str, str]) -> list[Pod]:
    """The pods the Volcano job controller and the Deployment's HPA (at its minimum) create."""
    found: list[Pod] = []
    everything = list(objects(files))
    minimum = {(c, o["metadata"]["namespace"], o["spec"]["scaleTargetRef"]["name"]): o["spec"]["minReplicas"]
               for c, o in everything if o["kind"] == "HorizontalPodAutoscaler"}
    for cluster, obj in everything:
        meta = obj["metadata"]
        owner = f"{obj['kind']}/{meta['name']}"
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
            for task in obj["spec"]["tasks"]:
                template = task["template"]
                for index in range(task["replicas"]):
                    found.append(Pod(cluster, meta["namespace"], owner, _stage(template), task["name"],
                                     index, template["spec"]))
        elif obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            for index in range(minimum[(cluster, meta["namespace"], meta["name"])]):
                found.append(Pod(cluster, meta["namespace"], owner, _stage(template), "", index,
                                 template["spec"]))
    return found


def _stage(template: Mapping[str, Any]) -> str:
    labels = template["metadata"]["labels"]
    return f"{labels['fleetc.dev/pipeline']}/{labels['fleetc.dev/stage']}"


# --------------------------------------------------------------------------- node fit
@dataclass
class _Node:
    gpus: int
    millis: int
    memory: int
    shared: bool | None = None  # None: nothing bound yet
    pods: list[Pod] = field(default_factory=list)


def _nodes(model: FleetModel, cluster: str) -> list[_Node]:
    c = model.cluster(cluster)
    count = c.gpus // c.gpus_per_node if c.gpus else 1
    return [_Node(c.gpus_per_node if c.gpus else 0, c.cpu_millis // count, c.memory_bytes // count)
            for _ in range(count)]


def bind(model: FleetModel, files: Mapping[str, str]) -> tuple[dict[tuple[str, str, str, int], int], list[str]]:
    """Bind every pod to a node of its cluster, largest first; (pod -> node index, problems)."""
    slots = slots_per_gpu(model)
    bound: dict[tuple[str, str, str, int], int] = {}
    problems: list[str] = []
    by_cluster: dict[str, list[Pod]] = {}
    for pod in pods(files):
        by_cluster.setdefault(pod.cluster, []).append(pod)
    for cluster, mine in sorted(by_cluster.items()):
        nodes = _nodes(model, cluster)
        per_node = model.cluster(cluster).gpus_per_node
        for pod in sorted(mine, key=lambda p: (p.shared, [-x for x in p.requests()], p.owner, p.index)):
            gpus, millis, memory = pod.requests()
            if gpus > per_node * (slots if pod.shared else 1):
                problems.append(f"{cluster}: {pod.owner} pod {pod.index} asks for {gpus} GPUs; "
                                f"a node carries {per_node}")
                continue
            for i, node in enumerate(nodes):
                kind_ok = gpus == 0 or node.shared in (None, pod.shared)
                capacity = node.gpus * (slots if node.shared or (gpus and pod.shared) else 1)
                used = sum(p.requests()[0] for p in node.pods)
                if (kind_ok and used + gpus <= capacity
                        and sum(p.requests()[1] for p in node.pods) + millis <= node.millis
                        and sum(p.requests()[2] for p in node.pods) + memory <= node.memory):
                    if gpus:
                        node.shared = pod.shared
                    node.pods.append(pod)
                    bound[pod.ident] = i
                    break
            else:
                problems.append(f"{cluster}: {pod.owner} pod {pod.index} ({gpus} GPUs, {millis}m CPU, "
                                f"{memory} bytes) fits no node")
    return bound, problems


def fit_problems(model: FleetModel, files: Mapping[str, str]) -> list[str]:
    return bind(model, files)[1]
