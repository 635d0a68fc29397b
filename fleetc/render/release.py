"""A dependant takes no GPU while it waits: its Job is held back until its upstream stages
completed, on Kueue by a LocalQueue of its own, on Volcano by a scheduling gate on its pods; a
CPU-only **release** Job waits for the upstream markers and then lets it go. Serving
Deployments still hold their GPUs while they wait, and the compile says so.

A gang stage that waits for upstream completion markers (:func:`fleetc.render.order.producers`)
is rendered **held** (:func:`held`). Its pods wait for nothing themselves: they have no
``fleetc-wait-*`` init containers. Its release Job (:func:`release_job`, :func:`ungate_job`;
``<pipeline>-<stage>-release-<8 hex>``) is a plain ``batch/v1`` Job with no queue name and no
scheduler name (Kueue does not manage it, ``manageJobsWithoutQueueName`` being off by default;
on Volcano clusters the default scheduler places it), that runs at once on a few millicores and
no GPU; its init containers are the waits the stage's pods had
(:func:`fleetc.render.order.wait_containers`), and its one container runs a constant script of
fleetc's once they all passed.

**Kueue** (Fleet ``batchScheduler: kueue``):

* the held Job names a LocalQueue of its own, :func:`held_queue` (``fleetc-run-<run id>``), that
  no manifest renders. Kueue's Job webhook creates the Job suspended whatever its queue
  (``pkg/controller/jobframework/defaults.go`` ``WorkloadShouldBeSuspended``); the Workload
  Kueue makes for it is inadmissible while that LocalQueue is missing (kueue v0.19.2
  ``pkg/controller/core/workload_controller.go`` ``reconcileOnLocalQueueActiveState``: "LocalQueue
  ... is terminating or missing"; ``pkg/cache/queue/manager.go`` ``AddOrUpdateWorkloadWithoutLock``
  returns ``ErrLocalQueueDoesNotExistOrInactive``), so no quota is reserved, the Job stays
  suspended and no pod exists: no GPU is taken, and ``waitForPodsReady`` has nothing to time
  out (``pkg/controller/jobframework/reconciler.go``: a suspended Job is started only once its
  Workload is admitted);
* the release's ``fleetc-release`` container (:data:`RELEASE_SCRIPT`) creates that LocalQueue,
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
* the held Job's name covers its LocalQueue's name, so a Job rendered before (that waited in
  init containers, under the namespace's shared queue) is replaced, never updated: Kueue
  refuses a change of queue name on a running Job (``pkg/controller/jobframework/validation.go``
  ``validateUpdateForQueueName``).

**Volcano** (pod scheduling readiness, ``spec.schedulingGates``, GA in Kubernetes 1.30):

* every task template of the held Volcano Job carries the scheduling gate :data:`GATE` (the
  Job CRD's schema keeps it: volcano v1.15.1 ``config/crd/volcano/bases/
  batch.volcano.sh_jobs.yaml`` has ``schedulingGates`` in the task template). The job
  controller creates each pod from its task's template as it is (volcano v1.15.1
  ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``: a deep copy of the template's
  spec), named ``<job>-<task>-<index>`` (``MakePodName``, ``pkg/controllers/job/helpers/
  helpers.go``), so every pod is created gated. Volcano's scheduler binds no gated pod: a pod
  with scheduling gates is a ``SchGated`` task (``pkg/scheduler/api/job_info.go``
  ``calSchedulingGated``) that ``allocate`` skips (``pkg/scheduler/actions/allocate/
  allocate.go``: "Task ... has external scheduling gate, skip it"), as do ``backfill``,
  ``preempt`` and ``reclaim``; kube-scheduler's ``SchedulingGates`` PreEnqueue plugin does the
  same for any pod (kubernetes ``pkg/scheduler/framework/plugins/schedulinggates``). The
  PodGroup is enqueued, but the gated pods' requests are deducted from what it holds of its
  queue (``job_info.go`` ``DeductSchGatedResources``, used by the ``proportion``, ``capacity``
  and ``overcommit`` plugins), so a waiting Job holds neither a node's GPUs nor its queue's
  (volcano ``docs/design/pod-scheduling-readiness.md``). Volcano's webhooks leave the gate as
  it is (``pkg/webhooks/admission/pods/mutate/mutate_pod.go`` adds a gate of its own only under
  the ``SchedulingGatesQueueAdmission`` feature, after ours);
* the release's ``fleetc-release`` container (:data:`UNGATE_SCRIPT`) removes the gate from each
  of the Job's pods, by name (a JSON patch that tests the gate is the first one and removes
  it, so a pod already released is not written to), every :data:`UNGATE_SECONDS`, until the
  Job is Completed, Failed or Terminated: a restart of the Job (``RestartJob`` on a failed or
  evicted pod) deletes its pods and creates them again from the template, gated again
  (``job_controller_actions.go`` ``killJob``, ``syncJob``), and the release lets them go as it
  did the first ones. Volcano refuses a change of the template (``validateJobUpdate``), so the
  gate is removed from the pods, not the Job;
* the held Job's name covers the stage's run id, so a re-run of an upstream stage is a new
  Volcano Job with a new release Job, as on Kueue.

Per namespace with held Jobs: a ServiceAccount ``fleetc-release`` for the release pods and a
Role bound to it that allows what they do and nothing else: ``create`` of ``localqueues``
(Kueue); ``patch`` of the held Volcano Jobs' pods and ``get`` of those Jobs, each by name
(``resourceNames``). Where the namespace's egress is fenced (``dataSovereignty``), a
NetworkPolicy lets the release pods (label ``fleetc.dev/role: release``) reach the API server,
TCP 443 and 6443 (the ``kubernetes`` Service's port, and the API server's own after the
Service's DNAT, which is what NetworkPolicy implementations see). Only fleetc's own constant
scripts run in those pods; every value they use is an environment variable or an argument.

Serving: a Deployment's pods are created at once and nothing holds them back, so their waits
are init containers that hold the pods' GPUs while the upstream runs; :func:`holding_warnings`
names each such stage (docs/pipelines.md says why).
"""

