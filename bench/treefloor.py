"""What touching every file of a compiled output costs, once per way a recompile touches it.

    python -m bench.treefloor OUT

A recompile that writes (``fleetc compile`` into an ``OUT`` it compiled before) builds a whole
new tree and swaps it in (:mod:`fleetc.emit`), so even a one-line change touches every file
of ``OUT`` at least three times: the check of the folders it keeps (read, mark, digest:
:func:`fleetc.emit.reusable_folders`), a hard link into the new tree, and the removal of the
old tree after the swap. This times each of those over the files fleetc's record lists, in
this process, CPU and wall seconds beside the load, plus what the cheapest check imaginable
costs (a ``stat`` and the mark's ``getxattr`` per file, no read): the floor under any
recompile of this design, whatever else it does. And what a compile from scratch must do at
the least: write every file anew, as the writer does (:func:`fleetc.emit._write_files`:
create, write, mark), into a tree of its own. The new trees are made beside ``OUT`` (hard
links need the same filesystem) and removed; ``OUT`` is not changed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.clock import load_average, load_words
from fleetc.emit import _write_files, owned_files, reusable_folders
from fleetc.infra.marks import MARK

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def by_folder(out: Path) -> dict[str, list[str]]:
    """The files fleetc's record lists in ``out``, by folder (relative), names sorted."""
    folders: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(owned_files(out)):
        folder, _, name = rel.rpartition("/")
        folders[folder].append(name)
    return folders


def stat_and_mark(out: Path, folders: dict[str, list[str]]) -> None:
    """A ``stat`` and the mark's ``getxattr`` of every file, nothing read."""
    for folder, names in folders.items():
        fd = os.open(out / folder, _FOLDER)
        # getxattr takes no folder descriptor: the path through it where Linux gives one
        at = f"/proc/self/fd/{fd}/" if os.path.isdir("/proc/self/fd") else f"{out / folder}/"
        try:
            for name in names:
                os.stat(name, dir_fd=fd, follow_symlinks=False)
                try:
                    os.getxattr(at + name, MARK, follow_symlinks=False)
                except OSError:
                    pass
        finally:
            os.close(fd)


def link_tree(out: Path, new: Path, folders: dict[str, list[str]]) -> None:
    """Hard-link every file into the tree ``new``, folder by folder, as the writer keeps them."""
    for folder, names in folders.items():
        (new / folder).mkdir(parents=True, exist_ok=True)
        source, target = os.open(out / folder, _FOLDER), os.open(new / folder, _FOLDER)
        try:
            for name in names:
                os.link(name, name, src_dir_fd=source, dst_dir_fd=target, follow_symlinks=False)
        finally:
            os.close(source)
            os.close(target)


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """CPU seconds (user + system) of ``work`` in this process, and its wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(out: Path) -> list[tuple[str, tuple[float, float]]]:
    """Each way of touching every file of ``out``, with its CPU and wall seconds. The compile's
    check says how many files it would keep: those of folders it cannot keep (no render record,
    a file changed by hand or without fleetc's mark) it stops reading at the first such file."""
    folders = by_folder(out)
    texts = {f"{folder}/{name}": (out / folder / name).read_text(encoding="utf-8")
             for folder, names in folders.items() for name in names}
    new = Path(tempfile.mkdtemp(prefix=".treefloor-", dir=out.parent))
    fresh = Path(tempfile.mkdtemp(prefix=".treefloor-", dir=out.parent))
    checked: list[int] = []
    try:
        seconds = timed(lambda: checked.append(sum(map(len, reusable_folders(out).paths.values()))))
        return [
            (f"check as a compile does (read, mark, digest): it would keep {checked[0]} files", seconds),
            ("check by stat and mark only (no read)", timed(lambda: stat_and_mark(out, folders))),
            ("hard-link into a new tree", timed(lambda: link_tree(out, new, folders))),
            ("remove that tree", timed(lambda: shutil.rmtree(new))),
            ("write every file anew, as a compile from scratch (create, write, mark)",
             timed(lambda: _write_files(fresh, texts, None))),
        ]
    finally:
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(fresh, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="an output folder fleetc compiled")
    args = parser.parse_args(argv)
    files = sum(len(names) for names in by_folder(args.out).values())
    if not files:
        parser.error(f"{args.out}: no files in fleetc's record (compile into it first)")
    print(f"{files} files of {args.out}; {load_words(load_average())}")
    for what, (cpu, wall) in measure(args.out):
        print(f"{cpu:7.2f} s CPU {wall:7.2f} s wall  {what}")
    print(f"{load_words(load_average())} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
