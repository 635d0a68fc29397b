"""Pods packed onto a cluster's nodes, for the exact check (:mod:`bench.exactcheck`), written
from the documented rule (``docs/pipelines.md``, Node fit: packing) and nothing of fleetc's code.

The rule: what is placed on a cluster must pack onto its nodes, an assignment of every pod to a
node with no node giving out more GPUs, cores or memory than it offers. A cluster's nodes
(:func:`cluster_nodes`): ``gpu-count / gpus-per-node`` nodes share its cores and memory
equally, unless ``cpu-per-node`` / ``memory-per-node`` state a node's (a cluster without GPUs
is one node, or as many as its stated node size makes of its totals); the GPUs fleetc may use
(after ``utilization``) fill whole nodes, what is left of a node counting as a smaller node,
each with a whole node's cores and memory; the cluster's other nodes keep their cores and
memory for pods without GPUs. The cluster's usable totals bound everything as well (the exact
model's per-cluster rows).

Two uses: :func:`add_node_rows` puts the packing into a MILP as integer variables (pods of
each shape on each node), and :func:`packing` decides whether given pods pack (first fit
decreasing, else a small SCIP model of the same rows), its answer an assignment checked in
integers (:func:`holds`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: What one pod asks for, or one node offers: GPUs, millicores, bytes.
Shape = tuple[int, int, int]

MIB = 2**20


def cluster_nodes(cluster: Any, usable_gpus: int) -> list[Shape]:
    """The nodes pods pack onto on ``cluster``, given the GPUs fleetc may use on it."""
    if cluster.gpus > 0 and cluster.gpus_per_node > 0:
        count = max(1, cluster.gpus // cluster.gpus_per_node)
        per_node = cluster.gpus_per_node
    else:
        stated = [total // size for total, size in ((cluster.cpu_millis, cluster.cpu_per_node),
                                                     (cluster.memory_bytes, cluster.memory_per_node)) if size]
        count, per_node = max(1, min(stated, default=1)), 0
    millis = cluster.cpu_per_node if cluster.cpu_per_node is not None else cluster.cpu_millis // count
    memory = cluster.memory_per_node if cluster.memory_per_node is not None else cluster.memory_bytes // count
    gpu_nodes: list[Shape] = []
    if per_node > 0:
        usable = max(0, usable_gpus)
        gpu_nodes = [(per_node, millis, memory)] * (usable // per_node)
        if usable % per_node:
            gpu_nodes.append((usable % per_node, millis, memory))
    return gpu_nodes + [(0, millis, memory)] * max(0, count - len(gpu_nodes))


def most_on(pod: Shape, node: Shape) -> int:
    """How many pods of ``pod``'s shape one empty ``node`` holds (a large number when it asks
    for nothing)."""
    room = [have // need for need, have in zip(pod, node, strict=True) if need > 0]
    return min(room, default=1 << 30)


def holds(pods: Mapping[Shape, int], nodes: Sequence[Shape], assignment: Sequence[Mapping[Shape, int]]) -> bool:
    """Whether ``assignment`` (per node, pods of each shape) places every pod once and gives no
    node more than it offers, in integers."""
    if len(assignment) != len(nodes) or any(n < 0 for on in assignment for n in on.values()):
        return False
    for shape, count in pods.items():
        if sum(on.get(shape, 0) for on in assignment) != count:
            return False
    if any(shape not in pods and n for on in assignment for shape, n in on.items()):
        return False
    return all(sum(n * shape[r] for shape, n in on.items()) <= node[r]
               for on, node in zip(assignment, nodes, strict=True) for r in range(3))


def first_fit(pods: Mapping[Shape, int], nodes: Sequence[Shape]) -> list[dict[Shape, int]] | None:
    """First fit decreasing (largest pods first, each onto the first node with room)."""
    free = [list(node) for node in nodes]
    assignment: list[dict[Shape, int]] = [{} for _ in nodes]
    for shape in sorted(pods, reverse=True):
        for _ in range(pods[shape]):
            j = next((j for j, f in enumerate(free) if all(shape[r] <= f[r] for r in range(3))), None)
            if j is None:
                return None
            for r in range(3):
                free[j][r] -= shape[r]
            assignment[j][shape] = assignment[j].get(shape, 0) + 1
    return assignment


def add_node_rows(m: Any, quicksum: Any, pods: Mapping[Shape, Any], nodes: Sequence[Shape]
                  ) -> dict[tuple[Shape, int], Any]:
    """Rows of ``m`` by which the pods (per shape, a count or an expression of the model's
    variables) pack onto ``nodes``: an integer count of each shape's pods on each node, all of a
    shape's pods on some node, no node over its GPUs, cores or memory (memory in MiB). Nodes of
    one shape are interchangeable: each holds no more (GPUs first, then cores) than the one
    before it, which leaves one of the alike assignments. The count variables, by (shape, node)."""
    on: dict[tuple[Shape, int], Any] = {}
    for shape in pods:
        for j, node in enumerate(nodes):
            most = most_on(shape, node)
            if most > 0:
                on[shape, j] = m.addVar(vtype="I", lb=0, ub=min(most, 1 << 20))
    for shape, count in pods.items():
        m.addCons(quicksum(on[shape, j] for j in range(len(nodes)) if (shape, j) in on) == count)
    for j, node in enumerate(nodes):
        mine = [(shape, on[shape, j]) for shape in pods if (shape, j) in on]
        if not mine:
            continue
        m.addCons(quicksum(shape[0] * n for shape, n in mine) <= node[0])
        m.addCons(quicksum(shape[1] * n for shape, n in mine) <= node[1])
        m.addCons(quicksum(shape[2] / MIB * n for shape, n in mine) <= node[2] / MIB)
        if j and nodes[j - 1] == node:
            weight = node[1] + 1  # a GPU outweighs all of a node's cores
            before = [(shape, on[shape, j - 1]) for shape in pods if (shape, j - 1) in on]
            m.addCons(quicksum((shape[0] * weight + shape[1]) * n for shape, n in before)
                      >= quicksum((shape[0] * weight + shape[1]) * n for shape, n in mine))
    return on


def packing(pods: Mapping[Shape, int], nodes: Sequence[Shape], time_limit: float = 60.0
            ) -> list[dict[Shape, int]] | None:
    """An assignment of ``pods`` (count per shape) to ``nodes`` that :func:`holds`; None when
    there is none. Raises when SCIP neither finds one nor proves there is none in
    ``time_limit`` CPU seconds, or finds one that does not hold in integers."""
    pods = {shape: n for shape, n in pods.items() if n > 0}
    if not pods:
        return [{} for _ in nodes]
    found = first_fit(pods, nodes)
    if found is not None:
        return found
    from pyscipopt import Model, quicksum

    m = Model()
    m.hideOutput()
    m.setParam("timing/clocktype", 1)
    m.setParam("limits/time", time_limit)
    m.setParam("parallel/maxnthreads", 1)
    if any(all(most_on(shape, node) == 0 for node in nodes) for shape in pods):
        return None  # a pod fitting no node
    on = add_node_rows(m, quicksum, pods, nodes)
    m.optimize()
    status = m.getStatus()
    if status == "infeasible":
        return None
    if m.getNSols() == 0:
        raise RuntimeError(f"SCIP did not decide the packing of {dict(pods)} onto {list(nodes)} ({status})")
    assignment: list[dict[Shape, int]] = [{} for _ in nodes]
    for (shape, j), var in on.items():
        n = round(m.getVal(var))
        if n:
            assignment[j][shape] = n
    if not holds(pods, nodes, assignment):
        raise RuntimeError(f"SCIP's packing of {dict(pods)} onto {list(nodes)} does not hold in integers")
    return assignment
