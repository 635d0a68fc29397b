"""Filters, reasons and each score term of :mod:`fleetc.placement.scoring` on hand-computed examples, and
the vectorised filters against :func:`~fleetc.placement.scoring.filter_reason` on generated fleets.

The ``make_*`` helpers live in ``tests/support/builders.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    GPU_TAINT,
    GPU_TYPE_CHOICES,
    THROUGHPUT_CHOICES,
    make_cluster,
    make_fleet,
    make_input,
    make_stage,
)

from fleetc.model import (
    Cluster,
    Output,
    ScoreWeights,
    Stage,
    StageType,
    Taint,
    Toleration,
)
from fleetc.placement import scoring
from fleetc.placement.scoring import alike_rows, filter_reason, score_matrix

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
        (
            make_stage(cores=48, memory_gib=64),
            make_cluster(gpus=16, cores=64),  # two nodes of 8 GPUs, 32 cores, 256Gi
            "nodes too small for its pods: 8 GPUs, 48 cores, 64Gi per pod, a node has 8 GPUs, 32 cores, 256Gi",
        ),
        (
            make_stage(gpus=0, cores=4, memory_gib=100),
            # 512Gi in nodes of 64Gi: 8 nodes, each with 8 of the 64 cores
            make_cluster(gpu_type=None, gpus=0, memory_per_node=64 * 2**30),
            "nodes too small for its pods: 4 cores, 100Gi per pod, a node has 8 cores, 64Gi",
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


def test_network_co_locates_with_the_data_of_dependencies() -> None:
    # D(prep) = {eu-west}: its located output wins over its us-east input.
    # train: bare dependency on prep -> one piece in eu-west.
    # tune: a from: input of train, whose D is empty (no located data) -> unknown (0.5); its own
    #       eu-west input; bare prep -> eu-west. eu: (0.5 + 1 + 1) / 3, us: (0.5 + 0.25 + 0.25) / 3.
    # serve: bare tune; D(tune) = tune's located inputs (no outputs) = {eu-west}.
    # lost: its dependency is no stage of its pipeline -> no piece, scores as with no inputs.
    prep = replace(
        make_stage("prep", inputs=(make_input("us-east"),)),
        outputs=(Output("data", "s3://bucket/prep/", "eu-west"),),
    )
    train = replace(make_stage("train"), dependencies=("prep",))
    tune = replace(
        make_stage("tune", inputs=(make_input(None, from_stage="train"), make_input("eu-west"))),
        dependencies=("train", "prep"),
    )
    serve = replace(make_stage("serve"), dependencies=("tune",))
    lost = replace(make_stage("lost", pipeline="other"), dependencies=("prep",))
    model = make_fleet(
        (make_cluster("eu", region="eu-west"), make_cluster("us", region="us-east")),
        (prep, train, tune, serve, lost),
    )
    link = 0.4 * 0.5  # standard tier
    expected = [
        [0.6 * 0.25 + link, 0.6 * 1.0 + link],
        [0.6 * 1.0 + link, 0.6 * 0.25 + link],
        [0.6 * 2.5 / 3 + link, 0.6 * 1.0 / 3 + link],
        [0.6 * 1.0 + link, 0.6 * 0.25 + link],
        [0.6 * 1.0 + link, 0.6 * 1.0 + link],
    ]
    assert score_matrix(model).network == pytest.approx(np.array(expected))


# --- fleet-scale representation ---------------------------------------------------------------


def test_reasons_read_like_a_dict_without_storing_strings() -> None:
    model = make_fleet(
        (make_cluster("a100s"), make_cluster("cpus", gpu_type=None, gpus=0), make_cluster("off", cordoned=True)),
        (make_stage("train"), make_stage("prep", gpus=0)),
    )
    reasons = score_matrix(model).reasons
    assert list(reasons) == [(0, 1), (0, 2), (1, 2)]
    assert len(reasons) == 3
    assert reasons[(0, 2)] == "cordoned"
    assert reasons.get((0, 1), "") == "no GPUs"
    assert reasons.get((0, 0), "fits") == "fits"
    assert (1, 2) in reasons
    assert (np.int64(1), np.int64(2)) in reasons  # indices straight from numpy
    for absent in ((1, 0), (2, 0), (0, 3), (-1, 1), "0,1", (0,)):
        assert absent not in reasons
    with pytest.raises(KeyError):
        reasons[(1, 1)]


def test_blocks_of_rows_do_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = (
        make_cluster("a", gpu_hour_cost=1.0),
        make_cluster("b", gpu_type="h100", gpus=16),
        make_cluster("c", gpu_type=None, gpus=0, cores=16),
    )
    stages = tuple(make_stage(f"s{i}", gpus=i % 3, cores=2 + i, replicas=1 + i % 2) for i in range(7))
    model = make_fleet(clusters, stages)
    whole = score_matrix(model)
    monkeypatch.setattr(scoring, "_BLOCK_PAIRS", 4)  # one row per block
    rows = score_matrix(model)
    for term in ("allowed", "total", "compute", "cost", "network", "energy"):
        assert np.array_equal(getattr(whole, term), getattr(rows, term)), term


def test_stages_alike_are_scored_once_with_the_bits_each_would_get(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stages whose columns are equal share one scored row (a kind); every matrix and row the
    scores give is bit for bit what scoring each stage on its own gives."""
    clusters = (
        make_cluster("a", gpu_hour_cost=1.0, region="us-east"),
        make_cluster("b", gpu_type="h100", gpus=16),
        make_cluster("c", gpu_type=None, gpus=0, cores=16),
    )
    stages = tuple(make_stage(f"s{i}", gpus=i % 2, cores=2 + i % 3, inputs=(make_input("us-east"),) * (i % 2))
                   for i in range(12)) + (make_stage("t", gpu_types=("h100", "a100")), make_stage("u", memory_gib=65))
    model = make_fleet(clusters, stages)
    first, kind_of = scoring._kinds(scoring._Columns.of(model))
    assert len(first) == 6 + 2  # (gpus, cores) repeats every 6 stages; t and u are kinds of their own
    assert [kind_of[i] == kind_of[i + 6] for i in range(6)] == [True] * 6
    alike = score_matrix(model)
    count = len(stages)
    monkeypatch.setattr(scoring, "_kinds", lambda columns: (np.arange(count), np.arange(count)))
    each = score_matrix(model)
    for term in ("allowed", "total", "compute", "cost", "network", "energy"):
        assert getattr(alike, term).tobytes() == getattr(each, term).tobytes(), term
    for stage in range(count):
        assert alike.preference_of(stage).tobytes() == each.preference_of(stage).tobytes()
        assert {k: v.tobytes() for k, v in alike.terms_of(stage).items()} == {
            k: v.tobytes() for k, v in each.terms_of(stage).items()}


