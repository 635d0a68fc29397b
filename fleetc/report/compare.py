"""The difference between two compiles, as a reviewer reads it: :func:`compare` of two
:class:`~fleetc.report.snapshot.Snapshot` values gives a :class:`Report` (the files that differ,
the stages that moved, the GPUs, cost and limits per cluster and team, the dangers of
:mod:`fleetc.report.review`); :mod:`.text`, :mod:`.markdown` and :mod:`.commit` write it.

Pure: git and the file system stay in :mod:`fleetc.git`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetc.model import ENTRY_POINTS, FleetModel, Placement
from fleetc.report.figures import counted
from fleetc.report.review import (
    CapFacts,
    Danger,
    Restart,
    StageChange,
    cap_dangers,
    cost_danger,
    namespace_dangers,
    pruned_namespaces,
    restart_dangers,
    restarts,
    serving_dangers,
    stage_changes,
    stage_dangers,
)
from fleetc.report.snapshot import Snapshot

#: Output folders holding one subfolder per cluster (its manifests; its Flux bootstrap).
PER_CLUSTER_FOLDERS = ("clusters", "flux")
#: Files outside those (``placement.yaml``, ``argocd/``) are grouped under this heading.
FLEET_WIDE = "(fleet-wide)"


@dataclass(frozen=True)
class ObjectDiff:
    """One output file that differs, with its unified diff."""

    path: str  # under the output folder
    group: str  # cluster name, or FLEET_WIDE
    status: str  # added | changed | removed
    diff: str


@dataclass(frozen=True)
class ClusterSummary:
    name: str
    added: int
    changed: int
    removed: int
    gpus_before: Mapping[str, int]
    gpus_after: Mapping[str, int]
    cost_before: float | None
    cost_after: float | None
    moved_in: tuple[str, ...]  # stage keys now (also) here that were not before
    moved_out: tuple[str, ...]  # stage keys here before, not any more


@dataclass(frozen=True)
class StageMove:
    stage: str
    before: tuple[str, ...]  # clusters; empty when the stage is new
    after: tuple[str, ...]  # clusters; empty when the stage is gone or unplaced


@dataclass(frozen=True)
class TeamCost:
    """A team's (or a pipeline's) GPUs and cost per hour on each side (None: unknown there), its
    cap now (None: none) and the use of its limits now."""

    name: str  # "team research", "pipeline llm"
    before: float | None
    after: float | None
    cap: float | None
    gpus: tuple[int | None, int | None] = (None, None)  # (before, after)
    quota: tuple[str, ...] = ()  # each limit with what is used of it, after


@dataclass(frozen=True)
class UntouchedMove:
    """A stage the change did not touch that moved (the churn rule,
    :func:`fleetc.placement.rules.untouched_moves`), with its gain per replica moved."""

    stage: str
    before: Mapping[str, int]  # cluster -> replicas
    after: Mapping[str, int]
    gain: float


@dataclass(frozen=True)
class Report:
    base: str  # how to name each side, e.g. "origin/main" and "working tree"
    head: str
    out: str  # the output folder's name, for file headers
    clusters: tuple[ClusterSummary, ...]  # clusters with any difference, by name
    objects: tuple[ObjectDiff, ...]  # by group (fleet-wide first), then path
    moves: tuple[StageMove, ...]  # by stage key
    gpu_totals: Mapping[str, tuple[int, int]]  # GPU type -> (before, after), over all clusters
    #: Stages listing GPU alternatives whose choice (or its why) differs: (key, before, after),
    #: '' for a side where the stage does not run (:mod:`fleetc.placement.alternatives`).
    gpu_choices: tuple[tuple[str, str, str], ...] = ()
    #: Scenarios compared with the head's placement (``diff --base REF --scenario PATH``), in order;
    #: reported below the diff, never part of it (``changed`` does not count them).
    scenarios: tuple[WhatIf, ...] = ()
    teams: tuple[TeamCost, ...] = ()  # every team and capped pipeline of either side, by name
    #: Stages the change did not touch that moved, by stage key, and the Fleet's moveCost each
    #: must gain more than (known when the head side was compiled: :func:`untouched_moves`).
    untouched: tuple[UntouchedMove, ...] = ()
    move_cost: float = 0.0
    #: Files of the head's output folder that no compile put there, as (path, status of
    #: :class:`fleetc.emit.Change`: ``unrendered`` or ``link``): the engines may apply them,
    #: and ``compile --check`` fails on them.
    unrendered: tuple[tuple[str, str], ...] = ()
    #: The user's files (``local/``) the change adds, edits or removes, each diffed whole: applied
    #: with their clusters, never rendered, so the reviewer reads them here.
    user_files: tuple[ObjectDiff, ...] = ()
    #: The GitOps entry points each side renders (:func:`entry_points`): the Fleet's choice.
    entry_points: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())

    #: Every stage whose placement, size, node fit, image, command, replicas or Job changed.
    stage_table: tuple[StageChange, ...] = ()
    restarts: tuple[Restart, ...] = ()  # running Jobs the change deletes, by stage and cluster
    dangers: tuple[Danger, ...] = ()  # what a reviewer must decide on, most grave first
    #: fleetc's own bookkeeping files that changed, summarised (never diffed).
    bookkeeping: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.objects or self.moves or self.clusters or self.stage_table or self.bookkeeping
                    or self.unrendered or self.user_files)

    @property
    def moved(self) -> tuple[StageMove, ...]:
        """Stages that exist on both sides and now run on other clusters."""
        return tuple(m for m in self.moves if m.before and m.after)


@dataclass(frozen=True)
class Headroom:
    """One GPU type over the fleet's clusters that take work: GPUs there and GPUs left free."""

    gpu_type: str
    capacity: tuple[int, int]  # (now, in the scenario)
    free: tuple[int, int]


