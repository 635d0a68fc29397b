"""The difference between two compiles, as a reviewer reads it: text, Markdown or JSON.

Pure: everything here works on two :class:`Snapshot` values (rendered files plus what was placed
where), built from compiles or from a committed ``placement.yaml``; git and the file system stay
in :mod:`fleetc.git.repo` and :mod:`fleetc.git.flow`. The Markdown is meant for a pull-request comment:
consequences first (the dangers, the stages that changed, who pays: :mod:`fleetc.git.review`),
then the diffs, cut at whole objects to fit GitHub's comment limit, saying what it left out.
Every name from a file, policy or scenario goes through :mod:`fleetc.git.escape`.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetc.errors import Diagnostic
from fleetc.git.escape import attribute, cell, code, fenced, plain, words
from fleetc.git.review import (
    CapFacts,
    Danger,
    Restart,
    StageChange,
    StageFacts,
    cap_dangers,
    cap_facts,
    cost_danger,
    namespace_dangers,
    pruned_namespaces,
    restart_dangers,
    restarts,
    serving_dangers,
    short_serving,
    stage_changes,
    stage_dangers,
    stage_facts,
)
from fleetc.model import DEFAULT_COST_INCREASE, ENTRY_POINTS, FleetModel, Placement
from fleetc.placement import rules
from fleetc.placement.alternatives import choices, describe
from fleetc.placement.rules import slots_on, slots_per_gpu, time_sliced_gpus, time_sliced_unit, uses_shared_slots
from fleetc.state.placementfile import stage_entries

#: GitHub refuses issue and pull-request comments longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
#: What the Markdown report may use by default: the limit less room for the hidden marker a
#: sticky-comment action adds to find its comment again.
MARKDOWN_BUDGET = GITHUB_COMMENT_LIMIT - 1_024
#: GitHub shows at most 10 error annotations per step (50 per job); the rest would be dropped.
GITHUB_MAX_ANNOTATIONS = 10
#: The summary table lists at most this many clusters, so it alone never outgrows the comment.
MAX_TABLE_ROWS = 150
#: Output folders holding one subfolder per cluster (its manifests; its Flux bootstrap).
PER_CLUSTER_FOLDERS = ("clusters", "flux")
#: Files outside those (``placement.yaml``, ``argocd/``) are grouped under this heading.
FLEET_WIDE = "(fleet-wide)"
#: The Markdown names at most this many omitted objects; the rest are counted.
MAX_OMITTED_NAMES = 40
#: A scenario below the diff lists at most this many moved and unplaced stages each; the rest are counted.
MAX_SCENARIO_LINES = 20
#: The chart shows at most this many clusters (those whose GPUs changed most); more is unreadable.
MAX_CHART_CLUSTERS = 20

_GIB = 1024**3


@dataclass(frozen=True)
class Snapshot:
    """One side of a comparison: the rendered files and what was placed where."""

    files: Mapping[str, str] = field(default_factory=dict)  # path under the output folder -> text
    stages: Mapping[str, frozenset[str]] = field(default_factory=dict)  # stage key -> clusters
    gpus: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # cluster -> type -> GPUs
    cost: Mapping[str, float] | None = field(default_factory=dict)  # cluster -> per hour; None: unknown
    #: Stage key -> the GPU alternative it got and why no earlier one (stages listing several).
    gpu_choices: Mapping[str, str] = field(default_factory=dict)
    #: "team <name>" or "pipeline <name>" (a pipeline with its own cost cap, or in no team) -> its
    #: GPUs, cost per hour and limits (:func:`fleetc.git.review.cap_facts`); None: unknown (a tree
    #: read without its policies)
    teams: Mapping[str, CapFacts] | None = field(default_factory=dict)
    #: Stage key -> how it runs (:func:`fleetc.git.review.stage_facts`); empty for a tree read
    #: without its policies.
    facts: Mapping[str, StageFacts] = field(default_factory=dict)
    #: Cluster -> "drained" or "cordoned", for the clusters that take no work.
    idle: Mapping[str, str] = field(default_factory=dict)
    #: Why serving runs below its replicas or HA set (:func:`fleetc.git.review.short_serving`).
    serving: tuple[str, ...] = ()
    #: The rise of the fleet's cost per hour above which the review calls it a danger (a fraction).
    cost_limit: float = DEFAULT_COST_INCREASE


EMPTY = Snapshot()


def snapshot(model: FleetModel, placement: Placement, files: Mapping[str, str]) -> Snapshot:
    """A compile reduced to what the report compares.

    GPUs are the GPUs taken: a time-sliced stage's slots count ``1 / slots_per_gpu`` of a GPU
    each, and a cluster's shared slots take whole time-sliced units of GPUs, whole nodes where
    its device plugin is configured (:func:`fleetc.placement.rules.time_sliced_gpus`, as the
    placement rule and the verifier count them; a whole GPU each where its device plugin is not
    configured). Cost per hour of a cluster is its prices times what is placed on it:
    GPUs taken x GPU-hour cost + cores x core-hour cost + GiB x GiB-hour cost.
    """
    clusters = {c.name: c for c in model.clusters}
    stages = {s.key: s for s in model.stages}
    usage = _Usage(slots_per_gpu(model), time_sliced_units(model))
    cost: dict[str, float] = defaultdict(float)
    where: dict[str, frozenset[str]] = {}
    for p in placement.stages:
        stage = stages[p.stage]
        placed = [a for a in p.assignments if a.replicas > 0]
        where[p.stage] = frozenset(a.cluster for a in placed)
        for a in placed:
            cluster = clusters[a.cluster]
            usage.add(a.cluster, cluster.gpu_type or "gpu", a.gpus,
                      shared=uses_shared_slots(model, stage) and slots_on(model, cluster) > 1)
            cost[a.cluster] += (a.replicas * stage.cpu_millis / 1000 * cluster.cpu_hour_cost
                                + a.replicas * stage.memory_bytes / _GIB * cluster.memory_gib_hour_cost)
    gpus = usage.gpus()
    for name, per_type in gpus.items():
        cost[name] += sum(per_type.values()) * clusters[name].gpu_hour_cost
    gpu_choices = {key: choice.text for key, choice in choices(model, placement).items()}
    idle = {c.name: "drained" if c.drained else "cordoned" for c in model.clusters if c.cordoned}
    return Snapshot(dict(files), where, gpus, dict(cost), gpu_choices, cap_facts(model, placement),
                    stage_facts(model, placement, files), idle, short_serving(model, placement),
                    model.cost_increase_limit)


def time_sliced_units(model: FleetModel) -> dict[str, int]:
    """Cluster -> the GPUs it turns over to time-slicing at once (:func:`time_sliced_unit`)."""
    return {c.name: time_sliced_unit(c) for c in model.clusters}


class _Usage:
    """GPUs taken per cluster and type: exclusive GPUs plus the time-sliced units the slots take
    (``units``: cluster -> GPUs per unit; one GPU where not given)."""

    def __init__(self, slots_per_gpu: int, units: Mapping[str, int]) -> None:
        self.slots_per_gpu = max(1, slots_per_gpu)
        self.units = units
        self.exclusive: dict[tuple[str, str], int] = defaultdict(int)
        self.slots: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, cluster: str, gpu_type: str, count: int, *, shared: bool) -> None:
        if count:
            (self.slots if shared else self.exclusive)[(cluster, gpu_type)] += count

    def gpus(self) -> dict[str, dict[str, int]]:
        taken: dict[str, dict[str, int]] = defaultdict(dict)
        for key in sorted(set(self.exclusive) | set(self.slots)):
            taken[key[0]][key[1]] = self.exclusive[key] + time_sliced_gpus(self.slots[key], self.slots_per_gpu,
                                                                            self.units.get(key[0], 1))
        return dict(taken)


def snapshot_of_output(files: Mapping[str, str], gpu_types: Mapping[str, str | None],
                       units: Mapping[str, int] | None = None) -> Snapshot:
    """A snapshot from a rendered tree alone (a committed out/), read from its placement.yaml.

    The tree does not record prices, so cost is unknown (None); a cluster's GPU type comes from
    ``gpu_types`` when known, else from the stage's requested type, and the GPUs its shared
    slots take from ``units`` (:func:`time_sliced_units`; one GPU at a time where not given).
    """
    report = stage_entries(files.get("placement.yaml", ""))
    where: dict[str, frozenset[str]] = {}
    gpu_choices: dict[str, str] = {}
    sliced = [s for e in report if isinstance(s := e.get("timeSlicing"), dict)]
    usage = _Usage(max((_whole(s.get("slotsPerGPU")) for s in sliced), default=1), units or {})
    for entry in report:
        key = f"{entry.get('pipeline')}/{entry.get('stage')}"
        placed = [a for a in entry.get("clusters") or [] if isinstance(a, dict) and a.get("replicas")]
        where[key] = frozenset(str(a.get("name")) for a in placed)
        sliced_stage = isinstance(entry.get("timeSlicing"), dict)
        stated = entry.get("gpuType")
        for a in placed:
            name = str(a.get("name"))
            # its slots are whole GPUs where the cluster's device plugin is not configured
            shared = sliced_stage and a.get("gpus") != a.get("slots")
            usage.add(name, gpu_types.get(name) or _text(a.get("gpuType")) or _text(stated) or "gpu",
                      _whole(a.get("slots" if shared else "gpus")), shared=shared)
        choice = _gpu_choice(entry)
        if choice:
            gpu_choices[key] = choice
    return Snapshot(dict(files), where, usage.gpus(), None, gpu_choices, None)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _gpu_choice(entry: Mapping[str, Any]) -> str:
    """The line of a placement.yaml entry's ``gpuChoice`` ('' when it has none, or not as
    fleetc writes it)."""
    choice, listed, counts = entry.get("gpuChoice"), entry.get("gpuType"), entry.get("gpusPerReplica")
    per_replica = {str(t): _whole(n) for t, n in counts.items()} if isinstance(counts, dict) else {}
    listed = listed if isinstance(listed, list) else list(per_replica)
    if not isinstance(choice, dict):
        return ""
    chosen, passed = choice.get("chosen"), choice.get("passed")
    if not isinstance(chosen, list) or not isinstance(passed, list):
        return ""
    return describe([_text(t) for t in chosen], _whole(choice.get("alternative")), [_text(t) for t in listed],
                    [(_text(p.get("gpuType")), _text(p.get("why"))) for p in passed if isinstance(p, dict)],
                    per_replica)


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --------------------------------------------------------------------------- comparison
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


def compare(base: Snapshot, head: Snapshot, *, base_label: str, head_label: str, out: str = "out",
            untouched: tuple[UntouchedMove, ...] = (), move_cost: float = 0.0,
            moves_explained: Mapping[str, str] | None = None) -> Report:
    """``untouched``, ``move_cost``: the moves of stages the change did not touch, and the
    Fleet's moveCost (:func:`untouched_moves`; known when the head side was compiled);
    ``moves_explained``: why other stages moved (:func:`fleetc.git.review.move_reasons`)."""
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


def _entry_points_line(report: Report) -> str:
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
            lines.append(f"{path}: {_count(changed, 'line')} {differ} (fleetc's record of what it rendered)")
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


# --------------------------------------------------------------------------- text and JSON
def format_text(report: Report) -> str:
    """A terminal report: the dangers, the stages that changed, the summary, then every diff
    (like ``git diff``). Names from files and scenarios are shown without control characters
    (:func:`fleetc.git.escape.plain`)."""
    scenarios = "".join("\n" + "\n".join(map(plain, _scenario_lines(w))) + "\n" for w in report.scenarios)
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
        lines += ["", f"DANGER: {_count(len(report.dangers), 'finding')}"]
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
        lines.append(f"{c.name}: {_counts(c)}; GPUs {_gpus(c.gpus_before)} -> {_gpus(c.gpus_after)}; "
                     f"cost/h {_money(c.cost_before)} -> {_money(c.cost_after)}")
        lines += [f"  + {s}" for s in c.moved_in] + [f"  - {s}" for s in c.moved_out]
    untouched = [f"stages the change did not touch that moved (gain per replica moved, moveCost "
                 f"{report.move_cost:g}):"] if report.untouched else []
    untouched += [f"  {m.stage}: {_replicas(m.before)} -> {_replicas(m.after)}, gain {m.gain:+.4f}"
                  for m in report.untouched]
    totals = [f"GPUs {t}: {b} -> {a} ({a - b:+d})" for t, (b, a) in report.gpu_totals.items() if a != b]
    totals += [f"{t.name}: GPUs {_number(t.gpus[0])} -> {_number(t.gpus[1])}, cost/h {_money(t.before)} -> "
               f"{_money(t.after)}{_cap(t)}" + (f"; use: {'; '.join(t.quota)}" if t.quota else "")
               for t in _teams_shown(report)]
    totals += [line] if (line := _entry_points_line(report)) else []
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
    return "" if team.cap is None else f" (cap {_money(team.cap)})"
def _replicas(where: Mapping[str, int]) -> str:
    return ", ".join(f"{cluster} x{n}" for cluster, n in sorted(where.items())) or "(none)"


def _diffs_text(report: Report) -> str:
    return "".join(f"\n{o.diff}" for o in report.objects)


def as_json(report: Report) -> dict[str, Any]:
    return {
        "base": report.base,
        "head": report.head,
        "changed": report.changed,
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
        "entryPoints": {"before": list(report.entry_points[0]), "after": list(report.entry_points[1])},
        "objects": [{"path": o.path, "cluster": None if o.group == FLEET_WIDE else o.group,
                     "status": o.status, "diff": o.diff} for o in report.objects],
        "unrendered": [{"path": path, "status": status} for path, status in report.unrendered],
        "userFiles": [{"path": o.path, "status": o.status, "diff": o.diff} for o in report.user_files],
        **({"scenarios": [{
            "file": w.source or None,
            **_what_if_facts(w),
            "stages": [{"stage": m.stage, "before": list(m.before), "after": list(m.after)} for m in w.report.moves],
        } for w in report.scenarios]} if report.scenarios else {}),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _counts(c: ClusterSummary) -> str:
    return f"+{c.added} ~{c.changed} -{c.removed} objects"


def _gpus(per_type: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {t}" for t, n in sorted(per_type.items())) or "0"


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


# --------------------------------------------------------------------------- what-if
@dataclass(frozen=True)
class Headroom:
    """One GPU type over the fleet's clusters that take work: GPUs there and GPUs left free."""

    gpu_type: str
    capacity: tuple[int, int]  # (now, in the scenario)
    free: tuple[int, int]