def test_scoring_on_every_core_gives_the_one_process_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large fleet's blocks of rows are scored in forked processes, into shared arrays: the
    same filter and the same totals, bit for bit, as one process computes."""
    import sys
    from pathlib import Path

    from fleetc.compiler import load_policy_sources
    from fleetc.infra import forkmap
    from fleetc.resolve import resolve

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.generate import Spec, generate

    instance = generate(Spec(clusters=30, stages=300, load=0.9, seed=5, platform=True, sovereignty=True))
    sources = [(path, text.encode("utf-8")) for path, text in instance.files.items()]
    model = resolve(load_policy_sources(sources, "generated").policies, "generated")
    alone = score_matrix(model)
    spawned: list[int] = []
    spawn = forkmap._spawn
    monkeypatch.setattr(forkmap, "_spawn", lambda *args: spawned.append(1) or spawn(*args))
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 0)
    monkeypatch.setattr(forkmap, "usable_cores", lambda: 3)
    forked = score_matrix(model)
    if forkmap._can_fork():
        assert spawned == [1, 1], "not scored in two children"
    assert 0 < alone.allowed.sum() < alone.allowed.size
    assert np.array_equal(forked.allowed, alone.allowed)
    assert forked.total.tobytes() == alone.total.tobytes()


def test_total_is_the_weighted_sum_of_the_terms_in_float64() -> None:
    model = make_fleet(
        (make_cluster("a", utilization=0.3), make_cluster("b", gpu_type=None, gpus=0)),
        (make_stage(gpus=0, inputs=(make_input("us-east"),)), make_stage("t")),
        score_weights=ScoreWeights(compute=0.5, cost=0.2, network=0.2, energy=0.3),
    )
    scores = score_matrix(model)
    weighted = 0.5 * scores.compute + 0.2 * scores.cost + 0.2 * scores.network + 0.3 * scores.energy
    assert scores.total.dtype == np.float64  # float32 would leak into callers' sums (numpy 2)
    assert scores.allowed.dtype == bool
    assert np.array_equal(scores.total, weighted / 1.2)


_TAINTS = (GPU_TAINT, Taint("spot", "true", "NoExecute"), Taint("spot", "true", "PreferNoSchedule"))
_TOLERATIONS = (
    Toleration("gpu-type", "Equal", "a100"),
    Toleration("gpu-type", "Equal", "h100"),
    Toleration("spot", "Exists", effect="NoExecute"),
    Toleration("", "Exists"),
)
_GPU_TYPES = (None, "a100", "h100")

_clusters = st.builds(
    make_cluster,
    gpu_type=st.sampled_from(_GPU_TYPES),
    gpus=st.integers(0, 16),
    cores=st.sampled_from((0, 4, 64)),
    memory_gib=st.sampled_from((0, 16, 512)),
    taints=st.lists(st.sampled_from(_TAINTS), max_size=2, unique=True).map(tuple),
    jurisdiction=st.sampled_from(("EU", "US")),
    cordoned=st.booleans(),
)
_stages = st.builds(
    make_stage,
    gpus=st.integers(0, 12),
    gpu_types=st.sampled_from(GPU_TYPE_CHOICES),
    throughput_gpus=st.sampled_from(THROUGHPUT_CHOICES),
    cores=st.sampled_from((0, 4, 32, 96)),
    memory_gib=st.sampled_from((0, 16, 256, 600)),
    tolerations=st.lists(st.sampled_from(_TOLERATIONS), max_size=2, unique=True).map(tuple),
    jurisdiction=st.sampled_from((None, "EU", "US", "CN")),
)


@settings(max_examples=50, deadline=None)
@given(clusters=st.lists(_clusters, max_size=6).map(tuple), stages=st.lists(_stages, max_size=6).map(tuple))
def test_vectorised_filters_agree_with_filter_reason(
    clusters: tuple[Cluster, ...], stages: tuple[Stage, ...]
) -> None:
    scores = score_matrix(make_fleet(clusters, stages))
    assert scores.allowed.shape == (len(stages), len(clusters))
    for s, stage in enumerate(stages):
        for c, cluster in enumerate(clusters):
            reason = filter_reason(stage, cluster)
            assert bool(scores.allowed[s, c]) == (reason == "")
            assert scores.reasons.get((s, c), "") == reason
    assert len(scores.reasons) == int((~scores.allowed).sum())


def test_terms_of_one_stage_equal_that_row_of_the_full_matrices() -> None:
    model = make_fleet(
        (make_cluster("a", utilization=0.3), make_cluster("b", gpu_type=None, gpus=0)),
        (make_stage(gpus=0, inputs=(make_input("us-east"),)), make_stage("t")),
    )
    for stage in range(len(model.stages)):
        row = score_matrix(model).terms_of(stage)
        full = score_matrix(model)
        for name in ("compute", "cost", "network", "energy"):
            assert np.array_equal(row[name], getattr(full, name)[stage]), name



@given(st.integers(0, 3000), st.integers(1, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_alike_rows_are_the_rows_equal_byte_for_byte(count, width, seed):
    """Kinds numbered by their first row, against a dictionary of each row's bytes (0.0 and
    -0.0 differ, a NaN equals the same NaN); up to 3,000 rows, more than one block."""
    values = np.array([0.0, -0.0, 1.0, 2.5, np.nan])
    rows = np.random.default_rng(seed).choice(values, size=(count, width))
    first_of: dict[bytes, int] = {}
    for i, row in enumerate(rows):
        first_of.setdefault(row.tobytes(), i)
    firsts = sorted(set(first_of.values()))
    number = {first: k for k, first in enumerate(firsts)}
    kind, first = alike_rows(rows)
    assert first.tolist() == firsts
    assert kind.tolist() == [number[first_of[row.tobytes()]] for row in rows]
