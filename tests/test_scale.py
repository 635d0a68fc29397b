"""The large-instance path of :func:`fleetc.placement.optimize.place` (column generation, rounding, repair)
at a size CI affords: the same code a 1,000-cluster fleet takes, forced by ``LARGE = 0``.

Timing is measured by ``bench/``, never here. ``FLEETC_SCALE`` (clusters; stages are 20 times
that) enlarges the one ``slow`` test.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import test_optimize
from support.builders import make_cluster, make_fleet, make_gpu_policy, make_platform, make_serving, make_stage

from fleetc.errors import PlacementError, SearchLimitError, TimeLimitError
from fleetc.model import FleetModel, Placement
from fleetc.placement import colgen, optimize
from fleetc.placement.problem import Problem
from fleetc.placement.verify import verify
from fleetc.policy.load import load_sources
from fleetc.policy.validate import validate
from fleetc.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.generate import Spec, generate  # noqa: E402
from bench.greedy import gpus_demanded, gpus_placed  # noqa: E402


def model_of(spec: Spec) -> FleetModel:
    instance = generate(spec)
    loaded = load_sources((path, text.encode()) for path, text in sorted(instance.files.items()))
    policies, problems = validate(loaded.documents)
    assert not loaded.diagnostics and not problems
    return resolve(policies, "bench")


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every component takes the large path, whatever its size."""
    monkeypatch.setattr(optimize, "LARGE", 0)


def unplaced(placement: Placement) -> list[str]:
    return [p.stage for p in placement.stages if not p.assignments]


def test_a_generated_fleet_is_placed_whole_within_a_percent_of_the_lp_bound(large: None) -> None:
    model = model_of(Spec(clusters=20, stages=300, load=0.9))
    placement = optimize.place(model)
    assert placement.method == "colgen-lp-round"
    assert verify(model, placement) == []
    assert unplaced(placement) == []
    assert placement.objective <= placement.bound
    assert placement.gap <= 0.01


#: A full (100% load) generated fleet whose round-and-repair leaves one stage out although the
#: neighbourhood search places every stage: 50 x 1,000 seed 4 (and seed 1), since generated
#: serving replicas take whole GPUs (placement version 7; seed 5 was the case before).
FULL = Spec(clusters=50, stages=1000, load=1.0, seed=4)


@pytest.mark.slow
def test_where_a_full_packing_exists_the_large_path_places_every_stage() -> None:
    model = model_of(FULL)  # 27,395 pairs: the large path
    placement = optimize.place(model)
    assert placement.method == "colgen-lp-round"
    assert unplaced(placement) == []
    assert verify(model, placement) == []


@pytest.mark.slow
def test_room_stranded_behind_stages_outside_the_neighbourhood_is_reached() -> None:
    """100 x 2,000 at load 1.0 on 6,8,8-GPU nodes, seed 3 (``bench.exactcheck``: SCIP's per-node
    model places all 2,000, 2088.6545): the repair left a 4-GPU h100 gang out with 4 GPUs free
    but scattered, one behind c0014-a100's taken cores. The reach's first neighbourhood could
    not place it and its next ring (the whole fleet) was over ``REACH_PAIRS``, so 1,999 were
    placed; growing first by the stages of the clusters with GPUs free places all 2,000, within
    0.05% of that optimum, and the verifier (run by ``place``) accepts it."""
    model = model_of(Spec(clusters=100, stages=2000, load=1.0, seed=3, node_gpus=(6, 8, 8)))
    placement = optimize.place(model, allow_unplaced=True)
    assert unplaced(placement) == []
    assert placement.objective >= 2088.6545 * (1 - 5e-4)


@pytest.mark.slow
def test_a_search_that_leaves_stages_out_unproven_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(colgen.reach, "REACH_WORK", 0)  # round and repair only: one stage stays out
    model = model_of(FULL)
    with pytest.raises(SearchLimitError) as search:
        optimize.place(model)
    assert search.value.headline == (
        "the search found no placement of every stage within its budget (it did not prove that none exists)"
    )
    assert search.value.hint == "pass --allow-unplaced to render what was placed"
    assert len(search.value.reasons) == 1
    partial = optimize.place(model, allow_unplaced=True)
    assert len(unplaced(partial)) == 1 and verify(model, partial, allow_unplaced=True) == []


