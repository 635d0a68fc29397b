"""A model of how Flux and Argo CD apply fleetc's output to a cluster, and of the admission
rules that decide whether an object gets in.

It is small on purpose: it keeps only what decides whether a fresh cluster converges in one
pass and whether a later commit converges too. Each rule is the upstream behaviour it is named
after:

* the API server (:class:`Cluster`): a kind must be served (its CRD installed) and a
  namespaced object's Namespace must exist, on a dry run as on a real apply;
* Volcano's admission webhooks (volcano v1.15.1): on CREATE only, the mutating one fills the
  Job's defaults (:func:`volcano_create_defaults`, ``pkg/webhooks/admission/jobs/mutate/
  mutate_job.go``); the validating one (``pkg/webhooks/admission/jobs/validate/admit_job.go``)
  refuses a Job whose ``spec.queue`` does not exist, on dry runs too (the webhook is
  registered ``sideEffects: NoneOnDryRun``), and any update that changes more than
  ``minAvailable``, ``priorityClassName`` and the tasks' ``replicas``/``minAvailable``
  (:func:`validate_volcano_job_update`);
* server-side apply (kubernetes-sigs/structured-merge-diff v4 ``merge``; :func:`apply_merge`):
  an update is the live object with the applied fields overlaid and the fields the applier
  set before but no longer sets removed; a map merges key by key, a ``listType: map`` list
  item by item by its keys, and any other list (``listType: atomic``, which is every list of
  a CRD schema that names no list type, Volcano's ``spec.tasks`` among them) is replaced
  whole. So a field a webhook filled on create inside an atomic list is gone after a
  re-apply that does not set it;
* Kueue (kubernetes-sigs/kueue): its Job webhook creates every ``batch/v1`` Job that names a
  queue (``kueue.x-k8s.io/queue-name``) suspended and refuses none for a missing LocalQueue
  (``pkg/controller/jobs/job/job_webhook.go`` ``Default``, ``pkg/controller/jobframework``
  ``WorkloadShouldBeSuspended``); its controller unsuspends a Job once its LocalQueue, that
  queue's ClusterQueue and the ClusterQueue's ResourceFlavors exist (:meth:`Cluster.kueue_admit`;
  quota is :mod:`support.runtime`'s). The API server refuses a change to a Job's pod template,
  completions or completion mode (``pkg/apis/batch/validation``); a field the manifest does not
  set, such as ``suspend``, keeps what the controllers made of it (server-side apply and
  ``kubectl apply`` alike leave fields they do not own);
* Flux's kustomize-controller (:func:`flux_reconcile`): per Kustomization, the objects of
  ``kustomize build <path>``; CRDs, Namespaces, ClusterRoles and ``*Class`` kinds applied
  first, then every other object dry-run together and applied only if all pass (fluxcd/pkg
  ``ssa/manager_apply.go`` ``ApplyAllStaged``, ``ssa/utils/is.go``), then what left the
  inventory pruned (``prune: true``) but for objects annotated ``kustomize.toolkit.fluxcd.io/prune:
  disabled`` (``ssa/manager_delete.go``). A Kustomization runs only once every one it
  ``dependsOn`` is Ready; with ``wait: true`` it is Ready only once every object it applied is
  Current (kstatus), which ``healthCheckExprs`` may redefine per kind; a missing path fails it
  and leaves everything as it was;
* Kurator's fleet manager (:func:`kurator_kustomizations`): a Kurator ``Application`` becomes,
  per sync policy and per member cluster its destination selects, a Flux Kustomization that
  applies the policy's path to that member; Flux then reconciles those as above;
* Argo CD's gitops-engine (:func:`argo_sync`): a dry run in which every kind must be served,
  but for objects with the sync option ``SkipDryRunOnMissingResource=true``
  (``pkg/sync/sync_context.go``; admission is not modelled there), then
  wave by wave (``argocd.argoproj.io/sync-wave``, default 0), in each wave the prunes first,
  then the applies ordered by kind (``kindOrder``, unknown kinds last) and name
  (``pkg/sync/sync_tasks.go``, ``pkg/sync/sync_context.go``); the first refused apply fails
  the sync and later waves do not run; a prune of an object with the sync option
  ``Prune=false`` is skipped. Deleting a Namespace deletes everything in it. An object is
  OutOfSync when applying its manifest would change the live object (:func:`drifted`: gitops-engine ``pkg/diff``
  ``ThreeWayDiff``, a JSON merge patch for custom resources, whose lists are replaced whole).

The cluster starts with the platform fleetc's output needs installed: the CRDs of Volcano,
Kueue, Fluid, Flux and Argo CD and the namespaces of those and of the GPU Operator
(:data:`PREINSTALLED_NAMESPACES`).
"""