@dataclass(frozen=True)
class WhatIf:
    """``fleetc diff --what-if``: the placement now against the placement in a scenario
    (:func:`fleetc.report.whatif.what_if`); a :class:`Report` carries those below it."""

    report: Report  # base: now; head: the scenario
    unplaced: tuple[tuple[str, str], ...]  # (stage key, why) the scenario leaves out
    cost: tuple[float, float]  # fleet cost per hour (now, in the scenario)
    headroom: tuple[Headroom, ...]  # by GPU type
    source: str = ""  # the scenario file ('' for --what-if settings)
    settings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.report.changed or bool(self.unplaced)


def compare(base: Snapshot, head: Snapshot, *, base_label: str, head_label: str, out: str = "out",
            untouched: tuple[UntouchedMove, ...] = (), move_cost: float = 0.0,
            moves_explained: Mapping[str, str] | None = None) -> Report:
    """``untouched``, ``move_cost``: the moves of stages the change did not touch, and the
    Fleet's moveCost (:func:`untouched_moves`; known when the head side was compiled);
    ``moves_explained``: why other stages moved (:func:`fleetc.report.review.move_reasons`)."""
    objects = tuple(sorted(_object_diffs(base.files, head.files, out),
                           key=lambda o: (o.group != FLEET_WIDE, o.group, _importance(o.path), o.path)))
    moves = tuple(
        StageMove(key, tuple(sorted(base.stages.get(key, ()))), tuple(sorted(head.stages.get(key, ()))))
        for key in sorted(set(base.stages) | set(head.stages))
        if base.stages.get(key, frozenset()) != head.stages.get(key, frozenset())
    )
    names = sorted({o.group for o in objects if o.group != FLEET_WIDE}
                   | {c for m in moves for c in (*m.before, *m.after)}
                   | _changed_keys(base.gpus, head.gpus) | _changed_keys(base.cost or {}, head.cost or {}))
    clusters = tuple(_cluster_summary(name, base, head, objects, moves) for name in names)
    types = sorted({t for side in (base, head) for per in side.gpus.values() for t in per})
    totals = {t: (sum(per.get(t, 0) for per in base.gpus.values()),
                  sum(per.get(t, 0) for per in head.gpus.values())) for t in types}
    gpu_choices = tuple((key, base.gpu_choices.get(key, ""), head.gpu_choices.get(key, ""))
                        for key in sorted(set(base.gpu_choices) | set(head.gpu_choices))
                        if base.gpu_choices.get(key) != head.gpu_choices.get(key))
    restarted = restarts(base.facts, head.facts)
    return Report(base_label, head_label, out, clusters, objects, moves, totals, gpu_choices,
                  teams=_team_costs(base, head), entry_points=(entry_points(base.files), entry_points(head.files)),
                  untouched=untouched, move_cost=move_cost,
                  stage_table=stage_changes(base.facts, head.facts,
                                            {**(moves_explained or {}),
                                             **_known_reasons(base, head, untouched, move_cost)}),
                  restarts=restarted, dangers=_dangers(base, head, restarted),
                  bookkeeping=_bookkeeping(base.files, head.files))


