"""POP-style partitioning: place ``k`` alike slices of a fleet apart and measure what it costs.

    python -m bench.partition --clusters 200 --stages 4000 --load 0.9 --parts 1 2 4 8

POP (Narayanan et al., "Solving Large-Scale Granular Resource Allocation Problems Efficiently
with POP", SOSP 2021) splits a granular allocation problem into ``k`` sub-problems, each with
a random ``1/k`` of the jobs and of the resources, solves them independently (on as many
machines) and concatenates the answers: when jobs and resources are many and alike, each slice
looks like the whole at ``1/k`` scale, and the loss is small. Here a slice is alike by
construction: clusters sorted by (GPU type, GPUs, region) and stages by their kind (type, GPU
types, GPUs, replicas, cores, memory) are dealt round-robin to the ``k`` slices, so each holds
about ``1/k`` of every kind of cluster and of stage. Each slice is placed by fleetc
(:func:`fleetc.placement.optimize.place`, ``allow_unplaced``) as a fleet of its own; the
placements are joined and checked by fleetc's verifier on the whole fleet (slices share no
cluster, so capacity holds; rules that couple stages across slices, such as team quotas, are
not covered: the instance has none).

Printed per ``k``: stages placed, objective, the gap against the whole fleet's LP bound (the
``k = 1`` placement's ``bound``: no placement of the whole scores more), CPU seconds in total
and of the largest slice (what one machine of ``k`` would take), with the machine's load.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.clock import cpu_seconds, load_average, load_words
from bench.exact import model_of
from bench.generate import Spec


def slices(model: Any, k: int) -> list[Any]:
    """``k`` sub-fleets of ``model``: alike clusters and alike stages dealt round-robin."""
    clusters = sorted(model.clusters, key=lambda c: (c.gpu_type or "", c.gpus, c.region, c.name))
    stages = sorted(model.stages, key=lambda s: (s.type.value, s.gpu_types, s.total_gpus, s.replicas,
                                                 s.cpu_millis, s.memory_bytes, s.key))
    return [replace(model, clusters=tuple(clusters[i::k]), stages=tuple(stages[i::k])) for i in range(k)]


def partitioned(model: Any, k: int, bound: float | None) -> dict[str, Any]:
    """Place ``model`` as ``k`` slices; the joined placement's figures."""
    from bench.greedy import objective
    from fleetc.model import Placement
    from fleetc.placement.optimize import place
    from fleetc.placement.verify import verify

    placed, seconds, wall = {}, [], time.perf_counter()
    slice_bounds = 0.0
    for part in slices(model, k):
        start = cpu_seconds()
        placement = place(part, allow_unplaced=True)
        seconds.append(cpu_seconds() - start)
        slice_bounds += placement.bound
        placed.update({p.stage: p for p in placement.stages})
        if k == 1:
            bound = placement.bound
    joined = Placement(tuple(placed[s.key] for s in model.stages), 0.0, 0.0, f"pop-{k}")
    value = objective(model, joined)
    return {"parts": k, "placed": sum(1 for p in joined.stages if p.assignments), "stages": len(model.stages),
            "objective": value, "bound": bound, "gap": None if not bound else 1 - value / bound,
            "slice_bounds": slice_bounds, "cpu": sum(seconds), "cpu_largest": max(seconds),
            "wall": time.perf_counter() - wall, "problems": verify(model, joined, allow_unplaced=True)[:3]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=200)
    parser.add_argument("--stages", type=int, default=4000)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args(argv)
    model = model_of(Spec(args.clusters, args.stages, args.load, args.seed))
    bound = None
    print(f"{args.clusters} x {args.stages}, load {args.load:g}, seed {args.seed}")
    for k in sorted(set(args.parts)):
        load = load_average()
        run = partitioned(model, k, bound)
        bound = run["bound"]
        gap = "-" if run["gap"] is None else f"{run['gap']:.3%}"
        print(f"  k={k:<3} {run['placed']}/{run['stages']} placed, objective {run['objective']:.3f}, gap {gap} "
              f"against the whole fleet's LP bound (the slices' own bounds add up to {run['slice_bounds']:.3f}); "
              f"{run['cpu']:.1f}s CPU in all, {run['cpu_largest']:.1f}s the largest slice "
              f"({run['wall']:.1f}s wall, {load_words(load)} before); verifier: "
              f"{'accepts it' if not run['problems'] else run['problems'][0]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
