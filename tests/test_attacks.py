"""Issue 15's attacks on the command line, each with the exact message and exit code.

The other hardening tests (tests/test_hardening.py) break one policy value at a time; these
attack what is around the policies: the files and folders they are read from, the output folder,
the previous placement, the environment and the terminal. Every case runs the real program in a
subprocess, so what a user sees is what is asserted: no traceback, exit 1 or 2, never 3.

Permissions: the suite runs as root here, where a mode of 000 stops nothing. Cases that need one
to hold run fleetc with the capabilities that bypass file permissions dropped from its bounding
set (``setpriv``), so root is refused as any user would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Drops the capabilities that let root read, write and list whatever the file modes say.
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def fleetc(cwd: Path, *args: str, env: dict[str, str] | None = None, dropped: bool = False,
           timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``python -m fleetc ARGS`` in ``cwd``; with ``dropped``, unable to bypass file modes."""
    command = [sys.executable, "-m", "fleetc", *args]
    if dropped and os.geteuid() == 0:
        command = DROP_DAC + command
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environment.pop("FLEETC_DEBUG", None)
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True,
                            timeout=timeout, **kwargs)  # type: ignore[call-overload]
    assert "Traceback" not in result.stderr, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    return result


def needs_dropped_capabilities() -> None:
    """Skip (fail under CI=true) where root's permission bypass cannot be dropped."""
    if os.geteuid() != 0:
        return
    if shutil.which("setpriv") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("setpriv (util-linux) is needed to run permission tests as root")
        pytest.skip("running as root without setpriv: file modes cannot be made to apply")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working folder holding a copy of the bundled policies."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    return tmp_path


# --- 1. nothing under a policy root is dropped silently -----------------------------------------


def test_an_unreadable_policy_folder_is_an_error(project: Path) -> None:
    needs_dropped_capabilities()
    hidden = project / "policies" / "team-b"
    hidden.mkdir()
    shutil.move(project / "policies" / "customer-service-pipeline.yaml", hidden)
    hidden.chmod(0)
    try:
        for command in ("validate", "compile"):
            result = fleetc(project, command, dropped=True)
            assert (result.returncode, result.stdout) == (1, ""), command
            assert result.stderr == (
                "policies/team-b: error: cannot read folder: Permission denied\n"
                "  hint: let fleetc read it, or move it out of the policy folder\n"
                "1 error in 1 file\n")
        assert not (project / "out").exists()
    finally:
        hidden.chmod(0o755)


def test_an_unreadable_policy_file_is_an_error(project: Path) -> None:
    needs_dropped_capabilities()
    (project / "policies" / "fleet.yaml").chmod(0)
    result = fleetc(project, "validate", dropped=True)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/fleet.yaml: error: cannot read file: Permission denied\n"
                             "1 error in 1 file\n")


def test_a_linked_folder_outside_the_policy_root_is_an_error(project: Path) -> None:
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    shutil.move(project / "policies" / "customer-service-pipeline.yaml", elsewhere)
    (project / "policies" / "team-b").symlink_to(elsewhere)
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/team-b: error: symbolic link points outside the policy folders\n"
                             "  hint: copy the file into the policy folder instead\n"
                             "1 error in 1 file\n")


def test_a_symlink_loop_is_an_error(project: Path) -> None:
    (project / "policies" / "loop").symlink_to("loop")
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/loop: error: symbolic link loop\n"
                             "  hint: remove the link, or point it at a policy file or folder\n"
                             "1 error in 1 file\n")
    result = fleetc(project, "validate", "policies/loop")
    assert (result.returncode, result.stderr) == (2, "error: policies/loop: symbolic link loop\n")


# --- 8. no hangs, no unbounded reads ------------------------------------------------------------


def test_a_fifo_among_the_policies_is_an_error_not_a_hang(project: Path) -> None:
    os.mkfifo(project / "policies" / "pipe.yaml")
    result = fleetc(project, "compile", timeout=60)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("policies/pipe.yaml: error: not a regular file (a FIFO); fleetc never opens one\n"
                             "  hint: policies are regular files; remove it\n"
                             "1 error in 1 file\n")
    assert not (project / "out").exists()


def test_validate_dev_zero_fails_fast(project: Path) -> None:
    result = fleetc(project, "validate", "/dev/zero", timeout=60)  # it never reads: no hang
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("/dev/zero: error: not a regular file (a character device); fleetc never opens one\n"
                             "  hint: policies are regular files; remove it\n"
                             "1 error in 1 file\n")
