"""Unit tests of fleetc.policy.quantity: Kubernetes quantities and percentages as exact numbers."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fleetc.policy.quantity import GIB, cpu_millis, memory_bytes, parse_percentage, parse_quantity


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (16, Fraction(16)),
        ("16", Fraction(16)),
        ("500m", Fraction(1, 2)),
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),  # exact decimal, not the binary float
        ("1.5Gi", Fraction(3, 2) * GIB),
        ("64Gi", 64 * GIB),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("1M", Fraction(10**6)),
        ("1Mi", Fraction(2**20)),
        ("1Ei", Fraction(2**60)),
        (1e3, Fraction(1000)),
        (" 8 ", Fraction(8)),
        ("0", Fraction(0)),
    ],
)
def test_parse_quantity(value: int | float | str, expected: Fraction) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    [True, False, "12x", "-1", "", "1e3", ".5", "5.", "1 Gi", "1gi", "1KI", "64GB", "١٢"],
)
def test_parse_quantity_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("500m", 500), (0.5, 500), ("2", 2000), (4, 4000), ("1.5", 1500), ("0.0001", 1),
     ("1000.1m", 1001), (1e3, 1_000_000), ("0", 0)],
)
def test_cpu_millis_rounds_up(value: int | float | str, expected: int) -> None:
    assert cpu_millis(value) == expected
    assert type(cpu_millis(value)) is int


@pytest.mark.parametrize(
    ("value", "expected"),
    [("64Gi", 64 * 2**30), ("1.5Gi", 1_610_612_736), ("1k", 1000), ("1Ki", 1024),
     ("1m", 1), ("1500m", 2), (1e3, 1000), (100, 100)],
)
def test_memory_bytes_rounds_up(value: int | float | str, expected: int) -> None:
    assert memory_bytes(value) == expected
    assert type(memory_bytes(value)) is int


@pytest.mark.parametrize(
    ("value", "expected"),
    [("80%", Fraction(4, 5)), ("0%", Fraction(0)), ("100%", Fraction(1)),
     ("12.5%", Fraction(1, 8)), ("180%", Fraction(9, 5))],
)
def test_parse_percentage(value: str, expected: Fraction) -> None:
    assert parse_percentage(value) == expected


@pytest.mark.parametrize("value", ["80", "0.8", ""])
def test_parse_percentage_requires_percent_sign(value: str) -> None:
    with pytest.raises(ValueError, match="not a percentage"):
        parse_percentage(value)


def test_parse_percentage_rejects_non_number_with_value_error() -> None:
    with pytest.raises(ValueError):
        parse_percentage("x%")


@pytest.mark.parametrize("value", [-1, -0.5])
def test_parse_quantity_rejects_negative_numbers(value: float) -> None:
    with pytest.raises(ValueError):
        parse_quantity(value)


def test_parse_quantity_rejects_infinity_with_value_error() -> None:
    with pytest.raises(ValueError):
        parse_quantity(float("inf"))


def test_figures_read_before_never_stand_for_an_equal_value_of_another_type() -> None:
    """cpu_millis and memory_bytes remember what they read; ``True == 1 == 1.0`` in Python, yet
    True is no quantity and 0.1 + 0.2 is read from its shortest repr, not as 0.3."""
    assert (cpu_millis(1), cpu_millis(1.0), memory_bytes(1)) == (1000, 1000, 1)
    with pytest.raises(ValueError, match="not a quantity: True"):
        cpu_millis(True)
    with pytest.raises(ValueError, match="not a quantity: True"):
        memory_bytes(True)
    assert (cpu_millis("0.3"), cpu_millis(0.1 + 0.2)) == (300, 301)
