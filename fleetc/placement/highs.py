"""HiGHS called directly: the large path's backend (:mod:`fleetc.placement.colgen`), whose
matrices go to ``highspy`` as they are.

The exact path solves through cvxpy (:mod:`fleetc.placement.cvx`); the large path cannot: cvxpy
compiles every problem afresh (about 20 s at millions of variables) and cannot warm-start, which
column generation needs (the master LP grows by thousands of columns per round and HiGHS
re-optimises from the previous basis), and the rounding MILPs and the neighbourhood MILPs of
the repair are many small solves where cvxpy's compile would dominate.

Every model is a minimisation (callers negate a maximisation), runs single-threaded with a fixed
seed and no output, so identical input gives identical answers.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from fleetc.errors import InternalError

INF = highspy.kHighsInf

#: Statuses of a solve stopped by a limit: no answer yet, which is not an error.
_LIMITS = (
    highspy.HighsModelStatus.kTimeLimit,
    highspy.HighsModelStatus.kIterationLimit,
    highspy.HighsModelStatus.kSolutionLimit,
    highspy.HighsModelStatus.kInterrupt,
)

#: A HiGHS option's value, as ``Highs.setOptionValue`` takes it.
OptionValue = bool | int | float | str

_OPTIONS: dict[str, OptionValue] = {
    "threads": 1,
    "random_seed": 0,
    "output_flag": False,
    "log_to_console": False,
}


@dataclass(frozen=True, eq=False)
class Solution:
    """Column values, row duals (``reduced cost = cost - A^T row_dual``) and the objective.

    ``values`` is None when HiGHS found nothing; ``optimal`` says it proved optimality.
    """

    values: np.ndarray | None
    row_dual: np.ndarray | None
    objective: float
    optimal: bool
    infeasible: bool


@functools.cache
def silence_banner() -> None:
    """Create the process's first HiGHS object with file descriptor 1 on /dev/null.

    HiGHS prints a banner straight to the process's stdout the first time a solver object is
    created, and fleetc's output must hold only fleetc's text.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _new(options: dict[str, OptionValue]) -> highspy.Highs:
    silence_banner()
    solver = highspy.Highs()  # type: ignore[no-untyped-call]  # highspy's __init__ has no types
    for name, value in {**_OPTIONS, **options}.items():
        solver.setOptionValue(name, value)
    return solver


def _pass(solver: highspy.Highs, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray,
          matrix: sp.csc_matrix, row_lower: np.ndarray, row_upper: np.ndarray,
          integrality: np.ndarray | None = None) -> None:
    """Hand HiGHS the model as arrays, which it copies as they are: a ``HighsLp`` filled field by
    field converts each array element by element (70-120 ms for the 107,729 columns and 512,974
    nonzeros of the master LP at quotas 100 x 2,000, against 5-14 ms). ``integrality`` None: every
    column continuous (an LP)."""
    n_col = len(cost)
    kinds = np.zeros(n_col, dtype=np.int32) if integrality is None else np.asarray(integrality, dtype=np.int32)
    status = solver.passModel(
        n_col, len(row_lower), matrix.nnz, int(highspy.MatrixFormat.kColwise), int(highspy.ObjSense.kMinimize), 0.0,
        np.asarray(cost, dtype=float), np.asarray(lower, dtype=float), np.asarray(upper, dtype=float),
        np.asarray(row_lower, dtype=float), np.asarray(row_upper, dtype=float),
        matrix.indptr[:-1].astype(np.int32), matrix.indices.astype(np.int32), matrix.data.astype(float), kinds)
    if status == highspy.HighsStatus.kError:
        raise InternalError("HiGHS rejected the model")


def _run(solver: highspy.Highs) -> None:
    if solver.run() == highspy.HighsStatus.kError:
        raise InternalError(f"the HiGHS solver failed: {solver.modelStatusToString(solver.getModelStatus())}")


def _solution(solver: highspy.Highs, duals: bool) -> Solution:
    status = solver.getModelStatus()
    if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
        return Solution(None, None, 0.0, optimal=False, infeasible=True)
    info = solver.getInfo()
    optimal = status == highspy.HighsModelStatus.kOptimal
    if info.primal_solution_status != 2:  # 2 = feasible
        if status not in _LIMITS:
            raise InternalError(f"the HiGHS solver ended with status '{solver.modelStatusToString(status)}' "
                                "and no placement")
        return Solution(None, None, 0.0, optimal=False, infeasible=False)
    solution = solver.getSolution()
    values = np.array(solution.col_value)
    row_dual = np.array(solution.row_dual) if duals else None
    return Solution(values, row_dual, float(info.objective_function_value), optimal, False)


