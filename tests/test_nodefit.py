"""Node fit: a stage's GPUs become pods that fit a node, and reservations that pack."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_validate import FLEET, check, cluster, pipeline

from fleetc.nodefit import default_gpus_per_node, divisor_chain, pods_per_replica, reserved_per_replica, rounded


@pytest.mark.parametrize(("node", "chain"), [(8, (1, 2, 4, 8)), (12, (1, 2, 4, 12)), (6, (1, 2, 6)),
                                              (1, (1,)), (7, (1, 7))])
def test_divisor_chain_steps_divide_each_other_and_the_node(node: int, chain: tuple[int, ...]) -> None:
    assert divisor_chain(node) == chain


@pytest.mark.parametrize(("gpus", "node", "split"), [(16, 8, 2), (8, 8, 1), (12, 8, 2), (9, 8, 3), (7, 4, 7),
                                                     (32, 8, 4)])
def test_a_replica_splits_into_the_fewest_equal_pods_that_fit(gpus: int, node: int, split: int) -> None:
    assert pods_per_replica(gpus, node) == split


def test_reservation_follows_the_largest_rounding_and_the_smallest_node() -> None:
    assert reserved_per_replica(3, [8]) == (1, 4)
    assert reserved_per_replica(12, [8]) == (2, 16)  # two pods of 6, each reserving 8
    assert reserved_per_replica(3, [8, 6]) == (1, 6)  # 3 -> 4 on 8-GPU nodes, -> 6 on 6-GPU nodes
    assert reserved_per_replica(16, [8, 4]) == (4, 16)
    assert reserved_per_replica(5, []) == (1, 5)  # no cluster of its type: left as asked


def test_default_node_size_divides_the_gpu_count() -> None:
    assert [default_gpus_per_node(n) for n in (64, 16, 12, 4, 6, 3, 0)] == [8, 8, 6, 4, 6, 3, 8]


@given(st.integers(1, 16), st.lists(st.integers(1, 16), min_size=1, max_size=30))
def test_rounded_pods_pack_whenever_their_sum_fits(node: int, asks: list[int]) -> None:
    """The claim the optimizer relies on: reservations on one node size pack by first fit,
    largest first, into sum / node nodes (rounded up)."""
    sizes = sorted((rounded(min(a, node), node) for a in asks), reverse=True)
    nodes: list[int] = []
    for size in sizes:
        free = next((i for i, used in enumerate(nodes) if used + size <= node), None)
        if free is None:
            nodes.append(size)
        else:
            nodes[free] += size
    assert len(nodes) == -(-sum(sizes) // node)


def test_gpus_per_node_must_divide_the_gpu_count() -> None:
    fleet = cluster("attributes: {gpu-type: a100, gpu-count: 12, gpus-per-node: 8}")
    assert check(fleet) == ["f0.yaml:10:64: error: spec.clusters[0].attributes.gpus-per-node: gpu-count 12 "
                            "is not a whole number of nodes of 8 GPUs\n  hint: state the GPUs one node "
                            "carries; gpu-count must be a multiple of it"]
    bad = cluster("attributes: {gpu-type: a100, gpu-count: 8, gpus-per-node: none}")
    assert check(bad) == ["f0.yaml:10:63: error: spec.clusters[0].attributes.gpus-per-node: expected a "
                          "positive integer, got 'none'"]


def test_a_serving_replica_larger_than_a_node_is_refused_at_validate_time() -> None:
    fleet = cluster("attributes: {gpu-type: a100, gpu-count: 16}")
    serving = pipeline("{name: serve, type: Deployment, resources: {gpu: 16}}")
    assert check(fleet, serving) == [
        "f1.yaml:7:54: error: spec.stages[0].resources.gpu: a serving replica is one pod and cannot be "
        "split over nodes: 16 GPUs per replica, but a node of cluster c carries 8\n  hint: ask for at "
        "most 8 GPUs per replica, or set gpuType to a type with larger nodes"]
    training = pipeline("{name: train, type: Training, resources: {gpu: 16}}")
    assert check(fleet, training) == []  # a gang replica is split instead


def test_combinations_never_reserve_less_than_asked() -> None:
    for gpus, node in itertools.product(range(1, 33), range(1, 17)):
        pods, reserved = reserved_per_replica(gpus, [node])
        assert gpus % pods == 0 and gpus // pods <= node and reserved >= gpus


def test_inputs_and_outputs_whose_variables_collide_are_refused() -> None:
    """x's FLEETC_INPUT_X_PATH would be x-path's FLEETC_INPUT_X_PATH: one URL would replace the other."""
    stage = "{name: s, type: DataProc, inputs: [{name: x, source: 's3://a/'}, {name: x-path, source: 's3://b/'}]}"
    assert check(FLEET, pipeline(stage)) == [
        "f1.yaml:7:47: error: spec.stages[0].inputs[0].name: its environment variable FLEETC_INPUT_X_PATH is "
        "also inputs[1]'s\n  hint: rename one: names that differ only in '-' and a '_path' or '_credentials' "
        "ending collide"]
