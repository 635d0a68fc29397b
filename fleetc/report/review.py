"""What a change does to the work, for the pull-request review: per stage what runs where and
how (:class:`StageFacts`), which running Jobs it restarts, and what is dangerous about it.

Pure, like :mod:`fleetc.report.snapshot` which holds these facts in its snapshots: the facts are read
from a compile (the model, the placement) and from its rendered files. A Job's name is read
from the rendered Job, never derived here: fleetc names a Job after its spec
(:func:`fleetc.render.workloads.job_name`), so a Job renamed is a Job the engines delete and
create again, a killed and restarted run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetc.model import Cluster, FleetModel, Placement, Stage
from fleetc.placement import rules
from fleetc.placement.rules import on_cluster
from fleetc.render.common import RELEASE_ROLE, ROLE_LABEL
from fleetc.resolve import degraded_serving

if TYPE_CHECKING:  # explain is imported where a move is explained: most reports explain none
    from fleetc.placement.explain import Explanation


@dataclass(frozen=True)
class StageFacts:
    """One stage as one side of a comparison runs it."""

    type: str  # the stage type (Training, Deployment, ...)
    where: Mapping[str, int]  # cluster -> replicas; empty when not placed
    replicas: int  # asked for
    gpus: int  # per replica, as reserved where it runs
    gpu_type: str  # the GPU types of the clusters it runs on ('' for none)
    node_fit: str  # how a replica is split into pods ('' for one pod)
    image: str
    command: str
    jobs: Mapping[str, str]  # cluster -> the name of its rendered Job (gang stages)
    #: A digest of the stage as its own policy states it (resolved, without what the Fleet
    #: adds to every stage): the same on both sides when the change did not edit the stage.
    defined: str
    jurisdictions: tuple[str, ...]  # of the clusters it runs on
    source: str = ""  # its policy file and field, e.g. ``llm.yaml#spec.stages[1]``
    upstream: tuple[str, ...] = ()  # the keys of the stages it depends on
    reason: str = ""  # why it is not placed ('' when placed)


@dataclass(frozen=True)
class CapFacts:
    """A team's (or a pipeline's) GPUs and cost per hour on one side, with its limits."""

    gpus: int
    cost: float
    cap: float | None  # its hourly cost cap, None for none
    quota: tuple[str, ...] = ()  # each limit with what is used of it: ``a100 12 of 16``
    binds: tuple[str, ...] = ()  # the limits used up: nothing more of the team fits


def stage_facts(model: FleetModel, placement: Placement, files: Mapping[str, str]) -> dict[str, StageFacts]:
    """Stage key -> its facts in this compile; Jobs are read from ``files`` (:func:`rendered_jobs`)."""
    stages = {s.key: s for s in model.stages}
    clusters = {c.name: c for c in model.clusters}
    jobs = rendered_jobs(files)
    found = {}
    for p in placement.stages:
        stage = stages[p.stage]
        where = {a.cluster: a.replicas for a in p.assignments if a.replicas > 0}
        on = [on_cluster(stage, clusters[name]) for name in sorted(where) if name in clusters] or [stage]
        types = sorted({clusters[name].gpu_type or "" for name in where if name in clusters} - {""})
        found[p.stage] = StageFacts(
            type=stage.type.value, where=where, replicas=stage.replicas, gpus=on[0].gpus,
            gpu_type=", ".join(types) if on[0].gpus else "", node_fit=_node_fit(on[0]),
            image=stage.image, command=" ".join(stage.command), jobs=jobs.get(p.stage, {}),
            defined=_defined(stage),
            jurisdictions=tuple(sorted({clusters[name].jurisdiction for name in where if name in clusters})),
            source=f"{model.display(stage.source.path)}#{stage.source.field}",
            upstream=tuple(f"{stage.pipeline}/{name}" for name in stage.dependencies), reason=p.reason)
    return found


def _node_fit(stage: Stage) -> str:
    pods = stage.pods_per_replica
    return f"{pods} pods x {stage.gpus // pods} GPUs" if pods > 1 else ""


def _defined(stage: Stage) -> str:
    """The digest of :attr:`StageFacts.defined`: the resolved stage less the tolerations and
    jurisdiction the Fleet and the data's locations add to every stage."""
    own = dataclasses.replace(stage, tolerations=(), jurisdiction=None)
    return hashlib.sha256(repr(own).encode()).hexdigest()[:16]


