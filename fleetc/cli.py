"""Command line: thin glue from click to :mod:`fleetc.compiler` and :mod:`fleetc.emit`.

The only place that reads the environment and the current directory: each command builds one
:class:`fleetc.compiler.Options` from its flags, ``FLEETC_LARGE`` and the working folder, and
calls its front door.

Every failure a user can cause ends here as a message and an exit code (see
:class:`fleetc.errors.ExitCode`), never as a traceback. An unexpected exception is a bug: it is
reported as an internal error with exit code 3 (set ``FLEETC_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fleetc import __version__
from fleetc.errors import (
    BUG_REPORT,
    Diagnostic,
    ExitCode,
    FleetcError,
    InternalError,
    PlacementError,
    PolicyError,
    UsageError,
    printable,
    redact,
)

if TYPE_CHECKING:
    from fleetc.compiler import Options
    from fleetc.progress import Reporter

DEFAULT_POLICIES = "policies"
DEFAULT_OUT = "out"
#: Seconds of work before the status line shows (a short compile leaves none behind).
PROGRESS_DELAY = 1.0
#: Overrides the size (allowed stage-cluster pairs) above which a component takes the large path.
LARGE_VARIABLE = "FLEETC_LARGE"

class _Seconds(click.FloatRange):
    """A positive, finite number of seconds (``nan`` and ``inf`` pass a plain FloatRange)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds.", param, ctx)
        return seconds


SECONDS = _Seconds(min=0, min_open=True)
paths_argument = click.argument("paths", nargs=-1, type=click.Path())
verbose_option = click.option("--verbose", "-v", is_flag=True,
                              help="List every warning; without it, warnings alike but for their place are one line.")
format_option = click.option("--format", "output_format", type=click.Choice(["text", "json"]),
                             default="text", show_default=True, help="Output format.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetc")
def cli() -> None:
    """Compile AI workload policies into per-cluster Kubernetes manifests."""


@cli.command()
@paths_argument
@click.option("--format", "output_format", type=click.Choice(["text", "json", "github"]), default="text",
              show_default=True, help="Output format (github: workflow-command annotations).")
@verbose_option
def validate(paths: Sequence[str], output_format: str, verbose: bool) -> None:
    """Check policy files and folders (default: policies/) and report every error."""
    from fleetc.compiler import check_policies, load_policies

    def run() -> Any:
        with _status() as reporter:
            loaded = load_policies(paths or [DEFAULT_POLICIES], reporter, workdir=Path.cwd())
            check_policies(loaded)
        return loaded

    loaded = _run(run, output_format)
    _print_warnings(loaded.warnings, output_format, verbose)
    if output_format == "json":
        _emit_json({"valid": True, "documents": loaded.documents,
                    "diagnostics": [w.as_dict() for w in loaded.warnings]})
    else:
        click.echo(f"{printable(loaded.where)}: {_plural(loaded.documents, 'policy document')} valid")


@cli.command()
@paths_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Output folder.")
@click.option("--check", is_flag=True,
              help="Do not write; exit 1 when the output folder is not what compile would write.")
@click.option("--base", "base_ref", metavar="REF", default=None,
              help="With --check: start from the placement.yaml committed at REF (the reviewed base), "
                   "not from the one in the output folder, so an edited placement cannot pass.")
@click.option("--time-limit", type=SECONDS, default=None,
              help="Seconds the solver may use.")
@click.option("--drain", "drain", metavar="CLUSTER", multiple=True,
              help="Compile as if CLUSTER were lost: it takes no work (repeatable).")
@click.option("--commit", "commit", is_flag=True,
              help="Commit the output folder with the policy files it was compiled from, in one commit "
                   "whose message summarises both.")
@click.option("--allow-unplaced", "allow_unplaced", metavar="[STAGE,...]", is_flag=False, flag_value="",
              default=None,
              help="Render what fits and list the stages that do not as unplaced (a warning each). A stage "
                   "the previous placement runs is left out only when named (--allow-unplaced=PIPELINE/STAGE,...; "
                   "'*' names every stage); otherwise that is an error.")
