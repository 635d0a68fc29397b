"""Writing out/: all or nothing, and never a file fleetc did not write."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetc import emit
from fleetc.emit import RECORD, Change, changes, owned_files, write_tree


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_first_write_creates_the_folder_and_the_record(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "out"
    write_tree(out, {"b.yaml": "b\n", "clusters/c1/a.yaml": "a\n"})
    assert tree(out) == {"b.yaml": "b\n", "clusters/c1/a.yaml": "a\n",
                         RECORD: "b.yaml\nclusters/c1/a.yaml\n"}
    assert owned_files(out) == {"b.yaml", "clusters/c1/a.yaml"}


def test_rewrite_drops_stale_files_and_keeps_foreign_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"clusters/c1/a.yaml": "a\n", "clusters/c2/b.yaml": "b\n"})
    (out / "README.md").write_text("mine\n")
    (out / "clusters" / "c2" / "notes.txt").write_text("also mine\n")
    write_tree(out, {"clusters/c1/a.yaml": "a2\n"})
    assert tree(out) == {"clusters/c1/a.yaml": "a2\n", "README.md": "mine\n",
                         "clusters/c2/notes.txt": "also mine\n", RECORD: "clusters/c1/a.yaml\n"}


def test_no_staging_folders_are_left_behind(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "1\n"})
    write_tree(out, {"a.yaml": "2\n"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failure_while_writing_leaves_the_old_tree(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "old\n"})
    before = tree(out)

    def broken_swap(staging: Path, target: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(emit, "_swap", broken_swap)
    with pytest.raises(OSError):
        write_tree(out, {"a.yaml": "new\n", "b.yaml": "new\n"})
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_swap_without_renameat2_still_replaces_the_tree(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emit, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "old\n"})
    write_tree(out, {"a.yaml": "new\n"})
    assert tree(out) == {"a.yaml": "new\n", RECORD: "a.yaml\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_changes_lists_added_changed_and_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"same.yaml": "s\n", "edit.yaml": "e\n", "gone.yaml": "g\n"})
    (out / "foreign.yaml").write_text("not ours\n")
    found = changes(out, {"same.yaml": "s\n", "edit.yaml": "E\n", "new.yaml": "n\n"})
    # the record changes too (it names gone.yaml, not new.yaml); foreign.yaml stays: only a
    # person can remove it, and until then out/ is not what fleetc renders
    assert found == [Change(RECORD, "changed"), Change("edit.yaml", "changed"),
                     Change("foreign.yaml", "unrendered"), Change("gone.yaml", "removed"),
                     Change("new.yaml", "added")]


def test_changes_on_a_missing_folder_adds_everything(tmp_path: Path) -> None:
    assert changes(tmp_path / "out", {"a.yaml": "a\n"}) == [Change(RECORD, "added"), Change("a.yaml", "added")]


def test_a_tampered_record_cannot_reach_outside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "a\n"})
    (tmp_path / "precious.txt").write_text("keep\n")
    (out / RECORD).write_text("a.yaml\n../precious.txt\n/etc/passwd\n")
    assert owned_files(out) == {"a.yaml"}
    write_tree(out, {})
    assert (tmp_path / "precious.txt").read_text() == "keep\n"


def test_unchanged_files_are_linked_from_the_previous_tree_and_changed_ones_written(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"same.yaml": "s\n", "clusters/c1/edit.yaml": "e\n"})
    same, edited = (out / "same.yaml").stat(), (out / "clusters/c1/edit.yaml").stat()
    write_tree(out, {"same.yaml": "s\n", "clusters/c1/edit.yaml": "E\n"})
    assert (out / "same.yaml").stat().st_ino == same.st_ino
    assert (out / "same.yaml").stat().st_nlink == 1  # the old tree's link is gone
    assert (out / "clusters/c1/edit.yaml").stat().st_ino != edited.st_ino
    assert tree(out) == {"same.yaml": "s\n", "clusters/c1/edit.yaml": "E\n",
                         RECORD: "clusters/c1/edit.yaml\nsame.yaml\n"}


def test_a_file_also_linked_elsewhere_is_written_afresh(tmp_path: Path) -> None:
    """Linking it would make out/ share an inode with a file outside: editing that one in place
    would change out/."""
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "a\n"})
    (tmp_path / "elsewhere.yaml").hardlink_to(out / "a.yaml")
    write_tree(out, {"a.yaml": "a\n"})
    assert (out / "a.yaml").stat().st_ino != (tmp_path / "elsewhere.yaml").stat().st_ino
    (tmp_path / "elsewhere.yaml").write_text("edited\n")
    assert (out / "a.yaml").read_text() == "a\n"


def test_a_symlink_in_the_previous_tree_is_never_linked_through(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "a\n", "sub/b.yaml": "b\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.yaml").write_text("a\n")
    (outside / "b.yaml").write_text("b\n")
    (out / "a.yaml").unlink()
    (out / "a.yaml").symlink_to(outside / "a.yaml")
    shutil.rmtree(out / "sub")
    (out / "sub").symlink_to(outside)
    write_tree(out, {"a.yaml": "a\n", "sub/b.yaml": "b\n"})
    for rel, target in (("a.yaml", "a.yaml"), ("sub/b.yaml", "b.yaml")):
        assert not (out / rel).is_symlink()
        assert (out / rel).stat().st_ino != (outside / target).stat().st_ino
    assert tree(out)["sub/b.yaml"] == "b\n"


def test_a_file_written_again_replaces_a_link_into_the_old_tree(tmp_path: Path) -> None:
    """A name already in the new tree may be a link into the old one: writing it must replace
    that link, not write through it (the old tree is out/ until the swap)."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "a.yaml").write_text("old\n")
    (new / "a.yaml").hardlink_to(old / "a.yaml")
    folder = emit.os.open(new, emit.os.O_RDONLY)
    try:
        emit._write(folder, "a.yaml", b"new\n")
    finally:
        emit.os.close(folder)
    assert (old / "a.yaml").read_text() == "old\n"
    assert (new / "a.yaml").read_text() == "new\n"
