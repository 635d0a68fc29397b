"""The GitOps entrypoints: the Argo CD ApplicationSet and the Flux objects per cluster, and
what happens to them when clusters come and go."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.k8s import kustomize_build, require_upstream_schemas, validate_tree
from support.yamlread import read
from test_render import fleet, write

from fleetc.emit import changes, write_tree
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
    - list:
        elements:
          - cluster: cpu-only
          - cluster: gpu-east
          - cluster: gpu-west
  syncPolicy:
    applicationsSync: create-update
    preserveResourcesOnDeletion: true
  template:
    metadata:
      name: fleetc-{{.cluster}}
      labels:
        app.kubernetes.io/managed-by: fleetc
    spec:
      project: default
      source:
        repoURL: https://git.example.org/team/fleet.git
        targetRevision: release
        path: deploy/fleet/clusters/{{.cluster}}
      destination:
        name: "{{.cluster}}"
      syncPolicy:
        automated:
          prune: true
          selfHeal: true
        syncOptions:
          - RespectIgnoreDifferences=true
        retry:
          limit: 5
          backoff:
            duration: 10s
            factor: 2
            maxDuration: 5m
      ignoreDifferences:
        - group: apps
          kind: Deployment
          jsonPointers:
            - /spec/replicas
"""

def flux_object(kind: str, api_version: str, name: str, spec: str) -> str:
    """A Flux object as fleetc writes it: in flux-system, labelled and annotated as fleetc's."""
    return f"""\
apiVersion: {api_version}
kind: {kind}
metadata:
  name: {name}
  namespace: flux-system
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: fleet.yaml#spec.gitops
spec:
{spec}"""


def kustomization(layer: str, path: str, depends_on: tuple[str, ...] = (), waits: bool = False) -> str:
    """The Flux Kustomization of one layer of a cluster's folder."""
    needs = "".join(f"    - name: fleetc-{other}\n" for other in depends_on)
    return flux_object("Kustomization", "kustomize.toolkit.fluxcd.io/v1", f"fleetc-{layer}", (
        f"  dependsOn:\n{needs}" if needs else "") + f"""\
  interval: 10m
  retryInterval: 1m
  sourceRef:
    kind: GitRepository
    name: fleetc
  path: {path}
  prune: true
  deletionPolicy: Orphan
""" + ("""\
  wait: true
  timeout: 5m
  healthCheckExprs:
    - apiVersion: data.fluid.io/v1alpha1
      kind: Dataset
      current: "true"
    - apiVersion: data.fluid.io/v1alpha1
      kind: AlluxioRuntime
      current: "true"
""" if waits else ""))


GIT_REPOSITORY = flux_object("GitRepository", "source.toolkit.fluxcd.io/v1", "fleetc", """\
  interval: 5m
  url: https://git.example.org/team/fleet.git
  ref:
    branch: release
  secretRef:
    name: fleet-repo-credentials
""")

FLUX_KUSTOMIZATIONS = {
    "infra": kustomization("infra", "./deploy/fleet/clusters/gpu-west/infra", waits=True),
    "local": kustomization("local", "./deploy/fleet/local/gpu-west", ("infra",)),
    "workloads": kustomization("workloads", "./deploy/fleet/clusters/gpu-west/workloads", ("infra", "local")),
}


CUSTOM = GitOps(repo_url="https://git.example.org/team/fleet.git", branch="release", path="./deploy/fleet/",
                secret_name="fleet-repo-credentials")


def files_with(gitops: GitOps) -> dict[str, str]:
    model, placement = fleet()
    return dict(render(replace(model, gitops=gitops), placement).files)


def test_application_set_exact_text() -> None:
    assert files_with(CUSTOM)["argocd/applicationset-argocd-fleetc.yaml"] == APPLICATION_SET


def test_flux_objects_exact_text() -> None:
    files = files_with(CUSTOM)
    assert files["flux/gpu-west/gitrepository-flux-system-fleetc.yaml"] == GIT_REPOSITORY
    for layer, text in FLUX_KUSTOMIZATIONS.items():
        assert files[f"flux/gpu-west/kustomization-flux-system-fleetc-{layer}.yaml"] == text
    assert read(files["flux/gpu-west/kustomization.yaml"])["resources"] == [
        "gitrepository-flux-system-fleetc.yaml", "kustomization-flux-system-fleetc-infra.yaml",
        "kustomization-flux-system-fleetc-local.yaml", "kustomization-flux-system-fleetc-workloads.yaml"]


def test_no_secret_named_no_secret_ref() -> None:
    files = files_with(GitOps())
    assert "secretRef" not in files["flux/gpu-west/gitrepository-flux-system-fleetc.yaml"]