def _known_reasons(base: Snapshot, head: Snapshot, untouched: tuple[UntouchedMove, ...],
                   move_cost: float) -> dict[str, str]:
    """Why stages moved, where the comparison knows: their cluster takes no work now, or the
    move gains more than moveCost."""
    reasons = {m.stage: f"not edited; moving gains {m.gain:+.4f} per replica, more than moveCost ({move_cost:g})"
               for m in untouched}
    for key, facts in base.facts.items():
        idle = sorted(c for c in facts.where if c in head.idle and c not in base.idle)
        if idle and key in head.facts:
            reasons[key] = f"{', '.join(idle)} {'is' if len(idle) == 1 else 'are'} {head.idle[idle[0]]}"
    return reasons


def _dangers(base: Snapshot, head: Snapshot, restarted: tuple[Restart, ...]) -> tuple[Danger, ...]:
    """Most grave first: stages left out, serving cut, jurisdiction changes, Namespaces pruned,
    limits used up, the cost jump, then every running Job restarted."""
    cost = (None if base.cost is None or not base.facts else sum(base.cost.values()),
            None if head.cost is None else sum(head.cost.values()))
    return tuple([*stage_dangers(base.facts, head.facts), *serving_dangers(base.serving, head.serving),
                  *namespace_dangers(pruned_namespaces(base.files, head.files)),
                  *cap_dangers(base.teams, head.teams), *cost_danger(*cost, head.cost_limit),
                  *restart_dangers(restarted)])


def entry_points(files: Mapping[str, str]) -> tuple[str, ...]:
    """The GitOps entry points an output holds (``argocd/``, ``flux/``, ``kurator/``): those the
    Fleet's ``spec.gitops.entryPoints`` chose."""
    folders = {path.split("/", 1)[0] for path in files}
    return tuple(e for e in ENTRY_POINTS if e in folders)


def entry_points_line(report: Report) -> str:
    """'' unless the two sides render different entry points."""
    before, after = report.entry_points
    return "" if before == after else \
        f"GitOps entry points: {', '.join(before) or 'none'} -> {', '.join(after) or 'none'}"


def _team_costs(base: Snapshot, head: Snapshot) -> tuple[TeamCost, ...]:
    before, after = base.teams, head.teams
    names = sorted(set(before or {}) | set(after or {}))
    nothing = CapFacts(0, 0.0, None)

    def side(facts: Mapping[str, CapFacts] | None, name: str) -> CapFacts | None:
        return None if facts is None else facts.get(name, nothing)

    rows = []
    for name in names:
        then, now = side(before, name), side(after, name)
        cap = (now or nothing).cap if after is not None and name in after else (then or nothing).cap
        rows.append(TeamCost(name, None if then is None else then.cost, None if now is None else now.cost, cap,
                             (None if then is None else then.gpus, None if now is None else now.gpus),
                             () if now is None else now.quota))
    return tuple(rows)


def teams_shown(report: Report) -> list[TeamCost]:
    """The teams and pipelines whose GPUs or cost changed, or that have a limit."""
    return [t for t in report.teams
            if (t.before, t.gpus[0]) != (t.after, t.gpus[1]) or t.quota or t.cap is not None]


def untouched_moves(model: FleetModel, before: Mapping[str, Mapping[str, int]], placement: Placement
                    ) -> tuple[UntouchedMove, ...]:
    """The stages of ``model`` the change did not touch that moved from ``before`` (stage key ->
    cluster -> replicas) to where ``placement`` has them, each with its gain per replica moved
    in ``model``'s scores (:func:`fleetc.placement.rules.untouched_moves`)."""
    from fleetc.placement.rules import untouched_moves as moves_of
    from fleetc.placement.scoring import score_matrix

    after = {p.stage: {a.cluster: a.replicas for a in p.assignments} for p in placement.stages}
    if not any(before.get(key) and before[key] != where for key, where in after.items()):
        return ()
    total = score_matrix(model).total
    stage_index = {s.key: i for i, s in enumerate(model.stages)}
    cluster_index = {c.name: i for i, c in enumerate(model.clusters)}

    def score(key: str, cluster: str) -> float:
        c = cluster_index.get(cluster)
        return 0.0 if c is None else float(total[stage_index[key], c])

    return tuple(UntouchedMove(key, dict(before[key]), after.get(key, {}), gain)
                 for key, gain in moves_of(model, before, after, score).items())


def _changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def _group(path: str) -> str:
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] in PER_CLUSTER_FOLDERS else FLEET_WIDE


