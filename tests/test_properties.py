"""Invariants of the placement over generated fleets (hypothesis).

- Every placement ``place`` returns passes the independent verifier, with every policy feature
  on (cordons, utilisation, headroom, time-slicing, multiCluster, sovereignty), and an
  infeasible instance always says why; with ``allow_unplaced`` the partial placement verifies.
- The order clusters and stages come in never changes the placement.
- Instances built as an exact packing (each cluster's GPUs split into gangs) are fully placed.
- Whenever brute force finds a sound placement of a small instance, ``place`` finds one too.
- The large path (column generation, rounding, repair and reach; forced with ``large=0``) on
  small instances with every rule on (failover headroom, caps, time-slicing, node shapes) gives
  placements the verifier accepts, its bound is at least the exact path's objective, and every
  sub-program its rounding and reach solve (:func:`fleetc.placement.colgen.rounding._round`,
  ``_place_what_fits``, ``_reach``, ``_place_most``) places only what fits in what the stages
  it keeps fixed leave, as the rules count it (:class:`fleetc.placement.rules.Ledger`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    GPU_TYPE_CHOICES,
    THROUGHPUT_CHOICES,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_stage,
)

from fleetc.errors import PlacementError
from fleetc.model import Assignment, FleetModel, PipelineBudget, Placement, Source, StagePlacement, StageType, Team
from fleetc.placement import colgen, cvx, optimize, rules, solver
from fleetc.placement import program as program_module
from fleetc.placement.optimize import place
from fleetc.placement.problem import Budget, Problem
from fleetc.placement.program import Program, Result, Solved, replicas_of
from fleetc.placement.verify import verify

JURISDICTIONS = ("cn", "EU")


@st.composite
def fleets(draw: st.DrawFn) -> FleetModel:
    gpu_types = st.sampled_from(["a100", "h100", None])
    clusters = tuple(
        make_cluster(
            f"c{i}",
            gpu_type=(gpu_type := draw(gpu_types)),
            gpus=draw(st.sampled_from([4, 8, 16])) if gpu_type else 0,
            cores=draw(st.sampled_from([16, 64, 128])),
            memory_gib=draw(st.sampled_from([64, 256, 1024])),
            utilization=draw(st.sampled_from([0.0, 0.0, 0.25, 0.5])),
            cordoned=draw(st.integers(0, 5)) == 0,
            jurisdiction=draw(st.sampled_from(JURISDICTIONS)),
            energy_efficiency=draw(st.sampled_from([0.3, 0.6, 0.9])),
        )
        for i in range(draw(st.integers(2, 5)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            pipeline=draw(st.sampled_from(["p", "q"])),
            type=(kind := draw(st.sampled_from(list(StageType)))),
            gpus=draw(st.sampled_from([0, 1, 2, 4])),
            throughput_gpus=(throughput := draw(st.sampled_from(THROUGHPUT_CHOICES))),
            gpu_types=(tuple(throughput) if draw(st.booleans()) else ()) if throughput
            else draw(st.sampled_from(GPU_TYPE_CHOICES)),
            replicas=draw(st.integers(1, 6)),
            cores=draw(st.sampled_from([1, 4, 16])),
            memory_gib=draw(st.sampled_from([4, 32])),
            min_replicas_per_cluster=draw(st.integers(1, 3)) if kind is StageType.DEPLOYMENT else 1,
            shared_gpu=draw(st.booleans()),
            jurisdiction=draw(st.sampled_from([None, *JURISDICTIONS])),
        )
        for i in range(draw(st.integers(1, 7)))
    )
    names = [c.name for c in clusters]
    platforms = ()
    if draw(st.booleans()):
        ha = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
        platforms = (make_platform(ha[0], tuple(ha[1:]), pipelines=("p",)),)
    gpu_policy = None
    if draw(st.booleans()):
        gpu_policy = make_gpu_policy(
            time_slicing=draw(st.sampled_from([1, 2, 4])),
            defragment_threshold=draw(st.sampled_from([None, 0.5, 0.8])),
            sharing=draw(st.booleans()),
            max_sharers=draw(st.sampled_from([1, 2, 3])),
        )
    return make_fleet(clusters, stages, platforms=platforms, gpu_policy=gpu_policy)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(fleets())
def test_hard_constraints_always_hold(model: FleetModel) -> None:
    try:
        placement = place(model)
    except PlacementError as error:
        assert error.reasons and all(error.reasons)
        partial = place(model, allow_unplaced=True)
        assert verify(model, partial, allow_unplaced=True) == []
        unplaced = [p for p in partial.stages if not p.assignments]
        assert unplaced and all(p.reason for p in unplaced)
        return
    assert verify(model, placement) == []
    assert placement.objective <= placement.bound


def assignments(placement: Placement) -> dict[str, tuple[tuple[str, int], ...]]:
    return {p.stage: tuple((a.cluster, a.replicas) for a in p.assignments) for p in placement.stages}


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(fleets(), st.randoms(use_true_random=False))
def test_placement_does_not_depend_on_order(model: FleetModel, random: object) -> None:
    clusters, stages = list(model.clusters), list(model.stages)
    random.shuffle(clusters)  # type: ignore[attr-defined]
    random.shuffle(stages)  # type: ignore[attr-defined]
    shuffled = dataclasses.replace(model, clusters=tuple(clusters), stages=tuple(stages))
    expected = assignments(place(model, allow_unplaced=True))
    got = place(shuffled, allow_unplaced=True)
    assert [p.stage for p in got.stages] == [s.key for s in stages]
    assert assignments(got) == expected


@st.composite
def exact_packings(draw: st.DrawFn) -> FleetModel:
    """Clusters whose GPUs (and cores, memory in proportion) are split exactly into gangs."""
    clusters, stages = [], []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from([4, 8, 16]))
        # one node each: the gangs' sizes are arbitrary, not split for nodes (fleetc.nodefit)
        clusters.append(make_cluster(f"c{i}", gpus=gpus, cores=4 * gpus, memory_gib=16 * gpus, gpus_per_node=gpus))
        left = gpus
        while left:
            size = draw(st.integers(1, left))
            replicas = draw(st.sampled_from([r for r in (1, 2, 4) if size % r == 0]))
            stages.append(make_stage(
                f"j{len(stages)}",
                type=draw(st.sampled_from([StageType.TRAINING, StageType.FINETUNING, StageType.EVALUATION])),
                gpus=size // replicas, replicas=replicas, cores=4 * size // replicas,
                memory_gib=16 * size // replicas,
            ))
            left -= size
    order = draw(st.permutations(stages))
    return make_fleet(tuple(clusters), tuple(order))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(exact_packings())
def test_known_full_packings_are_fully_placed(model: FleetModel) -> None:
    placement = place(model)
    assert verify(model, placement) == []
    used = {c.name: 0 for c in model.clusters}
    for p in placement.stages:
        for a in p.assignments:
            used[a.cluster] += a.gpus
    assert used == {c.name: c.gpus for c in model.clusters}


@st.composite
def small_gang_fleets(draw: st.DrawFn) -> FleetModel:
    """Few gangs on few clusters, with every policy feature a gang can meet."""
    clusters = tuple(
        make_cluster(
            f"c{i}", gpus=draw(st.sampled_from([4, 8])), cores=32, memory_gib=256,
            utilization=draw(st.sampled_from([0.0, 0.25])), cordoned=draw(st.integers(0, 4)) == 0,
            jurisdiction=draw(st.sampled_from(JURISDICTIONS)),
        )
        for i in range(draw(st.integers(1, 3)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            type=draw(st.sampled_from([StageType.TRAINING, StageType.EVALUATION, StageType.DATAPROC])),
            gpus=draw(st.sampled_from([0, 1, 2, 4])), replicas=draw(st.integers(1, 2)),
            cores=draw(st.sampled_from([4, 16])), memory_gib=32, shared_gpu=draw(st.booleans()),
            jurisdiction=draw(st.sampled_from([None, *JURISDICTIONS])),
        )
        for i in range(draw(st.integers(1, 4)))
    )
    policy = make_gpu_policy(
        time_slicing=draw(st.sampled_from([1, 2, 4])), sharing=True, max_sharers=draw(st.sampled_from([1, 3])),
        defragment_threshold=draw(st.sampled_from([None, 0.75])),
    )
    return make_fleet(clusters, stages, gpu_policy=policy)


def brute_force_feasible(model: FleetModel) -> bool:
    """Whether any choice of one cluster per gang passes the verifier."""
    for choice in itertools.product(model.clusters, repeat=len(model.stages)):
        candidate = Placement(
            stages=tuple(
                StagePlacement(s.key, (Assignment(c.name, s.replicas, s.total_gpus),), 0.0)
                for s, c in zip(model.stages, choice, strict=True)
            ),
            objective=0.0, bound=0.0, method="brute-force",
        )
        if not verify(model, candidate):
            return True
    return False


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(small_gang_fleets())
def test_a_placement_is_found_whenever_one_exists(model: FleetModel) -> None:
    try:
        place(model)
    except PlacementError:
        assert not brute_force_feasible(model)
    else:
        assert brute_force_feasible(model)


@st.composite
def large_path_fleets(draw: st.DrawFn) -> FleetModel:
    """Fleets where most stages fit but contend for GPUs (so the LP is fractional and the
    rounding has sub-programs to solve): every rule a stage can meet but sovereignty and taints,
    time-slicing with device plugins configured or not, at times failover headroom for the
    multiCluster platform, a team's GPU quota and cost cap and a pipeline's budget."""
    clusters = tuple(
        make_cluster(
            f"c{i}", gpu_type=draw(st.sampled_from(["a100", "h100"])), gpus=(gpus := draw(st.sampled_from([4, 8, 16]))),
            gpus_per_node=draw(st.sampled_from([n for n in (4, 8) if gpus % n == 0])),
            cores=draw(st.sampled_from([32, 128])), memory_gib=draw(st.sampled_from([128, 512])),
            utilization=draw(st.sampled_from([0.0, 0.0, 0.25])), cordoned=draw(st.integers(0, 7)) == 0,
            device_plugin_configured=draw(st.integers(0, 3)) > 0,
            gpu_hour_cost=draw(st.sampled_from([1.0, 2.5, 4.0])), energy_efficiency=draw(st.sampled_from([0.3, 0.9])),
        )
        for i in range(draw(st.integers(2, 4)))
    )
    stages = tuple(
        make_stage(
            f"s{i}", pipeline=draw(st.sampled_from(["p", "q"])),
            type=(kind := draw(st.sampled_from(list(StageType)))),
            gpus=draw(st.sampled_from([0, 1, 2, 4])),
            throughput_gpus=(throughput := draw(st.sampled_from(THROUGHPUT_CHOICES))),
            gpu_types=(tuple(throughput) if draw(st.booleans()) else ()) if throughput
            else draw(st.sampled_from(GPU_TYPE_CHOICES)),
            replicas=draw(st.integers(1, 4)), cores=draw(st.sampled_from([1, 4, 8])),
            memory_gib=draw(st.sampled_from([4, 16])),
            min_replicas_per_cluster=draw(st.integers(1, 2)) if kind is StageType.DEPLOYMENT else 1,
            shared_gpu=draw(st.booleans()),
        )
        for i in range(draw(st.integers(2, 8)))
    )
    platforms = ()
    if draw(st.booleans()):
        ha = draw(st.lists(st.sampled_from([c.name for c in clusters]), min_size=1, max_size=2, unique=True))
        platforms = (dataclasses.replace(make_platform(ha[0], tuple(ha[1:]), pipelines=("p",)),
                                         failover_headroom=draw(st.booleans())),)
    gpu_policy = None
    if draw(st.booleans()):
        gpu_policy = make_gpu_policy(time_slicing=draw(st.sampled_from([2, 4])),
                                     defragment_threshold=draw(st.sampled_from([None, 0.8])))
    teams: tuple[Team, ...] = ()
    budgets: tuple[PipelineBudget, ...] = ()
    if draw(st.booleans()):
        quota = tuple((gpu_type, draw(st.integers(0, 24))) for gpu_type in ("a100", "h100") if draw(st.booleans()))
        teams = (Team("research", "platform", ("p",), quota, (), draw(st.sampled_from([None, 30.0, 90.0])),
                      Source("platform.yaml", "spec.teams[0]")),)
        budgets = (PipelineBudget("q", draw(st.sampled_from([15.0, 60.0])), Source("q.yaml", "spec")),)
    return make_fleet(clusters, stages, platforms=platforms, gpu_policy=gpu_policy, teams=teams, budgets=budgets)


class SubPrograms:
    """The large path watched as it runs. Every sub-program its rounding and reach solve
    (``solve_program``) is checked as it is solved: what it places, beside what the rest
    of its component holds at that moment (the stages it keeps fixed), fits every cluster,
    failover headroom and cap as the rules count them. Every component's LP bound
    (``colgen.solve._bound``, before the placement's objective is folded in) is checked against the
    exact path's objective on the same problem (``cvx.solve``), where column generation counts
    GPUs per pair as the exact program does (else ``optimize`` reports the trivial bound) and
    no serving stage runs degraded."""

    def __init__(self, model: FleetModel) -> None:
        self.model = model
        #: id(program.placement) -> the restricted problem it is the program of; a program
        #: derived by ``dataclasses.replace`` (other bounds: the reach's neighbourhood of
        #: ``_most_valuable_near``) shares its matrices, so it maps to the same problem
        self.built: dict[int, Problem] = {}
        self.component: tuple[Problem, np.ndarray] | None = None  # the component's problem, replicas
        self.bounds: list[float] = []  # what colgen.solve._bound returned, in order
        self.checked = 0
        # each name patched in every module of the large path that calls it (HighsDirect calls
        # program.solve_program, program.solve_neighbourhood program.build_program)
        self.patches = [mock.patch.object(module, name, wrapper(getattr(module, name))) for name, wrapper, modules in (
            ("build_program", self._build, (colgen.rounding, program_module)),
            ("solve_program", self._solve, (colgen.rounding, program_module)),
            ("_round_rest", self._follow_rest, (colgen.rounding,)),
            ("_round_by_lp", self._follow_rest, (colgen.solve,)),
            ("_reach", self._follow_reach, (colgen.rounding, colgen.solve)),
            ("_bound", self._record_bound, (colgen.solve,)))
            for module in modules]
        self.patches.append(mock.patch.object(optimize, "_solve", self._bound_holds(optimize._solve)))

    def __enter__(self) -> SubPrograms:
        for patch in self.patches:
            patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for patch in self.patches:
            patch.stop()

    def _follow_rest(self, original: Callable[..., None]) -> Callable[..., None]:
        def follow(r: colgen.room._Rounding, rest: np.ndarray, replicas_at: np.ndarray) -> None:
            self.component = (r.problem, replicas_at)
            original(r, rest, replicas_at)
        return follow

    def _follow_reach(self, original: Callable[..., bool]) -> Callable[..., bool]:
        def follow(r: colgen.room._Rounding, replicas_at: np.ndarray, is_blocked: np.ndarray) -> bool:
            self.component = (r.problem, replicas_at)
            return original(r, replicas_at, is_blocked)
        return follow

    def _record_bound(self, original: Callable[..., float]) -> Callable[..., float]:
        def record(*args: object, **kwargs: object) -> float:
            self.bounds.append(original(*args, **kwargs))
            return self.bounds[-1]
        return record

    def _bound_holds(self, original: Callable[[Problem, Budget, int], Solved]
                     ) -> Callable[[Problem, Budget, int], Solved]:
        def solve(problem: Problem, budget: Budget, large: int) -> Solved:
            recorded = len(self.bounds)
            solved = original(problem, budget, large)
            exact = cvx.solve(problem, Budget())
            tolerance = 1e-6 * max(1.0, abs(exact.objective))
            # colgen's own bound holds where it counts every pair's GPUs and no stage may run
            # short (its bound keeps a shortfall's penalty); the component's, everywhere
            if len(self.bounds) > recorded and not solver.varying_gpus(problem) \
                    and not (problem.least < problem.replicas).any():
                assert self.bounds[-1] >= exact.objective - tolerance, \
                    f"the large path's bound {self.bounds[-1]} is below the exact objective {exact.objective}"
            assert solved.bound >= exact.objective - tolerance, \
                f"the component's bound {solved.bound} is below the exact objective {exact.objective}"
            return solved
        return solve

    def _build(self, original: Callable[..., Program]) -> Callable[..., Program]:
        def build(problem: Problem, *args: object, **kwargs: object) -> Program:
            program = original(problem, *args, **kwargs)
            self.built[id(program.placement)] = problem
            return program
        return build

    def _solve(self, original: Callable[..., Result]) -> Callable[..., Result]:
        def solve(program: Program, budget: Budget, **kwargs: object) -> Result:
            result = original(program, budget, **kwargs)
            if result.values is not None and kwargs["integral"]:  # an LP's values place nothing as they are
                self._check(program, result.values)
            return result
        return solve

    def _check(self, program: Program, values: np.ndarray) -> None:
        assert self.component is not None
        component, replicas_at = self.component
        sub = self.built[id(program.placement)]
        position = {int(s): i for i, s in enumerate(component.part.stages)}
        mine = [position[int(s)] for s in sub.part.stages]
        fixed = replicas_at.copy()
        fixed[mine] = 0  # the program's stages, wherever they are now, are what it places
        stages, clusters = self.model.stages, self.model.clusters
        placed = [(stages[component.part.stages[s]], clusters[component.part.clusters[c]].name, int(fixed[s, c]))
                  for s, c in zip(*np.nonzero(fixed), strict=True)]
        new = replicas_of(program, values)
        placed += [(stages[sub.part.stages[s]], clusters[sub.part.clusters[c]].name, int(new[s, c]))
                   for s, c in zip(*np.nonzero(new), strict=True)]
        ledger = rules.Ledger(self.model, placed)
        assert ledger.within_caps(), "a sub-program goes over a cap the fixed stages leave"
        # A sub-program's rows count GPUs, cores and memory in total, a relaxation of packing pods
        # onto nodes (docs/optimizer.md): the packing is the repair's (finish.packed), held by
        # the verifier at the end of each test, not by each sub-program.
        with mock.patch.object(rules.ledger, "unpacked", return_value=""):
            over = [clusters[c].name for c in component.part.clusters.tolist() if not ledger.fits(clusters[c].name)]
        assert over == [], f"a sub-program places more than the fixed stages leave on {over}"
        self.checked += 1


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(large_path_fleets())
def test_the_large_path_holds_the_rules(model: FleetModel) -> None:
    """The large path (``large=0``) places what the verifier accepts, each of its sub-programs
    and component bounds holds (:class:`SubPrograms`), and its reported bound is at least the
    exact path's objective."""
    model = optimize._canonical(model)  # as place() numbers it, which the sub-programs' problems follow
    exact = place(model, allow_unplaced=True)
    with SubPrograms(model):
        large = place(model, large=0, allow_unplaced=True)
    assert verify(model, large, allow_unplaced=True) == []
    assert large.method == "colgen-lp-round" or not any(p.assignments for p in exact.stages)
    assert large.bound >= exact.objective - 1e-6 * max(1.0, abs(exact.objective))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(large_path_fleets())
def test_the_large_path_from_the_relaxation_holds_the_rules(model: FleetModel) -> None:
    """The same where the large path places from the LP of the relaxation over kinds of stages
    (``colgen.solve._solve_by_kinds``, forced: every component's LP takes it): its LP rounding,
    repair and gang moves place what the verifier accepts, and its bound (the relaxation's) is
    at least the exact path's objective."""
    _holds_from_the_relaxation(model)


def _holds_from_the_relaxation(model: FleetModel) -> None:
    model = optimize._canonical(model)
    exact = place(model, allow_unplaced=True)
    by_kinds = mock.Mock(wraps=colgen.solve._solve_by_kinds)
    solve_large = mock.Mock(wraps=colgen.solve_large)
    with mock.patch.object(colgen.columns, "WHOLE_LP_PAIRS", 0), mock.patch.object(colgen.solve, "KINDS_PAIRS", 0), \
            mock.patch.object(colgen.solve, "ALIKE_SHARE", 1.0), \
            mock.patch.object(colgen.solve, "_solve_by_kinds", by_kinds), \
            mock.patch.object(colgen, "solve_large", solve_large), SubPrograms(model):
        large = place(model, large=0, allow_unplaced=True)
    assert verify(model, large, allow_unplaced=True) == []
    # A component of one stage has no kinds to group (colgen.solve._alike): it takes column generation.
    sizes = [len(call.args[0].part.stages) for call in solve_large.call_args_list]
    assert sizes or not any(p.assignments for p in exact.stages)
    assert by_kinds.called or not any(size >= 2 for size in sizes)
    assert large.bound >= exact.objective - 1e-6 * max(1.0, abs(exact.objective))


def test_a_component_of_one_stage_beside_an_unplaceable_one_holds_under_the_forced_relaxation() -> None:
    """Hypothesis's saved example of issue 28: a CPU stage alone on the one uncordoned cluster,
    beside a stage asking for a GPU type no cluster has. The exact path places the first; the
    large path's component holds that stage alone, so the relaxation over kinds is not taken
    (there is nothing to group), and the test's premise, not the placement, was wrong."""
    fleet = make_fleet(
        clusters=(make_cluster("c0", gpus=4, gpus_per_node=4, cores=32, memory_gib=128),
                  make_cluster("c1", gpus=4, gpus_per_node=4, cores=32, memory_gib=128, cordoned=True)),
        stages=(make_stage("s0", type=StageType.DATAPROC, gpus=0, cores=1, memory_gib=4),
                make_stage("s1", type=StageType.DATAPROC, gpus=1, gpu_types=("h100",), cores=1, memory_gib=4)),
    )
    _holds_from_the_relaxation(fleet)