from __future__ import annotations

import copy
import fnmatch
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .yamlread import manifest

Obj = dict[str, Any]
#: (apiVersion group, kind, namespace or "", name)
Key = tuple[str, str, str, str]

PREINSTALLED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "flux-system", "argocd",
                                     "gpu-operator", "volcano-system", "kueue-system", "fluid-system"})
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
ARGO_SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
FLUX_PRUNE_DISABLED = ("kustomize.toolkit.fluxcd.io/prune", "disabled")

#: Kinds the model's API server serves: (group, kind) -> namespaced.
SERVED: dict[tuple[str, str], bool] = {
    ("", "Namespace"): False, ("", "ConfigMap"): True, ("", "Secret"): True, ("", "Service"): True,
    ("", "ServiceAccount"): True, ("rbac.authorization.k8s.io", "Role"): True,
    ("rbac.authorization.k8s.io", "RoleBinding"): True,
    ("apps", "Deployment"): True, ("autoscaling", "HorizontalPodAutoscaler"): True,
    ("policy", "PodDisruptionBudget"): True, ("networking.k8s.io", "NetworkPolicy"): True,
    ("scheduling.k8s.io", "PriorityClass"): False,
    ("batch.volcano.sh", "Job"): True, ("scheduling.volcano.sh", "Queue"): False,
    ("batch", "Job"): True, ("kueue.x-k8s.io", "ResourceFlavor"): False,
    ("kueue.x-k8s.io", "ClusterQueue"): False, ("kueue.x-k8s.io", "LocalQueue"): True,
    ("data.fluid.io", "Dataset"): True, ("data.fluid.io", "AlluxioRuntime"): True,
    ("data.fluid.io", "DataLoad"): True, ("data.fluid.io", "DataProcess"): True,
    ("source.toolkit.fluxcd.io", "GitRepository"): True,
    ("kustomize.toolkit.fluxcd.io", "Kustomization"): True,
    ("argoproj.io", "ApplicationSet"): True,
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): False,
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): False,
}

#: gitops-engine ``pkg/sync/sync_tasks.go`` ``kindOrder`` (from Helm's kind sorter); kinds not
#: listed sort after all of these.
ARGO_KIND_ORDER = (
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
    "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
    "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
    "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
    "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "Ingress", "APIService",
)

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _create_defaults(k: Key, obj: Obj) -> Obj:
    """What the mutating webhooks make of ``obj`` on create: Kueue's Job webhook starts a Job
    that names a queue suspended; Volcano's fills a Job's defaults (:func:`volcano_create_defaults`)."""
    if k[:2] == ("batch", "Job") and KUEUE_QUEUE_LABEL in obj["metadata"].get("labels", {}):
        return {**obj, "spec": {**obj["spec"], "suspend": True}}
    if k[:2] == VOLCANO_JOB:
        return volcano_create_defaults(obj)
    return obj


# --------------------------------------------------------------------------- Volcano's webhooks
VOLCANO_JOB = ("batch.volcano.sh", "Job")
#: mutate_job.go ``DefaultQueue``, ``defaultSchedulerName``, ``defaultMaxRetry``; volcano-sh/apis
#: ``pkg/apis/batch/v1alpha1`` ``DefaultTaskSpec``.
VOLCANO_DEFAULT_QUEUE = "default"
VOLCANO_DEFAULT_SCHEDULER = "volcano"
VOLCANO_DEFAULT_MAX_RETRY = 3
VOLCANO_DEFAULT_TASK = "default"


