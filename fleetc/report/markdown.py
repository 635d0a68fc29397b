"""The report as a pull-request comment: consequences first (the dangers, the stages that
changed, who pays), then the diffs, cut at whole objects to fit GitHub's comment limit, saying
what it left out. Every name from a file, policy or scenario goes through :mod:`.escape`."""

from __future__ import annotations

from collections.abc import Sequence

from fleetc.report.compare import FLEET_WIDE, ObjectDiff, Report, WhatIf, entry_points_line, teams_shown
from fleetc.report.escape import attribute, cell, code, fenced, plain, words
from fleetc.report.figures import counted, gpu_counts, money, number_or_na, replica_list
from fleetc.report.whatif import scenario_lines, what_if_lines

#: GitHub refuses issue and pull-request comments longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
#: What the Markdown report may use by default: the limit less room for the hidden marker a
#: sticky-comment action adds to find its comment again.
MARKDOWN_BUDGET = GITHUB_COMMENT_LIMIT - 1_024
#: The summary table lists at most this many clusters, so it alone never outgrows the comment.
MAX_TABLE_ROWS = 150
#: The Markdown names at most this many omitted objects; the rest are counted.
MAX_OMITTED_NAMES = 40
#: A scenario below the diff lists at most this many moved and unplaced stages each; the rest are counted.
MAX_SCENARIO_LINES = 20
#: The chart shows at most this many clusters (those whose GPUs changed most); more is unreadable.
MAX_CHART_CLUSTERS = 20
#: A GPU bar is at most this many characters wide (the cluster with the most GPUs).
BAR_WIDTH = 24
#: The danger table lists at most this many rows; the rest are counted (all are in the JSON).
MAX_DANGER_ROWS = 60


