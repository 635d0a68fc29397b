"""The front door: paths -> validated policies -> model -> placement -> rendered files.

``load_policies`` is the only function here that reads files; ``compile_policies`` is pure
(its result depends on the policies and options alone). The optimizer, and with it cvxpy, is
imported only when something is compiled, so ``fleetc validate`` starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import PolicyError
from .load import discover, load_files
from .model import FleetModel, Placement
from .resolve import resolve
from .validate import PolicySet, validate


@dataclass(frozen=True)
class Options:
    """Everything a compile may be told; built once by the CLI."""

    #: Wall-clock seconds the solver may use; None for no limit.
    time_limit: float | None = None


@dataclass(frozen=True)
class Compiled:
    model: FleetModel
    placement: Placement
    files: Mapping[str, str]  # path under the output folder -> file text


@dataclass(frozen=True)
class Loaded:
    policies: PolicySet
    documents: int
    where: str  # how to name the input in messages


def load_policies(paths: Sequence[str]) -> Loaded:
    """Read and validate the policies; raise :class:`PolicyError` with every problem found."""
    files = discover(paths)
    roots = [Path(p) for p in paths]  # folders, and files named directly (which may be links)
    loaded = load_files(files, roots)
    policies, diagnostics = validate(loaded.documents)
    problems = [*loaded.diagnostics, *diagnostics]
    if problems:
        raise PolicyError(problems)
    return Loaded(policies, len(loaded.documents), ", ".join(paths))


def compile_policies(loaded: Loaded, options: Options = Options()) -> Compiled:
    """Place every stage and render the output tree. Pure: no I/O."""
    from .optimize import place  # imports cvxpy: only when compiling
    from .render import render

    model = resolve(loaded.policies, loaded.where)
    placement = place(model, time_limit=options.time_limit)
    return Compiled(model, placement, render(model, placement))
