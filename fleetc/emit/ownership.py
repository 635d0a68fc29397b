"""What fleetc owns in the output folder, and the refusals that protect what it does not.

fleetc owns only the files its record (:data:`RECORD`) lists, and of those only files it could
have written (:func:`could_be_fleetcs`; a record naming another is refused). The record is a
plain file anyone can write, so it only names: fleetc deletes a listed file only when it can
show the file is its own (its mark, or git holding it as it is: :mod:`fleetc.infra.marks`), and
keeps a cluster's folder unrendered only when every file carries its valid mark
(:mod:`fleetc.emit.reuse`). Files under :data:`USER_FOLDER` are the user's: fleetc writes one
there only when it does not exist yet, never records, changes or deletes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from fleetc.emit.files import read_file
from fleetc.errors import FleetcError
from fleetc.infra import marks

if TYPE_CHECKING:  # fleetc.render is imported where used: `validate` does not need it
    from fleetc.render.record import Kept

#: Where fleetc records the files it wrote, relative to the output folder.
RECORD = ".fleetc/files"


#: The user's folder in the output: what fleetc renders there is written only when absent.
USER_FOLDER = "local/"


#: The only kind of file fleetc renders, apart from its records under ``.fleetc/``.
_RENDERED_SUFFIX = ".yaml"


def is_users(rel: str) -> bool:
    """Whether a path of the output folder is in the user's folder (:data:`USER_FOLDER`)."""
    return rel.startswith(USER_FOLDER)


def record_text(paths: Iterable[str]) -> str:
    """The text of :data:`RECORD` for fleetc's files ``paths``."""
    return "".join(f"{rel}\n" for rel in sorted(paths))


def owned_files(out_dir: Path) -> set[str]:
    """The files fleetc wrote last time, from its record (empty when there is none), as far as
    they can be fleetc's (:func:`could_be_fleetcs`): a line naming another path is never
    taken for one of fleetc's files, so the record cannot make fleetc delete or overwrite it."""
    return {line for line in _recorded(out_dir) if could_be_fleetcs(line)}


def could_be_fleetcs(rel: str) -> bool:
    """Whether fleetc could have written the file ``rel``: a path inside the output folder,
    outside the user's folder and fleetc's own records, of the one kind fleetc renders
    (YAML), or its render record."""
    if rel.endswith(_RENDERED_SUFFIX):  # the cheap tests first: the record lists every file
        return not rel.startswith((USER_FOLDER, ".fleetc/")) and _is_safe_relative(rel)
    from fleetc.render.record import RENDER_RECORD

    return rel == RENDER_RECORD


def refuse_disowning(out_dir: Path, named: Path | None = None) -> set[str]:
    """Refuse to write when fleetc's record names a file there that fleetc could not have
    written (a line added by hand, or a record planted in a folder that is not fleetc's
    output): it is not fleetc's to delete or reset, and the record is not to be trusted.
    Else :func:`owned_files`, from the same read of the record (172,057 lines at 1,000 x
    20,000: each read and check of them is about 0.3 s of CPU)."""
    lines = _recorded(out_dir)
    owned = {rel for rel in lines if could_be_fleetcs(rel)}
    foreign = sorted(rel for rel in lines - owned
                     if rel and os.path.lexists(out_dir / rel) and _is_safe_relative(rel))
    if foreign:
        named = named or out_dir
        raise FleetcError(
            f"{named / RECORD}: names {named / foreign[0]}"
            + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
            + ", which fleetc does not write (the user's folder local/, or not a file fleetc renders); "
            "refusing to delete it; nothing was written\n"
            f"  hint: the record was edited by hand or is not fleetc's: restore it (git checkout "
            f"{named / RECORD}) or remove that line")
    return owned


def refuse_unproven_deletions(out_dir: Path, files: Mapping[str, str], kept: Kept | None, named: Path,
                              owned: set[str]) -> None:
    """Refuse to write when the files fleetc would delete (of ``owned``, what its record lists,
    :func:`owned_files`, those this compile renders and keeps no more) hold one fleetc cannot
    show is its own: neither marked (:mod:`fleetc.infra.marks`) nor committed to git as it is.
    The record is only a list anyone can write (a planted one would make any folder fleetc's),
    so it names what may be deleted, never proves it. Symlinks and special files are never
    fleetc's data: not carrying one over loses nothing."""
    staying = set(files) | set(kept.paths if kept is not None else ()) | {RECORD}
    doomed = [rel for rel in sorted(owned) if rel not in staying and _is_regular(out_dir / rel)]
    unproven = [rel for rel in doomed if read_file(out_dir / rel, marked=True) is None]
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
    if ".." not in rel:  # no part can be "..": it stays inside unless absolute or naming only "." and "/"
        return not rel.startswith("/") and rel.strip("/.") != ""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    return bool(parts) and not rel.startswith("/") and ".." not in parts
