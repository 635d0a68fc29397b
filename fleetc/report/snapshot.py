"""One side of a review: a compile (or a committed output folder) reduced to what the report
compares: its rendered files, where each stage runs, the GPUs and cost per hour per cluster,
and the facts of :mod:`fleetc.report.review`.

Pure: a :class:`Snapshot` is built from a compile's model, placement and files, or from a
rendered tree alone (its ``placement.yaml``, read by :mod:`fleetc.state.placementfile`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetc.model import DEFAULT_COST_INCREASE, FleetModel, Placement
from fleetc.placement.alternatives import choices, describe
from fleetc.placement.rules import slots_on, slots_per_gpu, time_sliced_gpus, time_sliced_unit, uses_shared_slots
from fleetc.report.review import CapFacts, StageFacts, cap_facts, short_serving, stage_facts
from fleetc.state.placementfile import stage_entries

_GIB = 1024**3


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
    """A compile reduced to what the report compares.

    GPUs are the GPUs taken: a time-sliced stage's slots count ``1 / slots_per_gpu`` of a GPU
    each, and a cluster's shared slots take whole time-sliced units of GPUs, whole nodes where
    its device plugin is configured (:func:`fleetc.placement.rules.time_sliced_gpus`, as the
    placement rule and the verifier count them; a whole GPU each where its device plugin is not
    configured). Cost per hour of a cluster is its prices times what is placed on it:
    GPUs taken x GPU-hour cost + cores x core-hour cost + GiB x GiB-hour cost.
    """
    clusters = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    usage = _Usage(slots_per_gpu(model), time_sliced_units(model))
    cost: dict[str, float] = defaultdict(float)
    where: dict[str, frozenset[str]] = {}
    for p in placement.stages:
        stage = stages[p.stage]
        placed = [a for a in p.assignments if a.replicas > 0]
        where[p.stage] = frozenset(a.cluster for a in placed)
        for a in placed:
            cluster = clusters[a.cluster]
            usage.add(a.cluster, cluster.gpu_type or "gpu", a.gpus,
                      shared=uses_shared_slots(model, stage) and slots_on(model, cluster) > 1)
            cost[a.cluster] += (a.replicas * stage.cpu_millis / 1000 * cluster.cpu_hour_cost
                                + a.replicas * stage.memory_bytes / _GIB * cluster.memory_gib_hour_cost)
    gpus = usage.gpus()
    for name, per_type in gpus.items():
        cost[name] += sum(per_type.values()) * clusters[name].gpu_hour_cost
    gpu_choices = {key: choice.text for key, choice in choices(model, placement).items()}
    idle = {c.name: "drained" if c.drained else "cordoned" for c in model.clusters if c.cordoned}
    return Snapshot(dict(files), where, gpus, dict(cost), gpu_choices, cap_facts(model, placement),
                    stage_facts(model, placement, files), idle, short_serving(model, placement),
                    model.cost_increase_limit)


def time_sliced_units(model: FleetModel) -> dict[str, int]:
    """Cluster -> the GPUs it turns over to time-slicing at once (:func:`time_sliced_unit`)."""
    return {c.name: time_sliced_unit(c) for c in model.clusters}


class _Usage:
    """GPUs taken per cluster and type: exclusive GPUs plus the time-sliced units the slots take
    (``units``: cluster -> GPUs per unit; one GPU where not given)."""

    def __init__(self, slots_per_gpu: int, units: Mapping[str, int]) -> None:
        self.slots_per_gpu = max(1, slots_per_gpu)
        self.units = units
        self.exclusive: dict[tuple[str, str], int] = defaultdict(int)
        self.slots: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, cluster: str, gpu_type: str, count: int, *, shared: bool) -> None:
        if count:
            (self.slots if shared else self.exclusive)[(cluster, gpu_type)] += count

    def gpus(self) -> dict[str, dict[str, int]]:
        taken: dict[str, dict[str, int]] = defaultdict(dict)
        for key in sorted(set(self.exclusive) | set(self.slots)):
            taken[key[0]][key[1]] = self.exclusive[key] + time_sliced_gpus(self.slots[key], self.slots_per_gpu,
                                                                            self.units.get(key[0], 1))
        return dict(taken)


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
    usage = _Usage(max((_whole(s.get("slotsPerGPU")) for s in sliced), default=1), units or {})
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
