"""Filters, reasons and each score term of :mod:`fleetc.scoring` on hand-computed examples.

The ``make_*`` helpers live in ``tests/support/builders.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.builders import GPU_TAINT, make_cluster, make_fleet, make_input, make_stage

from fleetc.model import (
    Cluster,
    ScoreWeights,
    Stage,
    StageType,
    Taint,
    Toleration,
)
from fleetc.scoring import filter_reason, score_matrix

# --- filters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "cluster", "reason"),
    [
        (make_stage(), make_cluster(gpu_type=None, gpus=0), "no GPUs"),
        (make_stage(gpu_type="a100"), make_cluster(gpu_type="h100"), "no a100"),
        (
            make_stage(),
            make_cluster(taints=(GPU_TAINT,)),
            "untolerated taint gpu-type=a100:NoSchedule",
        ),
        (
            make_stage(gpus=16),
            make_cluster(gpus=8),
            "too small: 16 GPUs per replica, cluster has 8",
        ),
        (
            make_stage(cores=96),
            make_cluster(cores=64),
            "too small: 96 cores per replica, cluster has 64",
        ),
        (
            make_stage(memory_gib=256),
            make_cluster(memory_gib=128),
            "too small: 256Gi memory per replica, cluster has 128Gi",
        ),
    ],
)
def test_filter_reasons(stage: Stage, cluster: Cluster, reason: str) -> None:
    assert filter_reason(stage, cluster) == reason


@pytest.mark.parametrize(
    ("stage", "cluster"),
    [
        (make_stage(gpus=0), make_cluster(gpu_type=None, gpus=0)),
        (make_stage(gpus=0), make_cluster()),  # CPU work may use a GPU cluster
        (make_stage(gpu_type="a100"), make_cluster(gpu_type="a100")),
        (
            make_stage(tolerations=(Toleration("gpu-type", "Equal", "a100"),)),
            make_cluster(taints=(GPU_TAINT,)),
        ),
        (
            make_stage(tolerations=(Toleration("gpu-type", "Exists"),)),
            make_cluster(taints=(GPU_TAINT,)),
        ),
        (make_stage(), make_cluster(taints=(Taint("spot", "true", "PreferNoSchedule"),))),
        (make_stage(replicas=4), make_cluster(gpus=8)),  # only one replica must fit the total
    ],
)
def test_filter_allows(stage: Stage, cluster: Cluster) -> None:
    assert filter_reason(stage, cluster) == ""


def test_score_matrix_allowed_and_reasons_follow_model_order() -> None:
    model = make_fleet(
        (
            make_cluster("a100s"),
            make_cluster("cpus", gpu_type=None, gpus=0),
            make_cluster("h100s", gpu_type="h100"),
        ),
        (make_stage("train", gpu_type="a100"), make_stage("prep", gpus=0)),
    )
    scores = score_matrix(model)
    assert scores.allowed.tolist() == [[True, False, False], [True, True, True]]
    assert scores.reasons == {(0, 1): "no GPUs", (0, 2): "no a100"}
    for term in (scores.compute, scores.cost, scores.network, scores.energy, scores.total):
        assert term.shape == (2, 3)
        assert term[0, 1] == term[0, 2] == 0.0


# --- score terms ------------------------------------------------------------------------------


def test_compute_for_gpu_stage() -> None:
    # rs = 64Gi / 8 cores = 8 = rc (512Gi / 64 cores): balance 1; utilisation 1 - 0.25.
    model = make_fleet((make_cluster(utilization=0.25),), (make_stage(cores=8, memory_gib=64),))
    assert score_matrix(model).compute[0, 0] == pytest.approx(0.5 * 1.0 + 0.3 * 1.0 + 0.2 * 0.75)


def test_compute_keeps_cpu_work_off_gpus() -> None:
    # rs = 32/4 = 8. GPU cluster: rc = 8, gpu_compat 0.5. CPU cluster: rc = 64/32 = 2,
    # balance = 1 - 6/10 = 0.4, gpu_compat 1.0.
    model = make_fleet(
        (make_cluster("gpu"), make_cluster("cpu", gpu_type=None, gpus=0, cores=32, memory_gib=64)),
        (make_stage(gpus=0, cores=4, memory_gib=32),),
    )
    compute = score_matrix(model).compute[0]
    assert compute[0] == pytest.approx(0.5 * 0.5 + 0.3 * 1.0 + 0.2)
    assert compute[1] == pytest.approx(0.5 * 1.0 + 0.3 * 0.4 + 0.2)


def test_cost_is_cheapest_allowed_over_this() -> None:
    # 2 replicas x (8 GPUs x price + 8 cores x 0.05 + 64 GiB x 0.01)
    cheap, dear = 2 * (8 * 2.0 + 0.4 + 0.64), 2 * (8 * 4.0 + 0.4 + 0.64)
    model = make_fleet(
        (
            make_cluster("cheap", gpus=16),
            make_cluster("dear", gpus=16, gpu_hour_cost=4.0),
            make_cluster("cheapest-but-h100", gpus=16, gpu_type="h100", gpu_hour_cost=0.1),
        ),
        (make_stage(replicas=2, gpu_type="a100"),),
    )
    assert score_matrix(model).cost[0].tolist() == pytest.approx([1.0, cheap / dear, 0.0])


def test_free_cluster_costs_nothing() -> None:
    free = make_cluster(gpu_hour_cost=0.0, cpu_hour_cost=0.0, memory_gib_hour_cost=0.0)
    assert score_matrix(make_fleet((free,), (make_stage(),))).cost[0, 0] == 1.0


def test_network_locality_and_tier() -> None:
    inputs = (
        make_input("eu-west"),
        make_input(None),
        make_input("us-east"),
        make_input(None, from_stage="prep"),
    )
    model = make_fleet(
        (
            make_cluster("fast", network_tier="high-performance"),
            make_cluster("slow", network_tier="low"),
        ),
        (make_stage(inputs=inputs), make_stage("bare")),
    )
    locality = (1.0 + 0.5 + 0.25 + 0.5) / 4
    network = score_matrix(model).network
    assert network[0].tolist() == pytest.approx(
        [0.6 * locality + 0.4 * 1.0, 0.6 * locality + 0.4 * 0.25]
    )
    assert network[1].tolist() == pytest.approx([0.6 + 0.4, 0.6 + 0.4 * 0.25])


def test_network_link_for_deployments_is_latency() -> None:
    model = make_fleet(
        (
            make_cluster("edge", low_latency=True, network_tier="low"),
            make_cluster("core", network_tier="high-performance"),
        ),
        (make_stage(type=StageType.DEPLOYMENT),),
    )
    assert score_matrix(model).network[0].tolist() == pytest.approx([1.0, 0.6 + 0.4 * 0.5])


def test_energy_and_total() -> None:
    model = make_fleet(
        (make_cluster(energy_efficiency=0.9),),
        (make_stage(),),
        score_weights=ScoreWeights(compute=1, cost=1, network=1, energy=2),
    )
    scores = score_matrix(model)
    assert scores.energy[0, 0] == 0.9
    expected = (scores.compute + scores.cost + scores.network + 2 * scores.energy) / 5
    assert scores.total[0, 0] == pytest.approx(expected[0, 0])


def test_terms_stay_in_unit_interval() -> None:
    model = make_fleet(
        (
            make_cluster("a", utilization=0.9),
            make_cluster("b", gpu_type=None, gpus=0, cores=2, memory_gib=1),
        ),
        (
            make_stage(gpus=0, cores=0.5, memory_gib=200),
            make_stage(gpus=0, cores=1, memory_gib=0.5),
        ),
    )
    scores = score_matrix(model)
    for term in (scores.compute, scores.cost, scores.network, scores.energy, scores.total):
        assert np.all((term >= 0) & (term <= 1))
