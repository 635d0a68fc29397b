"""fork_map: the plain loop's result, whatever the children do."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetc.infra import forkmap
from fleetc.infra.forkmap import _shares, fork_map

PARENT = os.getpid()


@pytest.fixture(autouse=True)
def any_size_forks(monkeypatch):
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 0)


def _needs_fork() -> None:
    if forkmap.usable_cores() < 2 or not forkmap._can_fork():
        pytest.skip("forking needs two usable cores, os.fork and no other thread running")


def _pid_and_square(n: int) -> tuple[int, int]:
    return os.getpid(), n * n


def test_the_plain_loops_result_in_its_order_computed_in_children_too():
    _needs_fork()
    items = list(range(40))
    results = fork_map(_pid_and_square, items, [1] * len(items))
    assert [square for _, square in results] == [n * n for n in items]
    assert {pid for pid, _ in results} - {PARENT}, "no item was computed in a child"


def test_small_inputs_stay_in_this_process(monkeypatch):
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 101)
    results = fork_map(_pid_and_square, list(range(10)), [10] * 10)
    assert {pid for pid, _ in results} == {PARENT}


def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        results = fork_map(_pid_and_square, list(range(10)), [1] * 10)
    finally:
        stop.set()
        other.join()
    assert {pid for pid, _ in results} == {PARENT}


def _fails_in_children(n: int) -> int:
    if os.getpid() != PARENT:
        raise RuntimeError("a child's failure")
    return n + 1


def _killed_in_children(n: int) -> int:
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return n + 1


@pytest.mark.parametrize("func", [_fails_in_children, _killed_in_children])
def test_a_failing_child_costs_time_not_a_different_result(func):
    _needs_fork()
    items = list(range(20))
    assert fork_map(func, items, [1] * len(items)) == [n + 1 for n in items]


class _KilledWhilePickled:
    """Equal to any other; a child pickling it is killed, after what came before it has gone
    into the pipe."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        if os.getpid() != PARENT:
            os.kill(os.getpid(), signal.SIGKILL)
        return _KilledWhilePickled, ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _KilledWhilePickled)

    __hash__ = object.__hash__


def _large_then_killed(n: int) -> tuple[str, int, _KilledWhilePickled]:
    return "x" * (1 << 20), n, _KilledWhilePickled()  # a megabyte: more than a pipe holds


def test_a_child_killed_midway_through_its_pickle_costs_time_not_a_different_result():
    """The parent unpickles a child's results as they arrive; a pickle that stops midway is
    the child's failure, and its share is computed here again."""
    _needs_fork()
    items = list(range(4))
    assert fork_map(_large_then_killed, items, [1] * len(items)) == [_large_then_killed(n) for n in items]


def test_when_no_child_can_be_forked_the_parent_computes_everything(monkeypatch):
    _needs_fork()

    def no_more_processes() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_more_processes)
    results = fork_map(_pid_and_square, list(range(10)), [1] * 10)
    assert results == [(PARENT, n * n) for n in range(10)]


def _fails_in_the_parent(n: int) -> int:
    if os.getpid() == PARENT:
        raise ValueError("the parent's failure")
    return n


def test_the_parents_failure_is_raised_and_its_children_are_reaped(monkeypatch):
    _needs_fork()
    collected = []
    collect = forkmap._collect
    monkeypatch.setattr(forkmap, "_collect", lambda child: collected.append(child) or collect(child))
    with pytest.raises(ValueError, match="the parent's failure"):
        fork_map(_fails_in_the_parent, list(range(20)), [1] * 20)
    assert collected
    for pid, _ in collected:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped


@given(st.lists(st.integers(0, 1000), max_size=30), st.integers(1, 4))
def test_shares_hold_every_item_once_and_are_balanced(sizes, count):
    shares = _shares(sizes, count)
    assert len(shares) == count
    assert sorted(i for share in shares for i in share) == list(range(len(sizes)))
    assert all(share == sorted(share) for share in shares)
    loads = [sum(sizes[i] for i in share) for share in shares]
    assert max(loads) - min(loads) <= max(sizes, default=0)


def test_background_computes_in_a_child_while_this_process_goes_on():
    _needs_fork()
    with forkmap.Background(lambda: _pid_and_square(7), 1) as pending:
        pid, square = pending.result()
    assert square == 49 and pid != PARENT


def test_background_of_a_small_size_runs_here_when_asked(monkeypatch):
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 101)
    ran = []
    with forkmap.Background(lambda: ran.append(1) or _pid_and_square(3), 100) as pending:
        assert ran == [] and pending.child is None
        assert pending.result() == (PARENT, 9) and ran == [1]


@pytest.mark.parametrize("func", [_fails_in_children, _killed_in_children])
def test_a_failing_background_child_costs_time_not_a_different_result(func):
    _needs_fork()
    with forkmap.Background(lambda: func(4), 1) as pending:
        assert pending.child is not None
        assert pending.result() == 5


def test_a_background_child_whose_result_is_not_asked_for_is_ended_and_reaped():
    _needs_fork()
    with pytest.raises(ValueError, match="the work beside it failed"), \
            forkmap.Background(lambda: signal.pause(), 1) as pending:  # never ends by itself
        assert pending.child is not None
        pid, _ = pending.child
        raise ValueError("the work beside it failed")
    assert pending.child is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped
