"""Whatever text a policy file holds, fleetc answers with a report and exit 0 or 1, never a
traceback (hypothesis mutates the bundled policies)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted((ROOT / "policies").glob("*.yaml"))
TOKENS = ["", " ", "\t", ":", "- ", "{", "}", "[", "]", "&a ", "*a", "!!binary ", "!x ", "'",
          '"', "#", "---\n", "\n", "null", "-1", "1e400", ".nan", "0x10", "yes", "~", "??",
          "\x00", "\ufeff", "é", "../", "<<: ", "64Gi", "sixty", "100%"]


@st.composite
def mutated_text(draw: st.DrawFn) -> tuple[str, str]:
    """One bundled policy file with a few random splices, deletions and line swaps."""
    path = draw(st.sampled_from(POLICIES))
    text = path.read_text(encoding="utf-8")
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "swap-lines"]))
        if action == "insert":
            text = text[:at] + draw(st.sampled_from(TOKENS) | st.text(max_size=6)) + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 30)):]
        else:
            lines = text.splitlines(keepends=True)
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "".join(lines)
    return path.name, text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_text())
def test_validate_never_crashes(workdir: Path, mutation: tuple[str, str]) -> None:
    policies = workdir / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    shutil.copytree(ROOT / "policies", policies)
    name, text = mutation
    (policies / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    result = CliRunner().invoke(cli, ["validate", str(policies)])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 1:
        assert result.stderr.strip(), "an error exit must say why"
