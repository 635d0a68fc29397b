"""Which files under the paths a user names are policies, and reading them: discovery (every
entry read or reported, links followed only inside the named paths), bounded reads of regular
files only, and how a file is named in messages (relative to the working folder). What is read
is parsed by :mod:`.load`; :mod:`fleetc.git.repo` applies the same rules to a revision's tree.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetc.errors import Diagnostic, UsageError

#: A policy file larger than this is refused: policies are small, and the limit keeps a
#: runaway generated file from exhausting memory in CI.
MAX_FILE_BYTES = 4 * 1024 * 1024
#: What fleetc reads in a policy folder, whatever the case of the suffix: YAML, and JSON (which
#: YAML 1.2 reads). The engines apply ``*.json`` too, and a pipeline saved as ``a.YAML`` must
#: not be dropped without a word.
POLICY_SUFFIXES = (".yaml", ".yml", ".json")
#: What a policy folder may hold beside policies, never read: notes for people. Any other file
#: there is an error: fleetc cannot tell a policy saved under another name from a stray file.
NOTE_SUFFIXES = (".md", ".markdown", ".txt", ".rst", ".adoc")
NOTE_NAMES = ("README", "LICENSE", "NOTICE", "OWNERS", "CODEOWNERS", "AUTHORS", "CHANGELOG")
NOT_A_POLICY = ("not a policy file: fleetc reads *.yaml, *.yml and *.json (any case) and skips notes "
                "(*.md, *.txt, README...); it would be ignored")
NOT_A_POLICY_HINT = ("rename it to *.yaml if it holds policies; otherwise move it out of the policy folder "
                     "(or hide it: .name)")


def is_policy_name(name: str) -> bool:
    """Whether a file of this name in a policy folder is read as policies."""
    return name.lower().endswith(POLICY_SUFFIXES)


def is_note_name(name: str) -> bool:
    """Whether a file of this name in a policy folder is a note for people, skipped."""
    base = name.rsplit("/", 1)[-1]
    return base.lower().endswith(NOTE_SUFFIXES) or base.upper() in NOTE_NAMES


#: What discovery says of a link it cannot follow; :mod:`fleetc.git.repo` says the same of a
#: link at a revision.
LINK_LOOP = "symbolic link loop"
BROKEN_LINK = "broken symbolic link"
LINK_HINT = "remove the link, or point it at a policy file or folder"
LINK_OUTSIDE = "symbolic link points outside the policy folders"
LINK_OUTSIDE_HINT = "copy the file into the policy folder instead"


@dataclass(frozen=True)
class Discovery:
    """The policy files under the paths a user named, and every entry that could not be read
    or was left out for a reason that is an error (nothing is skipped silently)."""

    files: tuple[Path, ...]
    problems: tuple[Diagnostic, ...]


def discover(paths: Sequence[str], workdir: Path = Path(".")) -> Discovery:
    """Expand files and folders (recursively, :func:`is_policy_name`, hidden entries skipped),
    relative to ``workdir`` unless absolute; problems name files as :func:`display_path` does.

    Within a folder, every entry that is not a hidden entry or a note (:func:`is_note_name`)
    is either read or reported: a file of another suffix, a folder that cannot be listed, a FIFO, socket or device
    (never opened: reading one could block forever or never end), a broken symbolic link, a
    link loop, and a link that leaves every named path (a policy cannot pull in arbitrary
    files). A link to a folder or file inside them is followed, each file read once.

    Raises :class:`UsageError` for a path that does not exist: that is a command-line mistake,
    not a policy error.
    """
    named: list[tuple[Path, os.stat_result]] = []
    for given in paths:
        path = workdir / given
        try:
            named.append((path, os.stat(path)))
        except OSError as err:
            raise UsageError(f"{given}: {_stat_problem(err, path)}") from None
    walk = _Walk([Path(os.path.realpath(path)) for path, _ in named], workdir)
    for path, info in named:
        if stat.S_ISDIR(info.st_mode):
            walk.folder(path)
        else:
            walk.entry(path, info)
    return Discovery(tuple(sorted(walk.files.values(), key=lambda p: p.as_posix())),
                     tuple(walk.problems))


def _stat_problem(err: OSError, path: Path) -> str:
    if err.errno == errno.ELOOP:
        return LINK_LOOP
    if err.errno == errno.ENOENT:
        return BROKEN_LINK if os.path.islink(path) else "no such file or directory"
    return err.strerror or str(err)


class _Walk:
    """Collects policy files and problems; folders are walked with a stack, not recursion."""

    def __init__(self, roots: Sequence[Path], workdir: Path):
        self.roots, self.workdir = roots, workdir
        self.files: dict[str, Path] = {}  # real path -> the first name it was found under
        self.folders: set[str] = set()  # real paths of the folders listed so far
        self.problems: list[Diagnostic] = []

    def folder(self, top: Path) -> None:
        stack = [top]
        while stack:
            folder = stack.pop()
            real = os.path.realpath(folder)
            if real in self.folders:
                continue  # a link to a folder read under its own name (or a link to an ancestor)
            self.folders.add(real)
            try:
                with os.scandir(folder) as listing:
                    entries = sorted((e for e in listing if not e.name.startswith(".")),
                                     key=lambda e: e.name)
            except OSError as err:
                self._problem(folder, f"cannot read folder: {err.strerror or err}",
                              "let fleetc read it, or move it out of the policy folder")
                continue
            subfolders = []
            for entry in entries:
                path = folder / entry.name
                if entry.is_symlink():
                    if self._link_is_folder(path):
                        subfolders.append(path)
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append(path)
                elif entry.is_file(follow_symlinks=False):
                    if is_policy_name(entry.name):
                        self._file(os.path.join(real, entry.name), path)
                    elif not is_note_name(entry.name):
                        self._problem(path, NOT_A_POLICY, NOT_A_POLICY_HINT)
                else:
                    self._special(path, entry.stat(follow_symlinks=False).st_mode)
            stack.extend(reversed(subfolders))

    def _link_is_folder(self, path: Path) -> bool:
        """Whether the link ``path`` leads to a folder to walk; a file it leads to is taken
        here, and a link that is broken, loops or leaves the roots is reported."""
        try:
            info = os.stat(path)
        except OSError as err:
            self._problem(path, _stat_problem(err, path), LINK_HINT)
            return False
        target = Path(os.path.realpath(path))
        folder = stat.S_ISDIR(info.st_mode)
        if not _inside(target, self.roots):
            if folder or is_policy_name(path.name):
                self._problem(path, LINK_OUTSIDE, LINK_OUTSIDE_HINT)
            elif not is_note_name(path.name):
                self._problem(path, NOT_A_POLICY, NOT_A_POLICY_HINT)
            return False
        if not folder:
            self.entry(path, info, named=False)
        return folder

    def entry(self, path: Path, info: os.stat_result, *, named: bool = True) -> None:
        """A file (or a link to one) found in a folder, or one the user named (any name)."""
        if not stat.S_ISREG(info.st_mode):
            self._special(path, info.st_mode)
        elif named or is_policy_name(path.name):
            self._file(os.path.realpath(path), path)
        elif not is_note_name(path.name):
            self._problem(path, NOT_A_POLICY, NOT_A_POLICY_HINT)

    def _file(self, real: str, path: Path) -> None:
        """One file, read once under the first of its names in path order."""
        known = self.files.get(real)
        if known is None or path.as_posix() < known.as_posix():
            self.files[real] = path

    def _special(self, path: Path, mode: int) -> None:
        self._problem(path, f"not a regular file ({_file_kind(mode)}); fleetc never opens one",
                      "policies are regular files; remove it")

    def _problem(self, path: Path, message: str, hint: str) -> None:
        self.problems.append(Diagnostic(display_path(path, self.workdir), 0, 0, "", message, hint))


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


def read_source(path: Path, display: str) -> tuple[str, bytes] | Diagnostic:
    """``(display, bytes)`` of the file ``path`` as :func:`load_files` reads it (a regular file,
    at most :data:`MAX_FILE_BYTES`), or the problem that refuses it."""
    try:
        return display, _read_bounded(path)
    except _Refused as problem:
        return problem.diagnostic(display)
    except OSError as err:
        return Diagnostic(display, 0, 0, "", f"cannot read file: {err.strerror or err}")


class _Refused(Exception):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint

    def diagnostic(self, display: str) -> Diagnostic:
        return Diagnostic(display, 0, 0, "", self.message, self.hint)


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


def _read_bounded(path: Path) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_FILE_BYTES` of them."""
    fd = os.open(path, _READ)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # checked on the open file: it may have been replaced
            raise _Refused(f"not a regular file ({_file_kind(info.st_mode)}); fleetc never "
                           "reads one", "policies are regular files; remove it")
        if info.st_size > MAX_FILE_BYTES:
            problem = too_large("", info.st_size)
            raise _Refused(problem.message, problem.hint)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(_CHUNK, MAX_FILE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise _Refused(f"file is more than {MAX_FILE_BYTES} bytes; the limit is "
                               f"{MAX_FILE_BYTES}", "split it into several policy files")
        return b"".join(chunks)
    finally:
        os.close(fd)


def display_path(path: Path, workdir: Path) -> str:
    """How messages and provenance name a file: relative to the working folder ``workdir`` when
    inside it, so ``fleetc compile $PWD/policies`` and ``fleetc compile policies`` write the same
    bytes. ``path`` is relative to ``workdir`` unless absolute; neither is resolved against the
    current directory (the CLI passes it as ``workdir``)."""
    located = Path(os.path.normpath(workdir / path))
    base = Path(os.path.normpath(workdir))
    if located == base or base in located.parents:
        return located.relative_to(base).as_posix()
    return located.as_posix()


def _inside(target: Path, roots: Sequence[Path]) -> bool:
    return any(target == r or r in target.parents for r in roots)


def too_large(display: str, size: int) -> Diagnostic:
    """A file of ``size`` bytes, over :data:`MAX_FILE_BYTES`."""
    return Diagnostic(display, 0, 0, "", f"file is {size} bytes; the limit is {MAX_FILE_BYTES}",
                      hint="split it into several policy files")
