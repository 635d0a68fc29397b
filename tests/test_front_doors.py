"""The front doors of :mod:`fleetc.compiler`: one :class:`Options` each, built by the CLI, and
nothing below the CLI reading the environment or the current directory; ``explain`` explains the
placement in out/ instead of solving again."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from git import Repo
from support.output import copy_output

from fleetc.cli import cli
from fleetc.compiler import Options, compile_fleet, diff_fleet, explain_stage
from fleetc.emit import RECORD
from fleetc.errors import FleetcError, PolicyError, SearchLimitError
from fleetc.placement import optimize

ROOT = Path(__file__).resolve().parents[1]
TRAINING = "llm-chinese-training/model-training"
STALE = ("error: cannot explain: out/placement.yaml is stale: it does not hold for these policies (they, "
         "FLEETC_LARGE, the solver's version or fleetc's placement version changed since); run "
         "`fleetc compile` first\n")


def run(*args: str, env: Mapping[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The bundled policies and their current out/, in a folder that is not the working one."""
    folder = tmp_path / "project"
    shutil.copytree(ROOT / "policies", folder / "policies")
    copy_output(ROOT / "out", folder / "out")  # as fleetc wrote it there
    return folder


def tree(folder: Path) -> dict[str, str]:
    """The files a compile renders into ``folder`` (not emit's record of them)."""
    files = {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}
    return {path: text for path, text in files.items() if path != RECORD}


