"""Cluster-wide objects: Namespaces, Volcano Queues, and the platform's security rules.

``security`` of an AIGCPlatform, per field:

* ``dataSovereignty``: placement already keeps every stage that reads a jurisdiction's data on
  that jurisdiction's clusters (a hard rule). Every namespace of a governed pipeline is
  labelled ``fleetc.dev/jurisdiction: <cluster jurisdiction>``, and where the platform declares
  the storage of the cluster's jurisdiction (``security.storageEndpoints``: CIDR blocks), it
  gets a NetworkPolicy (:func:`egress_policy`) that lets its pods reach DNS, their own
  namespace and those blocks, and nothing else. Without declared endpoints no egress policy is
  rendered (it would block the storage the stages must write to) and a warning says how to
  declare them. NetworkPolicy governs pod-network pods only, and Fluid runs Alluxio on the host
  network by default: in a namespace with the policy its AlluxioRuntimes are rendered on the pod
  network (:data:`fleetc.render.data.CONTAINER_NETWORK`), so the DataLoad pods reach the
  Alluxio master under the own-namespace rule and Alluxio is fenced like the stages. Pods that
  reach storage with the cloud identity (no ``secretName``) need the identity endpoints
  (instance metadata, the token service) in ``storageEndpoints`` too: a warning names them.
* ``auditEnabled``: audit policy is API-server configuration (``--audit-policy-file``); no
  Kubernetes object enables it for a namespace, so it is a warning, not an object.
* ``encryptionAtRest``: encryption of Secrets and other resources is API-server configuration
  (``EncryptionConfiguration``), volume encryption is the storage class's; no portable object
  exists, so it is a warning too.
"""

from __future__ import annotations

from fleetc.errors import Diagnostic
from fleetc.model import ClassWeights, Cluster, Platform, Stage, Team, WorkloadClass, url_scheme
from fleetc.render.common import (
    GPU_RESOURCE,
    MANAGED_BY,
    NEVER_PRUNED,
    Obj,
    cpu_quantity,
    dns_label,
    metadata,
    provenance,
    team_queue_name,
    warning,
    whole_gib,
)
from fleetc.render.context import Context, Work, queue_gpus

#: Schemes reached with credentials: an input or output of one without a Secret uses the pod's
#: cloud identity.
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "cos", "cosn", "oss", "obs"})

JURISDICTION_LABEL = "fleetc.dev/jurisdiction"
EGRESS_POLICY_NAME = "fleetc-jurisdiction-egress"


def sovereign_platform(ctx: Context, namespace: str) -> Platform | None:
    """The first platform (by name) with ``dataSovereignty`` governing a pipeline of the namespace."""
    pipelines = ctx.namespace_pipelines.get(namespace, frozenset())
    return next((p for p in ctx.model.platforms if p.data_sovereignty and set(p.pipelines) & pipelines), None)


def namespace(ctx: Context, cluster: Cluster, name: str) -> Obj:
    """A Namespace; labelled with its pipeline only when exactly one pipeline (in the whole
    fleet, so the object is the same on every cluster) uses it, and then sourced from that
    pipeline's ``metadata.namespace``; labelled with the cluster's jurisdiction under data
    sovereignty. Never pruned by either engine (:data:`~fleetc.render.common.NEVER_PRUNED`):
    when a placement change takes its last pipeline off the cluster it stays, with the user's
    Secrets in it."""
    pipelines = ctx.namespace_pipelines[name]
    meta: Obj = {"name": name, "labels": dict(MANAGED_BY), "annotations": dict(NEVER_PRUNED)}
    if len(pipelines) == 1:
        pipeline = next(iter(pipelines))
        meta["labels"]["fleetc.dev/pipeline"] = dns_label(pipeline)
        meta["annotations"] = provenance(ctx.pipeline_sources[pipeline], "metadata.namespace") | NEVER_PRUNED
    if sovereign_platform(ctx, name) is not None:
        meta["labels"][JURISDICTION_LABEL] = cluster.jurisdiction
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def queue(ctx: Context, cluster: Cluster, workload_class: WorkloadClass) -> Obj:
    """The Volcano Queue of one workload class, weighted by the Fleet, capped at the cluster."""
    weights: ClassWeights = ctx.model.class_weights
    capability = {"cpu": cpu_quantity(cluster.cpu_millis), "memory": whole_gib(cluster.memory_bytes)}
    if cluster.gpus > 0:
        capability[GPU_RESOURCE] = str(cluster.gpus)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": metadata(f"fleetc-{workload_class}", source=ctx.fleet_source("spec.aigcConfig")),
        "spec": {
            "weight": max(1, round(weights.of(workload_class) * 10)),
            "reclaimable": True,
            "capability": capability,
        },
    }


def team_queues(ctx: Context, cluster: Cluster, work: Work) -> list[Obj]:
    """The Volcano Queue of each team whose gangs run on ``cluster`` (:func:`team_queue`)."""
    by_team: dict[str, tuple[Team, list[Stage]]] = {}
    for stage, _ in work:
        team = ctx.team(stage)
        if stage.is_gang and team is not None:
            by_team.setdefault(team.name, (team, []))[1].append(stage)
    return [team_queue(ctx, cluster, team, gangs) for _, (team, gangs) in sorted(by_team.items())]


