"""Progress of a compile: which stage runs, for how long, and the solver's gap.

The compiler stays pure: it only calls a :class:`Reporter` it is given
(:attr:`fleetc.compiler.Options.reporter`), which by default does nothing. The CLI passes a
:class:`TerminalReporter` when stderr is a terminal, so a long compile shows one status line
(``fleetc: place 12.5s``) that an interval timer refreshes, and clears it when done; in pipes, CI
logs and tests nothing is printed.

The refresh is a ``SIGALRM`` interval timer handled in the main thread, not a ticker thread:
while any other thread runs, :func:`fleetc.infra.forkmap.fork_map` does not fork (a child forked
from a multi-threaded process may deadlock), so a ticker thread made every compile in a terminal
load, score and render on one core. Timers are not inherited by forked children (fork(2)).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol, TextIO


class Reporter(Protocol):
    """What a compile tells about its progress."""

    def begin(self, phase: str) -> None:
        """``phase`` (load, validate, resolve, place, render, write) starts."""

    def end(self, phase: str) -> None:
        """``phase`` is over."""

    def gap(self, gap: float) -> None:
        """The solver's gap to the LP bound (0.0 is proven optimal): the LP's after each round
        of column generation on a large fleet, then the placement's."""

    def placed(self, done: int, total: int) -> None:
        """The solver has placed (or left out) ``done`` of the fleet's ``total`` stages: it
        solves the fleet's independent parts in turn."""


class NullReporter:
    """Says nothing: the default everywhere but on a terminal."""

    def begin(self, phase: str) -> None:
        pass

    def end(self, phase: str) -> None:
        pass

    def gap(self, gap: float) -> None:
        pass

    def placed(self, done: int, total: int) -> None:
        pass


NULL_REPORTER = NullReporter()


@contextmanager
def phase(reporter: Reporter, name: str) -> Iterator[None]:
    """``with phase(reporter, "place"): ...`` reports the start and the end (even on failure)."""
    reporter.begin(name)
    try:
        yield
    finally:
        reporter.end(name)


class TerminalReporter:
    """One status line on ``stream``, rewritten in place; see the module docstring.

    ``interval`` is how often (seconds) the timer refreshes the elapsed time while a phase runs;
    None for no timer (the line then changes only on events), as where there is no
    ``signal.setitimer`` or the reporter is made off the main thread. Nothing is drawn before
    ``delay`` seconds have passed: a compile of a second leaves no line flickering behind.
    """

    def __init__(self, stream: TextIO, *, interval: float | None = 0.5,
                 clock: Callable[[], float] = time.monotonic, delay: float = 0.0):
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.delay = delay
        self.drawn = False
        self.current = ""
        self.last_gap: float | None = None
        self.stages: tuple[int, int] | None = None
        self.lock = threading.Lock()
        self.previous_handler: Any = None
        self.ticking = False
        if interval is not None and hasattr(signal, "setitimer") \
                and threading.current_thread() is threading.main_thread():
            self.previous_handler = signal.signal(signal.SIGALRM, self._tick)
            signal.setitimer(signal.ITIMER_REAL, interval, interval)
            self.ticking = True

    def begin(self, phase: str) -> None:
        with self.lock:
            self.current = phase
            self._draw()

    def end(self, phase: str) -> None:
        with self.lock:
            self.current = ""
            self._draw()

    def gap(self, gap: float) -> None:
        with self.lock:
            self.last_gap = gap
            self._draw()

    def placed(self, done: int, total: int) -> None:
        with self.lock:
            self.stages = (done, total)
            self._draw()

    def close(self) -> None:
        """Stop the timer and clear the status line."""
        if self.ticking:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous_handler)
            self.ticking = False
        with self.lock:
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def line(self) -> str:
        """The status text: ``fleetc: place 3.2s, gap 0.12%``."""
        parts = [f"fleetc: {self.current or 'done'} {self.clock() - self.started:.1f}s"]
        if self.stages is not None:
            parts.append(f"{self.stages[0]:,} of {self.stages[1]:,} stages placed")
        if self.last_gap is not None:
            parts.append(f"gap {self.last_gap:.2%}")
        return ", ".join(parts)

    def _draw(self) -> None:
        if self.clock() - self.started < self.delay:
            return
        self.stream.write(f"\r\x1b[K{self.line()}")
        self.stream.flush()
        self.drawn = True

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        """Redraw the line, unless the main thread, which this interrupts, is drawing it."""
        if not self.current or not self.lock.acquire(blocking=False):
            return
        try:
            self._draw()
        except RuntimeError:  # the stream was mid-write (a reentrant call): skip this tick
            pass
        finally:
            self.lock.release()
