"""Why a stage went where it went: every cluster's filter verdict or score terms, as data.

:func:`explain` is pure: it reads the model, the placement and the score matrix and returns an
:class:`Explanation`; the CLI formats it as text or JSON (:func:`as_dict`, :func:`format_text`).
Each term is shown with its weight (normalised so the weights sum to 1) and the weighted value;
the weighted values, less the GPU type preference penalty of a stage listing alternatives
(:data:`fleetc.placement.scoring.PREFERENCE_PENALTY` per rank), add up to the cluster's total
score, the number the optimizer maximises (before class weights, capacity and the move cost
decide between stages). For such a stage it also says which alternative it got and why no
earlier one (:mod:`fleetc.placement.alternatives`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np

from fleetc.errors import UsageError, did_you_mean
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage
from fleetc.placement import rules
from fleetc.placement.alternatives import choices
from fleetc.placement.rules import on_cluster
from fleetc.placement.scoring import PREFERENCE_PENALTY, score_matrix
from fleetc.placement.verify import verify

TERMS = ("compute", "cost", "network", "energy")


@dataclass(frozen=True)
class Term:
    name: str
    value: float  # in [0, 1]
    weight: float  # normalised: the four weights sum to 1
    weighted: float  # value * weight


@dataclass(frozen=True)
class ClusterVerdict:
    cluster: str
    allowed: bool
    reason: str  # why not allowed ('' when allowed)
    terms: tuple[Term, ...]  # empty when not allowed
    total: float  # the weighted sum less the preference (0 when not allowed)
    replicas: int  # replicas the placement put here
    #: The GPU type preference penalty here (0 on the stage's first choice; :mod:`scoring`).
    preference: float = 0.0
    gpu_type: str | None = None  # the cluster's GPU type


@dataclass(frozen=True)
class Explanation:
    stage: str
    clusters: tuple[ClusterVerdict, ...]  # in fleet order (by name)
    chosen: tuple[str, ...]  # clusters with replicas, by name
    runner_up: str | None  # the best-scoring allowed cluster not chosen
    margin: float | None  # the placement's score minus the runner-up's total
    unplaced: str  # why the stage is not placed ('' when it is)
    #: When the runner-up scores higher (a negative margin), why it did not get the stage.
    runner_up_lost: str = ""
    #: Where a taint keeps the stage off a cluster: the toleration that would admit it.
    hints: tuple[str, ...] = ()
    #: For a stage not placed: the smallest change that places it (:mod:`fleetc.placement.fixes`).
    fix: str = ""
    #: For a stage listing GPU alternatives: the ones it got and why no earlier one.
    gpu_choice: str = ""
    #: The team quotas and cost caps over the stage, each with what the placement uses of it,
    #: and whether it binds (:func:`cap_lines`).
    caps: tuple[str, ...] = ()


def find_stage(model: FleetModel, target: str) -> str:
    """The key of the stage ``target`` (``PIPELINE/STAGE``) names; a usage error otherwise."""
    keys = [s.key for s in model.stages]
    if target in keys:
        return target
    hint = did_you_mean(target, keys)
    raise UsageError(f"no stage '{target}' (expected PIPELINE/STAGE)" + (f"; {hint}" if hint else ""))


def explain(model: FleetModel, placement: Placement, stage_key: str,
            previous: Mapping[str, Mapping[str, int]] | None = None) -> Explanation:
    """Every cluster's verdict for ``stage_key``, the chosen clusters and the margin, and when a
    better-scoring cluster lost, why (``previous``: the placement compiled before this one)."""
    s = next(i for i, stage in enumerate(model.stages) if stage.key == stage_key)
    chosen = placement.of(stage_key)
    placed = {a.cluster: a.replicas for a in chosen.assignments}
    verdicts = _verdicts(model, s, placed)
    others = [v for v in verdicts if v.allowed and v.cluster not in placed]
    runner_up = max(others, key=lambda v: v.total) if others else None  # first of equals wins
    margin = _round(chosen.score - runner_up.total) if runner_up and placed else None
    lost = ""
    if runner_up is not None and margin is not None and margin < 0:
        weakest = min((v for v in verdicts if v.cluster in placed), key=lambda v: (v.total, v.cluster))
        lost = _why_lost(model, placement, stage_key, weakest, runner_up, previous or {})
    return Explanation(
        stage=stage_key,
        clusters=tuple(verdicts),
        chosen=tuple(sorted(placed)),
        runner_up=runner_up.cluster if runner_up else None,
        margin=margin,
        unplaced="" if placed else chosen.reason,
        runner_up_lost=lost,
        gpu_choice=choice.text if (choice := choices(model, placement).get(stage_key)) else "",
        caps=cap_lines(model, placement, stage_key, tuple(verdicts)),
    )


def _verdicts(model: FleetModel, s: int, placed: Mapping[str, int]) -> list[ClusterVerdict]:
    """Each cluster's verdict for the stage at index ``s``, with its replicas ``placed`` there."""
    scores = score_matrix(model)
    weights = model.score_weights
    raw = {name: float(getattr(weights, name)) for name in TERMS}
    weight_sum = sum(raw.values()) or 1.0
    row = scores.terms_of(s)
    penalty = scores.preference_of(s)
    verdicts = []
    for c, cluster in enumerate(model.clusters):
        allowed = bool(scores.allowed[s, c])
        terms = _terms(row, raw, weight_sum, c) if allowed else ()
        verdicts.append(ClusterVerdict(
            cluster.name, allowed, scores.reasons.get((s, c), ""), terms,
            _round(scores.total[s, c]), placed.get(cluster.name, 0), _round(penalty[c]), cluster.gpu_type,
        ))
    return verdicts


