"""Determinism: the same policies give the same bytes, whatever the hash seed and the order in
which fleetc reads the documents.

How the order is varied: discovery sorts file names, so shuffling files in a folder (or creating
them in another order) would not change what fleetc sees. Instead each run concatenates every
bundled document into one multi-document file, ``policies/all.yaml``, in a different order. The
validator, resolver and optimizer then really receive the documents in ten different orders,
while the file name (and with it every ``fleetc.dev/source`` annotation) stays the same, so whole
output trees can be compared byte for byte. Each run is a fresh process with its own
``PYTHONHASHSEED``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.corpus import read_tree_bytes

from fleetc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
RUNS = 10


def documents() -> list[str]:
    """Every document of the bundled example, as text."""
    found = []
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        found += [d.strip("\n") + "\n" for d in path.read_text().split("\n---\n") if d.strip()]
    return found


@pytest.mark.slow
def test_ten_compiles_in_different_orders_and_hash_seeds_are_byte_identical(tmp_path: Path) -> None:
    docs = documents()
    orders = []
    processes = []
    for run in range(RUNS):
        order = list(range(len(docs)))
        random.Random(run).shuffle(order)
        orders.append(tuple(order))
        folder = tmp_path / f"run{run}"
        (folder / "policies").mkdir(parents=True)
        (folder / "policies" / "all.yaml").write_text("---\n".join(docs[i] for i in order))
        env = {**os.environ, "PYTHONHASHSEED": str(run * 7919 + 1)}
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "fleetc", "compile", "policies", "--out", "out"], cwd=folder,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        if len(processes) % 2 == 0:  # two at a time: the machine has two cores
            for process in processes[-2:]:
                process.wait(timeout=300)
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0] * RUNS, outputs
    assert len(set(orders)) == RUNS and len(docs) == 6
    first = read_tree_bytes(tmp_path / "run0" / "out")
    assert "placement.yaml" in first
    for run in range(1, RUNS):
        assert read_tree_bytes(tmp_path / f"run{run}" / "out") == first, f"run {run} differs from run 0"
    assert len({o for o, _e in outputs}) == 1  # the summaries agree too


def test_the_same_policies_compiled_from_anywhere_give_the_same_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Provenance names policy files relative to the policy root fleetc is given, never the
    working folder: from the repository, from inside policies/, from elsewhere by an absolute
    path, the output is byte for byte the same."""
    project = tmp_path / "project"
    (project / "policies").mkdir(parents=True)
    for path in (ROOT / "policies").glob("*.yaml"):
        (project / "policies" / path.name).write_bytes(path.read_bytes())
    (tmp_path / "elsewhere").mkdir()
    runs = {"repository": (project, "policies"), "inside": (project / "policies", "."),
            "elsewhere": (tmp_path / "elsewhere", str(project / "policies"))}
    trees = {}
    for name, (cwd, given) in runs.items():
        monkeypatch.chdir(cwd)
        result = CliRunner().invoke(cli, ["compile", given, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        trees[name] = read_tree_bytes(tmp_path / name)
    assert trees["inside"] == trees["repository"] == trees["elsewhere"]
    everything = b"".join(trees["repository"].values())
    assert b"fleetc.dev/source: llm-training-pipeline.yaml#spec.stages[1]" in everything
    assert b"policies/" not in everything
