"""A dependant takes no GPU while it waits: on Kueue its Job is held back until its upstream
stages completed; elsewhere the compile says which stages still hold GPUs while they wait.

On a cluster that runs Kueue (Fleet ``batchScheduler: kueue``), a gang stage that waits for
upstream completion markers (:func:`fleetc.render.order.producers`) is rendered **held**:

* its Job names a LocalQueue of its own, :func:`held_queue` (``fleetc-run-<run id>``), that no
  manifest renders. Kueue's Job webhook creates the Job suspended whatever its queue
  (``pkg/controller/jobframework/defaults.go`` ``WorkloadShouldBeSuspended``); the Workload
  Kueue makes for it is inadmissible while that LocalQueue is missing (kueue v0.19.2
  ``pkg/controller/core/workload_controller.go`` ``reconcileOnLocalQueueActiveState``: "LocalQueue
  ... is terminating or missing"; ``pkg/cache/queue/manager.go`` ``AddOrUpdateWorkloadWithoutLock``
  returns ``ErrLocalQueueDoesNotExistOrInactive``), so no quota is reserved, the Job stays
  suspended and no pod exists: no GPU is taken, and ``waitForPodsReady`` has nothing to time
  out (``pkg/controller/jobframework/reconciler.go``: a suspended Job is started only once its
  Workload is admitted). Its pods wait for nothing: they have no ``fleetc-wait-*`` init
  containers;
* a **release** Job (:func:`release_job`, ``<pipeline>-<stage>-release-<8 hex>``), a plain
  ``batch/v1`` Job with no queue name, so Kueue does not manage it (``manageJobsWithoutQueueName``
  is off by default) and it runs at once on a few millicores and no GPU: its init containers are
  the waits the dependant's pods had (:func:`fleetc.render.order.wait_containers`), and once they
  all passed, its ``fleetc-release`` container (:data:`RELEASE_SCRIPT`) creates that LocalQueue,
  pointing at the stage's ClusterQueue. Kueue then adds the pending Workload to the queue at
  once (``manager.go`` ``addLocalQueueLocked`` lists the Workloads of the queue's name) and admits
  it like any other;
* the LocalQueue carries an ownerReference to the release Job (its name and uid, from the pod's
  ``batch.kubernetes.io/job-name`` and ``batch.kubernetes.io/controller-uid`` labels, which the
  Job controller sets on every pod): when GitOps prunes the release Job (a new run renames it
  with the held Job) the garbage collector deletes the LocalQueue. No ``blockOwnerDeletion``
  (which would need the ``update`` of the Job's finalizers). Deleting a LocalQueue does not
  evict an admitted Workload (``reconcileOnLocalQueueActiveState`` acts on an admitted one only
  under a ``HoldAndDrain`` stop policy);
* per namespace with held Jobs: a ServiceAccount ``fleetc-release`` for the release pods and a
  Role allowing ``create`` of ``localqueues`` in that namespace and nothing else, bound to it;
  where the namespace's egress is fenced (``dataSovereignty``), a NetworkPolicy letting the
  release pods (label ``fleetc.dev/role: release``) reach the API server, TCP 443 and 6443
  (the ``kubernetes`` Service's port, and the API server's own after the Service's DNAT, which
  is what NetworkPolicy implementations see). Only fleetc's own constant scripts run in those
  pods.

The held Job's name covers its LocalQueue's name, so a Job rendered before (that waited in init
containers, under the namespace's shared queue) is replaced, never updated: Kueue refuses a
change of queue name on a running Job (``pkg/controller/jobframework/validation.go``
``validateUpdateForQueueName``). And the LocalQueue's name carries the run id, so a re-run of an
upstream stage is a new held Job and a new release Job, whose waits hold the new run ids.

Volcano and serving: a Volcano Job's pods and a Deployment's are created at once, so their waits
are init containers that hold the pods' GPUs while the upstream runs; :func:`holding_warnings`
names each such stage (docs/pipelines.md says why no JobFlow, and what to do).
"""

from __future__ import annotations

from fleetc.errors import Diagnostic
from fleetc.model import KUEUE, Cluster, Platform, Stage
from fleetc.render.common import MAX_NAME, Obj, content_name, metadata, object_name, stage_labels, warning
from fleetc.render.context import Context, Work
from fleetc.render.order import literal, producers, run_id, unmarked, wait_containers

#: The image of the ``fleetc-release`` container: a shell and curl (Alpine's busybox ``sh``).
RELEASE_IMAGE = "curlimages/curl:8.10.1"
RELEASE_ACCOUNT = "fleetc-release"
ROLE_LABEL = "fleetc.dev/role"
RELEASE_ROLE = "release"
#: The API server as the release pods reach it: the ``kubernetes`` Service (443) and, after its
#: DNAT, the API server's own port (6443 on kubeadm and most managed clusters).
API_SERVER_PORTS = (443, 6443)
#: Labels the Job controller puts on every pod of a Job (kubernetes ``pkg/apis/batch/types.go``
#: ``JobNameLabel``, ``ControllerUidLabel``), read through the downward API.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
RELEASE_TRIES = 10
API_EGRESS_POLICY = "fleetc-release-apiserver"

