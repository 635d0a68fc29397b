"""Git, the only module that touches it: read files at a revision, and commit the output folder.

Files at a revision are read from git's objects, never by checking anything out, so the working
tree and the index stay as the user left them. Paths here are POSIX paths relative to the
repository root. Every failure a user can cause (not a repository, an unknown revision) is a
:class:`~fleetc.errors.UsageError`; a failing ``git commit`` (a hook said no) is a
:class:`GitError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, cast

from git import Blob, GitCommandError, InvalidGitRepositoryError, NoSuchPathError, Repo, Submodule, Tree
from git.exc import BadName, BadObject
from git.objects import Commit

from fleetc.errors import FleetcError, UsageError
from fleetc.policy.files import (
    BROKEN_LINK,
    LINK_HINT,
    LINK_LOOP,
    LINK_OUTSIDE,
    LINK_OUTSIDE_HINT,
    MAX_FILE_BYTES,
    NOT_A_POLICY,
    NOT_A_POLICY_HINT,
    is_note_name,
    is_policy_name,
    too_large,
)

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


@dataclass(frozen=True)
class Found:
    """An entry :func:`read_tree_files` met: under ``paths[given]``, at ``inner`` below it as
    found (through links, not resolved; ``""`` for the named path itself)."""

    given: int
    inner: str


@dataclass(frozen=True)
class TreeFiles:
    """The policy files at a revision, and every entry there that could not be read or was left
    out for a reason that is an error (message and hint, as the working-tree loader words them)."""

    files: tuple[tuple[Found, bytes], ...]
    problems: tuple[tuple[Found, str, str], ...]


def read_tree_files(root: Path, ref: str, paths: Sequence[str]) -> TreeFiles:
    """Policy files under ``paths`` (repository paths) at ``ref``, found as
    :func:`fleetc.policy.files.discover` finds them in the working tree.

    A folder is searched recursively (policy files and notes as discover tells them, hidden entries skipped), a file
    named directly is read whatever its name. A symbolic link is followed through the tree at
    ``ref`` when it stays inside the named paths, each file read once under the first of its
    names; a link that is broken, loops or leaves them is a problem, as is a submodule (its
    files are in another repository) and a file over the size limit (never read). A link
    leaving the repository is a problem whatever it points at: at a revision fleetc cannot
    tell. A named path that does not exist at ``ref`` contributes nothing (the caller decides
    what an empty side means); one whose links are broken, loop or leave the repository is a
    :class:`UsageError`, as on the command line.
    """
    repo = Repo(root)
    walk = _TreeWalk(_commit(repo, ref).tree, Path(root), paths)
    named = []
    for given, path in enumerate(paths):
        try:
            real, item = walk.resolve(path)
        except _Missing as missing:
            if missing.followed:
                raise UsageError(f"{path}: {BROKEN_LINK} at {ref}") from None
            continue
        except _Unresolved as err:
            raise UsageError(f"{path}: {err.message} at {ref}") from None
        named.append((Found(given, ""), real, item))
    walk.roots = [real for _, real, _ in named]
    for found, real, item in named:
        if isinstance(item, Tree):
            walk.folder(found, real, item)
        else:
            walk.entry(found, real, item, named=True)
    return TreeFiles(tuple(sorted(walk.files.values(), key=lambda f: walk.shown(f[0]))),
                     tuple(walk.problems))


#: Links followed while resolving one path before it counts as a loop (Linux's MAXSYMLINKS).
MAX_LINKS = 40

_Item = Blob | Tree | Submodule
_Real = tuple[str, ...]  # a path in the tree at the revision with every link resolved


class _Missing(Exception):
    def __init__(self, followed: bool):
        super().__init__()
        self.followed = followed  # whether a link was followed on the way (then it is broken)


class _Unresolved(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _TreeWalk:
    """:class:`fleetc.policy.files._Walk` over a tree at a revision: folders with a stack, links
    resolved in the tree as the kernel resolves them on disk."""

    def __init__(self, tree: Tree, root: Path, paths: Sequence[str]):
        self.tree, self.paths = tree, paths
        self.checkouts = (root.absolute(), root.resolve())  # where an absolute link could land inside
        self.roots: list[_Real] = []
        self.files: dict[_Real, tuple[Found, bytes]] = {}
        self.folders: set[_Real] = set()
        self.problems: list[tuple[Found, str, str]] = []

    def shown(self, found: Found) -> str:
        """The entry's path as found, for ordering like the working-tree loader."""
        given = PurePosixPath(self.paths[found.given]).as_posix()
        return f"{given}/{found.inner}" if found.inner else given

    def resolve(self, path: str) -> tuple[_Real, _Item]:
        """The entry at ``path`` with every link on the way followed. Raises :class:`_Missing`
        when there is none, :class:`_Unresolved` for a loop or a link leaving the repository."""
        pending = path.split("/")[::-1]
        real: list[str] = []
        items: list[_Item] = [self.tree]
        links = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if not isinstance(items[-1], Tree):  # a path through a file
                raise _Missing(links > 0)
            if part == "..":
                if not real:
                    raise _Unresolved(LINK_OUTSIDE_REPOSITORY)
                real.pop()
                items.pop()
                continue
            child = _child(items[-1], part)
            if child is None:
                raise _Missing(links > 0)
            if child.mode != _SYMLINK_MODE:
                real.append(part)
                items.append(child)
                continue
            links += 1
            if links > MAX_LINKS:
                raise _Unresolved(LINK_LOOP)
            target = os.fsdecode(cast(Blob, child).data_stream.read())
            if not target:
                raise _Missing(True)
            if target.startswith("/"):
                target = self._inside_checkout(target)
                real, items = [], [self.tree]
            pending.extend(target.split("/")[::-1])
        return tuple(real), items[-1]

    def _inside_checkout(self, target: str) -> str:
        """An absolute link target as a repository path; it may name this very checkout."""
        for checkout in self.checkouts:
            with suppress(ValueError):
                return PurePosixPath(target).relative_to(checkout.as_posix()).as_posix()
        raise _Unresolved(LINK_OUTSIDE_REPOSITORY)

    def folder(self, top: Found, top_real: _Real, top_tree: Tree) -> None:
        stack = [(top, top_real, top_tree)]
        while stack:
            found, real, tree = stack.pop()
            if real in self.folders:
                continue  # a link to a folder read under its own name (or to an ancestor)
            self.folders.add(real)
            subfolders = []
            for item in sorted((i for i in tree if not _name(i).startswith(".")), key=_name):
                name = _name(item)
                inner = Found(found.given, f"{found.inner}/{name}" if found.inner else name)
                if item.mode == _SYMLINK_MODE:
                    subfolders += self._link(inner, "/".join((*real, name)))
                elif isinstance(item, Tree):
                    subfolders.append((inner, (*real, name), item))
                else:
                    self.entry(inner, (*real, name), item, named=False)
            stack.extend(reversed(subfolders))

    def _link(self, found: Found, path: str) -> list[tuple[Found, _Real, Tree]]:
        """The folder the link at ``path`` leads to, to walk; a file it leads to is taken here,
        and a link that is broken, loops or leaves the roots is reported."""
        try:
            real, item = self.resolve(path)
        except _Missing:
            self._problem(found, BROKEN_LINK, LINK_HINT)
            return []
        except _Unresolved as err:
            self._problem(found, err.message if err.message == LINK_LOOP else LINK_OUTSIDE,
                          LINK_HINT if err.message == LINK_LOOP else LINK_OUTSIDE_HINT)
            return []
        folder = isinstance(item, Tree)
        if not any(real[:len(r)] == r for r in self.roots):
            if folder or is_policy_name(path):
                self._problem(found, LINK_OUTSIDE, LINK_OUTSIDE_HINT)
            elif not is_note_name(path):
                self._problem(found, NOT_A_POLICY, NOT_A_POLICY_HINT)
            return []
        if isinstance(item, Tree):
            return [(found, real, item)]
        self.entry(found, real, item, named=False)
        return []

    def entry(self, found: Found, real: _Real, item: _Item, *, named: bool) -> None:
        """A file (or what a link leads to) in a folder, or one the user named (any name)."""
        if isinstance(item, Submodule):
            self._problem(found, "a git submodule: its files are in another repository, which "
                          "fleetc does not read", "copy the policies into this repository")
        elif named or is_policy_name(self.shown(found)):
            self._file(found, real, cast(Blob, item))
        elif not is_note_name(self.shown(found)):
            self._problem(found, NOT_A_POLICY, NOT_A_POLICY_HINT)

    def _file(self, found: Found, real: _Real, blob: Blob) -> None:
        known = self.files.get(real)
        if known is not None and self.shown(known[0]) <= self.shown(found):
            return
        if blob.size > MAX_FILE_BYTES:  # never read: it could be any size
            problem = too_large("", blob.size)
            self._problem(found, problem.message, problem.hint)
            return
        self.files[real] = (found, blob.data_stream.read())

    def _problem(self, found: Found, message: str, hint: str) -> None:
        self.problems.append((found, message, hint))


