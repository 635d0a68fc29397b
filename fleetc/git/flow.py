"""What fleetc does with git, above the plumbing of :mod:`fleetc.git.repo`: read the policies
as they were at a revision (for ``diff``), and commit exactly the output folder (``--commit``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from fleetc.compiler import Compiled
from fleetc.emit import RECORD, write_tree
from fleetc.errors import FleetcError, UsageError
from fleetc.git import repo as gitrepo
from fleetc.git.report import commit_message, compare, snapshot, snapshot_of_output
from fleetc.placement.previous import PLACEMENT_FILE, Previous, parse_previous
from fleetc.policy.load import display_path

Sources = list[tuple[str, bytes]]


def policy_sources_at(ref: str, paths: Sequence[str], out_dir: str, workdir: Path) -> tuple[Sources, Previous]:
    """The policy files under ``paths`` at ``ref``, and the previous placement in ``out_dir``
    at ``ref`` (empty when missing or malformed); both relative to ``workdir`` unless absolute.

    Files are named as the working tree's would be, so provenance annotations do not differ just
    because one side of a diff came from git.
    """
    root = gitrepo.repo_root(workdir)
    found: dict[str, bytes] = {}
    for path in paths:
        folder = gitrepo.relative_to_root(root, workdir / path)
        for name, data in gitrepo.read_tree_files(root, ref, [folder]):
            inner = PurePosixPath(name).relative_to(folder) if folder not in ("", ".") else PurePosixPath(name)
            found.setdefault(display_path(Path(path) / inner, workdir), data)
    placement = gitrepo.read_file(root, ref, f"{gitrepo.relative_to_root(root, workdir / out_dir)}/{PLACEMENT_FILE}")
    try:
        previous = parse_previous(placement.decode("utf-8")) if placement else Previous()
    except (UnicodeDecodeError, ValueError):
        previous = Previous()
    return sorted(found.items()), previous


def commit_output(compiled: Compiled, out: Path, workdir: Path) -> tuple[str | None, str]:
    """Write ``out`` (relative to ``workdir`` unless absolute) and commit exactly it; return the
    commit (None when nothing changed) and its message.

    Refuses, before writing anything, when ``out`` holds edits fleetc did not make; other staged
    or unstaged changes of the user stay as they are.
    """
    root = gitrepo.repo_root(workdir)
    out = workdir / out
    folder = gitrepo.relative_to_root(root, out)
    if folder in ("", "."):
        raise UsageError("--commit needs an output folder inside the repository, not its root")
    committed = gitrepo.read_folder(root, "HEAD", folder)
    owned = set(committed.get(RECORD, "").splitlines()) or set(committed) - {RECORD}
    foreign = [p for p in gitrepo.uncommitted(root, folder)
               if not _made_by_fleetc(root / p, p[len(folder) + 1:], compiled.files, owned)]
    if foreign:
        raise FleetcError(f"{folder}/ has changes fleetc did not make; commit or discard them first "
                          "(nothing was written):\n" + "\n".join(f"  {p}" for p in foreign))
    before = snapshot_of_output({p: t for p, t in committed.items() if p in owned},
                                {c.name: c.gpu_type for c in compiled.model.clusters})
    report = compare(before, snapshot(compiled.model, compiled.placement, compiled.files),
                     base_label="HEAD", head_label="compile", out=folder)
    write_tree(out, compiled.files)
    message = commit_message(report)
    return gitrepo.commit_folder(root, folder, message), message


def _made_by_fleetc(path: Path, rel: str, files: Mapping[str, str], owned: set[str]) -> bool:
    """Whether a file that differs from HEAD is already as this compile leaves it: holding what
    it writes, or gone when it is a file fleetc wrote (per HEAD's record) and writes no more."""
    if not path.exists():
        return rel in owned and rel not in files
    if not path.is_file():
        return False
    if rel == RECORD:
        return set(path.read_text(encoding="utf-8", errors="replace").splitlines()) == set(files)
    return rel in files and path.read_bytes() == files[rel].encode("utf-8")