@dataclass(frozen=True)
class WhatIf:
    """``fleetc diff --what-if``: the placement now against the placement in a scenario."""

    report: Report  # base: now; head: the scenario
    unplaced: tuple[tuple[str, str], ...]  # (stage key, why) the scenario leaves out
    cost: tuple[float, float]  # fleet cost per hour (now, in the scenario)
    headroom: tuple[Headroom, ...]  # by GPU type
    source: str = ""  # the scenario file ('' for --what-if settings)
    settings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.report.changed or bool(self.unplaced)


def capacity(model: FleetModel) -> dict[str, int]:
    """GPUs per type fleetc may use on the clusters that take work (not cordoned or drained):
    their usable GPUs (:func:`fleetc.placement.rules.usable_capacity`: what ``utilization`` and
    the GPU policy's ``defragmentThreshold`` leave), so free GPUs are GPUs a stage could get."""
    found: dict[str, int] = defaultdict(int)
    for c in model.clusters:
        if c.gpu_type and not c.cordoned:
            found[c.gpu_type] += rules.usable_capacity(model, c)[0]
    return dict(found)


def what_if(now: Snapshot, scenario: Snapshot, capacities: tuple[Mapping[str, int], Mapping[str, int]],
            unplaced: Sequence[tuple[str, str]], label: str, out: str = "out", *, source: str = "",
            settings: Sequence[str] = ()) -> WhatIf:
    """The comparison, the stages the scenario leaves out, the fleet's cost and its headroom;
    ``capacities``: :func:`capacity` now and in the scenario; ``source``: the scenario file."""
    report = compare(now, scenario, base_label="now", head_label=label, out=out)
    taken = [_taken(side) for side in (now, scenario)]
    types = sorted(set(capacities[0]) | set(capacities[1]) | set(taken[0]) | set(taken[1]))
    headroom = tuple(Headroom(t, (capacities[0].get(t, 0), capacities[1].get(t, 0)),
                              (capacities[0].get(t, 0) - taken[0].get(t, 0),
                               capacities[1].get(t, 0) - taken[1].get(t, 0))) for t in types)
    cost = (sum((now.cost or {}).values()), sum((scenario.cost or {}).values()))
    return WhatIf(report, tuple(sorted(unplaced)), cost, headroom, source, tuple(settings))


