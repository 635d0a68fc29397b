"""Proof that a file of the output folder is fleetc's: the mark fleetc puts on every file it
writes, and git's word for a file it did not write here.

fleetc's records (``.fleetc/files``: what it wrote; ``.fleetc/render``: what each cluster's folder
was rendered from) are plain files in the repository, so a pull request can forge them. A
compile acts on them twice: it keeps a cluster's folder as it is instead of rendering it again,
and it deletes what it wrote last time and no longer renders. Neither may take the record's
word: a forged render record would keep a tampered manifest, a planted file record would make
any folder fleetc's to delete.

**The mark.** Every file fleetc writes into a new tree gets the user extended attribute
:data:`MARK`, whose value is the first 16 bytes of the sha256 of its bytes, then its ``st_dev``
and ``st_ino`` (8 bytes each: 32 bytes in all, small enough to live inside an ext4 inode, where
setting it costs no block of its own) (:func:`mark`). A mark
is valid when it equals what the file holds and where it lives now (:func:`is_marked`):

* git carries no extended attributes: a clone, a checkout, a pull request's file has no mark;
* an edit in place changes the bytes, so the digest no longer matches;
* a copy (``cp -a``, ``rsync -X``) or an editor that writes a new file and renames it over the
  old one carries the attribute to another inode, so the inode no longer matches;
* a hard link shares the inode and its attributes: a kept file, linked into the new tree, stays
  marked, and a link's bytes are checked again once linked (``fleetc.emit``), which closes the
  window between the check and the link.

A mark is no secret: whoever can set one can write the output folder as its owner and change
anything in it anyway. What it proves is that no file came to the output folder, or changed
there, except through fleetc's writer on this machine. On a filesystem without user extended
attributes nothing is marked, so nothing is trusted: every cluster's folder is rendered (the
same bytes, only slower), and a deletion needs git's word.

**Git's word** (:func:`committed_as_is`). A fresh clone's output has no marks, yet a compile
after a policy change must delete the files it no longer renders. A file git holds at ``HEAD``
with the very same bytes loses nothing when deleted (``git checkout`` gives it back, and the
deletion shows in ``git status`` for review), so fleetc may delete it; a file that is neither
marked nor committed as it is (untracked, or changed since) is never deleted.

Nothing here imports another module of fleetc.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from collections.abc import Collection
from pathlib import Path

#: The extended attribute of a file fleetc wrote (the ``user.`` namespace: no privilege needed).
MARK = "user.fleetc"
#: Seconds git may take to list what ``HEAD`` holds.
_GIT_TIMEOUT = 120


def mark_value(data: bytes, info: os.stat_result) -> bytes:
    """The mark of a file holding ``data`` with stat ``info``."""
    return hashlib.sha256(data).digest()[:16] + struct.pack("<QQ", info.st_dev, info.st_ino)


def mark(fd: int, data: bytes, info: os.stat_result | None = None) -> None:
    """Mark the open file ``fd``, which holds ``data``, as fleetc's (nothing where the
    filesystem has no user extended attributes: its files are then never trusted)."""
    try:
        os.setxattr(fd, MARK, mark_value(data, info or os.fstat(fd)))
    except OSError:
        pass


def is_marked(fd: int, data: bytes, info: os.stat_result) -> bool:
    """Whether the open file ``fd`` (holding ``data``, with stat ``info``) carries a valid mark."""
    try:
        return os.getxattr(fd, MARK) == mark_value(data, info)
    except OSError:
        return False


def ensure_mark(fd: int, data: bytes, info: os.stat_result) -> None:
    """Mark ``fd`` unless it already carries a valid mark (the caller showed ``data`` is what
    fleetc renders there)."""
    if not is_marked(fd, data, info):
        mark(fd, data, info)


def committed_as_is(folder: Path, paths: Collection[str]) -> set[str]:
    """Those of ``paths`` (relative POSIX paths under ``folder``) that git holds at ``HEAD``
    with the bytes the working tree has: deleting one loses nothing. Empty when ``folder`` is in
    no git repository, git is missing or fails."""
    if not paths:
        return set()
    try:
        held = _git(folder, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", ".")
        changed = _git(folder, "diff", "--name-only", "-z", "--relative", "--no-renames", "HEAD", "--", ".")
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return set()
    return (set(held.split("\0")) - set(changed.split("\0"))) & set(paths)


def _git(folder: Path, *args: str) -> str:
    """What ``git ARGS`` prints, run in ``folder`` (paths relative to it); raises on failure."""
    # the repository is the one holding ``folder`` (a hook's GIT_DIR would make ``folder`` its top)
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    environment |= {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(["git", "-c", "core.quotepath=off", *args], cwd=folder, env=environment,
                          capture_output=True, timeout=_GIT_TIMEOUT, check=True)
    return done.stdout.decode("utf-8")
