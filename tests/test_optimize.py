"""Placement by :func:`fleetc.optimize.place` and the independent :func:`fleetc.verify.verify`."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import cvxpy as cp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scoring import GPU_TAINT, make_cluster, make_fleet, make_stage

from fleetc.errors import InternalError, PlacementError
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
from fleetc.optimize import place
from fleetc.verify import verify


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
            make_stage("model-training", gpus=16, gpu_type="a100"),
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


def test_time_limit_returns_a_sound_placement_or_says_so() -> None:
    clusters = tuple(make_cluster(f"c{i}", gpus=16) for i in range(10))
    model = make_fleet(clusters, tuple(make_stage(f"s{i}", gpus=i % 8 + 1) for i in range(30)))
    try:
        placement = place(model, time_limit=0.01)
    except PlacementError as error:
        assert error.reasons == ("the solver found no placement within the time limit of 0.01s",)
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
    def fail(*args: object, **kwargs: object) -> None:
        raise cp.error.SolverError("boom")

    monkeypatch.setattr(cp.Problem, "solve", fail)
    with pytest.raises(InternalError, match="the HiGHS solver failed: boom"):
        place(make_fleet((make_cluster(),), (make_stage(),)))


def test_solving_prints_nothing_in_a_fresh_process() -> None:
    """HiGHS prints a banner on first use in a process; place() must keep stdout clean."""
    script = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_scoring import make_cluster, make_fleet, make_stage\n"
        "from fleetc.optimize import place\n"
        "place(make_fleet((make_cluster(),), (make_stage(),)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert (result.stdout, result.stderr) == ("", "")


# --- verify -----------------------------------------------------------------------------------


@pytest.fixture
def sound() -> tuple[FleetModel, Placement]:
    serve = make_stage(
        "serve",
        type=StageType.DEPLOYMENT,
        gpus=2,
        replicas=4,
        min_replicas_per_cluster=2,
        cores=1,
        memory_gib=8,
    )
    model = make_fleet(
        (make_cluster("a", gpus=16), make_cluster("b", gpu_type="h100", taints=(GPU_TAINT,))),
        (make_stage(gpus=4, gpu_type="a100"), serve),
    )
    placement = Placement(
        stages=(
            StagePlacement("llm/train", (Assignment("a", 1, 4),), 0.5),
            StagePlacement("llm/serve", (Assignment("a", 4, 8),), 0.5),
        ),
        objective=1.0,
        bound=1.0,
        method="milp",
    )
    return model, placement


def broken(placement: Placement, stage: int, *assignments: Assignment) -> Placement:
    stages = list(placement.stages)
    stages[stage] = dataclasses.replace(stages[stage], assignments=assignments)
    return dataclasses.replace(placement, stages=tuple(stages))


def test_verify_accepts_a_sound_placement(sound: tuple[FleetModel, Placement]) -> None:
    assert verify(*sound) == []


@pytest.mark.parametrize(
    ("stage", "assignments", "problems"),
    [
        (
            0,
            (Assignment("a", 1, 4), Assignment("b", 1, 4)),
            [
                "llm/train: 2 replicas placed, the stage has 1",
                "llm/train: gang split across 2 clusters",
                "llm/train on b: needs a100, the cluster has h100",
                "llm/train on b: untolerated taint gpu-type=a100:NoSchedule",
            ],
        ),
        (
            1,
            (Assignment("a", 1, 2), Assignment("a", 7, 14)),
            [
                "llm/serve: assignments are not sorted by unique cluster name",
                "llm/serve: 8 replicas placed, the stage has 4",
                "llm/serve on a: 1 replicas, below the minimum of 2",
                "a: 20 GPUs placed, capacity 16",
            ],
        ),
        (1, (Assignment("a", 4, 4),), ["llm/serve on a: 4 GPUs for 4 replicas of 2"]),
        (1, (Assignment("nowhere", 4, 8),), ["llm/serve: unknown cluster nowhere"]),
    ],
)
def test_verify_catches_broken_placements(
    sound: tuple[FleetModel, Placement],
    stage: int,
    assignments: tuple[Assignment, ...],
    problems: list[str],
) -> None:
    model, placement = sound
    assert verify(model, broken(placement, stage, *assignments)) == problems


def test_verify_catches_missing_and_unknown_stages(sound: tuple[FleetModel, Placement]) -> None:
    model, placement = sound
    renamed = dataclasses.replace(placement.stages[1], stage="llm/ghost")
    assert verify(model, dataclasses.replace(placement, stages=(placement.stages[0], renamed))) == [
        "llm/serve: not placed",
        "llm/ghost: not a stage of the fleet",
    ]


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
            gpu_type=draw(gpu_types),
            replicas=draw(st.integers(1, 4)),
            cores=draw(st.sampled_from([1, 4, 16])),
            memory_gib=draw(st.sampled_from([4, 32, 128])),
            min_replicas_per_cluster=draw(st.integers(1, 3)) if kind is StageType.DEPLOYMENT else 1,
            tolerations=(Toleration("gpu-type", "Exists"),) if draw(st.booleans()) else (),
        )
        for i in range(draw(st.integers(1, 8)))
    )
    return make_fleet(clusters, stages)


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


@st.composite
def small_gang_fleets(draw: st.DrawFn) -> FleetModel:
    clusters = tuple(
        make_cluster(f"c{i}", gpus=draw(st.sampled_from([4, 8, 16])), cores=32, memory_gib=256)
        for i in range(draw(st.integers(1, 3)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            gpus=draw(st.sampled_from([0, 2, 4, 8])),
            replicas=draw(st.integers(1, 2)),
            cores=draw(st.sampled_from([4, 16])),
            memory_gib=32,
        )
        for i in range(draw(st.integers(1, 4)))
    )
    return make_fleet(clusters, stages)


def brute_force_feasible(model: FleetModel) -> bool:
    """Whether any choice of one cluster per gang stage passes the verifier."""
    for choice in itertools.product(model.clusters, repeat=len(model.stages)):
        candidate = Placement(
            stages=tuple(
                StagePlacement(s.key, (Assignment(c.name, s.replicas, s.total_gpus),), 0.0)
                for s, c in zip(model.stages, choice, strict=True)
            ),
            objective=0.0,
            bound=0.0,
            method="brute-force",
        )
        if not verify(model, candidate):
            return True
    return False


@settings(max_examples=30, deadline=None)
@given(small_gang_fleets())
def test_placement_error_only_when_brute_force_finds_nothing(model: FleetModel) -> None:
    try:
        place(model)
    except PlacementError:
        assert not brute_force_feasible(model)
    else:
        assert brute_force_feasible(model)
