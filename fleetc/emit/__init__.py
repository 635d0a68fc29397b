"""Emit stage: the rendered tree -> the output folder, all or nothing.

The new tree is written to a temporary folder beside the output folder
(:mod:`fleetc.emit.staging`) and swapped in at the end, so a compile that fails midway (or is
killed) leaves the previous output as it was. On Linux the swap is one
``renameat2(RENAME_EXCHANGE)`` call; elsewhere two renames.

fleetc writes, keeps and deletes only what it owns (:mod:`fleetc.emit.ownership`: its record
:data:`RECORD`, the user's folder :data:`USER_FOLDER`, the refusals of files it cannot show are
its own). Files someone else put in the output folder are carried over into the new tree, never
deleted, and ``compile --check`` fails on each of them outside :data:`USER_FOLDER`
(:func:`changes`, :mod:`fleetc.emit.check`). A cluster's folder is kept unrendered only when
every file carries its valid mark (:mod:`fleetc.emit.reuse`).

Two compiles writing the same output folder at once take turns: each holds an exclusive
``flock`` on the output folder's parent while it stages and swaps (a lock on the folder itself
would be swapped away with it; a lock file would be one more file beside it). Holding the lock
also means any staging folder found beside the output folder belongs to a compile that was
killed, so it is removed: a SIGKILL leaves garbage only until the next successful write.

Speed (a compile writes ~100,000 small files): files are written folder by folder with
``os.open``/``os.write`` relative to an open folder descriptor (no per-file path parsing or
``mkdir``), and a file whose bytes are the same as in the previous tree is hard-linked from it
instead of written (:func:`_link_unchanged`). Creating an inode is the dominant cost of a write
on ext4 (0.03-1 ms each, far more than the link and the read that proves the bytes equal), and
removing the old tree after the swap then only drops a link instead of freeing an inode (an
unchanged file keeps its inode and modification time, as with ``rsync``). Files
are not fsynced: the guarantee is against a killed or failed compile, not a power cut.

The public names live here (importers use ``fleetc.emit``); the writer's steps stay in this
module, where tests replace them to kill or fail a write at each step.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fleetc.emit.check import ENTRY_POINTS, Change, applied_by, changes, user_files
from fleetc.emit.files import (
    OPEN_FOLDER,
    WriteError,
    current_umask,
    open_previous_folder,
    read_regular,
    walk_files,
)
from fleetc.emit.ownership import (
    RECORD,
    USER_FOLDER,
    could_be_fleetcs,
    is_users,
    owned_files,
    record_text,
    refuse_disowning,
    refuse_unproven_deletions,
)
from fleetc.emit.reuse import check_kept, reusable_folders, stamp_holds, verify_kept
from fleetc.emit.staging import (
    remove_stale_staging,
    restore_stranded,
    staging_prefix,
    stranded_output,
    stranded_previous,
)
from fleetc.errors import FleetcError, UsageError
from fleetc.infra import marks

if TYPE_CHECKING:  # fleetc.render is imported where used: `validate` does not need it
    from fleetc.render.record import Kept

__all__ = [
    "ENTRY_POINTS", "LOCK_TIMEOUT", "RECORD", "USER_FOLDER", "Change", "WriteError", "applied_by", "changes",
    "check_output_folder", "could_be_fleetcs", "is_users", "owned_files", "record_text", "recover_output",
    "reusable_folders", "stranded_output", "user_files", "write_tree",
]

#: Seconds a compile waits for another compile writing the same output folder to finish.
LOCK_TIMEOUT = 120.0
_LOCK_POLL = 0.05
#: How a file of the new tree is created: a new file (never through a link or a symlink).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def write_tree(out_dir: Path, files: Mapping[str, str], policy_roots: Sequence[Path] = (),
               then: Callable[[], None] | None = None, kept: Kept | None = None) -> list[str]:
    """Replace fleetc's files in ``out_dir`` with ``files``, atomically; refuse (before writing
    anything) an output folder :func:`check_output_folder` refuses. A symlinked output folder
    is written through: the swap happens where the link points.

    ``then`` runs once the new tree is in place (``--commit`` commits it); when it raises, the
    previous tree is swapped back before the exception goes on, so ``out_dir`` is as it was.
    ``kept``: files of ``out_dir`` that stay as they are (:func:`reusable_folders` checked them); when
    another compile has written ``out_dir`` since, they are checked again, and the write is
    refused if they changed.

    Returns the files of ``out_dir`` it kept that fleetc does not render, outside the user's
    folder (``compile --check`` fails on each: the caller warns)."""
    named, out_dir = out_dir, _output_path(out_dir, policy_roots)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        with _locked(out_dir):
            _refuse_foreign(out_dir)  # again under the lock: it may have changed since
            remove_stale_staging(out_dir)  # first: a tree it puts back brings its own record
            if kept is not None:
                check_kept(out_dir, kept)
            owned = refuse_disowning(out_dir, named)  # under the lock only: it reads the whole record
            refuse_unproven_deletions(out_dir, files, kept, named, owned)
            return _stage_and_swap(out_dir, files, then, kept, owned)
    except FleetcError:
        raise
    except OSError as err:
        raise WriteError(f"cannot write {out_dir}: {err.strerror or err}; it was left as it "
                         "was") from err


def check_output_folder(out_dir: Path, policy_roots: Sequence[Path] = ()) -> Path:
    """The real path fleetc would write ``out_dir`` at, or :class:`UsageError` when it must not
    write there: ``/``, a folder that is, holds or lies inside one of ``policy_roots``, or a
    folder fleetc did not make (it is neither empty nor holding fleetc's :data:`RECORD`); or
    :class:`FleetcError` when its record names a file fleetc does not write."""
    real = _output_path(out_dir, policy_roots)
    refuse_disowning(real, out_dir)
    return real


def _output_path(out_dir: Path, policy_roots: Sequence[Path]) -> Path:
    """:func:`check_output_folder` without the check of the record's lines, a read of the whole
    record (172,057 lines at 1,000 x 20,000: 0.46 s of CPU), which the writer makes under its
    lock."""
    real = Path(os.path.realpath(out_dir))
    if real == Path(real.anchor):
        raise _refusal(f"{out_dir}: refusing to write the output to the root folder",
                       "name a folder of its own, such as out/")
    for root in policy_roots:
        policies = Path(os.path.realpath(root))
        relation = ("is" if real == policies else "lies inside" if policies in real.parents
                    else "holds" if real in policies.parents else "")
        if relation:
            raise _refusal(f"{out_dir}: refusing to write the output there: it {relation} the "
                           f"policies ({root})",
                           "keep the output folder and the policies apart, such as out/ beside "
                           "policies/")
    _refuse_foreign(real, out_dir)
    return real


def _refuse_foreign(real: Path, named: Path | None = None) -> None:
    """:class:`UsageError` when ``real`` exists and is not empty, or not fleetc's output."""
    named = named or real
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        return
    except OSError as err:
        raise UsageError(f"{named}: cannot be the output folder: {err.strerror or err}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise _refusal(f"{named}: exists and is not a folder; nothing was written",
                       "name a folder for the output")
    try:
        record = os.lstat(real / RECORD)
        ours = stat.S_ISREG(record.st_mode)
    except OSError:
        ours = False
    if not ours and any(os.scandir(real)):
        raise _refusal(f"{named}: refusing to write into a folder fleetc did not make (it is not "
                       f"empty and has no {RECORD}); nothing was written",
                       "name a new or empty folder, or move this folder's files away")


def _refusal(message: str, hint: str) -> UsageError:
    return UsageError(f"{message}\n  hint: {hint}")


def _stage_and_swap(out_dir: Path, files: Mapping[str, str], then: Callable[[], None] | None,
                    kept: Kept | None, recorded: set[str]) -> list[str]:
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(out_dir, "new"), dir=out_dir.parent))
    try:
        previous = out_dir if out_dir.is_dir() else None
        owned = {rel: text for rel, text in files.items() if not is_users(rel)}
        _write_files(staging, owned, previous)
        ours = set(owned)
        if kept is not None and previous is not None:
            verify_kept(staging, kept, out_dir, _keep_files(staging, previous, kept.paths, kept.source.stamps))
            ours.update(kept.paths)
        carried = [] if previous is None else _carry_foreign_files(out_dir, staging, ours, recorded)
        _write_files(staging, {rel: text for rel, text in files.items()
                               if is_users(rel) and not os.path.lexists(staging / rel)}, None)
        _write_files(staging, {RECORD: record_text(ours)}, None)
        _match_mode(staging, out_dir)
        how = _swap(staging, out_dir)
        if then is not None:
            try:
                then()
            except BaseException:
                _swap_back(staging, out_dir, how)
                raise
        return sorted(rel for rel in carried if not is_users(rel))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """Hold the write lock of ``out_dir`` (on its parent), waiting at most :data:`LOCK_TIMEOUT`."""
    fd = os.open(out_dir.parent, os.O_RDONLY)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise FleetcError(
                        f"{out_dir}: another fleetc has been writing it for more than "
                        f"{LOCK_TIMEOUT:g}s (it holds a lock on {out_dir.parent}); "
                        "nothing was written") from None
                time.sleep(_LOCK_POLL)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def recover_output(out_dir: Path) -> bool:
    """Before a compile reads ``out_dir`` (its placement, its folders to keep): put back the
    previous output a killed compile left stranded beside it, under the write lock. Whether
    one was put back."""
    if stranded_previous(out_dir) is None or not out_dir.parent.is_dir():
        return False
    with _locked(out_dir):
        restored = stranded_previous(out_dir) is not None
        restore_stranded(out_dir)
    return restored


