"""Progress reporting: the compiler tells its reporter every stage; the terminal reporter draws
one status line; nothing is printed when stderr is not a terminal."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetc.cli import cli
from fleetc.compiler import Options, compile_policies, load_policies
from fleetc.infra.forkmap import MIN_PARALLEL_SIZE, fork_map, usable_cores
from fleetc.progress import NULL_REPORTER, TerminalReporter, phase

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def begin(self, phase: str) -> None:
        self.events.append(f"begin {phase}")

    def end(self, phase: str) -> None:
        self.events.append(f"end {phase}")

    def gap(self, gap: float) -> None:
        self.events.append(f"gap {gap:.4f}")

    def placed(self, done: int, total: int) -> None:
        self.events.append(f"placed {done}/{total}")


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.mark.usefixtures("in_root")
def test_compile_reports_every_stage_in_order() -> None:
    recorder = Recorder()
    loaded = load_policies(["policies"], recorder)
    compiled = compile_policies(loaded, Options(reporter=recorder))
    # the stages solved after each independent part of the fleet, up to all 7
    counts = [int(e.split()[1].split("/")[0]) for e in recorder.events if e.startswith("placed ")]
    assert counts and counts == sorted(counts) and counts[-1] == 7
    assert recorder.events == [
        "begin load", "end load", "begin validate", "end validate",
        "begin resolve", "end resolve", "begin place", *(f"placed {n}/7" for n in counts), "end place",
        f"gap {compiled.placement.gap:.4f}", "begin render", "end render",
    ]


@pytest.mark.usefixtures("in_root")
def test_the_default_reporter_changes_nothing() -> None:
    quiet = compile_policies(load_policies(["policies"]))
    reported = compile_policies(load_policies(["policies"], Recorder()), Options(reporter=Recorder()))
    assert quiet.files == reported.files
    assert Options().reporter is NULL_REPORTER


def test_a_phase_ends_even_when_it_fails() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError), phase(recorder, "place"):
        raise ValueError("boom")
    assert recorder.events == ["begin place", "end place"]


def test_terminal_reporter_draws_one_line_and_clears_it() -> None:
    now = [100.0]
    stream = io.StringIO()
    reporter = TerminalReporter(stream, interval=None, clock=lambda: now[0])
    now[0] = 102.0
    reporter.begin("place")
    now[0] = 103.5
    reporter.gap(0.0123)
    reporter.end("place")
    reporter.close()
    assert stream.getvalue().split("\r\x1b[K")[1:] == [
        "fleetc: place 2.0s", "fleetc: place 3.5s, gap 1.23%", "fleetc: done 3.5s, gap 1.23%", "",
    ]


def test_terminal_reporter_refreshes_the_elapsed_time_while_a_phase_runs() -> None:
    ticks = iter(range(1000))
    stream = io.StringIO()
    reporter = TerminalReporter(stream, interval=0.01, clock=lambda: float(next(ticks)))
    reporter.begin("place")
    deadline = time.monotonic() + 10
    while stream.getvalue().count("fleetc: place") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    reporter.end("place")
    reporter.close()
    lines = [line for line in stream.getvalue().split("\r\x1b[K") if line.startswith("fleetc: place")]
    assert len(lines) >= 3
    assert len(set(lines)) == len(lines)  # each refresh shows a later time


def _pid(_: int) -> int:
    return os.getpid()


@pytest.mark.skipif(usable_cores() < 2, reason="fork_map forks only with two usable cores")
def test_a_refreshing_status_line_leaves_forking_possible() -> None:
    """fork_map forks only while no other thread runs: a ticker thread kept every compile in a
    terminal on one core."""
    reporter = TerminalReporter(io.StringIO(), interval=0.01)
    try:
        reporter.begin("render")
        assert threading.active_count() == 1
        assert fork_map(_pid, [0, 1], [MIN_PARALLEL_SIZE] * 2)[1] != os.getpid()  # computed in a child
    finally:
        reporter.close()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.usefixtures("in_root")
def test_no_status_line_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["compile", "policies", "--out", os.fspath(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "\x1b[K" not in result.output
    assert "fleetc: " not in result.stderr


def test_terminal_reporter_counts_stages_placed_and_waits_before_drawing() -> None:
    """Issue 28: a progress line for work longer than a second, with the stages placed; a
    compile shorter than the delay draws (and clears) nothing."""
    now = [0.0]
    stream = io.StringIO()
    reporter = TerminalReporter(stream, interval=None, clock=lambda: now[0], delay=1.0)
    reporter.begin("place")
    reporter.placed(1200, 2000)
    assert stream.getvalue() == ""
    now[0] = 1.5
    reporter.placed(1500, 2000)
    assert stream.getvalue() == "\r\x1b[Kfleetc: place 1.5s, 1,500 of 2,000 stages placed"
    reporter.close()
    quick = io.StringIO()
    short = TerminalReporter(quick, interval=None, clock=lambda: 0.2, delay=1.0)
    short.begin("load")
    short.close()
    assert quick.getvalue() == ""
