"""Progress of a compile: which stage runs, for how long, and the solver's gap.

The compiler stays pure: it only calls a :class:`Reporter` it is given
(:attr:`fleetc.compiler.Options.reporter`), which by default does nothing. The CLI passes a
:class:`TerminalReporter` when stderr is a terminal, so a long compile shows one status line
(``fleetc: place 12.5s``) that a ticker thread refreshes, and clears it when done; in pipes, CI
logs and tests nothing is printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TextIO


class Reporter(Protocol):
    """What a compile tells about its progress."""

    def begin(self, phase: str) -> None:
        """``phase`` (load, validate, resolve, place, render, write) starts."""

    def end(self, phase: str) -> None:
        """``phase`` is over."""

    def gap(self, gap: float) -> None:
        """The solver's gap to the LP bound (0.0 is proven optimal): the LP's after each round
        of column generation on a large fleet, then the placement's."""


class NullReporter:
    """Says nothing: the default everywhere but on a terminal."""

    def begin(self, phase: str) -> None:
        pass

    def end(self, phase: str) -> None:
        pass

    def gap(self, gap: float) -> None:
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

    ``interval`` is how often (seconds) the ticker thread refreshes the elapsed time while a
    phase runs; None for no thread (the line then changes only on events).
    """

    def __init__(self, stream: TextIO, *, interval: float | None = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.current = ""
        self.last_gap: float | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None
        if interval is not None:
            self.ticker = threading.Thread(target=self._tick, args=(interval,), daemon=True)
            self.ticker.start()

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

    def close(self) -> None:
        """Stop the ticker and clear the status line."""
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def line(self) -> str:
        """The status text: ``fleetc: place 3.2s, gap 0.12%``."""
        parts = [f"fleetc: {self.current or 'done'} {self.clock() - self.started:.1f}s"]
        if self.last_gap is not None:
            parts.append(f"gap {self.last_gap:.2%}")
        return ", ".join(parts)

    def _draw(self) -> None:
        self.stream.write(f"\r\x1b[K{self.line()}")
        self.stream.flush()

    def _tick(self, interval: float) -> None:
        while not self.stop.wait(interval):
            with self.lock:
                if self.current:
                    self._draw()
