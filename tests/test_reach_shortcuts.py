"""The large path's shortcuts around its neighbourhood MILPs (colgen/reach.py) hold to the
MILPs: a neighbourhood proven infeasible by its LP relaxation (``relaxation_first``), or by
counting before that (``_short_of_room``), gives the same placement, stage by stage; the
most-valuable MILP skipped where the repair's placement is within the MILP's own gap of its
LP bound (``_at_bound``) gives one within that gap of the MILP's, and on these fleets one as
good (objective, bound, stages placed). Each small sovereign fleet
is placed on the large path with and without them."""

from __future__ import annotations

from typing import Any

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


@pytest.mark.first_row_fast
@pytest.mark.parametrize("spec", FLEETS, ids=lambda spec: f"{spec.clusters}x{spec.stages}-seed{spec.seed}")
def test_the_repair_at_its_bound_places_as_many_scoring_as_much_as_the_milp(
        spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the repair's placement is within the MILP's gap of the LP bound, the MILP finds
    nothing better on these fleets: the same objective and bound, as many stages placed (12 x 120
    seed 2: a tie placed elsewhere), and the verifier accepts both (optimize.place checks)."""
    model = model_of(spec)
    answers: list[bool] = []
    at_bound = reach._at_bound

    def recorded(*args: Any) -> bool:
        answers.append(at_bound(*args))
        return answers[-1]

    monkeypatch.setattr(reach, "_at_bound", recorded)
    fast = optimize.place(model, allow_unplaced=True, large=0)
    monkeypatch.setattr(reach, "_at_bound", lambda *args: False)
    slow = optimize.place(model, allow_unplaced=True, large=0)
    assert (fast.objective, fast.bound) == (slow.objective, slow.bound)
    assert sum(1 for p in fast.stages if p.assignments) == sum(1 for p in slow.stages if p.assignments)
    if not any(answers):
        assert placed(fast) == placed(slow)
    assert answers  # the most-valuable step was reached


@pytest.mark.slow
def test_the_bound_shortcut_is_taken_within_the_milps_own_gap_and_only_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_at_bound`` says yes where the repair's placement is within half the smallest stage value
    of its LP bound, where the most-valuable MILP stops too (its absolute gap): on every
    neighbourhood of the small fleets, the MILP solved finds no placement better by more than
    that where it says yes. It says yes below the LP bound too (8 x 60 seed 0: 4.128 against
    4.344, the gap 0.45), not only at it, and no to some (so the test above compares both)."""
    calls: list[tuple[bool, program.Program, np.ndarray]] = []
    at_bound = reach._at_bound

    def recorded(built: program.Program, replicas_at: np.ndarray, budget: Budget) -> bool:
        calls.append((at_bound(built, replicas_at, budget), built, replicas_at.copy()))
        return calls[-1][0]

    monkeypatch.setattr(reach, "_at_bound", recorded)
    for spec in FLEETS:
        optimize.place(model_of(spec), allow_unplaced=True, large=0)
    below = []
    for answer, built, replicas_at in calls:
        start = program.values_of(built, replicas_at)
        assert start is not None
        relaxed = program.solve_program(built, Budget(None), require_all=False, integral=False)
        assert relaxed.values is not None
        if answer:
            best = program.most_valuable(built, Budget(None), program.HighsDirect())
            assert best.values is not None
            assert built.objective @ best.values <= built.objective @ start + 0.5 * built.smallest_value + 1e-9
            below.append(built.objective @ start < built.objective @ relaxed.values - 1e-6)
    assert any(below) and not all(answer for answer, _, _ in calls)


@pytest.mark.slow
def test_the_most_valuable_milp_is_solved_only_up_to_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``MOST_VALUABLE_PAIRS`` the repair's placement of a closed neighbourhood stands
    (no node limit bounds that MILP's work at its root): the MILP is not solved, the stages it
    could not place stay out, and the placement is still one the verifier accepts
    (optimize.place checks)."""
    model = model_of(FLEETS[3])
    solved: list[int] = []
    most_valuable = reach.most_valuable
    monkeypatch.setattr(reach, "_at_bound", lambda *args: False)
    monkeypatch.setattr(reach, "most_valuable",
                        lambda solving, *args: solved.append(len(solving.unit_stage)) or most_valuable(solving, *args))
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
