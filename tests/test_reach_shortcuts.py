"""The large path's shortcuts around its neighbourhood MILPs (colgen/reach.py) hold to the
MILPs: a neighbourhood proven infeasible by its LP relaxation (``relaxation_first``), or by
counting before that (``_short_of_room``), gives the same placement, stage by stage; the
most-valuable MILP over the neighbourhood the LP relaxation induces around the repair's
placement (``_most_valuable_near``), and none where that placement is within the MILP's own
gap of its LP bound, gives one within that gap of the whole MILP's for each neighbourhood, and
on these fleets as many stages placed. Each small sovereign fleet is placed on the large path
with and without them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.builders import make_cluster, make_fleet, make_stage
from test_scale import model_of

from bench.generate import Spec
from fleetc.model import FleetModel, Placement
from fleetc.placement import optimize, program
from fleetc.placement.colgen import reach
from fleetc.placement.problem import Budget, Part, Problem, multicluster_conflicts
from fleetc.placement.scoring import score_matrix

#: Small sovereign fleets that leave stages out: every component a closed neighbourhood.
FLEETS = [Spec(clusters=c, stages=s, load=1.0, platform=True, sovereignty=True, seed=seed)
          for c, s, seed in ((8, 60, 0), (8, 60, 1), (12, 120, 2), (20, 200, 0))]


def placed(placement: Placement) -> list[tuple[str, tuple[tuple[str, int], ...]]]:
    return [(p.stage, tuple((a.cluster, a.replicas) for a in p.assignments)) for p in placement.stages]


@pytest.mark.first_row_fast
@pytest.mark.parametrize("spec", FLEETS, ids=lambda spec: f"{spec.clusters}x{spec.stages}-seed{spec.seed}")
def test_a_relaxation_proof_places_as_the_milp_proof_does(spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(spec)
    fast = optimize.place(model, allow_unplaced=True, large=0)
    monkeypatch.setattr(reach, "HighsDirect", lambda nodes, **fields: program.HighsDirect(nodes))
    slow = optimize.place(model, allow_unplaced=True, large=0)
    assert placed(fast) == placed(slow)
    assert (fast.objective, fast.bound) == (slow.objective, slow.bound)
    assert any(not p.assignments for p in slow.stages)  # the neighbourhoods ran


def whole_milp(built: program.Program, replicas_at: np.ndarray, budget: Budget) -> program.Result:
    """``reach._most_valuable_near`` as it was before placement version 21: the whole
    most-valuable MILP, every time."""
    return program.most_valuable(built, budget, program.HighsDirect(reach.REACH_NODES))


@pytest.mark.first_row_fast
@pytest.mark.parametrize("spec", FLEETS, ids=lambda spec: f"{spec.clusters}x{spec.stages}-seed{spec.seed}")
def test_the_neighbourhood_places_as_many_scoring_within_the_milps_gap(
        spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    """The most valuable placement near the repair's (``_most_valuable_near``) against the whole
    most-valuable MILP: on these fleets as many stages placed, and an objective within the
    MILP's own gap (half the smallest stage value) of the MILP's for each neighbourhood it
    re-placed; the verifier accepts both (optimize.place checks)."""
    model = model_of(spec)
    calls: list[program.Program] = []
    near = reach._most_valuable_near

    def recorded(built: program.Program, replicas_at: np.ndarray, budget: Budget) -> program.Result | None:
        calls.append(built)
        return near(built, replicas_at, budget)

    monkeypatch.setattr(reach, "_most_valuable_near", recorded)
    fast = optimize.place(model, allow_unplaced=True, large=0)
    monkeypatch.setattr(reach, "_most_valuable_near", whole_milp)
    slow = optimize.place(model, allow_unplaced=True, large=0)
    assert calls  # the most-valuable step was reached
    assert fast.bound == slow.bound
    assert fast.objective >= slow.objective - sum(0.5 * built.smallest_value for built in calls) - 1e-9
    assert sum(1 for p in fast.stages if p.assignments) >= sum(1 for p in slow.stages if p.assignments)


@pytest.mark.slow
def test_the_neighbourhood_leaves_out_no_stage_that_fits_the_room_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """On every neighbourhood of the small fleets, ``_most_valuable_near``:

    - answers None (nothing solved) only where the repair's placement is within half the
      smallest stage value of its LP bound, and there the whole MILP finds nothing better by
      more than that; it answers below the LP bound too (8 x 60 seed 0: 4.128 against 4.344,
      the gap 0.45), not only at it;
    - else answers a point of the whole program (the fixed columns leave it feasible) that
      scores at least the repair's less that gap, and leaves out no stage that fits the room
      it leaves on one of its clusters: the guarantee of the whole MILP's gap, which the
      neighbourhood keeps by leaving every column free of each stage it may leave out."""
    calls: list[tuple[program.Result | None, program.Program, np.ndarray]] = []
    near = reach._most_valuable_near

    def recorded(built: program.Program, replicas_at: np.ndarray, budget: Budget) -> program.Result | None:
        calls.append((near(built, replicas_at, budget), built, replicas_at.copy()))
        return calls[-1][0]

    monkeypatch.setattr(reach, "_most_valuable_near", recorded)
    for spec in FLEETS:
        optimize.place(model_of(spec), allow_unplaced=True, large=0)
    below, solved = [], 0
    for result, built, replicas_at in calls:
        start = program.values_of(built, replicas_at)
        assert start is not None
        gap = 0.5 * built.smallest_value
        relaxed = program.solve_program(built, Budget(None), require_all=False, integral=False)
        assert relaxed.values is not None
        bound = built.objective @ relaxed.values
        if result is None:
            assert built.objective @ start >= bound - gap - 1e-9
            best = program.most_valuable(built, Budget(None), program.HighsDirect())
            assert best.values is not None
            assert built.objective @ best.values <= built.objective @ start + gap + 1e-9
            below.append(built.objective @ start < bound - 1e-6)
            continue
        assert result.values is not None
        solved += 1
        assert program.is_feasible(built, result.values, built.lower)
        assert built.objective @ result.values >= built.objective @ start - gap - 1e-9
        assert fits_left_out(built, program.replicas_of(built, result.values)) == []
    assert any(below) and solved


def fits_left_out(built: program.Program, replicas_at: np.ndarray) -> list[tuple[int, int]]:
    """The (stage, cluster) pairs of ``built`` where a stage ``replicas_at`` leaves out fits
    whole beside what it places, by the program's own rows (:func:`program.values_of`)."""
    replicas = -built.placement[:, built.z].diagonal()
    fits = []
    for s, c in sorted({(int(s), int(c)) for s, c in zip(built.unit_stage, built.unit_cluster, strict=True)}):
        if replicas_at[s].any():
            continue
        tried = replicas_at.copy()
        tried[s, c] = round(replicas[s])
        if program.values_of(built, tried) is not None:
            fits.append((s, c))
    return fits


