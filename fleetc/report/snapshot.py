"""One side of a review: a compile (or a committed output folder) reduced to what the report
compares: its rendered files, where each stage runs, the GPUs and cost per hour per cluster,
and the facts of :mod:`fleetc.report.review`.

Pure: a :class:`Snapshot` is built from a compile's model, placement and files, or from a
rendered tree alone (its ``placement.yaml``, read by :mod:`fleetc.state.placementfile`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetc.model import DEFAULT_COST_INCREASE, FleetModel, Placement
from fleetc.placement.alternatives import choices, describe
from fleetc.placement.rules import FleetUsage, GPUTally, time_sliced_unit
from fleetc.report.review import CapFacts, StageFacts, cap_facts, short_serving, stage_facts
from fleetc.state.placementfile import stage_entries


@dataclass(frozen=True)
class Snapshot:
    """One side of a comparison: the rendered files and what was placed where."""

    files: Mapping[str, str] = field(default_factory=dict)  # path under the output folder -> text
    stages: Mapping[str, frozenset[str]] = field(default_factory=dict)  # stage key -> clusters
    gpus: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # cluster -> type -> GPUs
    cost: Mapping[str, float] | None = field(default_factory=dict)  # cluster -> per hour; None: unknown
    #: Stage key -> the GPU alternative it got and why no earlier one (stages listing several).
    gpu_choices: Mapping[str, str] = field(default_factory=dict)
    #: "team <name>" or "pipeline <name>" (a pipeline with its own cost cap, or in no team) -> its
    #: GPUs, cost per hour and limits (:func:`fleetc.report.review.cap_facts`); None: unknown (a tree
    #: read without its policies)
    teams: Mapping[str, CapFacts] | None = field(default_factory=dict)
    #: Stage key -> how it runs (:func:`fleetc.report.review.stage_facts`); empty for a tree read
    #: without its policies.
    facts: Mapping[str, StageFacts] = field(default_factory=dict)
    #: Cluster -> "drained" or "cordoned", for the clusters that take no work.
    idle: Mapping[str, str] = field(default_factory=dict)
    #: Why serving runs below its replicas or HA set (:func:`fleetc.report.review.short_serving`).
    serving: tuple[str, ...] = ()
    #: The rise of the fleet's cost per hour above which the review calls it a danger (a fraction).
    cost_limit: float = DEFAULT_COST_INCREASE


EMPTY = Snapshot()


def snapshot(model: FleetModel, placement: Placement, files: Mapping[str, str]) -> Snapshot:
    """A compile reduced to what the report compares: the GPUs each cluster gives over and its
    cost per hour as the ledger counts them (:class:`fleetc.placement.rules.FleetUsage`)."""
    usage = FleetUsage(model, placement)
    where = {p.stage: frozenset(a.cluster for a in p.assignments if a.replicas > 0) for p in placement.stages}
    gpu_choices = {key: choice.text for key, choice in choices(model, placement).items()}
    idle = {c.name: "drained" if c.drained else "cordoned" for c in model.clusters if c.cordoned}
    return Snapshot(dict(files), where, usage.gpus(), usage.cost_per_hour(), gpu_choices, cap_facts(model, placement),
                    stage_facts(model, placement, files), idle, short_serving(model, placement),
                    model.cost_increase_limit)


def time_sliced_units(model: FleetModel) -> dict[str, int]:
    """Cluster -> the GPUs it turns over to time-slicing at once (:func:`time_sliced_unit`)."""
    return {c.name: time_sliced_unit(c) for c in model.clusters}


def snapshot_of_output(files: Mapping[str, str], gpu_types: Mapping[str, str | None],
                       units: Mapping[str, int] | None = None) -> Snapshot:
    """A snapshot from a rendered tree alone (a committed out/), read from its placement.yaml.

    The tree does not record prices, so cost is unknown (None); a cluster's GPU type comes from
    ``gpu_types`` when known, else from the stage's requested type, and the GPUs its shared
    slots take from ``units`` (:func:`time_sliced_units`; one GPU at a time where not given).
    """
    report = stage_entries(files.get("placement.yaml", ""))
    where: dict[str, frozenset[str]] = {}
    gpu_choices: dict[str, str] = {}
    sliced = [s for e in report if isinstance(s := e.get("timeSlicing"), dict)]
    usage = GPUTally(max((_whole(s.get("slotsPerGPU")) for s in sliced), default=1), units or {})
    for entry in report:
        key = f"{entry.get('pipeline')}/{entry.get('stage')}"
        placed = [a for a in entry.get("clusters") or [] if isinstance(a, dict) and a.get("replicas")]
        where[key] = frozenset(str(a.get("name")) for a in placed)
        sliced_stage = isinstance(entry.get("timeSlicing"), dict)
        stated = entry.get("gpuType")
        for a in placed:
            name = str(a.get("name"))
            # its slots are whole GPUs where the cluster's device plugin is not configured
            shared = sliced_stage and a.get("gpus") != a.get("slots")
            usage.add(name, gpu_types.get(name) or _text(a.get("gpuType")) or _text(stated) or "gpu",
                      _whole(a.get("slots" if shared else "gpus")), shared=shared)
        choice = _gpu_choice(entry)
        if choice:
            gpu_choices[key] = choice
    return Snapshot(dict(files), where, usage.gpus(), None, gpu_choices, None)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _gpu_choice(entry: Mapping[str, Any]) -> str:
    """The line of a placement.yaml entry's ``gpuChoice`` ('' when it has none, or not as
    fleetc writes it)."""
    choice, listed, counts = entry.get("gpuChoice"), entry.get("gpuType"), entry.get("gpusPerReplica")
    per_replica = {str(t): _whole(n) for t, n in counts.items()} if isinstance(counts, dict) else {}
    listed = listed if isinstance(listed, list) else list(per_replica)
    if not isinstance(choice, dict):
        return ""
    chosen, passed = choice.get("chosen"), choice.get("passed")
    if not isinstance(chosen, list) or not isinstance(passed, list):
        return ""
    return describe([_text(t) for t in chosen], _whole(choice.get("alternative")), [_text(t) for t in listed],
                    [(_text(p.get("gpuType")), _text(p.get("why"))) for p in passed if isinstance(p, dict)],
                    per_replica)


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
