"""The Kurator entry point (``kurator/``): one Kurator Application whose sync policies deliver
every cluster folder in the Flux entry point's layers, valid against Kurator's v0.6.0 CRD, what
Kurator's fleet manager makes of it, and which entry points the Fleet's gitops settings choose.
Convergence on the clusters: :mod:`test_engines` (``entry``)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from support.corpus import ROOT, compile_texts, read_policies
from support.engines import KURATOR_FLEET_LABEL, Member, kurator_kustomizations
from support.k8s import validate_object, validate_tree
from support.yamlread import read
from test_engines import CLUSTER_LABEL, Fleet, kurator_application, with_entry_points
from test_gitops import CUSTOM
from test_render import fleet, write

from fleetc.delivery import kustomization_name
from fleetc.emit import Change, changes, write_tree
from fleetc.model import Delivery
from fleetc.render import render

APPLICATION = "kurator/application-fleetc-system-fleetc.yaml"


def files_with(delivery: Delivery) -> dict[str, str]:
    model, placement = fleet()
    return dict(render(replace(model, gitops=CUSTOM, delivery=delivery), placement).files)


def sync_policy(layer: str, cluster: str, path: str, *depends_on: str) -> str:
    needs = "".join(f"          - name: {name}\n" for name in depends_on)
    return f"""\
    - name: {layer}-{cluster}
      destination:
        fleet: prod
        clusterSelector:
          matchLabels:
            fleetc.dev/cluster: {cluster}
      kustomization:
{"        dependsOn:" + chr(10) + needs if needs else ""}\
        interval: 10m
        retryInterval: 1m
        path: ./deploy/fleet/{path}
        prune: true
"""


def policies_of(cluster: str, kind: str = "attachedcluster") -> str:
    infra, local = (f"{layer}-{cluster}-{kind}-{cluster}" for layer in ("infra", "local"))
    return (sync_policy("infra", cluster, f"clusters/{cluster}/infra")
            + sync_policy("local", cluster, f"local/{cluster}", infra)
            + sync_policy("workloads", cluster, f"clusters/{cluster}/workloads", infra, local))


APPLICATION_TEXT = """\
apiVersion: apps.kurator.dev/v1alpha1
kind: Application
metadata:
  name: fleetc
  namespace: fleetc-system
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: fleet.yaml#spec.gitops
spec:
  source:
    gitRepository:
      interval: 5m
      url: https://git.example.org/team/fleet.git
      ref:
        branch: release
      secretRef:
        name: fleet-repo-credentials
  destination:
    fleet: prod
  syncPolicies:
