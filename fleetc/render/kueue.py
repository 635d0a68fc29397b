"""Gang stages on a cluster that runs Kueue (Fleet ``batchScheduler: kueue``) instead of Volcano.

Per cluster, in the infra layer (docs/gitops.md says why that layer comes first):

* a ResourceFlavor per kind of node the gangs use: :data:`CPU_FLAVOR` (no node labels) for CPU
  and memory, and one per GPU type, ``fleetc-<gpu-type>``, whose ``nodeLabels`` are the
  ``nvidia.com/gpu.product`` label fleetc's GPU pods select (``-shared``: the ``-SHARED``
  product of time-sliced nodes, only where time-sliced gang pods run). Kueue admits a pod set
  only on a flavor whose labels agree with the pods' node selector, and injects the flavor's
  labels into the pods it starts (kubernetes-sigs/kueue
  ``site/content/en/docs/concepts/resource_flavor.md``, ``pkg/scheduler/flavorassigner``);
* a ClusterQueue :data:`QUEUE_NAME` covering those flavors with the cluster's capacity (one
  group for CPU and memory, one for GPUs; ``apis/kueue/v1beta2/clusterqueue_types.go``), open
  to the namespaces fleetc manages;
* per team (AIGCPlatform ``spec.teams``) whose gangs run here, a ClusterQueue
  ``fleetc-team-<team>`` whose GPU ``nominalQuota`` is the team's share here: the GPUs its gangs
  placed here request, out of its fleet-wide quota, which the placement keeps. The
  cluster's own ClusterQueue keeps the rest of the GPUs, so the GPU quotas add up to the
  cluster's GPUs. No ClusterQueue is in a cohort (``cohortName`` empty: "this ClusterQueue
  cannot borrow from any other ClusterQueue and vice versa", the same file): a team's quota
  is then both its cap and its guarantee here, and no other queue's work can take it.
  CPU and memory are not part of a team's quota: each team queue covers them with the
  cluster's capacity, as Kueue admits no workload asking for a resource its ClusterQueue does
  not cover (:func:`cluster_queue` is the one place that decides the quotas);
* a LocalQueue :data:`QUEUE_NAME` in every namespace whose gangs run here, pointing at it (a
  team's gangs: a LocalQueue ``fleetc-team-<team>`` pointing at the team's ClusterQueue).

In the workloads layer, each gang stage is a ``batch/v1`` Job labelled
``kueue.x-k8s.io/queue-name``, ``parallelism = completions =`` its pods: Kueue admits the Job's
pod set as one Workload, all its pods' quota at once or none (``pkg/controller/jobs/job/
job_controller.go`` ``PodSets``); Kueue's ``waitForPodsReady`` (a manager setting) makes that
all-or-nothing on the nodes too. A gang of more than one pod is an Indexed Job with a headless
Service named after it: the Job controller names each pod's host ``<job>-<index>`` and, with
``subdomain`` set, ``<job>-<index>.<job>`` resolves; ``torchrun``'s variables are set on every
container as Volcano's ``pytorch`` plugin sets them (``MASTER_ADDR`` the index-0 pod,
``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` the completion index).

``spec.suspend`` is not rendered: Kueue's mutating webhook creates every Job with a queue name
suspended (``pkg/controller/jobs/job/job_webhook.go`` ``Default``,
``pkg/controller/jobframework/defaults.go`` ``WorkloadShouldBeSuspended``) and unsuspends it on
admission; a rendered ``suspend: true`` would be applied again by Flux (server-side apply with
forced ownership) or Argo CD's self-heal and stop the running Job. The webhook refuses no Job
whose LocalQueue is missing: the Job waits, suspended, until the queue exists
(``test/e2e/singlecluster/e2e_test.go``, "Creating a Job without a matching LocalQueue").
"""

from __future__ import annotations

from fleetc.model import KUEUE_CPU_FLAVOR, SHARED_PRODUCT_SUFFIX, Cluster, Source, Stage
from fleetc.render.common import (
    GPU_RESOURCE,
    MANAGED_BY,
    MAX_NAME,
    Obj,
    content_name,
    cpu_quantity,
    dns_label,
    memory_quantity,
    metadata,
    stage_metadata,
    team_queue_name,
)
from fleetc.render.context import Context, Work, queue_gpus
from fleetc.render.order import MAX_RETRY
from fleetc.render.release import held, held_queue, release_job
from fleetc.render.workloads import (
    RENDEZVOUS_PORT,
    gang_pod_template,
    time_sliced,
)

