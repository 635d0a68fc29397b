"""What the semantic checks share: the limits of a quantity, a quantity checked against them,
and a value described as a message shows it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from fleetc.credentials import looks_like
from fleetc.errors import Diagnostic
from fleetc.policy.load import Document, FieldPath

#: Quantities beyond these are typos, not clusters (and would overflow the solver's numbers).
MAX_CPU_MILLIS = 10**9  # one million cores


MAX_MEMORY_BYTES = 2**60  # 1Ei


MAX_GPU_COUNT = 1_000_000


BOOLEAN_ATTRIBUTES = ("low-latency", "edge-node", "low-power", "device-plugin-configured")


NETWORK_TIERS = ("high-performance", "standard", "low")


_TYPE_NAMES = {
    "integer": "an integer", "number": "a number", "string": "a string",
    "boolean": "a boolean (true or false)", "object": "a mapping", "array": "a list",
    "null": "null",
}


def describe(value: Any) -> str:
    """How a value reads in a message: strings quoted, unless shaped like a credential (never
    shown: a message reaches CI logs), containers by their kind."""
    if isinstance(value, str):
        if what := looks_like(value):
            return f"a value that looks like a credential ({what}; not shown)"
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def quantity_check(doc: Document, path: FieldPath, value: Any, convert: Any,
                    limit: int) -> Iterator[Diagnostic]:
    if value is None:
        return
    try:
        amount = _amount(convert, value)
    except ValueError:
        yield doc.diagnostic(path, f"expected a finite, non-negative quantity, got "
                                   f"{describe(value)}")
        return
    if amount > limit:
        yield doc.diagnostic(path, f"quantity {describe(value)} is out of range")
    elif amount == 0:
        yield doc.diagnostic(path, f"expected a positive quantity, got {describe(value)}")


@functools.lru_cache(maxsize=4096, typed=True)
def _amount(convert: Callable[[Any], int], value: Any) -> int:
    """``convert(value)``, remembered: a large fleet repeats the same few quantities."""
    return convert(value)
