"""Atomic output: a compile killed at any moment leaves the old or the new out/, whole; two
compiles writing one out/ take turns; a killed compile's leftovers go with the next write."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.corpus import read_tree_bytes
from support.output import copy_output

from fleetc import emit
from fleetc.cli import cli
from fleetc.emit import RECORD, write_tree
from fleetc.errors import FleetcError

ROOT = Path(__file__).resolve().parents[1]
OLD = {"placement.yaml": "old\n", "clusters/a/x.yaml": "a\n", "clusters/b/y.yaml": "b\n"}
NEW = {"placement.yaml": "new\n", "clusters/a/x.yaml": "a2\n", "clusters/c/z.yaml": "c\n"}


def expected(files: dict[str, str]) -> dict[str, bytes]:
    return {**{k: v.encode() for k, v in files.items()},
            RECORD: "".join(f"{k}\n" for k in sorted(files)).encode()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".out."))


# --- leftovers of a killed compile --------------------------------------------------------------


def test_the_next_write_removes_a_killed_compiles_staging_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, OLD)
    for name in (".out.fleetc-new-abc123_z", ".out.fleetc-old-def45678"):
        (tmp_path / name / "clusters").mkdir(parents=True)
        (tmp_path / name / "clusters" / "half.yaml").write_text("half\n")
    for name in (".out.backup", ".out.fleetc-notes", ".out.fleetc-new-abc"):  # not fleetc's names
        (tmp_path / name).mkdir()
    write_tree(out, NEW)
    assert read_tree_bytes(out) == expected(NEW)
    assert leftovers(tmp_path) == [".out.backup", ".out.fleetc-new-abc", ".out.fleetc-notes"]


def test_a_compile_killed_between_the_fallback_renames_is_recovered(tmp_path: Path) -> None:
    """Without renameat2 the swap is two renames; killed between them, out/ sits in the old
    staging folder. The next write puts it back first, so files fleetc does not own survive."""
    out = tmp_path / "out"
    write_tree(out, OLD)
    (out / "NOTES.md").write_text("mine\n")
    stranded = tmp_path / ".out.fleetc-old-k1ll3d00"
    stranded.mkdir()
    os.rename(out, stranded / "tree")
    write_tree(out, NEW)
    assert read_tree_bytes(out) == {**expected(NEW), "NOTES.md": b"mine\n"}
    assert leftovers(tmp_path) == []


def test_the_record_of_a_recovered_tree_is_checked_before_it_is_trusted(tmp_path: Path) -> None:
    """A record put back with a stranded tree (above) is the one the write then reads: a line
    naming a file fleetc does not write refuses the write there too, nothing changed."""
    out = tmp_path / "out"
    write_tree(out, OLD)
    (out / "local").mkdir()
    (out / "local" / "notes.yaml").write_text("mine\n")
    with (out / RECORD).open("a") as record:
        record.write("local/notes.yaml\n")
    stranded = tmp_path / ".out.fleetc-old-k1ll3d00"
    stranded.mkdir()
    os.rename(out, stranded / "tree")
    with pytest.raises(FleetcError, match="local/notes.yaml, which fleetc does not write"):
        write_tree(out, NEW)
    assert read_tree_bytes(out)["local/notes.yaml"] == b"mine\n"
    assert read_tree_bytes(out)["clusters/b/y.yaml"] == b"b\n"


KILL_AT = """\
import os, signal, sys
from pathlib import Path
from fleetc import emit
from fleetc.cli import cli

point, count = sys.argv[2], int(sys.argv[3])
calls = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def wrap(name):
    real = getattr(emit, name)
    def wrapper(*args, **kwargs):
        calls.append(name)
        if name == point and calls.count(name) > count:
            die()
        return real(*args, **kwargs)
    setattr(emit, name, wrapper)

for name in ("_write", "_carry_foreign_files", "_match_mode", "_exchange"):
    wrap(name)
if point == "_exchange-after":
    real_exchange = emit._exchange
    def exchange_then_die(a, b):
        real_exchange(a, b)
        die()
    emit._exchange = exchange_then_die