def _terms(row: Mapping[str, np.ndarray], raw: Mapping[str, float], weight_sum: float, c: int) -> tuple[Term, ...]:
    """Each score term of cluster ``c`` (``row``: term -> value per cluster), its weight
    (``raw`` over ``weight_sum``) and what it adds to the total."""
    return tuple(
        Term(name, _round(row[name][c]), _round(raw[name] / weight_sum),
             _round(row[name][c] * raw[name] / weight_sum))
        for name in TERMS
    )


def cap_lines(model: FleetModel, placement: Placement, stage_key: str,
              verdicts: tuple[ClusterVerdict, ...] = ()) -> tuple[str, ...]:
    """Each limit of each cap over the stage's pipeline (:func:`rules.caps`) with what the
    placement uses of it, and when it binds, where: ``team research's h100 quota: 16 of 16
    used (binds: keeps it off frankfurt, which scores higher: it would take 8 there, the cap
    leaves it 0)``. A
    limit binds when it leaves too little on an allowed cluster scoring higher than where the
    stage runs (any allowed cluster, for a stage not placed) for what the stage takes on a
    cluster (the one cap check, :func:`rules.cap_shortfalls`: a gang's replicas, a serving
    stage's per-cluster minimum), what the stage uses of it now given back; the best-scoring
    such cluster is named."""
    stage = model.stage(stage_key)
    found = [cap for cap in rules.caps(model) if stage.pipeline in cap.pipelines]
    if not found:
        return ()
    stages = {s.key: s for s in model.stages}
    clusters = {c.name: c for c in model.clusters}
    placed = [(stages[p.stage], clusters[a.cluster], a.replicas) for p in placement.stages if p.stage in stages
              for a in p.assignments if a.cluster in clusters]
    chosen = placement.of(stage_key)
    mine = [(clusters[a.cluster], a.replicas) for a in chosen.assignments if a.cluster in clusters]
    floor = chosen.score if mine else -1.0
    better = [clusters[v.cluster] for v in sorted(verdicts, key=lambda v: (-v.total, v.cluster))
              if v.allowed and v.total > floor + 1e-9 and v.cluster in clusters]
    lines: list[str] = []
    for cap in found:
        lines += _cap_limit_lines(model, cap, stage, placed, better, mine)
    return tuple(lines)


def _cap_limit_lines(model: FleetModel, cap: rules.Cap, stage: Stage, placed: list[tuple[Stage, Cluster, int]],
                     better: list[Cluster], mine: list[tuple[Cluster, int]]) -> list[str]:
    """The lines of :func:`cap_lines` for one ``cap``: each GPU quota, then the cost cap."""
    per_gpu = rules.slots_per_gpu(model)
    used = rules.cap_usage(model, cap, placed)
    others = rules.cap_usage(model, cap, [p for p in placed if p[0].key != stage.key])  # the stage given back
    rooms = [(c, short.room) for c in better for short in rules.cap_shortfalls(model, [(cap, others)], stage, c)]
    lines = []
    for gpu_type, quota in cap.gpu_quota:
        blocked = _first_blocked(rooms, gpu_type)
        binds = "" if blocked is None else _binds(blocked[0], mine, rules.as_gpus(blocked[1].takes, per_gpu),
                                                  rules.as_gpus(max(blocked[1].left, 0), per_gpu))
        lines.append(f"{cap.name}'s {gpu_type} quota: {rules.as_gpus(used.of(gpu_type), per_gpu)} of {quota} "
                     f"used{binds}")
    limit = cap.max_cost_micros
    if limit is not None:
        blocked = _first_blocked(rooms, None)
        binds = "" if blocked is None else _binds(
            blocked[0], mine, f"{rules.money(blocked[1].takes)}/h", f"{rules.money(max(blocked[1].left, 0))}/h")
        lines.append(f"{cap.name}'s cost cap: {rules.money(used.cost)}/h of {rules.money(limit)}/h used{binds}")
    return lines


