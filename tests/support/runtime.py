"""A model of what rendered manifests do at run time, for the suite.

Schemas say an object is well formed; this says whether the pods it makes would run as the
policies intend. It reads a compile's files (``clusters/<cluster>/{infra,workloads}/*.yaml``) and the model's
clusters, expands every Volcano Job task and Deployment into the pods the controllers create,
and answers:

* **which node each pod fits** (:func:`fit_problems`): a cluster of ``gpu-count`` GPUs has
  ``gpu-count / gpus-per-node`` nodes, each with the cores and memory the Fleet states per node
  (``cpu-per-node``, ``memory-per-node``) or else its share of the cluster's; a cluster without
  GPUs has as many nodes of its stated size as its capacity holds (one node when it states
  none); pods are bound like the scheduler binds them, each
  onto a node with room for all its requests, largest first. Time-sliced pods (those that
  select a ``-SHARED`` product) need a time-sliced node, whose GPUs count as
  ``slots`` each; a node serves one kind or the other. Work fleetc does not place
  (``utilization``) is not modelled: the nodes are the cluster's, whole.
* **whether Kueue admits every batch Job** (:func:`kueue_problems`): on a cluster that runs
  Kueue, each Job's LocalQueue and ClusterQueue exist and take its namespace, every resource
  its pods ask for is covered, and the ClusterQueue has a flavor whose node labels agree with
  the pods' node selector and quota for all of the cluster's Jobs at once (so none waits).
* **whether Volcano's queues hold their Jobs** (:func:`volcano_queue_problems`): each Job's
  Queue exists, and a Queue's GPU capability holds all its Jobs at once.

* **when a gated pod may be scheduled** (:func:`gates`, :func:`ungates`): a pod with scheduling
  gates is placed by no scheduler until a release Job removed them, after its waits passed.

* **when Fluid data operations run** (:func:`prefetch_problems`): a DataLoad of data a stage
  writes runs only after a DataProcess whose pod waited for every writer's completion marker.

``batch/v1`` Jobs are expanded as the Job controller does (kubernetes ``pkg/controller/job``):
``parallelism`` pods; in an Indexed Job each pod is annotated with its completion index, gets
``JOB_COMPLETION_INDEX`` and the hostname ``<job>-<index>``, resolvable as
``<job>-<index>.<subdomain>`` when a headless Service of that name selects it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetc.model import FleetModel, Stage
from fleetc.placement.rules import slots_per_gpu
from fleetc.policy.quantity import cpu_millis, memory_bytes
from fleetc.render.order import LOADED_SCRIPT, MARK_SCRIPT, RETRY_COUNT, RUN_SCRIPT, WAIT_SCRIPT
from fleetc.render.release import RELEASE_SCRIPT, RELEASER_SCRIPT, UNGATE_SCRIPT

from . import admission
from .expansion import command_line, environment, references
from .yamlread import manifest

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
    labels: Mapping[str, str] = field(default_factory=dict)
    name: str = ""  # the name the controller (or the API server, from generateName) gives it

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


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def is_batch_job(obj: Mapping[str, Any]) -> bool:
    return obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1"


def objects(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(cluster, object) of every object under ``clusters/``, each a fresh copy (callers may
    change what they get)."""
    for path, text in sorted(files.items()):
        parts = path.split("/")  # clusters/<cluster>/<infra|workloads>/<file>
        if parts[0] == "clusters" and len(parts) == 4 and parts[3] != "kustomization.yaml":
            yield parts[1], json.loads(_parsed(text))


@functools.cache
def _parsed(text: str) -> str:
    """A rendered file's object as JSON text: the suite's models read the same few thousand
    files again and again; JSON text gives each caller its own copy at C speed."""
    return json.dumps(manifest(text))


RELEASE_ROLE = ("fleetc.dev/role", "release")


def is_release(obj: Mapping[str, Any]) -> bool:
    """A release Job or a held Deployment's releaser (:mod:`fleetc.render.release`): its pods
    are fleetc's, not a stage's."""
    if not is_batch_job(obj) and obj["kind"] != "Deployment":
        return False
    labels = obj["spec"].get("template", {}).get("metadata", {}).get("labels", {})
    return bool(labels.get(RELEASE_ROLE[0]) == RELEASE_ROLE[1])


def pods(files: Mapping[str, str]) -> list[Pod]:
    """The pods of the stages: those the Volcano and Job controllers and the Deployment's HPA
    (at its minimum) create. Not the release Jobs' pods (:func:`releases`: a few millicores,
    no GPU, gone once their stage may start)."""
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
        elif is_batch_job(obj) and not is_release(obj):
            template = obj["spec"]["template"]
            task = "index" if obj["spec"].get("completionMode") == "Indexed" else ""
            for index in range(obj["spec"].get("parallelism", 1)):
                found.append(Pod(cluster, meta["namespace"], owner, _stage(template), task, index,
                                 template["spec"]))
        elif obj["kind"] == "Deployment" and not is_release(obj):
            count = minimum[(cluster, meta["namespace"], meta["name"])]
            found += [Pod(cluster, meta["namespace"], owner, _stage(obj["spec"]["template"]), "", index,
                          made["spec"], made["metadata"]["labels"], made["metadata"]["name"])
                      for index, made in enumerate(replica_set_pods(obj, count))]
    return found


# --------------------------------------------------------------------------- the ReplicaSet of a Deployment
#: The characters the API server draws a ``generateName`` suffix from, and its length
#: (kubernetes ``staging/src/k8s.io/apiserver/pkg/storage/names/generate.go``
#: ``SimpleNameGenerator``, ``k8s.io/apimachinery/pkg/util/rand`` ``String``).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_SUFFIX = 5
TEMPLATE_HASH = "pod-template-hash"


def replica_set(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller makes for the Deployment's current template
    (kubernetes ``pkg/controller/deployment/sync.go`` ``getNewReplicaSet``): named
    ``<deployment>-<pod-template-hash>``, the hash label added to its template's labels and to
    its selector (here a digest of the template, a stand-in for ``ComputeHash``'s FNV of it: a
    new template, a new ReplicaSet)."""
    template = json.loads(json.dumps(deployment["spec"]["template"]))
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    value = "".join(NAME_ALPHABET[int(digest[i:i + 2], 16) % len(NAME_ALPHABET)] for i in range(0, 20, 2))
    template["metadata"]["labels"][TEMPLATE_HASH] = value
    selector = {**deployment["spec"]["selector"]["matchLabels"], TEMPLATE_HASH: value}
    return {"metadata": {"name": f"{deployment['metadata']['name']}-{value}",
                        "namespace": deployment["metadata"]["namespace"]},
            "spec": {"selector": {"matchLabels": selector}, "template": template}}


def replica_set_pods(deployment: Mapping[str, Any], count: int, start: int = 0) -> list[dict[str, Any]]:
    """The pods the Deployment's ReplicaSet creates when it scales from ``start`` to ``count``
    pods (kubernetes ``pkg/controller/replicaset/replica_set.go`` ``manageReplicas``;
    ``pkg/controller/controller_utils.go`` ``GetPodFromTemplate``: the template's labels,
    annotations and finalizers, ``generateName: <replicaset>-``, the ReplicaSet as controller
    owner, a copy of the template's spec, scheduling gates included), each named by the API
    server at random from ``generateName`` (drawn here from a generator seeded by the
    ReplicaSet and the pod's place, so a test sees the same names on every run)."""
    made = replica_set(deployment)
    template = made["spec"]["template"]
    pods = []
    for index in range(start, count):
        draw = random.Random(f"{made['metadata']['name']}/{index}")
        name = made["metadata"]["name"] + "-" + "".join(draw.choice(NAME_ALPHABET) for _ in range(NAME_SUFFIX))
        meta = {"name": name, "generateName": made["metadata"]["name"] + "-",
                "namespace": made["metadata"]["namespace"], "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": made["metadata"]["name"],
                                     "controller": True, "blockOwnerDeletion": True}]}
        if template["metadata"].get("annotations"):
            meta["annotations"] = dict(template["metadata"]["annotations"])
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                     "spec": json.loads(json.dumps(template["spec"])), "status": {"phase": "Pending"}})
    return pods


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
    if c.gpus:
        count = c.gpus // c.gpus_per_node
    else:
        counts = [total // per_node for total, per_node in ((c.cpu_millis, c.cpu_per_node),
                                                            (c.memory_bytes, c.memory_per_node)) if per_node]
        count = max(1, min(counts, default=1))
    millis = c.cpu_per_node if c.cpu_per_node is not None else c.cpu_millis // count
    memory = c.memory_per_node if c.memory_per_node is not None else c.memory_bytes // count
    return [_Node(c.gpus_per_node if c.gpus else 0, millis, memory) for _ in range(count)]


def bind(model: FleetModel, files: Mapping[str, str]) -> tuple[dict[tuple[str, str, str, int], int], list[str]]:
    """Bind every pod to a node of its cluster, largest first; (pod -> node index, problems).

    A pod fits a node as the kube-scheduler's NodeResourcesFit filter decides it
    (kubernetes/kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``,
    ``computePodResourceRequest`` and ``fitsRequest``, the same comparison at commits 007f7ae7
    and 903b1f7e, years apart): the requests of its containers, summed (:meth:`Pod.requests`),
    plus those of the pods already bound to the node, are within the node's allocatable, for
    each of cpu, memory and ``nvidia.com/gpu`` alike; a pod no node fits stays Pending."""
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