def user_file_diffs(before: Mapping[str, str], after: Mapping[str, str], out: str) -> tuple[ObjectDiff, ...]:
    """The user's files (``local/``) that differ between two sides, by path, diffed whole."""
    return tuple(sorted(_object_diffs(before, after, out), key=lambda o: o.path))


#: fleetc's own bookkeeping in the output folder: summarised, never diffed (their lines are
#: digests that say nothing to a reviewer, and would push the real change out of the comment).
BOOKKEEPING = (".fleetc/render", ".fleetc/files")


#: The lines of placement.yaml's header that are bookkeeping (a digest, the solver's figures).
_PLACEMENT_BOOKKEEPING = ("inputs: ", "method: ", "optimal: ", "objective: ", "bound: ", "gap: ",
                          "timeLimit: ", "solver: ")


def _importance(path: str) -> int:
    """Where a file's diff goes among its group's (lower first): what runs, then what it needs,
    then the GitOps plumbing."""
    name = path.rsplit("/", 1)[-1]
    if name == "kustomization.yaml":
        return 6
    if "/workloads/" in path:
        return 1 if name.startswith(("job-", "deployment-")) else 2
    if "/infra/" in path:
        return 3 if name.startswith("namespace-") else 4
    return 0 if path == "placement.yaml" else 5


def _without_bookkeeping(path: str, text: str | None) -> str | None:
    if path != "placement.yaml" or text is None:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(_PLACEMENT_BOOKKEEPING))


def _bookkeeping(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[str, ...]:
    """One line per bookkeeping file (and placement.yaml's header) that changed."""
    lines = []
    for path in BOOKKEEPING:
        old, new = before.get(path), after.get(path)
        if old != new:
            changed = len(set((old or "").splitlines()) ^ set((new or "").splitlines()))
            differ = "differs" if changed == 1 else "differ"
            lines.append(f"{path}: {counted(changed, 'line')} {differ} (fleetc's record of what it rendered)")
    old_head, new_head = (_placement_header(side.get("placement.yaml", "")) for side in (before, after))
    keys = [key for key in dict.fromkeys((*old_head, *new_head)) if old_head.get(key) != new_head.get(key)]
    if keys:
        lines.append("placement.yaml: " + ", ".join(
            f"{key} {_short(old_head.get(key))} -> {_short(new_head.get(key))}" for key in keys))
    return tuple(lines)


def _placement_header(text: str) -> dict[str, str]:
    return {line.split(":", 1)[0]: line.split(": ", 1)[1] for line in text.splitlines()
            if line.startswith(_PLACEMENT_BOOKKEEPING)}


def _short(value: str | None) -> str:
    """A digest shortened to its first 12 hex digits; other values as they are."""
    if value is None:
        return "(none)"
    return value[:19] + "…" if value.startswith("sha256:") else value


def _object_diffs(before: Mapping[str, str], after: Mapping[str, str], out: str) -> Iterable[ObjectDiff]:
    for path in set(before) | set(after):
        if path in BOOKKEEPING:
            continue
        old, new = _without_bookkeeping(path, before.get(path)), _without_bookkeeping(path, after.get(path))
        if old == new:
            continue
        status = "added" if old is None else "removed" if new is None else "changed"
        lines = difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile="/dev/null" if old is None else f"a/{out}/{path}",
            tofile="/dev/null" if new is None else f"b/{out}/{path}",
        )
        text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in lines)
        yield ObjectDiff(path, _group(path), status, text)


def _cluster_summary(name: str, base: Snapshot, head: Snapshot, objects: tuple[ObjectDiff, ...],
                     moves: tuple[StageMove, ...]) -> ClusterSummary:
    mine = [o for o in objects if o.group == name and not o.path.endswith("/kustomization.yaml")]
    return ClusterSummary(
        name=name,
        added=sum(o.status == "added" for o in mine),
        changed=sum(o.status == "changed" for o in mine),
        removed=sum(o.status == "removed" for o in mine),
        gpus_before=dict(base.gpus.get(name, {})),
        gpus_after=dict(head.gpus.get(name, {})),
        cost_before=None if base.cost is None else base.cost.get(name, 0.0),
        cost_after=None if head.cost is None else head.cost.get(name, 0.0),
        moved_in=tuple(m.stage for m in moves if name in m.after and name not in m.before),
        moved_out=tuple(m.stage for m in moves if name in m.before and name not in m.after),
    )
