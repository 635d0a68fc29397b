"""HiGHS called directly (:mod:`fleetc.placement.highs`)."""

from __future__ import annotations

import highspy
import numpy as np
import pytest
import scipy.sparse as sp

from fleetc.placement import highs
from fleetc.placement.colgen import rounding


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


def test_each_kind_of_milp_runs_with_its_heuristics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MILP gets HiGHS's heuristics but those measured to cost time for nothing there, and its
    gap: the most-valuable MILP (solved within an absolute gap) runs without the feasibility
    jump, a rounding MILP (given :data:`~fleetc.placement.colgen.rounding.ROUNDING_OPTIONS`)
    without the root reduced-cost heuristic and within a relative 5e-4, any other with HiGHS's
    own heuristics within a relative 1e-4."""
    if highs._new({}).getOptionValue("mip_heuristic_run_feasibility_jump")[0] != highspy.HighsStatus.kOk:
        pytest.skip("HiGHS before 1.11 has neither heuristic: the options are refused and change nothing")
    made: list[highspy.Highs] = []
    real = highs._new

    def recording(options: dict[str, highs.OptionValue]) -> highspy.Highs:
        made.append(real(options))
        return made[-1]

    monkeypatch.setattr(highs, "_new", recording)
    cost, lower, upper = np.array([-1.0, -2.0]), np.zeros(2), np.ones(2)
    matrix, row_lower, row_upper = sp.csc_matrix(np.array([[1.0, 1.0]])), np.array([-highs.INF]), np.array([1.0])
    integral = np.array([True, True])
    highs.solve(cost, lower, upper, matrix, row_lower, row_upper, integral, None)
    highs.solve(cost, lower, upper, matrix, row_lower, row_upper, integral, None, absolute_gap=0.5)
    highs.solve(cost, lower, upper, matrix, row_lower, row_upper, integral, None, options=rounding.ROUNDING_OPTIONS)

    def option(solver: highspy.Highs, name: str) -> object:
        status, value = solver.getOptionValue(name)
        assert status == highspy.HighsStatus.kOk
        return value

    assert [(option(s, "mip_heuristic_run_feasibility_jump"), option(s, "mip_heuristic_run_root_reduced_cost"),
             option(s, "mip_rel_gap")) for s in made] == [(True, True, 1e-4), (False, True, 0.0), (True, False, 5e-4)]


@pytest.mark.slow
def test_the_rounding_milps_reach_highs_with_the_rounding_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The large path's rounding MILPs (:func:`~fleetc.placement.colgen.rounding._place_what_fits`)
    pass :data:`~fleetc.placement.colgen.rounding.ROUNDING_OPTIONS`; no other solve does."""
    from test_scale import model_of

    from bench.generate import Spec
    from fleetc.placement import optimize

    given: list[object] = []
    real = highs.solve

    def recording(*args: object, **kwargs: object) -> highs.Solution:
        given.append(kwargs.get("options"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(highs, "solve", recording)
    optimize.place(model_of(Spec(clusters=20, stages=200, load=1.0, seed=1)), large=0, allow_unplaced=True)
    assert rounding.ROUNDING_OPTIONS in given
    assert {id(options) for options in given} <= {id(None), id(rounding.ROUNDING_OPTIONS)}
