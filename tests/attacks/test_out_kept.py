"""Attacks on the folders a plain compile keeps instead of rendering (issue 27, bookkeeping):
what a compile keeps must be byte for byte what it would render, whatever happens to the
output folder between the check of a kept folder and its link into the new tree.

PROMISE (``bookkeeping``): fleetc's records cannot make a compile keep a manifest fleetc did not
render; a file changed in place after the check and before the link is never kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.corpus import read_tree_bytes

from fleetc import emit
from fleetc.compiler import Options, compile_fleet
from fleetc.emit import WriteError, write_tree

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    compiled = compile_fleet(Options(workdir=tmp_path))
    write_tree(tmp_path / "out", compiled.files)
    return tmp_path


@pytest.mark.parametrize("which", ["kept", "unchanged"])
def test_a_file_changed_between_the_check_and_the_link_is_never_kept(workdir: Path, which: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``kept``: a file of a folder kept as it is (checked by its digest, then linked);
    ``unchanged``: a rendered file whose bytes were the same (read, then linked)."""
    compiled = compile_fleet(Options(workdir=workdir, reuse=True))
    assert compiled.kept is not None and compiled.kept.clusters
    kept = {path.rpartition("/")[2] for path in compiled.kept.paths}
    rendered = {path.rpartition("/")[2] for path in compiled.files}
    names = kept - rendered if which == "kept" else rendered - kept
    before = read_tree_bytes(workdir / "out")
    real_link = emit._link
    tampered: list[str] = []

    def link_after_a_write(previous_fd: int, folder_fd: int, name: str) -> bool:
        if not tampered and name in names:  # another process writes the file in place, in the window
            fd = os.open(name, os.O_WRONLY | os.O_APPEND, dir_fd=previous_fd)
            os.write(fd, b"# tampered\n")
            os.close(fd)
            tampered.append(name)
        return real_link(previous_fd, folder_fd, name)

    monkeypatch.setattr(emit, "_link", link_after_a_write)
    try:
        write_tree(workdir / "out", compiled.files, kept=compiled.kept)
    except WriteError as err:
        assert which == "kept" and "changed while this compile ran" in str(err)
        after = read_tree_bytes(workdir / "out")  # the old tree, as the other writer left it
        assert [path for path in after if after[path] != before[path]] == [
            path for path in compiled.kept.paths if path.endswith("/" + tampered[0])][:1]
    else:  # the tampered file was written afresh
        assert which == "unchanged" and read_tree_bytes(workdir / "out") == before
    assert tampered


def _count_rehashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kept folders read and hashed again once linked (``reuse._digest_of`` on the new tree)."""
    from fleetc.emit import reuse

    real, hashed = reuse._digest_of, []

    def counting(out_dir: Path, paths: object, linkable: bool = True, stamps: object = None) -> str | None:
        if not linkable:
            hashed.append(str(out_dir))
        return real(out_dir, paths, linkable, stamps)  # type: ignore[arg-type]

    monkeypatch.setattr(reuse, "_digest_of", counting)
    return hashed


def test_kept_files_unchanged_since_the_check_are_not_hashed_again(workdir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With every file settled (``RACY_NS`` 0: written before the check), a kept file whose
    stamp holds before and after its link is not read again: the recompile writes what a full
    one does, and no kept folder is hashed twice. Written just now (the default 3 s), every
    kept folder is hashed again."""
    from fleetc.emit import reuse

    before = read_tree_bytes(workdir / "out")
    hashed = _count_rehashes(monkeypatch)
    racy = compile_fleet(Options(workdir=workdir, reuse=True))
    assert racy.kept is not None
    write_tree(workdir / "out", racy.files, kept=racy.kept)
    assert len(hashed) == len(racy.kept.clusters) and read_tree_bytes(workdir / "out") == before
    hashed.clear()
    monkeypatch.setattr(reuse, "RACY_NS", 0)
    settled = compile_fleet(Options(workdir=workdir, reuse=True))
    assert settled.kept is not None and settled.kept.clusters
    write_tree(workdir / "out", settled.files, kept=settled.kept)
    assert hashed == [] and read_tree_bytes(workdir / "out") == before


@pytest.mark.parametrize("how", ["appended", "same size, modification time set back"])
def test_a_settled_file_changed_after_the_check_is_never_kept(workdir: Path, how: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept file written in place after the check (while the compile renders) is read and
    hashed again and refused, also when the writer keeps its size and sets its modification
    time back: the change time, which no user sets, shows the write."""
    from fleetc.emit import reuse

    monkeypatch.setattr(reuse, "RACY_NS", 0)
    compiled = compile_fleet(Options(workdir=workdir, reuse=True))
    assert compiled.kept is not None and compiled.kept.clusters
    victim = workdir / "out" / compiled.kept.paths[0]
    info = victim.stat()
    data = victim.read_bytes()
    with victim.open("r+b") as handle:  # in place: the same inode, its mark left as it was
        if how == "appended":
            handle.seek(0, os.SEEK_END)
            handle.write(b"# tampered\n")
        else:
            handle.write(b"#" + data[1:])
    if how != "appended":
        os.utime(victim, ns=(info.st_atime_ns, info.st_mtime_ns))
        assert victim.stat().st_mtime_ns == info.st_mtime_ns and victim.stat().st_size == info.st_size
    hashed = _count_rehashes(monkeypatch)
    with pytest.raises(WriteError, match="changed while this compile ran"):
        write_tree(workdir / "out", compiled.files, kept=compiled.kept)
    assert hashed