API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The ClusterQueue of each Kueue cluster and the LocalQueue of each namespace on it.
QUEUE_NAME = "fleetc"
CPU_FLAVOR = KUEUE_CPU_FLAVOR
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The Job controller annotates each pod of an Indexed Job with its index
#: (kubernetes ``pkg/controller/job/indexed_job_utils.go``).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: The label the Job controller puts on the Job's pods (what the headless Service selects).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def gangs(work: Work) -> list[Stage]:
    return [stage for stage, _ in work if stage.is_gang]


def gpu_flavor(cluster: Cluster, shared: bool) -> str:
    """``fleetc-<gpu-type>`` (``-shared`` for time-sliced nodes), a DNS name whatever the type's
    label-value spelling (``a100_80gb``: ``fleetc-a100-80gb``)."""
    name = f"fleetc-{cluster.gpu_type}" + ("-shared" if shared else "")
    return dns_label(name.replace("_", "-"))


# --------------------------------------------------------------------------- infra
def kueue_queues(ctx: Context, cluster: Cluster, work: Work) -> list[Obj]:
    """The ResourceFlavors, the ClusterQueue and the LocalQueues the cluster's gangs need;
    nothing when no gang runs there."""
    mine = gangs(work)
    if not mine:
        return []
    shared = cluster.gpus > 0 and any(s.gpus > 0 and time_sliced(ctx, cluster, s) for s in mine)
    flavors = [_flavor(cluster, CPU_FLAVOR, {})]
    if cluster.gpus > 0:
        flavors.append(_flavor(cluster, gpu_flavor(cluster, False), {PRODUCT_LABEL: cluster.gpu_product}))
        if shared:
            flavors.append(_flavor(cluster, gpu_flavor(cluster, True),
                                   {PRODUCT_LABEL: cluster.gpu_product + SHARED_PRODUCT_SUFFIX}))
    teams: dict[str, list[Stage]] = {}
    for stage in mine:
        team = ctx.team(stage)
        teams.setdefault(QUEUE_NAME if team is None else team_queue_name(team.name), []).append(stage)
    queues = [cluster_queue(ctx, cluster, shared, name, gangs_of, teams) for name, gangs_of in sorted(teams.items())]
    local = sorted({(s.namespace, name) for name, gangs_of in teams.items() for s in gangs_of})
    return [*flavors, *queues, *(local_queue(ctx, n, name) for n, name in local)]


def _flavor(cluster: Cluster, name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": metadata(name, source=cluster.source),
            "spec": {"nodeLabels": labels} if labels else {}}


def cluster_queue(ctx: Context, cluster: Cluster, shared: bool, name: str = QUEUE_NAME,
                  gangs_of: list[Stage] | None = None, queues: dict[str, list[Stage]] | None = None) -> Obj:
    """A ClusterQueue of the cluster: CPU and memory on :data:`CPU_FLAVOR` with the cluster's
    capacity, GPUs on the GPU type's flavor (and its time-sliced one), for the namespaces fleetc
    manages. The cluster's own queue (:data:`QUEUE_NAME`) has the cluster's GPUs (as many slots
    as they advertise time-sliced) less the teams' shares; a team's queue (``name``, admitting
    ``gangs_of``), its share: what those gangs request of each flavor. ``queues``: every queue
    of the cluster by name, with the gangs it admits."""
    groups: list[Obj] = [{
        "coveredResources": ["cpu", "memory"],
        "flavors": [{"name": CPU_FLAVOR, "resources": [
            {"name": "cpu", "nominalQuota": cpu_quantity(cluster.cpu_millis)},
            {"name": "memory", "nominalQuota": memory_quantity(cluster.memory_bytes)}]}],
    }]
    if cluster.gpus > 0:
        teams = [gangs for other, gangs in (queues or {}).items() if other != QUEUE_NAME]

        def quota(flavor_shared: bool, total: int) -> str:
            def requested(gangs: list[Stage]) -> int:
                return queue_gpus([s for s in gangs if time_sliced(ctx, cluster, s) == flavor_shared])
            if name != QUEUE_NAME:
                return str(requested(gangs_of or []))
            return str(max(0, total - sum(requested(gangs) for gangs in teams)))

        gpu_flavors = [{"name": gpu_flavor(cluster, False),
                        "resources": [{"name": GPU_RESOURCE, "nominalQuota": quota(False, cluster.gpus)}]}]
        if shared:
            gpu_flavors.append({"name": gpu_flavor(cluster, True),
                                "resources": [{"name": GPU_RESOURCE,
                                               "nominalQuota": quota(True, cluster.gpus * ctx.gpu_slots)}]})
        groups.append({"coveredResources": [GPU_RESOURCE], "flavors": gpu_flavors})
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": metadata(name, source=_queue_source(ctx, cluster, name, gangs_of or [])),
        "spec": {
            "namespaceSelector": {"matchLabels": dict(MANAGED_BY)},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": groups,
        },
    }


