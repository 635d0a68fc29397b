"""The placement program in cvxpy (:mod:`fleetc.placement.cvx`): the exact path's solve, on the
solver ``--solver`` names; HiGHS direct (the large path's backend) agrees with it; cvxpy is
imported only when a program is solved."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_scale import model_of

from bench.generate import Spec
from fleetc.cli import cli
from fleetc.compiler import Options, inputs_digest, load_policies
from fleetc.infra.lazyimport import import_cvxpy
from fleetc.placement import cvx, optimize
from fleetc.placement.problem import Budget, problems
from fleetc.placement.program import Program, Result, build_program, solve_program
from fleetc.placement.scoring import score_matrix
from fleetc.placement.solvers import DEFAULT_SOLVER, installed_milp_solvers, solver_label
from fleetc.placement.verify import verify

ROOT = Path(__file__).resolve().parents[1]


def programs(spec: Spec) -> list[Program]:
    """The exact program of every component of a generated fleet."""
    model = optimize._canonical(model_of(spec))
    return [build_program(problem) for problem in problems(model, score_matrix(model), {})[0]]


@pytest.mark.parametrize("spec", [
    Spec(clusters=10, stages=60, load=0.9),
    Spec(clusters=12, stages=80, load=1.0, seed=2),
    Spec(clusters=10, stages=60, load=0.8, platform=True, seed=1),
])
def test_cvxpy_and_highs_direct_reach_the_same_objective(spec: Spec) -> None:
    for program in programs(spec):
        for integral, require_all in ((True, False), (False, False), (False, True)):
            direct = solve_program(program, Budget(), require_all=require_all, integral=integral)
            through = cvx.solve_program(program, Budget(), require_all=require_all, integral=integral)
            assert direct.infeasible == through.infeasible
            if direct.values is None:
                continue
            assert through.values is not None and through.optimal and direct.optimal
            direct_value, through_value = program.objective @ direct.values, program.objective @ through.values
            assert through_value == pytest.approx(direct_value, rel=1e-4 if integral else 1e-7)


def test_the_exact_path_matches_the_large_path_where_it_solves_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of(Spec(clusters=20, stages=300, load=0.9, seed=3))
    monkeypatch.setattr(optimize, "LARGE", 10**9)
    exact = optimize.place(model)
    monkeypatch.setattr(optimize, "LARGE", 0)
    large = optimize.place(model)
    assert (exact.method, large.method) == ("milp", "colgen-lp-round")
    assert large.bound == pytest.approx(exact.bound, rel=1e-5)  # the same LP, two backends
    assert large.objective <= exact.objective * (1 + 1e-4)


@pytest.mark.parametrize("solver", [s for s in ("SCIP", "SCIPY") if s in installed_milp_solvers()])
def test_every_installed_solver_places_the_same_fleet_equally_well(solver: str) -> None:
    model = model_of(Spec(clusters=8, stages=40, load=0.9, seed=4))
    default = optimize.place(model)
    other = optimize.place(model, solver=solver)
    assert verify(model, other) == []
    assert other.objective == pytest.approx(default.objective, rel=1e-4)
    assert other.bound == pytest.approx(default.bound, rel=1e-6)


def test_an_unknown_solver_is_a_usage_error_naming_the_installed_ones(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["compile", str(ROOT / "policies"), "--out", str(tmp_path / "out"),
                                      "--solver", "nosuch"])
    assert result.exit_code == 2
    installed = ", ".join(installed_milp_solvers())
    assert f"error: --solver NOSUCH: not a MILP solver cvxpy finds installed; installed: {installed}\n" \
        in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_solver_and_its_version_are_part_of_the_digest() -> None:
    policies = load_policies([str(ROOT / "policies")]).policies
    assert inputs_digest(policies, Options()) != inputs_digest(policies, Options(solver="SCIPY"))
    highs = solver_label(DEFAULT_SOLVER)
    assert highs.startswith("HIGHS ") and highs.split()[1][0].isdigit()
    assert solver_label("SCIPY").startswith("SCIPY ") and solver_label("SCIPY").endswith(f", {highs}")


def _modules_after(tmp_path: Path, *commands: list[str]) -> list[str]:
    """Run fleetc ``commands`` in order in one fresh process (each must succeed); ``['cvxpy']``
    when the last one imported cvxpy."""
    script = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from fleetc.cli import cli\n"
        f"commands = {[list(c) for c in commands]!r}\n"
        "for command in commands[:-1]:\n"
        "    result = CliRunner().invoke(cli, command)\n"
        "    assert result.exit_code == 0, result.output\n"
        "    for name in [m for m in sys.modules if m.split('.')[0] == 'cvxpy']:\n"
        "        del sys.modules[name]\n"
        "result = CliRunner().invoke(cli, commands[-1])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'cvxpy'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_cvxpy_is_imported_only_when_a_program_is_solved(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    compile_ = ["compile", "policies", "--out", "out"]
    assert _modules_after(tmp_path, ["validate", "policies"]) == []
    assert _modules_after(tmp_path, compile_) == ["cvxpy"]
    assert _modules_after(tmp_path, compile_, [*compile_, "--check"]) == []  # unchanged: given back
    assert _modules_after(tmp_path, compile_, compile_) == []


def test_a_program_solved_before_under_the_budget_is_given_back_not_solved_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget.solved: the same program (byte for byte) under one budget is solved once, and
    what comes back is what the solve found; a changed capacity, another step (every stage
    placed or not) or a new budget solve again; a result a time limit cut short is not kept."""
    program = programs(Spec(clusters=10, stages=60, load=0.9))[0]
    solves: list[bool] = []
    solve = cvx._solve_program

    def counted(*args: object, **kwargs: object) -> object:
        solves.append(True)
        return solve(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cvx, "_solve_program", counted)
    budget = Budget()
    first = cvx.solve_program(program, budget, require_all=False, integral=True)
    again = cvx.solve_program(program, budget, require_all=False, integral=True)
    assert len(solves) == 1 and first.values is not None and again.values is not None
    assert (again.values == first.values).all() and again.optimal == first.optimal
    again.values[:] = -1  # the caller's copy: what the budget keeps stays as solved
    assert (cvx.solve_program(program, budget, require_all=False, integral=True).values == first.values).all()
    assert len(solves) == 1
    cvx.solve_program(program, budget, require_all=True, integral=True)
    cvx.solve_program(dataclasses.replace(program, capacity=program.capacity + 1), budget, require_all=False,
                      integral=True)
    cvx.solve_program(program, Budget(), require_all=False, integral=True)
    assert len(solves) == 4

    monkeypatch.setattr(cvx, "_solve_program", lambda *args, **kwargs: Result(values=first.values, optimal=False))
    cut = Budget()
    cvx.solve_program(program, cut, require_all=False, integral=True)
    assert cut.solved == {}


