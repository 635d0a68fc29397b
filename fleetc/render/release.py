"""A dependant takes no GPU while it waits: its Job is held back until its upstream stages
completed, on Kueue by a LocalQueue of its own, on Volcano by a scheduling gate on its pods; a
CPU-only **release** Job waits for the upstream markers and then lets it go. A serving
Deployment that waits is held by the same gate, let go by a CPU-only **releaser** Deployment.

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

Per namespace with held Jobs or Deployments: a ServiceAccount ``fleetc-release`` for the release
pods and a Role bound to it that allows what they do and nothing else: ``create`` of
``localqueues`` (Kueue); ``patch`` of the held Volcano Jobs' pods and ``get`` of those Jobs,
each by name (``resourceNames``); where a releaser runs, ``list`` and ``patch`` of any pod
(below). Where the namespace's egress is fenced (``dataSovereignty``), a
NetworkPolicy lets the release pods (label ``fleetc.dev/role: release``) reach the API server,
TCP 443 and 6443 (the ``kubernetes`` Service's port, and the API server's own after the
Service's DNAT, which is what NetworkPolicy implementations see). Only fleetc's own constant
scripts run in those pods; every value they use is an environment variable or an argument.

**Serving** (:func:`held_deployment`): a serving stage that waits for anything
(:func:`serving_waits`: its upstream markers, and the DataLoad refreshing the cache it serves
from) renders its Deployment's pod template with :data:`GATE` and no waits, labelled with the
run it serves (:data:`RUN_LABEL`, the stage's run id: a re-run upstream changes the template, a
rollout), the Deployment's selector unchanged (it is immutable). Its ReplicaSet creates every pod
from the template, gated, named at random, at every scale-up, rollout and eviction (kubernetes
``pkg/controller/controller_utils.go`` ``GetPodFromTemplate``, ``pkg/controller/replicaset/
replica_set.go``); kube-scheduler's ``schedulinggates`` PreEnqueue plugin and Volcano's
``calSchedulingGated`` skip them (above). A Deployment has no Kueue queue name, so Kueue does
not manage it (kueue ``pkg/controller/jobs/pod/pod_webhook.go`` ``Default`` gates only a pod
naming a queue unless ``manageJobsWithoutQueueName`` is on, and its pod integration is off by
default). The **releaser** (:func:`releaser`: ``<pipeline>-<stage>-release-<8 hex>``, one
replica, 10m CPU, the account ``fleetc-release``, the waits as its init containers) runs
:data:`RELEASER_SCRIPT`, which lets go the Pending pods of the Deployment's selector and run
label for as long as it runs. Its pods are labelled ``fleetc.dev/role: release`` and the run,
never with the stage's selector, so no Service, PodDisruptionBudget or Deployment of the stage
selects them. Its Role may ``list`` and ``patch`` any pod of the namespace (the names are
random), which the cluster's ValidatingAdmissionPolicy :func:`ungate_only_policy` keeps to
removing :data:`GATE`. A re-run is a new releaser (its name covers its waits) and GitOps
prunes the old one.
"""

from __future__ import annotations

from fleetc.model import KUEUE, Cluster, Platform, Stage
from fleetc.render import workloads
from fleetc.render.common import (
    MANAGED_BY,
    MAX_NAME,
    RELEASE_ROLE,
    ROLE_LABEL,
    Obj,
    content_name,
    dns_label,
    metadata,
    object_name,
    stage_labels,
)
from fleetc.render.context import Context, Work
from fleetc.render.data import cache_ready_wait, data_mounts
from fleetc.render.order import literal, run_id, wait_containers

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


