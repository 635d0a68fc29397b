"""Which paths of fleetc's record could be fleetc's (:func:`fleetc.emit.could_be_fleetcs`): the
record is a plain file anyone can write, so a line that leaves the output folder, names the
user's folder or fleetc's own records is never taken for one of fleetc's files."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetc.emit import could_be_fleetcs
from fleetc.emit.ownership import _is_safe_relative


def _stays_inside(rel: str) -> bool:
    """The definition, by path normalisation: relative, and naming something below the folder."""
    if not rel or rel.startswith("/"):
        return False
    normal = posixpath.normpath(rel)
    return normal != "." and normal != ".." and not normal.startswith("../") and ".." not in normal.split("/")


@given(st.lists(st.sampled_from(["", ".", "..", "...", "a", "b.yaml", ".x", "x..", "..y"]), min_size=1, max_size=5)
       .map("/".join))
def test_a_path_is_safe_exactly_when_no_part_leaves_the_folder(rel: str) -> None:
    no_parent_part = ".." not in rel.split("/")
    assert _is_safe_relative(rel) == (_stays_inside(rel) and no_parent_part)


@pytest.mark.parametrize(("rel", "fleetcs"), [
    ("clusters/a/workloads/job.yaml", True),
    ("placement.yaml", True),
    (".fleetc/render", True),
    (".fleetc/files", False),  # fleetc's own list of files, never one of them
    (".fleetc/other.yaml", False),
    ("local/a/patch.yaml", False),  # the user's folder
    ("clusters/a/notes.txt", False),  # fleetc renders YAML only
    ("../outside.yaml", False),
    ("clusters/../../outside.yaml", False),
    ("/etc/passwd.yaml", False),
    ("./.yaml", True),
    ("./", False),
    ("clusters/..yaml", True),  # a file's name, not a parent folder
])
def test_only_what_fleetc_renders_inside_the_folder_could_be_fleetcs(rel: str, fleetcs: bool) -> None:
    assert could_be_fleetcs(rel) is fleetcs
