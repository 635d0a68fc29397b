"""Kubernetes quantities (``64Gi``, ``500m``, ``16``) and percentages, as exact numbers."""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_SUFFIXES: dict[str, int | Fraction] = {
    "": 1, "m": Fraction(1, 1000),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")
_PERCENTAGE = re.compile(r"^[0-9]+(?:\.[0-9]+)?%$")

GIB = 2**30


def parse_quantity(value: int | float | str) -> Fraction:
    """The exact value of a quantity; raises ValueError for anything else."""
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"not a quantity: {value!r}")
        return Fraction(Decimal(repr(value))) if isinstance(value, float) else Fraction(value)
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Fraction(Decimal(match.group(1)))
    except InvalidOperation as err:  # pragma: no cover - the pattern already excludes it
        raise ValueError(f"not a quantity: {value!r}") from err
    return number * _SUFFIXES[match.group(2) or ""]


#: Quantities read so far -> their figure: a large fleet's 20,000 stages say ``4`` and ``32Gi``
#: over and over, and exact arithmetic on fractions is slow (typed: ``1`` and ``1.0`` and
#: ``True`` are different values to parse).
_cached = functools.lru_cache(maxsize=4096, typed=True)


@_cached
def cpu_millis(value: int | float | str) -> int:
    """CPU cores -> millicores, rounded up as the kubelet does."""
    return -(-parse_quantity(value) * 1000 // 1)


@_cached
def memory_bytes(value: int | float | str) -> int:
    """A memory quantity -> bytes, rounded up."""
    return -(-parse_quantity(value) // 1)


def parse_percentage(value: str) -> Fraction:
    """``80%`` -> 4/5. Raises ValueError for a value that is not ``<number>%``."""
    if not _PERCENTAGE.fullmatch(value):
        raise ValueError(f"not a percentage: {value!r}")
    return Fraction(Decimal(value[:-1])) / 100
