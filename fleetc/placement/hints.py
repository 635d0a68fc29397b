"""Hints for refusals: what a user writes, and where, to admit a stage a taint keeps out.

Kept apart from the solver: it reads the model and the filters' verdicts only.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetc.model import FleetModel, Taint, untolerated
from fleetc.placement.rules import slots_per_gpu, usable_capacity, uses_shared_slots
from fleetc.placement.scoring import filter_reason


def taint_hints(model: FleetModel, stage_keys: Iterable[str]) -> list[str]:
    """One hint per (stage, taint) that alone keeps one of ``stage_keys`` off a cluster: the
    toleration that would admit it, under the stage's ``tolerations`` or, for every stage, the
    Fleet's ``placement.clusterTolerations``."""
    wanted = set(stage_keys)
    hints = []
    for stage in model.stages:
        if stage.key not in wanted:
            continue
        taints: dict[Taint, str] = {}
        for cluster in model.clusters:
            if filter_reason(stage, cluster).startswith("untolerated taint"):
                for taint in untolerated(cluster.taints, stage.tolerations):
                    taints.setdefault(taint, model.display(cluster.source.path))
        for taint, fleet_file in sorted(taints.items(), key=lambda item: (item[0].key, item[0].value)):
            hints.append(
                f"{stage.key}: the toleration {toleration_yaml(taint)} admits it to clusters tainted "
                f"{taint.key}={taint.value}:{taint.effect}; write it under {stage.source.field}.tolerations "
                f"in {model.display(stage.source.path)} (this stage), or under spec.placement.clusterTolerations in "
                f"{fleet_file} (every stage)")
    return hints


def toleration_yaml(taint: Taint) -> str:
    """The toleration for exactly ``taint``, in YAML flow style."""
    value = f", value: {taint.value}" if taint.value else ""
    operator = "Equal" if taint.value else "Exists"
    return f"{{key: {taint.key}, operator: {operator}{value}, effect: {taint.effect}}}"


def refused_stages(model: FleetModel, reasons: Iterable[str]) -> list[str]:
    """The keys of the stages ``reasons`` (a placement error's lines) refuse."""
    text = "\n".join(reasons)
    return [s.key for s in model.stages if f"{s.key}:" in text]


def capacity_hints(model: FleetModel) -> list[str]:
    """The policy fields behind the capacity figures a refusal prints: per GPU cluster whose
    usable GPUs (:func:`~fleetc.placement.rules.usable_capacity`) are fewer than it has, the
    GPU policy's defragmentation headroom and the cluster's utilisation; and the time-slicing
    slots that let a shared GPU count as a fraction where the device plugin is configured."""
    policy = model.gpu_policy
    hints = []
    for cluster in model.clusters:
        usable = usable_capacity(model, cluster)[0]
        if not cluster.gpus or usable == cluster.gpus:
            continue
        why = []
        if policy is not None and policy.defragment_threshold is not None:
            why.append(f"the GPU policy keeps {1 - policy.defragment_threshold:.0%} free "
                       f"(spec.memoryManagement.defragmentThreshold {policy.defragment_threshold:.0%} "
                       f"in {model.display(policy.source.path)})")
        if cluster.utilization:
            why.append(f"{cluster.utilization:.0%} is used by work fleetc does not place "
                       f"({cluster.source.field}.utilization in {model.display(cluster.source.path)})")
        hints.append(f"{cluster.name} counts {usable} of its {cluster.gpus} {cluster.gpu_type} GPUs as "
                     f"capacity: {' and '.join(why)}")
    slots = slots_per_gpu(model)
    if policy is not None and slots > 1 and any(uses_shared_slots(model, s) for s in model.stages):
        field = ("spec.sharingStrategy.maxSharers" if policy.sharing_enabled and policy.max_sharers == slots
                 else "spec.timeSlicing.replicas")
        where = f"({field} {slots} in {model.display(policy.source.path)})"
        if any(c.gpus and c.device_plugin_configured for c in model.clusters):
            hints.append(f"stages that accept shared GPUs take 1/{slots} of a GPU per requested GPU {where} "
                         "where the cluster's device plugin is configured (attribute device-plugin-configured), "
                         "a whole GPU elsewhere")
        else:
            hints.append("stages that accept shared GPUs take a whole GPU per requested GPU: no cluster's device "
                         "plugin is configured for time-slicing (attribute device-plugin-configured), which would "
                         f"share each GPU {slots} ways {where}")
    return hints
