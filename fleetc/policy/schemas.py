"""JSON Schemas of the policy kinds, generated from :mod:`fleetc.policy.kinds`.

The pydantic models are the source of truth; ``schemas/*.json`` in the repository is the copy
editors and other tools read. Regenerate it with ``python -m fleetc.policy.schemas`` (a test fails
when the committed copy is stale).

Generation post-processes pydantic's output so the schema says what a user may write: an
optional field may be left out but not set to null, and pydantic's automatic titles go.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from fleetc.policy.kinds import KINDS

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE_URI = "https://fleetc.dev/schemas/"


def schema_filename(kind: str) -> str:
    return f"{kind.lower()}.json"


@functools.cache
def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema of one policy kind."""
    model = KINDS[kind]
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _clean(raw, top=True)
    return {
        "$schema": DIALECT,
        "$id": SCHEMA_BASE_URI + schema_filename(kind),
        "title": kind,
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _clean(node: Any, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    branches = node.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(branches):
            merged = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept[0]}
            return _clean(merged, top)
    cleaned = {}
    for key, value in node.items():
        if key == "title" and not top:
            continue
        if key == "default" and value is None:
            continue
        if key in ("properties", "$defs"):
            cleaned[key] = {name: _clean(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _clean(value)
    return cleaned


def render_schemas() -> dict[str, str]:
    """File name -> text of every schema, exactly as committed under ``schemas/``."""
    return {
        schema_filename(kind): json.dumps(schema_for(kind), indent=2, sort_keys=False) + "\n"
        for kind in sorted(KINDS)
    }


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else Path("schemas")
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render_schemas().items():
        (target / name).write_text(text, encoding="utf-8")
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