#: The part of both ungate scripts that sends ``$pod`` the JSON patch that removes the gate,
#: logging a release and every answer but 404 (gone) and 422 (free already, or another gate first).
_UNGATE_POD = (
    "    " + _api_call("PATCH", "-H 'Content-Type: application/json-patch+json' --data \"$patch\" \"$pods/$pod\"")
    + "    case $code in\n"
    "      200) printf 'fleetc: %s may start: removed scheduling gate %s from pod %s/%s\\n' "
    '"$FLEETC_STAGE" "$FLEETC_GATE" "$FLEETC_NAMESPACE" "$pod" ;;\n'
    "      404|422) ;;\n"
    '      *) why=`cat "$out" 2>/dev/null`\n'
    "         printf 'fleetc: removing scheduling gate %s from pod %s/%s failed: %s %s\\n' "
    '"$FLEETC_GATE" "$FLEETC_NAMESPACE" "$pod" "$code" "$why" ;;\n'
    "    esac\n")

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
    + _UNGATE_POD
    + "  done\n"
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


#: The label of a held Deployment's pods naming the run they serve (the stage's run id,
#: :func:`fleetc.render.order.run_id`, which covers its upstream stages' runs): a re-run upstream
#: changes the pod template (a rollout) and the pods a releaser lets go are those of its run only.
RUN_LABEL = "fleetc.dev/run"
#: What a releaser lists (URL-encoded query): the held Deployment's Pending pods, compact JSON.
PENDING_QUERY = "fieldSelector=status.phase%3DPending&pretty=false"

