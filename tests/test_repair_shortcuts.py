"""The eviction repair's two shortcuts (colgen/repair.py) place what its general path places,
stage by stage: a left-out gang whose room depends on one cluster at a time is tried only on
the clusters a group is moved off (``freed_only``), and a group is re-placed only until one of
its stages has nowhere to go (:func:`_replaced`). Each fleet is placed on the large path with
and without them: full sovereign fleets (gangs left out, no cap, no headroom), team quotas
(caps: the general path) and active-active serving (failover headroom: the general path)."""

from __future__ import annotations

from typing import Any

import pytest
from test_scale import model_of

from bench.generate import Spec
from fleetc.placement import optimize
from fleetc.placement.colgen import repair

#: Each fleet, and whether a left-out gang takes the ``freed_only`` shortcut there.
FLEETS = [
    (Spec(clusters=8, stages=60, load=1.0, platform=True, sovereignty=True, seed=0), False),  # serving stages
    (Spec(clusters=20, stages=200, load=1.0, platform=True, sovereignty=True, seed=0), True),
    (Spec(clusters=20, stages=200, load=0.9, platform=True, sovereignty=True, seed=3), True),
    (Spec(clusters=12, stages=120, load=1.0, platform=True, quotas=0.8, budget=0.9, seed=1), False),
    (Spec(clusters=20, stages=200, load=1.0, platform=True, ha=True, seed=1), False),
]


def _every_plan(group: list[int], c: int, plan_of: Any) -> list[dict[int, int]] | None:
    """The general path of :func:`repair._replaced`: every stage of the group tried."""
    plans = [plan_of(resident, avoid=c) for resident in group]
    return plans if all(plans) else None


@pytest.mark.first_row_fast
@pytest.mark.parametrize(("spec", "gang_shortcut"), FLEETS, ids=[f"fleet{i}" for i in range(len(FLEETS))])
def test_the_repair_shortcuts_place_as_its_general_path(spec: Spec, gang_shortcut: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(spec)
    shortcuts: list[bool] = []
    evict = repair._evict

    def recorded(*args: Any, freed_only: bool) -> tuple[dict[int, int], int]:
        shortcuts.append(freed_only)
        return evict(*args, freed_only=freed_only)

    monkeypatch.setattr(repair, "_evict", recorded)
    fast = optimize.place(model, allow_unplaced=True, large=0)
    monkeypatch.setattr(repair, "_uncoupled", lambda *_: False)
    monkeypatch.setattr(repair, "_replaced", _every_plan)
    slow = optimize.place(model, allow_unplaced=True, large=0)
    assert fast.stages == slow.stages
    assert (fast.objective, fast.bound) == (slow.objective, slow.bound)
    assert shortcuts  # the eviction repair ran
    assert any(shortcuts) == gang_shortcut