from __future__ import annotations

from fleetc.errors import Diagnostic
from fleetc.model import KUEUE, Cluster, Platform, Stage
from fleetc.render.common import (
    MAX_NAME,
    RELEASE_ROLE,
    ROLE_LABEL,
    Obj,
    content_name,
    metadata,
    object_name,
    stage_labels,
    warning,
)
from fleetc.render.context import Context, Work
from fleetc.render.order import literal, producers, run_id, unmarked, wait_containers

#: The image of the ``fleetc-release`` container: a shell and curl (Alpine's busybox ``sh``).
RELEASE_IMAGE = "curlimages/curl:8.10.1"
RELEASE_ACCOUNT = "fleetc-release"
#: The API server as the release pods reach it: the ``kubernetes`` Service (443) and, after its
#: DNAT, the API server's own port (6443 on kubeadm and most managed clusters).
API_SERVER_PORTS = (443, 6443)
#: Labels the Job controller puts on every pod of a Job (kubernetes ``pkg/apis/batch/types.go``
#: ``JobNameLabel``, ``ControllerUidLabel``), read through the downward API.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_API = "batch.volcano.sh/v1alpha1"
#: The scheduling gate on a held Volcano Job's pods, which its release removes.
GATE = "fleetc.dev/upstream-completed"
#: How often the release of a held Volcano Job looks for its gated pods and at the Job's phase.
UNGATE_SECONDS = 10
#: The Volcano Job phases after which no pod of the Job is created again: the job controller's
#: finished state (volcano v1.15.1 ``pkg/controllers/job/state/factory.go`` ``NewState``,
#: ``finished.go``: it only kills pods; ``Aborted`` may be resumed).
ENDED_PHASES = ("Completed", "Failed", "Terminated")
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
    '  auth=`cat "$sa/token"`\n'
    "  code=`curl -sS -o \"$out\" -w '%{http_code}' --cacert \"$sa/ca.crt\" "
    "-H \"Authorization: Bearer $auth\" -H 'Content-Type: application/json' "
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


def _api_call(method: str, extra: str) -> str:
    """The script line that sends one request with the pod's service account token and sets
    ``code`` to the HTTP status (or curl's own error), the reply in ``$out``."""
    return ("code=`curl -sS -o \"$out\" -w '%{http_code}' --cacert \"$sa/ca.crt\" "
            f"-H \"Authorization: Bearer $auth\" -X {method} {extra} 2>&1`\n")


_ENDED = "|".join(f"*'\"phase\":\"{phase}\"'*" for phase in ENDED_PHASES)

