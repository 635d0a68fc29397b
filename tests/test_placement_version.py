"""``PLACEMENT_VERSION`` is bumped whenever placements change.

The version is part of every ``placement.yaml``'s ``inputs:`` digest: a compile of unchanged
inputs gives the previous placement back without solving, so a change to how fleetc places that
keeps the version would leave every committed ``out/`` holding placements the new fleetc would
not make. ``tests/placement_fingerprints.json`` records, for the current version, a fingerprint
of the placements of the bundled example, the golden cases and a few generated fleets (both
paths). When placements change, bump the version in ``fleetc/placement/__init__.py`` and record
again with ``FLEETC_UPDATE_GOLDEN=1``; recording refuses changed placements under the old
version. A new golden case needs no bump: it is compared once recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from test_scale import model_of

from bench.generate import Spec
from fleetc.compiler import load_policies
from fleetc.model import FleetModel, Placement
from fleetc.placement import PLACEMENT_VERSION, optimize
from fleetc.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).parent / "placement_fingerprints.json"
UPDATE = os.environ.get("FLEETC_UPDATE_GOLDEN") == "1"

#: Generated fleets: the exact path, the large path (forced and natural), full, platform,
#: ``--diverse`` and sovereign fleets.
GENERATED = {
    "generated-10x60": (Spec(clusters=10, stages=60, load=0.9), None),
    "generated-12x80-full": (Spec(clusters=12, stages=80, load=1.0, seed=2), None),
    "generated-10x60-platform": (Spec(clusters=10, stages=60, load=0.8, platform=True, seed=1), None),
    "generated-20x300-large": (Spec(clusters=20, stages=300, load=0.9), 0),
    "generated-20x200-full-large": (Spec(clusters=20, stages=200, load=1.0, seed=1), 0),
    # stages that all differ: the LP over stages by column generation
    "generated-20x300-diverse-large": (Spec(clusters=20, stages=300, load=0.9, diverse=True), 0),
    # GPU and CPU pods packed together where the search runs out: the packing MILP decides
    "generated-50x800-diverse-large": (Spec(clusters=50, stages=800, load=0.9, diverse=True), 0),
    # a sovereign platform: closed neighbourhoods and their most-valuable MILPs
    "generated-30x400-sovereign-large": (Spec(clusters=30, stages=400, load=1.0, platform=True, sovereignty=True,
                                              seed=2), 0),
}


def fingerprint(placement: Placement) -> str:
    """Where every stage runs (clusters and replicas, or left out), hashed."""
    where = [[p.stage, [[a.cluster, a.replicas] for a in p.assignments]] for p in placement.stages]
    return hashlib.sha256(json.dumps(where).encode()).hexdigest()


def policy_models() -> dict[str, FleetModel]:
    """The bundled example and every golden case that compiles."""
    folders = {"bundled": ROOT / "policies"}
    folders |= {f"case-{p.name}": p / "policies" for p in sorted((Path(__file__).parent / "cases").iterdir())
                if (p / "expected").is_dir()}
    models = {}
    for name, folder in folders.items():
        loaded = load_policies([folder.as_posix()], workdir=folder.parent)
        models[name] = resolve(loaded.policies, loaded.where)
    return models


def fingerprints() -> dict[str, str]:
    found = {name: fingerprint(optimize.place(model)) for name, model in policy_models().items()}
    for name, (spec, large) in GENERATED.items():
        found[name] = fingerprint(optimize.place(model_of(spec), large=large, allow_unplaced=True))
    return found


@pytest.mark.slow
def test_placements_change_only_with_a_new_placement_version() -> None:
    found = fingerprints()
    recorded = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    same_version = recorded.get("version") == PLACEMENT_VERSION
    before = recorded.get("placements", {})
    # A golden case added or removed changes no placement: only those recorded and found count.
    changed = sorted(name for name in found.keys() & before.keys() if found[name] != before[name])
    if UPDATE and not (same_version and changed):
        RECORD.write_text(json.dumps({"version": PLACEMENT_VERSION, "placements": found}, indent=2,
                                     sort_keys=True) + "\n", encoding="utf-8")
        return
    assert same_version, (f"PLACEMENT_VERSION is {PLACEMENT_VERSION!r}, the placements were recorded under "
                          f"{recorded.get('version')!r}: record them with FLEETC_UPDATE_GOLDEN=1")
    assert not changed, (f"placements changed ({', '.join(changed)}) but PLACEMENT_VERSION is still "
                         f"{PLACEMENT_VERSION!r}: bump it in fleetc/placement/__init__.py, then record "
                         "with FLEETC_UPDATE_GOLDEN=1")
