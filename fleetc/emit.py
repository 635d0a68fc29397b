"""Emit stage: the rendered tree -> the output folder, all or nothing.

The new tree is written to a temporary folder beside the output folder and swapped in at the
end, so a compile that fails midway (or is killed) leaves the previous output as it was. On
Linux the swap is one ``renameat2(RENAME_EXCHANGE)`` call; elsewhere two renames.

fleetc owns only the files its record (:data:`RECORD`) lists, and of those only files it could
have written (:func:`could_be_fleetcs`; a record naming another is refused). The record is a
plain file anyone can write, so it only names: fleetc deletes a listed file only when it can
show the file is its own (its mark, or git holding it as it is: :mod:`fleetc.infra.marks`), and
keeps a cluster's folder unrendered only when every file carries its valid mark. Files someone else
put in the output folder are carried over into the new tree, never deleted, and
``compile --check`` fails on each of them outside :data:`USER_FOLDER` (:func:`changes`): the
engines read the output folder, so everything in it is fleetc's, byte for byte, or the user's. Files under
:data:`USER_FOLDER` are the user's: fleetc writes one there only when it does not exist yet (the
first, empty ``kustomization.yaml`` of ``local/<cluster>/``, which the cluster's kustomization
includes), never records, changes or deletes it.

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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetc.errors import FleetcError, UsageError
from fleetc.infra import marks

if TYPE_CHECKING:  # fleetc.render is imported where used: `validate` does not need it
    from fleetc.render.record import Kept, Reusable

#: Where fleetc records the files it wrote, relative to the output folder.
RECORD = ".fleetc/files"
#: The user's folder in the output: what fleetc renders there is written only when absent.
USER_FOLDER = "local/"
#: Seconds a compile waits for another compile writing the same output folder to finish.
LOCK_TIMEOUT = 120.0
_LOCK_POLL = 0.05
#: What follows ``.<out name>.`` in the names of fleetc's temporary folders beside the output.
_STAGING_MARK = "fleetc-"
#: How a file of the new tree is created: a new file (never through a link or a symlink).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
#: How a file of the previous tree is read: never through a symlink, never blocking on a FIFO.
_READ_PREVIOUS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


#: The folders of the output the GitOps engines read, and who reads each: everything under them
#: is applied to a cluster with cluster-admin rights, so ``--check`` holds every file there to
#: what fleetc renders, byte for byte, except in :data:`USER_FOLDER`, which it lists. A renderer
#: that adds an entry point (a folder an engine reads) adds it here.
ENTRY_POINTS: Mapping[str, str] = {
    "argocd/": "the Argo CD ApplicationSet, applied once by hand; it syncs the folders of the clusters it lists",
    "flux/": "each cluster's Flux GitRepository and Kustomizations, applied once by hand",
    "kurator/": "the Kurator Application, applied once by hand; its fleet manager syncs each cluster's folders",
    "clusters/": "synced by Argo CD (clusters/<cluster>/) and by Flux (its infra/ and workloads/)",
    USER_FOLDER: "the user's own objects (local/<cluster>/), applied by both engines with the cluster",
}
#: The only kind of file fleetc renders, apart from its records under ``.fleetc/``.
_RENDERED_SUFFIX = ".yaml"


@dataclass(frozen=True)
class Change:
    path: str  # relative to the output folder
    #: added | changed | removed: writing would do so; unrendered: a file fleetc does not render
    #: outside the user's folder (writing keeps it, so only a person can fix it); link: a
    #: symlink or other non-regular file (fleetc never writes one; engines would follow it);
    #: stranded: the previous output left beside a missing one (:func:`stranded_output`)
    status: str


class WriteError(FleetcError, OSError):
    """The output folder could not be written (a full disk, no permission); it is unchanged.

    An ``OSError`` too, so callers that catch those keep working."""


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
    named, out_dir = out_dir, check_output_folder(out_dir, policy_roots)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        with _locked(out_dir):
            _refuse_foreign(out_dir)  # again under the lock: it may have changed since
            _remove_stale_staging(out_dir)
            if kept is not None:
                _check_kept(out_dir, kept)
            _refuse_disowning(out_dir)
            _refuse_unproven_deletions(out_dir, files, kept, named)
            return _stage_and_swap(out_dir, files, then, kept)
    except FleetcError:
        raise
    except OSError as err:
        raise WriteError(f"cannot write {out_dir}: {err.strerror or err}; it was left as it "
                         "was") from err


def check_output_folder(out_dir: Path, policy_roots: Sequence[Path] = ()) -> Path:
    """The real path fleetc would write ``out_dir`` at, or :class:`UsageError` when it must not
    write there: ``/``, a folder that is, holds or lies inside one of ``policy_roots``, or a
    folder fleetc did not make (it is neither empty nor holding fleetc's :data:`RECORD`)."""
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
    _refuse_disowning(real, out_dir)
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
                    kept: Kept | None) -> list[str]:
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out_dir, "new"), dir=out_dir.parent))
    try:
        previous = out_dir if out_dir.is_dir() else None
        owned = {rel: text for rel, text in files.items() if not is_users(rel)}
        _write_files(staging, owned, previous)
        ours = set(owned)
        if kept is not None and previous is not None:
            _keep_files(staging, previous, kept.paths)
            _verify_kept(staging, kept, out_dir)
            ours.update(kept.paths)
        carried = [] if previous is None else _carry_foreign_files(out_dir, staging, ours)
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