def _keep_files(staging: Path, previous: Path, paths: Sequence[str], stamps: Mapping[str, tuple[int, ...]]
                ) -> set[str]:
    """Hard-link the files ``paths`` of the previous tree into the new one (checked byte for byte
    before: :func:`reusable_folders`), or copy them where a link would share more than the old tree's
    inode (see :func:`_link_unchanged`). The paths whose ``stamps`` do not show them unchanged
    since the check, before and after the link (:func:`~fleetc.emit.reuse.stamp_holds`): what
    must be read and hashed again."""
    unproven: set[str] = set()
    by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in paths:
        folder, _, name = rel.rpartition("/")
        by_folder[folder].append(name)
    for folder, names in sorted(by_folder.items()):
        target = os.path.join(staging, folder)
        os.makedirs(target, exist_ok=True)
        folder_fd = os.open(target, OPEN_FOLDER)
        previous_fd = open_previous_folder(previous, folder)
        try:
            for name in names:
                rel, stamp = f"{folder}/{name}", stamps.get(f"{folder}/{name}")
                before = stamp is not None and previous_fd is not None and stamp_holds(previous_fd, name, stamp)
                if previous_fd is not None and _link(previous_fd, folder_fd, name):
                    if not (before and stamp is not None and stamp_holds(folder_fd, name, stamp, linked=True)):
                        unproven.add(rel)
                    continue
                unproven.add(rel)
                data = None if previous_fd is None else read_regular(previous_fd, name)
                if data is None:
                    raise WriteError(f"{previous / folder / name}: removed while this compile ran; nothing was "
                                     "written\n  hint: run fleetc compile again")
                _write(folder_fd, name, data)
        finally:
            os.close(folder_fd)
            if previous_fd is not None:
                os.close(previous_fd)
    return unproven


