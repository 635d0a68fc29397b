"""The cluster folders a compile may keep instead of rendering them again: those whose files
are as the render record (:mod:`fleetc.render.record`) says and carry fleetc's valid mark,
checked again under the write lock and once linked into the new tree.

Once linked, a file is read and hashed again unless its stamp (:func:`file_stamp`) shows it is
the very file read and hashed by the check, unchanged since: the same inode, size and times,
its change time (which no user can set) the same just before the link and its modification
time the same just after it. A write between the check and the link changes both; a write
after the link reaches the new tree as any write to out/ after the compile does. Files changed
shortly before the check are read again all the same (:data:`RACY_NS`).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fleetc.emit.files import WriteError, current_umask, open_previous_folder, read_regular_stat
from fleetc.emit.ownership import RECORD, owned_files

if TYPE_CHECKING:  # fleetc.render is imported where used: `validate` does not need it
    from fleetc.render.record import Kept, Reusable

def reusable_folders(out_dir: Path) -> Reusable:
    """The cluster folders of ``out_dir`` whose layers hold exactly the files its render record
    (:mod:`fleetc.render.record`) says they do, read and hashed: what a compile may keep instead
    of rendering. Empty when there is no record or it cannot be read; a folder with a file
    missing or changed by hand, or one a hard link would not keep as it is (another link to
    it, another mode or owner), is left out (rendered again)."""
    from fleetc.render.record import RENDER_RECORD, Reusable, layer_prefixes, parse_record

    try:
        identity = _identity(out_dir)
        folders = parse_record((out_dir / RENDER_RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return Reusable()
    by_cluster: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(owned_files(out_dir)):
        parts = rel.split("/")
        if len(parts) == 4 and parts[0] == "clusters" and rel.startswith(layer_prefixes(parts[1])):
            by_cluster[parts[1]].append(rel)
    stamps: dict[str, tuple[int, ...]] = {}
    settled = time.time_ns() - RACY_NS
    checked = {name: folder for name, folder in folders.items()
               if by_cluster.get(name) and _digest_of(out_dir, by_cluster[name], stamps=stamps) == folder.files}
    paths = {name: tuple(by_cluster[name]) for name in checked}
    return Reusable(checked, paths, identity,
                    {rel: stamps[rel] for name in checked for rel in paths[name] if max(stamps[rel][3:]) < settled})


#: A file changed less than this before the check (3 s, in ns) may be written again within the
#: same tick of its filesystem's clock, leaving its times as they were (git's "racy clean"
#: files, git/git Documentation/technical/racy-git.txt; FAT's clock ticks every 2 s): it is
#: read and hashed again once linked, whatever its stamp.
RACY_NS = 3_000_000_000


def file_stamp(info: os.stat_result) -> tuple[int, ...]:
    """What a write to a file changes: its device and inode (a file renamed over it), its size,
    its modification time and its change time (set by the kernel on every write, attribute
    change and link; no user can set it)."""
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def stamp_holds(folder_fd: int, name: str, stamp: tuple[int, ...], linked: bool = False) -> bool:
    """Whether ``name`` in the open folder is the file ``stamp`` was taken of, unchanged; once
    ``linked`` into the new tree its change time is the link's, so only the rest is compared."""
    try:
        now = file_stamp(os.stat(name, dir_fd=folder_fd, follow_symlinks=False))
    except OSError:
        return False
    return now[:4] == stamp[:4] if linked else now == stamp


def _identity(out_dir: Path) -> tuple[int, ...]:
    """What changes when another compile writes ``out_dir``: the folder (a new tree is swapped in)
    and fleetc's records in it."""
    found: list[int] = []
    from fleetc.render.record import RENDER_RECORD

    for path in (out_dir, out_dir / RECORD, out_dir / RENDER_RECORD):
        info = os.stat(path)
        found += [info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size]
    return tuple(found)


def _digest_of(out_dir: Path, paths: Sequence[str], linkable: bool = True,
               stamps: dict[str, tuple[int, ...]] | None = None) -> str | None:
    """:func:`files_digest` of the files ``paths`` (sorted) under ``out_dir``; None when one
    cannot be read (missing, a symlink, not a regular file), carries no valid mark (fleetc did
    not write it here, or it changed since: :mod:`fleetc.infra.marks`; the record's digest alone
    proves nothing, as anyone can write one) or is not hard-linked into a new tree as it is
    (:func:`_linkable`; unless not ``linkable``), so keeping them costs a link each. ``stamps``
    gets each file's :func:`file_stamp` as read."""
    from fleetc.render.record import files_digest

    umask = current_umask() if linkable else None
    found: list[tuple[str, bytes]] = []
    by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in paths:
        by_folder[rel.rpartition("/")[0]].append(rel)
    for folder, names in by_folder.items():
        folder_fd = open_previous_folder(out_dir, folder)
        if folder_fd is None:
            return None
        try:
            for rel in names:
                read = read_regular_stat(folder_fd, rel.rpartition("/")[2], umask, marked=True)
                if read is None:
                    return None
                found.append((rel, read[0]))
                if stamps is not None:
                    stamps[rel] = file_stamp(read[1])
        finally:
            os.close(folder_fd)
    return files_digest(sorted(found))


def check_kept(out_dir: Path, kept: Kept) -> None:
    """Refuse to keep files from an output folder that another compile wrote since they were
    checked, unless they are still the same (caller holds the lock)."""
    try:
        if _identity(out_dir) == kept.source.identity:
            return
    except OSError:
        pass
    now = reusable_folders(out_dir)
    changed = [name for name in kept.clusters if now.folders.get(name) != kept.source.folders[name]]
    if changed:
        raise WriteError(f"{out_dir}: changed while this compile ran (another fleetc wrote it?): "
                         f"clusters/{changed[0]}/ is no longer as it was checked; nothing was written\n"
                         "  hint: run fleetc compile again")


def verify_kept(staging: Path, kept: Kept, out_dir: Path, unproven: Collection[str]) -> None:
    """Hash the kept files as linked into the new tree, of every folder with a file whose stamp
    did not show it unchanged (``unproven``): a file changed in place after
    :func:`reusable_folders` read it and before the link shares its inode with the new tree,
    so only the linked bytes say what the new tree holds."""
    doubtful = {rel.split("/")[1] for rel in unproven}
    for name in kept.clusters:
        if name not in doubtful:
            continue
        if _digest_of(staging, kept.source.paths[name], linkable=False) != kept.source.folders[name].files:
            raise WriteError(f"{out_dir}: clusters/{name}/ changed while this compile ran; nothing was "
                             "written\n  hint: run fleetc compile again")
