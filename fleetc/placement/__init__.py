"""Placement stage: score (stage, cluster) pairs, solve the placement program (optimize: exact
program, colgen for large fleets, on HiGHS), re-check it (verify), explain it and read the previous
one back (previous)."""

#: The version of how fleetc places, part of every placement's ``inputs:`` digest: a compile of
#: inputs whose digest matches gives the previous placement back without solving. Bump it in the
#: same commit as any change that can change a placement, so that committed outputs are solved
#: again; tests/test_placement_version.py fails when placements change without a bump.
#: 5: degraded serving runs the replicas that fit; 6: time-sliced GPUs take whole nodes where configured;
#: 7: time-sliced pods take whole GPUs where the device plugin is not configured, pods fit a node by
#: cores and memory too.
#: 8: a stage the change did not touch moves only for more than moveCost, the large path's
#: budgets count work, never seconds.
#: 9: a recompile above INCREMENTAL pairs keeps what the change did not touch and re-solves the rest
#: (:mod:`fleetc.placement.incremental`).
#: 10: the large path solves the LP over kinds of alike stages whole when they are few, and a
#: master holds every pair when there are few.
#: 11: an incremental recompile's neighbourhood drops pairs with no room and holds up to 250,000
#: pairs (more recompiles stay incremental).
#: 12: where stages all differ but for cores and memory and the LP over them would take column
#: generation, the large path places them from the LP over kinds of the relaxation, an LP
#: rounding, the repair and gang relocations and swaps.
#: 13: node fit per cluster (a gang split for the nodes of the cluster it runs on), GPUs never
#: rounded up, and what is placed on a cluster packs onto its nodes (rules.unpacked).
#: 14: the GPU taint fleetc derives is a preference (a CPU-only stage loses 0.5 on a GPU
#: cluster), no longer a filter: CPU-only stages fall back to GPU clusters.
#: 15: the inputs digest hashes a Fleet's clusters in name order (no placement changes; committed
#: digests change once).
#: 16: pods without GPUs pack onto the cores and memory the GPU pods leave on each of the
#: cluster's nodes (a CPU-only cluster stating its node's cores or memory has several nodes);
#: where only they do not pack, the packing repair moves them first.
#: 17: the large path's most-valuable MILP of a closed neighbourhood is solved up to
#: MOST_VALUABLE_PAIRS pairs; above, the repair's placement stands (quota fleets of 50 x 1,000).
#: 18: nor where the repair's placement is within that MILP's gap of its LP bound (half the
#: smallest stage value); and node packing's search bounds what each node can give, so a
#: search that ran out of steps may now find a packing.
#: 19: the most-valuable MILP runs without HiGHS's feasibility jump, the rounding MILPs without
#: its root reduced-cost heuristic: each MILP within its gap as before, some placements moved
#: within it (ties, or objectives a few thousandths apart).
#: 20: the rounding MILPs stop within a relative 5e-4 of optimal, not 1e-4 (the fleets measured
#: placed the same, sooner).
#: 21: the large path's most-valuable MILP of a closed neighbourhood is solved over the
#: neighbourhood its LP relaxation induces around the repair's placement (RINS), not whole.
#: 22: an LP over stages without caps takes column generation whatever its size, not the
#: whole LP up to WHOLE_LP_PAIRS (``--diverse`` fleets).
#: 23: where node packing's search runs out of steps, a MILP decides whether the pods pack (it
#: answered "no packing" before, also where they do).
PLACEMENT_VERSION = "23"

#: Allowed pairs in one component above which the exact MILP gives way to column generation,
#: unless :func:`fleetc.placement.optimize.place` is given another threshold (the CLI's
#: ``FLEETC_LARGE``; 0 sends every instance down the large path). The two paths may place
#: differently: another threshold is part of the inputs digest.
LARGE = 2500