#: fleetc renders each object alone in a file named after its kind; a Job's header carries its
#: name and the pipeline and stage labels (:mod:`fleetc.render.workloads`).
_JOB_FILE = re.compile(r"clusters/([^/]+)/workloads/job-[^/]*\.yaml")
_NAME = re.compile(r"^  name: (\S+)$", re.MULTILINE)
_LABEL = re.compile(r"^    fleetc\.dev/(pipeline|stage): (\S+)$", re.MULTILINE)
#: The label of a release Job (:mod:`fleetc.render.release`): its stage's labels, but not its run.
_RELEASE = f"\n    {ROLE_LABEL}: {RELEASE_ROLE}\n"


def rendered_jobs(files: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Stage key -> cluster -> the name of the Job (Volcano or batch/v1) rendered for it there,
    read from the Job files' headers; not a release Job, which runs no part of the stage."""
    found: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        match = _JOB_FILE.fullmatch(path)
        if match is None or not text.startswith("apiVersion: ") or "\nkind: Job\n" not in text[:200]:
            continue
        header = text.split("\nspec:", 1)[0]
        if _RELEASE in header + "\n":
            continue
        name, labels = _NAME.search(header), dict(_LABEL.findall(header))
        if name and {"pipeline", "stage"} <= set(labels):
            found.setdefault(f"{labels['pipeline']}/{labels['stage']}", {})[match.group(1)] = name.group(1)
    return found


def cap_facts(model: FleetModel, placement: Placement) -> dict[str, CapFacts]:
    """Each team (AIGCPlatform ``spec.teams``), each capped pipeline, and each pipeline in
    neither -> its GPUs, cost per hour (:func:`rules.replica_cost_micros`, the formula the caps
    count with) and the use of its limits (:func:`rules.caps_used`, as the one cap check counts it)."""
    stages = {s.key: s for s in model.stages}
    clusters = {c.name: c for c in model.clusters}
    placed = [(stages[p.stage], clusters[a.cluster], a.replicas) for p in placement.stages if p.stage in stages
              for a in p.assignments if a.cluster in clusters and a.replicas > 0]
    limits = {cap.name: (cap, used) for cap, used in rules.caps_used(model, placed)}
    per_gpu = rules.slots_per_gpu(model)
    by_pipeline: dict[str, list[tuple[Stage, Cluster, int]]] = {}
    for entry in placed:
        by_pipeline.setdefault(entry[0].pipeline, []).append(entry)
    found = {}
    for name, pipelines in _cap_groups(model):
        mine = [entry for pipeline in sorted(pipelines) for entry in by_pipeline.get(pipeline, [])]
        gpus = sum(n * on_cluster(s, c).gpus for s, c, n in mine)
        cost = sum(n * rules.replica_cost_micros(model, s, c) for s, c, n in mine) / rules.MICROS
        capped = limits.get(name)
        quota, binds = ((), ()) if capped is None else _limits_used(*capped, per_gpu)
        found[name] = CapFacts(gpus, cost, None if capped is None else capped[0].max_cost, quota, binds)
    return found


def _cap_groups(model: FleetModel) -> list[tuple[str, frozenset[str]]]:
    """Each team, each capped pipeline, then each pipeline in neither, with its pipelines."""
    groups = [(f"team {t.name}", frozenset(t.pipelines)) for t in model.teams]
    groups += [(f"pipeline {b.pipeline}", frozenset({b.pipeline})) for b in model.budgets]
    grouped = {p for _, pipelines in groups for p in pipelines}
    return groups + [(f"pipeline {name}", frozenset({name}))
                     for name in sorted({s.pipeline for s in model.stages} - grouped)]


def _limits_used(cap: rules.Cap, used: rules.CapUsage, per_gpu: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The use of each limit of ``cap`` (``used``: what the whole placement takes of it,
    :func:`rules.caps_used`), and the limits used up."""
    quota: list[str] = []
    binds: list[str] = []
    for gpu_type, limit in cap.gpu_quota:
        quota.append(f"{gpu_type} {rules.as_gpus(used.of(gpu_type), per_gpu)} of {limit}")
        if used.of(gpu_type) >= limit * per_gpu:
            binds.append(f"its {gpu_type} quota ({limit}) is used up")
    if cap.max_cost_micros is not None:
        quota.append(f"cost {rules.money(used.cost)} of {rules.money(cap.max_cost_micros)}/h")
        if used.cost >= cap.max_cost_micros:
            binds.append(f"its cost cap ({rules.money(cap.max_cost_micros)}/h) is used up")
    return tuple(quota), tuple(binds)


def short_serving(model: FleetModel, placement: Placement) -> tuple[str, ...]:
    """Why serving runs below its replicas or its HA set (:func:`fleetc.resolve.degraded_serving`),
    one message each."""
    return tuple(sorted({d.message for d in degraded_serving(model, placement)}))


#: At most this many moved stages are explained (:func:`move_reasons`); each explanation
#: scores the whole fleet once.
MAX_EXPLAINED = 20


def move_reasons(model: FleetModel, placement: Placement, before: Mapping[str, Mapping[str, int]],
                 skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """Why each stage that now runs elsewhere than in ``before`` (stage key -> cluster ->
    replicas) went there, from :func:`fleetc.placement.explain.explain`: a cluster it left no
    longer allowed (the filter's reason), or where it scores best and by how much; ``skip``:
    the stages whose reason is known otherwise."""
    from fleetc.placement.explain import explain

    moved = [p.stage for p in placement.stages if p.stage not in skip and before.get(p.stage)
             and {a.cluster for a in p.assignments if a.replicas} != {c for c, n in before[p.stage].items() if n}
             and any(a.replicas for a in p.assignments)]
    found = {}
    for key in moved[:MAX_EXPLAINED]:
        reason = _move_reason(explain(model, placement, key, before), before[key])
        if reason:
            found[key] = reason
    return found


def _move_reason(why: Explanation, before: Mapping[str, int]) -> str:
    """Why a stage left the clusters of ``before`` (cluster -> replicas) for those ``why``
    chose ('' when its explanation does not say)."""
    left = [v for v in why.clusters if before.get(v.cluster) and v.cluster not in why.chosen]
    blocked = next((v for v in left if not v.allowed), None)
    if blocked is not None:
        return f"no longer allowed on {blocked.cluster}: {blocked.reason}"
    if why.runner_up_lost:
        return f"placed on {', '.join(why.chosen)}; {why.runner_up} scores higher but {why.runner_up_lost}"
    if why.runner_up is not None and why.margin is not None:
        return (f"scores best on {', '.join(why.chosen)} now ({why.margin:+.4f} over {why.runner_up}, "
                "the next allowed cluster)")
    return ""


# --------------------------------------------------------------------------- the stage table
@dataclass(frozen=True)
class StageChange:
    """One stage whose placement, size, node fit, image, command, replicas or Job changed."""

    stage: str
    changes: tuple[tuple[str, str, str], ...]  # (what, before, after)
    reason: str


def _where(facts: StageFacts | None) -> str:
    if facts is None:
        return "(none)"
    return ", ".join(f"{c} x{n}" for c, n in sorted(facts.where.items())) or "not placed"


#: What the stage table compares, in its order: (name, how a side reads it).
_ASPECTS = (
    ("placement", _where),
    ("GPUs/replica", lambda f: "" if f is None else f"{f.gpus} {f.gpu_type}".strip()),
    ("node fit", lambda f: "" if f is None else f.node_fit or "1 pod"),
    ("replicas", lambda f: "" if f is None else str(f.replicas)),
    ("image", lambda f: "" if f is None else f.image),
    ("command", lambda f: "" if f is None else f.command),
    ("Job", lambda f: "" if f is None else ", ".join(f"{c}: {n}" for c, n in sorted(f.jobs.items()))),
)


def stage_changes(base: Mapping[str, StageFacts], head: Mapping[str, StageFacts],
                  reasons: Mapping[str, str]) -> tuple[StageChange, ...]:
    """Every stage of either side that changed, by key, each with its differing aspects and why
    (``reasons``: stage key -> a reason known from elsewhere, e.g. the gain of a move)."""
    found = {}
    for key in sorted(set(base) | set(head)):
        before, after = base.get(key), head.get(key)
        changes = tuple((name, read(before), read(after)) for name, read in _ASPECTS
                        if read(before) != read(after))
        if changes:
            found[key] = changes
    return tuple(StageChange(key, changes, _reason(key, base.get(key), head.get(key), reasons.get(key, ""), found))
                 for key, changes in found.items())


def _reason(key: str, before: StageFacts | None, after: StageFacts | None, known: str,
            changed: Mapping[str, object]) -> str:
    if before is None:
        return "new stage"
    if after is None:
        return "removed from the policies"
    if not after.where:
        return f"not placed: {after.reason}" if after.reason else "not placed"
    edited = f"its policy changed ({after.source})" if before.defined != after.defined else ""
    if known:
        return f"{edited}; {known}" if edited else known
    if edited:
        return edited
    if before.where != after.where:
        return f"placed anew (fleetc explain {key} says why)"
    upstream = [key for key in after.upstream if key in changed]
    if upstream:
        return (f"not edited; an edit outside the stage, or a new run of {', '.join(upstream)} that it waits for, "
                "changed what it runs")
    return "not edited; an edit outside the stage (Fleet, platform or data policy) changed what it runs"


# --------------------------------------------------------------------------- danger
@dataclass(frozen=True)
class Danger:
    """Something a reviewer must decide on before merging, with what to do about it."""

    kind: str  # restart | unplaced | serving | jurisdiction | namespace | quota | cost
    subject: str  # the stage, namespace, team or "fleet"
    text: str
    fix: str


@dataclass(frozen=True)
class Restart:
    """A running Job the change deletes: renamed (a new spec) or gone from its cluster."""

    stage: str
    cluster: str
    before: str  # the Job's name
    after: str  # its new name there ('' when the stage no longer runs a Job there)
    outside: bool  # the stage's own policy did not change: an edit elsewhere caused it
    moved_to: tuple[str, ...] = ()  # where the stage runs its Job now, when not on ``cluster``


def restarts(base: Mapping[str, StageFacts], head: Mapping[str, StageFacts]) -> tuple[Restart, ...]:
    """Every Job of ``base`` that ``head`` no longer renders under the same name on its cluster."""
    found = []
    for key in sorted(base):
        before, after = base[key], head.get(key)
        for cluster, name in sorted(before.jobs.items()):
            now = after.jobs.get(cluster, "") if after is not None else ""
            if now != name:
                elsewhere = tuple(sorted(set(after.jobs) - set(before.jobs))) if after is not None and not now else ()
                found.append(Restart(key, cluster, name, now,
                                     after is not None and after.defined == before.defined, elsewhere))
    return tuple(found)


#: Above this many restarted Jobs, the danger section gives one line per cause (an edit of
#: the stage itself, an edit outside it) instead of one per Job; every Job is still named in
#: the stage table and the JSON (``restarts``).
MAX_RESTART_LINES = 10
_RESTART_FIX = "merge when the run may restart (after it finished or checkpointed)"
_OUTSIDE_FIX = _RESTART_FIX + ", or keep the edit outside the stage out of this change"


def restart_dangers(found: tuple[Restart, ...]) -> list[Danger]:
    """One danger per restarted Job, or one per cause when there are more than
    :data:`MAX_RESTART_LINES`."""
    if len(found) > MAX_RESTART_LINES:
        return [_restarts_of(found, outside) for outside in (False, True) if any(r.outside == outside for r in found)]
    dangers = []
    for r in found:
        if r.after:
            what = f"Job {r.before} on {r.cluster} is replaced by {r.after}: its run is killed and starts over"
        elif r.moved_to:
            what = (f"Job {r.before} on {r.cluster} is deleted: its run is killed and starts over on "
                    f"{', '.join(r.moved_to)}")
        else:
            what = f"Job {r.before} on {r.cluster} is deleted: its run is killed"
        if r.outside:
            what += "; the stage's own policy did not change (an edit outside it caused this)"
        dangers.append(Danger("restart", r.stage, what, _OUTSIDE_FIX if r.outside else _RESTART_FIX))
    return dangers


def _restarts_of(found: tuple[Restart, ...], outside: bool) -> Danger:
    mine = [r for r in found if r.outside == outside]
    stages = sorted({r.stage for r in mine})
    named = ", ".join(stages[:5]) + (f" and {len(stages) - 5} more" if len(stages) > 5 else "")
    cause = ("their stages' own policies did not change: an edit outside them (Fleet, platform, data policy or an "
             "upstream stage) renames every one" if outside else "their stages were edited")
    return Danger("restart", f"{len(mine)} Jobs of {len(stages)} stages",
                  f"{len(mine)} running Jobs are deleted and created again ({named}); {cause}",
                  _OUTSIDE_FIX if outside else _RESTART_FIX)


def stage_dangers(base: Mapping[str, StageFacts], head: Mapping[str, StageFacts]) -> list[Danger]:
    """Stages placed before and not now, and stages that now run in another jurisdiction."""
    dangers = []
    for key in sorted(set(base) & set(head)):
        before, after = base[key], head[key]
        if before.where and not after.where:
            dangers.append(Danger("unplaced", key, f"placed on {_where(before)} before, not placed now"
                                  + (f": {after.reason}" if after.reason else ""),
                                  "free or add capacity, lower its demand, or drop it on purpose "
                                  f"(compile --allow-unplaced={key})"))
        moved = set(after.jurisdictions) - set(before.jurisdictions)
        if before.jurisdictions and after.jurisdictions and moved:
            dangers.append(Danger("jurisdiction", key,
                                  f"runs in {', '.join(after.jurisdictions)} now, in {', '.join(before.jurisdictions)} "
                                  "before", "check that its data may be processed there; pin it with its "
                                  "data's location or the cluster's jurisdiction if not"))
    return dangers


def cap_dangers(base: Mapping[str, CapFacts] | None, head: Mapping[str, CapFacts] | None) -> list[Danger]:
    """Limits the change uses up (a quota or cost cap that did not bind before)."""
    dangers = []
    for name, facts in sorted((head or {}).items()):
        was = set((base or {}).get(name, CapFacts(0, 0.0, None)).binds)
        dangers += [Danger("quota", name, f"{limit}: nothing more of it fits",
                           "raise the limit in its AIGCPlatform or AIGCPipeline, or expect the next "
                           "stage of it to be refused") for limit in facts.binds if limit not in was]
    return dangers


def serving_dangers(base: tuple[str, ...], head: tuple[str, ...]) -> list[Danger]:
    return [Danger("serving", "serving", message, "free or add capacity for it, or return its cluster to service")
            for message in head if message not in base]


def namespace_dangers(pruned: Mapping[str, tuple[str, ...]]) -> list[Danger]:
    """``pruned``: cluster -> the Namespaces removed from its rendered folder; one danger per
    cluster."""
    dangers = []
    for cluster, names in sorted(pruned.items()):
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        what = ("its Namespace leaves" if len(names) == 1 else f"{len(names)} Namespaces leave")
        dangers.append(Danger("namespace", f"{shown} on {cluster}",
                              f"{what} the cluster's rendered folder: neither engine prunes a Namespace "
                              "fleetc rendered (so the user's Secrets in it stay), but nothing of its pipelines "
                              "runs there any more, and the Namespace is left for you to delete",
                              "keep a pipeline there, or delete the Namespace by hand once nothing in it is needed"))
    return dangers


def cost_danger(before: float | None, after: float | None, limit: float) -> list[Danger]:
    """A danger when the fleet's cost per hour rises by more than ``limit`` (a fraction)."""
    if before is None or after is None or after <= before * (1 + limit) + 1e-9:
        return []
    rise = f"+{(after - before) / before:.0%}" if before else "from 0"
    return [Danger("cost", "fleet", f"cost per hour {before:,.2f} -> {after:,.2f} ({rise}, over the "
                   f"{limit:.0%} the Fleet allows without notice)",
                   "confirm the spend, or raise the Fleet's spec.review.maxCostIncreasePercent")]


_NAMESPACE_FILE = re.compile(r"clusters/([^/]+)/infra/namespace-[^/]*\.yaml")


def pruned_namespaces(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Cluster -> the Namespaces whose files ``before`` renders for it and ``after`` does not."""
    found: dict[str, list[str]] = {}
    for path in sorted(set(before) - set(after)):
        match = _NAMESPACE_FILE.fullmatch(path)
        name = _NAME.search(before[path]) if match else None
        if match and name and "\nkind: Namespace\n" in before[path][:200]:
            found.setdefault(match.group(1), []).append(name.group(1))
    return {c: tuple(names) for c, names in found.items()}