emit.write_tree(Path(sys.argv[1]), {NEW!r})
"""


@pytest.mark.parametrize(("point", "count"), [
    ("_write", 0), ("_write", 2), ("_write", 3), ("_carry_foreign_files", 0), ("_match_mode", 0),
    ("_exchange", 0), ("_exchange-after", 0),
])
def test_a_kill_at_each_step_of_a_write_leaves_old_or_new(tmp_path: Path, point: str,
                                                          count: int) -> None:
    out = tmp_path / "out"
    write_tree(out, OLD)
    script = tmp_path / "kill.py"
    script.write_text(KILL_AT.replace("{NEW!r}", repr(NEW)))
    result = subprocess.run([sys.executable, str(script), str(out), point, str(count)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stderr
    after = read_tree_bytes(out)
    assert after == expected(NEW if point == "_exchange-after" else OLD)
    write_tree(out, NEW)  # the next write succeeds and cleans up
    assert read_tree_bytes(out) == expected(NEW)
    assert leftovers(tmp_path) == []


def compile_command(policies: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "fleetc", "compile", str(policies), "--out", str(out)]


#: How long the compile of the old policies took (set by :func:`two_versions`): kills are spread over it.
COMPILE_SECONDS: list[float] = []


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """Old and new policies, each with the out/ it compiles to; the old one's compile timed."""
    base = tmp_path_factory.mktemp("versions")
    old, new = base / "old", base / "new"
    shutil.copytree(ROOT / "policies", old)
    shutil.copytree(ROOT / "policies", new)
    pipeline = new / "llm-training-pipeline.yaml"
    pipeline.write_text(pipeline.read_text().replace("replicas: 4\n", "replicas: 6\n"))
    for policies in (old, new):
        started = time.monotonic()
        done = subprocess.run(compile_command(policies, base / f"{policies.name}-out"),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        COMPILE_SECONDS.append(time.monotonic() - started)
    assert read_tree_bytes(base / "old-out") != read_tree_bytes(base / "new-out")
    return old, base / "old-out", new, base / "new-out"


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_old_or_new_out(
        tmp_path: Path, two_versions: tuple[Path, Path, Path, Path]) -> None:
    """15 real compiles killed at moments spread over a compile's duration (measured by the
    fixture's compile of the same policies)."""
    _, old_out, new_policies, new_out = two_versions
    old_tree, new_tree = read_tree_bytes(old_out), read_tree_bytes(new_out)
    out = tmp_path / "out"
    copy_output(old_out, out)
    duration = COMPILE_SECONDS[0]
    rng = random.Random(7)
    for i in range(15):
        delay = duration * (0.2 + 0.8 * i / 14) * rng.uniform(0.95, 1.05)
        process = subprocess.Popen(compile_command(new_policies, out), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        after = read_tree_bytes(out)
        assert after in (old_tree, new_tree), f"kill {i} after {delay:.2f}s left a mixed out/"
        if after == new_tree:  # start the next kill from the old tree again
            shutil.rmtree(out)
            copy_output(old_out, out)
    done = subprocess.run(compile_command(new_policies, out), capture_output=True, timeout=300)
    assert done.returncode == 0
    assert read_tree_bytes(out) == new_tree
    assert leftovers(tmp_path) == []


# --- two compiles at once ----------------------------------------------------------------------


@pytest.mark.slow
def test_two_concurrent_compiles_on_one_out_take_turns(
        tmp_path: Path, two_versions: tuple[Path, Path, Path, Path]) -> None:
    old_policies, old_out, new_policies, new_out = two_versions
    out = tmp_path / "out"
    processes = [subprocess.Popen(compile_command(p, out), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for p in (old_policies, new_policies)]
    results = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], results
    assert read_tree_bytes(out) in (read_tree_bytes(old_out), read_tree_bytes(new_out))
    assert leftovers(tmp_path) == []


def hold_lock(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_write_waits_while_another_holds_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, OLD)
    fd = hold_lock(tmp_path)
    writer = threading.Thread(target=write_tree, args=(out, NEW))
    try:
        writer.start()
        writer.join(timeout=0.5)
        assert writer.is_alive(), "the write did not wait for the lock"
        assert read_tree_bytes(out) == expected(OLD)
    finally:
        os.close(fd)
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert read_tree_bytes(out) == expected(NEW)


def test_a_lock_held_too_long_is_a_clear_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    write_tree(out, OLD)
    monkeypatch.setattr(emit, "LOCK_TIMEOUT", 0.2)
    fd = hold_lock(tmp_path)
    try:
        with pytest.raises(FleetcError) as raised:
            write_tree(out, NEW)
    finally:
        os.close(fd)
    assert str(raised.value) == (
        f"{out}: another fleetc has been writing it for more than 0.2s (it holds a lock on "
        f"{tmp_path}); nothing was written")
    assert read_tree_bytes(out) == expected(OLD)
    assert leftovers(tmp_path) == []


def test_the_lock_leaves_no_file_behind(tmp_path: Path) -> None:
    write_tree(tmp_path / "out", OLD)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_full_disk_is_a_clear_error_and_out_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path / "out", OLD)
    real_write = emit._write

    def fill_up(folder_fd: int, name: str, data: bytes) -> None:
        if name == "kustomization.yaml":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(folder_fd, name, data)

    monkeypatch.setattr(emit, "_write", fill_up)
    result = CliRunner().invoke(cli, ["compile", "policies", "--out", "out"])
    assert result.exit_code == 1, result.output
    assert result.stderr.endswith(f"error: cannot write {tmp_path / 'out'}: No space left on "
                                  "device; it was left as it was\n")
    assert "Traceback" not in result.output
    assert read_tree_bytes(tmp_path / "out") == expected(OLD)
    assert leftovers(tmp_path) == []