#: ``fleetc-release`` of a held Volcano Job (``sh -c UNGATE_SCRIPT fleetc-release <pod>...``; the
#: Job in ``FLEETC_JOB``, its namespace in ``FLEETC_NAMESPACE``, the gate in ``FLEETC_GATE``,
#: the stage in ``FLEETC_STAGE``): every :data:`UNGATE_SECONDS`, a JSON patch of each pod that
#: removes the gate if it is the pod's first (``test`` then ``remove``: a pod not there yet
#: answers 404, one without the gate 422, and neither is written to), then a read of the Job
#: (``?pretty=false``: compact JSON whatever the client, kubernetes ``staging/src/k8s.io/
#: apiserver/pkg/endpoints/handlers/negotiation/negotiate.go`` ``isPrettyPrint``) that ends the
#: script once its ``status.state.phase`` is one of :data:`ENDED_PHASES`. Every other answer is
#: logged with the API server's reply; the script goes on.
UNGATE_SCRIPT = (
    "sa=/var/run/secrets/kubernetes.io/serviceaccount\n"
    'pods="https://kubernetes.default.svc/api/v1/namespaces/$FLEETC_NAMESPACE/pods"\n'
    f'job="https://kubernetes.default.svc/apis/{VOLCANO_API}/namespaces/$FLEETC_NAMESPACE/jobs/$FLEETC_JOB"\n'
    "patch=`printf '[{\"op\":\"test\",\"path\":\"/spec/schedulingGates/0/name\",\"value\":\"%s\"},"
    "{\"op\":\"remove\",\"path\":\"/spec/schedulingGates/0\"}]' \"$FLEETC_GATE\"`\n"
    'out="${TMPDIR:-/tmp}/fleetc-release.out"\n'
    "while :; do\n"
    '  auth=`cat "$sa/token"`\n'
    '  for pod in "$@"; do\n'
    "    " + _api_call("PATCH", "-H 'Content-Type: application/json-patch+json' --data \"$patch\" \"$pods/$pod\"")
    + "    case $code in\n"
    "      200) printf 'fleetc: %s may start: removed scheduling gate %s from pod %s/%s\\n' "
    '"$FLEETC_STAGE" "$FLEETC_GATE" "$FLEETC_NAMESPACE" "$pod" ;;\n'
    "      404|422) ;;\n"
    '      *) why=`cat "$out" 2>/dev/null`\n'
    "         printf 'fleetc: removing scheduling gate %s from pod %s/%s failed: %s %s\\n' "
    '"$FLEETC_GATE" "$FLEETC_NAMESPACE" "$pod" "$code" "$why" ;;\n'
    "    esac\n"
    "  done\n"
    "  " + _api_call("GET", '"$job?pretty=false"')
    + '  state=`cat "$out" 2>/dev/null`\n'
    "  case $code in\n"
    "    200) case $state in\n"
    f"           {_ENDED})\n"
    "             printf 'fleetc: %s: Job %s/%s ended; none of its pods is gated again\\n' "
    '"$FLEETC_STAGE" "$FLEETC_NAMESPACE" "$FLEETC_JOB"; exit 0 ;;\n'
    "         esac ;;\n"
    "    404) ;;\n"
    "    *) printf 'fleetc: reading Job %s/%s failed: %s %s\\n' "
    '"$FLEETC_NAMESPACE" "$FLEETC_JOB" "$code" "$state" ;;\n'
    "  esac\n"
    f"  sleep {UNGATE_SECONDS}\n"
    "done\n")


def held(ctx: Context, stage: Stage) -> bool:
    """Whether the stage's Job is held back until its upstream completed: a gang that waits for
    at least one completion marker (on Kueue by its LocalQueue, on Volcano by its pods'
    scheduling gate)."""
    return stage.is_gang and bool(wait_containers(ctx, stage)[0])


def held_queue(ctx: Context, stage: Stage) -> str:
    """The LocalQueue a held Kueue Job names, which its release Job creates: one per run."""
    return f"fleetc-run-{run_id(ctx, stage)}"


def _pod_labels(stage: Stage) -> dict[str, str]:
    return {**stage_labels(stage), ROLE_LABEL: RELEASE_ROLE}


def _release(ctx: Context, stage: Stage, command: list[str], env: list[Obj]) -> Obj:
    """The CPU-only Job that waits for the stage's upstream markers, then runs ``command``."""
    waits, volumes = wait_containers(ctx, stage)
    env = [*env, {"name": "FLEETC_STAGE", "value": literal(stage.key)}]
    container: Obj = {"name": "fleetc-release", "image": RELEASE_IMAGE, "command": command,
                      "env": sorted(env, key=lambda e: str(e["name"])),
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


def release_job(ctx: Context, stage: Stage, cluster_queue: str) -> Obj:
    """The release of a held Kueue Job: it creates the Job's LocalQueue (:func:`held_queue`),
    pointing at ``cluster_queue``, once the stage's upstream completed."""
    env: list[Obj] = [
        {"name": "FLEETC_CLUSTER_QUEUE", "value": cluster_queue},
        {"name": "FLEETC_LOCAL_QUEUE", "value": held_queue(ctx, stage)},
        {"name": "FLEETC_NAMESPACE", "value": stage.namespace},
        {"name": "FLEETC_OWNER", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}}},
        {"name": "FLEETC_OWNER_UID",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{CONTROLLER_UID_LABEL}']"}}},
    ]
    return _release(ctx, stage, ["sh", "-c", RELEASE_SCRIPT, "fleetc-release"], env)


