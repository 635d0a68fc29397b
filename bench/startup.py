"""The bundled example's commands as a user runs them: wall time with interpreter start.

    python -m bench.startup --runs 10

Each command runs in a fresh process (``python -m fleetc ...``) on a copy of ``policies/``:

* ``compile``: into an empty output folder each time, so the placement is solved (through
  cvxpy, on the exact path) and every file written;
* ``validate``;
* ``compile --check`` on unchanged inputs after a compile: the placement is given back, so
  neither cvxpy nor HiGHS should be imported; ``python -X importtime`` says which were.

Prints min, median and max wall seconds, the least CPU time (user + system: on a loaded
machine the wall time grows, the CPU time much less) and the peak resident memory of each.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.run import ROOT, _run_measured

#: Modules whose import ``--check`` on unchanged inputs must not pay.
SOLVERS = ("cvxpy", "highspy")


def imported(command: list[str], cwd: Path) -> set[str]:
    """The top-level modules ``python -X importtime -m fleetc COMMAND`` imported."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "fleetc", *command], cwd=cwd,
                         capture_output=True, text=True, check=False)
    if run.returncode:
        raise RuntimeError(f"fleetc {' '.join(command)} exited {run.returncode}: {run.stderr[-500:]}")
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", run.stderr, re.MULTILINE)
    return {name.split(".")[0] for name in names}


def measure(runs: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleetc-startup-") as work:
        root = Path(work)
        shutil.copytree(ROOT / "policies", root / "policies")
        fleetc = [sys.executable, "-m", "fleetc"]
        commands = {
            "compile": [*fleetc, "compile", "policies", "--out", "fresh"],
            "validate": [*fleetc, "validate", "policies"],
            "compile --check": [*fleetc, "compile", "policies", "--out", "out", "--check"],
        }
        _checked(_run_in(root, [*fleetc, "compile", "policies", "--out", "out"]))
        for name, command in commands.items():
            times, cpu, memory, loads = [], [], [], []
            for _ in range(runs):
                shutil.rmtree(root / "fresh", ignore_errors=True)
                run = _checked(_run_in(root, command))
                times.append(run["wall"])
                cpu.append(run["cpu"])
                memory.append(run["rss_mib"])
                loads.append(run["load"][0])
            result[name] = {"min": min(times), "median": statistics.median(times), "max": max(times),
                            "cpu": min(cpu), "rss_mib": max(memory),
                            "load": [min(loads), max(loads)]}
        result["check imports"] = sorted(imported(commands["compile --check"][3:], root) & set(SOLVERS))
        shutil.rmtree(root / "fresh", ignore_errors=True)
        result["compile imports"] = sorted(imported(commands["compile"][3:], root) & set(SOLVERS))
    return result


def _run_in(cwd: Path, command: list[str]) -> dict[str, Any]:
    """:func:`bench.run._run_measured` runs from the repository root: name paths absolutely."""
    absolute = [str(cwd / part) if part in ("policies", "out", "fresh") else part for part in command]
    return _run_measured(absolute, None)


def _checked(run: dict[str, Any]) -> dict[str, Any]:
    if "error" in run:
        raise RuntimeError(run["error"])
    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    result = measure(args.runs)
    for name in ("compile", "validate", "compile --check"):
        m = result[name]
        print(f"fleetc {name:<16} min {m['min']:.3f}s  median {m['median']:.3f}s  max {m['max']:.3f}s"
              f"  CPU min {m['cpu']:.3f}s  peak RSS {m['rss_mib']:.0f} MiB  ({args.runs} fresh processes, "
              f"1-minute load {m['load'][0]:.2f}-{m['load'][1]:.2f})")
    print(f"solvers imported by compile: {', '.join(result['compile imports']) or 'none'}; "
          f"by compile --check on unchanged inputs: {', '.join(result['check imports']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