@click.option("--solver", metavar="NAME", default="HIGHS", show_default=True,
              callback=lambda ctx, param, value: value.upper(),
              help="MILP solver cvxpy runs the placement program on (any installed: SCIP, GUROBI...).")
@verbose_option
@format_option
def compile(paths: Sequence[str], out_dir: str, check: bool, base_ref: str | None, time_limit: float | None,
            drain: Sequence[str], commit: bool, allow_unplaced: str | None, solver: str,
            output_format: str, verbose: bool) -> None:
    """Place every pipeline stage and write the manifests to the output folder."""
    if check and commit:
        _run(lambda: _usage("--check and --commit cannot be combined"), output_format)
    if base_ref is not None and not check:
        _run(lambda: _usage("--base is for --check: it says where the previous placement comes from"),
             output_format)
    if not check:  # refuse a folder fleetc must not write before the work of compiling
        _ready_to_write(paths, out_dir, output_format)
    compiled = _run(lambda: _compile(paths, out_dir, base=base_ref, time_limit=time_limit, drain=tuple(drain),
                                     allow_unplaced=allow_unplaced is not None,
                                     may_drop=_may_drop(allow_unplaced),
                                     solver=solver,
                                     # --check and --commit read every file: only a plain write keeps some
                                     reuse=not (check or commit)), output_format)
    _placement_warnings(compiled, allow_unplaced is not None, output_format)
    # --check and --commit change only where the rendered files go, never how they are made.
    if commit:
        _commit(compiled, Path(out_dir), output_format, paths or [DEFAULT_POLICIES], verbose)
    else:
        (_check if check else _write)(compiled, Path(out_dir), output_format, verbose)


def _ready_to_write(paths: Sequence[str], out_dir: str, output_format: str) -> None:
    """Put back the output folder a killed compile left swapped out, and refuse one fleetc
    must not write (:func:`fleetc.emit.check_output_folder`), before the work of compiling."""
    from fleetc.emit import check_output_folder, recover_output

    if _run(lambda: recover_output(Path(out_dir)), output_format):
        click.echo(f"warning: {out_dir}/ was missing (a compile was killed while swapping it in): "
                   "its previous tree was put back", err=True)
    roots = [Path(p) for p in paths or [DEFAULT_POLICIES]]
    _run(lambda: check_output_folder(Path(out_dir), roots), output_format)


def _placement_warnings(compiled: Any, allow_unplaced: bool, output_format: str) -> None:
    """A previous placement ignored, each stage left unplaced, and with ``--allow-unplaced`` the
    hints and fixes for them, on stderr."""
    if compiled.previous_ignored:
        click.echo(f"warning: {printable(compiled.previous_ignored, lines=True)}", err=True)
    for stage in compiled.placement.stages:
        if not stage.assignments:  # the reason names the stage unless it is a bare cause
            named = f"{stage.stage}:" in stage.reason
            click.echo(printable(f"warning: not placed: {stage.reason}" if named
                                 else f"warning: {stage.stage} is not placed: {stage.reason}", lines=True), err=True)
    if allow_unplaced:
        for hint in _taint_hints(compiled):
            click.echo(printable(f"  hint: {hint}", lines=True), err=True)
        if output_format == "text":
            from fleetc.compiler import fix_lines

            for fix in fix_lines(compiled):
                click.echo(printable(f"  fix: {fix}", lines=True), err=True)


def _may_drop(allow_unplaced: str | None) -> tuple[str, ...] | None:
    """``--allow-unplaced=a/b,c/d``: the stages named; ``*`` among them: every stage (None)."""
    names = tuple(n.strip() for n in (allow_unplaced or "").split(",") if n.strip())
    return None if "*" in names else names


def _options(paths: Sequence[str], out_dir: str, **fields: Any) -> Options:
    """The one :class:`Options` of a command: its flags, ``FLEETC_LARGE`` and the working folder."""
    from fleetc.compiler import Options

    text = os.environ.get(LARGE_VARIABLE)
    if text is not None and not (text.strip().isdigit() and text.strip().isascii()):
        raise UsageError(f"{LARGE_VARIABLE}={text!r}: expected a whole number of stage-cluster pairs "
                         "(0 sends every component down the large path)")
    return Options(paths=tuple(paths) or (DEFAULT_POLICIES,), out=out_dir, workdir=Path.cwd(),
                   large=None if text is None else int(text), **fields)


