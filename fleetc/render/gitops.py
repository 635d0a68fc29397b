"""GitOps entrypoints: how Argo CD or Flux find the per-cluster folders in git, and in which
order they apply them.

Every cluster of the Fleet has ``clusters/<cluster>/`` with two layers and a kustomization over
them and the user's folder:

* ``infra/``: what workloads need to exist first: Namespaces, NetworkPolicies, Volcano Queues,
  PriorityClasses, the device plugin's ConfigMap, Fluid Datasets and AlluxioRuntimes;
* ``workloads/``: Volcano Jobs, Deployments with their Services, HPAs and PDBs, Fluid DataLoads and DataProcesses;
* ``../../local/<cluster>/`` (``out/local/<cluster>/``): the user's own objects for the
  cluster (a sealed Secret, a policy of their own). fleetc creates its ``kustomization.yaml``
  once, listing nothing, and from then on never writes, changes or deletes anything there
  (:mod:`fleetc.emit`).

Why two layers. Volcano's admission webhook refuses a Job whose Queue does not exist, also on a
dry run (``pkg/webhooks/admission/jobs/validate/admit_job.go``; the webhook is registered with
``sideEffects: NoneOnDryRun``), and Flux's kustomize-controller applies CRDs, Namespaces,
ClusterRoles and ``*Class`` kinds first and then dry-runs every other object of a
Kustomization together, applying none if one fails (fluxcd/pkg ``ssa/manager_apply.go``
``ApplyAllStaged``, ``ssa/utils/is.go``). One Kustomization holding Queues and Jobs would
never get past the dry run on a fresh cluster. So:

* ``flux/<cluster>/``: a GitRepository and three Kustomizations (in :data:`FLUX_NAMESPACE`):
  ``fleetc-infra`` (``wait: true``: Ready only once its objects are), ``fleetc-local``
  (dependsOn infra) and ``fleetc-workloads`` (dependsOn both), the layering Flux documents
  for infrastructure and apps (fluxcd/kustomize-controller ``docs/spec/v1/kustomizations.md``,
  "Dependencies"). Each prunes what fleetc no longer renders.
* ``argocd/``: one ApplicationSet whose list generator names every cluster of the Fleet, each
  an Application ``fleetc-<name>`` syncing ``<path>/clusters/<name>`` to the cluster
  registered in Argo CD under the same name (goTemplate, ``{{.cluster}}``). A list, not a git
  directory generator over ``clusters/*``: that one turns every folder of the repository
  matching the glob into an Application (argo-cd v3.5.0 ``applicationset/generators/git.go``
  ``filterApps``), so a folder added by hand as ``clusters/<any-name>/`` would be synced to
  any cluster Argo CD knows; the list generator yields its elements and nothing else
  (``applicationset/generators/list.go``). Argo CD applies by sync wave, then by kind, unknown kinds such as
  Volcano's Queue last (gitops-engine ``pkg/sync/sync_tasks.go``), and starts a wave only
  once the previous one is healthy (``pkg/sync/sync_context.go``): infra objects are in wave
  :data:`INFRA_WAVE`, workloads in :data:`WORKLOADS_WAVE` (``argocd.argoproj.io/sync-wave``),
  your own objects in the default wave 0. A sync that fails anyway (a webhook not up yet) is
  retried :data:`RETRY_LIMIT` times with exponential backoff (``syncPolicy.retry``). Inside an
  Application, automated sync prunes objects fleetc no longer renders. The HPA owns
  ``spec.replicas`` of Deployments, which fleetc renders without it; Argo CD still ignores
  that field, so an Application last synced from an output that named a replica count does not
  remove the count the HPA set.
* ``kurator/``: a Kurator Application whose sync policies are the Flux layers above
  (:mod:`.kurator`). The Fleet's ``spec.gitops.entryPoints`` chooses which are rendered.

Removing work and removing clusters. A cluster that runs nothing keeps its folder, with
kustomizations that list nothing: both engines then prune what it ran. A cluster removed from
the Fleet loses its folders and its element of the list, and then nothing is deleted on it, on
purpose (a Fleet entry deleted by mistake must not wipe a cluster): Argo CD keeps its Application
(``applicationsSync: create-update``; ``preserveResourcesOnDeletion`` keeps the workloads even
when someone deletes the Application), which reports the missing path; Flux's Kustomizations
fail on the missing path and keep what they applied, and with ``deletionPolicy: Orphan``
deleting them leaves the objects too. To empty a cluster, cordon it (``cordoned: true``),
compile and let it sync; then remove it from the Fleet.

Both read the repository, branch and folder from the Fleet's ``spec.gitops``, and Flux
authenticates with the Secret ``spec.gitops.secretName`` names (``secretRef``); while the
repository is the placeholder default, a warning says so.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetc.delivery import INFRA, LOCAL, WORKLOADS
from fleetc.errors import Diagnostic
from fleetc.model import DEFAULT_ENTRY_POINTS, GitOps, Source
from fleetc.render.common import ARGO_SYNC_OPTIONS, SYNC_WAVE, Obj, folder_files, metadata, warning
from fleetc.render.yamlout import dump

ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
NAME = "fleetc"
SYNC_INTERVAL = "5m"
APPLY_INTERVAL = "10m"
#: How soon Flux tries a failed Kustomization again.
RETRY_INTERVAL = "1m"
#: How long Flux waits for the infra layer to be Ready before it calls the apply failed.
WAIT_TIMEOUT = "5m"
#: Argo CD: retries of a failed sync, the first after RETRY_BACKOFF, doubling up to RETRY_MAX.
RETRY_LIMIT = 5
RETRY_BACKOFF = "10s"
RETRY_MAX = "5m"

#: The Argo CD sync waves of the two layers of a cluster folder (:mod:`fleetc.delivery`).
INFRA_WAVE = 0
WORKLOADS_WAVE = 1

_KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}


def repository_folder(gitops: GitOps) -> str:
    """The output folder relative to the repository root, normalised (``./out/`` -> ``out``,
    ``.`` -> ``""``): Argo CD matches generator paths literally."""
    folder = PurePosixPath(gitops.path.strip("/") or ".").as_posix()
    return "" if folder == "." else folder


def in_repository(gitops: GitOps, path: str) -> str:
    folder = repository_folder(gitops)
    return f"{folder}/{path}" if folder else path


#: Argo CD's sync option that skips the dry run of an object whose kind the cluster does not
#: serve yet (gitops-engine ``pkg/sync/sync_context.go``): without it one custom resource whose
#: CRD is not served (Fluid installed after fleetc's output, a CRD being upgraded) fails the
#: dry run of the whole Application, so nothing of the cluster syncs, and auto-sync gives up
#: after its retries. With it, every other object is applied, and that one once its CRD is.
SKIP_DRY_RUN = "SkipDryRunOnMissingResource=true"


def is_custom_resource(obj: Obj) -> bool:
    """Whether the object's kind comes from a CRD: its API group has a dot and is not one of
    Kubernetes' own (``*.k8s.io``)."""
    group = str(obj["apiVersion"]).rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def with_sync_wave(objects: list[Obj], wave: int) -> list[Obj]:
    """``objects`` annotated with their Argo CD sync wave, and custom resources with
    :data:`SKIP_DRY_RUN` (Flux ignores both)."""
    for obj in objects:
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[SYNC_WAVE] = str(wave)
        options = [option for option in annotations.get(ARGO_SYNC_OPTIONS, "").split(",") if option]
        if is_custom_resource(obj) and SKIP_DRY_RUN not in options:
            annotations[ARGO_SYNC_OPTIONS] = ",".join([*options, SKIP_DRY_RUN])
    return objects


