"""Node fit: a stage's GPUs become pods that fit a node, and reservations that pack."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_validate import FLEET, check, cluster, documents, pipeline

from fleetc.model import FleetModel, Stage
from fleetc.nodefit import (
    Shape,
    default_gpus_per_node,
    divisor_chain,
    node_of,
    pods_per_replica,
    reserved,
    reserved_per_replica,
    rounded,
)
from fleetc.placement import rules
from fleetc.policy.validate import validate
from fleetc.resolve import resolve

GIB = 2**30


def model_of_texts(*texts: str) -> FleetModel:
    policies, diagnostics = validate(documents(*texts))
    assert diagnostics == []
    return resolve(policies, "test")


def gpu_nodes(*sizes: int) -> list[Shape]:
    """Nodes of ``sizes`` GPUs with cores and memory to spare."""
    return [Shape(size, 10**9, 2**60) for size in sizes]


@pytest.mark.parametrize(("node", "chain"), [(8, (1, 2, 4, 8)), (12, (1, 2, 4, 12)), (6, (1, 2, 6)),
                                              (1, (1,)), (7, (1, 7))])
def test_divisor_chain_steps_divide_each_other_and_the_node(node: int, chain: tuple[int, ...]) -> None:
    assert divisor_chain(node) == chain


@pytest.mark.parametrize(("gpus", "node", "split"), [(16, 8, 2), (8, 8, 1), (12, 8, 2), (9, 8, 3), (7, 4, 7),
                                                     (32, 8, 4)])
def test_a_replica_splits_into_the_fewest_equal_pods_that_fit(gpus: int, node: int, split: int) -> None:
    assert pods_per_replica(gpus, node) == split


def test_reservation_follows_the_largest_rounding_and_the_smallest_node() -> None:
    assert reserved_per_replica(Shape(3, 0, 0), gpu_nodes(8), 8) == (1, 4)
    assert reserved_per_replica(Shape(12, 0, 0), gpu_nodes(8), 8) == (2, 16)  # two pods of 6, each reserving 8
    assert reserved_per_replica(Shape(3, 0, 0), gpu_nodes(8, 6), 6) == (1, 6)  # 3 -> 4 on 8-GPU nodes, 6 on 6
    assert reserved_per_replica(Shape(16, 0, 0), gpu_nodes(8, 4), 4) == (4, 16)
    assert reserved_per_replica(Shape(5, 0, 0), [], 0) == (1, 5)  # no cluster of its type: left as asked
    assert reserved_per_replica(Shape(16, 0, 0), gpu_nodes(8), 0) == (1, 16)  # serving: never split


def test_a_pod_that_crowds_a_node_by_cores_or_memory_reserves_more_of_its_gpus() -> None:
    """8 GPUs, 128 cores, 1Ti a node: a 1-GPU pod of 40 cores leaves the node's cores short after
    3 pods, so it reserves 4 GPUs (2 such pods a node, 80 cores); by memory likewise."""
    node = Shape(8, 128_000, 1024 * GIB)
    assert reserved(Shape(1, 16_000, 128 * GIB), node) == 1  # 8 fit by every resource
    assert reserved(Shape(1, 40_000, 16 * GIB), node) == 4
    assert reserved(Shape(1, 4_000, 300 * GIB), node) == 4  # 3 fit by memory: 2 a node
    assert reserved(Shape(2, 100_000, 16 * GIB), node) == 8  # one a node
    assert reserved(Shape(0, 100_000, 16 * GIB), node) == 0  # no GPUs: none reserved
    # the most over the nodes the pod fits; one it does not fit does not count
    small = Shape(8, 64_000, 512 * GIB)
    assert reserved_per_replica(Shape(1, 40_000, 16 * GIB), [node, small], 0) == (1, 8)
    assert reserved_per_replica(Shape(1, 100_000, 16 * GIB), [node, small], 0) == (1, 8)
    # a gang replica's cores and memory are shared by its pods
    assert reserved_per_replica(Shape(16, 80_000, 64 * GIB), [node], 8) == (2, 16)


@given(st.sampled_from([1, 2, 4, 6, 8]), st.integers(1, 64), st.integers(1, 256),
       st.lists(st.tuples(st.integers(0, 8), st.integers(1, 64), st.integers(1, 256)), min_size=1, max_size=24))
def test_crowded_reservations_pack_by_every_resource(gpus: int, cores: int, gib: int,
                                                     asks: list[tuple[int, int, int]]) -> None:
    """Pods with GPUs, each reserving :func:`reserved`, sorted largest first: first fit by the
    reservations alone puts them on ``ceil(sum / node)`` nodes, and every node then holds their
    real cores and memory too."""
    node = Shape(gpus, cores * 1000, gib * GIB)
    pods = [pod for g, c, m in asks if (pod := Shape(min(g, gpus), c * 1000, m * GIB)).gpus and pod.fits(node)]
    placed = sorted(((reserved(pod, node), pod) for pod in pods), key=lambda x: -x[0])
    nodes: list[list[tuple[int, Shape]]] = []
    for size, pod in placed:
        free = next((n for n in nodes if sum(s for s, _ in n) + size <= gpus), None)
        if free is None:
            nodes.append([(size, pod)])
        else:
            free.append((size, pod))
    assert len(nodes) == -(-sum(size for size, _ in placed) // gpus)
    for held in nodes:
        assert sum(p.millis for _, p in held) <= node.millis and sum(p.memory for _, p in held) <= node.memory


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


def test_cores_and_memory_per_node_are_positive_quantities_within_the_cluster() -> None:
    assert check(cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: true}")) == [
        "f0.yaml:10:63: error: spec.clusters[0].attributes.cpu-per-node: expected a quantity, got true\n"
        "  hint: the cores, e.g. 96, that one node offers"]
    assert check(cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: lots, memory-per-node: 0}")) == [
        "f0.yaml:10:63: error: spec.clusters[0].attributes.cpu-per-node: expected a finite, non-negative "
        "quantity, got 'lots'",
        "f0.yaml:10:86: error: spec.clusters[0].attributes.memory-per-node: expected a positive quantity, got 0"]
    above = cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: 96, memory-per-node: 2Ti}\n"
                    "    capacity: {cpu: 64, memory: 1Ti}")
    assert check(above) == [
        "f0.yaml:10:63: error: spec.clusters[0].attributes.cpu-per-node: cpu-per-node 96 is more than the whole "
        "cluster's capacity.cpu 64\n  hint: state what one node offers in cpu-per-node, and all the nodes "
        "together in capacity.cpu",
        "f0.yaml:10:84: error: spec.clusters[0].attributes.memory-per-node: memory-per-node '2Ti' is more than "
        "the whole cluster's capacity.memory '1Ti'\n  hint: state what one node offers in memory-per-node, and "
        "all the nodes together in capacity.memory"]
    assert check(cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: '96', memory-per-node: 1Ti}")) == []


def test_node_shape_defaults_to_the_clusters_share_and_states_the_capacity_when_alone() -> None:
    model = model_of_texts(cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: 96, "
                                   "memory-per-node: 1Ti}"))
    (stated,) = model.clusters
    assert (stated.cpu_millis, stated.memory_bytes) == (2 * 96_000, 2 * 1024 * GIB)  # two nodes of it
    assert node_of(stated) == Shape(8, 96_000, 1024 * GIB)
    (shared,) = model_of_texts(cluster("attributes: {gpu-type: a100, gpu-count: 16}\n"
                                       "    capacity: {cpu: 200, memory: 1Ti}")).clusters
    assert node_of(shared) == Shape(8, 100_000, 512 * GIB)  # half of the cluster each
    (cpu_only,) = model_of_texts(cluster("capacity: {cpu: 32, memory: 64Gi}")).clusters
    assert node_of(cpu_only) == Shape(0, 32_000, 64 * GIB)  # one node, as nothing says more


def test_a_pod_crowding_a_node_reserves_gpus_and_one_fitting_no_node_is_kept_off() -> None:
    """Nodes of 8 GPUs and 64 cores: a 1-GPU replica of 20 cores reserves 4 GPUs (3 would fit a
    node by cores, 2 of 4 GPUs pack); one of 80 cores fits no node and may not run there."""
    fleet = cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: 64}")
    crowded = model_of_texts(fleet, pipeline("{name: serve, type: Deployment, resources: {gpu: 1, cpu: 20}}"))
    (serve,) = crowded.stages
    assert (serve.gpus, serve.gpu_request, serve.pod_gpus) == (4, 1, 1)
    assert rules.exclusions(serve, crowded.clusters[0]) == []
    big = model_of_texts(fleet, pipeline("{name: serve, type: Deployment, resources: {gpu: 1, cpu: 80}}"))
    assert rules.exclusions(big.stages[0], big.clusters[0]) == [
        "its pods (1 GPU, 80 cores, 16Gi) fit no node of the cluster (8 GPUs, 64 cores, 1024Gi each)"]


def test_stages_fitted_together_are_fitted_as_each_alone() -> None:
    """resolve fits each kind of stage once: a stage that differs in anything node fit reads
    (GPUs, cores, memory, whether it is a gang) gets its own fit, alike ones the same."""
    fleet = cluster("attributes: {gpu-type: a100, gpu-count: 16, cpu-per-node: 64, memory-per-node: 256Gi}")
    stages = ["{name: s0, type: Deployment, resources: {gpu: 1, cpu: 20}}",
              "{name: s1, type: Deployment, resources: {gpu: 1, cpu: 20}}",
              "{name: s2, type: Deployment, resources: {gpu: 1, cpu: 4}}",
              "{name: s3, type: Deployment, resources: {gpu: 1, cpu: 4, memory: 100Gi}}",
              "{name: s4, type: Deployment, resources: {gpu: 2, cpu: 4}}",
              "{name: s5, type: Training, resources: {gpu: 12, cpu: 4}}",
              "{name: s6, type: Deployment, resources: {gpu: 1, cpu: 20}}"]
    def fit(stage: Stage) -> tuple[int, int, int | None]:
        return stage.gpus, stage.pods_per_replica, stage.gpu_request

    together = [fit(stage) for stage in model_of_texts(fleet, pipeline(*stages)).stages]
    assert together == [fit(model_of_texts(fleet, pipeline(stage)).stages[0]) for stage in stages]
    assert together == [(4, 1, 1), (4, 1, 1), (1, 1, None), (4, 1, 1), (2, 1, None), (16, 2, 12), (4, 1, 1)]


def test_a_serving_replica_larger_than_a_node_is_refused_at_validate_time() -> None:
    fleet = cluster("attributes: {gpu-type: a100, gpu-count: 16}")
    serving = pipeline("{name: serve, type: Deployment, resources: {gpu: 16}}")
    assert check(fleet, serving) == [
        "f1.yaml:7:54: error: spec.stages[0].resources.gpu: a serving replica is one pod and cannot be "
        "split over nodes: 16 GPUs per replica, but a node of cluster c carries 8\n  hint: ask for at "
        "most 8 GPUs per replica, or set gpuType to a type with larger nodes"]
    training = pipeline("{name: train, type: Training, resources: {gpu: 16}}")
    assert check(fleet, training) == []  # a gang replica is split instead


def test_the_cluster_named_for_a_serving_replica_has_the_smallest_nodes_it_may_use() -> None:
    """Of the clusters a serving stage may run on whose nodes are too small, the one with the
    smallest nodes is named (the first by name among equals); a type whose nodes all fit, or
    that the stage does not ask for, is not."""
    def fleet(*clusters: str) -> str:
        return FLEET.replace("  - name: c\n    provider: x\n    region: cn-north-1\n", "".join(
            f"  - name: {name}\n    provider: x\n    region: cn-north-1\n    attributes: {{{attributes}}}\n"
            for name, attributes in clusters))

    fleets = fleet(("e", "gpu-type: a100, gpu-count: 16"), ("d", "gpu-type: a100, gpu-count: 16, gpus-per-node: 4"),
                   ("b", "gpu-type: a100, gpu-count: 16, gpus-per-node: 4"),
                   ("a", "gpu-type: h100, gpu-count: 32, gpus-per-node: 2"),
                   ("z", "gpu-type: l4, gpu-count: 32, gpus-per-node: 16"))
    message = ("a serving replica is one pod and cannot be split over nodes: 6 GPUs per replica, but a node of "
               "cluster {} carries {}")
    assert [line.split(": error: ")[1].split("\n")[0] for line in check(fleets, pipeline(
        "{name: s, type: Deployment, resources: {gpu: 6}}"))] == [
        "spec.stages[0].resources.gpu: " + message.format("a", 2)]
    assert [line.split(": error: ")[1].split("\n")[0] for line in check(fleets, pipeline(
        "{name: s, type: Deployment, resources: {gpu: 6, gpuType: a100}}"))] == [
        "spec.stages[0].resources.gpu: " + message.format("b", 4)]
    assert check(fleets, pipeline("{name: s, type: Deployment, resources: {gpu: 6, gpuType: l4}}")) == []


def test_combinations_never_reserve_less_than_asked() -> None:
    for gpus, node in itertools.product(range(1, 33), range(1, 17)):
        pods, held = reserved_per_replica(Shape(gpus, 0, 0), gpu_nodes(node), node)
        assert gpus % pods == 0 and gpus // pods <= node and held >= gpus


def test_inputs_and_outputs_whose_variables_collide_are_refused() -> None:
    """x's FLEETC_INPUT_X_PATH would be x-path's FLEETC_INPUT_X_PATH: one URL would replace the other."""
    stage = "{name: s, type: DataProc, inputs: [{name: x, source: 's3://a/'}, {name: x-path, source: 's3://b/'}]}"
    assert check(FLEET, pipeline(stage)) == [
        "f1.yaml:7:47: error: spec.stages[0].inputs[0].name: its environment variable FLEETC_INPUT_X_PATH is "
        "also inputs[1]'s\n  hint: rename one: names that differ only in '-' and a '_path' or '_credentials' "
        "ending collide"]
