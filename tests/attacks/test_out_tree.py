"""Attacks on which folders the GitOps engines sync (issue 27, critical): a folder added by hand
as ``out/clusters/<any-name>/`` must never become an Argo CD Application, whatever its name.

PROMISE (``covered``): the ApplicationSet and the Flux Kustomizations read only folders fleetc
renders for the Fleet's clusters, so ``compile --check`` covers everything they apply. The
engines are the models of :mod:`support.engines` (argo-cd v3.5.0's generators).
"""

from __future__ import annotations

import posixpath

import pytest
from support.corpus import ROOT, compile_texts, read_policies
from support.engines import applicationset_applications
from support.yamlread import read


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return compile_texts(read_policies(ROOT / "policies"))


def folders(paths: list[str]) -> list[str]:
    """Every folder of a repository holding ``paths``, as git lists them."""
    found = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent:
            found.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(found)


@pytest.mark.parametrize("planted", ["in-cluster", "gpu-cluster-huawei-copy", "x"])
def test_a_folder_added_by_hand_under_clusters_gets_no_application(files: dict[str, str], planted: str) -> None:
    appset = read(files["argocd/applicationset-argocd-fleetc.yaml"])
    repository = [f"out/{path}" for path in files] + [f"out/clusters/{planted}/clusterrolebinding.yaml"]
    applications = applicationset_applications(appset, folders(repository))
    fleet = sorted({path.split("/")[1] for path in files if path.startswith("clusters/")})
    assert applications == {f"fleetc-{name}": (f"out/clusters/{name}", name) for name in fleet}


def test_the_model_of_the_git_directory_generator_takes_every_folder() -> None:
    """The model's git generator (what fleetc rendered before) does sync a planted folder."""
    appset = {"spec": {"generators": [{"git": {"directories": [{"path": "out/clusters/*"}]}}],
                       "template": {"metadata": {"name": "fleetc-{{.path.basename}}"},
                                    "spec": {"source": {"path": "{{.path.path}}"},
                                             "destination": {"name": "{{.path.basename}}"}}}}}
    found = applicationset_applications(appset, ["out", "out/clusters", "out/clusters/a", "out/clusters/a/infra",
                                                 "out/clusters/in-cluster"])
    assert found == {"fleetc-a": ("out/clusters/a", "a"),
                     "fleetc-in-cluster": ("out/clusters/in-cluster", "in-cluster")}


def test_flux_reads_only_the_fleets_folders(files: dict[str, str]) -> None:
    paths = sorted(read(text)["spec"]["path"] for path, text in files.items()
                   if path.startswith("flux/") and "kustomization-flux-system" in path)
    fleet = sorted({path.split("/")[1] for path in files if path.startswith("clusters/")})
    assert paths == sorted(f"./out/{folder}" for name in fleet
                           for folder in (f"clusters/{name}/infra", f"clusters/{name}/workloads", f"local/{name}"))