def _compile(paths: Sequence[str], out_dir: str, **fields: Any) -> Any:
    """Load, validate and compile, with a status line while stderr is a terminal."""
    from fleetc.compiler import compile_fleet

    options = _options(paths, out_dir, **fields)
    with _status() as reporter:
        return compile_fleet(replace(options, reporter=reporter))


@contextlib.contextmanager
def _status() -> Iterator[Reporter]:
    """A status line on stderr while it is a terminal (phases, stages placed, the gap), shown
    after :data:`PROGRESS_DELAY` seconds and cleared before any message, so none shares it;
    the silent reporter elsewhere."""
    from fleetc.progress import NULL_REPORTER, TerminalReporter

    if not sys.stderr.isatty():
        yield NULL_REPORTER
        return
    terminal = TerminalReporter(sys.stderr, delay=PROGRESS_DELAY)
    try:
        yield terminal
    finally:
        terminal.close()


def _taint_hints(compiled: Any) -> list[str]:
    from fleetc.placement.hints import taint_hints

    return taint_hints(compiled.model, [p.stage for p in compiled.placement.stages if not p.assignments])


def _summary(compiled: Any, out: Path) -> dict[str, Any]:
    from fleetc.compiler import fix_lines

    placement = compiled.placement
    fixes = fix_lines(compiled)
    return {
        **({"fixes": fixes} if fixes else {}),
        "out": out.as_posix(),
        "files": _file_count(compiled),
        "stages": sum(1 for p in placement.stages if p.assignments),
        "unplaced": sum(1 for p in placement.stages if not p.assignments),
        "objective": round(placement.objective, 6),
        "bound": round(placement.bound, 6),
        "gap": round(placement.gap, 6),
        "optimal": placement.optimal,
        "timeLimitReached": placement.time_limit,
        **({"recompiled": {"touched": placement.recompiled.touched, "candidates": placement.recompiled.candidates,
                           "bound": "lp" if placement.recompiled.lp_bound else "lagrangian"}}
           if placement.recompiled is not None else {}),
        "warnings": [w.as_dict() for w in compiled.warnings],
    }


def _file_count(compiled: Any) -> int:
    """The files of the output: those rendered and those kept as they were."""
    return len(compiled.files) + (len(compiled.kept.paths) if compiled.kept is not None else 0)


def _check(compiled: Any, out: Path, output_format: str, verbose: bool = False) -> None:
    """``--check``: list what writing would change, and what no write would (files fleetc does
    not render, symlinks), as ``black --check`` does; list the user's files (applied unchecked);
    never write."""
    from fleetc.emit import changes, stranded_output, user_files

    stale = _run(lambda: [*stranded_output(out), *changes(out, compiled.files)], output_format)
    mine = _run(lambda: user_files(out, compiled.files), output_format)
    moved = _placement_differences(compiled, out) if stale else []
    if output_format == "json":
        _emit_json({**_summary(compiled, out), "current": not stale,
                    "changes": [{"path": c.path, "status": c.status} for c in stale],
                    "placementDifferences": moved, "userOwned": mine})
    else:
        for change in stale:  # a file name in the output folder may hold anything
            click.echo(_check_line(change, out), err=True)
        for difference in moved:
            click.echo(f"{difference['stage']}: {out}/placement.yaml places it on {difference['out']}; "
                       f"compile places it on {difference['compile']}", err=True)
        for path in mine:  # on stderr with the rest: CI logs show what is applied unchecked
            click.echo(f"user-owned (applied with its cluster, not checked): {printable(str(out / path))}", err=True)
    _print_warnings(compiled.warnings, output_format, verbose)
    if stale:
        if output_format == "text":
            click.echo(f"{out}/ is stale: {_plural(len(stale), 'file')} would change{_drain_note(compiled, out)}",
                       err=True)
        sys.exit(ExitCode.FAILED)
    if output_format == "text":
        click.echo(f"{out}/ is up to date")