def team_queue(ctx: Context, cluster: Cluster, team: Team, gangs: list[Stage]) -> Obj:
    """A team's Volcano Queue on ``cluster``, where its ``gangs`` run (instead of their class's
    queue). Where the team has a quota of the cluster's GPU type, ``capability`` caps its GPUs
    at what its gangs placed here request: the team's share of its fleet-wide quota, which the
    placement keeps. Volcano reads a capability without cpu and memory as unlimited in those
    (``capability.MilliCPU <= 0`` -> ``math.MaxFloat64``) and a missing scalar resource as
    unlimited (``MinDimensionResource(..., Infinity)``: volcano-sh/volcano
    ``pkg/scheduler/plugins/capacity/capacity.go`` and ``proportion/proportion.go``
    ``newQueueAttr``), so only GPUs are capped. ``guarantee`` keeps the team's share of its
    ``guaranteed`` GPUs (:func:`fleetc.render.context.team_guarantees`) from every other queue:
    Volcano subtracts all queues' guarantees from the others' real capability. The weight is
    the highest of its gangs' classes."""
    weights: ClassWeights = ctx.model.class_weights
    spec: Obj = {"weight": max(1, round(max(weights.of(s.workload_class) for s in gangs) * 10)), "reclaimable": True}
    if cluster.gpu_type is not None and cluster.gpu_type in dict(team.gpu_quota):
        spec["capability"] = {GPU_RESOURCE: str(queue_gpus(gangs))}
    guaranteed = ctx.guarantees.get((team.name, cluster.name), 0)
    if guaranteed:
        spec["guarantee"] = {"resource": {GPU_RESOURCE: str(guaranteed)}}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": metadata(team_queue_name(team.name), source=team.source),
        "spec": spec,
    }


def storage_blocks(platform: Platform, jurisdiction: str) -> tuple[str, ...]:
    """The CIDR blocks the platform declares for the storage of ``jurisdiction``."""
    return next((cidrs for name, cidrs in platform.storage_endpoints if name == jurisdiction), ())


def egress_policy(cluster: Cluster, name: str, platform: Platform) -> Obj | None:
    """Egress of every pod of the namespace limited to DNS (kube-dns in kube-system), the
    namespace itself and the storage blocks of the cluster's jurisdiction; None when the
    platform declares none for it (see :func:`security_warnings`)."""
    blocks = storage_blocks(platform, cluster.jurisdiction)
    if not blocks:
        return None
    dns = {
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    own_namespace: Obj = {"to": [{"podSelector": {}}]}
    storage = {"to": [{"ipBlock": {"cidr": cidr}} for cidr in blocks]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(EGRESS_POLICY_NAME, name, platform.source, "spec.security.storageEndpoints"),
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [dns, own_namespace, storage]},
    }


def security_warnings(platform: Platform, jurisdictions: set[str]) -> list[Diagnostic]:
    """The ``security`` fields fleetc cannot render as objects, each named; ``jurisdictions``:
    those of the clusters running the platform's pipelines."""
    found = []
    undeclared = sorted(j for j in jurisdictions if not storage_blocks(platform, j))
    if platform.data_sovereignty and undeclared:
        found.append(warning(platform.source, "spec.security.storageEndpoints",
                             f"no storage endpoints declared for jurisdiction(s) {', '.join(undeclared)}: "
                             "no egress NetworkPolicy rendered there (placement still keeps the stages in "
                             "their jurisdiction); declare them as spec.security.storageEndpoints: "
                             "[{jurisdiction: <name>, cidrs: [<CIDR>, ...]}]"))
    if platform.storage_endpoints and not platform.data_sovereignty:
        found.append(warning(platform.source, "spec.security.storageEndpoints",
                             "has effect only with spec.security.dataSovereignty; not rendered"))
    if platform.audit_enabled:
        found.append(warning(platform.source, "spec.security.auditEnabled",
                             "has no portable Kubernetes object (audit policy is API-server "
                             "configuration); not rendered"))
    if platform.encryption_at_rest:
        found.append(warning(platform.source, "spec.security.encryptionAtRest",
                             "has no portable Kubernetes object (encryption at rest is API-server "
                             "or storage-class configuration); not rendered"))
    return found


def identity_warnings(ctx: Context, platform: Platform, work: dict[str, Work]) -> list[Diagnostic]:
    """Stages under the platform's egress NetworkPolicy that reach an object store with the
    pod's cloud identity (no Secret named for the URL): the identity endpoints (the instance
    metadata service, the cloud's token service) are outside the declared storage blocks, so
    the policy blocks them unless ``storageEndpoints`` lists them."""
    if not platform.data_sovereignty:
        return []
    fenced = {c.name for c in ctx.model.clusters if storage_blocks(platform, c.jurisdiction)}
    found = sorted({(stage.key, url) for name in sorted(work.keys() & fenced) for stage, _ in work[name]
                    if stage.pipeline in platform.pipelines
                    for url in [u for _, u in ctx.input_urls(stage)] + [o.url for o in stage.outputs]
                    if url_scheme(url) in OBJECT_STORES and ctx.storage_secret(stage, url) is None})
    if not found:
        return []
    listed = ", ".join(f"{key} ({url})" for key, url in found)
    return [warning(platform.source, "spec.security.storageEndpoints",
                    f"{listed}: reached with the pods' cloud identity (no secretName), whose endpoints (the "
                    "instance metadata service 169.254.169.254/32, the cloud's token service) the egress "
                    "NetworkPolicy blocks: add them to storageEndpoints, or name a secretName")]