def test_a_stage_that_fits_the_room_left_is_found() -> None:
    """``fits_left_out`` finds a stage that fits: the test above could fail. Two gangs of 4 a100
    on an 8-GPU cluster, one placed: the other fits beside it; three, two placed: none does."""
    for gangs, placed, expected in ((2, 1, [(1, 0)]), (3, 2, [])):
        built = gangs_beside_roomy_h100(gangs)
        replicas_at = np.zeros((len(built.blocked), built.clusters), dtype=int)
        replicas_at[:placed, 0] = 1
        assert [(s, c) for s, c in fits_left_out(built, replicas_at) if s < gangs] == expected


def two_clusters_five_gangs() -> tuple[program.Program, np.ndarray]:
    """A program where fixing every column the LP and the repair agree on leaves a stage out
    that fits: five gangs (7, 7, 4, 3 and 3 GPUs) on an a100 and an h100 cluster of 8 GPUs,
    worth 10, 8, 3, 2 and 8 a gang, and the repair's placement: s4 on a, s2 and s3 on h."""
    model = make_fleet((make_cluster("a", gpu_type="a100"), make_cluster("h", gpu_type="h100")),
                       tuple(make_stage(f"s{i}", gpus=gpus, gpu_types=types) for i, (gpus, types) in enumerate(
                           ((7, ("a100",)), (7, ("h100",)), (4, ("a100", "h100")), (3, ("h100",)), (3, ("a100",))))))
    built = program.build_program(_whole(model))
    objective = np.zeros(built.size)
    objective[: len(built.unit_stage)] = np.array([10.0, 8.0, 3.0, 2.0, 8.0])[built.unit_stage]
    repair = np.zeros((5, 2), dtype=int)
    repair[4, 0] = repair[2, 1] = repair[3, 1] = 1
    return replace(built, objective=objective, smallest_value=1.0), repair