#: ``fleetc-release`` of a held serving Deployment (``sh -c RELEASER_SCRIPT fleetc-release``; the
#: label selector of the run's pods, URL-encoded, in ``FLEETC_SELECTOR``, their namespace in
#: ``FLEETC_NAMESPACE``, the gate in ``FLEETC_GATE``, the stage in ``FLEETC_STAGE``): every
#: :data:`UNGATE_SECONDS`, lists the Pending pods of the selector (:data:`PENDING_QUERY`) and sends
#: each the JSON patch :data:`UNGATE_SCRIPT` sends (``test`` that the first gate is fleetc's, then
#: ``remove`` it: a pod already free answers 422, one gone 404, silently); logs each release and
#: every other answer, and never ends: a ReplicaSet names its pods at random and creates new ones
#: from the template, gated, at every scale-up, rollout and eviction (kubernetes
#: ``pkg/controller/replicaset/replica_set.go`` ``manageReplicas``, ``pkg/controller/
#: controller_utils.go`` ``GetPodFromTemplate``: ``generateName`` ``<replicaset>-``).
#:
#: The pod names are read from the list in ``sh``: the API server writes it as compact JSON
#: (``?pretty=false``) with Go's ``encoding/json``, which writes a struct's fields in their
#: order and a list item's empty ``kind`` and ``apiVersion`` not at all (``omitempty``), so every
#: item begins ``{"metadata":{"name":"<name>"`` (``Pod`` is ``TypeMeta`` then ``ObjectMeta``,
#: whose first field is ``Name``: k8s.io/api ``core/v1/types.go``, k8s.io/apimachinery
#: ``pkg/apis/meta/v1/types.go``). Split at commas (no pod name holds one), a piece that ends
#: in that prefix and a DNS name is an item's name; a quote inside a string is escaped
#: (``\"``), so no label or annotation value can look like one, and the list's own
#: ``metadata`` (``ListMeta``) has no name. No ``$(`` and no ``$$`` (:mod:`fleetc.render.order`).
RELEASER_SCRIPT = (
    "sa=/var/run/secrets/kubernetes.io/serviceaccount\n"
    'pods="https://kubernetes.default.svc/api/v1/namespaces/$FLEETC_NAMESPACE/pods"\n'
    "patch=`printf '[{\"op\":\"test\",\"path\":\"/spec/schedulingGates/0/name\",\"value\":\"%s\"},"
    "{\"op\":\"remove\",\"path\":\"/spec/schedulingGates/0\"}]' \"$FLEETC_GATE\"`\n"
    'out="${TMPDIR:-/tmp}/fleetc-release.out"\n'
    "while :; do\n"
    '  auth=`cat "$sa/token"`\n'
    "  " + _api_call("GET", f'"$pods?labelSelector=$FLEETC_SELECTOR&{PENDING_QUERY}"')
    + "  names=\n"
    "  case $code in\n"
    "    200) names=`tr ',' '\\n' < \"$out\" | sed -n 's/.*{\"metadata\":{\"name\":\"\\([a-z0-9.-]*\\)\"$/\\1/p'` ;;\n"
    '    *) why=`cat "$out" 2>/dev/null`\n'
    "       printf 'fleetc: listing the pending pods of %s in %s failed: %s %s\\n' "
    '"$FLEETC_STAGE" "$FLEETC_NAMESPACE" "$code" "$why" ;;\n'
    "  esac\n"
    "  for pod in $names; do\n"
    + _UNGATE_POD
    + "  done\n"
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


def _release_pod(stage: Stage, command: list[str], env: list[Obj], waits: tuple[list[Obj], list[Obj]]) -> Obj:
    """The pod of a release: ``waits`` (init containers and their volumes), then one CPU-only
    container running ``command`` with ``env``, under the release account."""
    containers, volumes = waits
    env = [*env, {"name": "FLEETC_STAGE", "value": literal(stage.key)}]
    container: Obj = {"name": "fleetc-release", "image": RELEASE_IMAGE, "command": command,
                      "env": sorted(env, key=lambda e: str(e["name"])),
                      "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                    "limits": {"cpu": "100m", "memory": "64Mi"}}}
    pod: Obj = {"serviceAccountName": RELEASE_ACCOUNT, "initContainers": containers, "containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    return pod


def _release_meta(stage: Stage, name: str, labels: dict[str, str]) -> Obj:
    return {"name": name, "namespace": stage.namespace, "labels": labels,
            "annotations": {"fleetc.dev/source": f"{stage.source.path}#{stage.source.field}.dependencies"}}


def _release(ctx: Context, stage: Stage, command: list[str], env: list[Obj]) -> Obj:
    """The CPU-only Job that waits for the stage's upstream markers, then runs ``command``."""
    pod = {"restartPolicy": "Never", **_release_pod(stage, command, env, wait_containers(ctx, stage))}
    spec: Obj = {"backoffLimit": 3, "template": {"metadata": {"labels": _pod_labels(stage)}, "spec": pod}}
    meta = _release_meta(stage, content_name(f"{object_name(stage)}-release", spec, MAX_NAME), _pod_labels(stage))
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


def _rules(kueue: bool, gated: list[Obj], serving: bool) -> list[Obj]:
    """What the release pods of a namespace do: create LocalQueues (Kueue); patch the held
    Volcano Jobs' pods and read those Jobs, by name; and where a held Deployment's releaser
    runs (``serving``), list and patch any pod of the namespace (its ReplicaSet names them at
    random), which :func:`ungate_only_policy` narrows to removing fleetc's gate."""
    rules: list[Obj] = []
    if kueue:
        rules.append({"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["create"]})
    if serving:
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]})
    elif gated:
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"],
                      "resourceNames": sorted(name for job in gated for name in gated_pods(job))})
    if gated:
        rules.append({"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["get"],
                      "resourceNames": sorted(job["metadata"]["name"] for job in gated)})
    return rules


def release_access(ctx: Context, namespace: str, rules: list[Obj]) -> list[Obj]:
    """The release pods' ServiceAccount, and a Role that allows ``rules`` in ``namespace`` and
    nothing else, bound to it."""
    source = ctx.pipeline_sources[min(ctx.namespace_pipelines[namespace])]  # the first by name
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
    """What the releases of ``cluster`` need: per namespace with held Jobs (on Volcano, the
    gated Jobs among ``workloads``) or held Deployments (their releasers among ``workloads``),
    its account, Role and RoleBinding, and where the namespace is ``fenced`` (by that
    platform's egress policy) the API server egress; once per cluster with releasers, the
    admission policy that lets their account do nothing to a pod but let it go."""
    kueue = cluster.batch_scheduler == KUEUE
    gated: dict[str, list[Obj]] = {}
    serving: set[str] = set()
    for obj in workloads:
        if obj["kind"] == "Job" and obj["apiVersion"] == VOLCANO_API and is_gated(obj):
            gated.setdefault(obj["metadata"]["namespace"], []).append(obj)
        elif is_releaser(obj):
            serving.add(obj["metadata"]["namespace"])
    namespaces = {stage.namespace for stage, _ in work if held(ctx, stage)} if kueue else set(gated)
    found: list[Obj] = ungate_only_policy() if serving else []
    for namespace in sorted(namespaces | serving):
        held_here = kueue and namespace in namespaces
        found += release_access(ctx, namespace, _rules(held_here, gated.get(namespace, []), namespace in serving))
        if namespace in fenced:
            found.append(api_server_egress(namespace, fenced[namespace]))
    return found


