"""The report on a terminal (like ``git diff``) and as JSON (``--format json``)."""

from __future__ import annotations

from typing import Any

from fleetc.report.compare import FLEET_WIDE, ClusterSummary, Report, TeamCost, WhatIf, entry_points_line, teams_shown
from fleetc.report.escape import plain
from fleetc.report.figures import counted, gpu_counts, money, number_or_na, replica_list
from fleetc.report.whatif import scenario_lines, what_if_facts, what_if_lines


def format_text(report: Report) -> str:
    """A terminal report: the dangers, the stages that changed, the summary, then every diff
    (like ``git diff``). Names from files and scenarios are shown without control characters
    (:func:`fleetc.report.escape.plain`)."""
    scenarios = "".join("\n" + "\n".join(map(plain, scenario_lines(w))) + "\n" for w in report.scenarios)
    if not report.changed:
        return f"no differences between {plain(report.base)} and {plain(report.head)}\n" + scenarios
    return _summary_text(report) + _out_tree_text(report) + scenarios + _diffs_text(report)


def _out_tree_text(report: Report) -> str:
    """What of the head's output folder no compile makes: files fleetc does not render, and the
    user's files the change edits (whole)."""
    lines = [f"\n{plain(report.out)}/{plain(path)}: not rendered by fleetc ({status})"
             for path, status in report.unrendered]
    lines += [f"\n{plain(report.out)}/{plain(o.path)}: your own file ({o.status}), applied with its "
              f"cluster:\n{o.diff}" for o in report.user_files]
    return "".join(lines)


def _review_lines(report: Report) -> list[str]:
    """The dangers and the stage table as text, each section after a blank line."""
    lines = []
    if report.dangers:
        lines += ["", f"DANGER: {counted(len(report.dangers), 'finding')}"]
        for d in report.dangers:
            lines += [f"  {d.kind}: {d.subject}: {d.text}", f"    fix: {d.fix}"]
    if report.stage_table:
        lines += ["", f"stages changed: {len(report.stage_table)}"]
        for change in report.stage_table:
            lines.append(f"  {change.stage}: {change.reason}")
            lines += [f"    {name}: {before or '-'} -> {after or '-'}" for name, before, after in change.changes]
    if report.bookkeeping:
        lines += ["", "fleetc's bookkeeping (not diffed):", *(f"  {line}" for line in report.bookkeeping)]
    return lines


def _summary_text(report: Report) -> str:
    lines = [f"fleetc diff {plain(report.base)} -> {plain(report.head)}", *_review_lines(report), ""]
    for c in report.clusters:
        lines.append(f"{c.name}: {_counts(c)}; GPUs {gpu_counts(c.gpus_before)} -> {gpu_counts(c.gpus_after)}; "
                     f"cost/h {money(c.cost_before)} -> {money(c.cost_after)}")
        lines += [f"  + {s}" for s in c.moved_in] + [f"  - {s}" for s in c.moved_out]
    untouched = [f"stages the change did not touch that moved (gain per replica moved, moveCost "
                 f"{report.move_cost:g}):"] if report.untouched else []
    untouched += [f"  {m.stage}: {replica_list(m.before)} -> {replica_list(m.after)}, gain {m.gain:+.4f}"
                  for m in report.untouched]
    totals = [f"GPUs {t}: {b} -> {a} ({a - b:+d})" for t, (b, a) in report.gpu_totals.items() if a != b]
    totals += [f"{t.name}: GPUs {number_or_na(t.gpus[0])} -> {number_or_na(t.gpus[1])}, cost/h {money(t.before)} -> "
               f"{money(t.after)}{_cap(t)}" + (f"; use: {'; '.join(t.quota)}" if t.quota else "")
               for t in teams_shown(report)]
    totals += [line] if (line := entry_points_line(report)) else []
    for section in (totals, _choice_lines(report), untouched):  # each after a blank line, when there
        lines += ["", *section] if section else []
    return "\n".join(map(plain, lines)).rstrip("\n") + "\n"


def _choice_lines(report: Report) -> list[str]:
    """Per stage whose GPU alternative changed: the type it got before and now, and why."""
    lines = []
    for key, before, after in report.gpu_choices:
        lines += [f"GPU type of {key}:", f"  before: {before or 'not placed'}", f"  now:    {after or 'not placed'}"]
    return lines