def volcano_create_defaults(obj: Obj) -> Obj:
    """What ``mutatejob.volcano.sh`` makes of a Job on CREATE (its only operation), ported from
    volcano v1.15.1 ``pkg/webhooks/admission/jobs/mutate/mutate_job.go`` ``createPatch``: the
    queue, scheduler and ``maxRetry`` when unset (zero); per task (``mutateSpec``) a name
    ``default<index>``, ``dnsPolicy: ClusterFirstWithHostNet`` on host networking,
    ``minAvailable`` = its replicas and ``maxRetry`` = 3 when unset; the Job's
    ``minAvailable`` as the tasks' sum when unset; and the ``svc`` plugin beside ``pytorch``,
    ``tensorflow`` or ``mpi`` (``ssh`` beside ``mpi``)."""
    job = copy.deepcopy(obj)
    spec = job["spec"]
    if not spec.get("queue"):
        spec["queue"] = VOLCANO_DEFAULT_QUEUE
    if not spec.get("schedulerName"):
        spec["schedulerName"] = VOLCANO_DEFAULT_SCHEDULER
    if not spec.get("maxRetry"):
        spec["maxRetry"] = VOLCANO_DEFAULT_MAX_RETRY
    for index, task in enumerate(spec.get("tasks", [])):
        if not task.get("name"):
            task["name"] = f"{VOLCANO_DEFAULT_TASK}{index}"
        pod = task.get("template", {}).get("spec", {})
        if pod.get("hostNetwork") and not pod.get("dnsPolicy"):
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        if task.get("minAvailable") is None:
            task["minAvailable"] = task.get("replicas", 0)
        if not task.get("maxRetry"):
            task["maxRetry"] = VOLCANO_DEFAULT_MAX_RETRY
    if not spec.get("minAvailable"):
        spec["minAvailable"] = sum(task["minAvailable"] for task in spec.get("tasks", []))
    plugins = spec.get("plugins")
    if plugins is not None:
        if {"tensorflow", "mpi", "pytorch"} & set(plugins):
            plugins.setdefault("svc", [])
        if "mpi" in plugins:
            plugins.setdefault("ssh", [])
    return job


def validate_volcano_job_update(old: Obj, new: Obj) -> str | None:
    """Why ``validatejob.volcano.sh`` refuses to update ``old`` to ``new`` (None: it admits it),
    ported from volcano v1.15.1 ``pkg/webhooks/admission/jobs/validate/admit_job.go``
    ``validateJobUpdate``: replicas and minAvailable bounds, no task added or removed, and
    nothing under spec changed but ``minAvailable``, ``priorityClassName`` and each task's
    ``replicas`` and ``minAvailable`` (``apiequality.Semantic.DeepEqual`` of the rest; an unset
    field and its zero value are the same Go value)."""
    tasks = new["spec"].get("tasks", [])
    for task in tasks:
        if task.get("replicas", 0) < 0:
            return f"'replicas' must be >= 0 in task: {task.get('name')}"
        if task.get("minAvailable") is not None and task["minAvailable"] > task.get("replicas", 0):
            return f"'minAvailable' must be <= 'replicas' in task: {task.get('name')};"
    if new["spec"].get("minAvailable", 0) > sum(task.get("replicas", 0) for task in tasks):
        return "job 'minAvailable' must not be greater than total replicas"
    if len(old["spec"].get("tasks", [])) != len(tasks):
        return "job updates may not add or remove tasks"
    mutable = ("minAvailable", "priorityClassName")
    before = {k: v for k, v in old["spec"].items() if k not in mutable}
    after = {k: v for k, v in new["spec"].items() if k not in mutable}
    before["tasks"] = [_without(t, "replicas", "minAvailable") for t in old["spec"].get("tasks", [])]
    after["tasks"] = [_without(t, "replicas", "minAvailable") for t in tasks]
    if _go_value(before) != _go_value(after):
        return "job updates may not change fields other than `minAvailable`, `tasks[*].replicas under spec`"
    return None


def _without(obj: Obj, *names: str) -> Obj:
    return {k: v for k, v in obj.items() if k not in names}


def _go_value(value: Any) -> Any:
    """``value`` as Go would compare it after decoding: zero values (0, "", false, empty lists
    and maps, null) are the same as absent fields."""
    if isinstance(value, dict):
        found = {k: _go_value(v) for k, v in value.items()}
        return {k: v for k, v in found.items() if v not in (None, 0, "", False, [], {})}
    if isinstance(value, list):
        return [_go_value(item) for item in value]
    return value


# --------------------------------------------------------------------------- server-side apply
#: Lists of built-in kinds that merge item by item (``+listType=map`` in kubernetes
#: ``staging/src/k8s.io/api/core/v1/types.go``; ``patchMergeKey`` for strategic merge patch),
#: by their keys. Every other list is atomic, and every list of a custom resource is (its CRD
#: names no list type: structured-merge-diff's default for a list is atomic).
BUILTIN_MAP_LISTS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "volumes": ("name",), "env": ("name",),
    "volumeMounts": ("mountPath",), "ports": ("containerPort", "protocol"),  # a Service's: port, protocol
}


def apply_merge(live: Any, applied: Any, before: Any, builtin: bool) -> Any:
    """The object server-side apply stores (structured-merge-diff v4 ``merge``, for one
    applier): ``live`` with every field of ``applied`` set, and the fields of ``before`` (what
    this applier applied last time, so owns) that ``applied`` no longer sets removed. Maps merge
    by key; map lists of built-in kinds (:data:`BUILTIN_MAP_LISTS`) by their keys; any other
    list, and any scalar, is replaced by the applied one."""
    return _merge(live, applied, before, builtin, "")