#: ``fleetc-release`` (``sh -c RELEASE_SCRIPT fleetc-release``; what it creates in
#: ``FLEETC_LOCAL_QUEUE``, ``FLEETC_CLUSTER_QUEUE``, ``FLEETC_NAMESPACE``, its Job in
#: ``FLEETC_OWNER`` and ``FLEETC_OWNER_UID``, the stage in ``FLEETC_STAGE``): POSTs the
#: LocalQueue to the API server with the pod's service account token, and ends once it was
#: created (201) or exists (409); any other answer is logged with the API server's reply and
#: tried again, :data:`RELEASE_TRIES` times 30 s apart, then the pod fails and the Job's
#: ``backoffLimit`` retries it. Every value is a DNS name or a uid, quoted; like the other
#: scripts it holds no ``$(`` and no ``$$`` (:mod:`fleetc.render.order`).
RELEASE_SCRIPT = (
    "sa=/var/run/secrets/kubernetes.io/serviceaccount\n"
    'url="https://kubernetes.default.svc/apis/kueue.x-k8s.io/v1beta2/namespaces/$FLEETC_NAMESPACE/localqueues"\n'
    "body=`printf '{\"apiVersion\":\"%s\",\"kind\":\"LocalQueue\",\"metadata\":{\"name\":\"%s\","
    "\"namespace\":\"%s\",\"labels\":{\"app.kubernetes.io/managed-by\":\"fleetc\"},"
    "\"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"name\":\"%s\",\"uid\":\"%s\"}]},"
    "\"spec\":{\"clusterQueue\":\"%s\"}}' "
    f'"{KUEUE_API}" "$FLEETC_LOCAL_QUEUE" "$FLEETC_NAMESPACE" "$FLEETC_OWNER" "$FLEETC_OWNER_UID" '
    '"$FLEETC_CLUSTER_QUEUE"`\n'
    'out="${TMPDIR:-/tmp}/fleetc-release.out"\n'
    "tries=1\n"
    "while :; do\n"
    '  token=`cat "$sa/token"`\n'
    "  code=`curl -sS -o \"$out\" -w '%{http_code}' --cacert \"$sa/ca.crt\" "
    "-H \"Authorization: Bearer $token\" -H 'Content-Type: application/json' "
    '-X POST --data "$body" "$url" 2>&1`\n'
    "  case $code in\n"
    "    201) printf 'fleetc: %s may start: created LocalQueue %s/%s (ClusterQueue %s)\\n' "
    '"$FLEETC_STAGE" "$FLEETC_NAMESPACE" "$FLEETC_LOCAL_QUEUE" "$FLEETC_CLUSTER_QUEUE"; exit 0 ;;\n'
    "    409) printf 'fleetc: %s may start: LocalQueue %s/%s exists\\n' "
    '"$FLEETC_STAGE" "$FLEETC_NAMESPACE" "$FLEETC_LOCAL_QUEUE"; exit 0 ;;\n'
    "  esac\n"
    '  why=`cat "$out" 2>/dev/null`\n'
    f"  printf 'fleetc: creating LocalQueue %s/%s failed (try %s of {RELEASE_TRIES}): %s %s\\n' "
    '"$FLEETC_NAMESPACE" "$FLEETC_LOCAL_QUEUE" "$tries" "$code" "$why"\n'
    f'  [ "$tries" -ge {RELEASE_TRIES} ] && exit 1\n'
    "  tries=`expr $tries + 1`; sleep 30\n"
    "done\n")


def held(ctx: Context, cluster: Cluster, stage: Stage) -> bool:
    """Whether the stage's Job on ``cluster`` is held back until its upstream completed: a gang
    on a Kueue cluster that waits for at least one completion marker."""
    return cluster.batch_scheduler == KUEUE and stage.is_gang and bool(wait_containers(ctx, stage)[0])


def held_queue(ctx: Context, stage: Stage) -> str:
    """The LocalQueue a held Job names, which its release Job creates: one per run."""
    return f"fleetc-run-{run_id(ctx, stage)}"


def _pod_labels(stage: Stage) -> dict[str, str]:
    return {**stage_labels(stage), ROLE_LABEL: RELEASE_ROLE}