def format_markdown(report: Report, limit: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: the danger section, the stage table, the team table, the
    clusters with their GPUs as bars, then one collapsible section of diffs per cluster.

    Everything from a file name, policy or scenario is escaped (:mod:`fleetc.report.escape`). When
    the whole comment would exceed ``limit`` characters, trailing per-object diffs are left out
    whole (never cut mid-diff, never the summary above them), and a note counts and names them.
    """
    scenarios = _scenarios_markdown(report, limit // 2)
    if not report.changed:
        return _markdown_head(report) + (f"\n{scenarios}".rstrip("\n") + "\n" if scenarios else "")
    rows = MAX_TABLE_ROWS
    head = _markdown_head(report, rows) + scenarios
    while len(head) > limit - len(_cut_note(report, report.objects)) and rows > 1:
        rows //= 2  # the tables give their last rows to the counted "… and N more", never the dangers
        head = _markdown_head(report, rows) + scenarios
    low, high = 0, len(report.objects)
    while low < high:  # the largest number of objects that fits; length grows with it
        middle = (low + high + 1) // 2
        if len(_markdown(report, head, middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    return _markdown(report, head, low)


def _markdown_head(report: Report, rows: int = MAX_TABLE_ROWS) -> str:
    """Everything above the diffs; each table shows at most ``rows`` rows and counts the rest."""
    title = f"### fleetc: review of {code(report.base)} → {code(report.head)}\n\n"
    if not report.changed:
        return title + "No differences: the rendered manifests and the placement are the same.\n"
    return (title + _verdict(report) + _dangers_markdown(report) + _out_tree_markdown(report)
            + _stages_markdown(report, rows)
            + _teams_markdown(report, rows) + _clusters_markdown(report, rows) + _gpu_bars(report)
            + _choices_markdown(report) + _untouched_markdown(report, rows) + _bookkeeping_markdown(report))


def _verdict(report: Report) -> str:
    totals = [f"{t} {b} → {a} ({a - b:+d})" for t, (b, a) in report.gpu_totals.items() if a != b]
    facts = [f"{counted(len(report.stage_table), 'stage')} changed", f"{counted(len(report.moved), 'stage')} moved",
             f"{counted(len(report.restarts), 'running Job')} restarted"]
    facts += [f"GPUs {', '.join(totals)}"] if totals else []
    facts.append(f"{counted(len(report.objects), 'file')} changed")
    facts += [line.replace("->", "→")] if (line := entry_points_line(report)) else []
    danger = f"**{counted(len(report.dangers), 'danger')}**" if report.dangers else "no danger found"
    return "; ".join([danger, *map(words, facts)]) + ".\n\n"


def _dangers_markdown(report: Report) -> str:
    if not report.dangers:
        return ""
    outside = sum(r.outside for r in report.restarts)
    lines = [f"#### ⚠️ Danger: {counted(len(report.dangers), 'finding')}\n"]
    if report.restarts:
        lines.append(words(f"Running Jobs restarted: {len(report.restarts)}"
                           + (f" ({outside} by an edit outside their stage)" if outside else "")
                           + ". A Job fleetc renames or moves is deleted and created again: its run starts over.")
                     + "\n")
    rows = ["| danger | subject | what | fix |", "|---|---|---|---|"]
    rows += [f"| {d.kind} | {cell(d.subject)} | {words(d.text)} | {words(d.fix)} |"
             for d in report.dangers[:MAX_DANGER_ROWS]]
    if len(report.dangers) > MAX_DANGER_ROWS:
        rows.append(f"| … | {len(report.dangers) - MAX_DANGER_ROWS} more | every one is in "
                    "`fleetc diff --format json` (`dangers`) | |")
    return "\n".join(lines) + "\n" + "\n".join(rows) + "\n\n"


def _stages_markdown(report: Report, shown: int) -> str:
    if not report.stage_table:
        return ""
    rows = ["#### Stages\n", "| stage | what changed: before → after | why |", "|---|---|---|"]
    for change in report.stage_table[:shown]:
        what = "<br>".join(f"{name}: {cell(before or '–')} → {cell(after or '–')}"
                           for name, before, after in change.changes)
        rows.append(f"| {cell(change.stage)} | {what} | {words(change.reason)} |")
    if len(report.stage_table) > shown:
        rows.append(f"| … and {len(report.stage_table) - shown} more stages | every one is in the full report: "
                    f"{code(f'fleetc diff --base {report.base}')} (`--format json`: `stageChanges`) | |")
    return "\n".join(rows) + "\n\n"


def _teams_markdown(report: Report, limit: int) -> str:
    shown = teams_shown(report)
    if not shown:
        return ""
    rows = ["#### Who pays\n", "| team or pipeline | GPUs before → after | cost/h before → after | quota use |",
            "|---|---|---|---|"]
    rows += [f"| {cell(t.name)} | {number_or_na(t.gpus[0])} → {number_or_na(t.gpus[1])} | {money(t.before)} → "
             f"{money(t.after)} | {words('; '.join(t.quota)) or '–'} |" for t in shown[:limit]]
    if len(shown) > limit:
        rows.append(f"| … and {len(shown) - limit} more | | | |")
    return "\n".join(rows) + "\n\n"


def _clusters_markdown(report: Report, limit: int) -> str:
    if not report.clusters:
        return ""
    rows = ["#### Clusters\n",
            "| cluster | objects + / ~ / − | GPUs before → after | cost/h before → after | stages in | stages out |",
            "|---|---|---|---|---|---|"]
    for c in report.clusters[:limit]:
        rows.append(f"| {cell(c.name)} | {c.added} / {c.changed} / {c.removed} | {words(gpu_counts(c.gpus_before))} → "
                    f"{words(gpu_counts(c.gpus_after))} | {money(c.cost_before)} → {money(c.cost_after)} | "
                    f"{_stage_list(c.moved_in)} | {_stage_list(c.moved_out)} |")
    if len(report.clusters) > limit:
        rows.append(f"| … and {len(report.clusters) - limit} more clusters | | | | | |")
    return "\n".join(rows) + "\n\n"


def _gpu_bars(report: Report) -> str:
    """GPUs per cluster before and after as bars of text, one line each side (``░`` before,
    ``█`` after, so the two are told apart in any renderer), for the clusters whose GPUs
    changed most (at most :data:`MAX_CHART_CLUSTERS`)."""
    rows = [(c.name, sum(c.gpus_before.values()), sum(c.gpus_after.values())) for c in report.clusters]
    rows = [r for r in rows if r[1] != r[2]]
    if not rows:
        return ""
    rows = sorted(sorted(rows, key=lambda r: -abs(r[2] - r[1]))[:MAX_CHART_CLUSTERS])
    top = max(max(b, a) for _, b, a in rows)
    digits = len(str(top))

    def bar(n: int, mark: str) -> str:
        return (mark * round(BAR_WIDTH * n / top)).ljust(BAR_WIDTH, "·")

    lines = ["#### GPUs per cluster\n", "| cluster | before ░ / after █ | change |", "|---|---|---|"]
    lines += [f"| {cell(name)} | `{bar(b, '░')} {b:>{digits}}`<br>`{bar(a, '█')} {a:>{digits}}` | {a - b:+d} |"
              for name, b, a in rows]
    return "\n".join(lines) + "\n\n"


def _choices_markdown(report: Report) -> str:
    choices = "".join(f"- GPU type of {code(key)}: {words(before or 'not placed')} → {words(after or 'not placed')}\n"
                      for key, before, after in report.gpu_choices)
    return choices + "\n" if choices else ""


def _out_tree_markdown(report: Report) -> str:
    """First, never cut: the files of the output folder no compile makes (a reviewer must see
    everything the engines apply)."""
    parts = []
    if report.unrendered:
        parts.append(f"**Not rendered by fleetc** ({counted(len(report.unrendered), 'file')}; "
                     "`fleetc compile --check` fails until they are gone):\n\n"
                     + "".join(f"- {code(report.out + '/' + path)} ({status})\n" for path, status in report.unrendered)
                     + "\n")
    if report.user_files:
        parts.append(f"**Your own objects** ({code(report.out + '/local/')}, applied with their clusters, "
                     "not rendered by fleetc):\n\n"
                     + "".join(f"{code(report.out + '/' + o.path)} ({o.status})\n\n{fenced(o.diff, 'diff')}\n\n"
                               for o in report.user_files))
    return "".join(parts)


def _bookkeeping_markdown(report: Report) -> str:
    if not report.bookkeeping:
        return ""
    return ("<sub>fleetc's bookkeeping, not diffed: "
            + "; ".join(words(line) for line in report.bookkeeping) + ".</sub>\n\n")


def _untouched_markdown(report: Report, limit: int) -> str:
    """The stages the change did not touch that moved, each with its gain (a table)."""
    if not report.untouched:
        return ""
    rows = [f"**Stages the change did not touch that moved**: each must gain more than `moveCost` "
            f"({report.move_cost:g}) per replica moved.\n\n"
            "| stage | before → after | gain per replica moved |", "|---|---|---|"]
    rows += [f"| {cell(m.stage)} | {words(replica_list(m.before))} → {words(replica_list(m.after))} | {m.gain:+.4f} |"
             for m in report.untouched[:limit]]
    if len(report.untouched) > limit:
        rows.append(f"| … and {len(report.untouched) - limit} more stages | | |")
    return "\n".join(rows) + "\n\n"


def _scenarios_markdown(report: Report, limit: int) -> str:
    """The scenarios' findings on the head, whole scenarios within ``limit`` characters (a note
    names those left out)."""
    if not report.scenarios:
        return ""
    title = f"#### What-if scenarios on the {words(report.head)}\n\n"
    sections = [fenced("\n".join(plain(line) for line in scenario_lines(w, MAX_SCENARIO_LINES)), "text") + "\n"
                for w in report.scenarios]
    kept = 0
    while kept < len(sections) and len(title) + sum(map(len, sections[:kept + 1])) <= limit:
        kept += 1
    left = [w.source or w.report.head for w in report.scenarios[kept:]]
    note = (f"> **Cut to fit GitHub's comment limit:** {counted(len(left), 'scenario')} left out: "
            f"{', '.join(code(name) for name in left)}. Run `fleetc diff --scenario FILE` to see each.\n\n"
            if left else "")
    return title + "".join(sections[:kept]) + note


def _stage_list(keys: tuple[str, ...]) -> str:
    return "<br>".join(cell(k) for k in keys) or "–"


def _cut_note(report: Report, left: Sequence[ObjectDiff]) -> str:
    """What the comment left out, and where the whole report is."""
    if not left:
        return ""
    names = [code(f"{report.out}/{o.path}") for o in left[:MAX_OMITTED_NAMES]]
    more = f" and {len(left) - MAX_OMITTED_NAMES} more" if len(left) > MAX_OMITTED_NAMES else ""
    return (f"> **Cut to fit GitHub's comment limit:** the diffs of {counted(len(left), 'file')} "
            f"were left out: {', '.join(names)}{more}. Run {code(f'fleetc diff --base {report.base}')} "
            "to see them all (fleetc's workflow keeps the whole report, `report.json`, in its `fleetc-diff` "
            "artifact).\n")


def _markdown(report: Report, head: str, shown: int) -> str:
    """The comment with the first ``shown`` object diffs, grouped in collapsible sections."""
    kept, left = report.objects[:shown], report.objects[shown:]
    parts = [head]
    if report.objects:
        parts.append("#### Rendered files\n\n")
    for group in dict.fromkeys(o.group for o in kept):
        mine = [o for o in kept if o.group == group]
        total = sum(o.group == group for o in report.objects)
        label = group if group == FLEET_WIDE else f"cluster {group}"
        parts.append(f"<details><summary>{attribute(label)}: {counted(total, 'file')} changed</summary>\n\n")
        parts += [f"{code(f'{report.out}/{o.path}')} ({o.status})\n\n{fenced(o.diff, 'diff')}\n" for o in mine]
        parts.append("</details>\n\n")
    parts.append(_cut_note(report, left))
    return "".join(parts).rstrip("\n") + "\n"


def format_what_if_markdown(w: WhatIf, limit: int = MARKDOWN_BUDGET) -> str:
    """The pull-request comment of the diff, with the scenario's findings under its title."""
    section = f"#### What-if {code(w.report.head)}\n\n{fenced(chr(10).join(map(plain, what_if_lines(w))), 'text')}\n"
    comment = format_markdown(w.report, limit - len(section))
    title, _, rest = comment.partition("\n\n")
    return f"{title}\n\n{section}{rest}"
