"""Diagnostics, the root exception and the exit codes: the one place they are defined.

Every problem fleetc finds in its input becomes a :class:`Diagnostic` that carries its data
(file, line, column, field, message, hint); the text a user reads is built from that data in
one place, :meth:`Diagnostic.format`, so tests can assert exact messages.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from fleetc import credentials


class ExitCode(IntEnum):
    """Process exit codes, documented in the README."""

    OK = 0
    #: Policy errors, an infeasible placement, or (with --check) stale output.
    FAILED = 1
    #: The command line itself was wrong: unknown option, missing path, bad git ref.
    USAGE = 2
    #: A bug in fleetc: it broke one of its own guarantees (the verifier rejected the solver's
    #: placement, the solver failed) or raised an exception nobody expected.
    INTERNAL = 3


#: What every internal error says after what went wrong: that it is a bug, and how to report it.
BUG_REPORT = ("This is a bug in fleetc; please report it to the fleetc "
              "maintainers with the policies that caused it, the command line and `fleetc --version` "
              "(FLEETC_DEBUG=1 shows the traceback).")


#: What never reaches a terminal, a CI log or a pull-request comment as it is: C0 controls (line
#: breaks, ESC), DEL, C1 controls (CSI), the Unicode line and paragraph separators, and the
#: bidirectional overrides that reorder what a reader sees.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: A line a GitHub runner reads as a workflow command (``::error ...``), leading blanks ignored.
_WORKFLOW_COMMAND = re.compile(r"^([ \t]*):", re.MULTILINE)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_controls(text: str) -> str:
    """``text`` on one line, every control character written as an escape (``\\n``, ``\\x1b``)."""
    return _CONTROLS.sub(_escape, text)


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` safe to print: no credential (each shape :mod:`fleetc.credentials` knows is
    ``<redacted>``), and every control character written as an escape (``\\n``, ``\\x1b``), so
    a file name or a value can neither drive the terminal nor start a line of its own: a GitHub
    runner reads every line of a step's output that starts with ``::`` as a workflow command
    (``::error``, ``::add-mask``, ``::stop-commands``). With ``lines``, the text is fleetc's
    message of several lines (``error: ...`` then ``  hint: ...``) that a value may have been put
    into: its line breaks are kept, and a line that would start with ``::`` starts ``\\x3a:``."""
    text = credentials.redact(text)
    if not lines:
        return escape_controls(text)
    kept = "\n".join(escape_controls(line) for line in text.split("\n"))
    return _WORKFLOW_COMMAND.sub(lambda m: f"{m.group(1)}\\x3a", kept) if "::" in kept else kept


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in the input, located as precisely as the input allows.

    ``line`` and ``column`` are 1-based; 0 means "the whole file". ``field`` is the dotted
    path inside the document (``spec.clusters[1].name``), empty when not about one field;
    ``document`` which of the file's documents (0-based) that field is in, for a diagnostic
    found on the model, whose line the compiler looks up there (see
    :func:`fleetc.compiler.positioned`).
    """

    path: str
    line: int
    column: int
    field: str
    message: str
    hint: str = ""
    severity: str = "error"
    document: int = 0

    def __post_init__(self) -> None:
        """No message says a credential, whatever value it quotes (a value refused as one, or a
        schema error that quotes it): every format (text, JSON, GitHub annotations) reads these."""
        for name in ("field", "message", "hint"):
            text = getattr(self, name)
            if text:
                object.__setattr__(self, name, redact(text))

    def format(self) -> str:
        """The diagnostic as a user reads it: one line (two with a hint), each part
        :func:`printable`, so a file name or value cannot break it into lines of its own."""
        path = printable(self.path)
        where = path if self.line == 0 else f"{path}:{self.line}:{self.column}"
        message = printable(self.message)
        what = f"{printable(self.field)}: {message}" if self.field else message
        text = f"{where}: {self.severity}: {what}"
        if self.hint:
            text += f"\n  hint: {printable(self.hint)}"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "field": self.field,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
        }


class FleetcError(Exception):
    """Root of every error fleetc reports to a user (never shown as a traceback)."""

    exit_code: ExitCode = ExitCode.FAILED
    #: Which of two compiles failed when a command runs two (``diff``: "at REF" or "in the
    #: working tree"); '' otherwise.
    side: str = ""


class PolicyError(FleetcError):
    """The policies are invalid; carries every diagnostic found, not just the first."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics: tuple[Diagnostic, ...] = tuple(sorted(set(diagnostics)))
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return "\n".join(d.format() for d in self.diagnostics)


class PlacementError(FleetcError):
    """No placement satisfies the hard constraints; ``reasons`` says why per stage."""

    #: What the CLI prints above the reasons.
    headline = "no placement satisfies every hard constraint"
    hint = ""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = tuple(reasons)
        #: Stage key -> cluster -> replicas of the stages that were placed when the others could
        #: not be (what-would-fit reads it), empty when no placement was found at all.
        self.placed: Mapping[str, Mapping[str, int]] = {}
        #: One line per stage left out: the smallest change that places it
        #: (:mod:`fleetc.placement.fixes`).
        self.fixes: tuple[str, ...] = ()
        #: How many stages the placement leaves out, of how many (0, 0: not counted).
        self.refused, self.stages = 0, 0
        super().__init__("\n".join(self.reasons))


class TimeLimitError(PlacementError):
    """The time limit ran out before every stage was placed, which proves nothing about whether a
    placement exists; ``reasons``: the stages left out and why they did not fit where the
    solver had put the others, or that it had found no placement yet."""

    def __init__(self, time_limit: float, reasons: Sequence[str], hint: str):
        super().__init__(reasons)
        self.headline = f"the time limit of {time_limit:g}s ran out before every stage was placed"
        self.hint = hint


class SearchLimitError(PlacementError):
    """The large path's search ended with stages left out and no proof that a placement of every
    stage does not exist; ``reasons``: the stages left out and why they did not fit where the
    search had put the others."""

    headline = ("the search found no placement of every stage within its budget "
                "(it did not prove that none exists)")
    hint = "pass --allow-unplaced to render what was placed"


class UsageError(FleetcError):
    """The command line asked for something impossible (a missing path, an unknown ref)."""

    exit_code = ExitCode.USAGE


class InternalError(FleetcError):
    """fleetc broke one of its own guarantees; a bug to report, never silently output."""

    exit_code = ExitCode.INTERNAL


def redact(text: str) -> str:
    """``text`` with every part shaped like a credential ``<redacted>``
    (:func:`fleetc.credentials.redact`)."""
    return credentials.redact(text)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A hint naming the closest known spelling, or '' when nothing is close."""
    matches = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else ""