def _taken(side: Snapshot) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    for per_type in side.gpus.values():
        for gpu_type, n in per_type.items():
            found[gpu_type] += n
    return dict(found)


def _what_if_lines(w: WhatIf) -> list[str]:
    lines = [f"unplaced in the scenario: {_count(len(w.unplaced), 'stage')}"]
    lines += [f"  {stage}: {why}" for stage, why in w.unplaced]
    before, after = w.cost
    lines.append(f"cost/h: {_money(before)} -> {_money(after)} ({after - before:+,.2f})")
    lines.append("headroom (free / capacity GPUs): " + ("; ".join(
        f"{h.gpu_type} {h.free[0]}/{h.capacity[0]} -> {h.free[1]}/{h.capacity[1]}" for h in w.headroom) or "none"))
    return lines


def _scenario_lines(w: WhatIf, shown: int | None = None) -> list[str]:
    """One scenario below a diff: its title, the stages that move (at most ``shown`` of each
    list, the rest counted), then :func:`_what_if_lines`."""
    title = f"{w.source}: {w.report.head}" if w.source else w.report.head
    lines = [title, f"stages moved in the scenario: {_count(len(w.report.moves), 'stage')}"]
    lines += _capped([f"  {m.stage}: {', '.join(m.before) or '(none)'} -> {', '.join(m.after) or '(none)'}"
                      for m in w.report.moves], shown)
    found = _what_if_lines(w)
    return lines + found[:1] + _capped(found[1:len(w.unplaced) + 1], shown) + found[len(w.unplaced) + 1:]