def gated_pods(job: Obj) -> list[str]:
    """The names of a Volcano Job's pods: ``<job>-<task>-<index>`` (volcano v1.15.1
    ``pkg/controllers/job/helpers/helpers.go`` ``MakePodName``)."""
    name = job["metadata"]["name"]
    return [f"{name}-{task['name']}-{index}" for task in job["spec"]["tasks"] for index in range(task["replicas"])]


def ungate_job(ctx: Context, stage: Stage, job: Obj) -> Obj:
    """The release of a held Volcano Job ``job``: it removes the gate from the Job's pods once
    the stage's upstream completed, and again from the pods a restart creates, until the Job
    ended."""
    env: list[Obj] = [{"name": "FLEETC_GATE", "value": GATE}, {"name": "FLEETC_JOB", "value": job["metadata"]["name"]},
                      {"name": "FLEETC_NAMESPACE", "value": stage.namespace}]
    return _release(ctx, stage, ["sh", "-c", UNGATE_SCRIPT, "fleetc-release", *gated_pods(job)], env)


def is_gated(job: Obj) -> bool:
    """Whether a rendered Volcano Job is held by :data:`GATE`."""
    return any({"name": GATE} in task["template"]["spec"].get("schedulingGates", []) for task in job["spec"]["tasks"])


def _rules(kueue: bool, gated: list[Obj]) -> list[Obj]:
    """What the release pods of a namespace do: create LocalQueues (Kueue), or patch the held
    Volcano Jobs' pods and read those Jobs, by name."""
    if kueue:
        return [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["create"]}]
    return [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"],
             "resourceNames": sorted(name for job in gated for name in gated_pods(job))},
            {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["get"],
             "resourceNames": sorted(job["metadata"]["name"] for job in gated)}]


def release_access(ctx: Context, namespace: str, rules: list[Obj]) -> list[Obj]:
    """The release pods' ServiceAccount, and a Role that allows ``rules`` in ``namespace`` and
    nothing else, bound to it."""
    source = ctx.pipeline_sources[sorted(ctx.namespace_pipelines[namespace])[0]]
    field = "metadata.namespace"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata(RELEASE_ACCOUNT, namespace, source, field), "rules": rules}
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


def release_infra(ctx: Context, cluster: Cluster, work: Work, fenced: dict[str, Platform],
                  workloads: list[Obj]) -> list[Obj]:
    """What the release Jobs of ``cluster`` need: per namespace with held Jobs (on Volcano, the
    gated Jobs among ``workloads``), its account, Role and RoleBinding, and where the namespace
    is ``fenced`` (by that platform's egress policy) the API server egress."""
    kueue = cluster.batch_scheduler == KUEUE
    gated: dict[str, list[Obj]] = {}
    for obj in workloads:
        if obj["kind"] == "Job" and obj["apiVersion"] == VOLCANO_API and is_gated(obj):
            gated.setdefault(obj["metadata"]["namespace"], []).append(obj)
    namespaces = {stage.namespace for stage, _ in work if held(ctx, stage)} if kueue else set(gated)
    found: list[Obj] = []
    for namespace in sorted(namespaces):
        found += release_access(ctx, namespace, _rules(kueue, gated.get(namespace, [])))
        if namespace in fenced:
            found.append(api_server_egress(namespace, fenced[namespace]))
    return found


def holding_warnings(ctx: Context, cluster: Cluster, work: Work) -> list[Diagnostic]:
    """Stages whose pods hold GPUs while they wait for their upstream on ``cluster``: serving
    Deployments with GPUs and at least one wait (gangs are held instead)."""
    found = []
    for stage, _ in work:
        if stage.gpus <= 0 or stage.is_gang:
            continue
        waited = [u.name for u in producers(ctx, stage) if unmarked(ctx, u) is None]
        if not waited:
            continue
        why = ("its Deployment's pods wait in init containers, scheduled with their GPUs (its ReplicaSet names "
               "its pods at random and makes new ones at every scale-up, so no release limited to named pods "
               "could ungate them; docs/pipelines.md); its replicas are idle until then")
        found.append(warning(stage.source, f"{stage.source.field}.dependencies",
                             f"stage '{stage.name}' holds its GPUs on cluster {cluster.name} while it waits for "
                             f"{', '.join(repr(name) for name in waited)}: {why}"))
    return found
