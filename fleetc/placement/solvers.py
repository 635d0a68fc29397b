"""Which MILP solver the exact path runs on (``fleetc compile --solver NAME``), checked and
labelled without importing cvxpy or the solver: ``fleetc validate`` and a compile whose
placement is given back import neither (:mod:`fleetc.placement.cvx` solves).
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from fleetc.errors import UsageError

#: The solver of the exact path unless ``--solver`` names another.
DEFAULT_SOLVER = "HIGHS"

#: The Python distribution behind each solver cvxpy names, for the solver's version in the
#: placement digest (without importing it). Others are recorded by name alone.
_DISTRIBUTIONS = {
    "HIGHS": "highspy", "SCIP": "PySCIPOpt", "SCIPY": "scipy", "GUROBI": "gurobipy", "CBC": "cylp",
    "GLPK_MI": "cvxopt", "CPLEX": "cplex", "MOSEK": "Mosek", "XPRESS": "xpress", "COPT": "coptpy",
}


def solver_label(name: str) -> str:
    """``HIGHS 1.16.0``: what the placement digest records of the solver (a new release may
    place differently), read from the installed distribution's metadata (no import). The large
    path runs on HiGHS whatever the exact path's solver: its version is part of the default's
    label only, the label of another solver names both."""
    label = f"{name} {_version(_DISTRIBUTIONS.get(name, ''))}".rstrip()
    return label if name == DEFAULT_SOLVER else f"{label}, {DEFAULT_SOLVER} {_version('highspy')}"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution) if distribution else ""
    except metadata.PackageNotFoundError:
        return ""


def installed_milp_solvers() -> list[str]:
    """The mixed-integer solvers cvxpy finds installed, sorted."""
    from cvxpy.reductions.solvers.defines import INSTALLED_MI_SOLVERS

    return sorted(INSTALLED_MI_SOLVERS)


def check_solver(name: str) -> None:
    """Raise a :class:`UsageError` naming the installed MILP solvers unless ``name`` is one.

    The default is checked without importing cvxpy (about a second, and the large path never
    needs it): cvxpy (1.6 or later, a dependency) runs HiGHS whenever highspy is installed."""
    if name == DEFAULT_SOLVER and importlib.util.find_spec("highspy") is not None:
        return
    installed = installed_milp_solvers()
    if name not in installed:
        raise UsageError(f"--solver {name}: not a MILP solver cvxpy finds installed; "
                         f"installed: {', '.join(installed) or 'none'}")