def _merge(live: Any, applied: Any, before: Any, builtin: bool, name: str) -> Any:
    if isinstance(applied, dict) and isinstance(live, dict):
        owned = before if isinstance(before, dict) else {}
        merged = {k: v for k, v in live.items() if k in applied or k not in owned}
        for k, v in applied.items():
            merged[k] = _merge(live.get(k), v, owned.get(k), builtin, k) if k in live else v
        return merged
    keys = BUILTIN_MAP_LISTS.get(name) if builtin else None
    if keys is not None and isinstance(applied, list) and isinstance(live, list):
        def ident(item: Any) -> tuple[Any, ...]:
            names = keys if "containerPort" in item or name != "ports" else ("port", "protocol")
            return tuple(item.get(k, "TCP" if k == "protocol" else None) for k in names)
        owned_items = {ident(item): item for item in before or []}
        applied_items = {ident(item): item for item in applied}
        merged_list = [item for item in live if ident(item) in applied_items or ident(item) not in owned_items]
        live_items = {ident(item): item for item in merged_list}
        result = [_merge(live_items[i], item, owned_items.get(i), builtin, "") if i in live_items else item
                  for i, item in applied_items.items()]
        return result + [item for item in merged_list if ident(item) not in applied_items]
    return applied


def is_builtin(k: Key) -> bool:
    """Whether the kind is the API server's own (its group has no dot, or is a ``*.k8s.io`` one)."""
    return "." not in k[0] or k[0].endswith(".k8s.io")


class Refused(Exception):
    """The API server (or an admission webhook) refused an object."""


def group(obj: Obj) -> str:
    api = obj["apiVersion"]
    return api.rpartition("/")[0] if "/" in api else ""


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (group(obj), obj["kind"], meta.get("namespace", ""), meta["name"])


def describe(k: Key) -> str:
    grp, kind, namespace, name = k
    return f"{kind}.{grp or 'core'} {namespace + '/' if namespace else ''}{name}"


# --------------------------------------------------------------------------- the cluster
@dataclass
class Live:
    obj: Obj
    uid: int  # a new uid is a new object: a Job that kept its uid was never restarted
    applied: Obj = field(default_factory=dict)  # what the engine applied last: the fields it owns


