"""The GitOps entrypoints: the Argo CD ApplicationSet and the Flux objects per cluster, and
what happens to them when clusters come and go."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.k8s import kustomize_build, require_upstream_schemas, validate_tree
from test_render import SAFE, fleet, write

from fleetc.emit import write_tree
from fleetc.model import GitOps, Placement
from fleetc.render import render

APPLICATION_SET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: fleetc
  namespace: argocd
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: fleet.yaml#spec.gitops
spec:
  goTemplate: true
  goTemplateOptions:
    - missingkey=error
  generators:
    - git:
        repoURL: https://git.example.org/team/fleet.git
        revision: release
        directories:
          - path: deploy/fleet/clusters/*
  syncPolicy:
    applicationsSync: create-update
    preserveResourcesOnDeletion: true
  template:
    metadata:
      name: fleetc-{{.path.basename}}
      labels:
        app.kubernetes.io/managed-by: fleetc
    spec:
      project: default
      source:
        repoURL: https://git.example.org/team/fleet.git
        targetRevision: release
        path: "{{.path.path}}"
      destination:
        name: "{{.path.basename}}"
      syncPolicy:
        automated:
          prune: true
          selfHeal: true
        syncOptions:
          - RespectIgnoreDifferences=true
      ignoreDifferences:
        - group: apps
          kind: Deployment
          jsonPointers:
            - /spec/replicas
"""

GIT_REPOSITORY = """\
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: fleetc
  namespace: flux-system
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: fleet.yaml#spec.gitops
spec:
  interval: 5m
  url: https://git.example.org/team/fleet.git
  ref:
    branch: release
"""

FLUX_KUSTOMIZATION = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: fleetc
  namespace: flux-system
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: fleet.yaml#spec.gitops
spec:
  interval: 10m
  sourceRef:
    kind: GitRepository
    name: fleetc
  path: ./deploy/fleet/clusters/gpu-west
  prune: true
"""

CUSTOM = GitOps(repo_url="https://git.example.org/team/fleet.git", branch="release", path="./deploy/fleet/")


def files_with(gitops: GitOps) -> dict[str, str]:
    model, placement = fleet()
    return dict(render(replace(model, gitops=gitops), placement).files)


def test_application_set_exact_text() -> None:
    assert files_with(CUSTOM)["argocd/applicationset-argocd-fleetc.yaml"] == APPLICATION_SET


def test_flux_objects_exact_text() -> None:
    files = files_with(CUSTOM)
    assert files["flux/gpu-west/gitrepository-flux-system-fleetc.yaml"] == GIT_REPOSITORY
    assert files["flux/gpu-west/kustomization-flux-system-fleetc.yaml"] == FLUX_KUSTOMIZATION
    assert SAFE.load(files["flux/gpu-west/kustomization.yaml"])["resources"] == [
        "gitrepository-flux-system-fleetc.yaml", "kustomization-flux-system-fleetc.yaml"]


def test_one_flux_folder_per_cluster_folder() -> None:
    files = files_with(GitOps())
    clusters = {p.split("/")[1] for p in files if p.startswith("clusters/")}
    flux = {p.split("/")[1] for p in files if p.startswith("flux/")}
    assert clusters == flux == {"gpu-east", "gpu-west"}
    assert "path: ./out/clusters/gpu-east\n" in files["flux/gpu-east/kustomization-flux-system-fleetc.yaml"]
    assert "- path: out/clusters/*\n" in files["argocd/applicationset-argocd-fleetc.yaml"]


def test_repository_root_path() -> None:
    files = files_with(replace(CUSTOM, path="."))
    assert "- path: clusters/*\n" in files["argocd/applicationset-argocd-fleetc.yaml"]
    assert "path: ./clusters/gpu-west\n" in files["flux/gpu-west/kustomization-flux-system-fleetc.yaml"]


def test_placeholder_repository_is_a_warning() -> None:
    model, placement = fleet()
    (warning,) = render(model, placement).warnings
    assert warning.format() == ("fleet.yaml: warning: spec.gitops.repoURL: not set: Argo CD and Flux would read "
                                "the placeholder https://git.example.com/fleet.git")
    assert render(replace(model, gitops=CUSTOM), placement).warnings == ()


def test_nothing_placed_nothing_to_sync() -> None:
    model, placement = fleet()
    empty = Placement(tuple(replace(p, assignments=()) for p in placement.stages), 0, 0, "milp")
    rendered = render(model, empty)
    assert list(rendered.files) == ["placement.yaml"]
    assert rendered.warnings == ()


def test_entrypoints_validate_and_build(tmp_path: Path) -> None:
    require_upstream_schemas()
    write(files_with(CUSTOM), tmp_path)
    assert validate_tree(tmp_path / "argocd") == []
    assert validate_tree(tmp_path / "flux") == []
    for folder in [tmp_path / "argocd", *sorted((tmp_path / "flux").iterdir())]:
        assert "kind:" in kustomize_build(folder)


def test_a_cluster_that_stops_running_work_loses_its_folders(tmp_path: Path) -> None:
    model, placement = fleet()
    write_tree(tmp_path, dict(render(model, placement).files))
    (tmp_path / "flux" / "gpu-west" / "notes.md").write_text("kept: not fleetc's\n")
    # everything moves to gpu-east
    moved = tuple(replace(p, assignments=tuple(replace(a, cluster="gpu-east") for a in p.assignments[:1]))
                  for p in placement.stages)
    write_tree(tmp_path, dict(render(model, replace(placement, stages=moved)).files))
    assert not (tmp_path / "clusters" / "gpu-west").exists()
    assert sorted(p.name for p in (tmp_path / "flux" / "gpu-west").iterdir()) == ["notes.md"]
    assert (tmp_path / "flux" / "gpu-east" / "kustomization-flux-system-fleetc.yaml").is_file()
