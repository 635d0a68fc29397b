"""fleetc's derived GPU taint never makes a stage unplaceable by itself (issue 28 item 3)."""

from __future__ import annotations

import pytest
import yaml

from fleetc.compiler import Compiled, compile_policies, load_policy_sources
from fleetc.errors import PlacementError
from fleetc.placement.scoring import GPU_TAINT_PENALTY, score_matrix

GPU = """\
  - name: gpu
    provider: aws
    region: us-east-1
    attributes: {gpu-type: h100, gpu-count: "16"}
"""
WRITTEN_TAINT = """\
    taints:
    - {key: gpu-type, value: h100, effect: NoSchedule}
"""


def cpu_cluster(cores: int) -> str:
    return f"  - name: cpu\n    provider: aws\n    region: us-east-1\n    capacity: {{cpu: '{cores}', memory: 256Gi}}\n"


def compiled(*clusters: str) -> Compiled:
    fleet = ("apiVersion: fleet.kurator.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: f\nspec:\n  clusters:\n"
             + "".join(clusters))
    pipeline = ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: llm\nspec:\n"
                "  stages:\n  - name: prep\n    type: DataProc\n    resources: {cpu: '8', memory: 16Gi}\n"
                "  - name: train\n    type: Training\n    dependencies: [prep]\n"
                "    resources: {gpu: 8, gpuType: h100}\n")
    loaded = load_policy_sources([("fleet.yaml", fleet.encode()), ("p.yaml", pipeline.encode())], "test")
    return compile_policies(loaded)


def placed_on(result: Compiled, stage: str) -> list[str]:
    [placed] = [p for p in result.placement.stages if p.stage == f"llm/{stage}"]
    return [a.cluster for a in placed.assignments if a.replicas]


def tolerations(result: Compiled, cluster: str, stage: str) -> list[dict[str, str]]:
    [path] = [p for p in result.files if p.startswith(f"clusters/{cluster}/workloads/") and f"-{stage}-" in p]
    job = yaml.safe_load(result.files[path])
    return list(job["spec"]["tasks"][0]["template"]["spec"].get("tolerations", []))


def test_a_cpu_stage_on_a_fleet_of_gpu_clusters_runs_there_tolerating_the_derived_taint() -> None:
    result = compiled(GPU)
    assert placed_on(result, "prep") == ["gpu"]
    assert tolerations(result, "gpu", "prep") == [
        {"key": "gpu-type", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]


def test_a_cpu_stage_prefers_a_cluster_without_gpus_and_its_pods_there_tolerate_nothing() -> None:
    result = compiled(GPU, cpu_cluster(64))
    assert placed_on(result, "prep") == ["cpu"]
    assert tolerations(result, "cpu", "prep") == []


def test_a_cpu_stage_falls_back_to_a_gpu_cluster_where_no_cpu_cluster_has_room() -> None:
    assert placed_on(compiled(GPU, cpu_cluster(4)), "prep") == ["gpu"]


def test_a_taint_the_user_wrote_stays_hard() -> None:
    with pytest.raises(PlacementError) as caught:
        compiled(GPU + WRITTEN_TAINT)
    assert any("untolerated taint gpu-type=h100:NoSchedule" in reason for reason in caught.value.reasons)


def test_the_derived_taint_costs_a_cpu_stage_the_penalty_and_a_gpu_stage_nothing() -> None:
    model = compiled(GPU, cpu_cluster(64)).model
    scores = score_matrix(model)
    gpu = [c.name for c in model.clusters].index("gpu")
    prep, train = ([s.key for s in model.stages].index(f"llm/{s}") for s in ("prep", "train"))
    assert scores.allowed[prep, gpu] and scores.allowed[train, gpu]
    without = compiled(GPU.replace("attributes: {gpu-type: h100, gpu-count: \"16\"}",
                                   "attributes: {gpu-type: h100, gpu-count: \"16\"}\n    taints: []"),
                       cpu_cluster(64)).model
    plain = score_matrix(without)
    assert scores.total[prep, gpu] == pytest.approx(plain.total[prep, gpu] - GPU_TAINT_PENALTY)
    assert scores.total[train, gpu] == pytest.approx(plain.total[train, gpu])
