"""``fleetc diff --what-if`` and ``--scenario``: the placement now against the placement in a
scenario: the comparison, the stages the scenario leaves out, the fleet's cost and its
headroom per GPU type."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from fleetc.model import FleetModel
from fleetc.placement import rules
from fleetc.report.compare import Headroom, WhatIf, compare
from fleetc.report.figures import counted, money
from fleetc.report.snapshot import Snapshot


def capacity(model: FleetModel) -> dict[str, int]:
    """GPUs per type fleetc may use on the clusters that take work (not cordoned or drained):
    their usable GPUs (:func:`fleetc.placement.rules.usable_capacity`: what ``utilization`` and
    the GPU policy's ``defragmentThreshold`` leave), so free GPUs are GPUs a stage could get."""
    found: dict[str, int] = defaultdict(int)
    for c in model.clusters:
        if c.gpu_type and not c.cordoned:
            found[c.gpu_type] += rules.usable_capacity(model, c)[0]
    return dict(found)


def what_if(now: Snapshot, scenario: Snapshot, capacities: tuple[Mapping[str, int], Mapping[str, int]],
            unplaced: Sequence[tuple[str, str]], label: str, out: str = "out", *, source: str = "",
            settings: Sequence[str] = ()) -> WhatIf:
    """The comparison, the stages the scenario leaves out, the fleet's cost and its headroom;
    ``capacities``: :func:`capacity` now and in the scenario; ``source``: the scenario file."""
    report = compare(now, scenario, base_label="now", head_label=label, out=out)
    taken = [_taken(side) for side in (now, scenario)]
    types = sorted(set(capacities[0]) | set(capacities[1]) | set(taken[0]) | set(taken[1]))
    headroom = tuple(Headroom(t, (capacities[0].get(t, 0), capacities[1].get(t, 0)),
                              (capacities[0].get(t, 0) - taken[0].get(t, 0),
                               capacities[1].get(t, 0) - taken[1].get(t, 0))) for t in types)
    cost = (sum((now.cost or {}).values()), sum((scenario.cost or {}).values()))
    return WhatIf(report, tuple(sorted(unplaced)), cost, headroom, source, tuple(settings))


def _taken(side: Snapshot) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    for per_type in side.gpus.values():
        for gpu_type, n in per_type.items():
            found[gpu_type] += n
    return dict(found)


def what_if_lines(w: WhatIf) -> list[str]:
    lines = [f"unplaced in the scenario: {counted(len(w.unplaced), 'stage')}"]
    lines += [f"  {stage}: {why}" for stage, why in w.unplaced]
    before, after = w.cost
    lines.append(f"cost/h: {money(before)} -> {money(after)} ({after - before:+,.2f})")
    lines.append("headroom (free / capacity GPUs): " + ("; ".join(
        f"{h.gpu_type} {h.free[0]}/{h.capacity[0]} -> {h.free[1]}/{h.capacity[1]}" for h in w.headroom) or "none"))
    return lines


def scenario_lines(w: WhatIf, shown: int | None = None) -> list[str]:
    """One scenario below a diff: its title, the stages that move (at most ``shown`` of each
    list, the rest counted), then :func:`what_if_lines`."""
    title = f"{w.source}: {w.report.head}" if w.source else w.report.head
    lines = [title, f"stages moved in the scenario: {counted(len(w.report.moves), 'stage')}"]
    lines += _capped([f"  {m.stage}: {', '.join(m.before) or '(none)'} -> {', '.join(m.after) or '(none)'}"
                      for m in w.report.moves], shown)
    found = what_if_lines(w)
    return lines + found[:1] + _capped(found[1:len(w.unplaced) + 1], shown) + found[len(w.unplaced) + 1:]


def _capped(lines: list[str], shown: int | None) -> list[str]:
    if shown is None or len(lines) <= shown:
        return lines
    return [*lines[:shown], f"  ... and {len(lines) - shown} more"]


def what_if_facts(w: WhatIf) -> dict[str, Any]:
    return {
        "settings": list(w.settings),
        "unplaced": [{"stage": stage, "reason": why} for stage, why in w.unplaced],
        "costPerHour": {"before": round(w.cost[0], 4), "after": round(w.cost[1], 4)},
        "headroom": {h.gpu_type: {"capacity": {"before": h.capacity[0], "after": h.capacity[1]},
                                  "free": {"before": h.free[0], "after": h.free[1]}} for h in w.headroom},
    }
