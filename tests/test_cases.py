"""Golden cases: ``tests/cases/<name>/policies/`` in, ``expected/`` or ``expected_error.txt`` out.

Each case is compiled by the real CLI from inside its folder (so messages name
``policies/...``), with the extra arguments its ``args`` file holds, if any (``--drain a``).
A mismatch fails with a unified diff. To accept new output after a deliberate change,
run ``FLEETC_UPDATE_GOLDEN=1 pytest tests/test_cases.py`` and review the diff in git.
"""

from __future__ import annotations

import difflib
import os
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.corpus import CASES, read_tree

from fleetc.cli import cli

UPDATE = os.environ.get("FLEETC_UPDATE_GOLDEN") == "1"


def tree_diff(expected: dict[str, str], actual: dict[str, str]) -> str:
    lines: list[str] = []
    for rel in sorted(set(expected) | set(actual)):
        lines += difflib.unified_diff(
            expected.get(rel, "").splitlines(keepends=True),
            actual.get(rel, "").splitlines(keepends=True),
            fromfile=f"expected/{rel}" if rel in expected else "/dev/null",
            tofile=f"actual/{rel}" if rel in actual else "/dev/null",
        )
    return "".join(lines)


def compile_case(case: Path, out: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(case)
    args = shlex.split((case / "args").read_text()) if (case / "args").exists() else []
    return CliRunner().invoke(cli, ["compile", "policies", "--out", str(out), *args])


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_case(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = CASES / case
    out = tmp_path / "out"
    result = compile_case(folder, out, monkeypatch)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    error_file = folder / "expected_error.txt"
    expected_dir = folder / "expected"
    if UPDATE:
        if result.exit_code == 0:
            shutil.rmtree(expected_dir, ignore_errors=True)
            shutil.copytree(out, expected_dir)
            error_file.unlink(missing_ok=True)
        else:
            error_file.write_text(result.stderr, encoding="utf-8")
            shutil.rmtree(expected_dir, ignore_errors=True)
    if error_file.exists():
        assert result.exit_code == 1, result.output
        expected = error_file.read_text(encoding="utf-8")
        assert result.stderr == expected, "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), result.stderr.splitlines(keepends=True),
            "expected_error.txt", "stderr"))
        assert not out.exists(), "a failed compile must not create the output folder"
    else:
        assert result.exit_code == 0, result.output
        diff = tree_diff(read_tree(expected_dir), read_tree(out))
        assert not diff, diff


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_validate_agrees_with_compile(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What compile refuses before it places, validate refuses with the same words; what
    validate accepts, compile refuses only for want of a placement (the solver's to find)."""
    folder = CASES / case
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(cli, ["validate", "policies"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    error_file = folder / "expected_error.txt"
    compile_error = error_file.read_text(encoding="utf-8") if error_file.exists() else ""
    if compile_error and not compile_error.startswith("error: no placement satisfies"):
        assert (result.exit_code, result.stderr) == (1, compile_error)
    else:
        assert result.exit_code == 0, result.output
