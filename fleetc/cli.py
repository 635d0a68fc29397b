"""Command line: thin glue from click to :mod:`fleetc.compiler` and :mod:`fleetc.emit`.

Every failure a user can cause ends here as a message and an exit code (see
:class:`fleetc.errors.ExitCode`), never as a traceback. An unexpected exception is a bug: it is
reported as an internal error with exit code 3 (set ``FLEETC_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__
from .errors import ExitCode, FleetcError, PlacementError, PolicyError

DEFAULT_POLICIES = "policies"
DEFAULT_OUT = "out"
INTERNAL_ERROR_EXIT = 3

paths_argument = click.argument("paths", nargs=-1, type=click.Path())
format_option = click.option("--format", "output_format", type=click.Choice(["text", "json"]),
                             default="text", show_default=True, help="Output format.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetc")
def cli() -> None:
    """Compile AI workload policies into per-cluster Kubernetes manifests."""


@cli.command()
@paths_argument
@format_option
def validate(paths: Sequence[str], output_format: str) -> None:
    """Check policy files and folders (default: policies/) and report every error."""
    from .compiler import load_policies

    loaded = _run(lambda: load_policies(paths or [DEFAULT_POLICIES]), output_format)
    if output_format == "json":
        _emit_json({"valid": True, "documents": loaded.documents, "diagnostics": []})
    else:
        click.echo(f"{loaded.where}: {_plural(loaded.documents, 'policy document')} valid")


@cli.command()
@paths_argument
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Output folder.")
@click.option("--check", is_flag=True,
              help="Do not write; exit 1 when the output folder is not what compile would write.")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds the solver may use.")
@format_option
def compile(paths: Sequence[str], out_dir: str, check: bool, time_limit: float | None,
            output_format: str) -> None:
    """Place every pipeline stage and write the manifests to the output folder."""
    from .compiler import Options, compile_policies, load_policies
    from .emit import changes, write_tree

    def run() -> Any:
        loaded = load_policies(paths or [DEFAULT_POLICIES])
        return compile_policies(loaded, Options(time_limit=time_limit))

    compiled = _run(run, output_format)
    out = Path(out_dir)
    placed = len(compiled.placement.stages)
    summary = {
        "out": out_dir,
        "files": len(compiled.files),
        "stages": placed,
        "objective": round(compiled.placement.objective, 6),
        "bound": round(compiled.placement.bound, 6),
        "gap": round(compiled.placement.gap, 6),
    }
    if check:
        stale = _run(lambda: changes(out, compiled.files), output_format)
        if output_format == "json":
            _emit_json({**summary, "current": not stale,
                        "changes": [{"path": c.path, "status": c.status} for c in stale]})
        for change in stale if output_format == "text" else []:
            click.echo(f"would {_VERB[change.status]} {out / change.path}", err=True)
        if stale:
            if output_format == "text":
                click.echo(f"{out_dir}/ is stale: {_plural(len(stale), 'file')} would change",
                           err=True)
            sys.exit(ExitCode.FAILED)
        if output_format == "text":
            click.echo(f"{out_dir}/ is up to date")
        return
    _run(lambda: write_tree(out, compiled.files), output_format)
    if output_format == "json":
        _emit_json(summary)
    else:
        click.echo(f"placed {_plural(placed, 'stage')} (gap to the LP bound "
                   f"{compiled.placement.gap:.2%}); wrote {_plural(len(compiled.files), 'file')}"
                   f" to {out_dir}/")


_VERB = {"added": "add", "changed": "change", "removed": "remove"}


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
    if output_format == "json":
        diagnostics = err.diagnostics if isinstance(err, PolicyError) else ()
        _emit_json({
            "valid": False,
            "error": type(err).__name__,
            "diagnostics": [d.as_dict() for d in diagnostics],
            "messages": [] if diagnostics else str(err).splitlines(),
        })
        return
    if isinstance(err, PolicyError):
        for diagnostic in err.diagnostics:
            click.echo(diagnostic.format(), err=True)
        files = len({d.path for d in err.diagnostics})
        click.echo(f"{_plural(len(err.diagnostics), 'error')} in {_plural(files, 'file')}",
                   err=True)
    elif isinstance(err, PlacementError):
        click.echo("error: no placement satisfies every hard constraint:", err=True)
        for reason in err.reasons:
            click.echo(f"  {reason}", err=True)
    else:
        click.echo(f"error: {err}", err=True)


def _internal_error(err: Exception) -> NoReturn:
    if os.environ.get("FLEETC_DEBUG"):
        traceback.print_exc()
    click.echo(f"fleetc: internal error: {type(err).__name__}: {err}\n"
               "This is a bug in fleetc; please report it with the policies that caused it "
               "(FLEETC_DEBUG=1 shows the traceback).", err=True)
    sys.exit(INTERNAL_ERROR_EXIT)


def _emit_json(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=True))


def main() -> None:
    cli(prog_name="fleetc")
