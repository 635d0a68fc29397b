"""Placement stage: score (stage, cluster) pairs, solve the placement program (optimize: exact
program, colgen for large fleets, on HiGHS), re-check it (verify), explain it and read the previous
one back (previous)."""

#: The version of how fleetc places, part of every placement's ``inputs:`` digest: a compile of
#: inputs whose digest matches gives the previous placement back without solving. Bump it in the
#: same commit as any change that can change a placement, so that committed outputs are solved
#: again; tests/test_placement_version.py fails when placements change without a bump.
PLACEMENT_VERSION = "4"  # 4: placement.yaml says whether a placement is proven optimal
