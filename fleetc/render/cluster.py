"""Cluster-wide objects: Namespaces, Volcano Queues, and the platform's security rules.

``security`` of an AIGCPlatform, per field:

* ``dataSovereignty``: every namespace of a governed pipeline is labelled
  ``fleetc.dev/jurisdiction: <cluster jurisdiction>`` and gets a NetworkPolicy
  (:func:`egress_policy`) that denies egress by default and allows only DNS and traffic to
  namespaces of the same jurisdiction. Storage endpoints outside the cluster are then blocked
  too: fleetc does not know their addresses, so a warning says to allow the in-jurisdiction
  ones with a NetworkPolicy of your own (NetworkPolicies add up: any policy allowing a flow
  allows it).
* ``auditEnabled``: audit policy is API-server configuration (``--audit-policy-file``); no
  Kubernetes object enables it for a namespace, so it is a warning, not an object.
* ``encryptionAtRest``: encryption of Secrets and other resources is API-server configuration
  (``EncryptionConfiguration``), volume encryption is the storage class's; no portable object
  exists, so it is a warning too.
"""

from __future__ import annotations

from fleetc.errors import Diagnostic
from fleetc.model import ClassWeights, Cluster, Platform, Source, WorkloadClass
from fleetc.render.common import (
    GPU_RESOURCE,
    MANAGED_BY,
    Obj,
    cpu_quantity,
    dns_label,
    metadata,
    provenance,
    warning,
    whole_gib,
)
from fleetc.render.context import Context

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
    sovereignty."""
    pipelines = ctx.namespace_pipelines[name]
    meta: Obj = {"name": name, "labels": dict(MANAGED_BY)}
    if len(pipelines) == 1:
        pipeline = next(iter(pipelines))
        meta["labels"]["fleetc.dev/pipeline"] = dns_label(pipeline)
        meta["annotations"] = provenance(ctx.pipeline_sources[pipeline], "metadata.namespace")
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
        "metadata": metadata(f"fleetc-{workload_class}", source=Source(ctx.fleet_path, "spec.aigcConfig")),
        "spec": {
            "weight": max(1, round(weights.of(workload_class) * 10)),
            "reclaimable": True,
            "capability": capability,
        },
    }


def egress_policy(cluster: Cluster, name: str, platform: Platform) -> Obj:
    """Default-deny egress for every pod of the namespace, except DNS (kube-dns in kube-system)
    and namespaces labelled with the same jurisdiction (this one included)."""
    dns = {
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    same_jurisdiction = {"to": [{"namespaceSelector": {"matchLabels": {JURISDICTION_LABEL: cluster.jurisdiction}}}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(EGRESS_POLICY_NAME, name, platform.source, "spec.security.dataSovereignty"),
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [dns, same_jurisdiction]},
    }


def security_warnings(platform: Platform) -> list[Diagnostic]:
    """The ``security`` fields fleetc cannot render as objects, each named."""
    found = []
    if platform.data_sovereignty:
        found.append(warning(platform.source, "spec.security.dataSovereignty",
                             "egress is limited to DNS and namespaces of the same jurisdiction; allow "
                             "your in-jurisdiction storage endpoints with a NetworkPolicy of your own "
                             "(fleetc does not know their addresses)"))
    if platform.audit_enabled:
        found.append(warning(platform.source, "spec.security.auditEnabled",
                             "has no portable Kubernetes object (audit policy is API-server "
                             "configuration); not rendered"))
    if platform.encryption_at_rest:
        found.append(warning(platform.source, "spec.security.encryptionAtRest",
                             "has no portable Kubernetes object (encryption at rest is API-server "
                             "or storage-class configuration); not rendered"))
    return found