# --------------------------------------------------------------------------- held serving Deployments
def serving_waits(ctx: Context, cluster: Cluster, stage: Stage) -> tuple[list[Obj], list[Obj]]:
    """What a serving stage waits for on ``cluster`` (init containers, and their volumes): its
    upstream stages' markers, then the DataLoad that refreshes the cache it serves from
    (:func:`fleetc.render.data.cache_ready_wait`)."""
    waits, volumes = wait_containers(ctx, stage)
    ready = cache_ready_wait(ctx, cluster.name, stage, data_mounts(ctx, stage))
    if ready is not None:
        waits, volumes = [*waits, ready[0]], [*volumes, *ready[1]]
    return waits, volumes


def serving_held(ctx: Context, cluster: Cluster, stage: Stage) -> bool:
    """Whether a serving stage's Deployment is held on ``cluster``: it waits for anything."""
    return not stage.is_gang and bool(serving_waits(ctx, cluster, stage)[0])


def _releaser_labels(stage: Stage, run: str) -> dict[str, str]:
    """The labels of a releaser's pods: never both ``fleetc.dev/pipeline`` and
    ``fleetc.dev/stage`` (:func:`fleetc.render.common.selector`), so no serving Deployment,
    Service or PodDisruptionBudget selects them."""
    return {**MANAGED_BY, "app.kubernetes.io/part-of": dns_label(stage.pipeline), ROLE_LABEL: RELEASE_ROLE,
            RUN_LABEL: run}


def held_deployment(ctx: Context, cluster: Cluster, stage: Stage) -> list[Obj]:
    """A held serving stage's Deployment, its pods gated (:data:`GATE`) and labelled with the
    run they serve (:data:`RUN_LABEL`) instead of waiting in init containers, and its releaser."""
    deployment = workloads.deployment(ctx, cluster, stage, waiting=False)
    template = deployment["spec"]["template"]
    template["metadata"]["labels"][RUN_LABEL] = run_id(ctx, stage)
    template["spec"]["schedulingGates"] = [{"name": GATE}]
    return [deployment, releaser(ctx, cluster, stage, deployment)]


def run_selector(deployment: Obj) -> str:
    """The label selector, URL-encoded, of the pods of a held Deployment's run: the
    Deployment's selector and the run label of its template."""
    labels = {**deployment["spec"]["selector"]["matchLabels"],
              RUN_LABEL: deployment["spec"]["template"]["metadata"]["labels"][RUN_LABEL]}
    return "%2C".join(f"{key}%3D{value}" for key, value in sorted(labels.items()))


