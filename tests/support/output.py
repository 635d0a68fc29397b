"""Copies of an output folder that fleetc trusts as its own (:mod:`fleetc.infra.marks`).

fleetc trusts a file of its output folder (keeps a cluster's folder unrendered, deletes a file it
no longer renders) only when the file carries its mark, which names the file's inode: a plain
copy is no longer marked, as a copy made by anyone else would not be. A test that stands in for
"the output of the previous compile" with a copy marks the copy's files as fleetc's writer
would (:func:`copy_output`); one that means a foreign copy uses :func:`shutil.copytree`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fleetc.emit import RECORD
from fleetc.infra.marks import mark


def copy_output(source: Path, target: Path) -> None:
    """Copy the output folder ``source`` to ``target`` (symlinks as symlinks) and mark the
    copied files fleetc's record lists as fleetc's, as if fleetc had written them there."""
    shutil.copytree(source, target, symlinks=True)
    mark_output(target)


def mark_output(folder: Path) -> None:
    """Mark every regular file ``folder``'s record (:data:`fleetc.emit.RECORD`) lists, and the
    record, as fleetc's own."""
    listed = (folder / RECORD).read_text(encoding="utf-8").splitlines() + [RECORD]
    for rel in listed:
        path = folder / rel
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                mark(fd, path.read_bytes())
            finally:
                os.close(fd)
