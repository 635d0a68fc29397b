"""The committed ``schemas/`` stay what the pydantic models generate, and are usable by editors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from fleetc.policy.kinds import KINDS
from fleetc.policy.schemas import render_schemas, schema_filename

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
SHARED_SEED = ROOT.parent / "shared" / "seed-examples"
SEED_COPY = Path(__file__).parent / "seed"


def test_committed_schemas_are_current() -> None:
    generated = render_schemas()
    committed = {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.json")}
    stale = sorted(name for name in generated.keys() | committed.keys()
                   if generated.get(name) != committed.get(name))
    assert not stale, f"schemas/ is stale ({', '.join(stale)}): run `python -m fleetc.policy.schemas`"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_is_valid_draft_2020_12(kind: str) -> None:
    schema = json.loads((SCHEMAS / schema_filename(kind)).read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def _properties(node: object, path: str = "") -> list[tuple[str, dict]]:
    """Every (path, schema) of a named property anywhere in a schema."""
    found: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            found.append((f"{path}.{name}", sub))
        for key, value in node.items():
            found += _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for item in node:
            found += _properties(item, path)
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_field_is_described(kind: str) -> None:
    schema = json.loads((SCHEMAS / schema_filename(kind)).read_text(encoding="utf-8"))
    undescribed = [path for path, sub in _properties(schema) if not sub.get("description")]
    assert not undescribed


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_objects_refuse_unknown_fields(kind: str) -> None:
    schema = json.loads((SCHEMAS / schema_filename(kind)).read_text(encoding="utf-8"))
    objects = [sub for sub in [schema, *schema.get("$defs", {}).values()] if "properties" in sub]
    assert objects and all(sub.get("additionalProperties") is False for sub in objects)


def test_bundled_policies_point_editors_at_the_schemas() -> None:
    for policy in sorted((ROOT / "policies").glob("*.yaml")):
        first = policy.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema=../schemas/"), policy.name
        target = first.split("$schema=", 1)[1]
        assert (policy.parent / target).is_file(), f"{policy.name} points at missing {target}"


def test_seed_copies_match_the_shared_originals() -> None:
    """tests/seed/ is a verbatim copy, so the suite runs where ../shared is absent."""
    if not SHARED_SEED.is_dir():
        import os
        reason = "../shared/seed-examples not found: cannot compare the copy with the originals"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    originals = {p.name: p.read_bytes() for p in SHARED_SEED.glob("*.yaml")}
    copies = {p.name: p.read_bytes() for p in SEED_COPY.glob("*.yaml")}
    assert copies == originals
