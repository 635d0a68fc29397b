"""cvxpy imported without scipy.stats (fleetc.infra.lazyimport): in a fresh interpreter each, since
this one may have imported both already."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # HiGHS may print its banner first


@pytest.mark.slow
def test_cvxpy_is_imported_without_scipy_stats_and_solves() -> None:
    out = run_fresh("""
        import sys
        from fleetc.infra.lazyimport import import_cvxpy
        import_cvxpy()
        imported = "scipy.stats" in sys.modules
        import cvxpy as cp
        x = cp.Variable(2, integer=True, bounds=[0, 3])
        problem = cp.Problem(cp.Maximize(x[0] + 2 * x[1]), [x[0] + x[1] <= 4])
        problem.solve(solver="HIGHS")
        print(imported, round(problem.value), "scipy.stats" in sys.modules)
    """)
    assert out.split() == ["False", "7", "False"]


@pytest.mark.slow
def test_what_cvxpy_took_from_scipy_stats_is_the_real_thing_when_used() -> None:
    out = run_fresh("""
        import sys
        from fleetc.infra.lazyimport import import_cvxpy
        import_cvxpy()
        atom = sys.modules["cvxpy.atoms.quantum_rel_entr"]  # the module, not the atom class of that name
        value = atom.entropy([0.25, 0.75], [0.5, 0.5])
        import scipy.stats
        print(value == scipy.stats.entropy([0.25, 0.75], [0.5, 0.5]), type(sys.modules["scipy.stats"]).__name__,
              scipy.stats.norm.cdf(0.0))
    """)
    assert out.split() == ["True", "module", "0.5"]


@pytest.mark.slow
def test_the_stand_in_gives_any_other_name_from_the_real_module() -> None:
    out = run_fresh("""
        import sys
        from fleetc.infra.lazyimport import _DeferredStats
        sys.modules["scipy.stats"] = stand_in = _DeferredStats("scipy.stats")
        norm = stand_in.norm
        real = sys.modules["scipy.stats"]
        print(real is not stand_in, norm is real.norm, hasattr(stand_in, "__path__"))
    """)
    assert out.split() == ["True", "True", "False"]


@pytest.mark.slow
def test_an_interpreter_that_has_scipy_stats_imports_cvxpy_plainly() -> None:
    out = run_fresh("""
        import sys
        import scipy.stats
        real = sys.modules["scipy.stats"]
        from fleetc.infra.lazyimport import import_cvxpy
        import_cvxpy()
        print(sys.modules["cvxpy.atoms.quantum_rel_entr"].entropy is real.entropy, sys.modules["scipy.stats"] is real)
    """)
    assert out.split() == ["True", "True"]