def cluster_kustomization(cluster: str) -> dict[str, str]:
    """``clusters/<cluster>/kustomization.yaml`` over both layers and the user's folder, and
    that folder's first, empty ``kustomization.yaml``, which is the user's from then on (paths
    under ``local/`` are written only when absent: :data:`fleetc.emit.USER_FOLDER`)."""
    layers = {**_KUSTOMIZATION, "resources": [INFRA, WORKLOADS, f"../../{LOCAL}/{cluster}"]}
    local = {**_KUSTOMIZATION, "resources": []}
    return {
        f"clusters/{cluster}/kustomization.yaml": dump(layers),
        f"{LOCAL}/{cluster}/kustomization.yaml": (
            f"# Your own objects for cluster {cluster}: list them here. fleetc created this file\n"
            "# and never writes, changes or deletes anything in this folder.\n" + dump(local)),
    }


def application_set(gitops: GitOps, source: Source, clusters: list[str]) -> Obj:
    """The Argo CD ApplicationSet over the folders of ``clusters`` (the Fleet's), and no other."""
    template = {
        "metadata": {"name": f"{NAME}-{{{{.cluster}}}}", "labels": metadata(NAME)["labels"]},
        "spec": {
            "project": "default",
            "source": {"repoURL": gitops.repo_url, "targetRevision": gitops.branch,
                       "path": in_repository(gitops, "clusters/{{.cluster}}")},
            "destination": {"name": "{{.cluster}}"},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["RespectIgnoreDifferences=true"],
                "retry": {"limit": RETRY_LIMIT,
                          "backoff": {"duration": RETRY_BACKOFF, "factor": 2, "maxDuration": RETRY_MAX}},
            },
            "ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}],
        },
    }
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": metadata(NAME, ARGOCD_NAMESPACE, source),
        "spec": {
            "goTemplate": True,
            "goTemplateOptions": ["missingkey=error"],
            "generators": [{"list": {"elements": [{"cluster": name} for name in sorted(clusters)]}}],
            "syncPolicy": {"applicationsSync": "create-update", "preserveResourcesOnDeletion": True},
            "template": template,
        },
    }