def release_job(ctx: Context, stage: Stage, cluster_queue: str) -> Obj:
    """The CPU-only Job that waits for the stage's upstream markers and then creates its held
    LocalQueue (:func:`held_queue`), pointing at ``cluster_queue``."""
    waits, volumes = wait_containers(ctx, stage)
    env: list[Obj] = [
        {"name": "FLEETC_CLUSTER_QUEUE", "value": cluster_queue},
        {"name": "FLEETC_LOCAL_QUEUE", "value": held_queue(ctx, stage)},
        {"name": "FLEETC_NAMESPACE", "value": stage.namespace},
        {"name": "FLEETC_OWNER", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}}},
        {"name": "FLEETC_OWNER_UID",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{CONTROLLER_UID_LABEL}']"}}},
        {"name": "FLEETC_STAGE", "value": literal(stage.key)},
    ]
    container: Obj = {"name": "fleetc-release", "image": RELEASE_IMAGE,
                      "command": ["sh", "-c", RELEASE_SCRIPT, "fleetc-release"], "env": env,
                      "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                    "limits": {"cpu": "100m", "memory": "64Mi"}}}
    pod: Obj = {"restartPolicy": "Never", "serviceAccountName": RELEASE_ACCOUNT, "initContainers": waits,
                "containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    spec: Obj = {"backoffLimit": 3, "template": {"metadata": {"labels": _pod_labels(stage)}, "spec": pod}}
    meta = {"name": content_name(f"{object_name(stage)}-release", spec, MAX_NAME),
            "namespace": stage.namespace, "labels": _pod_labels(stage),
            "annotations": {"fleetc.dev/source": f"{stage.source.path}#{stage.source.field}.dependencies"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def held_namespaces(ctx: Context, cluster: Cluster, work: Work) -> list[str]:
    """The namespaces of ``cluster`` with held Jobs, sorted."""
    return sorted({stage.namespace for stage, _ in work if held(ctx, cluster, stage)})


def release_access(ctx: Context, namespace: str) -> list[Obj]:
    """The release pods' ServiceAccount, and a Role that may create LocalQueues in
    ``namespace`` and do nothing else, bound to it."""
    source = ctx.pipeline_sources[sorted(ctx.namespace_pipelines[namespace])[0]]
    field = "metadata.namespace"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata(RELEASE_ACCOUNT, namespace, source, field),
            "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["create"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": metadata(RELEASE_ACCOUNT, namespace, source, field),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE_ACCOUNT},
               "subjects": [{"kind": "ServiceAccount", "name": RELEASE_ACCOUNT, "namespace": namespace}]}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(RELEASE_ACCOUNT, namespace, source,
                                                                                   field)}
    return [account, role, binding]


def api_server_egress(namespace: str, platform: Platform) -> Obj:
    """Egress of the release pods of a fenced namespace to the API server (NetworkPolicies add
    up: this one lets through what the jurisdiction's own blocks)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(API_EGRESS_POLICY, namespace, platform.source, "spec.security.dataSovereignty"),
        "spec": {"podSelector": {"matchLabels": {ROLE_LABEL: RELEASE_ROLE}}, "policyTypes": ["Egress"],
                 "egress": [{"ports": [{"protocol": "TCP", "port": port} for port in API_SERVER_PORTS]}]},
    }


def release_infra(ctx: Context, cluster: Cluster, work: Work, fenced: dict[str, Platform]) -> list[Obj]:
    """What the release Jobs of ``cluster`` need: per namespace with held Jobs, its account,
    Role and RoleBinding, and where the namespace is ``fenced`` (by that platform's egress
    policy) the API server egress."""
    found: list[Obj] = []
    for namespace in held_namespaces(ctx, cluster, work):
        found += release_access(ctx, namespace)
        if namespace in fenced:
            found.append(api_server_egress(namespace, fenced[namespace]))
    return found


def holding_warnings(ctx: Context, cluster: Cluster, work: Work) -> list[Diagnostic]:
    """Stages whose pods hold GPUs while they wait for their upstream on ``cluster``: Volcano
    Jobs and Deployments with GPUs and at least one wait (Kueue gangs are held instead)."""
    found = []
    for stage, _ in work:
        if stage.gpus <= 0 or held(ctx, cluster, stage) or (stage.is_gang and cluster.batch_scheduler == KUEUE):
            continue
        waited = [u.name for u in producers(ctx, stage) if unmarked(ctx, u) is None]
        if not waited:
            continue
        if stage.is_gang:
            why = ("its Volcano Job's pods wait in init containers, scheduled with their GPUs (Volcano creates "
                   "every pod of a Job at once; docs/pipelines.md says why no JobFlow); run it on a Kueue "
                   "cluster (batchScheduler: kueue), where it is held back until they completed")
        else:
            why = ("its Deployment's pods wait in init containers, scheduled with their GPUs (a Deployment's "
                   "pods start at once, and nothing holds one back); its replicas are idle until then")
        found.append(warning(stage.source, f"{stage.source.field}.dependencies",
                             f"stage '{stage.name}' holds its GPUs on cluster {cluster.name} while it waits for "
                             f"{', '.join(repr(name) for name in waited)}: {why}"))
    return found