# --------------------------------------------------------------------------- gangs
def _volcano_jobs(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for cluster, obj in objects(files):
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
            yield cluster, obj


def plugin_env(job: Mapping[str, Any], task: Mapping[str, Any], index: int) -> list[dict[str, str]]:
    """What Volcano's job plugins append to every container of a pod (volcano-sh/volcano
    pkg/controllers/job/plugins: env/env.go, distributed-framework/pytorch/pytorch.go)."""
    env: dict[str, str] = {}
    plugins = job["spec"].get("plugins", {})
    name = job["metadata"]["name"]
    if "env" in plugins:
        env |= {"VC_TASK_INDEX": str(index), "VK_TASK_INDEX": str(index)}
    if "pytorch" in plugins:
        args = dict(a.lstrip("-").split("=", 1) for a in plugins["pytorch"])
        master, worker = args.get("master", "master"), args.get("worker", "worker")
        total = sum(t["replicas"] for t in job["spec"]["tasks"] if t["name"] in (master, worker))
        env |= {"MASTER_ADDR": f"{name}-{master}-0.{name}", "MASTER_PORT": args.get("port", "23456"),
                "WORLD_SIZE": str(total)}
        if task["name"] == worker:
            env["RANK"] = str(index + 1)
        elif task["name"] == master:
            env["RANK"] = "0"
    return [{"name": key, "value": value} for key, value in env.items()]


#: The annotations Volcano's job controller puts on a pod it creates, on the first run
#: (``createJobPod``: the Job's retry count when it made the pod).
VOLCANO_ANNOTATIONS = {RETRY_COUNT: "0"}


def pod_env(job: Mapping[str, Any], task: Mapping[str, Any], index: int) -> dict[str, str]:
    """A Volcano Job pod's main container's environment after the job plugins ran, as the
    kubelet makes it (:func:`kubelet_view`)."""
    container = task["template"]["spec"]["containers"][0]
    return kubelet_view(container, plugin_env(job, task, index), VOLCANO_ANNOTATIONS)[0]


def _hostnames(job: Mapping[str, Any]) -> set[str]:
    """DNS names the ``svc`` plugin makes resolvable: ``<pod>.<job>`` for every pod."""
    if "svc" not in job["spec"].get("plugins", {}):
        return set()
    name = job["metadata"]["name"]
    return {f"{name}-{t['name']}-{i}.{name}" for t in job["spec"]["tasks"] for i in range(t["replicas"])}


def rendezvous_problems(files: Mapping[str, str]) -> list[str]:
    """Every gang of more than one pod can rendezvous like ``torchrun`` does: each pod knows the
    world size (= the gang's pods), has a distinct rank 0..n-1, and the master address
    resolves to the rank-0 pod."""
    problems = []
    for cluster, job in _volcano_jobs(files):
        tasks = job["spec"]["tasks"]
        size = sum(t["replicas"] for t in tasks)
        if size < 2:
            continue
        where = f"{cluster}: Job/{job['metadata']['name']}"
        hosts = _hostnames(job)
        ranks: dict[int, str] = {}
        for task in tasks:
            for index in range(task["replicas"]):
                env = pod_env(job, task, index)
                host = f"{job['metadata']['name']}-{task['name']}-{index}.{job['metadata']['name']}"
                if env.get("WORLD_SIZE") != str(size):
                    problems.append(f"{where}: {host} has WORLD_SIZE {env.get('WORLD_SIZE')}, the gang {size}")
                if "RANK" not in env or int(env["RANK"]) in ranks:
                    problems.append(f"{where}: {host} has no rank of its own ({env.get('RANK')})")
                else:
                    ranks[int(env["RANK"])] = host
                if env.get("MASTER_ADDR") not in hosts:
                    problems.append(f"{where}: {host} cannot resolve MASTER_ADDR {env.get('MASTER_ADDR')}")
        if sorted(ranks) != list(range(size)):
            problems.append(f"{where}: ranks {sorted(ranks)} are not 0..{size - 1}")
        elif any(pod_env(job, t, 0).get("MASTER_ADDR") != ranks[0] for t in tasks):
            problems.append(f"{where}: MASTER_ADDR is not the rank-0 pod {ranks[0]}")
    return problems + _batch_rendezvous_problems(files)


def _batch_jobs(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for cluster, obj in objects(files):
        if is_batch_job(obj):
            yield cluster, obj


def container_env(job: Mapping[str, Any], container: Mapping[str, Any], index: int) -> dict[str, str]:
    """A container's environment in pod ``index`` of a batch Job, as the kubelet makes it
    (:func:`kubelet_view`): ``fieldRef``s to the pod's completion-index annotation resolved,
    and, in an Indexed Job, ``JOB_COMPLETION_INDEX`` (the Job controller's, kubernetes
    ``pkg/controller/job/indexed_job_utils.go``)."""
    indexed = job["spec"].get("completionMode") == "Indexed"
    annotations = {COMPLETION_INDEX: str(index)} if indexed else {}
    env = kubelet_view(container, [], annotations)[0]
    if indexed:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return env


def _resolvable(files: Mapping[str, str], cluster: str, job: Mapping[str, Any]) -> set[str]:
    """``<job>-<index>.<subdomain>`` of every pod of an Indexed Job a headless Service named
    ``subdomain`` selects (the pods' labels: the template's and ``batch.kubernetes.io/job-name``)."""
    spec = job["spec"]
    subdomain = spec["template"]["spec"].get("subdomain")
    if spec.get("completionMode") != "Indexed" or not subdomain:
        return set()
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    labels = {**spec["template"]["metadata"].get("labels", {}), JOB_NAME: name}
    for where, obj in objects(files):
        if (where == cluster and obj["kind"] == "Service" and obj["metadata"]["name"] == subdomain
                and obj["metadata"]["namespace"] == namespace and obj["spec"].get("clusterIP") == "None"
                and obj["spec"]["selector"].items() <= labels.items()):
            return {f"{name}-{i}.{subdomain}" for i in range(spec.get("parallelism", 1))
                    if len(f"{name}-{i}") <= 63}
    return set()


def _batch_rendezvous_problems(files: Mapping[str, str]) -> list[str]:
    """:func:`rendezvous_problems` for Indexed batch Jobs (the Kueue path)."""
    problems = []
    for cluster, job in _batch_jobs(files):
        size = job["spec"].get("parallelism", 1)
        if size < 2:
            continue
        name = job["metadata"]["name"]
        where = f"{cluster}: Job/{name}"
        hosts = _resolvable(files, cluster, job)
        ranks: dict[int, str] = {}
        addresses = set()
        for index in range(size):
            host = f"{name}-{index}"
            env = container_env(job, job["spec"]["template"]["spec"]["containers"][0], index)
            if env.get("WORLD_SIZE") != str(size):
                problems.append(f"{where}: {host} has WORLD_SIZE {env.get('WORLD_SIZE')}, the gang {size}")
            # an annotation the pod lacks is "" through the downward API
            if not env.get("RANK", "").isdigit() or int(env["RANK"]) in ranks:
                problems.append(f"{where}: {host} has no rank of its own ({env.get('RANK')!r})")
            else:
                ranks[int(env["RANK"])] = f"{host}.{job['spec']['template']['spec'].get('subdomain')}"
            if env.get("MASTER_ADDR") not in hosts:
                problems.append(f"{where}: {host} cannot resolve MASTER_ADDR {env.get('MASTER_ADDR')}")
            addresses.add(env.get("MASTER_ADDR"))
        if sorted(ranks) != list(range(size)):
            problems.append(f"{where}: ranks {sorted(ranks)} are not 0..{size - 1}")
        elif addresses != {ranks[0]}:
            problems.append(f"{where}: MASTER_ADDR is not the rank-0 pod {ranks[0]}")
    return problems


# --------------------------------------------------------------------------- Kueue
def _pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What Kueue counts for one pod: per resource, the larger of the containers' sum and any
    init container's request (kueue ``pkg/util/resource``, as the scheduler does)."""
    def amounts(container: Mapping[str, Any]) -> dict[str, int]:
        requests = container.get("resources", {}).get("requests", {})
        return {"cpu": cpu_millis(requests.get("cpu", 0)), "memory": memory_bytes(requests.get("memory", 0)),
                GPU: int(requests.get(GPU, 0))}
    total = {"cpu": 0, "memory": 0, GPU: 0}
    for container in spec["containers"]:
        for name, value in amounts(container).items():
            total[name] += value
    for container in spec.get("initContainers", []):
        for name, value in amounts(container).items():
            total[name] = max(total[name], value)
    return {name: value for name, value in total.items() if value}


def _quota(resource: str, value: Any) -> int:
    if resource == "cpu":
        return cpu_millis(value)
    return memory_bytes(value) if resource == "memory" else int(value)


def kueue_problems(files: Mapping[str, str]) -> list[str]:
    """Every batch Job that names a Kueue queue is admitted, all at once on its cluster: its
    LocalQueue (rendered, or created by a release Job, :func:`releases`) and ClusterQueue exist
    and take its namespace, and every resource its pods ask for
    gets a flavor (the first, in the ClusterQueue's order, whose node labels agree with the
    pods' node selector and whose quota is not used up by the Jobs admitted before it)."""
    problems = []
    by_cluster: dict[str, list[dict[str, Any]]] = {}
    for cluster, obj in objects(files):
        by_cluster.setdefault(cluster, []).append(obj)
    created = releases(files)
    for cluster, found in sorted(by_cluster.items()):
        named = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in found}
        # the LocalQueues the release Jobs create once their upstream completed
        named |= {("LocalQueue", r.created_in, r.queue): r.local_queue() for r in created if r.cluster == cluster}
        used: dict[tuple[str, str, str], int] = {}
        for job in (o for o in found if is_batch_job(o) and QUEUE_LABEL in o["metadata"].get("labels", {})):
            where = f"{cluster}: Job/{job['metadata']['name']}"
            problem = _admit(named, job, used)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


def _admit(named: Mapping[tuple[str, str, str], Any], job: Mapping[str, Any],
           used: dict[tuple[str, str, str], int]) -> str | None:
    namespace = job["metadata"]["namespace"]
    local = named.get(("LocalQueue", namespace, job["metadata"]["labels"][QUEUE_LABEL]))
    if local is None:
        return f"no LocalQueue {job['metadata']['labels'][QUEUE_LABEL]} in {namespace}"
    queue = named.get(("ClusterQueue", "", local["spec"]["clusterQueue"]))
    if queue is None:
        return f"no ClusterQueue {local['spec']['clusterQueue']}"
    labels = named.get(("Namespace", "", namespace), {"metadata": {}})["metadata"].get("labels", {})
    if not queue["spec"].get("namespaceSelector", {}).get("matchLabels", {None: None}).items() <= labels.items():
        return f"ClusterQueue {queue['metadata']['name']} does not take namespace {namespace}"
    template = job["spec"]["template"]["spec"]
    selector = template.get("nodeSelector", {})
    pods = job["spec"].get("parallelism", 1)
    for resource, amount in sorted(_pod_requests(template).items()):
        group = next((g for g in queue["spec"]["resourceGroups"] if resource in g["coveredResources"]), None)
        if group is None:
            return f"ClusterQueue {queue['metadata']['name']} covers no {resource}"
        short = []
        for flavor in group["flavors"]:
            definition = named.get(("ResourceFlavor", "", flavor["name"]))
            node_labels = definition["spec"].get("nodeLabels", {}) if definition else None
            if node_labels is None or any(selector.get(k, v) != v for k, v in node_labels.items()):
                continue
            quota = next(_quota(resource, r["nominalQuota"]) for r in flavor["resources"] if r["name"] == resource)
            # Quota is each ClusterQueue's own (none is in a cohort, so none borrows).
            key = (queue["metadata"]["name"], flavor["name"], resource)
            taken = used.get(key, 0)
            if taken + amount * pods <= quota:
                used[key] = taken + amount * pods
                break
            short.append(f"{flavor['name']} has {quota - taken} of {quota} left")
        else:
            if not short:
                return f"no flavor of ClusterQueue {queue['metadata']['name']} matches its node selector {selector}"
            return f"needs {amount * pods} {resource}: {'; '.join(short)}"
    return None


def volcano_queue_problems(files: Mapping[str, str]) -> list[str]:
    """Every Volcano Job's Queue exists on its cluster, and a Queue whose ``capability`` names
    ``nvidia.com/gpu`` holds the GPUs all its Jobs' pods request at once, its ``guarantee``
    within it: Volcano's capacity and proportion plugins cap a queue's allocation at its
    capability, a resource it does not name being unlimited (volcano-sh/volcano
    ``pkg/scheduler/plugins/capacity/capacity.go`` ``newQueueAttr``), so a Job beyond it
    waits."""
    problems = []
    queues: dict[tuple[str, str], dict[str, Any]] = {}
    asked: dict[tuple[str, str], int] = {}
    everything = list(objects(files))
    for cluster, obj in everything:
        if obj["kind"] == "Queue":
            queues[(cluster, obj["metadata"]["name"])] = obj
    for cluster, job in _volcano_jobs(files):
        key = (cluster, job["spec"]["queue"])
        if key not in queues:
            problems.append(f"{cluster}: Job/{job['metadata']['name']}: no Queue {key[1]}")
            continue
        asked[key] = asked.get(key, 0) + sum(
            task["replicas"] * _pod_requests(task["template"]["spec"]).get(GPU, 0) for task in job["spec"]["tasks"])
    for (cluster, name), queue in sorted(queues.items()):
        capability = int(queue["spec"].get("capability", {}).get(GPU, -1))
        guarantee = int(queue["spec"].get("guarantee", {}).get("resource", {}).get(GPU, 0))
        if 0 <= capability < asked.get((cluster, name), 0):
            problems.append(f"{cluster}: Queue/{name}: its Jobs ask for {asked[(cluster, name)]} {GPU}, "
                            f"capability {capability}")
        if 0 <= capability < guarantee:
            problems.append(f"{cluster}: Queue/{name}: guarantee {guarantee} {GPU} above capability {capability}")
    return problems


# --------------------------------------------------------------------------- serving
def probe_problems(files: Mapping[str, str]) -> list[str]:
    """Every serving pod has a readiness probe on a port its container declares, and its
    Service sends traffic to a declared port."""
    problems = []
    everything = list(objects(files))
    for cluster, obj in everything:
        if obj["kind"] != "Deployment" or is_release(obj):
            continue
        where = f"{cluster}: Deployment/{obj['metadata']['name']}"
        container = obj["spec"]["template"]["spec"]["containers"][0]
        declared = {p["name"] for p in container.get("ports", [])} | {
            p["containerPort"] for p in container.get("ports", [])}
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = container.get(kind)
            if probe is None:
                if kind == "readinessProbe":
                    problems.append(f"{where}: no readiness probe")
                continue
            port = next(iter(probe.values()))["port"] if probe else None
            if port not in declared:
                problems.append(f"{where}: {kind} on port {port!r}, not declared ({sorted(map(str, declared))})")
        services = [o for c, o in everything if c == cluster and o["kind"] == "Service"
                    and o["spec"]["selector"].items() <= obj["spec"]["template"]["metadata"]["labels"].items()]
        if not services:
            problems.append(f"{where}: no Service selects its pods")
        for service in services:
            for port in service["spec"]["ports"]:
                if port["targetPort"] not in declared:
                    problems.append(f"{where}: Service targetPort {port['targetPort']!r} is not declared")
    return problems


# --------------------------------------------------------------------------- data
_DATA_VARIABLE = re.compile(r"^FLEETC_(INPUT|OUTPUT)_([A-Z0-9_]+)$")


def _templates(files: Mapping[str, str]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(cluster, owner, pod spec) of every pod template."""
    for cluster, obj in objects(files):
        owner = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
            for task in obj["spec"]["tasks"]:
                yield cluster, f"{owner} task {task['name']}", task["template"]["spec"]
        elif obj["kind"] == "Deployment" or is_batch_job(obj):
            yield cluster, owner, obj["spec"]["template"]["spec"]


def mount_problems(files: Mapping[str, str]) -> list[str]:
    """What the main container is told about its data is where the data is: every
    ``FLEETC_INPUT_<NAME>_PATH`` / ``FLEETC_OUTPUT_<NAME>_PATH`` is a volume mounted at that
    path (inputs read-only, outputs writable), an ``nfs://`` URL is mounted from that server and
    export, and no ``nfs://`` input or output is a URL only (a container cannot open one)."""
    problems = []
    for cluster, owner, spec in _templates(files):
        container = spec["containers"][0]
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        where = f"{cluster}: {owner}"
        for name, url in sorted(env.items()):
            match = _DATA_VARIABLE.match(name)
            if match is None or name.endswith("_PATH") and f"{name[:-5]}" in env:
                continue
            kind = match.group(1)
            path = env.get(f"{name}_PATH")
            if path is None:
                if url.startswith("nfs://"):
                    problems.append(f"{where}: {name} is {url}, mounted nowhere the container is told")
                continue
            mount = mounts.get(path)
            if mount is None:
                problems.append(f"{where}: {name}_PATH is {path}, where nothing is mounted")
                continue
            if bool(mount.get("readOnly")) != (kind == "INPUT"):
                problems.append(f"{where}: {path} is mounted {'read-only' if mount.get('readOnly') else 'writable'}")
            if url.startswith("nfs://"):
                nfs = volumes[mount["name"]].get("nfs", {})
                server, _, export = url[len("nfs://"):].partition("/")
                if (nfs.get("server"), nfs.get("path", "").rstrip("/")) != (server, "/" + export.strip("/")):
                    problems.append(f"{where}: {path} mounts {nfs.get('server')}:{nfs.get('path')}, not {url}")
                if bool(nfs.get("readOnly")) != (kind == "INPUT"):
                    problems.append(f"{where}: the nfs volume of {path} has readOnly {nfs.get('readOnly')}")
    return sorted(set(problems))


# --------------------------------------------------------------------------- credentials
_CREDENTIAL_VARIABLE = re.compile(r"ACCESS_KEY|SECRET|PASSWORD|TOKEN")


def _named_secrets(model: FleetModel) -> dict[tuple[str, str], str]:
    """(namespace, url) -> the Secret the policies name for it (on an output or an input)."""
    urls = {(s.key, o.name): o.url for s in model.stages for o in s.outputs}
    named = {}
    for stage in model.stages:
        for output in stage.outputs:
            if output.secret_name:
                named[(stage.namespace, output.url)] = output.secret_name
        for item in stage.inputs:
            url = item.url if item.from_stage is None else urls[(f"{stage.pipeline}/{item.from_stage}",
                                                                  str(item.from_output))]
            if item.secret_name and url:
                named.setdefault((stage.namespace, url), item.secret_name)
    return named


def credential_problems(model: FleetModel, files: Mapping[str, str]) -> list[str]:
    """Storage is reached with the Secret the policies name for it, by reference only: no
    container has a credential-like variable with a literal value; a completion marker written
    to, or waited for at, a URL with a Secret, and a Triton model repository it reads from
    ``s3://`` itself, take their keys from that Secret (also in the pod
    of a Fluid DataProcess, whose waits are told apart by the run they wait for); a stage's
    container finds each output's Secret mounted where ``FLEETC_OUTPUT_<NAME>_CREDENTIALS``
    says."""
    named = _named_secrets(model)
    stages = {s.key: s for s in model.stages}
    runs = {content: key for key, found in markers_written(files).items() for _, content in found}
    problems = []
    for cluster, obj in objects(files):
        namespace = obj["metadata"].get("namespace", "")
        where = f"{cluster}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "DataProcess":
            spec = obj["spec"]["processor"].get("job", {}).get("podSpec", {})
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                waited = {runs.get(content) for _, content in reads(container, {})}
                url = stages[waited.pop()].outputs[0].url if len(waited) == 1 and None not in waited else None
                problems += _reached(where, container, url, named.get((namespace, url)) if url else None)
            continue
        if is_release(obj):
            problems += _release_credential_problems(stages, named, where, obj)
            continue
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
            templates = [t["template"] for t in obj["spec"]["tasks"]]
        elif obj["kind"] == "Deployment" or is_batch_job(obj):
            templates = [obj["spec"]["template"]]
        else:
            continue
        for template in templates:
            spec, stage = template["spec"], stages[_stage(template)]
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for container in spec.get("initContainers", []) + spec["containers"]:
                url = _reaches(stages, stage, container, main=container is spec["containers"][0])
                problems += _reached(where, container, url, named.get((namespace, url)) if url else None)
            told = {e["name"]: e["value"] for e in spec["containers"][0].get("env", []) if "value" in e}
            mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0].get("volumeMounts", [])}
            for output in stage.outputs:
                secret = named.get((namespace, output.url))
                if secret is None or output.url.startswith("nfs://"):
                    continue
                folder = told.get("FLEETC_OUTPUT_" + re.sub(r"[^A-Z0-9_]", "_", output.name.upper()) + "_CREDENTIALS")
                volume = volumes.get(mounts.get(folder or "", ""), {})
                if volume.get("secret", {}).get("secretName") != secret:
                    problems.append(f"{where}: output {output.name} is written without Secret {secret}")
    return sorted(set(problems))


