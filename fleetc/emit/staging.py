"""fleetc's temporary folders beside the output folder, and the previous output a killed
compile left stranded in one.

The writer (:mod:`fleetc.emit`) stages the new tree in a folder named ``.<out>.fleetc-new-*``
beside the output, and the fallback swap moves the old tree into ``.<out>.fleetc-old-*``. The
writer holds the lock while it removes them, so any found then belong to a killed compile.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from fleetc.emit.check import Change

#: What follows ``.<out name>.`` in the names of fleetc's temporary folders beside the output.
_STAGING_MARK = "fleetc-"


def staging_prefix(out_dir: Path, role: str) -> str:
    return f".{out_dir.name}.{_STAGING_MARK}{role}-"


def remove_stale_staging(out_dir: Path) -> None:
    """Remove temporary folders left beside ``out_dir`` by a killed compile (caller holds the
    lock, so no live compile is using them), once a stranded previous output is back
    (:func:`restore_stranded`). Only names :func:`tempfile.mkdtemp` gave fleetc's own
    prefixes are touched: a user's ``.out.fleetc-notes`` is not one."""
    restore_stranded(out_dir)
    for entry in _staging_folders(out_dir):
        shutil.rmtree(entry, ignore_errors=True)


def _staging_folders(out_dir: Path) -> list[Path]:
    ours = re.compile(re.escape(f".{out_dir.name}.{_STAGING_MARK}") + r"(?:new|old)-[a-z0-9_]{8}")
    try:
        return sorted(entry for entry in out_dir.parent.iterdir()
                      if ours.fullmatch(entry.name) and entry.is_dir() and not entry.is_symlink())
    except OSError:
        return []


def stranded_previous(out_dir: Path) -> Path | None:
    """The previous output a compile killed between the two renames of the fallback swap
    (:func:`fleetc.emit._swap`) left in its ``old`` staging folder, when ``out_dir`` is missing."""
    if os.path.lexists(out_dir):
        return None
    old = staging_prefix(out_dir, "old")
    found = [entry / "tree" for entry in _staging_folders(out_dir)
             if entry.name.startswith(old) and (entry / "tree").is_dir()]
    return found[0] if found else None


def restore_stranded(out_dir: Path) -> None:
    """Put a stranded previous output (:func:`stranded_previous`) back at ``out_dir`` (caller holds the
    lock)."""
    stranded = stranded_previous(out_dir)
    if stranded is not None:
        os.rename(stranded, out_dir)


def stranded_output(out_dir: Path) -> list[Change]:
    """For ``--check``, which never writes: the stranded previous output (:func:`stranded_previous`),
    as a change whose path is relative to ``out_dir``."""
    stranded = stranded_previous(out_dir)
    return [] if stranded is None else [Change(os.path.relpath(stranded, out_dir), "stranded")]