class MasterLP:
    """A restricted master LP that keeps its basis while columns are added (column generation).

    Rows are fixed at construction; :meth:`add_columns` appends columns (given as a CSC block
    over the same rows) and :meth:`solve` re-optimises from the last basis with dual simplex.
    """

    def __init__(self, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, matrix: sp.csc_matrix,
                 row_lower: np.ndarray, row_upper: np.ndarray) -> None:
        self._solver = _new({"solver": "simplex", "presolve": "off"})
        _pass(self._solver, cost, lower, upper, matrix, row_lower, row_upper)
        self.columns = len(cost)

    def add_columns(self, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                    matrix: sp.csc_matrix) -> None:
        self._solver.addCols(len(cost), np.asarray(cost, dtype=float), np.asarray(lower, dtype=float),
                             np.asarray(upper, dtype=float), matrix.nnz, matrix.indptr[:-1].astype(np.int32),
                             matrix.indices.astype(np.int32), matrix.data.astype(float))
        self.columns += len(cost)

    def change_costs(self, columns: np.ndarray, cost: np.ndarray) -> None:
        self._solver.changeColsCost(len(columns), columns.astype(np.int32), np.asarray(cost, dtype=float))

    def solve(self, deadline: float | None) -> Solution:
        if deadline is not None:  # HiGHS counts its limit on the object's clock, over every run
            left = max(0.01, deadline - time.monotonic())
            self._solver.setOptionValue("time_limit", self._solver.getRunTime() + left)
        _run(self._solver)
        return _solution(self._solver, duals=True)


#: Options of a MILP solved within an absolute gap: the most-valuable MILP
#: (:func:`fleetc.placement.program.most_valuable`), whose placement its root LP's sub-MIPs find.
#: HiGHS's feasibility jump, run before that LP for a first placement, took 0.08-0.92 s of the
#: 1.0-4.0 s the large ones of ``bench.generate --clusters 100 --stages 2000 --load 0.9 --platform
#: --sovereignty`` take, and none of them ended with a better placement for running it (seeds
#: 0-4, bench/RESULTS.md). HiGHS 1.10 and older have no such heuristic (it came in 1.11, with
#: ERGO-Code/HiGHS#2298): they refuse the option, which :func:`_new` does not read.
_MOST_VALUABLE: dict[str, OptionValue] = {"mip_heuristic_run_feasibility_jump": False}


def solve(cost: np.ndarray, lower: np.ndarray, upper: np.ndarray, matrix: sp.spmatrix,
          row_lower: np.ndarray, row_upper: np.ndarray, integrality: np.ndarray,
          seconds: float | None, absolute_gap: float | None = None, nodes: int | None = None,
          options: Mapping[str, OptionValue] | None = None) -> Solution:
    """Minimise ``cost @ v`` over ``row_lower <= matrix @ v <= row_upper``, bounds and
    integrality (an LP when none is integral), within ``seconds`` (HiGHS's own limit; a solve
    interrupted by it returns its best feasible point, with ``optimal`` False). A MILP stops
    within a relative 1e-4 of optimal, or within ``absolute_gap``, or after ``nodes``
    branch-and-bound nodes (like the time limit, but the same on every machine). ``options``:
    more HiGHS options, those a kind of MILP was measured to solve faster with. Integral values
    come back rounded."""
    chosen: dict[str, OptionValue] = {"mip_rel_gap": 1e-4, **(options or {})}
    if seconds is not None:
        chosen["time_limit"] = max(0.01, seconds)
    if nodes is not None:
        chosen["mip_max_nodes"] = nodes
    if absolute_gap is not None:
        chosen.update(mip_rel_gap=0.0, mip_abs_gap=absolute_gap, **_MOST_VALUABLE)
    solver = _new(chosen)
    _pass(solver, cost, lower, upper, sp.csc_matrix(matrix), row_lower, row_upper,
          integrality if integrality.any() else None)
    _run(solver)
    solution = _solution(solver, duals=False)
    if solution.values is None:
        return solution
    values = np.where(integrality, np.rint(solution.values), solution.values)
    return Solution(values, None, solution.objective, solution.optimal, False)
