"""The output folder on disk, read without following links: a file of the previous tree, its
folder opened one component at a time, whether a hard link would keep it as it is, every entry
under a folder; and the error of a write that failed.

Shared by the writer (:mod:`fleetc.emit`), ``--check`` (:mod:`fleetc.emit.check`), what fleetc
owns (:mod:`fleetc.emit.ownership`) and the folders a compile keeps (:mod:`fleetc.emit.reuse`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from fleetc.errors import FleetcError
from fleetc.infra import marks

#: How a file of the previous tree is read: never through a symlink, never blocking on a FIFO.
_READ_PREVIOUS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class WriteError(FleetcError, OSError):
    """The output folder could not be written (a full disk, no permission); it is unchanged.

    An ``OSError`` too, so callers that catch those keep working."""


def read_regular(folder_fd: int, name: str, linkable_under: int | None = None, links: int = 1, *,
                  marked: bool = False, mark_if: bytes | None = None) -> bytes | None:
    """The bytes of the regular file ``name`` in the open folder; None where there is none, or
    with ``linkable_under`` (a umask) where it is not :func:`_linkable` (with ``links`` links), or
    with ``marked`` where it carries no valid mark (:mod:`fleetc.infra.marks`). With ``mark_if``:
    a file holding those bytes (what fleetc renders there) is marked as fleetc's."""
    found = read_regular_stat(folder_fd, name, linkable_under, links, marked=marked, mark_if=mark_if)
    return None if found is None else found[0]


def read_regular_stat(folder_fd: int, name: str, linkable_under: int | None = None, links: int = 1, *,
                      marked: bool = False, mark_if: bytes | None = None) -> tuple[bytes, os.stat_result] | None:
    """:func:`read_regular`, with the file's stat as it was read."""
    try:
        fd = os.open(name, _READ_PREVIOUS, dir_fd=folder_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) if linkable_under is None else _linkable(info, linkable_under, links)):
            return None
        data = _read_all(fd, info.st_size)
        if marked and not marks.is_marked(fd, data, info):
            return None
        if mark_if is not None and data == mark_if:
            marks.ensure_mark(fd, data, info)
        return data, info
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    data = os.read(fd, size + 1)  # one read, unless the file grew since fstat
    if len(data) <= size:
        return data
    chunks = [data]
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def read_file(path: Path, marked: bool = False) -> bytes | None:
    """The bytes of the regular file ``path``, never through a symlink (None otherwise; with
    ``marked``, also where it carries no valid mark)."""
    try:
        folder_fd = os.open(path.parent, OPEN_FOLDER)
    except OSError:
        return None
    try:
        return read_regular(folder_fd, path.name, marked=marked)
    finally:
        os.close(folder_fd)


def open_previous_folder(previous: Path | None, folder: str) -> int | None:
    """A descriptor of ``previous/folder``, opened one component at a time without following
    symlinks (a linked file must come from inside the old tree); None when there is none."""
    if previous is None:
        return None
    try:
        fd = os.open(previous, OPEN_FOLDER)
    except OSError:
        return None
    for part in folder.split("/") if folder else ():
        try:
            child = os.open(part, OPEN_FOLDER | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            child = None
        os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def _linkable(info: os.stat_result, umask: int, links: int = 1) -> bool:
    """Whether a file of the previous tree may become the new tree's by a hard link: a regular
    file of ours with the mode a new file gets, whose only link is the old tree's (else the new
    tree would share an inode with a file elsewhere, and an edit there would change out/), or
    with ``links`` 2, the old tree's and the new one's."""
    return (stat.S_ISREG(info.st_mode) and info.st_nlink == links and stat.S_IMODE(info.st_mode) == 0o666 & ~umask
            and info.st_uid == os.geteuid())


def current_umask() -> int:
    """The process's umask (read by setting it and back: there is no other way)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def walk_files(root: Path) -> Iterator[str]:
    """Every file under ``root`` as a relative POSIX path, as ``os.walk`` finds them (a symlink
    to a folder is neither followed nor a file), with string work only: out/ is big."""
    stack = [("", os.fspath(root))]
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.is_dir():
                    yield prefix + entry.name
                elif not entry.is_symlink():
                    stack.append((f"{prefix}{entry.name}/", entry.path))


def scan_entries(root: Path, under: str = "") -> Iterator[tuple[str, str]]:
    """Every entry under ``root/under`` that is not a folder, as (relative POSIX path, ``file``
    for a regular file or ``link`` for anything else: a symlink, also to a folder, a FIFO, a
    device); symlinks are never followed."""
    stack = [(under, os.path.join(root, under))]
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((f"{prefix}{entry.name}/", entry.path))
                else:
                    yield prefix + entry.name, "file" if entry.is_file(follow_symlinks=False) else "link"
