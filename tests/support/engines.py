"""A model of how Flux and Argo CD apply fleetc's output to a cluster, and of the admission
rules that decide whether an object gets in.

It is small on purpose: it keeps only what decides whether a fresh cluster converges in one
pass and whether a later commit converges too. Each rule is the upstream behaviour it is named
after:

* the API server (:class:`Cluster`): a kind must be served (its CRD installed) and a
  namespaced object's Namespace must exist, on a dry run as on a real apply;
* Volcano's admission webhook (volcano ``pkg/webhooks/admission/jobs/validate/admit_job.go``):
  a Job whose ``spec.queue`` does not exist is refused, on dry runs too (the webhook is
  registered ``sideEffects: NoneOnDryRun``), and so is any change to an existing Job's spec
  (``validateJobUpdate``);
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
  inventory pruned (``prune: true``). A Kustomization runs only once every one it
  ``dependsOn`` is Ready; a missing path fails it and leaves everything as it was;
* Kurator's fleet manager (:func:`kurator_kustomizations`): a Kurator ``Application`` becomes,
  per sync policy and per member cluster its destination selects, a Flux Kustomization that
  applies the policy's path to that member; Flux then reconciles those as above;
* Argo CD's gitops-engine (:func:`argo_sync`): a client-side dry run (no admission), then
  wave by wave (``argocd.argoproj.io/sync-wave``, default 0), in each wave the prunes first,
  then the applies ordered by kind (``kindOrder``, unknown kinds last) and name
  (``pkg/sync/sync_tasks.go``, ``pkg/sync/sync_context.go``); the first refused apply fails
  the sync and later waves do not run.

The cluster starts with the platform fleetc's output needs installed: the CRDs of Volcano,
Kueue, Fluid, Flux and Argo CD and the namespaces of those and of the GPU Operator
(:data:`PREINSTALLED_NAMESPACES`).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML

Obj = dict[str, Any]
#: (apiVersion group, kind, namespace or "", name)
Key = tuple[str, str, str, str]

PREINSTALLED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "flux-system", "argocd",
                                     "gpu-operator", "volcano-system", "kueue-system", "fluid-system"})
SYNC_WAVE = "argocd.argoproj.io/sync-wave"

#: Kinds the model's API server serves: (group, kind) -> namespaced.
SERVED: dict[tuple[str, str], bool] = {
    ("", "Namespace"): False, ("", "ConfigMap"): True, ("", "Secret"): True, ("", "Service"): True,
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

_YAML = YAML(typ="safe")


@functools.cache
def load(text: str) -> Any:
    """One parsed YAML document per distinct text (trees are parsed many times; never mutated)."""
    return _YAML.load(text)


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _kueue_default(k: Key, obj: Obj) -> Obj:
    """Kueue's mutating Job webhook on create: a Job that names a queue starts suspended."""
    if k[:2] == ("batch", "Job") and KUEUE_QUEUE_LABEL in obj["metadata"].get("labels", {}):
        return {**obj, "spec": {**obj["spec"], "suspend": True}}
    return obj


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


@dataclass
class Cluster:
    objects: dict[Key, Live] = field(default_factory=dict)
    _uids: int = 0

    def namespaces(self) -> set[str]:
        return PREINSTALLED_NAMESPACES | {k[3] for k in self.objects if k[:2] == ("", "Namespace")}

    def apply(self, obj: Obj, dry_run: bool = False) -> None:
        """Create or update ``obj``, or raise :class:`Refused` saying why not."""
        k = key(obj)
        served = SERVED.get(k[:2])
        if served is None:
            raise Refused(f"{describe(k)}: no matches for kind {k[1]!r} (CRD not installed)")
        if served and k[2] not in self.namespaces():
            raise Refused(f"{describe(k)}: namespaces {k[2]!r} not found")
        self._admit(k, obj)
        if dry_run:
            return
        live = self.objects.get(k)
        if live is None:
            self._uids += 1
            self.objects[k] = Live(_kueue_default(k, obj), self._uids)
        elif k[:2] == ("batch", "Job") and "suspend" not in obj["spec"] and "suspend" in live.obj["spec"]:
            live.obj = {**obj, "spec": {**obj["spec"], "suspend": live.obj["spec"]["suspend"]}}
        else:
            live.obj = obj

    def _admit(self, k: Key, obj: Obj) -> None:
        if k[:2] == ("batch", "Job"):
            live = self.objects.get(k)
            for name in ("template", "completions", "completionMode"):
                if live is not None and live.obj["spec"].get(name) != obj["spec"].get(name):
                    raise Refused(f"{describe(k)}: Job.batch is invalid: spec.{name}: field is immutable")
            return
        if k[:2] != ("batch.volcano.sh", "Job"):
            return
        queue = obj["spec"].get("queue", "default")
        if ("scheduling.volcano.sh", "Queue", "", queue) not in self.objects:
            raise Refused(f"{describe(k)}: admission webhook validatejob.volcano.sh denied the request: "
                          f"unable to find job queue: {queue}")
        live = self.objects.get(k)
        if live is not None and live.obj["spec"] != obj["spec"]:
            raise Refused(f"{describe(k)}: admission webhook validatejob.volcano.sh denied the request: "
                          "job updates may not change fields other than minAvailable, tasks[*].replicas "
                          "under spec")

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
        self.objects.pop(k, None)

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
    for resource in load(files[index])["resources"]:
        path = posixpath.normpath(f"{folder}/{resource}")
        if f"{path}/kustomization.yaml" in files:
            objects += kustomize_build(files, path)
        elif path in files:
            objects.append(load(files[path]))
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
        if spec.get("prune"):
            for stale in sorted(state.inventory.get(name, set()) - applied):
                cluster.delete(stale)
        state.inventory[name] = applied
        state.ready[name] = True
    return failures


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


def argo_sync(cluster: Cluster, objects: list[Obj], state: ArgoState, prune: bool = True) -> str | None:
    """One automated sync of an Application whose manifests are ``objects``; the failure
    message, or None when every wave applied."""
    for obj in objects:  # the client-side dry run: only that every kind is known
        if (group(obj), obj["kind"]) not in SERVED:
            return f"{describe(key(obj))}: the server could not find the requested resource (dry run)"
    target = {key(obj): obj for obj in objects}
    prunes = [k for k in sorted(state.managed - set(target)) if k in cluster.objects] if prune else []
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