def _check_line(change: Any, out: Path) -> str:
    from fleetc.emit import applied_by

    line = _CHECK_LINE[change.status].format(path=printable(str(out / change.path)))
    reader = applied_by(change.path) if change.status == "unrendered" else None
    return line if reader is None else f"{line} ({reader})"


#: How ``--check`` names each kind of :class:`fleetc.emit.Change`.
_CHECK_LINE = {
    "added": "would add {path}",
    "changed": "would change {path}",
    "removed": "would remove {path}",
    "unrendered": "{path}: not rendered by fleetc, so never reviewed as fleetc's output: delete it, "
                  "or keep your own objects in local/<cluster>/",
    "link": "{path}: a symlink or other special file: fleetc writes regular files only; delete it",
    "stranded": "{path}: a compile was killed while swapping the output in; the previous output is "
                "here: run fleetc compile to put it back",
}


def _drain_note(compiled: Any, out: Path) -> str:
    """Where the output folder was compiled with another ``--drain`` (its placement.yaml says),
    the check that would compare like with like."""
    from fleetc.compiler import drain_flags, drain_words
    from fleetc.placement.previous import read_previous

    committed, warning = read_previous(out)
    drained = tuple(sorted(c.name for c in compiled.model.clusters if c.drained))
    if warning or not committed.stages or committed.drained == drained:
        return ""
    return (f"; it was compiled {drain_words(committed.drained)} and this check runs {drain_words(drained)}"
            f" (`fleetc compile --check{drain_flags(committed.drained)}` checks that compile)")


def _placement_differences(compiled: Any, out: Path) -> list[dict[str, str]]:
    """The stages the output folder's placement.yaml places elsewhere than this compile does."""
    from fleetc.placement.previous import read_previous

    committed, warning = read_previous(out)
    if warning or not committed.stages:
        return []  # no placement to compare (missing or malformed: the file is listed as changed)
    differences = []
    for placed in compiled.placement.stages:
        now = {a.cluster: a.replicas for a in placed.assignments}
        there = committed.clusters.get(placed.stage, {})
        if now != there:
            differences.append({"stage": placed.stage, "out": _clusters_text(there),
                                "compile": _clusters_text(now)})
    return differences


def _clusters_text(clusters: dict[str, int]) -> str:
    return ", ".join(f"{name} ({_plural(n, 'replica')})" for name, n in sorted(clusters.items())) or "nothing"


def _write(compiled: Any, out: Path, output_format: str, verbose: bool = False) -> None:
    from fleetc.emit import write_tree

    foreign = _run(lambda: write_tree(out, compiled.files, kept=compiled.kept), output_format)
    _print_warnings(compiled.warnings, output_format, verbose)
    for rel in foreign if output_format == "text" else ():
        click.echo(printable(f"warning: {out / rel}: not rendered by fleetc, kept as it is: compile --check fails "
                             "on it (delete it, or keep your own objects in local/<cluster>/)", lines=True), err=True)
    if output_format == "json":
        _emit_json(_summary(compiled, out))
    else:
        placed = sum(1 for p in compiled.placement.stages if p.assignments)  # no _summary: it computes the fixes
        left_out = len(compiled.placement.stages) - placed
        limit = compiled.placement.time_limit
        ran_out = "" if limit is None else f", the time limit of {limit:g}s ran out"
        stages = (f"{placed} of {len(compiled.placement.stages)} stages, {left_out} left out "
                  "(--allow-unplaced)" if left_out else _plural(placed, "stage"))
        recompiled = compiled.placement.recompiled
        bound = "its Lagrangian bound" if recompiled is not None and not recompiled.lp_bound else "the LP bound"
        proven = ("optimal" if compiled.placement.optimal
                  else f"proven within {compiled.placement.gap:.2%} of {bound}")
        if recompiled is not None:
            click.echo(f"re-placed {_plural(recompiled.touched, 'stage')} touched by the change "
                       f"({_plural(recompiled.candidates, 'candidate')}); gap {compiled.placement.gap:.2%}")
        click.echo(f"placed {stages} ({proven}{ran_out}); wrote {_plural(_file_count(compiled), 'file')}"
                   f" to {out}/")


