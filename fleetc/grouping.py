"""Warnings alike but for their place, said once: output sized for a fleet.

A fleet of 2,000 pipelines gives the same three warnings per pipeline, and 150 clusters the same
device-plugin line each: 6,000 lines nobody reads. :func:`grouped` puts together the warnings
that differ only in where they are, that is in their file and position, the indices of their
field path (``spec.stages[3]``) and the names their message quotes (``stage 'prep'``,
``cluster gpu-a:``, a storage URL). The CLI prints a group of more than :data:`SHOWN` as one
line: the first warning, how many more there are and the first of their places; ``--verbose``
and ``--format json`` list every warning.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleetc.errors import Diagnostic

#: The places a grouped line names beside its first warning's; a group of at most this many
#: more is printed whole.
SHOWN = 3

_INDEX = re.compile(r"\[\d+\]")
_NAMES = re.compile(r"'[^']*'|\bcluster [a-z0-9][-a-z0-9.]*|\b[a-z][a-z0-9+.-]*://\S+")


def alike(diagnostic: Diagnostic) -> tuple[str, str, str]:
    """What a warning says, its place left out: warnings with the same key are alike."""
    return diagnostic.severity, _INDEX.sub("[]", diagnostic.field), _NAMES.sub(_unnamed, diagnostic.message)


def _unnamed(match: re.Match[str]) -> str:
    return "cluster ..." if match.group(0).startswith("cluster ") else "..."


def grouped(diagnostics: Iterable[Diagnostic]) -> list[list[Diagnostic]]:
    """The diagnostics in groups of alike ones (:func:`alike`), each in the given order, the
    groups in the order of their first member."""
    groups: dict[tuple[str, str, str], list[Diagnostic]] = {}
    for diagnostic in diagnostics:
        groups.setdefault(alike(diagnostic), []).append(diagnostic)
    return list(groups.values())


def place(diagnostic: Diagnostic) -> str:
    """``file:line:column`` (``file`` where the diagnostic is about the whole file)."""
    return diagnostic.path if diagnostic.line == 0 else f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}"


def warning_lines(warnings: Iterable[Diagnostic], *, verbose: bool = False) -> list[str]:
    """``warning: <place>: <field>: <message>`` per warning (and its hint below); without ``verbose``, a group of
    more than :data:`SHOWN` alike is one line that counts the others and names the first few
    of their places."""
    warnings = list(warnings)
    folded = {id(group[0]): group for group in grouped(warnings) if not verbose and len(group) > SHOWN + 1}
    hidden = {id(w) for group in folded.values() for w in group[1:]}
    lines = []
    for w in warnings:  # in their order, a folded group where its first member is
        if id(w) in hidden:
            continue
        line = f"warning: {place(w)}: {w.field}: {w.message}"
        if (group := folded.get(id(w))) is not None:
            line += (f" [and {len(group) - 1:,} more alike at {', '.join(place(o) for o in group[1:SHOWN + 1])}, "
                     "...; --verbose lists each]")
        lines.append(line + (f"\n  hint: {w.hint}" if w.hint else ""))
    return lines
