"""``placement.yaml``: fleetc's own report of the placement (not a Kubernetes object)."""

from __future__ import annotations

from collections.abc import Mapping

from fleetc.model import Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.placement.alternatives import Choice, choices
from fleetc.placement.rules import on_cluster, slots_on, slots_per_gpu, uses_shared_slots
from fleetc.render.common import Obj
from fleetc.render.context import placements


def placement_report(model: FleetModel, placement: Placement) -> Obj:
    """fleetc's report: the inputs' digest, the solver's figures and where each stage went.

    ``optimal`` says whether the placement is proven optimal; ``bound`` is the LP relaxation's
    value (an upper bound on every placement's objective); ``gap`` is the proven gap of this
    placement: 0 when it is optimal, else 1 - objective / bound, which counts the relaxation's
    own integrality gap too, so the true shortfall may be smaller.

    The gap is worked out from the objective and bound as printed, so a compile that gives a
    report's placement back (:mod:`fleetc.compiler`) prints the same gap from its figures.
    """
    figures = Placement((), round(placement.objective, 6), round(placement.bound, 6), placement.method,
                        optimal=placement.optimal)
    chosen = choices(model, placement)
    gpu_types = {c.name: c.gpu_type for c in model.clusters}
    slots = {c.name: slots_on(model, c) for c in model.clusters}  # once, not per stage: 20M calls at 1,000 x 20,000
    clusters = {c.name: c for c in model.clusters}
    return {
        "apiVersion": "fleetc.dev/v1alpha1",
        "kind": "Placement",
        "fleet": model.name,
        **({"inputs": placement.inputs} if placement.inputs else {}),
        # the clusters --drain lost, part of the inputs digest: explain and --check need the same
        **({"drained": drained} if (drained := sorted(c.name for c in model.clusters if c.drained)) else {}),
        # the --solver it was compiled with, part of the inputs digest; written when not HiGHS
        **({"solver": placement.solver} if placement.solver else {}),
        "method": placement.method,
        # seconds, as a float whatever the caller gave, so a given-back placement writes the same
        # bytes; more time may place better
        **({"timeLimitReached": float(placement.time_limit)} if placement.time_limit is not None else {}),
        # proven optimal: only the exact path, every stage placed, in time, can say so
        "optimal": figures.optimal,
        "objective": figures.objective,
        # the LP relaxation's value: no placement scores more
        "bound": figures.bound,
        # what is proven of this placement: 0 when optimal, else 1 - objective / bound
        "gap": round(figures.gap, 6),
        "stages": [_node_fit(_stage_report(s, p, slots_per_gpu(model) if uses_shared_slots(model, s) else 0,
                                           chosen.get(s.key), gpu_types, slots), s, p, clusters)
                   for s, p in placements(model, placement)],
    }


def _node_fit(report: Obj, stage: Stage, placement: StagePlacement, clusters: Mapping[str, Cluster]) -> Obj:
    """``report`` with ``nodeFit`` on each cluster entry where node fit splits the stage's
    replica into more than one pod (:func:`fleetc.placement.rules.on_cluster`): a replica
    larger than a node of that cluster runs as ``podsPerReplica`` pods of ``gpusPerPod`` GPUs.
    The split is the only count node fit changes: GPUs are never rounded, so ``gpus`` is the
    replicas times the GPUs asked per replica."""
    if not stage.is_gang or not stage.gpus:
        return report
    for entry, assignment in zip(report["clusters"], placement.assignments, strict=True):
        here = on_cluster(stage, clusters[assignment.cluster])
        if here.pods_per_replica > 1:
            entry["nodeFit"] = {"podsPerReplica": here.pods_per_replica, "gpusPerPod": here.pod_gpus}
    return report


def _stage_report(stage: Stage, placement: StagePlacement, slots_per_gpu: int, choice: Choice | None,
                  gpu_types: dict[str, str | None], slots_on: Mapping[str, int]) -> Obj:
    """One stage's entry. A time-sliced stage (``slots_per_gpu`` > 0) takes slots, not GPUs: its
    entry says how many slots share a GPU, and each cluster's ``slots`` and the ``gpus`` they
    take (slots / slots per GPU on that cluster, ``slots_on``: a fraction where they share a GPU
    with another stage's, whole GPUs where its device plugin is not configured).

    A stage listing GPU alternatives has them as its ``gpuType`` list, each cluster's
    ``gpuType``, and ``gpuChoice`` (:mod:`fleetc.placement.alternatives`): the types chosen,
    which alternative the least preferred is, and why each earlier one was not taken. A stage
    asking for throughput has its ``throughput``, ``gpusPerReplica`` per GPU type, and each
    cluster's type and GPUs per replica (``gpuChoice`` when it had a choice)."""
    alternatives = len(stage.gpu_types) > 1 or bool(stage.gpu_options)
    report: Obj = {
        "pipeline": stage.pipeline,
        "stage": stage.name,
        "type": str(stage.type),
        "class": str(stage.workload_class),
        "gpuType": list(stage.gpu_types) if len(stage.gpu_types) > 1 else (stage.gpu_types or (None,))[0],
        **({"throughput": stage.throughput} if stage.throughput is not None else {}),
        # asking for throughput: GPUs per replica on each type it may run on (its options)
        "gpusPerReplica": {o.gpu_type: o.gpus for o in stage.gpu_options} if stage.gpu_options else stage.gpus,
        "replicas": stage.replicas,
        "clusters": [{"name": a.cluster, "replicas": a.replicas, "gpus": a.gpus} for a in placement.assignments],
        "score": round(placement.score, 6),
    }
    if slots_per_gpu:
        report["timeSlicing"] = {"slotsPerGPU": slots_per_gpu}
        report["clusters"] = [{"name": a.cluster, "replicas": a.replicas, "slots": a.gpus,
                               "gpus": shared_gpus(a.gpus, slots_on[a.cluster])} for a in placement.assignments]
    if alternatives:
        for entry in report["clusters"]:
            entry["gpuType"] = gpu_types.get(entry["name"])
            option = next((o for o in stage.gpu_options if o.gpu_type == entry["gpuType"]), None)
            if option is not None:
                entry["gpusPerReplica"] = option.gpus
    if choice is not None:
        report["gpuChoice"] = {"chosen": list(choice.chosen),
                               **({"alternative": choice.alternative} if choice.alternative else {}),
                               "passed": [{"gpuType": p.gpu_type, "why": p.why} for p in choice.passed]}
    if not placement.assignments:
        report["unplaced"] = True
        if placement.reason:
            report["reason"] = placement.reason
    return report


def shared_gpus(slots: int, slots_per_gpu: int) -> int | float:
    """The GPUs ``slots`` time-sliced slots take: whole when they fill whole GPUs, else the
    fraction rounded to 1/1000 (placement.yaml, the diff and the cost figures read the same)."""
    gpus = slots / slots_per_gpu
    return int(gpus) if gpus.is_integer() else round(gpus, 3)
