"""Benchmarks for fleetc: instance generator, greedy baselines and a timing runner.

Run from the repository root, e.g. ``python -m bench.run --clusters 20 --stages 200``.
"""
