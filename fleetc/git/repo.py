"""Git, the only module that touches it: read files at a revision, and commit the output folder.

Files at a revision are read from git's objects, never by checking anything out, so the working
tree and the index stay as the user left them. Paths here are POSIX paths relative to the
repository root. Every failure a user can cause (not a repository, an unknown revision) is a
:class:`~fleetc.errors.UsageError`; a failing ``git commit`` (a hook said no) is a
:class:`GitError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from git import Blob, GitCommandError, InvalidGitRepositoryError, NoSuchPathError, Repo, Tree
from git.exc import BadName, BadObject
from git.objects import Commit

from fleetc.errors import FleetcError, UsageError
from fleetc.policy.load import POLICY_SUFFIXES

_SYMLINK_MODE = 0o120000


class GitError(FleetcError):
    """A git command fleetc ran failed (for example a commit hook refused the commit)."""


def repo_root(start: Path) -> Path:
    """The root of the working tree containing ``start``."""
    try:
        repo = Repo(start, search_parent_directories=True)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise UsageError(f"{start}: not inside a git repository") from None
    if repo.bare or repo.working_tree_dir is None:
        raise UsageError(f"{start}: a bare git repository has no working tree")
    return Path(repo.working_tree_dir)


def relative_to_root(root: Path, path: Path) -> str:
    """``path`` (absolute, or relative to the working folder) as a repository path."""
    absolute = path.absolute()
    try:
        relative = absolute.relative_to(root.absolute())
    except ValueError:
        try:
            relative = absolute.resolve().relative_to(root.resolve())
        except ValueError:
            raise UsageError(f"{path}: outside the git repository at {root}") from None
    return relative.as_posix()


def read_tree_files(root: Path, ref: str, paths: Sequence[str]) -> list[tuple[str, bytes]]:
    """Policy files (``*.yaml``/``*.yml``, hidden entries skipped) under ``paths`` at ``ref``.

    Follows :func:`fleetc.policy.load.discover`: a folder is searched recursively, a file named directly
    is read whatever its name. A path that does not exist at ``ref`` contributes nothing (the
    caller decides what an empty side means). Symbolic links are skipped: at a revision they are
    just text naming a target.
    """
    tree = _commit(Repo(root), ref).tree
    found: dict[str, bytes] = {}
    for path in paths:
        item = _lookup(tree, path)
        if isinstance(item, Tree):
            for blob in _policy_blobs(item):
                found[os.fspath(blob.path)] = blob.data_stream.read()
        elif isinstance(item, Blob) and item.mode != _SYMLINK_MODE:
            found[os.fspath(item.path)] = item.data_stream.read()
    return sorted(found.items())


def read_folder(root: Path, ref: str, folder: str) -> dict[str, str]:
    """Every file under ``folder`` at ``ref``, keyed by its path relative to ``folder``.

    Empty when the folder does not exist there or the repository has no commits yet.
    """
    repo = Repo(root)
    if not repo.head.is_valid():
        return {}
    item = _lookup(_commit(repo, ref).tree, folder)
    if not isinstance(item, Tree):
        return {}
    folder_path = os.fspath(item.path)
    prefix = len(folder_path) + 1 if folder_path else 0
    return {os.fspath(b.path)[prefix:]: b.data_stream.read().decode("utf-8", "replace")
            for b in item.traverse() if isinstance(b, Blob) and b.mode != _SYMLINK_MODE}


def read_file(root: Path, ref: str, path: str) -> bytes | None:
    """The content of the file ``path`` at ``ref``; None when there is no such file there."""
    item = _lookup(_commit(Repo(root), ref).tree, path)
    return item.data_stream.read() if isinstance(item, Blob) and item.mode != _SYMLINK_MODE else None


def uncommitted(root: Path, *paths: str) -> list[str]:
    """Paths under ``paths`` whose working tree or index differs from HEAD (untracked included)."""
    output = Repo(root).git.status("--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
    entries = iter(output.split("\0"))
    found = []
    for entry in entries:
        if not entry:
            continue
        found.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the source path follows
            found.append(next(entries, ""))
    return sorted(p for p in found if p)


@contextmanager
def index_kept(root: Path) -> Iterator[None]:
    """Put git's index back as it was when the body raises (``git add`` has run, the commit not)."""
    index = Path(Repo(root).git_dir) / "index"
    saved = index.read_bytes() if index.exists() else None
    try:
        yield
    except BaseException:
        if saved is None:
            index.unlink(missing_ok=True)
        else:
            spare = index.with_name("index.fleetc-restore")
            spare.write_bytes(saved)
            os.replace(spare, index)
        raise


def commit_paths(root: Path, paths: Sequence[str], message: str) -> str | None:
    """Commit exactly ``paths`` (files or folders) as they are in the working tree, deletions
    included; None when they match HEAD.

    Only ``paths`` are staged, and ``git commit --only`` leaves every other staged change in the
    index, uncommitted, as the user left it. Works before the first commit too.
    """
    repo = Repo(root)
    try:
        repo.git.add("--all", "--", *paths)
        if repo.head.is_valid():
            staged = repo.git.diff("--cached", "--name-only", "HEAD", "--", *paths)
        else:
            staged = repo.git.ls_files("--cached", "--", *paths)
        if not staged:
            return None
        repo.git.commit("--only", "--quiet", "--message", message, "--", *paths)
    except GitCommandError as err:
        detail = (err.stderr or err.stdout or "").strip().removeprefix("stderr: ").strip("'\n ")
        raise GitError(f"git {err.command[1] if len(err.command) > 1 else ''} failed: {detail}") from None
    return repo.head.commit.hexsha


def ignored(root: Path, paths: Sequence[str]) -> list[str]:
    """Those of ``paths`` git ignores (they can never be committed)."""
    if not paths:
        return []
    try:
        output = Repo(root).git.check_ignore("--", *paths)
    except GitCommandError as err:  # exit 1: none is ignored
        if err.status == 1:
            return []
        raise
    return sorted(line for line in output.splitlines() if line)


def tracked_gone(root: Path, folder: str) -> list[str]:
    """Files under ``folder`` that HEAD or the index has and the working tree no longer does."""
    output = Repo(root).git.ls_files("--deleted", "--", folder)
    return sorted(line for line in output.splitlines() if line)


def _commit(repo: Repo, ref: str) -> Commit:
    try:
        commit = repo.commit(ref)
        commit.tree  # noqa: B018 - read now: in a shallow clone the commit may name a missing parent
        return commit
    except (BadName, BadObject, ValueError, GitCommandError):
        if (Path(repo.git_dir) / "shallow").exists():
            raise UsageError(f"{ref}: not in this shallow clone (its history is cut short)\n"
                             "  hint: fetch the history, e.g. git fetch --unshallow, or "
                             "actions/checkout with fetch-depth: 0") from None
        if not repo.head.is_valid():
            raise UsageError(f"{ref}: unknown revision (the repository has no commits yet)") from None
        raise UsageError(f"{ref}: unknown revision (not a branch, tag or commit in this repository)") from None


def _lookup(tree: Tree, path: str) -> Blob | Tree | None:
    clean = PurePosixPath(path).as_posix()
    if clean in ("", "."):
        return tree
    try:
        return tree / clean
    except KeyError:
        return None


def _policy_blobs(tree: Tree) -> Iterator[Blob]:
    for item in tree:
        if item.name.startswith("."):
            continue
        if isinstance(item, Tree):
            yield from _policy_blobs(item)
        elif isinstance(item, Blob) and item.mode != _SYMLINK_MODE and item.name.endswith(POLICY_SUFFIXES):
            yield item
