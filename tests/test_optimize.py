"""Placement by :func:`fleetc.placement.optimize.place` and the independent :func:`fleetc.placement.verify.verify`."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import highspy
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    GPU_TAINT,
    GPU_TYPE_CHOICES,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_serving,
    make_stage,
)

from fleetc.cli import cli
from fleetc.compiler import load_policies
from fleetc.errors import InternalError, PlacementError, PolicyError, TimeLimitError
from fleetc.model import (
    Assignment,
    ClassWeights,
    FleetModel,
    Placement,
    StagePlacement,
    StageType,
    Taint,
    Toleration,
)
from fleetc.placement import finish, optimize
from fleetc.placement.optimize import place
from fleetc.placement.previous import parse_previous
from fleetc.placement.problem import components
from fleetc.placement.verify import verify
from fleetc.resolve import region_jurisdiction, resolve


def clusters_of(placement: Placement, stage_key: str) -> dict[str, int]:
    return {a.cluster: a.replicas for a in placement.of(stage_key).assignments}


def test_capacity_places_both_trainings() -> None:
    model = make_fleet(
        (make_cluster("big", gpus=16), make_cluster("small", gpus=8)),
        (make_stage("a"), make_stage("b"), make_stage("c")),
    )
    placement = place(model)
    gpus_on = {"big": 0, "small": 0}
    for stage_placement in placement.stages:
        (assignment,) = stage_placement.assignments
        gpus_on[assignment.cluster] += assignment.gpus
    assert gpus_on == {"big": 16, "small": 8}
    assert verify(model, placement) == []
    assert placement.method == "milp"
    assert 0 < placement.objective <= placement.bound
    assert 0.0 <= placement.gap <= 1.0
    assert all(0.0 <= p.score <= 1.0 for p in placement.stages)


def test_gang_is_never_split() -> None:
    model = make_fleet(
        (make_cluster("a"), make_cluster("b"), make_cluster("c", gpus=16)),
        (make_stage(replicas=2),),
    )
    assert place(model).of("llm/train").assignments == (Assignment("c", 2, 16),)


def test_gang_that_only_fits_split_is_infeasible() -> None:
    model = make_fleet((make_cluster("a"), make_cluster("b")), (make_stage(replicas=2),))
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert str(raised.value) == "0/2 clusters fit llm/train: 2 have 8 of 8 free a100"


def test_gpu_type_must_match() -> None:
    model = make_fleet(
        (make_cluster("a100s", gpus=64), make_cluster("h100s", gpu_type="h100")),
        (make_stage(gpu_type="h100"), make_stage("any", gpus=2)),
    )
    placement = place(model)
    assert clusters_of(placement, "llm/train") == {"h100s": 1}
    assert verify(model, placement) == []


def test_taints_need_tolerations() -> None:
    tainted = make_cluster("tainted", gpus=64, taints=(GPU_TAINT,))
    model = make_fleet(
        (make_cluster("plain"), tainted),
        (
            make_stage(
                "tolerant", tolerations=(Toleration("gpu-type", "Equal", "a100", "NoSchedule"),)
            ),
            make_stage("intolerant"),
        ),
    )
    placement = place(model)
    assert clusters_of(placement, "llm/tolerant") == {"tainted": 1}
    assert clusters_of(placement, "llm/intolerant") == {"plain": 1}


def test_deployment_splits_with_min_replicas_per_cluster() -> None:
    serve = make_stage(
        "serve", type=StageType.DEPLOYMENT, gpus=2, replicas=6, min_replicas_per_cluster=3
    )
    model = make_fleet((make_cluster("a"), make_cluster("b")), (serve,))
    placement = place(model)
    assert clusters_of(placement, "llm/serve") == {"a": 3, "b": 3}
    assert [a.gpus for a in placement.of("llm/serve").assignments] == [6, 6]


def test_deployment_split_uses_uneven_shares_when_capacity_differs() -> None:
    serve = make_stage(
        "serve", type=StageType.DEPLOYMENT, gpus=2, replicas=6, min_replicas_per_cluster=2
    )
    model = make_fleet((make_cluster("a"), make_cluster("b"), make_cluster("c", gpus=2)), (serve,))
    placement = place(model)
    replicas = clusters_of(placement, "llm/serve")
    assert sum(replicas.values()) == 6 and "c" not in replicas
    assert all(r >= 2 for r in replicas.values())


def test_min_replicas_per_cluster_can_make_a_deployment_infeasible() -> None:
    serve = make_stage(
        "serve", type=StageType.DEPLOYMENT, gpus=2, replicas=6, min_replicas_per_cluster=4
    )
    model = make_fleet((make_cluster("a"), make_cluster("b")), (serve,))
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == ("0/2 clusters fit llm/serve: 2 have room for 4 of 6 replicas",)


def test_infeasible_names_each_cluster_like_the_kube_scheduler() -> None:
    # The finetune is worth more, so it keeps half the a100 cluster and the training is reported.
    model = make_fleet(
        (
            make_cluster("a", gpu_type="h100"),
            make_cluster("b", gpus=16),
            make_cluster("c", gpu_type="h100"),
        ),
        (
            make_stage("model-training", gpus=16, gpu_type="a100", pods_per_replica=2),  # on 8-GPU nodes
            make_stage("tune", type=StageType.FINETUNING, gpu_type="a100"),
        ),
        class_weights=ClassWeights(finetuning=10.0),
    )
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == (
        "0/3 clusters fit llm/model-training: 2 have no a100, 1 has 8 of 16 free a100",
    )


def test_infeasible_reports_every_unplaced_stage_with_filter_reasons() -> None:
    model = make_fleet(
        (make_cluster("a", memory_gib=128), make_cluster("b", taints=(GPU_TAINT,))),
        (
            make_stage("big", memory_gib=256),
            make_stage("fits"),
            make_stage("cpu", gpus=0, cores=128),
        ),
    )
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert str(raised.value) == (
        "0/2 clusters fit llm/big: 1 is too small: 256Gi memory per replica, cluster has 128Gi,"
        " 1 has untolerated taint gpu-type=a100:NoSchedule\n"
        "0/2 clusters fit llm/cpu: 1 is too small: 128 cores per replica, cluster has 64,"
        " 1 has untolerated taint gpu-type=a100:NoSchedule"
    )


@pytest.mark.parametrize(
    ("cores", "memory_gib", "reason"),
    [
        ((40, 30), (8, 8), "1 has 24 of 64 free cores"),
        ((4, 4), (300, 300), "1 has 212Gi of 512Gi free memory"),
    ],
)
def test_cpu_and_memory_capacity_reasons(
    cores: tuple[float, float], memory_gib: tuple[float, float], reason: str
) -> None:
    # Training outweighs finetuning, so the finetune is the one reported.
    model = make_fleet(
        (make_cluster(gpu_type=None, gpus=0),),
        (
            make_stage("train", gpus=0, cores=cores[0], memory_gib=memory_gib[0]),
            make_stage(
                "tune", type=StageType.FINETUNING, gpus=0, cores=cores[1], memory_gib=memory_gib[1]
            ),
        ),
    )
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == (f"0/1 clusters fit llm/tune: {reason}",)


def test_stages_left_out_when_the_time_limit_ran_out_are_not_called_infeasible(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_fleet((make_cluster("c0", gpus=8),), (make_stage("a", gpus=8), make_stage("b", gpus=8)))
    with pytest.raises(PlacementError) as proven:  # one 8-GPU cluster cannot run two 8-GPU gangs
        place(model)
    assert type(proven.value) is PlacementError and len(proven.value.reasons) == 1
    monkeypatch.setattr(optimize, "_ran_out", lambda deadline: deadline is not None)
    with pytest.raises(TimeLimitError) as cut:
        place(model, time_limit=60)
    assert cut.value.headline == "the time limit of 60s ran out before every stage was placed"
    assert cut.value.reasons == proven.value.reasons
    assert "--allow-unplaced" in cut.value.hint


def test_time_limit_returns_a_sound_placement_or_says_so() -> None:
    clusters = tuple(make_cluster(f"c{i}", gpus=16) for i in range(10))
    model = make_fleet(clusters, tuple(make_stage(f"s{i}", gpus=i % 8 + 1) for i in range(30)))
    try:
        placement = place(model, time_limit=0.01)
    except TimeLimitError as error:  # no placement yet, or one that leaves stages out
        assert error.headline == "the time limit of 0.01s ran out before every stage was placed"
        assert error.reasons
    else:
        assert verify(model, placement) == []
        assert placement.objective <= placement.bound


def test_zero_class_weight_still_places() -> None:
    model = make_fleet(
        (make_cluster(),),
        (make_stage(type=StageType.FINETUNING),),
        class_weights=ClassWeights(finetuning=0.0),
    )
    placement = place(model)
    assert clusters_of(placement, "llm/train") == {"c1": 1}
    assert placement.objective > 0


def test_empty_fleet_places_nothing() -> None:
    assert place(make_fleet((make_cluster(),), ())) == Placement((), 0.0, 0.0, "milp")


def test_placement_is_deterministic() -> None:
    clusters = tuple(
        make_cluster(f"c{i}", gpus=8 * (i % 3 + 1), energy_efficiency=0.1 * i) for i in range(5)
    )
    serve = make_stage(
        "serve", type=StageType.DEPLOYMENT, gpus=1, replicas=5, min_replicas_per_cluster=2
    )
    trainings = [make_stage(f"s{i}", gpus=i % 4, replicas=i % 3 + 1) for i in range(6)]
    model = make_fleet(clusters, (*trainings, serve))
    assert place(model) == place(model)


def test_solver_failure_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(highspy.Highs, "run", lambda self: highspy.HighsStatus.kError)
    with pytest.raises(InternalError, match=r"^the HIGHS solver failed \(through cvxpy\)$"):
        place(make_fleet((make_cluster(),), (make_stage(),)))


@pytest.mark.slow
def test_solving_prints_nothing_in_a_fresh_process() -> None:
    """HiGHS prints a banner on first use in a process; place() must keep stdout clean."""
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_scoring import make_cluster, make_fleet, make_stage\n"
        "from fleetc.placement.optimize import place\n"
        "place(make_fleet((make_cluster(),), (make_stage(),)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert (result.stdout, result.stderr) == ("", "")


# --- property ---------------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> FleetModel:
    gpu_types = st.sampled_from(["a100", "h100", None])
    clusters = tuple(
        make_cluster(
            f"c{i}",
            gpu_type=(gpu_type := draw(gpu_types)),
            gpus=draw(st.sampled_from([8, 16, 32])) if gpu_type else 0,
            cores=draw(st.sampled_from([16, 64, 128])),
            memory_gib=draw(st.sampled_from([64, 256, 1024])),
            taints=(GPU_TAINT,) if draw(st.booleans()) and draw(st.booleans()) else (),
            utilization=draw(st.floats(0, 1)),
            energy_efficiency=draw(st.floats(0, 1)),
        )
        for i in range(draw(st.integers(2, 5)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            type=(kind := draw(st.sampled_from(list(StageType)))),
            gpus=draw(st.sampled_from([0, 1, 2, 4, 8])),
            gpu_types=draw(st.sampled_from(GPU_TYPE_CHOICES)),
            replicas=draw(st.integers(1, 4)),
            cores=draw(st.sampled_from([1, 4, 16])),
            memory_gib=draw(st.sampled_from([4, 32, 128])),
            min_replicas_per_cluster=draw(st.integers(1, 3)) if kind is StageType.DEPLOYMENT else 1,
            tolerations=(Toleration("gpu-type", "Exists"),) if draw(st.booleans()) else (),
        )
        for i in range(draw(st.integers(1, 8)))
    )
    return make_fleet(clusters, stages)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(fleets())
def test_every_placement_verifies_or_placement_error(model: FleetModel) -> None:
    try:
        placement = place(model)
    except PlacementError as error:
        assert len(error.reasons) >= 1
        assert all(
            reason.startswith(f"0/{len(model.clusters)} clusters fit ") for reason in error.reasons
        )
        return
    assert verify(model, placement) == []
    assert placement.objective <= placement.bound


def test_taint_effect_prefer_no_schedule_is_soft() -> None:
    soft = make_cluster(taints=(Taint("spot", "true", "PreferNoSchedule"),))
    assert clusters_of(place(make_fleet((soft,), (make_stage(),))), "llm/train") == {"c1": 1}


# --- cordon, sovereignty, utilisation, headroom ---------------------------------------------


def test_cordoned_cluster_takes_no_work() -> None:
    model = make_fleet((make_cluster("a", gpu_hour_cost=0.1, cordoned=True), make_cluster("b")), (make_stage(),))
    assert clusters_of(place(model), "llm/train") == {"b": 1}
    model = make_fleet((make_cluster("a", cordoned=True), make_cluster("b", cordoned=True)), (make_stage(),))
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == ("0/2 clusters fit llm/train: 2 are cordoned",)


def test_sovereign_stage_stays_in_its_jurisdiction() -> None:
    model = make_fleet(
        (make_cluster("cheap-eu", gpu_hour_cost=0.1), make_cluster("cn", jurisdiction="cn")),
        (make_stage(jurisdiction="cn"), make_stage("free")),
    )
    placement = place(model)
    assert clusters_of(placement, "llm/train") == {"cn": 1}
    assert clusters_of(placement, "llm/free") == {"cheap-eu": 1}


def test_sovereign_stage_without_a_cluster_of_its_jurisdiction_is_infeasible() -> None:
    model = make_fleet((make_cluster("a"),), (make_stage(jurisdiction="cn"),))
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == (
        "0/1 clusters fit llm/train: 1 is in EU, outside the data's jurisdiction cn",
    )


@pytest.mark.parametrize(("gpus", "fits"), [(4, True), (5, False)])
def test_utilization_reduces_free_gpus(gpus: int, fits: bool) -> None:
    model = make_fleet((make_cluster(gpus=8, utilization=0.5),), (make_stage(gpus=gpus),))
    if fits:
        assert clusters_of(place(model), "llm/train") == {"c1": 1}
        return
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == ("0/1 clusters fit llm/train: 1 has 4 of 4 free a100",)


@pytest.mark.parametrize(("gpus", "fits"), [(8, True), (9, False)])
def test_defragment_threshold_keeps_headroom(gpus: int, fits: bool) -> None:
    model = make_fleet(
        (make_cluster(gpus=10, gpus_per_node=10),), (make_stage(gpus=gpus),),
        gpu_policy=make_gpu_policy(defragment_threshold=0.8),
    )
    if fits:
        assert clusters_of(place(model), "llm/train") == {"c1": 1}
    else:
        with pytest.raises(PlacementError):
            place(model)


# --- time-sliced GPUs ---------------------------------------------------------------------------

SLICED = make_gpu_policy(time_slicing=4, sharing=True, max_sharers=2)


@pytest.mark.parametrize(("replicas", "fits"), [(8, True), (9, False)])
def test_shared_stages_use_slots(replicas: int, fits: bool) -> None:
    serve = make_serving(replicas=replicas, shared_gpu=True, cores=1, memory_gib=1)
    model = make_fleet((make_cluster(gpus=4),), (serve,), gpu_policy=SLICED)
    if fits:
        assert clusters_of(place(model), "llm/serve") == {"c1": replicas}
    else:
        with pytest.raises(PlacementError):
            place(model)


def test_slots_and_exclusive_gpus_share_the_cluster() -> None:
    # Two nodes of 2 GPUs: the training's 2 exclusive GPUs take one, the other is time-sliced
    # into 4 slots: 4 shared replicas fit, 5 do not (a node is time-sliced or not, never half).
    train = make_stage(gpus=2, cores=1, memory_gib=1, shared_gpu=True)  # Training never shares
    four = make_serving(replicas=4, shared_gpu=True, cores=1, memory_gib=1)
    nodes_of_two = make_cluster(gpus=4, gpus_per_node=2)
    model = make_fleet((nodes_of_two,), (train, four), gpu_policy=SLICED)
    assert verify(model, place(model)) == []
    five = dataclasses.replace(four, replicas=5)
    with pytest.raises(PlacementError):
        place(make_fleet((nodes_of_two,), (train, five), gpu_policy=SLICED))
    # on one node of 4 GPUs, the training leaves no whole node to time-slice
    with pytest.raises(PlacementError):
        place(make_fleet((make_cluster(gpus=4),), (train, four), gpu_policy=SLICED))


def test_stages_without_shared_gpu_take_whole_gpus() -> None:
    serve = make_serving(replicas=5, cores=1, memory_gib=1)
    with pytest.raises(PlacementError):
        place(make_fleet((make_cluster(gpus=4),), (serve,), gpu_policy=SLICED))


# --- multiCluster ---------------------------------------------------------------------------------


def test_multi_cluster_runs_serving_on_primary_and_every_secondary() -> None:
    clusters = (
        make_cluster("a", gpu_hour_cost=0.1),
        make_cluster("b", gpu_hour_cost=9.0),
        make_cluster("c", gpu_hour_cost=9.0),
    )
    serve = make_serving(replicas=6, min_replicas_per_cluster=2)
    model = make_fleet(clusters, (serve,), platforms=(make_platform("b", ("c",)),))
    assert clusters_of(place(model), "llm/serve") == {"a": 2, "b": 2, "c": 2}
    other = make_fleet(clusters, (serve,), platforms=(make_platform("b", ("c",), pipelines=("x",)),))
    assert clusters_of(place(other), "llm/serve") == {"a": 6}


def test_multi_cluster_on_a_filtered_cluster_is_infeasible() -> None:
    clusters = (make_cluster("a"), make_cluster("b", gpu_type="h100"))
    serve = make_serving(gpu_type="a100")
    model = make_fleet(clusters, (serve, make_stage()), platforms=(make_platform("a", ("b",)),))
    with pytest.raises(PlacementError) as raised:
        place(model)
    assert raised.value.reasons == ("llm/serve: multiCluster runs it on a, b, but b is filtered out (no a100)",)
    placement = place(model, allow_unplaced=True)
    assert placement.of("llm/serve").assignments == ()
    assert placement.of("llm/serve").reason == raised.value.reasons[0]
    assert clusters_of(placement, "llm/train") == {"a": 1}


def test_multi_cluster_needs_enough_replicas() -> None:
    clusters = (make_cluster("a"), make_cluster("b"))
    serve = make_serving(replicas=3, min_replicas_per_cluster=2)
    with pytest.raises(PlacementError) as raised:
        place(make_fleet(clusters, (serve,), platforms=(make_platform("a", ("b",)),)))
    assert raised.value.reasons == (
        "llm/serve: multiCluster runs it on 2 clusters (a, b) with at least 2 replicas each, the stage has 3",
    )


# --- unplaced work ---------------------------------------------------------------------------------


def test_allow_unplaced_places_what_fits_and_says_why_not() -> None:
    model = make_fleet((make_cluster(),), (make_stage("a"), make_stage("b", type=StageType.FINETUNING)))
    with pytest.raises(PlacementError):
        place(model)
    placement = place(model, allow_unplaced=True)
    assert clusters_of(placement, "llm/a") == {"c1": 1}
    assert placement.of("llm/b") == StagePlacement("llm/b", (), 0.0, "0/1 clusters fit llm/b: 1 has 0 of 8 free a100")
    assert verify(model, placement, allow_unplaced=True) == []
    assert verify(model, placement) == ["llm/b: 0 replicas placed, the stage has 1"]
    assert placement.objective <= placement.bound


# --- stability ---------------------------------------------------------------------------------------


def test_previous_cluster_is_kept_unless_moving_gains_more_than_the_move_cost() -> None:
    clusters = (make_cluster("a", energy_efficiency=0.6), make_cluster("b", energy_efficiency=0.5))
    model = make_fleet(clusters, (make_stage(),))
    assert clusters_of(place(model), "llm/train") == {"a": 1}  # energy 0.2 * 0.1 = 0.02 better
    assert clusters_of(place(model, previous={"llm/train": {"b": 1}}), "llm/train") == {"b": 1}
    cheap = dataclasses.replace(model, move_cost=0.01)
    assert clusters_of(place(cheap, previous={"llm/train": {"b": 1}}), "llm/train") == {"a": 1}


def test_previous_replicas_of_a_deployment_stay_where_they_were() -> None:
    clusters = (make_cluster("a", energy_efficiency=0.6), make_cluster("b", energy_efficiency=0.5))
    model = make_fleet(clusters, (make_serving(replicas=4),))
    assert clusters_of(place(model), "llm/serve") == {"a": 4}
    moved = place(model, previous={"llm/serve": {"a": 1, "b": 3, "gone": 2}, "llm/gone": {"a": 1}})
    assert clusters_of(moved, "llm/serve") == {"a": 1, "b": 3}


def test_a_change_to_one_pipeline_moves_no_unrelated_stage() -> None:
    clusters = tuple(make_cluster(f"c{i}", gpus=8, energy_efficiency=0.5 + i / 100) for i in range(3))
    before = make_fleet(clusters, (make_stage("x", pipeline="p"), make_stage("y", pipeline="q")))
    first = place(before, previous={"p/x": {"c0": 1}, "q/y": {"c1": 1}})
    previous = {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in first.stages}
    after = dataclasses.replace(before, stages=(*before.stages, make_stage("z", pipeline="p")))
    second = place(after, previous=previous)
    assert {k: clusters_of(second, k) for k in previous} == previous


# --- decomposition and the large path ----------------------------------------------------------------


def test_independent_jurisdictions_are_solved_apart() -> None:
    clusters = (make_cluster("cn", jurisdiction="cn"), make_cluster("eu"), make_cluster("us", jurisdiction="us"))
    stages = (
        make_stage("a", jurisdiction="cn"),
        make_stage("b", jurisdiction="EU"),
        make_stage("c", type=StageType.FINETUNING, jurisdiction="cn"),
    )
    scores = optimize.score_matrix(make_fleet(clusters, stages))
    parts = components(scores.allowed)
    assert [(p.stages.tolist(), p.clusters.tolist()) for p in parts] == [([0, 2], [0]), ([1], [1])]
    with pytest.raises(PlacementError) as raised:  # two 8-GPU gangs, one 8-GPU cn cluster
        place(make_fleet(clusters, stages))
    assert raised.value.reasons == (
        "0/3 clusters fit llm/c: 1 has 0 of 8 free a100, 1 is in EU, outside the data's jurisdiction cn,"
        " 1 is in us, outside the data's jurisdiction cn",
    )


def test_large_instances_take_the_column_generation_path(monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = tuple(make_cluster(f"c{i}", gpus=16, energy_efficiency=i / 10) for i in range(6))
    stages = tuple(make_stage(f"s{i}", gpus=(i % 4 + 1) * 2) for i in range(12))
    stages += (make_serving(replicas=6, min_replicas_per_cluster=2),)
    model = make_fleet(clusters, stages)
    exact = place(model)
    monkeypatch.setattr(optimize, "LARGE", 0)
    rounded = place(model)
    assert rounded.method == "colgen-lp-round"
    assert verify(model, rounded) == []
    assert rounded.objective <= rounded.bound
    assert rounded.bound == pytest.approx(exact.bound)
    assert rounded.objective <= exact.objective + 1e-6


# --- data sovereignty from the policies (resolve) ----------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def bundled_with(tmp_path: Path, old: str, new: str) -> str:
    """A copy of the bundled policies with one edit to the LLM pipeline; returns the folder."""
    for source in (ROOT / "policies").glob("*.yaml"):
        text = source.read_text(encoding="utf-8")
        if source.name == "llm-training-pipeline.yaml":
            assert old in text
            text = text.replace(old, new)
        (tmp_path / source.name).write_text(text, encoding="utf-8")
    return str(tmp_path)


def test_sovereign_stages_get_the_jurisdiction_of_their_data() -> None:
    loaded = load_policies([str(ROOT / "policies")])
    model = resolve(loaded.policies, loaded.where)
    assert {s.key: s.jurisdiction for s in model.stages} == {
        "customer-service-assistant/assistant-serving": "cn",
        "customer-service-assistant/lora-finetuning": "cn",
        "customer-service-assistant/ticket-cleaning": "cn",
        "llm-chinese-training/data-preparation": "cn",
        "llm-chinese-training/model-deployment": "cn",
        "llm-chinese-training/model-evaluation": "cn",
        "llm-chinese-training/model-training": "cn",
    }
    assert region_jurisdiction("cn-north-1", model.clusters) == "cn"
    assert region_jurisdiction("factory-zone-1", model.clusters) == "cn"  # the edge cluster's
    assert region_jurisdiction("eu-west-1", model.clusters) == "eu"


def test_sovereignty_follows_from_chains_and_rejects_two_jurisdictions(tmp_path: Path) -> None:
    folder = bundled_with(tmp_path, "location: cn-north-1\n    outputs:\n      - name: processed-data",
                          "location: eu-west-1\n    outputs:\n      - name: processed-data")
    with pytest.raises(PolicyError) as raised:
        resolve(load_policies([folder]).policies, folder)
    # model-training reads both directly; evaluation and deployment read its output.
    assert [d.field for d in raised.value.diagnostics] == ["spec.stages[1]", "spec.stages[2]", "spec.stages[3]"]
    assert raised.value.diagnostics[0].format() == (
        f"{folder}/llm-training-pipeline.yaml:30:5: error: spec.stages[1]: data sovereignty: stage "
        "'model-training' reads data of jurisdictions cn (cn-north-1) and eu (eu-west-1), and may run "
        "in only one\n"
        "  hint: keep the data a stage reads (and the data its from: inputs were made of) in one "
        "jurisdiction, or turn security.dataSovereignty off"
    )


def test_without_sovereignty_stages_may_run_anywhere(tmp_path: Path) -> None:
    folder = bundled_with(tmp_path, "location: cn-north-1\n    outputs:\n      - name: processed-data",
                          "location: eu-west-1\n    outputs:\n      - name: processed-data")
    platform = tmp_path / "aigc-platform.yaml"
    platform.write_text(platform.read_text().replace("dataSovereignty: true", "dataSovereignty: false"))
    model = resolve(load_policies([folder]).policies, folder)
    assert {s.jurisdiction for s in model.stages} == {None}


# --- the CLI: --allow-unplaced and the previous placement --------------------------------------


def test_cli_allow_unplaced_renders_what_fits_and_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policies").mkdir()
    bundled_with(tmp_path / "policies", "gpu: 8\n", "gpu: 800\n")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    failed = runner.invoke(cli, ["compile"])
    assert failed.exit_code == 1
    assert not (tmp_path / "out").exists()
    result = runner.invoke(cli, ["compile", "--allow-unplaced"])
    assert result.exit_code == 0, result.output
    reason = (
        "0/3 clusters fit llm-chinese-training/model-training: 1 has no GPUs, 1 has no a100,"
        " 1 is too small: 800 GPUs per replica, cluster has 64"
    )
    # The reason names the stage: the warning does not say it twice.
    assert f"warning: not placed: {reason}\n" in result.stderr
    assert [line.count("llm-chinese-training/model-training") for line in result.stderr.splitlines()
            if line.startswith("warning: not placed")] == [1]
    assert result.stdout.startswith("placed 6 of 7 stages, 1 left out (--allow-unplaced) (proven within ")
    assert parse_previous((tmp_path / "out" / "placement.yaml").read_text()).clusters.keys() == {
        "customer-service-assistant/assistant-serving",
        "customer-service-assistant/lora-finetuning",
        "customer-service-assistant/ticket-cleaning",
        "llm-chinese-training/data-preparation",
        "llm-chinese-training/model-deployment",
        "llm-chinese-training/model-evaluation",
    }


def test_cli_ignores_a_malformed_previous_placement_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "policies").mkdir()
    bundled_with(tmp_path / "policies", "gpu: 8\n", "gpu: 8\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / ".fleetc").mkdir(parents=True)
    (tmp_path / "out" / ".fleetc" / "files").write_text("placement.yaml\n")  # fleetc's own out/
    (tmp_path / "out" / "placement.yaml").write_text("kind: Fleet\n")
    result = CliRunner().invoke(cli, ["compile"])
    assert result.exit_code == 0, result.output
    assert (
        "warning: out/placement.yaml: ignored as the previous placement: "
        "not a fleetc placement report (kind: Placement)\n"
    ) in result.stderr


def test_stages_that_swapped_room_for_no_gain_are_put_back() -> None:
    """The churn rule's repair: two stages the change did not touch that swapped clusters, each
    gaining no more than moveCost (as the large path's rounding may leave them), go back; a
    stage whose room a new stage took stays where it went."""
    from fleetc.placement.problem import stage_values
    from fleetc.placement.scoring import score_matrix

    clusters = (make_cluster("a", energy_efficiency=0.5), make_cluster("b", energy_efficiency=0.6),
                make_cluster("c", energy_efficiency=0.4))
    model = make_fleet(clusters, (make_stage(), make_stage("other", pipeline="p"), make_stage("new", pipeline="q")))
    scores = score_matrix(model)
    previous = {"llm/train": {"b": 1}, "p/other": {"a": 1}}
    swapped = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.int32)  # train on a, other on b, new on c
    before = swapped.copy()
    change = finish.stay_where_moving_gains_nothing(model, scores, previous, swapped)
    assert swapped.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    values = stage_values(model, model.stages)  # one replica each
    assert change == pytest.approx(float(np.sum(values[:, None] * (swapped - before) * (1 + scores.total))))
    taken = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0]], dtype=np.int32)  # q/new took b: train is displaced
    assert finish.stay_where_moving_gains_nothing(model, scores, {"llm/train": {"b": 1}}, taken) == 0.0
    assert taken.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
