"""The independent re-check :func:`fleetc.placement.verify.verify` and the policy semantics it defines."""

from __future__ import annotations

import dataclasses

import pytest
from support.builders import (
    GPU_TAINT,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_serving,
    make_stage,
)

from fleetc.model import Assignment, FleetModel, Placement, StagePlacement, StageType
from fleetc.placement.rules import (
    slots_per_gpu,
    time_sliced_gpus,
    time_sliced_unit,
    usable_capacity,
    uses_shared_slots,
)
from fleetc.placement.scoring import GIB
from fleetc.placement.verify import verify


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


# --- capacity semantics -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("utilization", "threshold", "usable"),
    [
        (0.0, None, (8, 64_000, 512 * GIB)),
        (0.25, None, (6, 48_000, 384 * GIB)),
        (0.0, 0.8, (6, 64_000, 512 * GIB)),  # 80% of 8 GPUs is 6.4: rounded down
        (0.25, 0.8, (4, 48_000, 384 * GIB)),  # outside work counts against the headroom
        (0.9, 0.8, (0, 6_400, 51 * GIB + 204 * 2**20)),  # memory in whole MiB
    ],
)
def test_usable_capacity(utilization: float, threshold: float | None, usable: tuple[int, int, int]) -> None:
    model = make_fleet((), (), gpu_policy=make_gpu_policy(defragment_threshold=threshold))
    assert usable_capacity(model, make_cluster(utilization=utilization)) == usable


@pytest.mark.parametrize(
    ("policy", "slots"),
    [
        (None, 1),
        (make_gpu_policy(time_slicing=4), 4),
        (make_gpu_policy(time_slicing=4, sharing=True, max_sharers=2), 2),
        (make_gpu_policy(time_slicing=1, sharing=True, max_sharers=2), 1),
    ],
)
def test_slots_per_gpu(policy: object, slots: int) -> None:
    assert slots_per_gpu(make_fleet((), (), gpu_policy=policy)) == slots


def test_only_serving_stages_that_accept_it_use_shared_slots() -> None:
    model = make_fleet((), (), gpu_policy=make_gpu_policy(time_slicing=4))
    assert uses_shared_slots(model, make_serving(shared_gpu=True))
    assert not uses_shared_slots(model, make_serving())
    assert not uses_shared_slots(model, make_stage(shared_gpu=True))
    assert not uses_shared_slots(model, make_stage(type=StageType.FINETUNING, shared_gpu=True))
    assert not uses_shared_slots(model, make_serving(gpus=0, shared_gpu=True))
    assert not uses_shared_slots(make_fleet((), ()), make_serving(shared_gpu=True))


# --- the constraints fleetc's policies add ------------------------------------------------------


def one(stage_key: str, *assignments: Assignment) -> StagePlacement:
    return StagePlacement(stage_key, assignments, 0.5)


def placed(*stages: StagePlacement) -> Placement:
    return Placement(stages=stages, objective=1.0, bound=1.0, method="test")


def test_verify_catches_cordoned_clusters_and_sovereignty() -> None:
    model = make_fleet((make_cluster("a", cordoned=True),), (make_stage(jurisdiction="cn"),))
    assert verify(model, placed(one("llm/train", Assignment("a", 1, 8)))) == [
        "llm/train on a: the cluster is cordoned",
        "llm/train on a: data sovereignty keeps it in jurisdiction cn, the cluster is in EU",
    ]


def test_verify_catches_a_missing_multi_cluster_replica() -> None:
    model = make_fleet(
        (make_cluster("a"), make_cluster("b")),
        (make_serving(replicas=4, min_replicas_per_cluster=2),),
        platforms=(make_platform("a", ("b",)),),
    )
    assert verify(model, placed(one("llm/serve", Assignment("a", 2, 2), Assignment("b", 2, 2)))) == []
    assert verify(model, placed(one("llm/serve", Assignment("a", 4, 4)))) == [
        "llm/serve: multiCluster needs at least 2 replicas on b, 0 placed"
    ]


def test_verify_counts_shared_slots_per_started_time_sliced_node() -> None:
    """A node's device plugin reads one config, time-sliced or not: shared slots take whole
    nodes (8 GPUs here), the rest is left to exclusive pods."""
    sliced = make_gpu_policy(time_slicing=4, sharing=True, max_sharers=2)
    stages = (make_stage(gpus=8, cores=1, memory_gib=1), make_serving(replicas=5, shared_gpu=True))
    model = make_fleet((make_cluster(gpus=16),), stages, gpu_policy=sliced)
    sound = placed(one("llm/train", Assignment("c1", 1, 8)), one("llm/serve", Assignment("c1", 5, 5)))
    assert verify(model, sound) == []  # 8 exclusive + one time-sliced node of 8 (16 slots)
    model = dataclasses.replace(model, stages=(dataclasses.replace(stages[0], gpus=9, pods_per_replica=3), stages[1]))
    too_many = placed(one("llm/train", Assignment("c1", 1, 9)), one("llm/serve", Assignment("c1", 5, 5)))
    assert verify(model, too_many) == ["c1: 17 GPUs placed, capacity 16"]
    # where the device plugin does not read fleetc's config, no GPU is time-sliced: each shared
    # replica takes its whole GPU (9 + 5 = 14; with a 12-GPU gang 17, not 12 + ceil(5 / 2))
    unconfigured = dataclasses.replace(model, clusters=(make_cluster(gpus=16, device_plugin_configured=False),))
    assert verify(unconfigured, too_many) == []
    twelve_gpus = dataclasses.replace(stages[0], gpus=12, pods_per_replica=2)  # two pods of 6 fit 8-GPU nodes
    unconfigured = dataclasses.replace(unconfigured, stages=(twelve_gpus, stages[1]))
    twelve = placed(one("llm/train", Assignment("c1", 1, 12)), one("llm/serve", Assignment("c1", 5, 5)))
    assert verify(unconfigured, twelve) == ["c1: 17 GPUs placed, capacity 16"]


