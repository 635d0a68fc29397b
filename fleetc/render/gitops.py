"""GitOps entrypoints: how Argo CD or Flux find the per-cluster folders in git.

* ``argocd/``: one ApplicationSet (in :data:`ARGOCD_NAMESPACE`) whose git-directory generator
  turns every ``<path>/clusters/<name>`` folder into an Application ``fleetc-<name>`` that syncs
  that folder to the cluster registered in Argo CD under the same name (goTemplate,
  ``{{.path.basename}}``). ``applicationsSync: create-update`` means a folder that disappears
  (a cluster that no longer runs anything, or a bad commit) never deletes its Application and
  with it every workload on the cluster; ``preserveResourcesOnDeletion`` keeps the workloads
  even when someone deletes an Application by hand. Inside an Application, automated sync
  prunes objects fleetc no longer renders. The HPA owns ``spec.replicas`` of Deployments, which
  fleetc renders without it. Argo CD still ignores that field: an Application last synced from
  an output that named a replica count would otherwise remove the count the HPA set.
* ``flux/<cluster>/``: a GitRepository and a Kustomization (in :data:`FLUX_NAMESPACE`) to apply
  on that cluster; the Kustomization prunes what fleetc no longer renders.

Both read the repository, branch and folder from the Fleet's ``spec.gitops``; while the repository
is the placeholder default, a warning says so.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from fleetc.errors import Diagnostic
from fleetc.model import GitOps, Source
from fleetc.render.common import Obj, folder_files, metadata, warning

ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
NAME = "fleetc"
SYNC_INTERVAL = "5m"
APPLY_INTERVAL = "10m"


def _folder(gitops: GitOps) -> str:
    """The output folder relative to the repository root, normalised (``./out/`` -> ``out``,
    ``.`` -> ``""``): Argo CD matches generator paths literally."""
    folder = PurePosixPath(gitops.path.strip("/") or ".").as_posix()
    return "" if folder == "." else folder


def _clusters_path(gitops: GitOps) -> str:
    folder = _folder(gitops)
    return f"{folder}/clusters" if folder else "clusters"


def application_set(gitops: GitOps, source: Source) -> Obj:
    """The Argo CD ApplicationSet over every cluster folder."""
    template = {
        "metadata": {"name": f"{NAME}-{{{{.path.basename}}}}", "labels": metadata(NAME)["labels"]},
        "spec": {
            "project": "default",
            "source": {"repoURL": gitops.repo_url, "targetRevision": gitops.branch, "path": "{{.path.path}}"},
            "destination": {"name": "{{.path.basename}}"},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": ["RespectIgnoreDifferences=true"],
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
            "generators": [{
                "git": {
                    "repoURL": gitops.repo_url,
                    "revision": gitops.branch,
                    "directories": [{"path": f"{_clusters_path(gitops)}/*"}],
                },
            }],
            "syncPolicy": {"applicationsSync": "create-update", "preserveResourcesOnDeletion": True},
            "template": template,
        },
    }


def git_repository(gitops: GitOps, source: Source) -> Obj:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": metadata(NAME, FLUX_NAMESPACE, source),
        "spec": {"interval": SYNC_INTERVAL, "url": gitops.repo_url, "ref": {"branch": gitops.branch}},
    }


def flux_kustomization(gitops: GitOps, source: Source, cluster: str) -> Obj:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": metadata(NAME, FLUX_NAMESPACE, source),
        "spec": {
            "interval": APPLY_INTERVAL,
            "sourceRef": {"kind": "GitRepository", "name": NAME},
            "path": f"./{_clusters_path(gitops)}/{cluster}",
            "prune": True,
        },
    }


def gitops_files(gitops: GitOps, fleet_path: str, clusters: list[str]) -> dict[str, str]:
    """``argocd/`` and ``flux/<cluster>/`` for the clusters that have a folder; their source is
    the Fleet's ``spec.gitops``."""
    source = Source(fleet_path, "spec.gitops")
    files = folder_files("argocd", [application_set(gitops, source)])
    for cluster in clusters:
        flux = [git_repository(gitops, source), flux_kustomization(gitops, source, cluster)]
        files |= folder_files(f"flux/{cluster}", flux)
    return files


def gitops_warnings(gitops: GitOps, fleet_path: str) -> list[Diagnostic]:
    if gitops.repo_url != GitOps().repo_url:
        return []
    return [warning(Source(fleet_path, "spec.gitops"), "spec.gitops.repoURL",
                    f"not set: Argo CD and Flux would read the placeholder {gitops.repo_url}")]