def repository_spec(gitops: GitOps) -> Obj:
    """The Fleet's repository as Flux's GitRepository spec, which Kurator's Application source
    takes as it is (``gitRepository``)."""
    spec: Obj = {"interval": SYNC_INTERVAL, "url": gitops.repo_url, "ref": {"branch": gitops.branch}}
    if gitops.secret_name:
        spec["secretRef"] = {"name": gitops.secret_name}
    return spec


def git_repository(gitops: GitOps, source: Source) -> Obj:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": metadata(NAME, FLUX_NAMESPACE, source),
        "spec": repository_spec(gitops),
    }


#: Kinds whose health the infra layer does not wait for (``healthCheckExprs`` with ``current:
#: "true"``, kustomize-controller v1.5 or newer; fluxcd/pkg ``runtime/cel``): a Fluid Dataset
#: turns not ready on any failed health check of its runtime (fluid v1.0.8 ``pkg/ddc/base``
#: ``TemplateEngine.Sync``, ``pkg/ddc/alluxio/health_check.go`` ``CheckRuntimeHealthy``), which
#: kstatus reads as not Current, and under ``wait: true`` one
#: such Dataset kept ``fleetc-infra`` from Ready, so ``fleetc-workloads`` (which depends on it)
#: never applied another change on the cluster. A pod mounting a Dataset's volume waits for it
#: itself, and a DataLoad for its Dataset.
NOT_WAITED_FOR = (("data.fluid.io/v1alpha1", "Dataset"), ("data.fluid.io/v1alpha1", "AlluxioRuntime"))


def flux_kustomization(gitops: GitOps, source: Source, name: str, path: str,
                       depends_on: tuple[str, ...] = (), wait: bool = False) -> Obj:
    """A Flux Kustomization applying one folder; it prunes what leaves the folder, and when it
    is itself deleted it leaves its objects where they are (``deletionPolicy: Orphan``)."""
    spec: Obj = {}
    if depends_on:
        spec["dependsOn"] = [{"name": dependency} for dependency in depends_on]
    spec |= {
        "interval": APPLY_INTERVAL,
        "retryInterval": RETRY_INTERVAL,
        "sourceRef": {"kind": "GitRepository", "name": NAME},
        "path": f"./{in_repository(gitops, path)}",
        "prune": True,
        "deletionPolicy": "Orphan",
    }
    if wait:
        spec |= {"wait": True, "timeout": WAIT_TIMEOUT, "healthCheckExprs": [
            {"apiVersion": api, "kind": kind, "current": "true"} for api, kind in NOT_WAITED_FOR]}
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": metadata(name, FLUX_NAMESPACE, source),
        "spec": spec,
    }


def flux_objects(gitops: GitOps, source: Source, cluster: str) -> list[Obj]:
    """One cluster's Flux entrypoint: the repository and the three layered Kustomizations."""
    infra, local, workloads = (f"{NAME}-{INFRA}", f"{NAME}-{LOCAL}", f"{NAME}-{WORKLOADS}")
    return [
        git_repository(gitops, source),
        flux_kustomization(gitops, source, infra, f"clusters/{cluster}/{INFRA}", wait=True),
        flux_kustomization(gitops, source, local, f"{LOCAL}/{cluster}", (infra,)),
        flux_kustomization(gitops, source, workloads, f"clusters/{cluster}/{WORKLOADS}", (infra, local)),
    ]


def gitops_files(gitops: GitOps, source: Source, clusters: list[str],
                 entry_points: tuple[str, ...] = DEFAULT_ENTRY_POINTS) -> dict[str, str]:
    """``argocd/`` and ``flux/<cluster>/`` for every cluster of the Fleet, those of the two that
    ``entry_points`` names; their ``source`` is the Fleet's ``spec.gitops``."""
    files = folder_files("argocd", [application_set(gitops, source, clusters)]) if "argocd" in entry_points else {}
    for cluster in clusters if "flux" in entry_points else ():
        files |= folder_files(f"flux/{cluster}", flux_objects(gitops, source, cluster))
    return files


#: How messages name each entry point.
ENGINES = {"argocd": "Argo CD", "flux": "Flux", "kurator": "Kurator"}


def gitops_warnings(gitops: GitOps, source: Source,
                    entry_points: tuple[str, ...] = DEFAULT_ENTRY_POINTS) -> list[Diagnostic]:
    """The placeholder repository left in ``source`` (the Fleet's ``spec.gitops``), which the
    rendered ``entry_points`` would read."""
    if gitops.repo_url != GitOps().repo_url:
        return []
    engines = [ENGINES[e] for e in entry_points]
    readers = " and ".join([", ".join(engines[:-1]), engines[-1]] if len(engines) > 1 else engines)
    return [warning(source, "spec.gitops.repoURL", f"not set: {readers} would read the placeholder {gitops.repo_url}")]
