"""The front door: paths -> validated policies -> model -> placement -> rendered files.

``load_policies`` is the only function here that reads files; ``compile_policies`` is pure
(its result depends on the policies and options alone). The optimizer, and with it numpy, scipy
and HiGHS, is imported only when something is compiled, so ``fleetc validate`` starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Diagnostic, PolicyError
from .load import LoadResult, discover, load_files, load_sources
from .model import FleetModel, Placement
from .progress import NULL_REPORTER, Reporter, phase
from .resolve import resolve
from .validate import PolicySet, validate


@dataclass(frozen=True)
class Options:
    """Everything a compile may be told; built once by the CLI."""

    #: Wall-clock seconds the solver may use; None for no limit.
    time_limit: float | None = None
    #: Clusters to compile as if they were lost (``--drain``): they take no work.
    drain: tuple[str, ...] = ()
    #: The previous placement (stage key -> cluster -> replicas): moving away costs moveCost.
    previous: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Render what fits and list the rest as unplaced instead of failing (``--allow-unplaced``).
    allow_unplaced: bool = False
    #: Told when each stage starts and ends (a status line on terminals); silent by default.
    reporter: Reporter = NULL_REPORTER


@dataclass(frozen=True)
class Compiled:
    model: FleetModel
    placement: Placement
    files: Mapping[str, str]  # path under the output folder -> file text
    #: Settings that have no Kubernetes form (severity "warning"), sorted; never fatal.
    warnings: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class Loaded:
    policies: PolicySet
    documents: int
    where: str  # how to name the input in messages


def load_policies(paths: Sequence[str], reporter: Reporter = NULL_REPORTER) -> Loaded:
    """Read and validate the policies; raise :class:`PolicyError` with every problem found."""
    with phase(reporter, "load"):
        files = discover(paths)
        roots = [Path(p) for p in paths]  # folders, and files named directly (may be links)
        loaded = load_files(files, roots)
    return _validated(loaded, ", ".join(paths), reporter)


def load_policy_sources(sources: Sequence[tuple[str, bytes]], where: str) -> Loaded:
    """Validate policies given as (display path, content) pairs, e.g. read from git at a revision."""
    return _validated(load_sources(sources), where, NULL_REPORTER)


def _validated(loaded: LoadResult, where: str, reporter: Reporter) -> Loaded:
    with phase(reporter, "validate"):
        policies, diagnostics = validate(loaded.documents)
    problems = [*loaded.diagnostics, *diagnostics]
    if problems:
        raise PolicyError(problems)
    return Loaded(policies, len(loaded.documents), where)


def compile_policies(loaded: Loaded, options: Options = Options()) -> Compiled:
    """Place every stage and render the output tree. Pure: no I/O."""
    from .optimize import place  # imports numpy, scipy, HiGHS: only when compiling
    from .render import render

    report = options.reporter
    with phase(report, "resolve"):
        model = resolve(loaded.policies, loaded.where, drained=options.drain)
    with phase(report, "place"):
        placement = place(model, time_limit=options.time_limit, previous=options.previous, on_gap=report.gap,
                          allow_unplaced=options.allow_unplaced)
    report.gap(placement.gap)
    with phase(report, "render"):
        rendered = render(model, placement)
    return Compiled(model, placement, rendered.files, rendered.warnings)
