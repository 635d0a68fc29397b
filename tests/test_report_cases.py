"""Exact-text golden tests of the pull-request report (``fleetc diff --base HEAD --format
markdown``) on the bundled example: unchanged, and three changes a reviewer meets (issue 26):
a GPU change (model-training 8 -> 16 GPUs), a drain (the serving cluster cordoned) and a
platform edit that restarts every Job. The expected comments are ``tests/report_cases/*.md``;
after a deliberate change of the report, run ``FLEETC_UPDATE_GOLDEN=1 pytest
tests/test_report_cases.py`` and review the diff in git.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from git import Repo

from fleetc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "report_cases"
UPDATE = os.environ.get("FLEETC_UPDATE_GOLDEN") == "1"


def _edit(path: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        text = (folder / path).read_text()
        assert text.count(old) >= 1, f"{path} has no {old!r}"
        (folder / path).write_text(text.replace(old, new, 1))
    return apply


#: Case name -> the edit of the bundled policies it reviews.
CASES: dict[str, Callable[[Path], None]] = {
    "unchanged": lambda folder: None,
    "gpu-change": _edit("policies/llm-training-pipeline.yaml", "gpu: 8", "gpu: 16"),
    "drain": _edit("policies/fleet.yaml", "  - name: inference-cluster-aliyun\n",
                   "  - name: inference-cluster-aliyun\n    cordoned: true\n"),
    "platform-restart": _edit("policies/aigc-platform.yaml", "trainingPriority: high", "trainingPriority: medium"),
}


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose one commit holds the bundled policies and their out/."""
    folder = tmp_path_factory.mktemp("bundled")
    shutil.copytree(ROOT / "policies", folder / "policies")
    shutil.copytree(ROOT / "out", folder / "out")
    repo = Repo.init(folder)
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    repo.git.add("--all")
    repo.git.commit("--quiet", "--message", "the bundled example")
    return folder


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_report_of_a_change_is_its_golden_comment(case: str, bundled: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "repo"
    shutil.copytree(bundled, folder, symlinks=True)
    CASES[case](folder)
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(cli, ["diff", "--base", "HEAD", "--format", "markdown"])
    assert result.exit_code == 0, result.output
    golden = GOLDEN / f"{case}.md"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(result.stdout, encoding="utf-8")
    assert golden.exists(), f"no {golden.name}: record it with FLEETC_UPDATE_GOLDEN=1"
    assert result.stdout == golden.read_text(encoding="utf-8")
    assert len(result.stdout) <= 65_536


def test_the_danger_flag_fails_exactly_the_dangerous_cases(bundled: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fail-on danger`` is CI's hook for a required label: unchanged passes, a platform
    edit that restarts every Job fails."""
    for case, code in (("unchanged", 0), ("platform-restart", 1)):
        folder = tmp_path / case
        shutil.copytree(bundled, folder, symlinks=True)
        CASES[case](folder)
        monkeypatch.chdir(folder)
        result = CliRunner().invoke(cli, ["diff", "--base", "HEAD", "--fail-on", "danger", "--format", "json"])
        assert result.exit_code == code, (case, result.output)
