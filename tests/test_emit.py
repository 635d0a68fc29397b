"""Writing out/: all or nothing, and never a file fleetc did not write."""

from __future__ import annotations

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
    assert found == [Change("edit.yaml", "changed"), Change("gone.yaml", "removed"),
                     Change("new.yaml", "added")]


def test_changes_on_a_missing_folder_adds_everything(tmp_path: Path) -> None:
    assert changes(tmp_path / "out", {"a.yaml": "a\n"}) == [Change("a.yaml", "added")]


def test_a_tampered_record_cannot_reach_outside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_tree(out, {"a.yaml": "a\n"})
    (tmp_path / "precious.txt").write_text("keep\n")
    (out / RECORD).write_text("a.yaml\n../precious.txt\n/etc/passwd\n")
    assert owned_files(out) == {"a.yaml"}
    write_tree(out, {})
    assert (tmp_path / "precious.txt").read_text() == "keep\n"
