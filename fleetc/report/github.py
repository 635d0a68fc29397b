"""Errors as GitHub Actions reads them: workflow-command annotations and the step summary."""

from __future__ import annotations

from collections.abc import Sequence

from fleetc.errors import Diagnostic
from fleetc.report.figures import counted

#: GitHub shows at most 10 error annotations per step (50 per job); the rest would be dropped.
GITHUB_MAX_ANNOTATIONS = 10


def github_annotations(diagnostics: Sequence[Diagnostic], fallback: str) -> list[str]:
    """``::error file=…,line=…,col=…,title=…::message`` workflow commands, at most
    :data:`GITHUB_MAX_ANNOTATIONS` (GitHub drops the rest), then a notice counting them all.
    An error without diagnostics (a usage error) becomes one annotation with ``fallback``."""
    if not diagnostics:
        return [f"::error title=fleetc::{_gh_data(fallback)}"]
    lines = []
    for d in diagnostics[:GITHUB_MAX_ANNOTATIONS]:
        where = [f"file={_gh_property(d.path)}"]
        if d.line:
            where += [f"line={d.line}", f"col={d.column}"]
        where.append(f"title={_gh_property('fleetc: ' + (d.field or d.severity))}")
        text = d.message + (f"\nhint: {d.hint}" if d.hint else "")
        command = d.severity if d.severity in ("error", "warning", "notice") else "error"
        lines.append(f"::{command} {','.join(where)}::{_gh_data(text)}")
    if len(diagnostics) > GITHUB_MAX_ANNOTATIONS:
        lines.append(f"::notice title=fleetc::{len(diagnostics)} errors; the first {GITHUB_MAX_ANNOTATIONS} "
                     "are annotated, all are in the step summary")
    return lines


def github_step_summary(diagnostics: Sequence[Diagnostic], fallback: str) -> str:
    """Every diagnostic, for ``$GITHUB_STEP_SUMMARY`` (Markdown), uncapped."""
    body = [d.format() for d in diagnostics] or [fallback]
    return f"### fleetc: {counted(len(diagnostics) or 1, 'error')}\n\n```text\n" + "\n".join(body) + "\n```\n\n"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")