def _staging_prefix(out_dir: Path, role: str) -> str:
    return f".{out_dir.name}.{_STAGING_MARK}{role}-"


def _remove_stale_staging(out_dir: Path) -> None:
    """Remove temporary folders left beside ``out_dir`` by a killed compile (caller holds the
    lock, so no live compile is using them), once a stranded previous output is back
    (:func:`_restore_stranded`). Only names :func:`tempfile.mkdtemp` gave fleetc's own
    prefixes are touched: a user's ``.out.fleetc-notes`` is not one."""
    _restore_stranded(out_dir)
    for entry in _staging_folders(out_dir):
        shutil.rmtree(entry, ignore_errors=True)


def _staging_folders(out_dir: Path) -> list[Path]:
    ours = re.compile(re.escape(f".{out_dir.name}.{_STAGING_MARK}") + r"(?:new|old)-[a-z0-9_]{8}")
    try:
        return sorted(entry for entry in out_dir.parent.iterdir()
                      if ours.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink())
    except OSError:
        return []


def _stranded(out_dir: Path) -> Path | None:
    """The previous output a compile killed between the two renames of the fallback swap
    (:func:`_swap`) left in its ``old`` staging folder, when ``out_dir`` is missing."""
    if os.path.lexists(out_dir):
        return None
    old = _staging_prefix(out_dir, "old")
    found = [entry / "tree" for entry in _staging_folders(out_dir)
             if entry.name.startswith(old) and (entry / "tree").is_dir()]
    return found[0] if found else None


def _restore_stranded(out_dir: Path) -> None:
    """Put a stranded previous output (:func:`_stranded`) back at ``out_dir`` (caller holds the
    lock)."""
    stranded = _stranded(out_dir)
    if stranded is not None:
        os.rename(stranded, out_dir)


def recover_output(out_dir: Path) -> bool:
    """Before a compile reads ``out_dir`` (its placement, its folders to keep): put back the
    previous output a killed compile left stranded beside it, under the write lock. Whether
    one was put back."""
    if _stranded(out_dir) is None or not out_dir.parent.is_dir():
        return False
    with _locked(out_dir):
        restored = _stranded(out_dir) is not None
        _restore_stranded(out_dir)
    return restored