def test_every_fleet_cluster_has_its_folders() -> None:
    files = files_with(GitOps())
    clusters = {p.split("/")[1] for p in files if p.startswith("clusters/")}
    flux = {p.split("/")[1] for p in files if p.startswith("flux/")}
    local = {p.split("/")[1] for p in files if p.startswith("local/")}
    assert clusters == flux == local == {"cpu-only", "gpu-east", "gpu-west"}
    assert "path: ./out/clusters/gpu-east/infra\n" in files["flux/gpu-east/kustomization-flux-system-fleetc-infra.yaml"]
    assert "path: out/clusters/{{.cluster}}\n" in files["argocd/applicationset-argocd-fleetc.yaml"]


def test_repository_root_path() -> None:
    files = files_with(replace(CUSTOM, path="."))
    assert "path: clusters/{{.cluster}}\n" in files["argocd/applicationset-argocd-fleetc.yaml"]
    workloads = files["flux/gpu-west/kustomization-flux-system-fleetc-workloads.yaml"]
    assert "path: ./clusters/gpu-west/workloads\n" in workloads
    assert "path: ./local/gpu-west\n" in files["flux/gpu-west/kustomization-flux-system-fleetc-local.yaml"]


def test_placeholder_repository_is_a_warning() -> None:
    model, placement = fleet()
    (warning,) = render(model, placement).warnings
    assert warning.format() == ("fleet.yaml: warning: spec.gitops.repoURL: not set: Argo CD and Flux would read "
                                "the placeholder https://git.example.com/fleet.git")
    rest = render(replace(model, gitops=CUSTOM), placement).warnings
    assert list(rest) == []


def test_nothing_placed_every_cluster_emptied() -> None:
    model, placement = fleet()
    empty = Placement(tuple(replace(p, assignments=()) for p in placement.stages), 0, 0, "milp")
    rendered = render(model, empty)
    layers = {p: t for p, t in rendered.files.items() if p.endswith(("/infra/kustomization.yaml",
                                                                     "/workloads/kustomization.yaml"))}
    assert len(layers) == 6 and all(t.endswith("resources: []\n") for t in layers.values())
    assert not [p for p in rendered.files if p.startswith("clusters/") and not p.endswith("kustomization.yaml")]


@pytest.mark.slow
def test_entrypoints_validate_and_build(tmp_path: Path) -> None:
    require_upstream_schemas()
    write(files_with(CUSTOM), tmp_path)
    assert validate_tree(tmp_path / "argocd") == []
    assert validate_tree(tmp_path / "flux") == []
    for folder in [tmp_path / "argocd", *sorted((tmp_path / "flux").iterdir())]:
        assert "kind:" in kustomize_build(folder)


def test_a_cluster_that_stops_running_work_keeps_its_folders_emptied(tmp_path: Path) -> None:
    model, placement = fleet()
    write_tree(tmp_path, dict(render(model, placement).files))
    (tmp_path / "flux" / "gpu-west" / "notes.md").write_text("kept: not fleetc's\n")
    # everything moves to gpu-east
    moved = tuple(replace(p, assignments=tuple(replace(a, cluster="gpu-east") for a in p.assignments[:1]))
                  for p in placement.stages)
    write_tree(tmp_path, dict(render(model, replace(placement, stages=moved)).files))
    west = tmp_path / "clusters" / "gpu-west"
    assert sorted(p.relative_to(west).as_posix() for p in west.rglob("*") if p.is_file()) == [
        "infra/kustomization.yaml", "kustomization.yaml", "workloads/kustomization.yaml"]
    assert kustomize_build(west).strip() == ""  # both engines prune what gpu-west ran
    assert (tmp_path / "flux" / "gpu-west" / "notes.md").read_text() == "kept: not fleetc's\n"
    assert (tmp_path / "flux" / "gpu-west" / "kustomization-flux-system-fleetc-workloads.yaml").is_file()


def test_the_local_folder_is_created_once_then_left_to_the_user(tmp_path: Path) -> None:
    model, placement = fleet()
    files = dict(render(model, placement).files)
    write_tree(tmp_path, files)
    local = tmp_path / "local" / "gpu-west" / "kustomization.yaml"
    assert "resources: []\n" in local.read_text()
    mine = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - secret.yaml\n"
    local.write_text(mine)
    (local.parent / "secret.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mine\n")
    assert changes(tmp_path, files) == []
    write_tree(tmp_path, files)
    assert local.read_text() == mine and (local.parent / "secret.yaml").is_file()
    assert "local/" not in (tmp_path / ".fleetc" / "files").read_text()
    assert "name: mine" in kustomize_build(tmp_path / "clusters" / "gpu-west")
    local.unlink()
    assert [c.path for c in changes(tmp_path, files)] == ["local/gpu-west/kustomization.yaml"]
