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


# --- 2. fleetc writes only into a folder that is empty, absent or its own ------------------------


def tree_state(folder: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under ``folder`` (itself included): mode, owner, link count and bytes."""
    entries = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        entries[path.relative_to(folder).as_posix()] = (info.st_mode, info.st_uid, info.st_nlink, data)
    return entries


REFUSED_FOREIGN = ("error: {out}: refusing to write into a folder fleetc did not make (it is not empty "
                   "and has no .fleetc/files); nothing was written\n"
                   "  hint: name a new or empty folder, or move this folder's files away\n")


def test_a_folder_fleetc_did_not_make_is_refused_untouched(project: Path) -> None:
    home = project / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh").chmod(0o700)
    (home / ".ssh" / "id_ed25519").write_text("key\n")
    (home / "notes").mkdir()
    (home / "notes" / "a.txt").write_text("mine\n")
    os.link(home / "notes" / "a.txt", home / "hardlink.txt")
    before = tree_state(home)
    for args in (["compile", "--out", "home"], ["compile", "--out", "home", "--commit"]):
        result = fleetc(project, *args)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == REFUSED_FOREIGN.format(out="home")
    assert tree_state(home) == before
    assert sorted(p.name for p in project.iterdir()) == ["home", "policies"]


@pytest.mark.parametrize(("out", "message"), [
    ("/", "error: /: refusing to write the output to the root folder\n"
          "  hint: name a folder of its own, such as out/\n"),
    ("policies", "error: policies: refusing to write the output there: it is the policies (policies)\n"),
    ("policies/out", "error: policies/out: refusing to write the output there: it lies inside the "
                     "policies (policies)\n"),
    (".", "error: .: refusing to write the output there: it holds the policies (policies)\n"),
])
def test_the_root_and_the_policy_folders_are_refused(project: Path, out: str, message: str) -> None:
    before = tree_state(project)
    result = fleetc(project, "compile", "--out", out)
    assert (result.returncode, result.stdout) == (2, "")
    if out != "/":
        message += "  hint: keep the output folder and the policies apart, such as out/ beside policies/\n"
    assert result.stderr == message
    assert tree_state(project) == before


def test_an_empty_folder_is_written_and_then_fleetcs_own(project: Path) -> None:
    (project / "out").mkdir()
    assert fleetc(project, "compile").returncode == 0
    (project / "out" / "NOTES.md").write_text("a file of mine beside fleetc's\n")
    assert fleetc(project, "compile").returncode == 0  # its record says fleetc made it
    assert (project / "out" / "NOTES.md").read_text() == "a file of mine beside fleetc's\n"


def test_only_fleetcs_own_temporary_entries_beside_out_are_cleaned_up(project: Path) -> None:
    assert fleetc(project, "compile").returncode == 0
    (project / ".out.fleetc-notes").mkdir()
    (project / ".out.fleetc-notes" / "todo.txt").write_text("keep me\n")
    killed = project / ".out.fleetc-new-k1ll3d00"  # what a compile killed while staging leaves
    (killed / "clusters").mkdir(parents=True)
    assert fleetc(project, "compile").returncode == 0
    assert sorted(p.name for p in project.iterdir()) == [".out.fleetc-notes", "out", "policies"]
    assert (project / ".out.fleetc-notes" / "todo.txt").read_text() == "keep me\n"


def test_a_symlinked_output_folder_is_written_through(project: Path) -> None:
    (project / "real-out").mkdir()
    (project / "out").symlink_to("real-out")
    for _ in range(2):
        result = fleetc(project, "compile")
        assert result.returncode == 0, result.stderr
        assert (project / "out").is_symlink() and os.readlink(project / "out") == "real-out"
    assert (project / "real-out" / "placement.yaml").is_file()
    assert sorted(p.name for p in project.iterdir()) == ["out", "policies", "real-out"]
    assert fleetc(project, "compile", "--check").returncode == 0


def test_an_output_path_too_long_for_the_system_is_a_usage_error(project: Path) -> None:
    out = "x" * 300
    result = fleetc(project, "compile", "--out", out)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {out}: cannot be the output folder: File name too long\n"


# --- 9. deep dependency graphs: no recursion limit ----------------------------------------------


def chain_pipeline(name: str, length: int, *, cycle: bool = False) -> str:
    """A pipeline whose stage i waits for stage i+1 (written in reverse order of running), the
    last stage waiting for the first when ``cycle``."""
    stages = []
    for i in range(length):
        after = (i + 1) % length if cycle else i + 1
        needs = f", dependencies: [{name}{after}]" if cycle or after < length else ""
        stages.append(f"  - {{name: {name}{i}, type: DataProc, resources: {{cpu: 100m, memory: 64Mi}}{needs}}}\n")
    return (f"apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata: {{name: {name}, "
            f"namespace: {name}}}\nspec:\n  stages:\n" + "".join(stages))


def test_a_long_chain_written_in_reverse_order_compiles(project: Path) -> None:
    (project / "policies" / "chain.yaml").write_text(chain_pipeline("s", 1200))
    result = fleetc(project, "compile")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("placed 1207 stages")


def test_a_long_cycle_is_a_policy_error(project: Path) -> None:
    (project / "policies" / "cycle.yaml").write_text(chain_pipeline("c", 1500, cycle=True))
    result = fleetc(project, "validate")
    assert (result.returncode, result.stdout) == (1, "")
    names = " -> ".join(f"c{i}" for i in [*range(1500), 0])
    assert result.stderr == (f"policies/cycle.yaml:6:84: error: spec.stages[0].dependencies: "
                             f"dependency cycle: {names}\n1 error in 1 file\n")


@pytest.mark.parametrize("reads", ["dependencies", "from"])
def test_chains_of_20000_stages_validate_and_resolve(reads: str) -> None:
    """Validation (the cycle search) and resolve (data sovereignty through ``from:``) walk the
    graph on explicit stacks: Python's recursion limit (1,000 frames) never applies."""
    from fleetc.compiler import load_policy_sources
    from fleetc.resolve import resolve

    length = 20_000 if reads == "dependencies" else 15_000  # 15,000 ``from:`` stages fill MAX_NODES
    if reads == "dependencies":
        text = chain_pipeline("s", length)
    else:
        text = chain_pipeline("s", 0) + "".join(
            f"  - {{name: s{i}, type: DataProc, inputs: [{{name: i, from: s{i + 1}.outputs.o}}], "
            f"outputs: [{{name: o, storage: 's3://b/o/'}}]}}\n" for i in range(length - 1)) + (
            f"  - {{name: s{length - 1}, type: DataProc, inputs: [{{name: i, source: "
            f"'s3://b/raw/', location: eu-west-1}}], outputs: [{{name: o, storage: 's3://b/o/'}}]}}\n")
    platform = ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPlatform\nmetadata: {name: p}\n"
                "spec: {security: {dataSovereignty: true}}\n")
    sources = [("fleet.yaml", (ROOT / "policies" / "fleet.yaml").read_bytes()),
               ("chain.yaml", text.encode()), ("platform.yaml", platform.encode())]
    loaded = load_policy_sources(sources, "chain")
    model = resolve(loaded.policies, loaded.where)
    assert len(model.stages) == length