def _cap(team: TeamCost) -> str:
    return "" if team.cap is None else f" (cap {money(team.cap)})"


def _diffs_text(report: Report) -> str:
    return "".join(f"\n{o.diff}" for o in report.objects)


def as_json(report: Report) -> dict[str, Any]:
    return {"base": report.base, "head": report.head, "changed": report.changed, **_placement_json(report),
            **_review_json(report), **_files_json(report), **_scenarios_json(report)}


def _placement_json(report: Report) -> dict[str, Any]:
    """Per cluster, stage, GPU type, stage with GPU alternatives and team: before and after."""
    return {
        "clusters": [{
            "name": c.name, "added": c.added, "changed": c.changed, "removed": c.removed,
            "gpus": {"before": dict(c.gpus_before), "after": dict(c.gpus_after)},
            "costPerHour": {"before": _round(c.cost_before), "after": _round(c.cost_after)},
            "stagesIn": list(c.moved_in), "stagesOut": list(c.moved_out),
        } for c in report.clusters],
        "stages": [{"stage": m.stage, "before": list(m.before), "after": list(m.after)} for m in report.moves],
        "gpus": {t: {"before": b, "after": a} for t, (b, a) in report.gpu_totals.items()},
        "gpuChoices": [{"stage": key, "before": before or None, "after": after or None}
                       for key, before, after in report.gpu_choices],
        "teams": [{"name": t.name, "costPerHour": {"before": _round(t.before), "after": _round(t.after)},
                   "cap": t.cap, "gpus": {"before": t.gpus[0], "after": t.gpus[1]}, "quota": list(t.quota)}
                  for t in report.teams],
    }


def _review_json(report: Report) -> dict[str, Any]:
    """The dangers, the stage table, the restarts, the bookkeeping and the untouched moves."""
    return {
        "dangers": [{"kind": d.kind, "subject": d.subject, "text": d.text, "fix": d.fix} for d in report.dangers],
        "stageChanges": [{"stage": c.stage, "reason": c.reason,
                          "changes": [{"what": what, "before": before, "after": after}
                                      for what, before, after in c.changes]} for c in report.stage_table],
        "restarts": [{"stage": r.stage, "cluster": r.cluster, "job": r.before, "newJob": r.after or None,
                      "editOutsideStage": r.outside} for r in report.restarts],
        "bookkeeping": list(report.bookkeeping),
        "untouchedMoves": [{"stage": m.stage, "before": dict(m.before), "after": dict(m.after),
                            "gain": round(m.gain, 6)} for m in report.untouched],
        "moveCost": report.move_cost,
    }


def _files_json(report: Report) -> dict[str, Any]:
    """The entry points, the rendered files that differ, the unrendered and the user's files."""
    return {
        "entryPoints": {"before": list(report.entry_points[0]), "after": list(report.entry_points[1])},
        "objects": [{"path": o.path, "cluster": None if o.group == FLEET_WIDE else o.group,
                     "status": o.status, "diff": o.diff} for o in report.objects],
        "unrendered": [{"path": path, "status": status} for path, status in report.unrendered],
        "userFiles": [{"path": o.path, "status": o.status, "diff": o.diff} for o in report.user_files],
    }


def _scenarios_json(report: Report) -> dict[str, Any]:
    if not report.scenarios:
        return {}
    return {"scenarios": [{
        "file": w.source or None,
        **what_if_facts(w),
        "stages": [{"stage": m.stage, "before": list(m.before), "after": list(m.after)} for m in w.report.moves],
    } for w in report.scenarios]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _counts(c: ClusterSummary) -> str:
    return f"+{c.added} ~{c.changed} -{c.removed} objects"


def format_what_if_text(w: WhatIf) -> str:
    """The diff's summary, then what the scenario leaves out, costs and leaves free, then the
    diffs of the rendered objects."""
    head = _summary_text(w.report) if w.report.changed else (
        f"fleetc diff {plain(w.report.base)} -> {plain(w.report.head)}\n\nno stage moves and no object changes\n")
    return head + "\n" + "\n".join(map(plain, what_if_lines(w))) + "\n" + _diffs_text(w.report)


def what_if_json(w: WhatIf) -> dict[str, Any]:
    return {**as_json(w.report), "changed": w.changed, "whatIf": what_if_facts(w)}
