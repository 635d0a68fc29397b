"""What ``compile --check`` compares: the output folder against the files a compile renders.

The engines read the output folder (:data:`ENTRY_POINTS`), so everything in it is fleetc's,
byte for byte, or the user's: :func:`changes` lists each difference, including files someone
else put there outside :data:`fleetc.emit.ownership.USER_FOLDER`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetc.emit.files import read_file, scan_entries
from fleetc.emit.ownership import RECORD, USER_FOLDER, is_users, owned_files, record_text

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


@dataclass(frozen=True)
class Change:
    path: str  # relative to the output folder
    #: added | changed | removed: writing would do so; unrendered: a file fleetc does not render
    #: outside the user's folder (writing keeps it, so only a person can fix it); link: a
    #: symlink or other non-regular file (fleetc never writes one; engines would follow it);
    #: stranded: the previous output left beside a missing one (:func:`stranded_output`)
    status: str


def changes(out_dir: Path, files: Mapping[str, str]) -> list[Change]:
    """What makes ``out_dir`` other than writing ``files`` would leave it (for ``--check``),
    sorted by path: each file fleetc renders must be there byte for byte (its record
    :data:`RECORD` too), and nothing else may be, outside the user's folder (:data:`USER_FOLDER`:
    a file of it fleetc renders is a change only while missing). Symlinks are never followed:
    one anywhere in ``out_dir`` is a change (``link``)."""
    rendered = {rel: text.encode("utf-8") for rel, text in files.items()}
    rendered[RECORD] = record_text(rel for rel in files if not is_users(rel)).encode("utf-8")
    present = dict(scan_entries(out_dir)) if os.path.isdir(out_dir) else {}
    found = []
    for rel, data in rendered.items():
        kind = present.get(rel)
        if kind is None:
            found.append(Change(rel, "added"))
        elif kind != "file":
            found.append(Change(rel, "link"))
        elif not is_users(rel) and read_file(out_dir / rel) != data:
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
    return sorted(rel for rel, kind in scan_entries(out_dir, USER_FOLDER)
                  if kind == "file" and (rel not in files or read_file(out_dir / rel) != files[rel].encode("utf-8")))