def _first_blocked(rooms: list[tuple[Cluster, rules.CapRoom]], gpu_type: str | None
                   ) -> tuple[Cluster, rules.CapRoom] | None:
    """The first (best-scoring) cluster whose limit on ``gpu_type`` (None: the cost cap) leaves
    too little, with that room; None when none does."""
    return next(((c, room) for c, room in rooms if room.gpu_type == gpu_type), None)


def _binds(cluster: Cluster, mine: list[tuple[Cluster, int]], takes: str, left: str) -> str:
    where = "which scores higher" if mine else "which it may use"
    return f" (binds: keeps it off {cluster.name}, {where}: it would take {takes} there, the cap leaves it {left})"


def _why_lost(model: FleetModel, placement: Placement, stage_key: str, weakest: ClusterVerdict,
              runner_up: ClusterVerdict, previous: Mapping[str, Mapping[str, int]]) -> str:
    """Why the stage's replicas on ``weakest`` (its lowest-scoring chosen cluster) are not on the
    better-scoring ``runner_up``: the verifier judges the placement with them moved there.

    With room there, a replica kept where the previous placement had it earns ``move_cost``
    times the same value per replica that scores multiply (``docs/optimizer.md``): so moving
    gains nothing exactly when the score difference is at most ``move_cost``.
    """
    stage = next(s for s in model.stages if s.key == stage_key)
    assignments = {a.cluster: a.replicas for a in placement.of(stage_key).assignments}
    assignments[runner_up.cluster] = assignments.pop(weakest.cluster)
    moved = replace(placement, stages=tuple(
        replace(p, assignments=tuple(Assignment(name, n, n * on_cluster(stage, model.cluster(name)).gpus)
                                     for name, n in sorted(assignments.items())))
        if p.stage == stage_key else p
        for p in placement.stages))
    problems = verify(model, moved, allow_unplaced=True)
    if problems:
        return f"moving the stage there breaks a hard constraint ({problems[0]})"
    kept = previous.get(stage_key, {}).get(weakest.cluster, 0) > 0
    if kept and runner_up.total - weakest.total <= model.move_cost:
        return (f"it has room, but the stage was on {weakest.cluster} in the previous placement, and moving "
                f"gains {runner_up.total - weakest.total:.4f}, no more than the move cost ({model.move_cost:g})")
    gap = f"{placement.gap:.2%}" if placement.gap >= 0.00005 else "under 0.01%"
    return f"it has room, but the placement stops {gap} short of the proven bound and this stage is part of that"


def _round(value: float) -> float:
    return round(float(value), 6)


def as_dict(explanation: Explanation) -> dict[str, object]:
    """The explanation as JSON-ready data."""
    return asdict(explanation)


def format_text(explanation: Explanation) -> str:
    """One block per cluster, then the choice: what ``fleetc explain`` prints."""
    lines = [f"{explanation.stage}:"]
    for v in explanation.clusters:
        if not v.allowed:
            lines.append(f"  {v.cluster}: filtered out: {v.reason}")
            continue
        here = f" <- {v.replicas} replica{'s' if v.replicas != 1 else ''}" if v.replicas else ""
        lines.append(f"  {v.cluster}: total {v.total:.4f}{here}")
        lines += [f"    {t.name:<8} {t.value:.4f} x {t.weight:.2f} = {t.weighted:.4f}" for t in v.terms]
        if v.preference:
            rank = round(v.preference / PREFERENCE_PENALTY) + 1
            lines.append(f"    preference -{v.preference:.4f} ({v.gpu_type} is alternative {rank})")
    if explanation.chosen:
        lines.append(f"chosen: {', '.join(explanation.chosen)}")
        lines += [f"GPU type: {explanation.gpu_choice}"] if explanation.gpu_choice else []
    else:
        lines.append(f"not placed: {explanation.unplaced}")
        if explanation.fix:
            lines.append(f"fix: {explanation.fix}")
    if explanation.runner_up is not None and explanation.margin is not None:
        why = f": it scores higher; {explanation.runner_up_lost}" if explanation.runner_up_lost else ""
        lines.append(f"runner-up: {explanation.runner_up} (margin {explanation.margin:+.4f}{why})")
    elif explanation.chosen:
        lines.append("runner-up: none (every allowed cluster runs it)")
    lines += [f"cap: {line}" for line in explanation.caps]
    lines += [f"hint: {hint}" for hint in explanation.hints]
    return "\n".join(lines)