def _write_files(staging: Path, files: Mapping[str, str], previous: Path | None) -> None:
    """Write ``files`` (relative POSIX paths) under ``staging``, one folder at a time; with
    ``previous`` (the old output folder), link the files it already holds byte for byte."""
    by_folder: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for rel, text in files.items():
        folder, _, name = rel.rpartition("/")
        by_folder[folder].append((name, text))
    umask = current_umask()
    for folder in sorted(by_folder):
        _write_folder(staging, previous, umask, by_folder, folder)


def _write_folder(staging: Path, previous: Path | None, umask: int,
                  by_folder: Mapping[str, list[tuple[str, str]]], folder: str) -> None:
    target = os.path.join(staging, folder)
    os.makedirs(target, exist_ok=True)
    folder_fd = os.open(target, OPEN_FOLDER)
    previous_fd = open_previous_folder(previous, folder)
    try:
        for name, text in sorted(by_folder[folder]):
            data = text.encode("utf-8")
            if previous_fd is None or not _link_unchanged(previous_fd, folder_fd, name, data, umask):
                _write(folder_fd, name, data)
    finally:
        os.close(folder_fd)
        if previous_fd is not None:
            os.close(previous_fd)


def _write(folder_fd: int, name: str, data: bytes) -> None:
    """Create ``name`` in the open folder and write ``data`` to it. A file already there may be
    a link into the old tree, so it is replaced, never written through."""
    try:
        fd = os.open(name, _CREATE, 0o666, dir_fd=folder_fd)
    except FileExistsError:
        os.unlink(name, dir_fd=folder_fd)
        fd = os.open(name, _CREATE, 0o666, dir_fd=folder_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        marks.mark(fd, data)
    finally:
        os.close(fd)


def _link_unchanged(previous_fd: int, folder_fd: int, name: str, data: bytes, umask: int) -> bool:
    """Hard-link ``name`` from the previous tree into the new one when that leaves exactly what
    writing ``data`` would: a linkable file (:func:`_linkable`) with those bytes. Linked first,
    then read through the new link, so a write into the old file before the link is seen.
    False (nothing left behind) otherwise."""
    if not _link(previous_fd, folder_fd, name):
        return False
    if read_regular(folder_fd, name, umask, links=2, mark_if=data) == data:
        return True
    os.unlink(name, dir_fd=folder_fd)
    return False


def _link(previous_fd: int, folder_fd: int, name: str) -> bool:
    try:
        os.link(name, name, src_dir_fd=previous_fd, dst_dir_fd=folder_fd, follow_symlinks=False)
    except OSError:  # no hard links on this filesystem, or the file just went away
        return False
    return True


def _carry_foreign_files(out_dir: Path, staging: Path, rendered: set[str], recorded: set[str]) -> list[str]:
    """Copy the files of ``out_dir`` that are not fleetc's (neither ``rendered`` now nor
    ``recorded`` as its own, :func:`owned_files`) into the new tree; the paths copied."""
    # only the paths the walk finds are looked up in the record
    owned = recorded | {RECORD}
    carried = []
    for rel in walk_files(out_dir):
        if rel not in owned and rel not in rendered:
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out_dir / rel, target, follow_symlinks=False)
            carried.append(rel)
    return carried


