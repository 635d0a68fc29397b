"""The schema pass of :mod:`.validate`: each document alone against its kind's JSON Schema (the
one committed under ``schemas/``), each schema error turned into a compiler-style diagnostic; a
compiled fast check first, jsonschema only for the documents that fail it."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fleetc.errors import Diagnostic, did_you_mean
from fleetc.policy import kinds as p
from fleetc.policy.checking import _TYPE_NAMES, describe
from fleetc.policy.load import Document, FieldPath
from fleetc.policy.schemas import schema_for

if TYPE_CHECKING:  # jsonschema words the diagnostics of invalid documents: imported for those only
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError as SchemaError


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator  # ~35 ms of import that valid documents never need
    from jsonschema.validators import extend

    full_match = extend(Draft202012Validator, {"pattern": _full_pattern})  # type: ignore[no-untyped-call]
    return full_match(schema_for(kind))  # type: ignore[no-any-return]


def _full_pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[SchemaError]:
    """The ``pattern`` keyword with the whole string matched: the schemas' patterns end in
    ``$``, which in Python also matches before a final newline (``'c2\\n'`` would pass as a
    name, as it does not in jsonschema-rs and in ECMA-262 regular expressions)."""
    from jsonschema.exceptions import ValidationError as SchemaError

    if validator.is_type(instance, "string") and not anchored(pattern).search(instance):
        yield SchemaError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def anchored(pattern: str) -> re.Pattern[str]:
    """``pattern`` with a final ``$`` made ``\\Z`` (the end of the string, and only that)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@functools.cache
def _fast_validator(kind: str) -> Any:
    try:
        import jsonschema_rs
    except ImportError:  # pragma: no cover - a dependency; without it jsonschema does it all
        return None
    return jsonschema_rs.validator_for(schema_for(kind))


def _schema_valid(kind: str, data: Any) -> bool:
    """Whether ``data`` passes its kind's schema, by jsonschema-rs (about 40x faster than
    jsonschema). Only a document it rejects, or cannot read (integers beyond 64 bits), goes
    through jsonschema, whose errors the diagnostics are made of; where the two disagree on
    validity, jsonschema decides (its ``pattern`` is made a full match, as here)."""
    validator = _fast_validator(kind)
    if validator is None:
        return False
    try:
        return bool(validator.is_valid(data))
    except Exception:  # noqa: BLE001 - whatever it cannot read, jsonschema reads
        return False


def check_document(doc: Document, *, finite: bool) -> tuple[p.PolicyObject | None,
                                                             list[Diagnostic]]:
    """Schema and model check of one document; ``finite``: it holds no NaN nor infinity."""
    data = doc.data
    if not isinstance(data, dict):
        # A string is not shown: a document of one string may be a whole file's text (a file
        # that is no policy, named by pipeline=FILE or planted under a policy folder).
        return None, [doc.diagnostic((), f"expected a policy object (a mapping), got "
                                         f"{'a string' if isinstance(data, str) else describe(data)}")]
    kind_problem = _check_kind(doc, data)
    if kind_problem:
        return None, [kind_problem]
    kind = data["kind"]
    # JSON Schema's range checks are false for NaN, so they let it through: find it here.
    nan_paths = set() if finite else set(_nan_paths(data, ()))
    valid = not nan_paths and _schema_valid(kind, data)  # the fast check; errors come below
    errors = [] if valid else [e for e in _validator(kind).iter_errors(data)
                               if tuple(e.absolute_path) not in nan_paths]
    if errors or nan_paths:
        return None, [*(doc.diagnostic(path, "expected a number, got .nan (not a number)")
                        for path in sorted(nan_paths, key=str)),
                      *(d for e in errors for d in _translate(doc, e))]
    try:
        return p.KINDS[kind].model_validate(data), []
    except ValidationError as err:  # the schema and the models agree; this is a safety net
        return None, [doc.diagnostic(tuple(e["loc"]), e["msg"]) for e in err.errors()]


def _nan_paths(data: Any, path: FieldPath) -> Iterator[FieldPath]:
    if isinstance(data, float) and math.isnan(data):
        yield path
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _nan_paths(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _nan_paths(value, path + (i,))


def _check_kind(doc: Document, data: dict[str, Any]) -> Diagnostic | None:
    kind = data.get("kind")
    if kind is None:
        if set(data) == {"whatIf"}:  # fleetc's other YAML input, in the wrong folder
            return doc.diagnostic(("whatIf",), "a what-if scenario is not a policy", key=True,
                                  hint="keep scenario files out of the policy folders (e.g. in scenarios/) and "
                                       "run `fleetc diff --scenario FILE`")
        return doc.diagnostic(("kind",), "missing required field 'kind'",
                              hint=f"one of: {', '.join(sorted(p.KINDS))}")
    if not isinstance(kind, str) or kind not in p.KINDS:
        hint = did_you_mean(str(kind), p.KINDS) or f"fleetc reads: {', '.join(sorted(p.KINDS))}"
        return doc.diagnostic(("kind",), f"unknown kind {describe(kind)}", hint=hint)
    expected = p.api_version(kind)
    version = data.get("apiVersion")
    if version != expected:
        got = "nothing" if version is None else describe(version)
        return doc.diagnostic(("apiVersion",), f"expected '{expected}' for kind {kind}, got {got}")
    return None


def _expected(error: SchemaError) -> str:
    schema = error.schema if isinstance(error.schema, dict) else {}
    if p.EXPECTED in schema:
        return str(schema[p.EXPECTED])
    types = schema.get("type")
    if isinstance(types, list):
        return " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in types)
    return _TYPE_NAMES.get(str(types), str(types))


def _translate(doc: Document, error: SchemaError) -> Iterator[Diagnostic]:
    """One jsonschema error -> the diagnostics a user should read."""
    path: FieldPath = tuple(error.absolute_path)
    # JSON values, set on every error jsonschema reports (its types also allow "unset")
    value: Any = error.instance
    rule: Any = error.validator_value  # the failing keyword's value in the schema
    kind = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if kind == "additionalProperties":
        known = schema.get("properties", {})
        for key in sorted(set(value) - set(known)):
            hint = did_you_mean(key, known) or f"known fields: {', '.join(known)}"
            yield doc.diagnostic(path + (key,), f"unknown field '{key}'", hint=hint, key=True)
    elif kind == "required":
        for name in rule:
            if name not in value:
                yield doc.diagnostic(path + (name,), f"missing required field '{name}'")
    elif kind in ("type", "pattern", "maxLength", "minLength"):
        yield doc.diagnostic(path, f"expected {_expected(error)}, got {describe(value)}")
    elif kind == "enum":
        choices = ", ".join(f"'{c}'" for c in rule)
        yield doc.diagnostic(path, f"expected one of {choices}, got {describe(value)}",
                             hint=did_you_mean(str(value), map(str, rule)))
    elif kind == "const":
        yield doc.diagnostic(path, f"expected '{rule}', got {describe(value)}")
    elif kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        sign = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
                "exclusiveMaximum": "<"}[kind]
        noun = "an integer" if schema.get("type") == "integer" else "a number"
        yield doc.diagnostic(path, f"expected {noun} {sign} {rule}, got "
                                   f"{describe(value)}")
    elif kind == "minItems":
        yield doc.diagnostic(path, f"expected at least {rule} item(s), got "
                                   f"{len(value)}")
    elif kind == "maxItems":
        yield doc.diagnostic(path, f"expected at most {rule} item(s), got {len(value)}")
    else:
        yield doc.diagnostic(path, error.message)