def _commit(compiled: Any, out: Path, output_format: str, paths: Sequence[str], verbose: bool = False) -> None:
    """``--commit``: write the output folder and commit it with the policies it came from."""
    from fleetc.git.flow import commit_output

    sha, message = _run(lambda: commit_output(compiled.model, compiled.placement, compiled.files, out, paths,
                                              Path.cwd()), output_format)
    _print_warnings(compiled.warnings, output_format, verbose)
    if output_format == "json":
        _emit_json({**_summary(compiled, out), "commit": sha, "message": message if sha else None})
    elif sha:
        click.echo(f"committed {sha[:12]}: {message.splitlines()[0]}")
    else:
        click.echo(f"{out}/ and the policies are unchanged: nothing to commit")


@cli.command()
@click.option("--base", "base_ref", metavar="REF", default=None,
              help="Git revision to compare with: a branch, tag or commit.")
@click.option("--what-if", "what_if", metavar="SETTING", multiple=True,
              help="Compare the placement now with a scenario instead (repeatable): drain=CLUSTER, "
                   "gpus=CLUSTER[:TYPE]=N, price=CLUSTER=X (per GPU-hour), pipeline=FILE.")
@click.option("--scenario", "scenario_paths", metavar="PATH", multiple=True,
              help="A scenario file (YAML 'whatIf:' with a list of --what-if settings), or a folder of them "
                   "(repeatable; with --base, each is reported below the diff).")
@paths_argument
@click.option("--out", "out_dir", default=DEFAULT_OUT, show_default=True,
              help="Output folder: its placement.yaml (at REF, and now) is each side's previous placement.")
@click.option("--time-limit", type=SECONDS, default=None,
              help="Seconds the solver may use, per compile.")
@click.option("--format", "output_format", type=click.Choice(["text", "markdown", "json"]),
              default="text", show_default=True, help="Output format (markdown: a pull-request comment).")
@click.option("--exit-code", "exit_code", is_flag=True, help="Exit 1 when there are differences, like git diff.")
@click.option("--fail-on", "fail_on", type=click.Choice(["danger"]), default=None,
              help="With --base: exit 1 when the report lists a danger (a restarted Job, a stage left out, "
                   "serving cut, ...), so CI can ask for a reviewer's label.")
def diff(base_ref: str | None, what_if: Sequence[str], scenario_paths: Sequence[str], paths: Sequence[str],
         out_dir: str, time_limit: float | None, output_format: str, exit_code: bool, fail_on: str | None) -> None:
    """Compare the compile of the policies at REF with the compile of the working tree.

    The policies at REF are read from git's objects: nothing is checked out or written. When
    the PATHs did not exist at REF, that side is empty and everything shows as added. Each side
    is compiled with its own out/placement.yaml as the previous placement, so each gives exactly
    what "compile --check" verifies on that side.

    With --what-if or --scenario instead of --base: the placement now (the output folder's
    placement.yaml the previous one) against the placement in the scenario, which changes no
    policy: the stages that move, those left unplaced, the cost and the GPUs left free. With
    --base too, each scenario is compared so with the working tree and reported below the diff
    (the pull-request comment of a repository that keeps scenarios, e.g. in scenarios/).
    """
    from fleetc.compiler import diff_fleet
    from fleetc.report import as_json, format_markdown, format_text

    if base_ref is None and fail_on is not None:
        _run(lambda: _usage("--fail-on danger is for --base: the dangers are those of a change"), output_format)
    if base_ref is None and (what_if or scenario_paths):
        _what_if(what_if, scenario_paths, paths, out_dir, time_limit, output_format, exit_code)
        return
    if base_ref is None:
        _run(lambda: _usage("diff needs --base REF, or a scenario (--what-if SETTING or --scenario FILE)"),
             output_format)
    assert base_ref is not None

    def run() -> Any:
        return diff_fleet(base_ref, _options(paths, out_dir, time_limit=time_limit),
                          _scenarios(what_if, scenario_paths))

    report = _run(run, output_format)
    if output_format == "json":
        _emit_json(as_json(report))
    else:
        click.echo(format_markdown(report) if output_format == "markdown" else format_text(report), nl=False)
    if (exit_code and report.changed) or (fail_on == "danger" and report.dangers):
        sys.exit(ExitCode.FAILED)