def test_the_neighbourhood_frees_every_column_of_a_stage_it_may_leave_out() -> None:
    """On :func:`two_clusters_five_gangs`, fixing each column where the LP's optimum and the
    repair agree (RINS column by column) lets the MILP drop s2 from h while its column on a
    stays fixed at 0, and s2 then fits the room left on a; ``_most_valuable_near`` frees every
    column of a stage whose ``z`` is free, places it, and scores more than the repair."""
    built, repair = two_clusters_five_gangs()
    start = program.values_of(built, repair)
    assert start is not None and fits_left_out(built, repair) == []
    relaxed = program.solve_program(built, Budget(None), require_all=False, integral=False)
    assert relaxed.values is not None
    agrees = np.abs(relaxed.values - start) <= 1e-6
    by_column = replace(built, lower=np.where(agrees, start, built.lower), upper=np.where(agrees, start, built.upper))
    dropped = program.most_valuable(by_column, Budget(None), program.HighsDirect())
    assert dropped.values is not None
    assert fits_left_out(built, program.replicas_of(built, dropped.values)) == [(2, 0)]
    found = reach._most_valuable_near(built, repair, Budget(None))
    assert found is not None and found.values is not None
    assert fits_left_out(built, program.replicas_of(built, found.values)) == []
    assert built.objective @ found.values > built.objective @ start