@pytest.mark.parametrize("spec", [Spec(clusters=10, stages=60, load=1.2, platform=True, seed=1),
                                  Spec(clusters=10, stages=60, load=0.5)], ids=["short-of-room", "roomy"])
def test_a_milp_whose_relaxation_is_infeasible_is_answered_without_the_milp_solver(
        spec: Spec, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first step of an exact solve (every stage placed) through cvxpy answers as the MILP
    solver does, and runs no MILP solver where HiGHS direct finds its LP relaxation infeasible:
    cvxpy solves once per program whose relaxation is feasible."""
    import_cvxpy()
    import cvxpy

    solves: list[bool] = []
    solve = cvxpy.Problem.solve

    def counted(self: cvxpy.Problem, *args: object, **kwargs: object) -> object:
        solves.append(True)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(cvxpy.Problem, "solve", counted)
    found = programs(spec)
    first = [cvx._solve_program(program, Budget(), require_all=True, integral=True, absolute_gap=None)
             for program in found]
    relaxed = sum(not solve_program(program, Budget(), require_all=True, integral=False).infeasible
                  for program in found)
    assert len(solves) == relaxed
    monkeypatch.setattr(cvx, "_every_stage_relaxation_infeasible", lambda *args: False)
    milp = [cvx._solve_program(program, Budget(), require_all=True, integral=True, absolute_gap=None)
            for program in found]
    assert len(solves) == relaxed + len(found)
    assert [r.infeasible for r in first] == [r.infeasible for r in milp]
    for with_relaxation, without in zip(first, milp, strict=True):
        assert (with_relaxation.values is None) == (without.values is None)
        if without.values is not None:
            assert with_relaxation.values is not None and (with_relaxation.values == without.values).all()
    assert any(r.infeasible for r in first) == (spec.load > 1)