class _Watched(dict[str, str]):
    """The environment, noting every name read."""

    def __init__(self, real: Mapping[str, str]):
        super().__init__(real)
        self.read: list[str] = []

    def __getitem__(self, key: str) -> str:
        self.read.append(key)
        return super().__getitem__(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.append(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.append(str(key))
        return super().__contains__(key)


@contextlib.contextmanager
def sealed(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Watched]:
    """Reading the current directory is an error inside; the environment notes what is read."""
    from fleetc.placement import explain, scoring  # noqa: F401 - imported before, as a CLI run would
    from fleetc.render import render  # noqa: F401

    def no_cwd() -> str:
        raise AssertionError("read the current directory")

    environ = _Watched(os.environ)
    with monkeypatch.context() as patch:
        patch.setattr(os, "getcwd", no_cwd)
        patch.setattr(os, "environ", environ)
        yield environ


def test_compile_and_explain_read_neither_the_current_directory_nor_the_environment(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = Options(workdir=project)
    current = tree(project / "out")
    with sealed(monkeypatch) as environ:
        given_back = compile_fleet(options)  # the committed out/ is current: given back
        solved = compile_fleet(Options(workdir=project, out="elsewhere"))  # no previous: the solver runs
        explanation = explain_stage(TRAINING, options)
    assert [name for name in environ.read if name.startswith("FLEETC")] == []  # pydantic reads its own
    assert given_back.files == current
    assert set(solved.files) == set(current) and solved.previous_ignored == ""
    assert explanation.chosen == ("gpu-cluster-huawei",)


def test_files_are_named_relative_to_the_workdir(project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the working folder is not the project's
    compiled = compile_fleet(Options(workdir=project, paths=(str(project / "policies"),)))
    assert compiled.files == tree(project / "out")  # provenance says policies/..., as from the project
    (project / "policies" / "fleet.yaml").write_text("kind: [\n")
    with pytest.raises(PolicyError) as raised:
        compile_fleet(Options(workdir=project))
    assert {d.path for d in raised.value.diagnostics} == {"policies/fleet.yaml"}


def test_the_large_path_threshold_is_an_option_and_fleetc_large_reaches_it_through_the_cli(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETC_LARGE", "0")  # below the CLI nobody reads it
    assert compile_fleet(Options(workdir=project, out="fresh")).placement.method == "milp"
    assert compile_fleet(Options(workdir=project, out="fresh", large=0)).placement.method == "colgen-lp-round"
    monkeypatch.chdir(project)
    result = run("compile", "--out", "large", env={"FLEETC_LARGE": "0"})
    assert result.exit_code == 0, result.output
    assert "method: colgen-lp-round\n" in (project / "large" / "placement.yaml").read_text()
    assert run("compile", "--out", "large", "--check", env={"FLEETC_LARGE": "0"}).exit_code == 0
    monkeypatch.delenv("FLEETC_LARGE")
    stale = run("compile", "--out", "large", "--check")  # the exact path would place it otherwise
    assert stale.exit_code == 1
    assert stale.stderr.startswith("would change large/placement.yaml\nwarning: ")
    bad = run("compile", "--out", "large", env={"FLEETC_LARGE": "many"})
    assert (bad.exit_code, bad.stderr) == (2, "error: FLEETC_LARGE='many': expected a whole number of "
                                              "stage-cluster pairs (0 sends every component down the large path)\n")


def test_explain_reads_the_placement_in_out_and_never_solves(project: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def no_solving(*args: object, **kwargs: object) -> None:
        raise AssertionError("explain solved again")

    monkeypatch.setattr(optimize, "place", no_solving)
    monkeypatch.chdir(project)
    result = run("explain", TRAINING)
    assert result.exit_code == 0, result.output
    assert "chosen: gpu-cluster-huawei" in result.stdout


def test_explain_takes_the_solver_the_placement_records(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A placement compiled with --solver is explained as it is, not called stale: its digest is
    worked out with the solver placement.yaml names (which the default's does not)."""
    from fleetc.placement.solvers import installed_milp_solvers

    solver = "SCIP" if "SCIP" in installed_milp_solvers() else "SCIPY"  # scipy comes with cvxpy
    monkeypatch.chdir(project)
    assert "solver:" not in (project / "out" / "placement.yaml").read_text()
    compiled = run("compile", "--solver", solver)
    assert compiled.exit_code == 0, compiled.output
    assert f"\nsolver: {solver}\nmethod: milp\n" in (project / "out" / "placement.yaml").read_text()
    explained = run("explain", TRAINING)
    assert (explained.exit_code, explained.stderr) == (0, "")
    assert "chosen: gpu-cluster-huawei" in explained.stdout
    assert run("compile", "--check", "--solver", solver).exit_code == 0
    assert run("compile", "--check").exit_code == 1  # HiGHS would have to solve it again


def test_explain_says_when_out_is_stale_or_missing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    fleet = project / "policies" / "fleet.yaml"
    original = fleet.read_text()
    fleet.write_text(original.replace("trainingWeight: 0.6", "trainingWeight: 0.5").replace(
        "inferenceWeight: 0.3", "inferenceWeight: 0.4"))
    assert fleet.read_text() != original
    stale = run("explain", TRAINING)
    assert (stale.exit_code, stale.stderr) == (1, STALE)
    fleet.write_text(original)
    assert run("explain", TRAINING).exit_code == 0
    drained = run("compile", "--drain", "edge-cluster-factory")
    assert drained.exit_code == 0, drained.output
    assert (run("explain", TRAINING).exit_code, run("explain", TRAINING).stderr) == (
        1, "error: cannot explain: out/placement.yaml was compiled with --drain edge-cluster-factory, this explain "
           "runs without --drain; give explain --drain edge-cluster-factory to explain it, or run `fleetc compile` "
           "first\n")
    shutil.rmtree(project / "out")
    missing = run("explain", TRAINING)
    assert (missing.exit_code, missing.stderr) == (
        1, "error: cannot explain: out/placement.yaml does not exist; run `fleetc compile` first\n")
    (project / "out").mkdir()
    (project / "out" / "placement.yaml").write_text("stages: [\n")
    with pytest.raises(FleetcError) as raised:
        explain_stage(TRAINING, Options(workdir=project))
    assert str(raised.value).startswith("cannot explain: out/placement.yaml: ignored as the previous placement: ")


def test_diff_is_one_front_door_and_names_the_side_that_failed(project: Path) -> None:
    repo = Repo.init(project)
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    repo.git.add("--all")
    repo.git.commit("--quiet", "--message", "policies and out")
    options = Options(workdir=project)
    assert not diff_fleet("HEAD", options).changed
    (project / "policies" / "fleet.yaml").write_text("kind: [\n")
    with pytest.raises(PolicyError) as raised:
        diff_fleet("HEAD", options)
    assert raised.value.side == "in the working tree"


def test_a_search_out_of_budget_exits_1_with_the_message_the_readme_states(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The large path's search (tests/test_scale.py makes it run out) ends in exit 1, its own
    headline and the --allow-unplaced hint, nothing written; the README says both."""
    headline = "the search found no placement of every stage within its budget (it did not prove that none exists)"

    def out_of_budget(*args: object, **kwargs: object) -> None:
        raise SearchLimitError([f"{TRAINING}: left out where the search had put the others"])

    monkeypatch.setattr(optimize, "place", out_of_budget)
    monkeypatch.chdir(project)
    result = run("compile", "--out", "fresh")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (f"error: {headline}:\n  {TRAINING}: left out where the search had put the others\n"
                             "  hint: pass --allow-unplaced to render what was placed\n"
                             f"  fix: {TRAINING}: it fits on gpu-cluster-huawei beside what is placed there now (the "
                             "search stopped short); or ask for t4 instead of a100 (gpuType) (it fits on "
                             "inference-cluster-aliyun)\n")
    assert not (project / "fresh").exists()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"(`{headline}`)" in readme
    assert "| 1 | policy errors, no placement satisfies the hard constraints (or the large path's search found " \
           "none within its budget)" in readme

