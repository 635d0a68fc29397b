"""The documented defaults, derived from what the seed's examples say."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetc.errors import PolicyError, UsageError
from fleetc.model import StageType, Taint, Toleration
from fleetc.policy.load import load_files
from fleetc.policy.quantity import GIB
from fleetc.policy.validate import validate
from fleetc.resolve import resolve

SEED = Path(__file__).parent / "seed"
SCENARIO = ["aigc-fleet", "llm-training-pipeline", "gpu-optimization", "data-optimization"]


def seed_model(*names: str, drained: tuple[str, ...] = (), folder: Path = SEED):
    loaded = load_files([folder / f"{n}.yaml" for n in names])
    policies, diagnostics = validate(loaded.documents)
    assert not diagnostics
    return resolve(policies, "seed", drained)


@pytest.fixture(scope="module")
def model():
    return seed_model(*SCENARIO)


def test_clusters_are_sorted_and_derive_capacity_from_gpu_count(model) -> None:
    assert [c.name for c in model.clusters] == [
        "edge-cluster-factory", "gpu-cluster-huawei", "inference-cluster-aliyun"]
    edge, huawei, aliyun = model.clusters
    assert (huawei.gpu_type, huawei.gpus, huawei.cpu_millis, huawei.memory_bytes) == (
        "a100", 64, 64 * 16 * 1000, 64 * 128 * GIB)
    assert (aliyun.gpu_type, aliyun.gpus) == ("t4", 32)
    assert (edge.gpu_type, edge.gpus, edge.cpu_millis, edge.memory_bytes) == (
        None, 0, 16 * 1000, 64 * GIB)  # low-power site without GPUs


def test_cluster_defaults_from_attributes_and_region(model) -> None:
    edge, huawei, aliyun = model.clusters
    assert huawei.taints == (Taint("gpu-type", "a100", "NoSchedule"),)
    assert edge.taints == ()
    assert (huawei.jurisdiction, aliyun.jurisdiction, edge.jurisdiction) == ("cn", "cn", "factory")
    assert (edge.energy_efficiency, huawei.energy_efficiency) == (0.9, 0.6)
    assert huawei.network_tier == "high-performance" and aliyun.network_tier == "standard"
    assert aliyun.low_latency and not huawei.low_latency
    assert edge.edge and not edge.cordoned
    assert (huawei.gpu_hour_cost, aliyun.gpu_hour_cost) == (3.0, 0.5)


def test_bare_stages_get_documented_defaults(model) -> None:
    prep, train, evaluation, deploy = model.stages
    assert (prep.type, prep.gpus, prep.cpu_millis, prep.memory_bytes) == (
        StageType.DATAPROC, 0, 16_000, 64 * GIB)
    assert (train.gpus, train.gpu_types, train.replicas) == (8, ("a100",), 1)
    assert (evaluation.gpus, evaluation.gpu_types, evaluation.cpu_millis,
            evaluation.memory_bytes, evaluation.replicas) == (1, (), 8000, 32 * GIB, 1)
    assert (deploy.gpus, deploy.replicas, deploy.min_replicas_per_cluster, deploy.shared_gpu,
            deploy.cpu_millis, deploy.memory_bytes) == (1, 2, 1, True, 8000, 16 * GIB)
    assert deploy.image == "nvcr.io/nvidia/tritonserver:24.05-py3"
    assert all(s.namespace == "aigc-prod" for s in model.stages)


def test_from_inputs_resolve_to_the_producing_output(model) -> None:
    train = model.stages[1]
    (data,) = train.inputs
    assert (data.url, data.from_stage, data.from_output) == (
        "nfs://shared-storage/processed/", "data-preparation", "processed-data")
    assert train.dependencies == ("data-preparation",)


def test_fleet_tolerations_reach_every_stage(model) -> None:
    toleration = Toleration("gpu-type", "Exists", "", "NoSchedule")
    assert all(toleration in s.tolerations for s in model.stages)


def test_weights_and_policies(model) -> None:
    assert (model.class_weights.training, model.class_weights.inference,
            model.class_weights.finetuning) == (0.6, 0.3, 0.1)
    gpu = model.gpu_policy
    assert (gpu.time_slicing_replicas, gpu.defragment_threshold, gpu.max_sharers) == (4, 0.8, 2)
    (data,) = model.data_policies
    assert (data.caching_strategy, data.caching_size_bytes, data.prefetch_lookahead,
            data.parallelization) == ("LFU", 100 * GIB, 32, 16)
    assert model.gitops.repo_url == "https://git.example.com/fleet.git"


def test_platform_defaults_govern_every_pipeline() -> None:
    folder = Path(__file__).parent / "cases" / "seed-finance-scenario" / "policies"
    model = seed_model("finance-aigc-platform", "risk-pipeline", "finance-fleet", folder=folder)
    (platform,) = model.platforms
    assert platform.pipelines == ("risk-assessment",)
    assert (platform.inference_timeout_seconds, platform.training_priority) == (5.0, "high")
    assert platform.secondary_clusters == ("finance-dr-sg", "finance-edge-sh")


def test_drain_cordons_a_cluster_for_one_compile() -> None:
    model = seed_model(*SCENARIO, drained=("gpu-cluster-huawei",))
    assert [c.cordoned for c in model.clusters] == [False, True, False]


def test_drain_of_an_unknown_cluster_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--drain gpu-cluster: no cluster of that name"):
        seed_model(*SCENARIO, drained=("gpu-cluster",))


def test_no_fleet_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="no Fleet found"):
        seed_model("llm-training-pipeline")
