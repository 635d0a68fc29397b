"""``explain`` names the rule that decided, not a score that did not (issue 28 item 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetc.cli import cli
from fleetc.compiler import compile_policies, load_policy_sources
from fleetc.placement import explain as why

FLEET = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata:
  name: f
spec:
  clusters:
  - name: a
    provider: aws
    region: us-east-1
    attributes: {gpu-type: a100, gpu-count: "16"}
  - name: h
    provider: aws
    region: us-west-2
    attributes: {gpu-type: h100, gpu-count: "16"}
"""
SERVING = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata:
  name: llm
spec:
  stages:
  - name: serve
    type: Deployment
    replicas: 4
    resources: {gpu: 1, gpuType: [a100, h100]}
---
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPlatform
metadata:
  name: chat
spec:
  multiCluster:
    primaryCluster: a
    secondaryClusters: [h]
"""


def test_replicas_on_a_later_gpu_type_that_multicluster_asks_for_name_the_set_not_a_score() -> None:
    """The serving stage prefers a100 and runs on a (a100) and h (h100): its replica on h is
    there because the multiCluster set runs it on every cluster of the set. The explanation
    said 'a100 not taken: a has room, but the stage scores 0.8170 there against 0.6244 on h'
    where a100 was taken."""
    loaded = load_policy_sources([("fleet.yaml", FLEET.encode()), ("p.yaml", SERVING.encode())], "test")
    compiled = compile_policies(loaded)
    text = why.format_text(why.explain(compiled.model, compiled.placement, "llm/serve", {}))
    assert ("GPU type: a100, h100, alternative 2 of [a100, h100]; a100 taken, not for every replica: the "
            "multiCluster set of chat serves it active-active on each of its clusters, h among them "
            "(1 replica there)") in text
    assert "scores" not in text.split("GPU type:")[1]
    report = compiled.files["placement.yaml"]
    assert ("      passed:\n        - gpuType: a100\n          why: the multiCluster set of chat serves it "
            "active-active on each of its clusters, h among them (1 replica there)\n") in report


def test_a_drained_cluster_is_worded_drained_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compile, explain and a what-if of a drain say "drained", never "cordoned" (a Fleet flag)."""
    shutil.copytree(Path(__file__).parent / "cases" / "degraded-serving" / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    outputs = [runner.invoke(cli, args) for args in (
        ["compile", "--drain", "a"], ["explain", "llm/serve", "--drain", "a"],
        ["diff", "--what-if", "drain=b"], ["diff", "--what-if", "drain=b", "--format", "markdown"])]
    assert [r.exit_code for r in outputs] == [0, 0, 0, 0], [r.output for r in outputs]
    text = "".join(r.stdout + r.stderr for r in outputs)
    assert "is drained" in text and "filtered out: drained" in text
    assert "cordon" not in text.lower()