#: What a link leaving the repository is called when it is named on the command line.
LINK_OUTSIDE_REPOSITORY = "symbolic link points outside the repository"


def _name(item: _Item) -> str:
    return PurePosixPath(item.path).name  # a Submodule read from a tree knows no name


def _child(tree: Tree, name: str) -> _Item | None:
    try:
        return tree / name
    except KeyError:
        return None


def read_folder(root: Path, ref: str, folder: str) -> dict[str, str]:
    """Every file under ``folder`` (the output folder) at ``ref``, keyed by its path relative to
    ``folder``; links to it on the way are followed as on disk (``out -> build/out``).

    Empty when the folder does not exist there or the repository has no commits yet. fleetc
    writes only files there: a symbolic link or a submodule inside it at ``ref`` is a
    :class:`UsageError` naming it, never left out of what was committed.
    """
    repo = Repo(root)
    if not repo.head.is_valid():
        return {}
    item = _resolved(repo, root, ref, folder)
    if not isinstance(item, Tree):
        return {}
    folder_path = os.fspath(item.path)
    prefix = len(folder_path) + 1 if folder_path else 0
    found = {}
    for entry in item.traverse():
        if not isinstance(entry, Blob | Submodule):  # a folder
            continue
        inner = os.fspath(entry.path)[prefix:]
        if not isinstance(entry, Blob) or entry.mode == _SYMLINK_MODE:
            what = "a symbolic link" if isinstance(entry, Blob) else "a git submodule"
            raise UsageError(f"{folder}/{inner}: {what} in the output folder at {ref}: fleetc writes only files "
                             f"there, and does not read it\n  hint: remove it from {folder}/ and commit that")
        found[inner] = entry.data_stream.read().decode("utf-8", "replace")
    return found


