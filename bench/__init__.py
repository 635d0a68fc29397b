"""Benchmarks for fleetc: instance generator, greedy baselines and a timing runner.

Run from the repository root, e.g. ``python -m bench.run --clusters 20 --stages 200``.
"""

from __future__ import annotations

from pathlib import Path


def made_folder(text: str) -> Path:
    """``--write-to``'s argument type: the folder, made (with its parents) when missing, so a
    run does not fail minutes in where its first temporary folder goes."""
    path = Path(text)
    path.mkdir(parents=True, exist_ok=True)
    return path
