"""``RENDER_VERSION`` is bumped whenever what fleetc renders for a placement changes.

The version is part of every cluster folder's inputs digest in ``.fleetc/render``
(:mod:`fleetc.render.record`): a compile keeps the folders whose digest did not change, so a
change to the renderer that keeps the version would leave every kept folder as the old fleetc
rendered it. ``tests/render_fingerprints.json`` records, for the current version, a fingerprint
of the cluster folders rendered for the bundled example, the golden cases and a generated fleet
with markers, data and teams, beside the fingerprint of their placement. A folder that changes
while its placement did not needs a bump: bump the version in ``fleetc/render/record.py`` and
record again with ``FLEETC_UPDATE_GOLDEN=1``; recording refuses changed folders under the old
version. (A placement that changes changes its folders' digests by itself: no bump.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from support.corpus import CASES, GOLDEN, ROOT
from test_placement_version import fingerprint

from bench.generate import Spec, generate
from fleetc.compiler import Options, compile_policies, load_policies
from fleetc.render.record import RENDER_VERSION

RECORD = Path(__file__).parent / "render_fingerprints.json"
UPDATE = os.environ.get("FLEETC_UPDATE_GOLDEN") == "1"
GENERATED = Spec(clusters=6, stages=40, load=0.8, platform=True, quotas=0.5, seed=3)


def folders_fingerprint(files: dict[str, str]) -> str:
    """Every cluster folder's files, hashed."""
    layers = sorted((path, text) for path, text in files.items() if path.startswith("clusters/"))
    return hashlib.sha256(json.dumps(layers).encode()).hexdigest()


def fingerprints(tmp_path: Path) -> dict[str, list[str]]:
    folders = {"bundled": ROOT / "policies"} | {f"case-{name}": CASES / name / "policies" for name in GOLDEN}
    folders["generated"] = generate(GENERATED).write(tmp_path / "policies")
    found = {}
    for name, folder in folders.items():
        compiled = compile_policies(load_policies([folder.name], workdir=folder.parent), Options(allow_unplaced=True))
        found[name] = [fingerprint(compiled.placement), folders_fingerprint(dict(compiled.files))]
    return found


@pytest.mark.slow
def test_rendered_folders_change_only_with_a_new_render_version(tmp_path: Path) -> None:
    found = fingerprints(tmp_path)
    recorded = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    same_version = recorded.get("version") == RENDER_VERSION
    before = recorded.get("folders", {})
    # a changed placement changes its folders' digests, and with them what is kept: no bump
    changed = sorted(name for name in found.keys() & before.keys()
                     if found[name][0] == before[name][0] and found[name][1] != before[name][1])
    if UPDATE and not (same_version and changed):
        RECORD.write_text(json.dumps({"version": RENDER_VERSION, "folders": found}, indent=2, sort_keys=True)
                          + "\n", encoding="utf-8")
        return
    assert same_version, (f"RENDER_VERSION is {RENDER_VERSION!r}, the folders were recorded under "
                          f"{recorded.get('version')!r}: record them with FLEETC_UPDATE_GOLDEN=1")
    assert not changed, (f"rendered folders changed ({', '.join(changed)}) but RENDER_VERSION is still "
                         f"{RENDER_VERSION!r}: bump it in fleetc/render/record.py, then record with "
                         "FLEETC_UPDATE_GOLDEN=1")