def read_file(root: Path, ref: str, path: str) -> bytes | None:
    """The content of the file ``path`` at ``ref``, links on the way followed as on disk; None
    when there is no such file there. A link that is broken, loops or leaves the repository is
    a :class:`UsageError` naming it (as for the policies), and so is a submodule."""
    repo = Repo(root)
    item = _resolved(repo, root, ref, path)
    if isinstance(item, Submodule):
        raise UsageError(f"{path}: a git submodule at {ref}: its files are in another repository, which fleetc "
                         "does not read")
    return item.data_stream.read() if isinstance(item, Blob) else None


def _resolved(repo: Repo, root: Path, ref: str, path: str) -> _Item | None:
    """The entry at ``path`` at ``ref`` with every link on the way followed in the tree there
    (:meth:`_TreeWalk.resolve`); None when there is none."""
    try:
        return _TreeWalk(_commit(repo, ref).tree, root, [path]).resolve(path)[1]
    except _Missing as missing:
        if missing.followed:
            raise UsageError(f"{path}: {BROKEN_LINK} at {ref}") from None
        return None
    except _Unresolved as err:
        raise UsageError(f"{path}: {err.message} at {ref}") from None


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


def commit_paths(root: Path, paths: Sequence[str], message: str | Callable[[Sequence[tuple[str, str]]], str]
                 ) -> str | None:
    """Commit exactly ``paths`` (files or folders) as they are in the working tree, deletions
    included; None when they match HEAD. ``message``: the commit message, or what makes it
    from what the commit holds: (``A``, ``M`` or ``D``, path) per file, as git stages it.

    Only ``paths`` are staged, and ``git commit --only`` leaves every other staged change in the
    index, uncommitted, as the user left it. Works before the first commit too.
    """
    repo = Repo(root)
    try:
        repo.git.add("--all", "--", *paths)
        if repo.head.is_valid():
            held = _name_status(repo.git.diff("--cached", "--name-status", "--no-renames", "-z", "HEAD", "--", *paths))
        else:
            held = [("A", p) for p in repo.git.ls_files("--cached", "-z", "--", *paths).split("\0") if p]
        if not held:
            return None
        text = message if isinstance(message, str) else message(held)
        # git's trace2 events on stderr say which hook ran and how it exited (git says neither)
        repo.git.commit("--only", "--quiet", "--message", text, "--", *paths,
                        env={"GIT_TRACE2_EVENT": "1", "GIT_TRACE2_EVENT_NESTING": "1"})
    except GitCommandError as err:
        raise GitError(_failure(err)) from None
    return repo.head.commit.hexsha


