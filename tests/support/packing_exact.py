"""An exact model of placing gangs onto the nodes of a fleet, independent of fleetc's solvers.

It reads the documented rules only (``docs/pipelines.md``, node fit): a gang runs whole on one
cluster that is not cordoned and has one of its GPU types; its replica is split into the fewest
equal pods that each fit a node of that cluster (GPUs, cores, memory); and its pods are
assigned to the cluster's nodes, no node giving out more GPUs, cores or memory than it has.
Every pod's node is a variable: the model is the packing itself, not a count of GPUs. Solved as
a MILP by HiGHS through ``scipy.optimize.milp`` (an exact branch and bound), it answers how many
of the stages can be placed at most. Gangs only, whole GPUs, no utilisation: the fleets the
property test in ``tests/test_nodefit.py`` draws.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from fleetc.model import Cluster, FleetModel, Stage


def split(gpus: int, node: int) -> int:
    """The fewest equal pods of a replica of ``gpus`` that each hold at most ``node`` GPUs."""
    return next(k for k in range(max(1, -(-gpus // node)), gpus + 1) if gpus % k == 0) if gpus > node else 1


def _node(cluster: Cluster) -> tuple[int, int, int, int]:
    """(nodes, GPUs, millicores, bytes) of one node of ``cluster``, shared equally."""
    nodes = cluster.gpus // cluster.gpus_per_node
    return nodes, cluster.gpus_per_node, cluster.cpu_millis // nodes, cluster.memory_bytes // nodes


def _pods(stage: Stage, cluster: Cluster) -> tuple[int, int, int, int] | None:
    """(pods, GPUs, millicores, bytes per pod) of ``stage`` on ``cluster``; None where it may
    not run there."""
    if cluster.cordoned or cluster.gpus <= 0 or (stage.gpu_types and cluster.gpu_type not in stage.gpu_types):
        return None
    _, gpus, millis, memory = _node(cluster)
    k = split(stage.gpus, gpus)
    pod = (stage.gpus // k, -(-stage.cpu_millis // k), -(-stage.memory_bytes // k))
    if pod[0] > gpus or pod[1] > millis or pod[2] > memory:
        return None
    return (k * stage.replicas, *pod)


def most_placed(model: FleetModel) -> int:
    """The most of ``model``'s stages (gangs) any placement that packs onto the nodes places."""
    x: dict[tuple[int, int], int] = {}
    y: dict[tuple[int, int, int], int] = {}
    for s, stage in enumerate(model.stages):
        for c, cluster in enumerate(model.clusters):
            if _pods(stage, cluster) is not None:
                x[(s, c)] = len(x) + len(y)
                for j in range(_node(cluster)[0]):
                    y[(s, c, j)] = len(x) + len(y)
    if not x:
        return 0
    rows = _rows(model, x, y)
    size = len(x) + len(y)
    matrix = np.zeros((len(rows), size))
    for i, (row, _, _) in enumerate(rows):
        for column, value in row.items():
            matrix[i, column] = value
    objective = np.zeros(size)
    objective[list(x.values())] = -1.0
    upper = np.full(size, np.inf)
    upper[list(x.values())] = 1.0
    result = milp(objective, integrality=np.ones(size), bounds=Bounds(np.zeros(size), upper),
                  constraints=LinearConstraint(matrix, [lo for _, lo, _ in rows], [hi for _, _, hi in rows]))
    assert result.status == 0, result.message
    return round(-result.fun)


def _rows(model: FleetModel, x: dict[tuple[int, int], int], y: dict[tuple[int, int, int], int]
          ) -> list[tuple[dict[int, float], float, float]]:
    """(column -> coefficient, lower, upper) of each constraint of :func:`most_placed`."""
    rows: list[tuple[dict[int, float], float, float]] = []
    for s in range(len(model.stages)):  # each stage at most once
        rows.append(({x[k]: 1.0 for k in x if k[0] == s}, -np.inf, 1.0))
    for (s, c), column in x.items():  # its pods are on the cluster's nodes exactly when it runs there
        pods = _pods(model.stages[s], model.clusters[c])
        assert pods is not None
        row = {y[(s, c, j)]: 1.0 for j in range(_node(model.clusters[c])[0])}
        row[column] = -float(pods[0])
        rows.append((row, 0.0, 0.0))
    for c, cluster in enumerate(model.clusters):  # no node gives out more than it has
        nodes, *have = _node(cluster)
        fitting = [(s, pods) for s, stage in enumerate(model.stages) if (pods := _pods(stage, cluster)) is not None]
        for j in range(nodes):
            for r in range(3):
                rows.append(({y[(s, c, j)]: float(pods[1 + r]) for s, pods in fitting}, -np.inf, float(have[r])))
    return rows
