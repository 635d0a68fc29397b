"""Place every stage on the fleet with a mixed-integer linear program (HiGHS).

This module is the front door (:func:`place`, told what to do by one
:class:`~fleetc.placement.problem.Settings`): it recompiles the fleet incrementally where a previous
placement allows (:mod:`fleetc.placement.incremental`), else splits it into independent components and
solves each (the matrices in :mod:`fleetc.placement.program`, the large-instance path in
:mod:`fleetc.placement.colgen`), each solver chosen in :mod:`fleetc.placement.solver`; merges them,
restores what the solvers relax (:mod:`fleetc.placement.finish`), re-checks the result with
:mod:`fleetc.placement.verify` and explains what cannot be placed (:mod:`fleetc.placement.reasons`).

The formulation, the policy fields it reads and the large-instance path are documented in
``docs/optimizer.md``; in short, variables exist only for (stage, cluster) pairs the filters
allow (:func:`fleetc.placement.scoring.score_matrix`) and form one vector ``v = [x | y | u | z | w | k | d]``:

- ``x[p]`` binary per allowed pair of a gang stage: the whole gang runs on that cluster.
- ``y[p]`` integer in [0, replicas] per allowed pair of a Deployment: replicas served there;
  ``u[p]`` binary says the cluster serves at all, with ``min * u <= y <= replicas * u``.
- ``z[s]`` binary per stage: placed (``sum(replicas placed) = replicas * z``).
- ``w[c]`` integer per cluster, only when GPUs are time-sliced: GPUs given over to shared slots.
- ``k[q]`` integer per Deployment pair that held replicas in the previous placement: replicas
  kept there (``k <= y``, ``k <= previous``), rewarded by the move cost.
- ``d[s]`` integer per serving stage running degraded: replicas it goes short of (at most
  ``replicas - least_replicas``), penalised above anything the rest can gain.

Constraints (all ``scipy.sparse`` matrices times ``v``): per cluster, exclusive GPUs + ``w`` <=
usable GPUs (:func:`fleetc.placement.rules.usable_capacity`: utilisation and defragmentation headroom),
shared slots <= ``slots_per_gpu * w``, cores and GiB <= usable; ``multiCluster`` forces
``u >= z`` on every HA cluster of a serving stage; ``sum(replicas placed) + d = replicas * z``.

Objective: maximise ``sum value_s / replicas_s * (1 + total[s, c])`` per placed replica plus
``move_cost * value_s / replicas_s`` per replica left where the previous placement had it, where
``value_s = class_weight * max(total_gpus, 1)`` (a zero class weight counts as ``EPSILON``).
The reported ``objective`` and ``bound`` leave the move-cost terms out: they measure where the
stages are, not where they were, so the report never depends on the previous placement.

The stage-cluster graph of allowed pairs is split into connected components that are solved
separately and merged in stage order. Every stage must be placed, so each solve fixes ``z = 1``;
when that is infeasible, a second solve lets ``z`` go to 0 (run until within half the smallest
stage value of optimal, so no stage that still fits is left out) and the stages it leaves out
are reported, or returned unplaced with ``allow_unplaced``. ``bound`` is the LP relaxation
(without move costs), a valid upper bound on ``objective``.

Components with more than :data:`LARGE` allowed pairs take the large path (method
``colgen-lp-round``, :func:`fleetc.placement.colgen.solve_large`): column generation solves the LP over every pair
while the master holds only a few per stage (HiGHS directly through :mod:`fleetc.placement.highs`,
warm-started), the stages it places in whole units keep that, a MILP under a deadline places
the rest (growing once into the fixed stages around it when it cannot), a greedy repair with
one-level eviction places what is still out, and what fits nowhere is diagnosed as above. Its
stages are left out only when that repair fails, not by an exact second solve.

HiGHS runs single-threaded with a fixed seed, so identical input gives an identical placement;
only a solve that hits its time limit may end differently from run to run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fleetc.errors import InternalError, PlacementError, SearchLimitError, TimeLimitError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Recompile, Stage, StagePlacement
from fleetc.placement import LARGE, finish, reasons, rules
from fleetc.placement.incremental import INCREMENTAL, Recompiled
from fleetc.placement.problem import (
    Budget,
    Part,
    PreviousClusters,
    Problem,
    Settings,
    multicluster_conflicts,
    previous_matrix,
    problems,
)
from fleetc.placement.program import OutOfTime, Solved
from fleetc.placement.scoring import Scores, score_matrix
from fleetc.placement.solver import Declined, fleet_solver, solver_for
from fleetc.placement.verify import verify


def place(model: FleetModel, settings: Settings | None = None, /, **changes: Any) -> Placement:
    """Place every stage of ``model``, or raise :class:`PlacementError` saying why not.

    ``settings`` (:class:`~fleetc.placement.problem.Settings`; None: the defaults) says what
    the caller asks besides the model; ``changes`` replace its fields by name
    (``place(model, allow_unplaced=True)``). A time-limited solve that found a placement
    returns it (its ``gap`` shows how far from proven optimal it may be, its ``time_limit`` that
    the limit ran out). With a previous placement, a fleet of more than ``settings.incremental``
    allowed pairs is first recompiled incrementally (:func:`fleetc.placement.solver.fleet_solver`),
    else each component is solved by its solver (:func:`fleetc.placement.solver.solver_for`);
    then the placement is finished (:mod:`fleetc.placement.finish`), checked against the rules
    (:func:`fleetc.placement.verify.verify`) and what is left out explained.
    """
    settings = replace(settings or Settings(), **changes)
    if not model.stages:
        return Placement(stages=(), objective=0.0, bound=0.0, method="milp")
    canonical = _canonical(model)
    if canonical != model:
        placed = place(canonical, settings)
        by_key = {p.stage: p for p in placed.stages}
        return replace(placed, stages=tuple(by_key[stage.key] for stage in model.stages))
    deadline = None if settings.time_limit is None else time.monotonic() + settings.time_limit
    budget = settings.budget(deadline)
    scores = score_matrix(model)
    solution = _solve_fleet(model, scores, settings, budget)
    _finish(model, scores, solution, settings.previous, budget)
    unplaced = reasons.unplaced(model, scores, solution.blocked, solution.replicas_at)
    # A solve the deadline cut short ends past it; one that ends past it may just have finished
    # late, and is then only solved again by a later compile without that limit.
    ran_out = settings.time_limit if settings.time_limit is not None and _ran_out(deadline) else None
    if unplaced and not settings.allow_unplaced:
        raise _refusal(model, solution, unplaced, ran_out)
    placement = _placement(model, scores, solution, unplaced, ran_out)
    broken = verify(model, placement, allow_unplaced=settings.allow_unplaced, previous=settings.previous,
                    total=scores.total)
    if broken:
        raise InternalError("the solver's placement breaks hard constraints:\n" + "\n".join(broken))
    return placement


@dataclass(eq=False)
class _Solution:
    """The placement of the whole fleet as the solvers left it, and as :func:`_finish` changes
    it (in place): replicas (S, C), objective and bound (no move-cost terms), the methods that
    placed it, whether what it leaves out is proven out, the stages ``multiCluster`` blocks,
    and what an incremental recompile touched (None: solved in full)."""

    replicas_at: np.ndarray
    objective: float
    bound: float
    methods: set[str]
    proven: bool
    blocked: dict[int, str]
    recompiled: Recompile | None = None


def _solve_fleet(model: FleetModel, scores: Scores, settings: Settings, budget: Budget) -> _Solution:
    """The fleet's solver (:func:`fleetc.placement.solver.fleet_solver`) places it, unless there
    is none or it declines; then each component's solver (:func:`_solve_all`)."""
    pairs = int(scores.allowed.sum()) if settings.previous else 0  # read only with a previous placement
    solver = fleet_solver(model, settings, pairs,
                          INCREMENTAL if settings.incremental is None else settings.incremental)
    if solver is not None:
        blocked = multicluster_conflicts(model, scores)
        whole = Problem.of(model, scores, blocked, previous_matrix(model, settings.previous or {}),
                           Part(np.arange(len(model.stages)), np.arange(len(model.clusters))))
        try:
            solved = solver.solve(whole, budget)
        except Declined:
            pass
        else:
            recompiled = (Recompile(solved.touched, solved.candidates, solved.lp_bound)
                          if isinstance(solved, Recompiled) else None)
            return _Solution(solved.replicas_at, solved.objective, solved.bound, {solved.method}, solved.proven,
                             blocked, recompiled)
    return _solve_all(model, scores, settings, budget)


