"""What fleetc does with git, above the plumbing of :mod:`fleetc.git.repo`: read the policies
as they were at a revision (for ``diff``), and commit exactly the output folder (``--commit``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from fleetc.emit import RECORD, USER_FOLDER, could_be_fleetcs, is_users, write_tree
from fleetc.errors import Diagnostic, FleetcError, UsageError
from fleetc.git import repo as gitrepo
from fleetc.model import FleetModel, Placement
from fleetc.placement.previous import Previous, parse_previous
from fleetc.policy.files import discover, display_path, is_policy_name
from fleetc.report import commit_message, compare, snapshot, snapshot_of_output, time_sliced_units
from fleetc.state.placementfile import PLACEMENT_FILE

Sources = list[tuple[str, bytes]]


def policy_sources_at(ref: str, paths: Sequence[str], out_dir: str,
                      workdir: Path) -> tuple[Sources, list[Diagnostic], Previous]:
    """The policy files under ``paths`` at ``ref``, every entry there that could not be read
    (as the working-tree loader reports it), and the previous placement in ``out_dir`` at
    ``ref`` (empty when missing or malformed); all relative to ``workdir`` unless absolute.

    Files are named as the working tree's would be, so provenance annotations do not differ just
    because one side of a diff came from git.
    """
    root = gitrepo.repo_root(workdir)
    read = gitrepo.read_tree_files(root, ref, [gitrepo.relative_to_root(root, workdir / p) for p in paths])

    def shown(found: gitrepo.Found) -> str:
        return display_path(Path(paths[found.given]) / found.inner, workdir)

    found: dict[str, bytes] = {}
    for entry, data in read.files:
        found.setdefault(shown(entry), data)
    problems = [Diagnostic(shown(entry), 0, 0, "", message, hint) for entry, message, hint in read.problems]
    return sorted(found.items()), problems, previous_at(ref, out_dir, workdir)


def previous_at(ref: str, out_dir: str, workdir: Path) -> Previous:
    """The previous placement in ``out_dir`` as committed at ``ref`` (empty when missing or
    malformed): what ``compile --check --base REF`` starts from, so that a placement.yaml edited
    in the change under review is not what the check trusts."""
    root = gitrepo.repo_root(workdir)
    placement = gitrepo.read_file(root, ref, f"{gitrepo.relative_to_root(root, workdir / out_dir)}/{PLACEMENT_FILE}")
    try:
        return parse_previous(placement.decode("utf-8")) if placement else Previous()
    except (UnicodeDecodeError, ValueError):
        return Previous()


def user_files_at(ref: str, out_dir: str, workdir: Path) -> dict[str, str]:
    """The files of the output folder's user folder (``local/``) as committed at ``ref``, by their
    path relative to the output folder (``diff`` shows how the change under review edits them)."""
    root = gitrepo.repo_root(workdir)
    folder = f"{gitrepo.relative_to_root(root, workdir / out_dir)}/{USER_FOLDER.rstrip('/')}"
    return {f"{USER_FOLDER}{path}": text for path, text in gitrepo.read_folder(root, ref, folder).items()}


def commit_output(model: FleetModel, placement: Placement, files: Mapping[str, str], out: Path,
                  policy_paths: Sequence[str], workdir: Path) -> tuple[str | None, str]:
    """Write ``files`` (a compile of ``model``, placed by ``placement``) to ``out`` and commit
    them together with the policies they were compiled from, in one commit: ``compile --check``
    passes on every commit ``--commit`` makes. Returns the commit
    (None when nothing changed) and its message. ``out`` and ``policy_paths`` are relative to
    ``workdir`` unless absolute.

    The policy files committed are those the compile read under ``policy_paths`` (and the
    deletion of policy files that are gone); other files there, and every other staged or
    unstaged change of the user, stay as they are. Refuses, before writing anything, when
    ``out`` holds edits fleetc did not make, or when a policy file cannot be committed (outside
    the repository, or ignored by git). When the commit fails (a commit
    hook refuses it), the working tree and the index are left as they were before.
    """
    root = gitrepo.repo_root(workdir)
    out = workdir / out
    folder = gitrepo.relative_to_root(root, out)
    if folder in ("", "."):
        raise UsageError("--commit needs an output folder inside the repository, not its root")
    policies = _policy_files(root, policy_paths, workdir)
    committed = gitrepo.read_folder(root, "HEAD", folder)
    owned = {p for p in set(committed.get(RECORD, "").splitlines()) or set(committed) - {RECORD}
             if could_be_fleetcs(p)}  # a line naming the user's file does not make it fleetc's
    foreign = [p for p in gitrepo.uncommitted(root, folder)
               if not _made_by_fleetc(root / p, p[len(folder) + 1:], files, owned)]
    if foreign:
        raise FleetcError(f"{folder}/ has changes fleetc did not make; commit or discard them first "
                          "(nothing was written):\n" + "\n".join(f"  {p}" for p in foreign))
    before = snapshot_of_output({p: t for p, t in committed.items() if p in owned},
                                {c.name: c.gpu_type for c in model.clusters},
                                time_sliced_units(model))
    report = compare(before, snapshot(model, placement, files),
                     base_label="HEAD", head_label="compile", out=folder)
    changed_policies = [p for p in gitrepo.uncommitted(root, *policies) if p in policies] if policies else []
    messages = [commit_message(report, changed_policies)]  # then the one of what git staged

    def message(held: Sequence[tuple[str, str]]) -> str:
        mine = [status for status, path in held if path.startswith(f"{folder}/")]
        messages.append(commit_message(report, changed_policies, mine))
        return messages[-1]

    commits: list[str | None] = []
    with gitrepo.index_kept(root):  # a failed commit (a hook) leaves the index as it was...
        # ...and the output folder: the previous tree is swapped back
        write_tree(out, files,
                   then=lambda: commits.append(gitrepo.commit_paths(root, [folder, *policies], message)))
    return commits[0], messages[-1]


def _policy_files(root: Path, policy_paths: Sequence[str], workdir: Path) -> list[str]:
    """Repository paths of the policy files a compile of ``policy_paths`` reads, and of the
    tracked ones that are gone; refuses (:class:`UsageError`) files git cannot commit."""
    hint = ("--commit commits the policies with the output, so that compile --check passes on "
            "the commit; compile without --commit, or {what}")
    files = []
    for path in discover(policy_paths, workdir).files:
        try:
            files.append(gitrepo.relative_to_root(root, workdir / path))
        except UsageError:
            raise UsageError(f"{display_path(path, workdir)}: a policy file outside the git repository at {root}; "
                             + hint.format(what="move the policies into the repository")) from None
    ignored = gitrepo.ignored(root, files)
    if ignored:
        raise UsageError(f"{ignored[0]}: a policy file git ignores (.gitignore); "
                         + hint.format(what="stop ignoring it"))
    gone = [p for given in policy_paths
            for p in gitrepo.tracked_gone(root, gitrepo.relative_to_root(root, workdir / given))
            if is_policy_name(p) and not any(part.startswith(".") for part in PurePosixPath(p).parts)]
    return sorted(set(files) | set(gone))


def _made_by_fleetc(path: Path, rel: str, files: Mapping[str, str], owned: set[str]) -> bool:
    """Whether a file that differs from HEAD is already as this compile leaves it: holding what
    it writes, or gone when it is a file fleetc wrote (per HEAD's record) and writes no more."""
    if not path.exists():
        return rel in owned and rel not in files
    if not path.is_file():
        return False
    if rel == RECORD:
        return set(path.read_text(encoding="utf-8", errors="replace").splitlines()) == {
            p for p in files if not is_users(p)}
    return rel in files and path.read_bytes() == files[rel].encode("utf-8")