def stranded_output(out_dir: Path) -> list[Change]:
    """For ``--check``, which never writes: the stranded previous output (:func:`_stranded`),
    as a change whose path is relative to ``out_dir``."""
    stranded = _stranded(out_dir)
    return [] if stranded is None else [Change(os.path.relpath(stranded, out_dir), "stranded")]


def is_users(rel: str) -> bool:
    """Whether a path of the output folder is in the user's folder (:data:`USER_FOLDER`)."""
    return rel.startswith(USER_FOLDER)


def changes(out_dir: Path, files: Mapping[str, str]) -> list[Change]:
    """What makes ``out_dir`` other than writing ``files`` would leave it (for ``--check``),
    sorted by path: each file fleetc renders must be there byte for byte (its record
    :data:`RECORD` too), and nothing else may be, outside the user's folder (:data:`USER_FOLDER`:
    a file of it fleetc renders is a change only while missing). Symlinks are never followed:
    one anywhere in ``out_dir`` is a change (``link``)."""
    rendered = {rel: text.encode("utf-8") for rel, text in files.items()}
    rendered[RECORD] = record_text(rel for rel in files if not is_users(rel)).encode("utf-8")
    present = dict(_scan(out_dir)) if os.path.isdir(out_dir) else {}
    found = []
    for rel, data in rendered.items():
        kind = present.get(rel)
        if kind is None:
            found.append(Change(rel, "added"))
        elif kind != "file":
            found.append(Change(rel, "link"))
        elif not is_users(rel) and _read_file(out_dir / rel) != data:
            found.append(Change(rel, "changed"))
    owned = owned_files(out_dir)
    for rel, kind in present.items():
        if rel in rendered:
            continue
        if kind != "file":
            found.append(Change(rel, "link"))
        elif not is_users(rel):
            found.append(Change(rel, "removed" if rel in owned else "unrendered"))
    return sorted(found, key=lambda c: c.path)


def applied_by(rel: str) -> str | None:
    """Who applies the file ``rel`` of the output folder (:data:`ENTRY_POINTS`), or None."""
    return next((reader for folder, reader in ENTRY_POINTS.items() if rel.startswith(folder)), None)


def user_files(out_dir: Path, files: Mapping[str, str] | None = None) -> list[str]:
    """The regular files of the user's folder (:data:`USER_FOLDER`) of ``out_dir``, sorted,
    but for those still as fleetc first wrote them (in ``files``): applied with their
    clusters, never rendered or checked by fleetc, so ``--check`` lists them and the
    pull-request report shows them whole."""
    if not os.path.isdir(out_dir / USER_FOLDER):
        return []
    files = files or {}
    return sorted(rel for rel, kind in _scan(out_dir, USER_FOLDER)
                  if kind == "file" and (rel not in files or _read_file(out_dir / rel) != files[rel].encode("utf-8")))


def record_text(paths: Iterable[str]) -> str:
    """The text of :data:`RECORD` for fleetc's files ``paths``."""
    return "".join(f"{rel}\n" for rel in sorted(paths))


def _scan(root: Path, under: str = "") -> Iterator[tuple[str, str]]:
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


def _read_file(path: Path, marked: bool = False) -> bytes | None:
    """The bytes of the regular file ``path``, never through a symlink (None otherwise; with
    ``marked``, also where it carries no valid mark)."""
    try:
        folder_fd = os.open(path.parent, _OPEN_FOLDER)
    except OSError:
        return None
    try:
        return _read_regular(folder_fd, path.name, marked=marked)
    finally:
        os.close(folder_fd)


def owned_files(out_dir: Path) -> set[str]:
    """The files fleetc wrote last time, from its record (empty when there is none), as far as
    they can be fleetc's (:func:`could_be_fleetcs`): a line naming another path is never
    taken for one of fleetc's files, so the record cannot make fleetc delete or overwrite it."""
    return {line for line in _recorded(out_dir) if could_be_fleetcs(line)}