def _solve_all(model: FleetModel, scores: Scores, settings: Settings, budget: Budget) -> _Solution:
    """Solve every component with its solver (:func:`_solve`)."""
    components, blocked = problems(model, scores, settings.previous or {})
    solution = _Solution(np.zeros(scores.allowed.shape, dtype=np.int32), 0.0, 0.0, set(), True, blocked)
    large = LARGE if settings.large is None else settings.large
    done = len(model.stages) - sum(len(problem.part.stages) for problem in components)  # no cluster allowed
    for problem in components:
        try:
            solved = _solve(problem, budget, large)
        except OutOfTime:
            raise _no_placement(settings.time_limit, budget.deadline) from None
        solution.replicas_at[np.ix_(problem.part.stages, problem.part.clusters)] = solved.replicas_at
        solution.objective += solved.objective
        solution.bound += solved.bound
        solution.methods.add(solved.method)
        solution.proven = solution.proven and solved.proven
        done += len(problem.part.stages)
        budget.on_placed(done, len(model.stages))
    return solution


def _finish(model: FleetModel, scores: Scores, solution: _Solution, previous: PreviousClusters | None,
            budget: Budget) -> None:
    """Restore what the solvers relax (:mod:`fleetc.placement.finish`), in place: the churn rule,
    the packing onto nodes (exactly where packing left stages out of a fresh compile), and the
    replicas degraded serving stages still fit."""
    replicas_at, before = solution.replicas_at, previous or {}
    solution.objective += finish.stay_where_moving_gains_nothing(model, scores, before, replicas_at)
    repacked, left_out = finish.packed(model, scores, replicas_at, before)
    solution.objective += repacked
    if repacked or left_out:  # a stage taken off for packing may have left the room a moved stage had
        solution.objective += finish.stay_where_moving_gains_nothing(model, scores, before, replicas_at)
    if left_out and not previous:
        resolved = finish.packed_exactly(model, scores, replicas_at, budget)
        solution.objective += resolved or 0.0
        left_out = resolved is None
    solution.proven = solution.proven and not left_out
    finish.top_up(model, scores, replicas_at)


