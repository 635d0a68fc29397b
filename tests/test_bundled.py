"""The bundled example: out/ is current, every rendered object is one a real cluster accepts,
and compiling is deterministic across processes and hash seeds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.k8s import kustomize_build, require_upstream_schemas, validate_tree
from support.yamlread import read

from fleetc.compiler import compile_policies, load_policies
from fleetc.emit import RECORD, changes

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).parent / "cases"
RENDERED_TREES = [ROOT / "out"] + sorted(p / "expected" for p in CASES.iterdir()
                                         if (p / "expected").is_dir())


def tree_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def bundled_files() -> dict[str, str]:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return dict(compile_policies(load_policies(["policies"])).files)
    finally:
        os.chdir(cwd)


def test_committed_out_is_current(bundled_files: dict[str, str]) -> None:
    stale = changes(ROOT / "out", bundled_files)
    assert not stale, f"out/ is stale, run `fleetc compile`: {stale}"


def test_bundled_scenario_uses_every_cluster_and_class(bundled_files: dict[str, str]) -> None:
    clusters = {path.split("/")[1] for path in bundled_files if path.startswith("clusters/")}
    assert clusters == {"gpu-cluster-huawei", "inference-cluster-aliyun", "edge-cluster-factory"}
    queues = {path.rsplit("/", 1)[1] for path in bundled_files if "/queue-" in path}
    assert queues == {"queue-fleetc-training.yaml", "queue-fleetc-inference.yaml",
                      "queue-fleetc-finetuning.yaml"}


@pytest.mark.parametrize("tree", [pytest.param(tree, marks=[pytest.mark.slow] if tree == ROOT / "out" else [])
                                  for tree in RENDERED_TREES], ids=tree_id)  # the bundled out/: 3 s
def test_rendered_objects_validate_strictly(tree: Path) -> None:
    require_upstream_schemas()
    assert validate_tree(tree) == []


@pytest.mark.parametrize("tree", RENDERED_TREES, ids=tree_id)
def test_kustomize_builds_every_cluster(tree: Path) -> None:
    folders = sorted(p for p in (tree / "clusters").iterdir() if p.is_dir())
    assert folders
    built = {folder.name: kustomize_build(folder) for folder in folders}  # fails when a build fails
    assert any("kind:" in text for text in built.values())  # a cluster that runs nothing builds empty


@pytest.mark.parametrize("tree", RENDERED_TREES, ids=tree_id)
def test_every_object_carries_the_fleetc_labels(tree: Path) -> None:
    for path in sorted((tree / "clusters").rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        obj = read(path.read_text(encoding="utf-8"))
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "fleetc", path
        if obj["kind"] in ("Job", "Deployment", "Service"):
            assert labels.get("fleetc.dev/pipeline") and labels.get("fleetc.dev/stage"), path
        assert obj["kind"] != "Secret", path


def _compile_in_subprocess(policies: Path, out: Path, hash_seed: str) -> dict[str, bytes]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run([sys.executable, "-m", "fleetc", "compile", str(policies), "--out", str(out)],
                   cwd=policies.parent, env=env, check=True, capture_output=True)
    return {p.relative_to(out).as_posix(): p.read_bytes()
            for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_output_is_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    trees = [_compile_in_subprocess(ROOT / "policies", tmp_path / f"out-{seed}", seed)
             for seed in ("0", "1", "4242")]
    assert trees[0] == trees[1] == trees[2]
    committed = {p.relative_to(ROOT / "out").as_posix(): p.read_bytes()
                 for p in sorted((ROOT / "out").rglob("*")) if p.is_file()}
    assert trees[0] == committed
    assert RECORD in trees[0]