@dataclass
class Cluster:
    objects: dict[Key, Live] = field(default_factory=dict)
    _uids: int = 0
    #: The namespaces the cluster has before any sync (a cluster without the GPU Operator has
    #: no ``gpu-operator``).
    preinstalled: frozenset[str] = PREINSTALLED_NAMESPACES
    #: (group, kind) of :data:`SERVED` whose CRDs are not served yet.
    unserved: frozenset[tuple[str, str]] = frozenset()
    #: Objects whose status says they are not ready (a Fluid Dataset after a failed health
    #: check of its runtime): kstatus reads them as not Current.
    unhealthy: set[Key] = field(default_factory=set)

    def serves(self, grp: str, kind: str) -> bool:
        return (grp, kind) in SERVED and (grp, kind) not in self.unserved

    def namespaces(self) -> set[str]:
        return self.preinstalled | {k[3] for k in self.objects if k[:2] == ("", "Namespace")}

    def apply(self, obj: Obj, dry_run: bool = False) -> None:
        """Create ``obj`` (with the mutating webhooks' create-time defaults) or update the live
        object with it (:func:`apply_merge`), or raise :class:`Refused` saying why not."""
        k = key(obj)
        served = SERVED.get(k[:2])
        if served is None or not self.serves(*k[:2]):
            raise Refused(f"{describe(k)}: no matches for kind {k[1]!r} (CRD not installed)")
        if served and k[2] not in self.namespaces():
            raise Refused(f"{describe(k)}: namespaces {k[2]!r} not found")
        live = self.objects.get(k)
        if live is None:
            stored = _create_defaults(k, obj)
        else:
            stored = apply_merge(live.obj, obj, live.applied, is_builtin(k))
        self._admit(k, stored, live)
        if dry_run:
            return
        if live is None:
            self._uids += 1
            self.objects[k] = Live(stored, self._uids, obj)
        else:
            live.obj, live.applied = stored, obj

    def _admit(self, k: Key, obj: Obj, live: Live | None) -> None:
        if k[:2] == ("batch", "Job"):
            for name in ("template", "completions", "completionMode"):
                if live is not None and live.obj["spec"].get(name) != obj["spec"].get(name):
                    raise Refused(f"{describe(k)}: Job.batch is invalid: spec.{name}: field is immutable")
            return
        if k[:2] != VOLCANO_JOB:
            return
        if live is not None:
            problem = validate_volcano_job_update(live.obj, obj)
            if problem is not None:
                raise Refused(f"{describe(k)}: admission webhook validatejob.volcano.sh denied the request: "
                              f"{problem}")
            return
        queue = obj["spec"]["queue"]
        if ("scheduling.volcano.sh", "Queue", "", queue) not in self.objects:
            raise Refused(f"{describe(k)}: admission webhook validatejob.volcano.sh denied the request: "
                          f"unable to find job queue: {queue}")

    def release(self) -> list[Key]:
        """The release Jobs (:mod:`fleetc.render.release`) run, their upstream stages taken as
        completed: each creates the LocalQueue its ``fleetc-release`` container names
        (:func:`support.runtime.release_of`), owned by the Job (an ownerReference with its uid),
        unless it exists. The LocalQueues created."""
        from .runtime import release_of  # the kubelet's view of the container is runtime's

        created = []
        for k, live in sorted(self.objects.items()):
            found = release_of("", live.obj) if k[:2] == ("batch", "Job") else None
            if found is None:
                continue
            queue = found.local_queue()
            queue["metadata"]["ownerReferences"][0]["uid"] = str(live.uid)
            made = key(queue)
            if made not in self.objects:
                self._uids += 1
                self.objects[made] = Live(queue, self._uids)
                created.append(made)
        return created

    def kueue_admit(self) -> list[Key]:
        """Kueue's controller: every suspended Job whose queue chain exists is started
        (unsuspended); the Jobs it started."""
        started = []
        for k, live in sorted(self.objects.items()):
            if k[:2] != ("batch", "Job") or not live.obj["spec"].get("suspend"):
                continue
            if self.kueue_queue_problem(k[2], live.obj) is None:
                live.obj = {**live.obj, "spec": {**live.obj["spec"], "suspend": False}}
                started.append(k)
        return started

    def kueue_queue_problem(self, namespace: str, job: Obj) -> str | None:
        """Why Kueue cannot admit ``job`` on this cluster now (None: its queues all exist)."""
        name = job["metadata"].get("labels", {}).get(KUEUE_QUEUE_LABEL)
        local = self.objects.get(("kueue.x-k8s.io", "LocalQueue", namespace, name or ""))
        if local is None:
            return f"LocalQueue {namespace}/{name} does not exist"
        queue = local.obj["spec"]["clusterQueue"]
        cluster_queue = self.objects.get(("kueue.x-k8s.io", "ClusterQueue", "", queue))
        if cluster_queue is None:
            return f"ClusterQueue {queue} does not exist"
        for group in cluster_queue.obj["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                if ("kueue.x-k8s.io", "ResourceFlavor", "", flavor["name"]) not in self.objects:
                    return f"ResourceFlavor {flavor['name']} of ClusterQueue {queue} does not exist"
        return None

    def delete(self, k: Key) -> None:
        """Delete the object and, as the garbage collector does (kubernetes
        ``pkg/controller/garbagecollector``), every object whose ownerReferences name its uid;
        a Namespace takes everything in it along (the namespace controller, kubernetes
        ``pkg/controller/namespace/deletion``), whoever put it there."""
        gone = self.objects.pop(k, None)
        if gone is not None:  # the garbage collector: what it owned goes with it
            for other, live in list(self.objects.items()):
                owners = live.obj["metadata"].get("ownerReferences", [])
                if other in self.objects and any(o.get("uid") == str(gone.uid) for o in owners):
                    self.delete(other)
        if k[:2] == ("", "Namespace"):
            for inside in [other for other in self.objects if other[2] == k[3]]:
                del self.objects[inside]

    def uids(self) -> dict[Key, int]:
        return {k: live.uid for k, live in self.objects.items()}


# --------------------------------------------------------------------------- kustomize
def kustomize_build(files: Mapping[str, str], folder: str) -> list[Obj]:
    """The objects ``kustomize build folder`` yields from ``files`` (relative path -> text):
    its kustomization's ``resources``, folders recursively. A missing folder raises
    FileNotFoundError, as kustomize fails."""
    folder = posixpath.normpath(folder)
    index = f"{folder}/kustomization.yaml"
    if index not in files:
        raise FileNotFoundError(f"{folder}: no kustomization.yaml")
    objects: list[Obj] = []
    for resource in manifest(files[index])["resources"]:
        path = posixpath.normpath(f"{folder}/{resource}")
        if f"{path}/kustomization.yaml" in files:
            objects += kustomize_build(files, path)
        elif path in files:
            objects.append(manifest(files[path]))
        else:
            raise FileNotFoundError(f"{folder}: resource {resource} not found")
    return objects


# --------------------------------------------------------------------------- Flux
def is_flux_stage_one(obj: Obj) -> bool:
    """fluxcd/pkg ``ssa/utils/is.go``: cluster definitions and ``*Class`` kinds go first."""
    kind = obj["kind"]
    return kind in ("CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding") \
        or kind.endswith("Class")


@dataclass
class FluxState:
    """What Flux keeps between reconciliations: each Kustomization's inventory and readiness."""

    inventory: dict[str, set[Key]] = field(default_factory=dict)
    ready: dict[str, bool] = field(default_factory=dict)


def flux_reconcile(cluster: Cluster, files: Mapping[str, str], kustomizations: list[Obj],
                   state: FluxState, repository_folder: str) -> dict[str, str]:
    """One pass: every Kustomization reconciled once, dependencies first. Returns the failures
    (Kustomization name -> message); empty when every one is Ready."""
    failures: dict[str, str] = {}
    for kustomization in _dependency_order(kustomizations):
        name = kustomization["metadata"]["name"]
        spec = kustomization["spec"]
        waiting = [d["name"] for d in spec.get("dependsOn", []) if not state.ready.get(d["name"])]
        if waiting:
            state.ready[name] = False
            failures[name] = f"dependency not ready: {', '.join(waiting)}"
            continue
        path = posixpath.relpath(posixpath.normpath(spec["path"]), repository_folder)
        try:
            objects = kustomize_build(files, path)
            _flux_apply(cluster, objects)
        except (FileNotFoundError, Refused) as err:
            state.ready[name] = False
            failures[name] = str(err)
            continue
        applied = {key(obj) for obj in objects}
        if spec.get("wait") and (sick := sorted(k for k in applied if not _flux_healthy(cluster, k, spec))):
            failures[name] = f"health check failed: {', '.join(describe(k) for k in sick)} not Current"
        if spec.get("prune"):
            for stale in sorted(state.inventory.get(name, set()) - applied):
                if stale in cluster.objects and not _flux_prune_disabled(cluster.objects[stale].obj):
                    cluster.delete(stale)
        state.inventory[name] = applied
        state.ready[name] = name not in failures
    return failures


def _flux_healthy(cluster: Cluster, k: Key, spec: Obj) -> bool:
    """Whether ``wait: true`` counts the object Current: kstatus (fluxcd/cli-utils
    ``pkg/kstatus/status``) reads a not-ready status as InProgress, unless one of the
    Kustomization's ``healthCheckExprs`` names the kind with ``current: "true"`` (the only CEL
    expression this model evaluates)."""
    for expr in spec.get("healthCheckExprs", []):
        if (expr["apiVersion"].rpartition("/")[0], expr["kind"]) == k[:2] and expr["current"] == "true":
            return True
    return k not in cluster.unhealthy


def _flux_prune_disabled(obj: Obj) -> bool:
    """fluxcd/pkg ``ssa/manager_delete.go`` ``DeleteAll`` skips an object whose annotations or
    labels hold an exclusion; kustomize-controller passes ``kustomize.toolkit.fluxcd.io/prune:
    disabled``."""
    meta = obj["metadata"]
    return FLUX_PRUNE_DISABLED in (*meta.get("annotations", {}).items(), *meta.get("labels", {}).items())


def _flux_apply(cluster: Cluster, objects: list[Obj]) -> None:
    first = [obj for obj in objects if is_flux_stage_one(obj)]
    rest = [obj for obj in objects if not is_flux_stage_one(obj)]
    for obj in first:
        cluster.apply(obj)
    for obj in rest:  # the dry run of all the others, before any of them is applied
        cluster.apply(obj, dry_run=True)
    for obj in rest:
        cluster.apply(obj)


def _dependency_order(kustomizations: list[Obj]) -> list[Obj]:
    by_name = {k["metadata"]["name"]: k for k in kustomizations}
    done: list[Obj] = []

    def visit(name: str, seen: tuple[str, ...]) -> None:
        if name in seen:
            raise AssertionError(f"dependsOn cycle: {' -> '.join((*seen, name))}")
        if name not in by_name:
            return  # a missing dependency is never Ready: flux_reconcile says so
        kustomization = by_name[name]
        if kustomization in done:
            return
        for dependency in kustomization["spec"].get("dependsOn", []):
            visit(dependency["name"], (*seen, name))
        done.append(kustomization)

    for name in sorted(by_name):
        visit(name, ())
    return done


# --------------------------------------------------------------------------- Kurator
#: The label Kurator's fleet manager puts on every cluster object of a Fleet (kurator-dev/kurator
#: v0.6.0 ``pkg/fleet-manager/fleet.go`` ``FleetLabel``, set in ``clusters.go``).
KURATOR_FLEET_LABEL = "fleet.kurator.dev/fleet-name"
#: What of a sync policy's ``kustomization`` Kurator copies into the Flux Kustomization it makes.
_KURATOR_COPIED = ("dependsOn", "interval", "retryInterval", "path", "prune", "patches", "images",
                   "suspend", "targetNamespace", "timeout", "force", "components", "commonMetadata")


@dataclass(frozen=True)
class Member:
    """A cluster object (``AttachedCluster`` or ``Cluster``) a Kurator Fleet lists."""

    name: str
    kind: str
    labels: Mapping[str, str]


def kurator_kustomizations(application: Obj, members: list[Member]) -> list[Obj]:
    """The Flux Kustomizations Kurator's fleet manager makes for ``application``, ported from
    kurator-dev/kurator v0.6.0 ``pkg/fleet-manager/application/helper.go``: per sync policy
    (named, or ``<application>-<index>``: ``generatePolicyName``) and per member its
    destination's ``clusterSelector.matchLabels`` selects (every key present with an equal
    value, no selector selects all: ``doLabelsMatchSelector``), a Kustomization named
    ``<policy>-<kind>-<cluster>`` in lower case cut to 63 characters
    (``generatePolicyResourceName``), in the Application's namespace, with the policy's fields
    copied (``syncKustomizationForCluster``), its source the Application's GitRepository and its
    target the member's kubeconfig Secret (here: named after the member). Helm policies and
    rollouts are not modelled: fleetc renders none."""
    meta, spec = application["metadata"], application["spec"]
    made = []
    for index, policy in enumerate(spec["syncPolicies"]):
        name = policy.get("name") or f"{meta['name']}-{index}"
        destination = policy.get("destination") or spec["destination"]
        selector = (destination.get("clusterSelector") or {}).get("matchLabels") or {}
        for member in members:
            if any(member.labels.get(label) != value for label, value in selector.items()):
                continue
            fields = {f: policy["kustomization"][f] for f in _KURATOR_COPIED if f in policy["kustomization"]}
            made.append({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1beta2", "kind": "Kustomization",
                "metadata": {"name": f"{name}-{member.kind}-{member.name}".lower()[:63],
                             "namespace": meta["namespace"], "labels": {"apps.kurator.dev/app-name": meta["name"]}},
                "spec": {**fields, "kubeConfig": {"secretRef": {"name": member.name}},
                         "sourceRef": {"kind": "GitRepository", "name": meta["name"]}},
            })
    return made


def kurator_targets(kustomizations: list[Obj], member: str) -> list[Obj]:
    """The Kustomizations that apply to ``member`` (through its kubeconfig Secret)."""
    return [k for k in kustomizations if k["spec"]["kubeConfig"]["secretRef"]["name"] == member]


# --------------------------------------------------------------------------- Argo CD
def wave(obj: Obj) -> int:
    return int(obj["metadata"].get("annotations", {}).get(SYNC_WAVE, "0"))


def _kind_order(kind: str) -> int:
    return ARGO_KIND_ORDER.index(kind) - len(ARGO_KIND_ORDER) if kind in ARGO_KIND_ORDER else 0


@dataclass
class ArgoState:
    """What an Application tracks: the objects it manages on the cluster."""

    managed: set[Key] = field(default_factory=set)


def _argo_sync_options(obj: Obj) -> set[str]:
    """The object's ``argocd.argoproj.io/sync-options`` (comma separated)."""
    text = obj["metadata"].get("annotations", {}).get(ARGO_SYNC_OPTIONS, "")
    return {option.strip() for option in text.split(",") if option.strip()}


def _argo_prune_disabled(obj: Obj) -> bool:
    """gitops-engine ``pkg/sync/sync_context.go``: a prune task of a live object with the sync
    option ``Prune=false`` is skipped (``PruneSkipped``), the object left as it is."""
    return "Prune=false" in _argo_sync_options(obj)


def argo_sync(cluster: Cluster, objects: list[Obj], state: ArgoState, prune: bool = True) -> str | None:
    """One automated sync of an Application whose manifests are ``objects``; the failure
    message, or None when every wave applied."""
    for obj in objects:  # the dry run, before anything is applied: every kind must be served
        if not cluster.serves(group(obj), obj["kind"]) and "SkipDryRunOnMissingResource=true" not in \
                _argo_sync_options(obj):
            return f"{describe(key(obj))}: the server could not find the requested resource (dry run)"
    target = {key(obj): obj for obj in objects}
    prunes = [k for k in sorted(state.managed - set(target))
              if k in cluster.objects and not _argo_prune_disabled(cluster.objects[k].obj)] if prune else []
    tasks = [(wave(cluster.objects[k].obj), k, None) for k in prunes]
    tasks += [(wave(obj), k, obj) for k, obj in target.items()]
    for current in sorted({w for w, _, _ in tasks}):
        in_wave = [(k, obj) for w, k, obj in tasks if w == current]
        for k, obj in in_wave:
            if obj is None:
                cluster.delete(k)
                state.managed.discard(k)
        applies = sorted(((k, obj) for k, obj in in_wave if obj is not None),
                         key=lambda item: (_kind_order(item[0][1]), item[0][3]))
        for k, obj in applies:
            try:
                cluster.apply(obj)
            except Refused as err:
                return str(err)
            state.managed.add(k)
    return None


# --------------------------------------------------------------------------- Argo CD ApplicationSet
def applicationset_applications(appset: Obj, folders: list[str]) -> dict[str, tuple[str, str]]:
    """The Applications an ApplicationSet makes, as name -> (source path, destination name),
    given the folders (repository paths) of the revision it reads.

    Ported from argo-cd v3.5.0 ``applicationset/generators``: a ``list`` generator yields its
    ``elements`` as they are (``list.go`` ``GenerateParams``: with goTemplate, each element
    is the parameter map); a ``git`` directory generator yields every folder of the
    repository that matches one of its ``directories`` paths (``path.Match``) and no
    ``exclude: true`` one, as ``path.path`` and ``path.basename`` (``git.go`` ``filterApps``,
    ``generateParamsFromApps``). The template's ``{{.key}}`` / ``{{.path.basename}}`` are
    filled from the parameters (``missingkey=error``: a key that is missing raises KeyError)."""
    params: list[dict[str, Any]] = []
    for generator in appset["spec"]["generators"]:
        if "list" in generator:
            params += [dict(element) for element in generator["list"].get("elements", [])]
        elif "git" in generator:
            directories = generator["git"]["directories"]
            for folder in sorted(folders):
                matches = [item for item in directories if _path_match(item["path"], folder)]
                if matches and not any(item.get("exclude") for item in matches):
                    params.append({"path": {"path": folder, "basename": posixpath.basename(folder)}})
        else:
            raise ValueError(f"generator not modelled: {sorted(generator)}")
    template = appset["spec"]["template"]
    found = {}
    for values in params:
        name = _fill(template["metadata"]["name"], values)
        found[name] = (_fill(template["spec"]["source"]["path"], values),
                       _fill(template["spec"]["destination"]["name"], values))
    return found


def _path_match(pattern: str, name: str) -> bool:
    """Go's ``path.Match``: ``*`` and ``?`` never match a '/' (so, segment by segment)."""
    patterns, names = pattern.split("/"), name.split("/")
    return len(patterns) == len(names) and all(map(fnmatch.fnmatchcase, names, patterns))


def _fill(text: str, values: dict[str, Any]) -> str:
    """A Go template of ``{{.a.b}}`` fields only, filled from ``values``."""
    def field_value(match: re.Match[str]) -> str:
        value: Any = values
        for part in match.group(1).split("."):
            value = value[part]
        return str(value)

    return re.sub(r"\{\{\s*\.([A-Za-z0-9_.]+)\s*\}\}", field_value, text)


def drifted(cluster: Cluster, objects: list[Obj]) -> list[Key]:
    """The objects not as their manifests say: missing, or whose manifest applied to the live
    object would change it. Argo CD shows them OutOfSync (gitops-engine ``pkg/diff``
    ``ThreeWayDiff``: the last applied manifest, the new one and the live object; a custom
    resource's lists are replaced whole by a JSON merge patch, as :func:`apply_merge` replaces
    atomic lists) and auto-sync applies them again on every refresh; Flux's server-side apply
    reports them ``configured`` rather than ``unchanged`` (fluxcd/pkg ``ssa``) on every
    reconcile. A refused apply leaves them so."""
    found = []
    for obj in objects:
        k = key(obj)
        live = cluster.objects.get(k)
        if live is None or apply_merge(live.obj, obj, live.applied, is_builtin(k)) != live.obj:
            found.append(k)
    return sorted(found)
