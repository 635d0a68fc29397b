"""Hints for refusals: what a user writes, and where, to admit a stage a taint keeps out.

Kept apart from the solver: it reads the model and the filters' verdicts only.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetc.model import FleetModel, Taint, untolerated
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