def _capped(lines: list[str], shown: int | None) -> list[str]:
    if shown is None or len(lines) <= shown:
        return lines
    return [*lines[:shown], f"  ... and {len(lines) - shown} more"]


def format_what_if_text(w: WhatIf) -> str:
    """The diff's summary, then what the scenario leaves out, costs and leaves free, then the
    diffs of the rendered objects."""
    head = _summary_text(w.report) if w.report.changed else (
        f"fleetc diff {plain(w.report.base)} -> {plain(w.report.head)}\n\nno stage moves and no object changes\n")
    return head + "\n" + "\n".join(map(plain, _what_if_lines(w))) + "\n" + _diffs_text(w.report)


def what_if_json(w: WhatIf) -> dict[str, Any]:
    return {**as_json(w.report), "changed": w.changed, "whatIf": _what_if_facts(w)}


def _what_if_facts(w: WhatIf) -> dict[str, Any]:
    return {
        "settings": list(w.settings),
        "unplaced": [{"stage": stage, "reason": why} for stage, why in w.unplaced],
        "costPerHour": {"before": round(w.cost[0], 4), "after": round(w.cost[1], 4)},
        "headroom": {h.gpu_type: {"capacity": {"before": h.capacity[0], "after": h.capacity[1]},
                                  "free": {"before": h.free[0], "after": h.free[1]}} for h in w.headroom},
    }