def test_time_sliced_gpus_come_in_whole_units() -> None:
    assert [time_sliced_gpus(slots, 2, 8) for slots in (0, 1, 16, 17, 32)] == [0, 8, 8, 16, 16]
    assert [time_sliced_gpus(slots, 2, 1) for slots in (0, 1, 2, 3)] == [0, 1, 1, 2]
    assert time_sliced_unit(make_cluster(gpus=16)) == 8
    assert time_sliced_unit(make_cluster(gpus=16, device_plugin_configured=False)) == 1


def test_verify_applies_headroom_and_utilization() -> None:
    model = make_fleet(
        (make_cluster(gpus=10, utilization=0.1, gpus_per_node=10),), (make_stage(),),
        gpu_policy=make_gpu_policy(defragment_threshold=0.8),
    )
    assert verify(model, placed(one("llm/train", Assignment("c1", 1, 8)))) == [
        "c1: 8 GPUs placed, capacity 7"
    ]


def test_verify_accepts_unplaced_stages_only_when_allowed() -> None:
    model = make_fleet((make_cluster(),), (make_stage(),))
    unplaced = placed(StagePlacement("llm/train", (), 0.0, "no room"))
    assert verify(model, unplaced, allow_unplaced=True) == []
    assert verify(model, unplaced) == ["llm/train: 0 replicas placed, the stage has 1"]


# --- churn against the previous placement ------------------------------------------------------


def _on(*placed: tuple[str, str, int, int]) -> Placement:
    """A placement of (stage key, cluster, replicas, GPUs) assignments, one stage each."""
    return Placement(stages=tuple(StagePlacement(key, (Assignment(cluster, replicas, gpus),), 0.0)
                                  for key, cluster, replicas, gpus in placed),
                     objective=0.0, bound=0.0, method="milp")


def test_a_stage_that_could_stay_moves_only_for_more_than_the_move_cost() -> None:
    """a scores 0.02 more than b (energy 0.6 vs 0.5, weight 0.2): leaving b for a is refused at
    moveCost 0.05, accepted at 0.01; with no previous placement there is no churn rule."""
    clusters = (make_cluster("a", energy_efficiency=0.6), make_cluster("b", energy_efficiency=0.5))
    model = make_fleet(clusters, (make_stage(),))
    on_a = _on(("llm/train", "a", 1, 8))
    assert verify(model, on_a, previous={"llm/train": {"b": 1}}) == [
        "llm/train: moved from b x1 to a x1, gaining +0.020000 per replica moved, not more than moveCost 0.05, "
        "though the change did not touch it"]
    assert verify(dataclasses.replace(model, move_cost=0.01), on_a, previous={"llm/train": {"b": 1}}) == []
    assert verify(model, on_a) == []
    assert verify(model, on_a, previous={"llm/train": {"a": 1}}) == []


def test_a_stage_that_could_not_stay_may_move_at_a_loss() -> None:
    """Touched stages: forced off (b cordoned), displaced (b is now full with another stage),
    its own policy changed (it now has 2 replicas: its previous placement is not one of it)."""
    clusters = (make_cluster("a", energy_efficiency=0.5), make_cluster("b", energy_efficiency=0.6))
    model = make_fleet(clusters, (make_stage(), make_stage("other", pipeline="p")))
    previous = {"llm/train": {"b": 1}}
    cordoned = make_fleet((clusters[0], dataclasses.replace(clusters[1], cordoned=True)), (make_stage(),))
    assert verify(cordoned, _on(("llm/train", "a", 1, 8)), previous=previous) == []
    displaced = _on(("llm/train", "a", 1, 8), ("p/other", "b", 1, 8))
    assert verify(model, displaced, previous=previous) == []
    # Two untouched stages that swap clusters, each gaining at most moveCost: neither displaced
    # the other (each could go back beside the rest), so both break the rule.
    assert verify(model, displaced, previous={**previous, "p/other": {"a": 1}}) == [
        "llm/train: moved from b x1 to a x1, gaining -0.020000 per replica moved, not more than moveCost 0.05, "
        "though the change did not touch it",
        "p/other: moved from a x1 to b x1, gaining +0.020000 per replica moved, not more than moveCost 0.05, "
        "though the change did not touch it"]
    # A stage a displaced stage takes the room of is displaced in turn: p/other is new, takes b
    # (where llm/train was), llm/train takes a from p/third.
    chain = make_fleet(clusters + (make_cluster("c", energy_efficiency=0.4),),
                       (make_stage(), make_stage("other", pipeline="p"), make_stage("third", pipeline="p")))
    placed = _on(("llm/train", "a", 1, 8), ("p/other", "b", 1, 8), ("p/third", "c", 1, 8))
    assert verify(chain, placed, previous={"llm/train": {"b": 1}, "p/third": {"a": 1}}) == []
    grown = make_fleet(clusters, (make_stage(replicas=2, gpus=4), make_stage("other", pipeline="p")))
    assert verify(grown, _on(("llm/train", "a", 2, 8), ("p/other", "b", 1, 8)), previous=previous) == []


def test_a_stage_left_out_did_not_move() -> None:
    """A stage left out (``--allow-unplaced``) is reported with its reason, not as a move."""
    model = make_fleet((make_cluster("a"),), (make_stage(),))
    left_out = Placement(stages=(StagePlacement("llm/train", (), 0.0, "no room"),), objective=0.0, bound=0.0,
                         method="milp")
    assert verify(model, left_out, allow_unplaced=True, previous={"llm/train": {"a": 1}}) == []