def _name_status(output: str) -> list[tuple[str, str]]:
    """``git diff --name-status -z`` as (status letter, path) pairs."""
    fields = output.split("\0")
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2) if fields[i]]


def _failure(err: GitCommandError) -> str:
    """``git commit failed: the pre-commit hook (.git/hooks/pre-commit) exited with 3: <what it
    said>``: the hook that refused (from git's trace2 events), its exit code and its output, or
    git's exit code and message when no hook failed; never an empty detail."""
    command = f"git {err.command[1] if len(err.command) > 1 else ''}".rstrip()
    text = str(err.stderr or "").strip().removeprefix("stderr: ").strip("'")
    said, hooks, exits = [], {}, {}
    for line in text.splitlines():
        event = _trace_event(line)
        if event is None:
            said.append(line)
        elif event.get("event") == "child_start" and event.get("child_class") == "hook":
            argv = event.get("argv") or ["?"]
            hooks[event.get("child_id")] = (str(event.get("hook_name") or PurePosixPath(str(argv[0])).name),
                                            str(argv[0]))
        elif event.get("event") == "child_exit" and event.get("child_id") in hooks:
            exits[event.get("child_id")] = event.get("code")
    detail = "\n".join(said).strip("\n ") or str(err.stdout or "").strip().removeprefix("stdout: ").strip("'\n ")
    refused = next(((hooks[child], code) for child, code in exits.items() if code), None)
    if refused is not None:
        (name, path), code = refused
        return (f"{command} failed: the {name} hook ({path}) exited with {code}"
                + (f": {detail}" if detail else " and said nothing"))
    return f"{command} failed (exit {err.status}): {detail}" if detail else \
        f"{command} failed with exit code {err.status} and said nothing"


def _trace_event(line: str) -> dict[str, Any] | None:
    """A git trace2 event (one JSON object per line), or None for any other line."""
    if not line.startswith('{"event":'):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "sid" in event else None


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
    """The commit ``ref`` names, resolved by git itself: gitpython's own reader of revisions knows
    a part of git's syntax and raises what it does not (``@{-1}``, ``HEAD@{1.year.ago}``), and
    ``--end-of-options`` keeps a ref that starts with ``-`` from reading as an option."""
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        commit = repo.commit(sha)
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