def _release_credential_problems(stages: Mapping[str, Stage], named: Mapping[tuple[str, str], str], where: str,
                                 job: Mapping[str, Any]) -> list[str]:
    """A release's waits reach their markers with the Secrets named for them (its stage: the one
    its ``fleetc-release`` container names)."""
    spec = job["spec"]["template"]["spec"]
    stage = stages[kubelet_view(spec["containers"][0])[0]["FLEETC_STAGE"]]
    namespace = job["metadata"]["namespace"]
    problems = []
    for container in spec.get("initContainers", []) + spec["containers"]:
        url = _reaches(stages, stage, container, main=False)
        problems += _reached(where, container, url, named.get((namespace, url)) if url else None)
    return problems


def _reaches(stages: Mapping[str, Stage], stage: Stage, container: Mapping[str, Any], main: bool) -> str | None:
    """The storage URL a container of ``stage``'s pods reaches with credentials: the marker's
    (written or waited for) or, in the main container, Triton's ``s3://`` model repository."""
    if container["name"] == "fleetc-mark":
        return stage.outputs[0].url
    if container["name"].startswith("fleetc-wait-"):
        return stages[f"{stage.pipeline}/{container['name'][len('fleetc-wait-'):]}"].outputs[0].url
    return _s3_model_repository(container) if main else None


