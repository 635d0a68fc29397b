"""Invariants of the placement over generated fleets (hypothesis).

- Every placement ``place`` returns passes the independent verifier, with every policy feature
  on (cordons, utilisation, headroom, time-slicing, multiCluster, sovereignty), and an
  infeasible instance always says why; with ``allow_unplaced`` the partial placement verifies.
- The order clusters and stages come in never changes the placement.
- Instances built as an exact packing (each cluster's GPUs split into gangs) are fully placed.
- Whenever brute force finds a sound placement of a small instance, ``place`` finds one too.
"""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    GPU_TYPE_CHOICES,
    THROUGHPUT_CHOICES,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_stage,
)

from fleetc.errors import PlacementError
from fleetc.model import Assignment, FleetModel, Placement, StagePlacement, StageType
from fleetc.placement.optimize import place
from fleetc.placement.verify import verify

JURISDICTIONS = ("cn", "EU")


@st.composite
def fleets(draw: st.DrawFn) -> FleetModel:
    gpu_types = st.sampled_from(["a100", "h100", None])
    clusters = tuple(
        make_cluster(
            f"c{i}",
            gpu_type=(gpu_type := draw(gpu_types)),
            gpus=draw(st.sampled_from([4, 8, 16])) if gpu_type else 0,
            cores=draw(st.sampled_from([16, 64, 128])),
            memory_gib=draw(st.sampled_from([64, 256, 1024])),
            utilization=draw(st.sampled_from([0.0, 0.0, 0.25, 0.5])),
            cordoned=draw(st.integers(0, 5)) == 0,
            jurisdiction=draw(st.sampled_from(JURISDICTIONS)),
            energy_efficiency=draw(st.sampled_from([0.3, 0.6, 0.9])),
        )
        for i in range(draw(st.integers(2, 5)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            pipeline=draw(st.sampled_from(["p", "q"])),
            type=(kind := draw(st.sampled_from(list(StageType)))),
            gpus=draw(st.sampled_from([0, 1, 2, 4])),
            throughput_gpus=(throughput := draw(st.sampled_from(THROUGHPUT_CHOICES))),
            gpu_types=(tuple(throughput) if draw(st.booleans()) else ()) if throughput
            else draw(st.sampled_from(GPU_TYPE_CHOICES)),
            replicas=draw(st.integers(1, 6)),
            cores=draw(st.sampled_from([1, 4, 16])),
            memory_gib=draw(st.sampled_from([4, 32])),
            min_replicas_per_cluster=draw(st.integers(1, 3)) if kind is StageType.DEPLOYMENT else 1,
            shared_gpu=draw(st.booleans()),
            jurisdiction=draw(st.sampled_from([None, *JURISDICTIONS])),
        )
        for i in range(draw(st.integers(1, 7)))
    )
    names = [c.name for c in clusters]
    platforms = ()
    if draw(st.booleans()):
        ha = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        platforms = (make_platform(ha[0], tuple(ha[1:]), pipelines=("p",)),)
    gpu_policy = None
    if draw(st.booleans()):
        gpu_policy = make_gpu_policy(
            time_slicing=draw(st.sampled_from([1, 2, 4])),
            defragment_threshold=draw(st.sampled_from([None, 0.5, 0.8])),
            sharing=draw(st.booleans()),
            max_sharers=draw(st.sampled_from([1, 2, 3])),
        )
    return make_fleet(clusters, stages, platforms=platforms, gpu_policy=gpu_policy)


@settings(max_examples=40, deadline=None)
@given(fleets())
def test_hard_constraints_always_hold(model: FleetModel) -> None:
    try:
        placement = place(model)
    except PlacementError as error:
        assert error.reasons and all(error.reasons)
        partial = place(model, allow_unplaced=True)
        assert verify(model, partial, allow_unplaced=True) == []
        unplaced = [p for p in partial.stages if not p.assignments]
        assert unplaced and all(p.reason for p in unplaced)
        return
    assert verify(model, placement) == []
    assert placement.objective <= placement.bound


def assignments(placement: Placement) -> dict[str, tuple[tuple[str, int], ...]]:
    return {p.stage: tuple((a.cluster, a.replicas) for a in p.assignments) for p in placement.stages}


@settings(max_examples=30, deadline=None)
@given(fleets(), st.randoms(use_true_random=False))
def test_placement_does_not_depend_on_order(model: FleetModel, random: object) -> None:
    clusters, stages = list(model.clusters), list(model.stages)
    random.shuffle(clusters)  # type: ignore[attr-defined]
    random.shuffle(stages)  # type: ignore[attr-defined]
    shuffled = dataclasses.replace(model, clusters=tuple(clusters), stages=tuple(stages))
    expected = assignments(place(model, allow_unplaced=True))
    got = place(shuffled, allow_unplaced=True)
    assert [p.stage for p in got.stages] == [s.key for s in stages]
    assert assignments(got) == expected


@st.composite
def exact_packings(draw: st.DrawFn) -> FleetModel:
    """Clusters whose GPUs (and cores, memory in proportion) are split exactly into gangs."""
    clusters, stages = [], []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([4, 8, 16]))
        # one node each: the gangs' sizes are arbitrary, not split for nodes (fleetc.nodefit)
        clusters.append(make_cluster(f"c{i}", gpus=gpus, cores=4 * gpus, memory_gib=16 * gpus, gpus_per_node=gpus))
        left = gpus
        while left:
            size = draw(st.integers(1, left))
            replicas = draw(st.sampled_from([r for r in (1, 2, 4) if size % r == 0]))
            stages.append(make_stage(
                f"j{len(stages)}",
                type=draw(st.sampled_from([StageType.TRAINING, StageType.FINETUNING, StageType.EVALUATION])),
                gpus=size // replicas, replicas=replicas, cores=4 * size // replicas,
                memory_gib=16 * size // replicas,
            ))
            left -= size
    order = draw(st.permutations(stages))
    return make_fleet(tuple(clusters), tuple(order))


