"""The message of the commit ``fleetc compile --commit`` makes, from the report of HEAD's output
against the compile."""

from __future__ import annotations

from collections.abc import Sequence

from fleetc.report.compare import Report
from fleetc.report.figures import counted


def commit_message(report: Report, policies: Sequence[str] = (), held: Sequence[str] | None = None) -> str:
    """``fleetc: compile policies (2 stages moved, +8 a100)`` plus a body with the details;
    with ``policies`` (the changed policy files committed with the output) the subject says
    both: ``fleetc: commit 1 policy file and out/ compiled from it (...)``. ``held``: the status
    letter (``A``, ``M``, ``D``) of each file of the output folder the commit holds, as git
    staged it, counted in the body (None: the report's files are counted)."""
    body = [f"{m.stage}: {', '.join(m.before) or '(none)'} -> {', '.join(m.after) or '(none)'}"
            for m in report.moves]
    body += [f"GPUs {t}: {b} -> {a}" for t, (b, a) in report.gpu_totals.items() if a != b]
    body.append(", ".join(f"{n} {s}" for s, n in _file_counts(report, held).items()) + f" in {report.out}/")
    if policies:
        body += ["", "Policies committed with it:", *(f"  {p}" for p in policies)]
        them = "it" if len(policies) == 1 else "them"
        subject = f"fleetc: commit {counted(len(policies), 'policy file')} and {report.out}/ compiled from {them}"
    else:
        subject = "fleetc: compile policies"
    return f"{subject} ({', '.join(_facts(report))})\n\n" + "\n".join(body) + "\n"


def _facts(report: Report) -> list[str]:
    """The subject's figures: stages moved, added, removed, GPUs gained or freed per type; the
    files changed when none of those."""
    added = [m for m in report.moves if not m.before and m.after]
    removed = [m for m in report.moves if m.before and not m.after]
    facts = [f"{counted(n, 'stage')} {what}"
             for n, what in ((len(report.moved), "moved"), (len(added), "added"), (len(removed), "removed")) if n]
    facts += [f"{a - b:+d} {t}" for t, (b, a) in report.gpu_totals.items() if a != b]
    return facts or [f"{counted(len(report.objects), 'file')} changed"]


def _file_counts(report: Report, held: Sequence[str] | None) -> dict[str, int]:
    """Files added, changed and removed: as git staged them (``held``), else as the report has them."""
    if held is None:
        return {s: sum(o.status == s for o in report.objects) for s in ("added", "changed", "removed")}
    return {word: sum(status == letter for status in held)
            for letter, word in (("A", "added"), ("M", "changed"), ("D", "removed"))}