def could_be_fleetcs(rel: str) -> bool:
    """Whether fleetc could have written the file ``rel``: a path inside the output folder,
    outside the user's folder and fleetc's own records, of the one kind fleetc renders
    (YAML), or its render record."""
    from fleetc.render.record import RENDER_RECORD

    return _is_safe_relative(rel) and (rel == RENDER_RECORD or (
        rel.endswith(_RENDERED_SUFFIX) and not is_users(rel) and not rel.startswith(".fleetc/")))


def _refuse_disowning(out_dir: Path, named: Path | None = None) -> None:
    """Refuse to write when fleetc's record names a file there that fleetc could not have
    written (a line added by hand, or a record planted in a folder that is not fleetc's
    output): it is not fleetc's to delete or reset, and the record is not to be trusted."""
    foreign = sorted(rel for rel in _recorded(out_dir)
                     if rel and not could_be_fleetcs(rel) and os.path.lexists(out_dir / rel)
                     and _is_safe_relative(rel))
    if foreign:
        named = named or out_dir
        raise FleetcError(
            f"{named / RECORD}: names {named / foreign[0]}"
            + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
            + ", which fleetc does not write (the user's folder local/, or not a file fleetc renders); "
            "refusing to delete it; nothing was written\n"
            f"  hint: the record was edited by hand or is not fleetc's: restore it (git checkout "
            f"{named / RECORD}) or remove that line")