def format_what_if_markdown(w: WhatIf, limit: int = MARKDOWN_BUDGET) -> str:
    """The pull-request comment of the diff, with the scenario's findings under its title."""
    section = f"#### What-if {code(w.report.head)}\n\n{fenced(chr(10).join(map(plain, _what_if_lines(w))), 'text')}\n"
    comment = format_markdown(w.report, limit - len(section))
    title, _, rest = comment.partition("\n\n")
    return f"{title}\n\n{section}{rest}"


# --------------------------------------------------------------------------- Markdown
#: A GPU bar is at most this many characters wide (the cluster with the most GPUs).
BAR_WIDTH = 24
#: The danger table lists at most this many rows; the rest are counted (all are in the JSON).
MAX_DANGER_ROWS = 60


def format_markdown(report: Report, limit: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: the danger section, the stage table, the team table, the
    clusters with their GPUs as bars, then one collapsible section of diffs per cluster.

    Everything from a file name, policy or scenario is escaped (:mod:`fleetc.git.escape`). When
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
    facts = [f"{_count(len(report.stage_table), 'stage')} changed", f"{_count(len(report.moved), 'stage')} moved",
             f"{_count(len(report.restarts), 'running Job')} restarted"]
    facts += [f"GPUs {', '.join(totals)}"] if totals else []
    facts.append(f"{_count(len(report.objects), 'file')} changed")
    facts += [line.replace("->", "→")] if (line := _entry_points_line(report)) else []
    danger = f"**{_count(len(report.dangers), 'danger')}**" if report.dangers else "no danger found"
    return "; ".join([danger, *map(words, facts)]) + ".\n\n"


def _dangers_markdown(report: Report) -> str:
    if not report.dangers:
        return ""
    outside = sum(r.outside for r in report.restarts)
    lines = [f"#### ⚠️ Danger: {_count(len(report.dangers), 'finding')}\n"]
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
    shown = _teams_shown(report)
    if not shown:
        return ""
    rows = ["#### Who pays\n", "| team or pipeline | GPUs before → after | cost/h before → after | quota use |",
            "|---|---|---|---|"]
    rows += [f"| {cell(t.name)} | {_number(t.gpus[0])} → {_number(t.gpus[1])} | {_money(t.before)} → "
             f"{_money(t.after)} | {words('; '.join(t.quota)) or '–'} |" for t in shown[:limit]]
    if len(shown) > limit:
        rows.append(f"| … and {len(shown) - limit} more | | | |")
    return "\n".join(rows) + "\n\n"


def _teams_shown(report: Report) -> list[TeamCost]:
    """The teams and pipelines whose GPUs or cost changed, or that have a limit."""
    return [t for t in report.teams
            if (t.before, t.gpus[0]) != (t.after, t.gpus[1]) or t.quota or t.cap is not None]


def _number(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _clusters_markdown(report: Report, limit: int) -> str:
    if not report.clusters:
        return ""
    rows = ["#### Clusters\n",
            "| cluster | objects + / ~ / − | GPUs before → after | cost/h before → after | stages in | stages out |",
            "|---|---|---|---|---|---|"]
    for c in report.clusters[:limit]:
        rows.append(f"| {cell(c.name)} | {c.added} / {c.changed} / {c.removed} | {words(_gpus(c.gpus_before))} → "
                    f"{words(_gpus(c.gpus_after))} | {_money(c.cost_before)} → {_money(c.cost_after)} | "
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
        parts.append(f"**Not rendered by fleetc** ({_count(len(report.unrendered), 'file')}; "
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
    rows += [f"| {cell(m.stage)} | {words(_replicas(m.before))} → {words(_replicas(m.after))} | {m.gain:+.4f} |"
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
    sections = [fenced("\n".join(plain(line) for line in _scenario_lines(w, MAX_SCENARIO_LINES)), "text") + "\n"
                for w in report.scenarios]
    kept = 0
    while kept < len(sections) and len(title) + sum(map(len, sections[:kept + 1])) <= limit:
        kept += 1
    left = [w.source or w.report.head for w in report.scenarios[kept:]]
    note = (f"> **Cut to fit GitHub's comment limit:** {_count(len(left), 'scenario')} left out: "
            f"{', '.join(code(name) for name in left)}. Run `fleetc diff --scenario FILE` to see each.\n\n"
            if left else "")
    return title + "".join(sections[:kept]) + note


def _stage_list(keys: tuple[str, ...]) -> str:
    return "<br>".join(cell(k) for k in keys) or "–"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _cut_note(report: Report, left: Sequence[ObjectDiff]) -> str:
    """What the comment left out, and where the whole report is."""
    if not left:
        return ""
    names = [code(f"{report.out}/{o.path}") for o in left[:MAX_OMITTED_NAMES]]
    more = f" and {len(left) - MAX_OMITTED_NAMES} more" if len(left) > MAX_OMITTED_NAMES else ""
    return (f"> **Cut to fit GitHub's comment limit:** the diffs of {_count(len(left), 'file')} "
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
        parts.append(f"<details><summary>{attribute(label)}: {_count(total, 'file')} changed</summary>\n\n")
        parts += [f"{code(f'{report.out}/{o.path}')} ({o.status})\n\n{fenced(o.diff, 'diff')}\n" for o in mine]
        parts.append("</details>\n\n")
    parts.append(_cut_note(report, left))
    return "".join(parts).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- commit message
def commit_message(report: Report, policies: Sequence[str] = (), held: Sequence[str] | None = None) -> str:
    """``fleetc: compile policies (2 stages moved, +8 a100)`` plus a body with the details;
    with ``policies`` (the changed policy files committed with the output) the subject says
    both: ``fleetc: commit 1 policy file and out/ compiled from it (...)``. ``held``: the status
    letter (``A``, ``M``, ``D``) of each file of the output folder the commit holds, as git
    staged it, counted in the body (None: the report's files are counted)."""
    facts = []
    if report.moved:
        facts.append(f"{_count(len(report.moved), 'stage')} moved")
    added = [m for m in report.moves if not m.before and m.after]
    removed = [m for m in report.moves if m.before and not m.after]
    if added:
        facts.append(f"{_count(len(added), 'stage')} added")
    if removed:
        facts.append(f"{_count(len(removed), 'stage')} removed")
    facts += [f"{a - b:+d} {t}" for t, (b, a) in report.gpu_totals.items() if a != b]
    if not facts:
        facts.append(f"{_count(len(report.objects), 'file')} changed")
    body = [f"{m.stage}: {', '.join(m.before) or '(none)'} -> {', '.join(m.after) or '(none)'}"
            for m in report.moves]
    body += [f"GPUs {t}: {b} -> {a}" for t, (b, a) in report.gpu_totals.items() if a != b]
    if held is None:
        counts = {s: sum(o.status == s for o in report.objects) for s in ("added", "changed", "removed")}
    else:
        counts = {word: sum(status == letter for status in held)
                  for letter, word in (("A", "added"), ("M", "changed"), ("D", "removed"))}
    body.append(", ".join(f"{n} {s}" for s, n in counts.items()) + f" in {report.out}/")
    if policies:
        body += ["", "Policies committed with it:", *(f"  {p}" for p in policies)]
        them = "it" if len(policies) == 1 else "them"
        subject = f"fleetc: commit {_count(len(policies), 'policy file')} and {report.out}/ compiled from {them}"
    else:
        subject = "fleetc: compile policies"
    return f"{subject} ({', '.join(facts)})\n\n" + "\n".join(body) + "\n"


# --------------------------------------------------------------------------- GitHub Actions
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
    return f"### fleetc: {_count(len(diagnostics) or 1, 'error')}\n\n```text\n" + "\n".join(body) + "\n```\n\n"


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")