def _queue_source(ctx: Context, cluster: Cluster, name: str, gangs_of: list[Stage]) -> Source:
    """Where a ClusterQueue comes from: the cluster (its own queue), or the team's entry."""
    team = ctx.team(gangs_of[0]) if name != QUEUE_NAME and gangs_of else None
    return cluster.source if team is None else team.source


def local_queue(ctx: Context, namespace: str, name: str = QUEUE_NAME) -> Obj:
    """The LocalQueue ``name`` of ``namespace``, pointing at the ClusterQueue of that name."""
    pipelines = sorted(ctx.namespace_pipelines[namespace])
    source = ctx.pipeline_sources[pipelines[0]]
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": metadata(name, namespace, source, "metadata.namespace"),
            "spec": {"clusterQueue": name}}


# --------------------------------------------------------------------------- workloads
def kueue_job(ctx: Context, cluster: Cluster, stage: Stage) -> list[Obj]:
    """A gang stage as a ``batch/v1`` Job Kueue admits whole, and for a gang of more than one
    pod the headless Service its pods find each other by; for a stage that waits for upstream
    stages, the Job held back (naming a LocalQueue of its own, no waits in its pods) and the
    release Job that creates that queue once they completed (:mod:`fleetc.render.release`).

    The Job is named after its content, as the Volcano Job is: a Job's pod template cannot
    change once created (the API server's Job validation), so a changed stage is a new Job. A
    held Job's name covers its queue's name too (Kueue refuses a change of queue name on a
    running Job), which carries the stage's run id."""
    pods = stage.pods
    meta = stage_metadata(stage)
    team = ctx.team(stage)
    cluster_queue = QUEUE_NAME if team is None else team_queue_name(team.name)
    waiting = held(ctx, stage)
    meta["labels"][QUEUE_LABEL] = held_queue(ctx, stage) if waiting else cluster_queue
    spec: Obj = {"parallelism": pods, "completions": pods}
    if pods > 1:
        spec["completionMode"] = "Indexed"
    spec["backoffLimit"] = MAX_RETRY
    spec["template"] = gang_pod_template(ctx, cluster, stage, waiting=not waiting)
    # Hostnames are <job>-<index> and must stay DNS labels of at most 63 characters.
    content: object = {"queue": meta["labels"][QUEUE_LABEL], "spec": spec} if waiting else spec
    name = content_name(meta["name"], content, MAX_NAME - len(f"-{pods - 1}"))
    meta["name"] = name
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
    found = [job, release_job(ctx, stage, cluster_queue)] if waiting else [job]
    if pods == 1:
        return found
    _rendezvous(spec["template"]["spec"], name, pods)
    return [*found, _headless_service(stage, name)]


def _rendezvous(pod: Obj, job: str, pods: int) -> None:
    """What ``torchrun`` needs, appended to every container's environment (as Volcano's
    ``pytorch`` plugin does): the index-0 pod's DNS name, the port, the gang's size and the
    pod's rank, its completion index."""
    env: list[Obj] = [
        {"name": "MASTER_ADDR", "value": f"{job}-0.{job}"},
        {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": "WORLD_SIZE", "value": str(pods)},
        {"name": "RANK", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}},
    ]
    pod["subdomain"] = job
    for container in pod["containers"]:
        container["env"] = [*container.get("env", []), *env]


def _headless_service(stage: Stage, job: str) -> Obj:
    """``<job>-<index>.<job>`` resolves to each pod, ready or not (the rendezvous starts before
    any pod is ready)."""
    meta = stage_metadata(stage)
    meta["name"] = job
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: job},
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT,
                       "protocol": "TCP"}],
        },
    }