def _scenarios(settings: Sequence[str], scenario_paths: Sequence[str]) -> tuple[Any, ...]:
    """The --what-if settings (one scenario) and the scenarios under the --scenario paths."""
    from fleetc import scenario as scenarios

    given = (scenarios.parse(settings),) if settings else ()
    return given + (scenarios.read_paths(scenario_paths, Path.cwd()) if scenario_paths else ())


def _what_if(settings: Sequence[str], scenario_paths: Sequence[str], paths: Sequence[str], out_dir: str,
             time_limit: float | None, output_format: str, exit_code: bool) -> None:
    from fleetc.compiler import what_if_fleet
    from fleetc.report import format_what_if_markdown, format_what_if_text, what_if_json

    def run() -> Any:
        if settings and scenario_paths:
            _usage("give the scenario as --what-if settings or as --scenario FILE, not both")
        found = _scenarios(settings, scenario_paths)
        if len(found) > 1:
            _usage(f"{len(found)} scenarios under {', '.join(scenario_paths)}: without --base, give one\n"
                   "  hint: --base REF --scenario PATH reports each below the diff from REF")
        return what_if_fleet(found[0], _options(paths, out_dir, time_limit=time_limit))

    found = _run(run, output_format)
    if output_format == "json":
        _emit_json(what_if_json(found))
    else:
        click.echo(format_what_if_markdown(found) if output_format == "markdown" else format_what_if_text(found),
                   nl=False)
    if exit_code and found.changed:
        sys.exit(ExitCode.FAILED)


@cli.command()
@click.argument("target", metavar="PIPELINE/STAGE")
@paths_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Output folder whose placement.yaml is explained.")
@click.option("--drain", "drain", metavar="CLUSTER", multiple=True,
              help="The placement was compiled with --drain CLUSTER: explain it so (repeatable).")
@format_option
def explain(target: str, paths: Sequence[str], out_dir: str, drain: Sequence[str], output_format: str) -> None:
    """Say why a stage runs where the placement in the output folder puts it: each cluster's
    filter verdict or score terms. Solves nothing; a stale placement is an error. A placement
    compiled with --drain is explained with the same --drain (the drained clusters filtered
    out as drained); without it, or with others, it is stale."""
    from fleetc.compiler import explain_stage
    from fleetc.placement import explain as why

    explanation = _run(lambda: explain_stage(target, _options(paths, out_dir, drain=tuple(drain))), output_format)
    if output_format == "json":
        _emit_json(why.as_dict(explanation))
    else:
        click.echo(why.format_text(explanation))




def _print_warnings(warnings: Sequence[Diagnostic], output_format: str, verbose: bool = False) -> None:
    """``warning: <file>:<line>:<column>: <field>: <message>`` on stderr, warnings alike but for
    their place as one line unless ``verbose`` (:mod:`fleetc.grouping`); JSON output carries
    every one instead."""
    from fleetc.grouping import warning_lines

    for line in warning_lines(warnings, verbose=verbose) if output_format == "text" else []:
        click.echo(printable(line, lines=True), err=True)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _run(action: Callable[[], Any], output_format: str) -> Any:
    """Run one step; turn every failure into a report and an exit code."""
    try:
        return action()
    except FleetcError as err:
        _report(err, output_format)
        sys.exit(err.exit_code)
    except Exception as err:  # noqa: BLE001 - the last line of defence against tracebacks
        _internal_error(err)