def _refuse_unproven_deletions(out_dir: Path, files: Mapping[str, str], kept: Kept | None, named: Path) -> None:
    """Refuse to write when the files fleetc would delete (its record lists them, this compile
    renders and keeps them no more) hold one fleetc cannot show is its own: neither marked
    (:mod:`fleetc.infra.marks`) nor committed to git as it is. The record is only a list anyone
    can write (a planted one would make any folder fleetc's), so it names what may be deleted,
    never proves it. Symlinks and special files are never fleetc's data: not carrying one over
    loses nothing."""
    staying = set(files) | set(kept.paths if kept is not None else ()) | {RECORD}
    doomed = [rel for rel in sorted(owned_files(out_dir)) if rel not in staying and _is_regular(out_dir / rel)]
    unproven = [rel for rel in doomed if _read_file(out_dir / rel, marked=True) is None]
    unproven = sorted(set(unproven) - marks.committed_as_is(out_dir, unproven))
    if unproven:
        raise FleetcError(
            f"{named / unproven[0]}: {named / RECORD} lists it as fleetc's"
            + (f" (and {len(unproven) - 1} more)" if len(unproven) > 1 else "")
            + ", but fleetc did not write it here (it has no valid mark: a copy, a checkout, or changed "
            "since) and git does not hold it as it is; refusing to delete it; nothing was written\n"
            "  hint: if it is fleetc's old output, delete it yourself (or commit it) and compile again; if "
            "not, the record is not fleetc's: restore it or remove that line")


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _recorded(out_dir: Path) -> set[str]:
    """The lines of fleetc's record, unchecked (empty when there is none)."""
    try:
        return set((out_dir / RECORD).read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return set()


def _is_safe_relative(rel: str) -> bool:
    """A relative POSIX path that stays inside the folder (string work: the record is long)."""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    return bool(parts) and not rel.startswith("/") and ".." not in parts


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
    checked = {name: folder for name, folder in folders.items()
               if by_cluster.get(name) and _digest_of(out_dir, by_cluster[name]) == folder.files}
    return Reusable(checked, {name: tuple(by_cluster[name]) for name in checked}, identity)


def _identity(out_dir: Path) -> tuple[int, ...]:
    """What changes when another compile writes ``out_dir``: the folder (a new tree is swapped in)
    and fleetc's records in it."""
    found: list[int] = []
    from fleetc.render.record import RENDER_RECORD

    for path in (out_dir, out_dir / RECORD, out_dir / RENDER_RECORD):
        info = os.stat(path)
        found += [info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size]
    return tuple(found)


def _digest_of(out_dir: Path, paths: Sequence[str], linkable: bool = True) -> str | None:
    """:func:`files_digest` of the files ``paths`` (sorted) under ``out_dir``; None when one
    cannot be read (missing, a symlink, not a regular file), carries no valid mark (fleetc did
    not write it here, or it changed since: :mod:`fleetc.infra.marks`; the record's digest alone
    proves nothing, as anyone can write one) or is not hard-linked into a new tree as it is
    (:func:`_linkable`; unless not ``linkable``), so keeping them costs a link each."""
    from fleetc.render.record import files_digest

    umask = _umask() if linkable else None
    found: list[tuple[str, bytes]] = []
    by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in paths:
        by_folder[rel.rpartition("/")[0]].append(rel)
    for folder, names in by_folder.items():
        folder_fd = _open_previous_folder(out_dir, folder)
        if folder_fd is None:
            return None
        try:
            for rel in names:
                data = _read_regular(folder_fd, rel.rpartition("/")[2], umask, marked=True)
                if data is None:
                    return None
                found.append((rel, data))
        finally:
            os.close(folder_fd)
    return files_digest(sorted(found))


def _read_regular(folder_fd: int, name: str, linkable_under: int | None = None, links: int = 1, *,
                  marked: bool = False, mark_if: bytes | None = None) -> bytes | None:
    """The bytes of the regular file ``name`` in the open folder; None where there is none, or
    with ``linkable_under`` (a umask) where it is not :func:`_linkable` (with ``links`` links), or
    with ``marked`` where it carries no valid mark (:mod:`fleetc.infra.marks`). With ``mark_if``:
    a file holding those bytes (what fleetc renders there) is marked as fleetc's."""
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
        return data
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


def _check_kept(out_dir: Path, kept: Kept) -> None:
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


def _verify_kept(staging: Path, kept: Kept, out_dir: Path) -> None:
    """Hash the kept files as linked into the new tree: a file changed in place after
    :func:`reusable_folders` read it and before the link shares its inode with the new tree,
    so only the linked bytes say what the new tree holds."""
    for name in kept.clusters:
        if _digest_of(staging, kept.source.paths[name], linkable=False) != kept.source.folders[name].files:
            raise WriteError(f"{out_dir}: clusters/{name}/ changed while this compile ran; nothing was "
                             "written\n  hint: run fleetc compile again")


def _keep_files(staging: Path, previous: Path, paths: Sequence[str]) -> None:
    """Hard-link the files ``paths`` of the previous tree into the new one (checked byte for byte
    before: :func:`reusable_folders`), or copy them where a link would share more than the old tree's
    inode (see :func:`_link_unchanged`)."""
    by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in paths:
        folder, _, name = rel.rpartition("/")
        by_folder[folder].append(name)
    for folder, names in sorted(by_folder.items()):
        target = os.path.join(staging, folder)
        os.makedirs(target, exist_ok=True)
        folder_fd = os.open(target, _OPEN_FOLDER)
        previous_fd = _open_previous_folder(previous, folder)
        try:
            for name in names:
                if previous_fd is not None and _link(previous_fd, folder_fd, name):
                    continue
                data = None if previous_fd is None else _read_regular(previous_fd, name)
                if data is None:
                    raise WriteError(f"{previous / folder / name}: removed while this compile ran; nothing was "
                                     "written\n  hint: run fleetc compile again")
                _write(folder_fd, name, data)
        finally:
            os.close(folder_fd)
            if previous_fd is not None:
                os.close(previous_fd)


def _write_files(staging: Path, files: Mapping[str, str], previous: Path | None) -> None:
    """Write ``files`` (relative POSIX paths) under ``staging``, one folder at a time; with
    ``previous`` (the old output folder), link the files it already holds byte for byte."""
    by_folder: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for rel, text in files.items():
        folder, _, name = rel.rpartition("/")
        by_folder[folder].append((name, text))
    umask = _umask()
    for folder in sorted(by_folder):
        _write_folder(staging, previous, umask, by_folder, folder)


def _write_folder(staging: Path, previous: Path | None, umask: int,
                  by_folder: Mapping[str, list[tuple[str, str]]], folder: str) -> None:
    target = os.path.join(staging, folder)
    os.makedirs(target, exist_ok=True)
    folder_fd = os.open(target, _OPEN_FOLDER)
    previous_fd = _open_previous_folder(previous, folder)
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


def _open_previous_folder(previous: Path | None, folder: str) -> int | None:
    """A descriptor of ``previous/folder``, opened one component at a time without following
    symlinks (a linked file must come from inside the old tree); None when there is none."""
    if previous is None:
        return None
    try:
        fd = os.open(previous, _OPEN_FOLDER)
    except OSError:
        return None
    for part in folder.split("/") if folder else ():
        try:
            child = os.open(part, _OPEN_FOLDER | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            child = None
        os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def _link_unchanged(previous_fd: int, folder_fd: int, name: str, data: bytes, umask: int) -> bool:
    """Hard-link ``name`` from the previous tree into the new one when that leaves exactly what
    writing ``data`` would: a linkable file (:func:`_linkable`) with those bytes. Linked first,
    then read through the new link, so a write into the old file before the link is seen.
    False (nothing left behind) otherwise."""
    if not _link(previous_fd, folder_fd, name):
        return False
    if _read_regular(folder_fd, name, umask, links=2, mark_if=data) == data:
        return True
    os.unlink(name, dir_fd=folder_fd)
    return False


def _linkable(info: os.stat_result, umask: int, links: int = 1) -> bool:
    """Whether a file of the previous tree may become the new tree's by a hard link: a regular
    file of ours with the mode a new file gets, whose only link is the old tree's (else the new
    tree would share an inode with a file elsewhere, and an edit there would change out/), or
    with ``links`` 2, the old tree's and the new one's."""
    return (stat.S_ISREG(info.st_mode) and info.st_nlink == links and stat.S_IMODE(info.st_mode) == 0o666 & ~umask
            and info.st_uid == os.geteuid())


def _link(previous_fd: int, folder_fd: int, name: str) -> bool:
    try:
        os.link(name, name, src_dir_fd=previous_fd, dst_dir_fd=folder_fd, follow_symlinks=False)
    except OSError:  # no hard links on this filesystem, or the file just went away
        return False
    return True


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _carry_foreign_files(out_dir: Path, staging: Path, rendered: set[str]) -> list[str]:
    """Copy the files of ``out_dir`` that are not fleetc's into the new tree; the paths copied."""
    # only the paths the walk finds are looked up in the record
    owned = owned_files(out_dir) | {RECORD}
    carried = []
    for rel in _walk(out_dir):
        if rel not in owned and rel not in rendered:
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out_dir / rel, target, follow_symlinks=False)
            carried.append(rel)
    return carried


def _walk(root: Path) -> Iterator[str]:
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


def _match_mode(staging: Path, out_dir: Path) -> None:
    """mkdtemp creates 0700; give the new tree the old folder's mode, or the umask default."""
    if out_dir.is_dir():
        mode = out_dir.stat().st_mode & 0o7777
    else:
        mode = 0o777 & ~_umask()
    staging.chmod(mode)


def _swap(staging: Path, out_dir: Path) -> str:
    """Put ``staging`` at ``out_dir``; afterwards ``staging`` holds the old tree (if any). Returns
    how (``renamed``: there was no old tree; ``exchanged``; ``moved``: into ``staging/tree``)."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return "renamed"
    if _exchange(staging, out_dir):
        return "exchanged"
    old = Path(tempfile.mkdtemp(prefix=_staging_prefix(out_dir, "old"), dir=out_dir.parent))
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
