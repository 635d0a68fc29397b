"""How the report writes a count, a sum of money, GPUs per type, replicas per cluster: one
wording for the text, the Markdown, the commit message and the what-if."""

from __future__ import annotations

from collections.abc import Mapping


def counted(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def money(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def gpu_counts(per_type: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {t}" for t, n in sorted(per_type.items())) or "0"


def number_or_na(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def replica_list(where: Mapping[str, int]) -> str:
    return ", ".join(f"{cluster} x{n}" for cluster, n in sorted(where.items())) or "(none)"
