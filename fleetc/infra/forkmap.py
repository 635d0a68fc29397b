"""``[func(item) for item in items]`` on every usable core, by forking: the load stage's hot loop
(and :class:`Background`: one result computed beside other work).

Most of loading a large fleet is libyaml handing Python one event object at a time (see
:mod:`fleetc.policy.fastcompose`); files are independent, so on two cores two processes read them in
about 60% of the time (0.79 s -> 0.49 s for the 8 MB of a 1,000-cluster, 20,000-stage fleet).

Forked children compute their share, pickle it into a pipe and exit; the parent computes its
own share meanwhile, then reads theirs. The result is the same list in the same order as the
plain loop gives, and the plain loop is what runs when forking would not pay or is not safe:
a small input, one usable core, no ``os.fork`` (Windows), or another thread running (a child
forked from a multi-threaded process may deadlock on a lock some other thread held). A share
whose child fails in any way (it raised, was killed, sent something unreadable) is computed
again by the parent, and so is one that could not be forked (out of processes or memory): a
failing child costs time, never a different result.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Below this total size (in whatever unit ``sizes`` gives, bytes for files) the loop runs
#: here: forking and pickling cost a few milliseconds, parsing 1 MB of YAML ~0.1 s.
MIN_PARALLEL_SIZE = 1024 * 1024


def fork_map(func: Callable[[T], R], items: Sequence[T], sizes: Sequence[int]) -> list[R]:
    """``[func(item) for item in items]``, computed in up to one process per usable core.

    ``func`` must be pure and its results picklable; ``sizes`` (one per item) balance the work.
    """
    workers = min(usable_cores(), len(items))
    if workers < 2 or sum(sizes) < MIN_PARALLEL_SIZE or not _can_fork():
        return [func(item) for item in items]
    shares = _shares(sizes, workers)
    children = [_spawn(func, [items[i] for i in share]) for share in shares[1:]]
    try:
        mine = [func(items[i]) for i in shares[0]]
    finally:  # even when this share raised: no child is left behind
        theirs: list[list[R] | None] = [_collect(child) for child in children]
    results: list[R | None] = [None] * len(items)
    for share, values in zip(shares, [mine, *theirs], strict=True):
        if values is None or len(values) != len(share):
            values = [func(items[i]) for i in share]
        for i, value in zip(share, values, strict=True):
            results[i] = value
    return results  # type: ignore[return-value]  # every slot is filled above


class Background(Generic[R]):
    """``func()`` computed in a forked child while this process goes on with other work (one
    core computes a stage alone: the other reads a file meanwhile); :meth:`result` waits for it.

    The same rules as :func:`fork_map`: a ``size`` below :data:`MIN_PARALLEL_SIZE`, one
    usable core, no ``os.fork`` or another thread running, and ``func`` runs here when its
    result is asked for; a child that fails costs time (``func`` runs here again), never a
    different result. Leaving the ``with`` block ends a child whose result was not asked for
    (the work beside it failed), so none is left behind.
    """

    def __init__(self, func: Callable[[], R], size: int):
        self.func = func
        forks = size >= MIN_PARALLEL_SIZE and usable_cores() > 1 and _can_fork()
        self.child = _spawn(lambda _: func(), [None]) if forks else None

    def result(self) -> R:
        child, self.child = self.child, None
        values: list[R] | None = _collect(child)
        return values[0] if values is not None and len(values) == 1 else self.func()

    def __enter__(self) -> Background[R]:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.child is not None:
            pid, read_end = self.child
            self.child = None
            os.close(read_end)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS has no affinity
        return os.cpu_count() or 1


def _can_fork() -> bool:
    return hasattr(os, "fork") and threading.active_count() == 1


def _shares(sizes: Sequence[int], count: int) -> list[list[int]]:
    """Item indexes in ``count`` shares of about equal total size (largest first, each to the
    lightest share), each in ascending order."""
    shares: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        lightest = loads.index(min(loads))
        shares[lightest].append(i)
        loads[lightest] += sizes[i]
    return [sorted(share) for share in shares]


def _spawn(func: Callable[[T], R], items: list[T]) -> tuple[int, int] | None:
    """Fork a child that writes ``pickle([func(item) for item in items])`` to a pipe; the
    child's process id and the pipe's read end, or None when no child could be forked."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child: never returns, never runs the parent's cleanup
        status = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump([func(item) for item in items], pipe, protocol=pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    return pid, read_end


def _collect(child: tuple[int, int] | None) -> list[R] | None:
    """What the child sent, or None when it failed (or was never forked)."""
    if child is None:
        return None
    pid, read_end = child
    values: object = None
    try:
        # unpickled as it arrives: the whole pickle is never held beside what it holds (the
        # render's files, ~200 MB at 1,000 x 20,000)
        with os.fdopen(read_end, "rb") as pipe:
            try:
                values = pickle.load(pipe)
            except Exception:  # noqa: BLE001 - a child that died mid-write sends a truncated pickle
                values = None
    finally:
        _, status = os.waitpid(pid, 0)
    return values if status == 0 and isinstance(values, list) else None