@pytest.mark.slow
def test_the_most_valuable_milp_is_solved_only_up_to_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``MOST_VALUABLE_PAIRS`` the repair's placement of a closed neighbourhood stands
    (no node limit bounds that MILP's work at its root): the MILP is not solved, the stages it
    could not place stay out, and the placement is still one the verifier accepts
    (optimize.place checks)."""
    model = model_of(FLEETS[3])
    solved: list[int] = []
    monkeypatch.setattr(reach, "_most_valuable_near",
                        lambda built, *args: solved.append(len(built.unit_stage)) or whole_milp(built, *args))
    with_milp = optimize.place(model, allow_unplaced=True, large=0)
    assert solved and max(solved) <= reach.MOST_VALUABLE_PAIRS
    solved.clear()
    monkeypatch.setattr(reach, "MOST_VALUABLE_PAIRS", 0)
    without = optimize.place(model, allow_unplaced=True, large=0)
    assert not solved
    assert sum(1 for p in without.stages if p.assignments) <= sum(1 for p in with_milp.stages if p.assignments)
    assert any(not p.assignments for p in without.stages)


def test_a_placement_is_the_point_of_its_program_that_places_it() -> None:
    """program.values_of inverts replicas_of: the point it gives is feasible, places the same
    replicas and scores the same objective, time-sliced units (w) included; a placement that
    breaks a row of the program gives None."""
    built = whole_program(FLEETS[0])
    solved = program.most_valuable(built, Budget(None), program.HighsDirect())
    assert solved.values is not None
    replicas_at = program.replicas_of(built, solved.values)
    point = program.values_of(built, replicas_at)
    assert point is not None
    assert np.array_equal(program.replicas_of(built, point), replicas_at)
    assert built.objective @ point == pytest.approx(built.objective @ solved.values, abs=1e-9)
    assert point[built.w].sum() <= solved.values[built.w].sum() + 1e-9  # the fewest units the slots need
    crowded = replicas_at.copy()
    s, c = built.unit_stage[0], built.unit_cluster[0]
    crowded[s, c] += 10**6  # more replicas than the cluster holds
    assert program.values_of(built, crowded) is None


def whole_program(spec: Spec) -> program.Program:
    return program.build_program(_whole(model_of(spec)))


def _whole(model: FleetModel) -> Problem:
    """The problem of every stage of ``model`` on every cluster."""
    scores = score_matrix(model)
    return Problem.of(model, scores, multicluster_conflicts(model, scores), np.zeros(scores.allowed.shape),
                      Part(np.arange(len(model.stages)), np.arange(len(model.clusters))))


@pytest.mark.parametrize("spec", [FLEETS[0], Spec(clusters=8, stages=30, load=0.5, seed=0)], ids=["full", "roomy"])
def test_every_stage_answers_the_same_with_its_relaxation_first(spec: Spec) -> None:
    built = whole_program(spec)
    milp = program.every_stage(built, Budget(None), program.HighsDirect())
    first = program.every_stage(built, Budget(None), program.HighsDirect(relaxation_first=True))
    assert (first.infeasible, first.optimal) == (milp.infeasible, milp.optimal)
    assert (first.values is None and milp.values is None) or np.array_equal(first.values, milp.values)
    assert milp.infeasible == (spec is FLEETS[0])


@pytest.mark.first_row_fast
@pytest.mark.parametrize("spec", FLEETS, ids=lambda spec: f"{spec.clusters}x{spec.stages}-seed{spec.seed}")
def test_counting_proves_only_what_the_relaxation_proves(spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbourhood counting proves short of room (reach._short_of_room) has an infeasible
    LP relaxation with every stage placed, and the placement is the one the LP proofs give."""
    model = model_of(spec)
    proven: list[program.Program] = []
    short_of_room = reach._short_of_room

    def recorded(built: program.Program) -> bool:
        if short_of_room(built):
            proven.append(built)
            return True
        return False

    monkeypatch.setattr(reach, "_short_of_room", recorded)
    counted = optimize.place(model, allow_unplaced=True, large=0)
    monkeypatch.setattr(reach, "_short_of_room", lambda _: False)
    solved = optimize.place(model, allow_unplaced=True, large=0)
    assert placed(counted) == placed(solved)
    assert (counted.objective, counted.bound) == (solved.objective, solved.bound)
    assert proven
    for built in proven:
        assert program.solve_program(built, Budget(None), require_all=True, integral=False).infeasible


def gangs_beside_roomy_h100(gangs: int) -> program.Program:
    """The program of ``gangs`` gangs of 4 a100 that may run only on an 8-GPU a100 cluster,
    and one that may also run on an h100 cluster with room."""
    model = make_fleet((make_cluster("a", gpu_type="a100"), make_cluster("h", gpu_type="h100")),
                       tuple(make_stage(f"train{i}", gpus=4, gpu_type="a100") for i in range(gangs))
                       + (make_stage("tune", gpus=4, gpu_types=("a100", "h100")),))
    return program.build_program(_whole(model))


@pytest.mark.parametrize("gangs", [2, 3])
def test_counting_finds_the_clusters_their_stages_overfill(gangs: int) -> None:
    """Two a100 gangs fit, three are short of room (12 GPUs on 8), and the LP relaxation agrees."""
    built = gangs_beside_roomy_h100(gangs)
    relaxed = program.solve_program(built, Budget(None), require_all=True, integral=False)
    assert reach._short_of_room(built) == relaxed.infeasible == (gangs == 3)


def test_counting_leaves_a_program_over_its_work_bound_to_the_lp(monkeypatch: pytest.MonkeyPatch) -> None:
    built = gangs_beside_roomy_h100(3)
    monkeypatch.setattr(reach, "COUNTING_WORK", len(built.unit_stage) - 1)  # one set of clusters is over it
    assert not reach._short_of_room(built)
