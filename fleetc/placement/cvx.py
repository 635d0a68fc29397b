"""The placement program written in cvxpy: how the exact path solves it, on any MILP solver.

The program of one component (:class:`fleetc.placement.program.Program`, ``docs/optimizer.md``)
over its vector ``v = [x | y | u | z | w | k | d]``:

    maximise    objective . v
    subject to  placement @ v == 0          each stage's replicas on its clusters = replicas * z
                usage @ v <= capacity        GPUs, cores, GiB (and shared slots) per cluster,
                                             and packing rows (pods weighed by node patterns)
                linking @ v <= 0             replica split, multiCluster, kept replicas
                lower <= v <= upper, v integral (its LP relaxation for the bound)

The default solver is HiGHS (``HIGHS``); ``fleetc compile --solver NAME`` picks any MILP solver
cvxpy finds installed (``SCIP``, ``GUROBI``, ``CBC``...). cvxpy is imported here only, and only
when a program is solved (:func:`fleetc.infra.lazyimport.import_cvxpy`, without ``scipy.stats``):
``import cvxpy`` costs about half a second even so, which ``validate``, ``--check``
and a compile whose placement is given back never pay. The large path keeps HiGHS direct
(:mod:`fleetc.placement.highs`): its master LP grows by columns and re-optimises from the last
basis, which cvxpy cannot do.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fleetc.errors import InternalError
from fleetc.infra.lazyimport import import_cvxpy
from fleetc.placement import highs
from fleetc.placement.problem import Budget, Problem
from fleetc.placement.program import (
    HighsDirect,
    OutOfTime,
    Program,
    Result,
    Solved,
    build_program,
    every_stage_else_most,
    is_feasible,
    packing_rows,
    replicas_of,
)

#: The most rounds of packing rows (:func:`fleetc.placement.program.packing_rows`) the exact path
#: adds and solves again; a cluster still unpacked after them is repaired by
#: :func:`fleetc.placement.finish.packed`.
PACKING_ROUNDS = 8


def solve(problem: Problem, budget: Budget) -> Solved:
    """The exact path: the whole program of ``problem`` (:func:`build_program`) through cvxpy
    on ``budget.solver`` within ``budget.deadline``: every stage placed if possible, else the
    most valuable placement; its LP relaxation is the bound. Where the placement leaves a
    cluster whose pods do not pack onto its nodes, the packing rows that cut it off are added
    and the program solved again (up to :data:`PACKING_ROUNDS` times). :class:`OutOfTime` when
    the budget ends before a placement is found."""
    program = build_program(problem)
    for _ in range(PACKING_ROUNDS):
        values, require_all = _solve_integral(program, budget)
        cut = packing_rows(problem, program, values)
        if cut is None:
            break
        program = cut
    scored = replace(program, objective=program.score)
    relaxed = solve_program(scored, budget, require_all=require_all, integral=False)
    objective = float(program.score @ values)
    if relaxed.optimal and relaxed.values is not None:
        bound = float(program.score @ relaxed.values)
    else:
        bound = float(np.sum(np.maximum(program.score, 0.0) * program.upper))
    return Solved(replicas_of(program, values), objective, max(bound, objective), "milp")


def _solve_integral(program: Program, budget: Budget) -> tuple[np.ndarray, bool]:
    """The MILP of ``program`` with every stage placed, else (infeasible so) the most valuable
    placement (:func:`every_stage_else_most`); its values, and whether it places every stage.
    :class:`OutOfTime` when the budget ends first."""
    result, require_all = every_stage_else_most(program, budget, CvxpyProgram())
    if result.values is None:
        raise OutOfTime
    return result.values, require_all


@dataclass(frozen=True)
class CvxpyProgram:
    """:func:`solve_program`: a program through cvxpy on ``budget.solver`` (a
    :class:`~fleetc.placement.program.ProgramSolver`)."""

    def __call__(self, program: Program, budget: Budget, *, require_all: bool, integral: bool,
                 absolute_gap: float | None = None) -> Result:
        return solve_program(program, budget, require_all=require_all, integral=integral, absolute_gap=absolute_gap)


def solve_program(program: Program, budget: Budget, *, require_all: bool, integral: bool,
                  absolute_gap: float | None = None) -> Result:
    """Solve ``program`` (its LP relaxation unless ``integral``) through cvxpy on
    ``budget.solver`` within ``budget.deadline``; ``require_all`` fixes every stage's ``z`` to
    1. A MILP stops within a relative 1e-4 of optimal, or within ``absolute_gap``; integral
    values come back rounded. The same call as :func:`fleetc.placement.program.solve_program`
    (HiGHS direct), which ``tests/test_cvx.py`` holds it to.

    A program solved before under the same ``budget`` (:attr:`Budget.solved`) is not solved
    again: when everything the solve hands the solver is the same byte for byte (matrices,
    bounds, objective, integrality, gap, solver; :func:`_identity`), its result is given back.
    That is the result a second solve finds: the solvers run on one thread with a fixed seed,
    and a result the time limit cut short (neither optimal nor proven infeasible) is not kept.
    A sovereign fleet has many parts alike (100 x 2,000: 437 solves of 21 programs)."""
    key = _identity(program, budget.solver, require_all=require_all, integral=integral, absolute_gap=absolute_gap)
    known = budget.solved.get(key)
    if not isinstance(known, Result):
        known = _solve_program(program, budget, require_all=require_all, integral=integral,
                               absolute_gap=absolute_gap)
        if known.optimal or known.infeasible:
            budget.solved[key] = known
    return replace(known, values=None if known.values is None else known.values.copy())


def _identity(program: Program, solver: str, *, require_all: bool, integral: bool,
              absolute_gap: float | None) -> bytes:
    """A digest of everything a solve of ``program`` reads (:func:`_solve_program`)."""
    digest = hashlib.blake2b(repr((solver, require_all, integral, absolute_gap, program.size)).encode(),
                             digest_size=32)
    for array in (program.objective, program.capacity, program.lower, program.upper, program.z, program.blocked):
        digest.update(repr((array.dtype.str, array.shape)).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    for matrix in (program.placement, program.usage, program.linking):
        stored = (matrix.indptr, matrix.indices, matrix.data) if matrix.format in ("csr", "csc") else (
            matrix.tocoo().row, matrix.tocoo().col, matrix.tocoo().data)  # as stored, in its order
        digest.update(repr((matrix.format, matrix.shape)).encode())
        for part in stored:
            digest.update(repr((part.dtype.str, part.shape)).encode())
            digest.update(np.ascontiguousarray(part).tobytes())
    return digest.digest()


def _solve_program(program: Program, budget: Budget, *, require_all: bool, integral: bool,
                   absolute_gap: float | None) -> Result:
    """:func:`solve_program`, solved. The MILP placing every stage is infeasible without a MILP
    solver where its LP relaxation is (:func:`_every_stage_relaxation_infeasible`); the most
    valuable placement, which may leave every stage out, is not checked."""
    if integral and require_all and _every_stage_relaxation_infeasible(program, budget):
        return Result(values=None, optimal=False, infeasible=True)
    import_cvxpy()
    import cvxpy as cp

    solver, deadline = budget.solver, budget.deadline
    lower = program.lower.copy()
    if require_all:
        if program.blocked.any():
            return Result(values=None, optimal=False, infeasible=True)
        lower[program.z] = 1.0
    v = cp.Variable(program.size, integer=integral, bounds=[lower, program.upper])
    problem = cp.Problem(
        cp.Maximize(program.objective @ v),
        [
            cp.Constant(program.placement) @ v == 0,  # each stage's replicas = replicas * z
            cp.Constant(program.usage) @ v <= program.capacity,  # GPUs, cores, GiB, slots per cluster
            cp.Constant(program.linking) @ v <= 0,  # replica split, multiCluster, kept replicas
        ],
    )
    seconds = None if deadline is None else max(0.01, deadline - time.monotonic())
    highs.silence_banner()  # cvxpy's HiGHS interface creates HiGHS objects: the first prints
    try:
        with warnings.catch_warnings():  # "may be inaccurate" after a time limit: is_feasible decides
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=solver, **_options(solver, integral, seconds, absolute_gap))  # type: ignore[no-untyped-call]
    except cp.error.SolverError as error:
        raise InternalError(f"the {solver} solver failed (through cvxpy)") from error
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return Result(values=None, optimal=False, infeasible=True)
    if v.value is None:
        return Result(values=None, optimal=False)
    values = np.asarray(v.value, dtype=float)
    if integral:
        values = np.rint(values)
    if not is_feasible(program, values, lower):
        return Result(values=None, optimal=False)
    return Result(values=values, optimal=problem.status == cp.OPTIMAL)


def _every_stage_relaxation_infeasible(program: Program, budget: Budget) -> bool:
    """Whether the LP relaxation of ``program`` with every stage placed is infeasible, solved
    by HiGHS direct whatever ``budget.solver`` is: then so is the MILP, on
    every solver (:class:`fleetc.placement.program.HighsDirect` with ``relaxation_first`` asks
    the same). The first step of an exact solve (:func:`every_stage_else_most`) is infeasible
    wherever a component cannot place every stage, and its relaxation says so: in a compile of
    ``bench.generate --clusters 50 --stages 1000 --load 0.9 --platform --sovereignty`` (seed 0)
    with its fix lines, 18 of the 21 first steps solved (not given back by
    :attr:`Budget.solved`), every one LP-infeasible; through cvxpy they took 0.44 s of CPU, with
    this check 0.06 s (bench/RESULTS.md). Where the relaxation is feasible, its LP adds about 2 ms
    to a MILP of at most :data:`fleetc.placement.LARGE` pairs."""
    try:
        return HighsDirect()(program, budget, require_all=True, integral=False).infeasible
    except InternalError:  # HiGHS direct failed: the MILP solver answers (and says so where it fails too)
        return False


#: Per solver: its fixed settings (one thread, seed 0, quiet), its names for the MILP's relative
#: and absolute gaps and the time limit (None: it has no such setting), and the keyword cvxpy
#: passes its settings under (None: as keywords of their own).
_SETTINGS: dict[str, tuple[dict[str, Any], str, str | None, str, str | None]] = {
    "HIGHS": ({"threads": 1, "random_seed": 0, "output_flag": False}, "mip_rel_gap", "mip_abs_gap", "time_limit",
              None),
    "SCIP": ({"parallel/maxnthreads": 1, "randomization/randomseedshift": 0}, "limits/gap", "limits/absgap",
             "limits/time", "scip_params"),
    "SCIPY": ({}, "mip_rel_gap", None, "time_limit", "scipy_options"),
}


def _options(solver: str, integral: bool, seconds: float | None, absolute_gap: float | None) -> dict[str, Any]:
    """The solver's own names for one thread, seed 0, the time limit and the MILP gaps; a solver
    not listed here runs with its defaults (no time limit: ``--time-limit`` cannot stop it)."""
    if solver not in _SETTINGS:
        return {}
    fixed, relative, absolute, time_limit, keyword = _SETTINGS[solver]
    options = dict(fixed)
    if integral:
        options[relative] = 0.0 if absolute_gap is not None else 1e-4
        if absolute is not None and absolute_gap is not None:
            options[absolute] = absolute_gap
    if seconds is not None:
        options[time_limit] = seconds
    return options if keyword is None else {keyword: options}