@pytest.mark.slow
def test_the_large_path_proves_an_overfull_fleet_cannot_be_placed_whole(large: None) -> None:
    model = model_of(Spec(clusters=20, stages=200, load=1.2))
    with pytest.raises(PlacementError) as proven:
        optimize.place(model)
    assert type(proven.value) is PlacementError  # the neighbourhood MILP closed and proved it
    partial = optimize.place(model, allow_unplaced=True)
    assert len(unplaced(partial)) == len(proven.value.reasons)


def test_the_rescue_is_skipped_when_the_large_path_places_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimize, "LARGE", 0)
    placement = optimize.place(model_of(Spec(clusters=20, stages=300, load=0.9)))
    assert placement.method == "colgen-lp-round" and unplaced(placement) == []


def test_column_generation_reports_a_narrowing_gap_each_round(large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(colgen.columns, "WHOLE_LP_PAIRS", 0)  # column generation proper: no master holds
    monkeypatch.setattr(colgen.solve, "ALIKE_SHARE", 0.0)  # every pair, no LP over alike stages
    gaps: list[float] = []
    placement = optimize.place(model_of(Spec(clusters=30, stages=600, load=0.9)), on_gap=gaps.append)
    assert len(gaps) >= 2  # one report per round: this instance takes more than one
    assert all(0.0 <= gap <= 1.0 for gap in gaps)
    assert gaps == sorted(gaps, reverse=True)  # the best bound only falls, the master only rises
    assert gaps[-1] <= 1e-4 and placement.gap <= 0.01


@pytest.mark.slow
def test_column_generation_finds_the_bound_of_the_lp_over_every_pair(
    large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(Spec(clusters=20, stages=300, load=0.9, seed=3))
    rounded = optimize.place(model)
    monkeypatch.setattr(optimize, "LARGE", 10**9)
    exact = optimize.place(model)  # its bound is the LP relaxation over all pairs, solved whole
    assert exact.method == "milp"
    assert rounded.bound == pytest.approx(exact.bound, rel=1e-5)
    assert rounded.objective <= exact.objective + 1e-6
    assert rounded.objective >= 0.99 * exact.objective


def test_the_lp_over_alike_stages_is_the_lp_over_stages(large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(Spec(clusters=30, stages=600, load=0.9))
    gaps: list[float] = []
    alike = optimize.place(model, on_gap=gaps.append)
    assert len(gaps) == 1  # the LP over kinds of stages is small: solved whole, in one round
    monkeypatch.setattr(colgen.solve, "ALIKE_SHARE", 0.0)
    monkeypatch.setattr(colgen.columns, "WHOLE_LP_PAIRS", 0)
    each = optimize.place(model)  # column generation over every stage, to convergence
    assert alike.bound == pytest.approx(each.bound, rel=1e-4)
    assert unplaced(alike) == [] and alike.objective >= (1 - 2e-3) * alike.bound


def test_alike_stages_spread_the_kinds_lp_over_whole_stages_first() -> None:
    model = optimize._canonical(model_of(Spec(clusters=20, stages=300, load=0.9, seed=1)))
    scores = optimize.score_matrix(model)
    (problem,), _ = optimize.problems(model, scores, {})
    large = colgen.large._large(problem)
    found = colgen.solve._alike(problem, large)
    assert found is not None
    type_of, representatives = found
    assert len(representatives) < problem.replicas.size / 2 and type_of[representatives].tolist() == list(
        range(len(representatives)))
    kinds = colgen.large._large(problem.restrict(representatives), np.bincount(type_of))
    relaxed = colgen.columns._generate_columns(kinds, colgen.columns._start_master(kinds, whole=True), kinds.gain, None)
    spread = colgen.solve._spread(large, kinds, relaxed, type_of)
    per_stage = np.bincount(large.pair_stage[spread.pairs], weights=spread.shares, minlength=large.stages)
    assert per_stage.max() <= 1 + 1e-9  # no stage takes more than itself
    per_kind_cluster = np.zeros((kinds.stages, kinds.clusters))
    np.add.at(per_kind_cluster, (type_of[large.pair_stage[spread.pairs]], large.pair_cluster[spread.pairs]),
              spread.shares)
    expected = np.zeros_like(per_kind_cluster)
    expected[kinds.pair_stage[relaxed.pairs], kinds.pair_cluster[relaxed.pairs]] = relaxed.shares
    assert np.allclose(per_kind_cluster, expected)  # each kind's share of each cluster, split among its stages
    whole = np.isclose(spread.shares, 1.0)
    assert whole.sum() >= 0.9 * large.stages  # most stages run whole where the LP puts them


def test_stages_alike_but_for_cores_and_memory_bound_the_lp_at_their_least(monkeypatch: pytest.MonkeyPatch) -> None:
    model = optimize._canonical(model_of(Spec(clusters=30, stages=600, load=0.9, diverse=True)))
    scores = optimize.score_matrix(model)
    (problem,), _ = optimize.problems(model, scores, {})
    large = colgen.large._large(problem)
    master = colgen.columns._start_master(large, whole=True)  # every pair
    whole = colgen.columns._generate_columns(large, master, large.gain, None)
    assert whole.converged
    lp_optimum = whole.upper / (1.0 - colgen.large.TIE_BREAK)
    assert colgen.solve._least_demand_bound(problem, large, False, None) == math.inf  # kinds: more than half the stages
    monkeypatch.setattr(colgen.solve, "ALIKE_SHARE", 1.0)
    exact = colgen.solve._alike(problem, large)
    assert exact is None or len(exact[1]) > 400  # too many kinds alike in everything
    kinds = colgen.solve._alike(problem, large, cores_and_memory=False)
    assert kinds is not None and len(kinds[1]) < 400  # stages differing only in cores and memory are one kind
    bound = colgen.solve._least_demand_bound(problem, large, False, None)
    assert lp_optimum * (1 - 1e-9) <= bound <= lp_optimum * 1.005  # a relaxation: never below the LP optimum


@pytest.mark.slow
def test_stages_that_all_differ_are_placed_from_the_relaxation_better_than_the_strong_greedy(
        large: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where stages all differ and their LP is large (``KINDS_PAIRS``, forced here), the large
    path places them from the relaxation's LP over kinds, its gang moves gain, and it places as
    many stages as ``bench/strong.py``'s greedy and more objective."""
    from bench.strong import place_strong
    model = optimize._canonical(model_of(Spec(clusters=30, stages=600, load=0.9, diverse=True)))
    monkeypatch.setattr(colgen.columns, "WHOLE_LP_PAIRS", 1_000)
    monkeypatch.setattr(colgen.solve, "KINDS_PAIRS", 1_000)
    monkeypatch.setattr(colgen.solve, "ALIKE_SHARE", 0.7)
    by_kinds = mock.Mock(wraps=colgen.solve._solve_by_kinds)
    monkeypatch.setattr(colgen.solve, "_solve_by_kinds", by_kinds)
    improve = mock.Mock(wraps=colgen.improve._improve)
    objectives: list[float] = []
    states: list[tuple[Problem, colgen.large._Large, np.ndarray]] = []  # what the moves started from
    monkeypatch.setattr(colgen.solve, "_improve", lambda problem, large, replicas_at, deadline: (
        states.append((problem, large, replicas_at.copy())), objectives.append(problem.score_of(replicas_at)),
        improve(problem, large, replicas_at, deadline), objectives.append(problem.score_of(replicas_at))))
    placement = optimize.place(model, allow_unplaced=True)
    assert by_kinds.called and verify(model, placement, allow_unplaced=True) == []
    assert objectives[1] > objectives[0]  # the moves gained
    strong = place_strong(model)
    placed = len(model.stages) - len(unplaced(placement))
    assert placed >= len(model.stages) - len(unplaced(strong))
    assert placed > len(model.stages) - len(unplaced(strong)) or placement.objective > strong.objective
    assert placement.gap <= 0.005
    problem, terms, before = states[0]
    stopped = before.copy()
    improve(problem, terms, stopped, time.monotonic() - 1.0)  # the user's deadline has passed: no move
    assert np.array_equal(stopped, before)


@pytest.mark.slow
def test_the_large_path_is_deterministic(large: None) -> None:
    model = model_of(Spec(clusters=20, stages=300, load=1.0, seed=1))
    first = optimize.place(model, allow_unplaced=True)
    shuffled = dataclasses.replace(model, stages=model.stages[::-1], clusters=model.clusters[::-1])
    assert optimize.place(model, allow_unplaced=True) == first
    assert optimize.place(shuffled, allow_unplaced=True).stages == tuple(
        first.of(s.key) for s in shuffled.stages
    )


@pytest.mark.parametrize("clusters, stages", [(20, 200), (30, 400)])
def test_a_perfect_packing_places_every_gpu(large: None, clusters: int, stages: int) -> None:
    model = model_of(Spec(clusters=clusters, stages=stages, perfect=True))
    placement = optimize.place(model)
    assert verify(model, placement) == []
    assert gpus_placed(model, placement) == gpus_demanded(model)


def test_time_slices_multi_cluster_and_previous_placements_on_the_large_path(large: None) -> None:
    clusters = tuple(make_cluster(f"c{i}", gpus=8, energy_efficiency=0.5 + i / 100) for i in range(4))
    serve = make_serving(replicas=6, min_replicas_per_cluster=2)
    stages = (serve, *(make_stage(f"t{i}", gpus=4) for i in range(4)))
    model = make_fleet(clusters, stages, gpu_policy=make_gpu_policy(time_slicing=2),
                       platforms=(make_platform("c0", ("c1",)),))
    placement = optimize.place(model)
    assert verify(model, placement) == []
    assert {"c0", "c1"} <= {a.cluster for a in placement.of("llm/serve").assignments}
    previous = {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in placement.stages}
    # c9 scores at most 0.2 * 0.1 better than any other: less than the move cost of 0.05.
    moved = dataclasses.replace(model, clusters=(*model.clusters, make_cluster("c9", gpus=8, energy_efficiency=0.6)))
    again = optimize.place(moved, previous=previous)
    assert optimize.place(moved) != again
    assert {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in again.stages} == previous
    assert again.bound >= optimize.place(moved).objective - 1e-6


def test_multi_cluster_clusters_too_small_for_every_serving_stage_leave_some_out_like_the_exact_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each serving stage needs 2 of c0's 4 GPUs and 2 of c1's 6: two fit, the third cannot be
    # placed (the column generation's master used to make every floor unconditional: no LP).
    clusters = (make_cluster("c0", gpus=4), make_cluster("c1", gpus=6), make_cluster("c2", gpus=16))
    stages = (*(make_serving(f"serve{i}", min_replicas_per_cluster=2) for i in range(3)),
              *(make_stage(f"t{i}", gpus=2) for i in range(4)))
    model = make_fleet(clusters, stages, platforms=(make_platform("c0", ("c1",)),))
    monkeypatch.setattr(optimize, "LARGE", 0)
    large = optimize.place(model, allow_unplaced=True)
    monkeypatch.setattr(optimize, "LARGE", 10**9)
    exact = optimize.place(model, allow_unplaced=True)
    assert (large.method, exact.method) == ("colgen-lp-round", "milp")
    assert verify(model, large, allow_unplaced=True) == []
    assert len(unplaced(large)) == len(unplaced(exact)) == 1
    assert large.objective == pytest.approx(exact.objective, rel=1e-9)
    assert large.bound == pytest.approx(exact.bound, rel=1e-5)


def test_what_fits_nowhere_is_diagnosed_like_the_exact_path(large: None) -> None:
    model = make_fleet((make_cluster("a", gpus=8), make_cluster("b", gpus=8)),
                       tuple(make_stage(f"s{i}", gpus=8) for i in range(3)))
    with pytest.raises(PlacementError) as raised:
        optimize.place(model)
    placement = optimize.place(model, allow_unplaced=True)
    assert verify(model, placement, allow_unplaced=True) == []
    (left_out,) = unplaced(placement)
    assert raised.value.reasons == (f"0/2 clusters fit {left_out}: 2 have 0 of 8 free a100",)
    assert placement.objective <= placement.bound


def test_a_deadline_gives_a_sound_placement_or_says_so(large: None) -> None:
    model = model_of(Spec(clusters=20, stages=300, load=0.9))
    try:
        placement = optimize.place(model, time_limit=0.001)
    except TimeLimitError as error:
        assert error.headline == "the time limit of 0.001s ran out before every stage was placed"
    else:
        assert verify(model, placement) == []
        assert placement.objective <= placement.bound


#: The semantic tests of the exact path that take no arguments (hypothesis draws its own) and
#: must hold on the large path too: all but those about the exact path itself or the method's name.
SHARED_SEMANTICS = [
    name for name, test in vars(test_optimize).items()
    if name.startswith("test_") and callable(test) and not inspect.signature(test).parameters
    and name not in {
        "test_capacity_places_both_trainings",  # asserts method == "milp"
        "test_solving_prints_nothing_in_a_fresh_process",  # a fresh interpreter: the exact path
    }
]


@pytest.mark.parametrize("name", SHARED_SEMANTICS)
def test_the_exact_paths_semantics_hold_on_the_large_path(large: None, name: str) -> None:
    test: Callable[[], None] = getattr(test_optimize, name)
    test()


@pytest.mark.slow
def test_a_larger_generated_fleet(large: None) -> None:
    clusters = int(os.environ.get("FLEETC_SCALE", "40"))
    model = model_of(Spec(clusters=clusters, stages=20 * clusters, load=0.9))
    placement = optimize.place(model)
    assert verify(model, placement) == []
    assert unplaced(placement) == []
    assert placement.gap <= 0.01


def test_each_improving_stage_gets_its_best_column_when_a_stage_has_no_pairs() -> None:
    from fleetc.placement import colgen
    from fleetc.placement.problem import Problem, components, previous_matrix
    from fleetc.placement.scoring import score_matrix

    model = model_of(Spec(clusters=10, stages=60, load=0.9))
    scores = score_matrix(model)
    [part] = [p for p in components(scores.allowed) if len(p.stages) > 1]
    blocked = {int(part.stages[1]): "blocked for this test"}  # the second stage: no pairs
    large = colgen.large._large(Problem.of(model, scores, blocked, previous_matrix(model, {}), part))
    assert large.pair_range[1] == large.pair_range[2]
    pricing = -np.linspace(1.0, 2.0, len(large.pair_stage))[::-1]  # every pair improves
    new = colgen.columns._new_columns(large, pricing, pricing < 0)
    for s in range(large.stages):
        pairs = np.arange(large.pair_range[s], large.pair_range[s + 1])
        if len(pairs):
            assert pairs[np.argmin(pricing[pairs])] in new


def test_the_large_path_places_the_same_however_slow_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its budgets count work, never seconds: with a clock that jumps 1,000 s at every reading
    (a machine ever so slow) and no --time-limit, the large path places exactly as it does on
    this one. Before placement version 7 column generation stopped after 120 s of that clock
    and the rounding MILPs after 10 s."""
    model = model_of(Spec(clusters=20, stages=300, load=0.9))
    first = optimize.place(model, large=0)
    clock = itertools.count(0.0, 1000.0)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    assert optimize.place(model, large=0) == first


def test_a_time_limit_that_runs_out_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """--time-limit is the one clock, a safety net: when it runs out the placement says so
    (timeLimitReached), the one case where the machine's speed decides the placement."""
    model = model_of(Spec(clusters=20, stages=300, load=0.9))
    clock = itertools.count(0.0, 1000.0)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    try:
        placed = optimize.place(model, large=0, time_limit=10.0)
    except TimeLimitError as err:
        assert err.headline == "the time limit of 10s ran out before every stage was placed"
    else:
        assert placed.time_limit == 10.0 and not placed.optimal