def _refusal(model: FleetModel, solution: _Solution, unplaced: Mapping[int, str], ran_out: float | None
             ) -> PlacementError:
    """The error of a placement that leaves ``unplaced`` stages out: the time limit that ran out
    (then nothing is proven), the search's limits (not proven out), or a proof; with what it
    placed."""
    why = list(unplaced.values())
    error: PlacementError
    if ran_out is not None:
        error = TimeLimitError(ran_out, why,
                               hint="raise --time-limit, or pass --allow-unplaced to render what was placed")
    else:
        error = PlacementError(why) if solution.proven else SearchLimitError(why)
    error.refused, error.stages = len(unplaced), len(model.stages)
    replicas_at = solution.replicas_at
    error.placed = {stage.key: {model.clusters[c].name: int(replicas_at[s, c]) for c in np.flatnonzero(replicas_at[s])}
                    for s, stage in enumerate(model.stages) if replicas_at[s].any()}
    return error


def _placement(model: FleetModel, scores: Scores, solution: _Solution, unplaced: Mapping[int, str],
               ran_out: float | None) -> Placement:
    """The placement ``solution`` makes, named by its method (``incremental`` or
    ``colgen-lp-round`` when either placed any of it, else ``milp``), optimal only when the
    exact path proved all of it within the time limit."""
    methods = solution.methods
    objective = round(solution.objective, 6)
    return Placement(
        stages=stage_placements(model, solution.replicas_at, scores.total, unplaced),
        objective=objective,
        bound=round(max(solution.bound, solution.objective), 6),
        method=next((m for m in ("incremental", "colgen-lp-round") if m in methods), "milp"),
        time_limit=ran_out,
        optimal=methods == {"milp"} and solution.proven and ran_out is None and not unplaced,
        recompiled=solution.recompiled,
    )