@settings(max_examples=40, deadline=None)
@given(exact_packings())
def test_known_full_packings_are_fully_placed(model: FleetModel) -> None:
    placement = place(model)
    assert verify(model, placement) == []
    used = {c.name: 0 for c in model.clusters}
    for p in placement.stages:
        for a in p.assignments:
            used[a.cluster] += a.gpus
    assert used == {c.name: c.gpus for c in model.clusters}


@st.composite
def small_gang_fleets(draw: st.DrawFn) -> FleetModel:
    """Few gangs on few clusters, with every policy feature a gang can meet."""
    clusters = tuple(
        make_cluster(
            f"c{i}", gpus=draw(st.sampled_from([4, 8])), cores=32, memory_gib=256,
            utilization=draw(st.sampled_from([0.0, 0.25])), cordoned=draw(st.integers(0, 4)) == 0,
            jurisdiction=draw(st.sampled_from(JURISDICTIONS)),
        )
        for i in range(draw(st.integers(1, 3)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            type=draw(st.sampled_from([StageType.TRAINING, StageType.EVALUATION, StageType.DATAPROC])),
            gpus=draw(st.sampled_from([0, 1, 2, 4])), replicas=draw(st.integers(1, 2)),
            cores=draw(st.sampled_from([4, 16])), memory_gib=32, shared_gpu=draw(st.booleans()),
            jurisdiction=draw(st.sampled_from([None, *JURISDICTIONS])),
        )
        for i in range(draw(st.integers(1, 4)))
    )
    policy = make_gpu_policy(
        time_slicing=draw(st.sampled_from([1, 2, 4])), sharing=True, max_sharers=draw(st.sampled_from([1, 3])),
        defragment_threshold=draw(st.sampled_from([None, 0.75])),
    )
    return make_fleet(clusters, stages, gpu_policy=policy)


def brute_force_feasible(model: FleetModel) -> bool:
    """Whether any choice of one cluster per gang passes the verifier."""
    for choice in itertools.product(model.clusters, repeat=len(model.stages)):
        candidate = Placement(
            stages=tuple(
                StagePlacement(s.key, (Assignment(c.name, s.replicas, s.total_gpus),), 0.0)
                for s, c in zip(model.stages, choice, strict=True)
            ),
            objective=0.0, bound=0.0, method="brute-force",
        )
        if not verify(model, candidate):
            return True
    return False


@settings(max_examples=40, deadline=None)
@given(small_gang_fleets())
def test_a_placement_is_found_whenever_one_exists(model: FleetModel) -> None:
    try:
        place(model)
    except PlacementError:
        assert not brute_force_feasible(model)
    else:
        assert brute_force_feasible(model)
