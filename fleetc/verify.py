"""Re-check a placement against every hard constraint, independently of the solver.

The optimizer's answer is only trusted after this pass agrees: it works on the model's integer
base units (millicores, bytes, GPUs) and shares no code with the MILP, so a modelling or
numerical mistake there shows up here as a list of readable problems.
"""

from __future__ import annotations

from collections import Counter

from fleetc.model import Cluster, FleetModel, Placement, Stage, StagePlacement, untolerated


def min_replicas_per_cluster(stage: Stage) -> int:
    """The fewest replicas a serving cluster runs: at least 1, at most the stage's replicas.

    A minimum above the replica count would make every placement impossible, so it is read as
    "all replicas on one cluster".
    """
    return max(1, min(stage.min_replicas_per_cluster, stage.replicas))


def verify(model: FleetModel, placement: Placement) -> list[str]:
    """Every hard constraint ``placement`` breaks, as readable sentences; [] when it is sound."""
    problems = _stage_order_problems(model, placement)
    known = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        if stage is not None:
            problems += _stage_problems(stage, stage_placement, known)
    problems += _capacity_problems(model, placement)
    return problems


def _stage_order_problems(model: FleetModel, placement: Placement) -> list[str]:
    wanted = [s.key for s in model.stages]
    got = [p.stage for p in placement.stages]
    if got == wanted:
        return []
    counts = Counter(got)
    problems = [f"{key}: not placed" for key in wanted if key not in counts]
    problems += [f"{key}: placed {n} times" for key, n in sorted(counts.items()) if n > 1]
    problems += [f"{key}: not a stage of the fleet" for key in sorted(counts) if key not in wanted]
    return problems or ["stages are not in the fleet's order"]


def _stage_problems(
    stage: Stage, placement: StagePlacement, clusters: dict[str, Cluster]
) -> list[str]:
    key = stage.key
    names = [a.cluster for a in placement.assignments]
    problems = []
    if names != sorted(set(names)):
        problems.append(f"{key}: assignments are not sorted by unique cluster name")
    placed = sum(a.replicas for a in placement.assignments)
    if placed != stage.replicas:
        problems.append(f"{key}: {placed} replicas placed, the stage has {stage.replicas}")
    if stage.is_gang and len(placement.assignments) > 1:
        problems.append(f"{key}: gang split across {len(placement.assignments)} clusters")
    for assignment in placement.assignments:
        cluster = clusters.get(assignment.cluster)
        if cluster is None:
            problems.append(f"{key}: unknown cluster {assignment.cluster}")
            continue
        problems += [
            f"{key} on {cluster.name}: {p}"
            for p in _assignment_problems(stage, cluster, assignment.replicas, assignment.gpus)
        ]
    return problems


def _assignment_problems(stage: Stage, cluster: Cluster, replicas: int, gpus: int) -> list[str]:
    problems = []
    if replicas < 1:
        problems.append(f"{replicas} replicas")
    if gpus != replicas * stage.gpus:
        problems.append(f"{gpus} GPUs for {replicas} replicas of {stage.gpus}")
    if not stage.is_gang and replicas < min_replicas_per_cluster(stage):
        problems.append(
            f"{replicas} replicas, below the minimum of {min_replicas_per_cluster(stage)}"
        )
    if stage.gpus > 0 and (cluster.gpu_type is None or cluster.gpus <= 0):
        problems.append("needs GPUs, the cluster has none")
    elif stage.gpus > 0 and stage.gpu_type and stage.gpu_type != cluster.gpu_type:
        problems.append(f"needs {stage.gpu_type}, the cluster has {cluster.gpu_type}")
    problems += [
        f"untolerated taint {t.key}={t.value}:{t.effect}"
        for t in untolerated(cluster.taints, stage.tolerations)
    ]
    return problems


def _capacity_problems(model: FleetModel, placement: Placement) -> list[str]:
    stages = {s.key: s for s in model.stages}
    used: dict[str, list[int]] = {c.name: [0, 0, 0] for c in model.clusters}
    for stage_placement in placement.stages:
        stage = stages.get(stage_placement.stage)
        for a in stage_placement.assignments:
            if stage is not None and a.cluster in used:
                totals = used[a.cluster]
                totals[0] += a.replicas * stage.gpus
                totals[1] += a.replicas * stage.cpu_millis
                totals[2] += a.replicas * stage.memory_bytes
    problems = []
    for cluster in model.clusters:
        gpus, millis, memory = used[cluster.name]
        for what, use, capacity in (
            ("GPUs", gpus, cluster.gpus),
            ("CPU millicores", millis, cluster.cpu_millis),
            ("memory bytes", memory, cluster.memory_bytes),
        ):
            if use > capacity:
                problems.append(f"{cluster.name}: {use} {what} placed, capacity {capacity}")
    return problems