""" + policies_of("cpu-only") + policies_of("gpu-east", "cluster") + policies_of("gpu-west")


def test_application_exact_text() -> None:
    files = files_with(Delivery(("kurator",), (("gpu-east", "Cluster"),)))
    assert files[APPLICATION] == APPLICATION_TEXT
    assert read(files["kurator/kustomization.yaml"])["resources"] == ["application-fleetc-system-fleetc.yaml"]


@pytest.mark.slow
def test_application_is_valid_against_kurators_crd(tmp_path: Path) -> None:
    write(files_with(Delivery(("kurator",))), tmp_path)
    assert validate_tree(tmp_path / "kurator") == []
    application = read((tmp_path / APPLICATION).read_text())
    application["spec"]["syncPolicies"][0]["kustomization"]["wait"] = True  # Flux's, not Kurator's
    assert validate_object(application) == ["spec/syncPolicies/0/kustomization: Additional properties "
                                            "are not allowed ('wait' was unexpected)"]


@pytest.mark.parametrize(("chosen", "folders"), [
    (Delivery(), {"argocd", "flux"}),
    (Delivery(("kurator",)), {"kurator"}),
    (Delivery(("argocd", "kurator")), {"argocd", "kurator"}),
    (Delivery(("flux",)), {"flux"}),
    (Delivery(("argocd", "flux", "kurator")), {"argocd", "flux", "kurator"}),
])
def test_the_fleet_chooses_the_entry_points(chosen: Delivery, folders: set[str]) -> None:
    files = files_with(chosen)
    entry_folders = {path.split("/")[0] for path in files} - {"clusters", "local", "placement.yaml", ".fleetc"}
    assert entry_folders == folders
    assert {p for p in files if p.startswith("clusters/")} == {p for p in files_with(Delivery()) if
                                                               p.startswith("clusters/")}


def test_the_policies_choose_the_entry_points_and_the_default_is_unchanged() -> None:
    policies = read_policies(ROOT / "policies")
    default = compile_texts(policies)
    assert not any(p.startswith("kurator/") for p in default)
    both = compile_texts(with_entry_points(policies, "kurator"))
    assert {p for p in both if p.startswith("kurator/")} == {"kurator/application-kurator-system-fleetc.yaml",
                                                             "kurator/kustomization.yaml"}
    assert not any(p.startswith("flux/") for p in both)
    def same(files: dict[str, str]) -> dict[str, str]:  # placement.yaml's inputs digest counts every policy field
        return {p: re.sub(r"\ninputs: .*", "", t) for p, t in files.items() if not p.startswith(("flux/", "kurator/"))}

    assert same(both) == same(default)


def test_kustomization_names_are_kurators() -> None:
    """Kurator's own documentation names the Kustomization of an unnamed first sync policy of
    Application rollout-demo on AttachedCluster kurator-member1 (kurator v0.6.0
    docs/content/en/docs/fleet-manager/rollout/canary.md)."""
    assert kustomization_name("rollout-demo-0", "AttachedCluster", "kurator-member1") == \
        "rollout-demo-0-attachedcluster-kurator-member1"
    application = {"metadata": {"name": "rollout-demo", "namespace": "default"},
                   "spec": {"destination": {"fleet": "quickstart"},
                            "syncPolicies": [{"kustomization": {"path": "./deploy", "prune": True}}]}}
    made = kurator_kustomizations(application, [Member("kurator-member1", "AttachedCluster", {})])
    assert [k["metadata"]["name"] for k in made] == ["rollout-demo-0-attachedcluster-kurator-member1"]
    long = "c" * 60
    assert kustomization_name(f"workloads-{long}", "AttachedCluster", long) == f"workloads-{long}"[:63]


def test_each_sync_policy_selects_exactly_its_cluster() -> None:
    files = compile_texts(with_entry_points(read_policies(ROOT / "policies"), "kurator"))
    application = kurator_application(files)
    members = [Member(name, "AttachedCluster", {CLUSTER_LABEL: name, KURATOR_FLEET_LABEL: "aigc-platform"})
               for name in ("edge-cluster-factory", "gpu-cluster-huawei", "inference-cluster-aliyun")]
    made = kurator_kustomizations(application, members)
    by_target: dict[str, list[str]] = {}
    for kustomization in made:
        by_target.setdefault(kustomization["spec"]["kubeConfig"]["secretRef"]["name"], []).append(
            kustomization["spec"]["path"])
    assert by_target == {m.name: [f"./out/clusters/{m.name}/infra", f"./out/local/{m.name}",
                                  f"./out/clusters/{m.name}/workloads"] for m in members}
    # an unlabelled cluster object receives nothing
    assert kurator_kustomizations(application, [Member("gpu-cluster-huawei", "AttachedCluster",
                                                       {KURATOR_FLEET_LABEL: "aigc-platform"})]) == []


def test_a_cluster_of_kind_cluster_converges() -> None:
    """Kurator names a Kustomization after the cluster object's kind: dependsOn must name the
    kind the Fleet says, or the workloads wait for a Kustomization that never exists."""
    policies = with_entry_points(read_policies(ROOT / "policies"), "kurator")
    path = "policies/fleet.yaml"
    entry = "- name: gpu-cluster-huawei\n"
    policies[path] = policies[path].replace(entry, entry + "    kind: Cluster\n")
    files = compile_texts(policies)
    assert "infra-gpu-cluster-huawei-cluster-gpu-cluster-huawei" in files[
        "kurator/application-kurator-system-fleetc.yaml"]
    Fleet("kurator", {"gpu-cluster-huawei": "Cluster"}).sync(files)


@pytest.mark.slow
def test_check_covers_every_file_the_application_reads(tmp_path: Path) -> None:
    """Every file under a path a sync policy names, and the Application itself, is compared by
    ``--check`` (the user's ``local/`` folder is the user's, as for Flux: only its first
    kustomization.yaml is fleetc's, and only while it is missing)."""
    files = compile_texts(with_entry_points(read_policies(ROOT / "policies"), "kurator"))
    out = tmp_path / "out"
    write_tree(out, files)
    application = kurator_application(files)
    paths = [policy["kustomization"]["path"].removeprefix("./out/") for policy in application["spec"]["syncPolicies"]]
    read = sorted(rel for rel in files for path in paths if rel.startswith(f"{path}/") and not rel.startswith("local/"))
    assert len(paths) == 9 and read
    for rel in [*read, *(p for p in files if p.startswith("kurator/"))]:
        target = out / rel
        original = target.read_bytes()
        target.write_bytes(original + b"# edited\n")
        assert changes(out, files) == [Change(rel, "changed")], rel
        target.unlink()
        assert changes(out, files) == [Change(rel, "added")], rel
        target.write_bytes(original)
    for path in paths:
        assert (out / path / "kustomization.yaml").is_file(), path
    assert changes(out, files) == []


def test_long_cluster_names_that_kurator_would_merge_are_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fleetc.cli import cli

    policies = with_entry_points(read_policies(ROOT / "policies"), "kurator")
    path = "policies/fleet.yaml"
    long = "inference-cluster-aliyun-" + "x" * 30
    policies[path] = re.sub(r"- name: (inference-cluster-aliyun|edge-cluster-factory)\n",
                            lambda m: f"- name: {long}-{1 if m.group(1).startswith('inf') else 2}\n", policies[path])
    for rel, text in policies.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    result = CliRunner().invoke(cli, ["validate", str(tmp_path / "policies")])
    assert result.exit_code == 1
    assert f"spec.clusters[2].name: cluster '{long}-2' and cluster '{long}-1' (spec.clusters[1])" in result.output
    assert "would share the Kustomization 'workloads-inference-cluster-aliyun-xxxxxxxxxxxxxxxxxxxxxxxxxxxx'" \
        in result.output
    assert "hint: shorten one of the cluster names" in result.output


def test_the_placeholder_warning_names_the_chosen_entry_points() -> None:
    model, placement = fleet()
    for chosen, readers in [(Delivery(), "Argo CD and Flux"), (Delivery(("kurator",)), "Kurator"),
                            (Delivery(("argocd", "flux", "kurator")), "Argo CD, Flux and Kurator")]:
        (warning,) = [w for w in render(replace(model, delivery=chosen), placement).warnings
                      if w.field == "spec.gitops.repoURL"]
        assert warning.message == f"not set: {readers} would read the placeholder https://git.example.com/fleet.git"


def test_compile_check_names_an_edited_file_the_application_reads(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: ``fleetc compile --check`` over the golden Kurator case's output."""
    import shutil

    from click.testing import CliRunner
    from support.corpus import CASES

    from fleetc.cli import cli

    shutil.copytree(CASES / "kurator-entry-point" / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(cli, ["compile", "policies"]).exit_code == 0
    assert CliRunner().invoke(cli, ["compile", "policies", "--check"]).exit_code == 0
    for rel in ("kurator/application-kurator-system-fleetc.yaml", "clusters/serve-l4/infra/kustomization.yaml"):
        target = tmp_path / "out" / rel
        original = target.read_text()
        target.write_text(original + "# edited\n")
        result = CliRunner().invoke(cli, ["compile", "policies", "--check"])
        assert result.exit_code == 1 and rel in result.output, result.output
        target.write_text(original)