def releaser(ctx: Context, cluster: Cluster, stage: Stage, deployment: Obj) -> Obj:
    """The CPU-only Deployment (one replica) that waits for what the held ``deployment`` waits
    for (:func:`serving_waits`), then lets its run's pods go for as long as it lives
    (:data:`RELEASER_SCRIPT`). Its name covers the waits (the upstream run ids) and the run it
    lets go: a re-run is a new releaser, and the old one is pruned."""
    run = deployment["spec"]["template"]["metadata"]["labels"][RUN_LABEL]
    env: list[Obj] = [{"name": "FLEETC_GATE", "value": GATE}, {"name": "FLEETC_NAMESPACE", "value": stage.namespace},
                      {"name": "FLEETC_SELECTOR", "value": run_selector(deployment)}]
    pod = _release_pod(stage, ["sh", "-c", RELEASER_SCRIPT, "fleetc-release"], env, serving_waits(ctx, cluster, stage))
    labels = _releaser_labels(stage, run)
    spec: Obj = {"replicas": 1, "selector": {"matchLabels": {ROLE_LABEL: RELEASE_ROLE, RUN_LABEL: run}},
                 "template": {"metadata": {"labels": labels}, "spec": pod}}
    # the Deployment itself is the stage's (labelled so); no selector reads an object's labels
    meta = _release_meta(stage, content_name(f"{object_name(stage)}-release", spec, MAX_NAME),
                         {**stage_labels(stage), ROLE_LABEL: RELEASE_ROLE, RUN_LABEL: run})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def is_releaser(obj: Obj) -> bool:
    """Whether a rendered object is the releaser of a held Deployment."""
    return bool(obj["kind"] == "Deployment"
                and obj["spec"]["template"]["metadata"]["labels"].get(ROLE_LABEL) == RELEASE_ROLE)


def _unchanged(path: str) -> str:
    """CEL: the field at ``path`` (below ``object``) is as it was, also when absent."""
    new, old = f"object.{path}", f"oldObject.{path}"
    return f"has({new}) == has({old}) && (!has({new}) || {new} == {old})"


#: What a pod update may change (kubernetes ``pkg/apis/core/validation/validation.go``
#: ``ValidatePodUpdate``, 1.30 to 1.33: the containers' and init containers' images,
#: ``activeDeadlineSeconds``, ``terminationGracePeriodSeconds``, added tolerations, and while
#: the pod is gated its node selector and affinity, KEP-3838; any metadata but the name), each
#: held as it was by :func:`ungate_only_policy`; only ``schedulingGates`` may lose fleetc's gate.
POD_FIELDS_KEPT = (
    "spec.containers", "spec.initContainers", "spec.tolerations", "spec.activeDeadlineSeconds",
    "spec.terminationGracePeriodSeconds", "spec.nodeSelector", "spec.affinity", "metadata.labels",
    "metadata.annotations", "metadata.ownerReferences", "metadata.finalizers")
UNGATE_ONLY_POLICY = "fleetc-release-ungate-only"
_GATES = "spec.schedulingGates"


def ungate_only_policy() -> list[Obj]:
    """A ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, GA in Kubernetes 1.30
    as scheduling gates) and its binding: an update of a pod by a namespace's ``fleetc-release``
    account (``matchConditions``) is denied (``Deny``; ``failurePolicy: Fail``: also when an
    expression cannot be evaluated) unless it changes nothing of :data:`POD_FIELDS_KEPT` and its
    ``schedulingGates`` are the old ones without :data:`GATE`."""
    gates = (f"(has(object.{_GATES}) ? object.{_GATES} : []) == (has(oldObject.{_GATES}) ? "
             f"oldObject.{_GATES}.filter(g, g.name != '{GATE}') : [])")
    validations = [{"expression": gates, "message": f"fleetc-release may only remove the scheduling gate {GATE}"}]
    validations += [{"expression": _unchanged(path), "message": f"fleetc-release may not change a pod's {path}"}
                     for path in POD_FIELDS_KEPT]
    user = f"'system:serviceaccount:' + request.namespace + ':{RELEASE_ACCOUNT}'"
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": metadata(UNGATE_ONLY_POLICY),
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["UPDATE"], "resources": ["pods"]}]},
                       "matchConditions": [{"name": "fleetc-release",
                                            "expression": f"request.userInfo.username == {user}"}],
                       "validations": validations}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": metadata(UNGATE_ONLY_POLICY),
               "spec": {"policyName": UNGATE_ONLY_POLICY, "validationActions": ["Deny"]}}
    return [policy, binding]
