"""HiGHS called directly (:mod:`fleetc.placement.highs`)."""

from __future__ import annotations

import highspy
import numpy as np
import pytest
import scipy.sparse as sp

from fleetc.placement import highs


@pytest.mark.parametrize("integrality", [None, np.array([True, False, True])])
def test_the_model_reaches_highs_as_given(integrality: np.ndarray | None) -> None:
    """:func:`highs._pass` hands HiGHS its arrays (not a ``HighsLp`` filled field by field):
    HiGHS holds the same costs, bounds, rows and matrix, integral columns where asked, and a
    model without integrality is an LP."""
    cost, lower, upper = np.array([1.0, -2.5, 0.0]), np.array([0.0, -1.0, 0.0]), np.array([1.0, 4.0, highs.INF])
    matrix = sp.csc_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.5, -1.0]]))
    row_lower, row_upper = np.array([-highs.INF, 1.0]), np.array([4.0, 1.0])
    solver = highs._new({})
    highs._pass(solver, cost, lower, upper, matrix, row_lower, row_upper, integrality)
    lp = solver.getLp()
    assert (list(lp.col_cost_), list(lp.col_lower_), list(lp.col_upper_)) == (cost.tolist(), lower.tolist(),
                                                                           upper.tolist())
    assert (list(lp.row_lower_), list(lp.row_upper_)) == (row_lower.tolist(), row_upper.tolist())
    held = sp.csc_matrix((lp.a_matrix_.value_, lp.a_matrix_.index_, lp.a_matrix_.start_), shape=matrix.shape)
    assert (held != matrix).nnz == 0
    integer = [kind == highspy.HighsVarType.kInteger for kind in lp.integrality_]
    assert integer == ([False] * 3 if integrality is None else integrality.tolist())
    highs._run(solver)
    assert solver.getSolution().dual_valid == (integrality is None)  # an LP's solve has duals, a MILP's none