def _canonical(model: FleetModel) -> FleetModel:
    """The model with clusters sorted by name and stages by key, so the order the policies
    list them in never changes the placement (ties included)."""
    return replace(
        model,
        clusters=tuple(sorted(model.clusters, key=lambda c: c.name)),
        stages=tuple(sorted(model.stages, key=lambda s: s.key)),
    )


def _solve(problem: Problem, budget: Budget, large: int) -> Solved:
    """Solve one component with its solver (:func:`fleetc.placement.solver.solver_for`): all
    stages placed if possible, else the best partial placement; exactly up to ``large`` allowed
    pairs, else by column generation."""
    return solver_for(problem, large).solve(problem, budget)


def _no_placement(time_limit: float | None, deadline: float | None) -> PlacementError:
    """The error of a solve that ended without a placement: the user's time limit ran out, or the
    solver stopped at its own limits (or gave values that break the constraints)."""
    if time_limit is not None and _ran_out(deadline):
        return TimeLimitError(time_limit, ["no placement found yet"], hint="raise --time-limit")
    return PlacementError(["the solver found no placement within its limits"])


def _ran_out(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def stage_placements(model: FleetModel, replicas_at: np.ndarray, total: np.ndarray, unplaced: Mapping[int, str]
                      ) -> tuple[StagePlacement, ...]:
    """Each stage's placement (:func:`_stage_placement`) from one pass over ``replicas_at``:
    a stage on one cluster (most of them) is read from that pair alone, with the same
    arithmetic as the whole row's."""
    stage_of, cluster_of = np.nonzero(replicas_at)
    starts = np.searchsorted(stage_of, np.arange(len(model.stages) + 1)).tolist()
    clusters, counts = cluster_of.tolist(), replicas_at[stage_of, cluster_of].tolist()
    scores = total[stage_of, cluster_of].tolist()
    placements = []
    for s, stage in enumerate(model.stages):
        first, end = starts[s], starts[s + 1]
        if end - first == 1 and counts[first] > 0:
            c, n = clusters[first], counts[first]
            cluster = model.clusters[c]
            placements.append(StagePlacement(
                stage=stage.key, assignments=(Assignment(cluster.name, n, n * rules.on_cluster(stage, cluster).gpus),),
                score=round(n * scores[first] / n, 6), reason=unplaced.get(s, "")))
        else:
            placements.append(_stage_placement(stage, model.clusters, replicas_at[s], total[s], unplaced.get(s, "")))
    return tuple(placements)


def _stage_placement(
    stage: Stage, clusters: tuple[Cluster, ...], replicas: np.ndarray, total: np.ndarray, reason: str
) -> StagePlacement:
    assignments = tuple(
        sorted(
            (
                Assignment(clusters[c].name, int(replicas[c]),
                           int(replicas[c]) * rules.on_cluster(stage, clusters[c]).gpus)
                for c in np.flatnonzero(replicas)
            ),
            key=lambda a: a.cluster,
        )
    )
    placed = int(replicas.sum())
    score = float(replicas @ total) / placed if placed else 0.0
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(score, 6), reason=reason)