def _match_mode(staging: Path, out_dir: Path) -> None:
    """mkdtemp creates 0700; give the new tree the old folder's mode, or the umask default."""
    if out_dir.is_dir():
        mode = out_dir.stat().st_mode & 0o7777
    else:
        mode = 0o777 & ~current_umask()
    staging.chmod(mode)


def _swap(staging: Path, out_dir: Path) -> str:
    """Put ``staging`` at ``out_dir``; afterwards ``staging`` holds the old tree (if any). Returns
    how (``renamed``: there was no old tree; ``exchanged``; ``moved``: into ``staging/tree``)."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return "renamed"
    if _exchange(staging, out_dir):
        return "exchanged"
    old = Path(tempfile.mkdtemp(prefix=staging_prefix(out_dir, "old"), dir=out_dir.parent))
    os.rename(out_dir, old / "tree")
    os.rename(staging, out_dir)
    os.rename(old, staging)  # so the caller's cleanup removes it
    return "moved"


def _swap_back(staging: Path, out_dir: Path, how: str) -> None:
    """Undo :func:`_swap`: the old tree goes back to ``out_dir`` and the new one into ``staging``
    (which the caller removes); with no old tree, ``out_dir`` goes away again."""
    if how == "renamed":
        os.rename(out_dir, staging)
    elif how == "exchanged":
        if not _exchange(staging, out_dir):
            raise OSError(f"cannot swap {staging} back to {out_dir}")
    else:
        os.rename(out_dir, staging / "new")
        os.rename(staging / "tree", out_dir)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux's renameat2; False where unavailable."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    result: int = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0