def _s3_model_repository(container: Mapping[str, Any]) -> str | None:
    """The ``s3://`` model repository a ``tritonserver`` container reads itself, if it does."""
    env, argv = kubelet_view(container)
    if argv[:1] != ["tritonserver"]:
        return None
    for word in argv:
        if word.startswith("--model-repository="):
            repository = word.partition("=")[2]
            return repository if repository.startswith("s3://") else None
    return None


def _reached(where: str, container: Mapping[str, Any], url: str | None, secret: str | None) -> list[str]:
    """A container's credential problems: literal credential-like values, a whole Secret taken,
    or ``url`` (which has ``secret``) reached without that Secret's keys."""
    env = container.get("env", [])
    problems = [f"{where} {container['name']}: {e['name']} has a literal value"
                for e in env if _CREDENTIAL_VARIABLE.search(e["name"]) and "value" in e
                and not e["name"].startswith("FLEETC_")]  # fleetc's own name URLs and paths
    if "envFrom" in container:
        problems.append(f"{where} {container['name']}: takes a whole Secret or ConfigMap (envFrom)")
    from_secrets = [e for e in env if "secretKeyRef" in e.get("valueFrom", {})]
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in from_secrets}
    if secret is not None and (refs != {secret} or not any("ACCESS_KEY_ID" in e["name"] for e in from_secrets)):
        problems.append(f"{where} {container['name']}: reaches {url} without Secret {secret}")
    return problems


# --------------------------------------------------------------------------- prefetch
def _waited(spec: Mapping[str, Any]) -> dict[str, set[tuple[str, str]]]:
    """Init container name -> (location, content) of the markers it polls until they hold
    that content: the pod's main containers start only once every init container exited 0."""
    waited: dict[str, set[tuple[str, str]]] = {}
    for init in spec.get("initContainers", []):
        for path, content in reads(init, {}):
            waited.setdefault(init["name"], set()).add((_where(path, spec, init), content))
    return waited


