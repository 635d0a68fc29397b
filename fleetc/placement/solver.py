"""One interface for every solver of a component, in the manner of resolvelib's providers: a
:class:`Solver` takes the component's :class:`~fleetc.placement.problem.Problem` and a
:class:`~fleetc.placement.problem.Budget` and returns its placement
(:class:`~fleetc.placement.program.Solved`).

Three implementations. Two place a component and are looked up by method name in
:data:`SOLVERS`: :class:`Exact` (``milp``: the whole MILP through cvxpy, on the ``--solver`` of
the :class:`Budget`, :mod:`fleetc.placement.cvx`) and :class:`ColumnGeneration`
(``colgen-lp-round``: the large path, HiGHS direct, :mod:`fleetc.placement.colgen`);
:func:`solver_for` picks one by the component's size. The third, :class:`Incremental`
(``incremental``, :mod:`fleetc.placement.incremental`), places the whole fleet after a small
change, given the previous placement: it may decline (:class:`Declined`), and then each
component is solved by its solver. :func:`fleet_solver` and :func:`solver_for` are the one
choice among them. Below them a program is solved by a
:class:`~fleetc.placement.program.ProgramSolver` (HiGHS direct or cvxpy), every exact solve in
the same two steps (:func:`~fleetc.placement.program.every_stage_else_most`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

import numpy as np

from fleetc.model import FleetModel
from fleetc.placement import colgen, cvx, incremental
from fleetc.placement.previous import Recorded
from fleetc.placement.problem import Budget, PreviousClusters, Problem, Settings
from fleetc.placement.program import Solved


class Solver(Protocol):
    """Places a problem (one component; the whole fleet for :class:`Incremental`): every stage
    if possible, else the best partial placement, with a bound on the best objective and
    whether what it leaves out is proven out; or raises :class:`Declined` when another solver
    must decide."""

    #: The method a placement it makes names (``Placement.method``).
    method: str

    def solve(self, problem: Problem, budget: Budget) -> Solved: ...


class Exact:
    """The whole MILP of the component, through cvxpy on ``budget.solver``; its LP relaxation is
    the bound (:func:`fleetc.placement.cvx.solve`)."""

    method = "milp"

    def solve(self, problem: Problem, budget: Budget) -> Solved:
        return cvx.solve(problem, budget)


class ColumnGeneration:
    """The large path (:func:`fleetc.placement.colgen.solve_large`): column generation, rounding
    and repair.

    Column generation counts a stage's GPUs per stage, not per pair: a stage asking for
    throughput counts there as the most GPUs any of its types takes
    (:func:`~fleetc.placement.problem.demand_of`), so what it places fits (the verifier checks the
    real counts) but may be less than the best, its bound and its proof that stages cannot be
    placed no longer hold: the bound is then the trivial one (each stage on its best-scoring
    cluster) and nothing left out counts as proven. Its bound also keeps the penalty of a
    serving stage that may run short of replicas (a degraded platform), so it may fall below
    the placement's objective and report a gap of 0 that nothing proved: where a stage may run
    short, the bound is the trivial one too."""

    method = "colgen-lp-round"

    def solve(self, problem: Problem, budget: Budget) -> Solved:
        solved = colgen.solve_large(problem, budget)
        varying = varying_gpus(problem)
        if not varying and not np.any(problem.least < problem.replicas):
            return solved
        bound = float(np.sum(np.where(problem.blocked, 0.0, problem.values * (1.0 + _best_scores(problem)))))
        return replace(solved, bound=max(bound, solved.objective), proven=solved.proven and not varying)


class Declined(Exception):
    """A solver does not take the problem: the next solver in line places it."""


class Incremental:
    """The whole fleet after a small change (:func:`fleetc.placement.incremental.recompile`):
    the stages the change did not touch stay where ``previous`` had them, the rest is solved
    exactly; ``recorded`` says what the previous report recorded of each stage, and with
    ``allow_unplaced`` stages left out before may stay out. The problem is the whole fleet's,
    its ``kept`` the previous placement. It returns a
    :class:`~fleetc.placement.incremental.Recompiled` (what it touched), or declines where the
    full solve must decide (caps, failover headroom, a change too large, a neighbourhood that
    cannot place what the full solve might)."""

    method = "incremental"

    def __init__(self, previous: PreviousClusters, recorded: Mapping[str, Recorded] | None, *,
                 allow_unplaced: bool) -> None:
        self.previous, self.recorded, self.allow_unplaced = previous, recorded, allow_unplaced

    def solve(self, problem: Problem, budget: Budget) -> Solved:
        solved = incremental.recompile(problem, self.previous, self.recorded, budget,
                                       allow_unplaced=self.allow_unplaced)
        if solved is None:
            raise Declined(self.method)
        return solved


#: Each solver by the method it names.
SOLVERS: Mapping[str, Solver] = MappingProxyType({s.method: s for s in (Exact(), ColumnGeneration())})


def solver_for(problem: Problem, large: int) -> Solver:
    """The solver of ``problem``: exact up to ``large`` allowed pairs, else column generation."""
    return SOLVERS[Exact.method if problem.pairs <= large else ColumnGeneration.method]


def fleet_solver(model: FleetModel, settings: Settings, pairs: int, least: int) -> Solver | None:
    """The solver of the whole fleet at once, tried before each component is solved by its own
    (:func:`solver_for`): :class:`Incremental` when ``settings`` give a previous placement of a
    fleet of more than ``least`` allowed pairs (``pairs``; below that the full exact solve is
    fast and proven optimal) whose stages no rows couple across it
    (:func:`fleetc.placement.incremental.coupled`); None otherwise."""
    if not settings.previous or pairs <= least or incremental.coupled(model):
        return None
    return Incremental(settings.previous, settings.recorded, allow_unplaced=settings.allow_unplaced)


def _best_scores(problem: Problem) -> np.ndarray:
    """Each stage's best score on a cluster it is allowed on (-1 where there is none), a block
    of stages at a time (:data:`_STAGE_BLOCK`)."""
    best = np.empty(len(problem.stages))
    for low in range(0, len(problem.stages), _STAGE_BLOCK):
        stages = problem.part.stages[low: low + _STAGE_BLOCK]
        scores = np.where(problem.allowed[low: low + _STAGE_BLOCK],
                          problem.total[np.ix_(stages, problem.part.clusters)], -np.inf)
        best[low: low + len(stages)] = scores.max(axis=1, initial=-1.0)
    return best


def varying_gpus(problem: Problem) -> bool:
    """Whether some stage of ``problem`` takes different GPUs per replica on different clusters
    (a block of stages at a time)."""
    for low in range(0, len(problem.stages), _STAGE_BLOCK):
        stage, cluster = np.nonzero(problem.allowed[low: low + _STAGE_BLOCK])
        stage += low
        if np.any(problem.gpus_at(stage, cluster) != problem.demand[0, stage]):
            return True
    return False


#: Stages whose pairs :func:`varying_gpus` and :func:`_best_scores` look at together: a
#: large fleet's ~10 million pairs at once took several arrays of 80 MB each.
_STAGE_BLOCK = 1024