def _report(err: FleetcError, output_format: str) -> None:
    """``err.side`` says which compile failed when a command runs two (``diff``)."""
    side = err.side
    if output_format == "json":
        diagnostics = err.diagnostics if isinstance(err, PolicyError) else ()
        _emit_json({
            "valid": False,
            "error": type(err).__name__,
            "diagnostics": [d.as_dict() for d in diagnostics],
            "messages": [] if diagnostics else redact(str(err)).splitlines(),
            **({"fixes": list(err.fixes)} if isinstance(err, PlacementError) and err.fixes else {}),
            **({"side": side} if side else {}),
        })
        return
    if output_format == "github":
        _github_annotations(err)
    if side and not isinstance(err, UsageError):
        click.echo(f"error: the policies {printable(side)} do not compile:", err=True)
    if isinstance(err, PolicyError):
        for diagnostic in err.diagnostics:
            click.echo(diagnostic.format(), err=True)
        files = len({d.path for d in err.diagnostics})
        click.echo(f"{_plural(len(err.diagnostics), 'error')} in {_plural(files, 'file')}",
                   err=True)
    elif isinstance(err, PlacementError):
        _report_placement(err)
    elif isinstance(err, InternalError):
        click.echo(f"fleetc: internal error: {printable(str(err), lines=True)}\n{BUG_REPORT}", err=True)
    else:  # a usage error quotes the command line or a file name: fleetc's lines, any value escaped
        click.echo(f"error: {printable(str(err), lines=True)}", err=True)


def _report_placement(err: PlacementError) -> None:
    """An infeasible placement as text: the headline, each reason, the hint and fixes, and last
    (where a user sees it after thousands of reasons) how many stages were refused."""
    click.echo(f"error: {err.headline}:", err=True)
    for reason in err.reasons:
        click.echo(printable(f"  {reason}", lines=True), err=True)
    if err.hint:
        click.echo(printable(f"  hint: {err.hint}", lines=True), err=True)
    for fix in err.fixes:
        click.echo(printable(f"  fix: {fix}", lines=True), err=True)
    if err.refused:
        fit = err.stages - err.refused
        click.echo(f"error: {err.refused:,} of {_plural(err.stages, 'stage')} refused, nothing written"
                   + (f" (--allow-unplaced renders the {fit:,} that fit)" if fit else ""), err=True)


def _usage(message: str) -> NoReturn:
    raise UsageError(message)


def _github_annotations(err: FleetcError) -> None:
    """Workflow-command annotations on stdout (capped); all diagnostics in the step summary."""
    from fleetc.report import github_annotations, github_step_summary

    # Control characters escaped (the annotations' own escaping keeps only their line breaks).
    diagnostics = tuple(replace(d, path=printable(d.path), field=printable(d.field), message=printable(d.message),
                                hint=printable(d.hint))
                        for d in (err.diagnostics if isinstance(err, PolicyError) else ()))
    fallback = printable(str(err), lines=True)
    for line in github_annotations(diagnostics, fallback):
        click.echo(line)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as handle:
                handle.write(github_step_summary(diagnostics, fallback))
        except OSError as problem:  # the annotations above still say it all
            click.echo(f"warning: cannot write the step summary to {summary_file} "
                       f"(GITHUB_STEP_SUMMARY): {problem.strerror or problem}", err=True)


def _internal_error(err: Exception) -> NoReturn:
    if os.environ.get("FLEETC_DEBUG"):
        traceback.print_exc()
    click.echo(f"fleetc: internal error: {type(err).__name__}: {printable(str(err), lines=True)}\n{BUG_REPORT}",
               err=True)
    sys.exit(ExitCode.INTERNAL)


def _emit_json(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=True))


def main() -> None:
    """The ``fleetc`` command. A closed stdout or stderr (``2>&-``) reads as ``/dev/null``; output
    that cannot be written (``> /dev/full``, a closed pipe) is an error with exit code 1, not a
    traceback."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # Python's stand-in for a closed descriptor
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - for the process
    try:
        try:
            cli(prog_name="fleetc")
        finally:
            sys.stdout.flush()
    except OSError as err:
        _unwritable(err)


def _unwritable(err: OSError) -> NoReturn:
    """Say that the output could not be written, and exit 1 without Python's own complaint at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered is dropped, not flushed again
    try:
        click.echo(f"error: cannot write the output: {printable(str(err.strerror or err))}", err=True)
    except OSError:
        pass  # stderr is gone too: the exit code says it
    sys.exit(ExitCode.FAILED)