def prefetch_problems(model: FleetModel, files: Mapping[str, str]) -> list[str]:
    """No Fluid DataLoad caches what a stage writes before that stage completed.

    Fluid's semantics (v1.0.8): a DataLoad runs once, as soon as its Dataset is bound, unless
    it has ``runAfter``: then it stays Pending until the operation named there (same namespace
    by default) reaches phase Complete, and for good if that one is missing or Failed
    (``pkg/ddc/base/operation.go`` ``reconcilePending``, ``pkg/controllers/v1alpha1/dataflow/
    operations.go``). A DataProcess with a Job processor is Complete once its Job succeeded
    (``pkg/controllers/v1alpha1/dataprocess/status_handler.go``), so once its pod's init
    containers all saw their markers; Fluid fails one whose Dataset is in another namespace
    (``dataprocess/implement.go`` ``Validate``), and likewise a DataLoad. So a DataLoad of a URL
    stages write may run only after a DataProcess that waits for every writer's markers, as
    the writers' pods write them (:func:`markers_written`)."""
    writers: dict[str, set[str]] = {}
    for stage in model.stages:
        for output in stage.outputs:
            writers.setdefault(output.url, set()).add(stage.key)
    written = markers_written(files)
    everything = list(objects(files))
    named = {(c, o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o
             for c, o in everything if o["apiVersion"].startswith("data.fluid.io/")}
    problems = []
    for (cluster, kind, namespace, name), obj in sorted(named.items()):
        if kind not in ("DataLoad", "DataProcess"):
            continue
        where = f"{cluster}: {kind}/{name}"
        target = obj["spec"]["dataset"]
        if target.get("namespace") != namespace:
            problems.append(f"{where}: Fluid fails it: its Dataset's namespace is {target.get('namespace')!r}")
        dataset = named.get((cluster, "Dataset", namespace, target["name"]))
        if dataset is None:
            problems.append(f"{where}: its Dataset {target['name']} is not there")
            continue
        url = dataset["spec"]["mounts"][0]["mountPoint"]
        if kind == "DataProcess" or url not in writers:
            continue
        after = obj["spec"].get("runAfter")
        if after is None:
            problems.extend(f"{where}: caches {url} when it is created, before {key}, which writes it, completed"
                            for key in sorted(writers[url]))
            continue
        gate = named.get((cluster, after["kind"], after.get("namespace", namespace), after["name"]))
        if gate is None or after["kind"] != "DataProcess":
            problems.append(f"{where}: runs after {after['kind']}/{after['name']}, which is not there, so never")
            continue
        waited = list(_waited(gate["spec"]["processor"].get("job", {}).get("podSpec", {})).values())
        for key in sorted(writers[url]):
            if not written.get(key):
                problems.append(f"{where}: {key} writes {url} and no completion marker")
            elif written[key] not in waited:
                problems.append(f"{where}: runs after DataProcess/{after['name']}, which completes without "
                                f"waiting for {key}, which writes {url}")
    return problems


# --------------------------------------------------------------------------- the kubelet
def _resolver(annotations: Mapping[str, str]) -> Any:
    """How the kubelet resolves a ``valueFrom``: a Secret's key at run time (here a placeholder
    naming it, never a value), a pod annotation (``""`` when the pod has none, as the
    downward API gives it); None for what the model does not know."""
    def resolve(entry: Mapping[str, Any]) -> str | None:
        source = entry["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            return f"{{secret:{ref['name']}:{ref['key']}}}"
        found = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", source.get("fieldRef", {}).get("fieldPath", ""))
        return annotations.get(found.group(1), "") if found else None
    return resolve


def kubelet_view(container: Mapping[str, Any], appended: list[dict[str, str]] | None = None,
                 annotations: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """(environment, argv) of a container as the kubelet starts it
    (:mod:`support.expansion`): its ``env`` with what a controller ``appended`` to it, in
    order, then ``command`` + ``args`` expanded with the result."""
    env = environment([*container.get("env", []), *(appended or [])], _resolver(annotations or {}))
    return env, command_line(container, env)


# --------------------------------------------------------------------------- commands
def _unset(container: Mapping[str, Any], known: Mapping[str, str]) -> list[str]:
    """The variables a container's command or args refer to, as the kubelet reads the
    references, that are not in ``known``."""
    return [name for word in container.get("command", []) + container.get("args", [])
            for name in references(word) if name not in known]


def command_problems(files: Mapping[str, str]) -> list[str]:
    """Every ``$(VAR)`` in a container's command or args names a variable the container has
    once its controller created the pod (the kubelet leaves unknown references as they are)."""
    problems = []
    for cluster, obj in objects(files):
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
            cases = [(t["template"]["spec"], plugin_env(obj, t, i)) for t in obj["spec"]["tasks"]
                     for i in range(t["replicas"])]
        elif obj["kind"] == "Deployment":
            cases = [(obj["spec"]["template"]["spec"], [])]
        elif is_batch_job(obj):
            problems += _batch_command_problems(cluster, obj)
            continue
        else:
            continue
        for spec, plugins in cases:
            for container in spec.get("initContainers", []) + spec["containers"]:
                # Volcano's plugins append to the pod's containers, not its init containers
                appended = [] if container in spec.get("initContainers", []) else plugins
                known = kubelet_view(container, appended, VOLCANO_ANNOTATIONS)[0]
                problems += [f"{cluster}: {obj['kind']}/{obj['metadata']['name']} {container['name']}: "
                             f"$({name}) is not set" for name in _unset(container, known)]
    return sorted(set(problems))


def _batch_command_problems(cluster: str, job: Mapping[str, Any]) -> list[str]:
    problems = []
    spec = job["spec"]["template"]["spec"]
    for index in range(job["spec"].get("parallelism", 1)):
        for container in spec.get("initContainers", []) + spec["containers"]:
            known = container_env(job, container, index)
            problems += [f"{cluster}: Job/{job['metadata']['name']} {container['name']}: $({name}) is not set"
                         for name in _unset(container, known)]
    return problems


# --------------------------------------------------------------------------- order
#: The scripts fleetc rendered before its scripts took policy values as arguments (render
#: version 1), read after the kubelet's expansion, so that the suite can show what
#: they did: a marker path inside ``$(...)`` is never expanded (its ``$(VAR)`` ends the
#: reference at the first ``)``).
_OLD_WRITE = re.compile(r"echo (\w+) \| rclone rcat (\S+)")
_OLD_READ = re.compile(r"rclone cat (\S+) 2>/dev/null\)\\?\" = (\w+)")
_OLD_WRAPPED = '"$@"; code=$?; echo "$code" > /fleetc/status/exit-code; exit "$code"'


def writes(container: Mapping[str, Any], appended: list[dict[str, str]],
           annotations: Mapping[str, str]) -> set[tuple[str, str]]:
    """(path, content) of the completion markers a ``fleetc-mark`` container writes, as the
    kubelet starts it: :data:`fleetc.render.order.MARK_SCRIPT` writes the run id to the
    folder in ``FLEETC_MARKER_DIR`` under the name it is given as ``$1``."""
    env, argv = kubelet_view(container, appended, annotations)
    if argv[:3] == ["sh", "-c", MARK_SCRIPT] and len(argv) == 5:
        return {(f"{env['FLEETC_MARKER_DIR']}/{argv[4]}", env["FLEETC_RUN"])}
    if argv[:2] == ["sh", "-c"] and len(argv) == 3:
        return {(shlex.split(path)[0], content) for content, path in _OLD_WRITE.findall(argv[2])}
    return set()


def reads(container: Mapping[str, Any], annotations: Mapping[str, str]) -> set[tuple[str, str]]:
    """(path, content) of the markers a ``fleetc-wait-*`` container polls until each holds that
    content, as the kubelet starts it: :data:`fleetc.render.order.WAIT_SCRIPT` reads every
    name it is given under ``FLEETC_MARKER_DIR`` and waits for ``FLEETC_RUN``."""
    env, argv = kubelet_view(container, [], annotations)
    if argv[:3] == ["sh", "-c", WAIT_SCRIPT]:
        return {(f"{env['FLEETC_MARKER_DIR']}/{name}", env["FLEETC_RUN"]) for name in argv[4:]}
    if argv[:2] == ["sh", "-c"] and len(argv) == 3:
        return {(shlex.split(path)[0], content) for path, content in _OLD_READ.findall(argv[2])}
    return set()


def _records_exit_code(main: Mapping[str, Any]) -> bool:
    """Whether the main container records its exit code for ``fleetc-mark``."""
    command = main.get("command", [])
    return command[:3] in (["sh", "-c", RUN_SCRIPT], ["sh", "-c", _OLD_WRAPPED])


def _where(path: str, spec: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """A marker's storage location: a mounted NFS path as nfs://server/path/..., a remote as is."""
    for mount in container.get("volumeMounts", []):
        if path.startswith(mount["mountPath"] + "/"):
            volume = next(v for v in spec.get("volumes", []) if v["name"] == mount["name"])
            nfs = volume["nfs"]
            return f"nfs://{nfs['server']}{nfs['path'].rstrip('/')}/{path[len(mount['mountPath']) + 1:]}"
    return path


def markers_written(files: Mapping[str, str]) -> dict[str, set[tuple[str, str]]]:
    """Stage key -> (location, content) of the completion markers its pods write once their
    main container exited 0 (and only then: the main command must record its exit code)."""
    written: dict[str, set[tuple[str, str]]] = {}
    pods_of: list[tuple[Mapping[str, Any], list[dict[str, str]], dict[str, str]]] = []
    for _, job in _volcano_jobs(files):
        for task in job["spec"]["tasks"]:
            pods_of += [(task["template"], plugin_env(job, task, index), VOLCANO_ANNOTATIONS)
                        for index in range(task["replicas"])]
    for _, job in _batch_jobs(files):
        indexed = job["spec"].get("completionMode") == "Indexed"
        pods_of += [(job["spec"]["template"], [], {COMPLETION_INDEX: str(index)} if indexed else {})
                    for index in range(job["spec"].get("parallelism", 1))]
    for template, appended, known in pods_of:
        spec = template["spec"]
        main, *others = spec["containers"]
        if not _records_exit_code(main):
            continue
        for container in others:
            if container["name"] == "fleetc-mark":
                written.setdefault(_stage(template), set()).update(
                    (_where(path, spec, container), content) for path, content in writes(container, appended, known))
    return written


def _released_waits(files: Mapping[str, str]) -> dict[tuple[str, str], dict[str, set[tuple[str, str]]]]:
    """(cluster, ``Job/<name>``) of every Job held on a LocalQueue a release Job creates -> the
    markers that release waited for: Kueue creates no pod of the Job before its queue exists
    (:mod:`fleetc.render.release`), so its pods start after those waits passed."""
    made = {(r.cluster, r.created_in, r.queue): r.waited for r in releases(files)}
    found = {}
    for cluster, obj in objects(files):
        queue = obj["metadata"].get("labels", {}).get(QUEUE_LABEL)
        if is_batch_job(obj) and (cluster, obj["metadata"]["namespace"], queue) in made:
            found[(cluster, f"Job/{obj['metadata']['name']}")] = made[(cluster, obj["metadata"]["namespace"], queue)]
    return found


def _ungated_waits(files: Mapping[str, str]) -> dict[tuple[str, str, str, int], dict[str, set[tuple[str, str]]]]:
    """:attr:`Pod.ident` of every gated pod a release Job lets go -> the markers that release
    waited for: no scheduler places the pod before its gates are gone (:func:`gates`), so its
    containers start after those waits passed."""
    found: dict[tuple[str, str, str, int], dict[str, set[tuple[str, str]]]] = {}
    made, freeing = ungates(files), releasers(files)
    for pod in pods(files):
        ungate = ungated_by(made, pod) or released_by(freeing, pod)
        if gates(pod.spec) and ungate is not None:
            found[pod.ident] = ungate.waited
    return found


def order_problems(model: FleetModel, files: Mapping[str, str], warned: set[tuple[str, str]]) -> list[str]:
    """Every pod of a stage waits, before it starts, for the completion marker of every
    run-to-completion stage it depends on, as that stage's pods write it: in its own init
    containers, or, for a held Kueue Job, in those of the release Job without which Kueue
    creates none of its pods, or, for a gated pod, in those of the release Job that removes
    its gates; ``warned`` are the (stage, upstream) pairs the compile said it
    cannot order."""
    written = markers_written(files)
    problems = []
    stages = {s.key: s for s in model.stages}
    released = _released_waits(files)
    ungated = _ungated_waits(files)
    for pod in pods(files):
        stage = stages[pod.stage]
        waited = _waited(pod.spec) | released.get((pod.cluster, pod.owner), {}) | ungated.get(pod.ident, {})
        for name in stage.dependencies:
            upstream = stages[f"{stage.pipeline}/{name}"]
            if not upstream.is_gang or (stage.name, name) in warned:
                continue
            marks = written.get(upstream.key, set())
            if not marks:
                problems.append(f"{pod.stage}: {name} writes no completion marker")
            elif waited.get(f"fleetc-wait-{name}") != marks:
                problems.append(f"{pod.cluster}: {pod.owner} pod {pod.index} does not wait for {name}'s markers")
    return sorted(set(problems))


# --------------------------------------------------------------------------- GPUs held while waiting
#: Kueue's default ``waitForPodsReady.timeout`` (kueue ``apis/config/v1beta1/defaults.go``,
#: ``defaultPodsReadyTimeout``).
PODS_READY_TIMEOUT = 300


def _waiting_pods(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any], Pod, set[str]]]:
    """(cluster, owner object, pod, upstream stage keys it waits for in init containers) of
    every pod that waits for a marker before it starts."""
    runs = {content: key for key, found in markers_written(files).items() for _, content in found}
    owners = {(cluster, f"{obj['kind']}/{obj['metadata']['name']}"): obj for cluster, obj in objects(files)}
    for pod in pods(files):
        upstreams = {runs[content] for init in pod.spec.get("initContainers", [])
                     for _, content in reads(init, {}) if content in runs}
        if upstreams:
            yield pod.cluster, owners[(pod.cluster, pod.owner)], pod, upstreams


def gpu_seconds_waiting(files: Mapping[str, str], runtime: Mapping[str, int]) -> dict[str, int]:
    """Stage key -> GPU-seconds its pods hold while they wait, when each upstream stage runs
    ``runtime[key]`` seconds: a pod whose wait is an init container is bound to a node (and on
    Kueue admitted with its quota) before the wait starts, and keeps its GPUs until its main
    container ends (the scheduler binds a pod with its effective requests, the larger of its
    containers' sum and any init container's, before any container runs; kubernetes
    ``pkg/api/v1/resource`` ``PodRequests``). A held Kueue Job has no pod while its release
    Job waits (Kueue keeps it suspended, its Workload inadmissible, until the release created
    its LocalQueue: :mod:`fleetc.render.release`); a gated pod is placed by no scheduler, so
    takes no GPU, until its release Job removes its gates, once its waits passed
    (:func:`gates`); and the release pods ask for no GPU: all count, as 0."""
    held: dict[str, int] = {}
    for _, _, pod, upstreams in _waiting_pods(files):
        if gates(pod.spec):  # placed only once its release removed them, after the same waits
            continue
        waited = max(runtime[key] for key in upstreams)
        held[pod.stage] = held.get(pod.stage, 0) + pod.requests()[0] * waited
    runs = {content: key for key, found in markers_written(files).items() for _, content in found}
    for job, spec, waits in [*((r.job, r.spec, r.waited) for r in releases(files)),
                             *((u.job, u.spec, u.waited) for u in ungates(files)),
                             *((r.deployment, r.spec, r.waited) for r in releasers(files))]:
        upstreams = {runs[content] for found in waits.values() for _, content in found if content in runs}
        gpus = sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
                   for c in [*spec.get("initContainers", []), *spec["containers"]])
        if upstreams and gpus:
            key = f"release/{job}"
            held[key] = held.get(key, 0) + gpus * max(runtime[k] for k in upstreams)
    return {key: value for key, value in held.items() if value}


def pods_ready_evictions(files: Mapping[str, str], runtime: Mapping[str, int],
                         timeout: int = PODS_READY_TIMEOUT) -> list[str]:
    """Kueue Jobs that ``waitForPodsReady`` evicts and requeues while their pods wait, when
    each upstream stage runs ``runtime[key]`` seconds.

    Kueue (kubernetes-sigs/kueue ``pkg/controller/core/workload_controller.go``, read at commit
    e571e301, the copy the source index holds; not checked against the v0.19.2 tag issue 25
    names), ``reconcileNotReadyTimeout`` and
    ``admittedNotReadyWorkload``, the ``WaitForStart`` case, evicts an admitted Workload whose
    ``PodsReady`` condition is not True once ``timeout`` has passed since it was admitted, and
    requeues it; the Job integration reports ``PodsReady`` when ready and succeeded pods reach
    ``parallelism`` (``pkg/controller/jobs/job/job_controller.go`` ``PodsReady``), and a pod
    whose init container still runs is not ready. Each readmission starts the pods, and their
    waits, again, so a Job waiting ``w`` seconds is evicted ``(w - 1) // timeout`` times (the
    requeue backoff only adds to it)."""
    evicted: dict[tuple[str, str], tuple[int, set[str]]] = {}
    for cluster, owner, _, upstreams in _waiting_pods(files):
        if not is_batch_job(owner) or QUEUE_LABEL not in owner["metadata"].get("labels", {}):
            continue
        waited = max(runtime[key] for key in upstreams)
        key = (cluster, owner["metadata"]["name"])
        evicted[key] = (max(waited, evicted.get(key, (0, set()))[0]), upstreams)
    return [f"{cluster}: Job/{name}: evicted by PodsReadyTimeout {(waited - 1) // timeout} times while it "
            f"waits {waited}s for {', '.join(sorted(upstreams))}"
            for (cluster, name), (waited, upstreams) in sorted(evicted.items()) if waited > timeout]


# --------------------------------------------------------------------------- held Jobs and their release
@dataclass(frozen=True)
class Release:
    """What a release Job does once its init containers (the waits) all passed: its
    ``fleetc-release`` container, as the kubelet starts it, POSTs a LocalQueue (the name and
    ClusterQueue in its environment) to the API server in the namespace it names."""

    cluster: str
    job: str
    namespace: str  # the Job's
    queue: str  # the LocalQueue it creates
    cluster_queue: str  # what that LocalQueue points at
    created_in: str  # the namespace of the URL it POSTs to
    waited: Mapping[str, set[tuple[str, str]]]  # its init containers' markers, by container
    spec: Mapping[str, Any]  # its pod spec
    labels: Mapping[str, str] | None = None  # its pods' labels, when it is no Job of the output

    def local_queue(self) -> dict[str, Any]:
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": self.queue, "namespace": self.created_in,
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": self.job}]},
                "spec": {"clusterQueue": self.cluster_queue}}


