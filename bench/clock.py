"""What a figure is measured with: CPU seconds (children included) and the machine's load.

CPU seconds are user + system time of this process and of every child it waited for
(``resource.getrusage`` of ``RUSAGE_SELF`` plus ``RUSAGE_CHILDREN``): fleetc forks workers
(:mod:`fleetc.infra.forkmap`) and the benchmarks run compiles in fresh processes, so a figure
that counted this process alone would leave their work out. Wall time on a shared machine
depends on what else runs, so every figure is printed beside the load average
(``os.getloadavg``) sampled when it was measured.
"""

from __future__ import annotations

import os
import resource


def cpu_seconds() -> float:
    """User + system seconds of this process and of its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def children_cpu_seconds() -> float:
    """User + system seconds of this process's waited-for children (and theirs) so far."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def load_average() -> list[float]:
    """The machine's load average over 1, 5 and 15 minutes (runnable processes)."""
    return [round(x, 2) for x in os.getloadavg()]


def load_words(load: list[float] | None) -> str:
    """``load 1.52/1.30/1.10`` (1, 5, 15 minutes), '' when unknown."""
    return "" if not load else "load " + "/".join(f"{x:.2f}" for x in load)