def release_of(cluster: str, job: Mapping[str, Any]) -> Release | None:
    """The release a Job's pods make, or None when it is no release Job."""
    started = _release_container(job, RELEASE_SCRIPT)
    if started is None:
        return None
    env, _, spec = started
    return Release(cluster, job["metadata"]["name"], job["metadata"]["namespace"], env["FLEETC_LOCAL_QUEUE"],
                   env["FLEETC_CLUSTER_QUEUE"], env["FLEETC_NAMESPACE"], _waited(spec), spec)


def _release_container(job: Mapping[str, Any], script: str
                       ) -> tuple[dict[str, str], list[str], Mapping[str, Any]] | None:
    """The environment and argv the kubelet starts a release Job's container running ``script``
    with, and the Job's pod spec; None when ``job`` is no release Job or runs no such container."""
    if not is_release(job):
        return None
    spec = job["spec"]["template"]["spec"]
    for container in spec["containers"]:
        env, argv = kubelet_view(container)
        if argv[:3] == ["sh", "-c", script]:
            return env, argv, spec
    return None


def releases(files: Mapping[str, str]) -> list[Release]:
    return [found for cluster, obj in objects(files) if (found := release_of(cluster, obj)) is not None]


def _may_create_local_queues(named: Mapping[tuple[str, str, str], Any], release: Release) -> bool:
    """Whether the release pod's service account may create LocalQueues where it POSTs them
    (kubernetes RBAC: a RoleBinding of its namespace binding the account to a Role of that
    namespace with a rule on ``kueue.x-k8s.io`` ``localqueues`` ``create``)."""
    account = release.spec.get("serviceAccountName", "default")
    for (kind, namespace, _), binding in named.items():
        if kind != "RoleBinding" or namespace != release.created_in:
            continue
        if not any(s == {"kind": "ServiceAccount", "name": account, "namespace": release.namespace}
                   for s in binding.get("subjects", [])):
            continue
        role = named.get((binding["roleRef"]["kind"], namespace, binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            if ("kueue.x-k8s.io" in rule.get("apiGroups", []) and "localqueues" in rule.get("resources", [])
                    and "create" in rule.get("verbs", [])):
                return True
    return False


def _reaches_api_server(named: Mapping[tuple[str, str, str], Any], release: Release) -> bool:
    """Whether the release pod reaches the API server on TCP 443 and 6443: no egress
    NetworkPolicy selects it, or those that do allow both ports to any destination
    (NetworkPolicies add up; kubernetes ``networking/v1`` semantics)."""
    labels = _release_labels(named, release)
    selecting = [p for (kind, namespace, _), p in named.items() if kind == "NetworkPolicy"
                 and namespace == release.namespace and "Egress" in p["spec"].get("policyTypes", [])
                 and p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()]
    if not selecting:
        return True
    open_ports = {port["port"] for p in selecting for rule in p["spec"].get("egress", []) if "to" not in rule
                  for port in rule.get("ports", []) if port.get("protocol", "TCP") == "TCP"}
    return {443, 6443} <= open_ports


def _release_labels(named: Mapping[tuple[str, str, str], Any], release: Release) -> dict[str, str]:
    if release.labels is not None:
        return dict(release.labels)
    job = named[("Job", release.namespace, release.job)]
    return dict(job["spec"]["template"]["metadata"].get("labels", {}))


def release_problems(files: Mapping[str, str]) -> list[str]:
    """Every release Job can create the LocalQueue it names (its account's Role, the API
    server reachable through the namespace's NetworkPolicies, its own namespace), and every
    Job naming a LocalQueue no manifest renders has one release Job that creates it, pointing
    at a ClusterQueue that exists."""
    problems = []
    by_cluster: dict[str, dict[tuple[str, str, str], Any]] = {}
    for cluster, obj in objects(files):
        by_cluster.setdefault(cluster, {})[(obj["kind"], obj["metadata"].get("namespace", ""),
                                            obj["metadata"]["name"])] = obj
    made: dict[tuple[str, str, str], list[Release]] = {}
    for release in releases(files):
        named = by_cluster[release.cluster]
        where = f"{release.cluster}: Job/{release.job}"
        made.setdefault((release.cluster, release.created_in, release.queue), []).append(release)
        if release.created_in != release.namespace:
            problems.append(f"{where}: creates its LocalQueue in {release.created_in}, not its namespace")
        if not _may_create_local_queues(named, release):
            problems.append(f"{where}: its service account may not create LocalQueues in {release.created_in}")
        if not _reaches_api_server(named, release):
            problems.append(f"{where}: its NetworkPolicies block the API server")
        if ("ClusterQueue", "", release.cluster_queue) not in named:
            problems.append(f"{where}: its LocalQueue points at ClusterQueue {release.cluster_queue}, not there")
    for cluster, named in sorted(by_cluster.items()):
        for (kind, namespace, name), job in sorted(named.items()):
            queue = job["metadata"].get("labels", {}).get(QUEUE_LABEL) if kind == "Job" else None
            if queue is None or ("LocalQueue", namespace, queue) in named:
                continue
            count = len(made.get((cluster, namespace, queue), []))
            if count != 1:
                problems.append(f"{cluster}: Job/{name}: {count} release Jobs create its LocalQueue {queue}")
    return problems


# --------------------------------------------------------------------------- gated Volcano Jobs and their release
def gates(spec: Mapping[str, Any]) -> list[str]:
    """The scheduling gates of a pod (of its spec). A pod with any is placed by no scheduler:
    kube-scheduler's ``SchedulingGates`` PreEnqueue plugin keeps it out of the scheduling queue
    (kubernetes ``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go``:
    ``UnschedulableAndUnresolvable``, "waiting for scheduling gates") and Volcano's scheduler
    skips it (volcano v1.15.1 ``pkg/scheduler/api/job_info.go`` ``calSchedulingGated``,
    ``pkg/scheduler/actions/allocate/allocate.go``; its gated requests are deducted from what
    its PodGroup holds of the queue, ``DeductSchGatedResources``)."""
    return [gate["name"] for gate in spec.get("schedulingGates", [])]


def volcano_pod_name(job: str, task: str, index: int) -> str:
    """The name Volcano's job controller gives a pod, on first creation and on every restart
    (volcano v1.15.1 ``pkg/controllers/job/helpers/helpers.go`` ``MakePodName``)."""
    return f"{job}-{task}-{index}"


@dataclass(frozen=True)
class Ungate:
    """What the release Job of a gated Volcano Job does once its init containers (the waits)
    all passed: its ``fleetc-release`` container, as the kubelet starts it, removes ``gate``
    from each pod it names (its arguments) in the namespace it names, again whenever one is
    created gated, until the Volcano Job ``target`` ended (tests/test_scripts.py runs it against
    a stand-in API server through a restart)."""

    cluster: str
    job: str
    namespace: str  # the release Job's
    target: str  # the Volcano Job it reads the phase of
    target_namespace: str  # the namespace of the URLs it calls
    gate: str
    pods: tuple[str, ...]
    waited: Mapping[str, set[tuple[str, str]]]
    spec: Mapping[str, Any]


def ungate_of(cluster: str, job: Mapping[str, Any]) -> Ungate | None:
    """The ungating a Job's pods do, or None when it is no release Job of a gated one."""
    started = _release_container(job, UNGATE_SCRIPT)
    if started is None:
        return None
    env, argv, spec = started
    return Ungate(cluster, job["metadata"]["name"], job["metadata"]["namespace"], env["FLEETC_JOB"],
                  env["FLEETC_NAMESPACE"], env["FLEETC_GATE"], tuple(argv[4:]), _waited(spec), spec)


def ungates(files: Mapping[str, str]) -> list[Ungate]:
    return [found for cluster, obj in objects(files) if (found := ungate_of(cluster, obj)) is not None]


def ungated_by(found: list[Ungate], pod: Pod) -> Ungate | None:
    """The release Job that removes every gate of a Volcano Job's ``pod``, by the name the job
    controller gives it (the same after a restart, which creates it gated again from the
    template), among ``found`` (:func:`ungates`), or None."""
    if not pod.owner.startswith("Job/") or not pod.task:
        return None
    name = volcano_pod_name(pod.owner.split("/", 1)[1], pod.task, pod.index)
    for ungate in found:
        if (ungate.cluster, ungate.target_namespace, ungate.target) == (pod.cluster, pod.namespace,
                                                                        pod.owner.split("/", 1)[1]) \
                and name in ungate.pods and set(gates(pod.spec)) <= {ungate.gate}:
            return ungate
    return None


def _may(named: Mapping[tuple[str, str, str], Any], account: tuple[str, str], namespace: str,
         group: str, resource: str, verb: str, name: str) -> bool:
    """Kubernetes RBAC (``pkg/registry/rbac/validation/rule.go`` ``RuleAllows``): whether a
    RoleBinding of ``namespace`` binds the ServiceAccount ``account`` (namespace, name) to a
    Role of ``namespace`` with a rule that allows ``verb`` on ``resource`` of ``group`` named
    ``name`` (no ``resourceNames``: any name)."""
    for (kind, where, _), binding in named.items():
        if kind != "RoleBinding" or where != namespace or not any(
                s == {"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}
                for s in binding.get("subjects", [])):
            continue
        role = named.get((binding["roleRef"]["kind"], namespace, binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            if (group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
                    and verb in rule.get("verbs", []) and name in rule.get("resourceNames", [name])):
                return True
    return False


def _waits_in_its_namespace(where: str, release: Ungate | Releaser) -> list[str]:
    """What is wrong with a release Job or a releaser that lets pods go: it must wait first,
    and let go only pods of its own namespace."""
    problems = []
    if release.target_namespace != release.namespace:
        problems.append(f"{where}: releases pods in {release.target_namespace}, not its namespace")
    if not release.waited:
        problems.append(f"{where}: releases its pods without waiting for anything")
    return problems


def ungate_problems(files: Mapping[str, str]) -> list[str]:
    """Every pod of a gated Volcano Job, as the job controller creates it and creates it again
    on a restart, is let go by one release Job that waits and then may remove its gates (its
    account's Role allows ``patch`` of the pod and ``get`` of the Volcano Job, in its own
    namespace; the API server reachable through the namespace's NetworkPolicies)."""
    problems: list[str] = []
    by_cluster: dict[str, dict[tuple[str, str, str], Any]] = {}
    for cluster, obj in objects(files):
        by_cluster.setdefault(cluster, {})[(obj["kind"], obj["metadata"].get("namespace", ""),
                                            obj["metadata"]["name"])] = obj
    for ungate in ungates(files):
        named, where = by_cluster[ungate.cluster], f"{ungate.cluster}: Job/{ungate.job}"
        account = (ungate.namespace, ungate.spec.get("serviceAccountName", "default"))
        problems += _waits_in_its_namespace(where, ungate)
        for pod in ungate.pods:
            if not _may(named, account, ungate.target_namespace, "", "pods", "patch", pod):
                problems.append(f"{where}: its service account may not patch pod {pod}")
        if not _may(named, account, ungate.target_namespace, "batch.volcano.sh", "jobs", "get", ungate.target):
            problems.append(f"{where}: its service account may not read Job {ungate.target}, so it never ends")
        if not _reaches_api_server(named, Release(ungate.cluster, ungate.job, ungate.namespace, "", "", "",
                                                  ungate.waited, ungate.spec)):
            problems.append(f"{where}: its NetworkPolicies block the API server")
    problems += _releaser_problems(files, by_cluster)
    made, freeing = ungates(files), releasers(files)
    for pod in pods(files):
        if gates(pod.spec) and ungated_by(made, pod) is None and released_by(freeing, pod) is None:
            problems.append(f"{pod.cluster}: {pod.owner} pod {pod.name or f'{pod.task}-{pod.index}'}: gated by "
                            f"{', '.join(gates(pod.spec))}, which no release removes: it never starts")
    return sorted(set(problems))


# --------------------------------------------------------------------------- held Deployments and their releaser
@dataclass(frozen=True)
class Releaser:
    """What the releaser of a held Deployment does once its init containers (the waits) all
    passed: its ``fleetc-release`` container, as the kubelet starts it, lists the Pending pods
    of ``selector`` in the namespace it names every 10 s and removes ``gate`` from each, for as
    long as it runs (tests/test_scripts.py runs it against a stand-in API server through a
    scale-up)."""

    cluster: str
    deployment: str  # the releaser's own Deployment
    namespace: str  # the releaser's
    target_namespace: str  # the namespace of the URLs it calls
    gate: str
    selector: Mapping[str, str]  # the labels of the pods it lets go
    waited: Mapping[str, set[tuple[str, str]]]
    spec: Mapping[str, Any]
    labels: Mapping[str, str]  # its own pods' labels

    @property
    def account(self) -> str:
        """The user its requests are made as (kubernetes ``serviceaccount.MakeUsername``)."""
        return f"system:serviceaccount:{self.namespace}:{self.spec.get('serviceAccountName', 'default')}"


def releaser_of(cluster: str, deployment: Mapping[str, Any]) -> Releaser | None:
    """The releasing a Deployment's pods do, or None when it is no releaser."""
    if deployment["kind"] != "Deployment":
        return None
    started = _release_container(deployment, RELEASER_SCRIPT)
    if started is None:
        return None
    env, _, spec = started
    selector = dict(term.split("%3D", 1) for term in env["FLEETC_SELECTOR"].split("%2C"))
    return Releaser(cluster, deployment["metadata"]["name"], deployment["metadata"]["namespace"],
                    env["FLEETC_NAMESPACE"], env["FLEETC_GATE"], selector, _waited(spec), spec,
                    dict(deployment["spec"]["template"]["metadata"].get("labels", {})))


def releasers(files: Mapping[str, str]) -> list[Releaser]:
    return [found for cluster, obj in objects(files) if (found := releaser_of(cluster, obj)) is not None]


def released_by(found: list[Releaser], pod: Pod) -> Releaser | None:
    """The releaser that lets a Deployment's ``pod`` go, whatever name the API server gave it:
    one of its cluster and namespace whose selector its labels match and that removes every
    gate it has; or None."""
    if not pod.owner.startswith("Deployment/"):
        return None
    for releaser in found:
        if ((releaser.cluster, releaser.target_namespace) == (pod.cluster, pod.namespace)
                and releaser.selector.items() <= pod.labels.items() and set(gates(pod.spec)) <= {releaser.gate}):
            return releaser
    return None


def ungated(pod: Mapping[str, Any], gate: str) -> dict[str, Any] | None:
    """The pod after the releaser's JSON patch (RFC 6902: ``test`` that the first scheduling
    gate is ``gate``, then ``remove`` it), or None when the API server answers 422 (the test
    fails: no gate, or another one first)."""
    gates_now = pod["spec"].get("schedulingGates", [])
    if not gates_now or gates_now[0].get("name") != gate:
        return None
    after = json.loads(json.dumps(pod))
    after["spec"]["schedulingGates"] = gates_now[1:]
    return after


def release_round(releaser: Releaser, live: list[dict[str, Any]], admit: Any) -> list[str]:
    """One round of the releaser against the pods ``live`` in the cluster: list the Pending pods
    of its namespace its selector matches, and patch each (:func:`ungated`), the update going
    through ``admit(user, namespace, old, new)`` (the admission policies: a message when denied,
    else None). Changes ``live`` in place; returns what it logs."""
    said = []
    for index, pod in enumerate(live):
        meta = pod["metadata"]
        if (meta["namespace"] != releaser.target_namespace or pod["status"]["phase"] != "Pending"
                or not releaser.selector.items() <= meta["labels"].items()):
            continue
        after = ungated(pod, releaser.gate)
        if after is None:
            continue
        denied = admit(releaser.account, meta["namespace"], pod, after)
        if denied is not None:
            said.append(f"removing scheduling gate {releaser.gate} from pod {meta['name']} failed: 422 {denied}")
            continue
        live[index] = after
        said.append(f"removed scheduling gate {releaser.gate} from pod {meta['name']}")
    return said


def _selects(obj: Mapping[str, Any]) -> Mapping[str, str] | None:
    """The pod labels a Service, PodDisruptionBudget or (stage) Deployment selects."""
    if obj["kind"] == "Service":
        return obj["spec"].get("selector")
    if obj["kind"] in ("PodDisruptionBudget", "Deployment") and not is_release(obj):
        return obj["spec"]["selector"].get("matchLabels")
    return None


def _releaser_problems(files: Mapping[str, str], by_cluster: Mapping[str, Mapping[tuple[str, str, str], Any]]
                       ) -> list[str]:
    """Every releaser waits, lets go only pods of its own namespace, may list and patch pods
    there whatever their names (its account's Role: no ``resourceNames``), reaches the API
    server, has its patch of each pod of its selector admitted by the cluster's admission
    policies (:mod:`support.admission`) and any other change to such a pod (its image)
    denied, and runs pods no Service, PodDisruptionBudget or
    stage Deployment selects (a Service selecting them would send requests to the releaser)."""
    problems = []
    stage_pods = pods(files)
    for releaser in releasers(files):
        named, where = by_cluster[releaser.cluster], f"{releaser.cluster}: Deployment/{releaser.deployment}"
        account = (releaser.namespace, releaser.spec.get("serviceAccountName", "default"))
        problems += _waits_in_its_namespace(where, releaser)
        for verb in ("list", "patch"):
            if not _may(named, account, releaser.target_namespace, "", "pods", verb, ""):
                problems.append(f"{where}: its service account may not {verb} any pod of {releaser.target_namespace}")
        if not _reaches_api_server(named, Release(releaser.cluster, releaser.deployment, releaser.namespace, "", "",
                                                  "", releaser.waited, releaser.spec, releaser.labels)):
            problems.append(f"{where}: its NetworkPolicies block the API server")
        admit = admission.admitter(list(named.values()))
        for pod in stage_pods:
            if released_by([releaser], pod) is None:
                continue
            live = [{"metadata": {"name": pod.name, "namespace": pod.namespace, "labels": dict(pod.labels)},
                     "spec": dict(pod.spec), "status": {"phase": "Pending"}}]
            said = release_round(releaser, live, admit)
            problems += [f"{where}: {line}" for line in said if " failed: " in line]
            hostile = json.loads(json.dumps(live[0]))
            hostile["spec"]["containers"][0]["image"] = "attacker.example/miner:latest"
            if admit(releaser.account, pod.namespace, live[0], hostile) is None:
                problems.append(f"{where}: its account may change any pod of {pod.namespace} (an image: "
                                "no admission policy keeps it to removing the gate)")
        for (kind, namespace, name), obj in sorted(named.items()):
            selected = _selects(obj) if namespace == releaser.namespace else None
            if selected and selected.items() <= releaser.labels.items():
                problems.append(f"{where}: {kind}/{name} selects its pods")
    return problems


# --------------------------------------------------------------------------- serving from a refreshed cache
def _loaded_markers(named: Mapping[tuple[str, str, str, str], Any]) -> dict[tuple[str, str, str], set[tuple[str, str]]]:
    """(cluster, namespace, DataLoad) -> (path, content) of the markers written once it is
    Complete: by a DataProcess that runs after it (Fluid holds a data operation with ``runAfter``
    Pending until the one it names is Complete, fluid v1.0.8 ``pkg/controllers/v1alpha1/dataflow/
    operations.go``) whose container runs :data:`fleetc.render.order.LOADED_SCRIPT`."""
    loaded: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
    for (cluster, kind, namespace, _), obj in named.items():
        after = obj["spec"].get("runAfter") if kind == "DataProcess" else None
        if after is None or after["kind"] != "DataLoad":
            continue
        for container in obj["spec"]["processor"].get("job", {}).get("podSpec", {}).get("containers", []):
            env, argv = kubelet_view(container)
            if argv[:3] == ["sh", "-c", LOADED_SCRIPT] and len(argv) == 5:
                loaded.setdefault((cluster, after.get("namespace", namespace), after["name"]), set()).add(
                    (f"{env['FLEETC_MARKER_DIR']}/{argv[4]}", env["FLEETC_RUN"]))
    return loaded


def _model_claim(spec: Mapping[str, Any]) -> str | None:
    """The Dataset (its PVC) a ``tritonserver`` container serves its model repository from."""
    _, argv = kubelet_view(spec["containers"][0])
    if argv[:1] != ["tritonserver"]:
        return None
    repository = next((w.partition("=")[2] for w in argv if w.startswith("--model-repository=")), "")
    mount = next((m for m in spec["containers"][0].get("volumeMounts", []) if m["mountPath"] == repository), None)
    volume = next((v for v in spec.get("volumes", []) if mount and v["name"] == mount["name"]), {})
    return volume.get("persistentVolumeClaim", {}).get("claimName")


def cache_ready_problems(files: Mapping[str, str]) -> list[str]:
    """A Deployment whose Triton serves its model repository from a Fluid Dataset that a DataLoad
    refreshes after the writers completed (``runAfter``) starts only once that DataLoad is
    Complete: an init container of its pods, or of the releaser that lets its gated pods go,
    polls the marker written after it, for what it writes (issue 25: Triton waited for the
    training marker only, and loaded from a cache
    whose listing was not refreshed yet)."""
    everything = list(objects(files))
    named = {(c, o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for c, o in everything
             if o["apiVersion"].startswith("data.fluid.io/")}
    loaded = _loaded_markers(named)
    problems = []
    freeing = releasers(files)
    for cluster, obj in everything:
        if obj["kind"] != "Deployment" or is_release(obj):
            continue
        spec, namespace = obj["spec"]["template"]["spec"], obj["metadata"]["namespace"]
        claim = _model_claim(spec)
        waits = [_waited(spec)] + [r.waited for r in freeing if (r.cluster, r.target_namespace) == (cluster, namespace)
                                   and r.selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()]
        waited = {found for by_name in waits for marks in by_name.values() for found in marks}
        for (c, kind, ns, name), load in sorted(named.items()):
            if (c, kind, ns) != (cluster, "DataLoad", namespace) or load["spec"]["dataset"]["name"] != claim:
                continue
            if not load["spec"].get("runAfter"):
                continue  # data no stage writes: loaded once, as before
            marks = loaded.get((cluster, namespace, name), set())
            where = f"{cluster}: Deployment/{obj['metadata']['name']}"
            if not marks:
                problems.append(f"{where}: serves {claim}, refreshed by DataLoad/{name}: nothing marks it done")
            elif not marks <= waited:
                problems.append(f"{where}: starts before DataLoad/{name} refreshed the {claim} it serves")
    return problems
