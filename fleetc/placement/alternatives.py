"""Which of its GPU types a stage got, and why not an earlier one (``gpuType: [h100, a100]``),
or, asking for throughput, why not another (8 a100 or 4 h100).

A stage that lists GPU types in order of preference runs on clusters of one or more of them (a
gang on one cluster, so on one type). :func:`choices` says, for every placed stage that lists
two or more, which types it runs on, which alternative (1 = its first choice) the least
preferred of them is, and for each earlier type why the replicas on that least preferred
cluster are not there: no cluster of that type may run the stage (the filters' reasons,
:func:`fleetc.placement.scoring.filter_reason`), none has room beside what is placed (the
rules' capacity count, :class:`fleetc.placement.rules.Ledger`), one has room and the stage
scores less there, the preference penalty counted (:mod:`fleetc.placement.scoring`), or the
replicas there are those a platform's ``multiCluster`` set asks of that cluster (the rule, not a
score, decided). An earlier type the stage runs on too is "taken, not for every replica".
``placement.yaml``, ``fleetc explain`` and the diff show it. Pure: model and placement in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fleetc.model import Cluster, FleetModel, Placement, Stage
from fleetc.placement import rules
from fleetc.placement.scoring import filter_reason, stage_totals

#: How many clusters one reason names before "and N more".
_NAMED = 3


@dataclass(frozen=True)
class Passed:
    """An earlier alternative the stage (or part of it) does not run on, and why."""

    gpu_type: str
    why: str


@dataclass(frozen=True)
class Choice:
    """The GPU types a stage runs on (in the order of ``listed``), which alternative the least
    preferred of them is (1-based; 0 when the types are not ordered: a stage asking for
    throughput without ``gpuType`` may run on any type the Fleet states a throughput for), the
    other types passed over (the earlier ones when ordered), and for a stage asking for
    throughput its GPUs per replica on each listed type."""

    listed: tuple[str, ...]
    chosen: tuple[str, ...]
    alternative: int
    passed: tuple[Passed, ...]
    per_replica: tuple[int, ...] = ()  # per listed type, for a stage asking for throughput

    @property
    def text(self) -> str:
        """``a100, alternative 2 of [h100, a100]; h100 not taken: gpu-h has no room ...``"""
        return describe(self.chosen, self.alternative, self.listed, [(p.gpu_type, p.why) for p in self.passed],
                        dict(zip(self.listed, self.per_replica, strict=False)))


def describe(chosen: Sequence[str], alternative: int, listed: Sequence[str],
             passed: Sequence[tuple[str, str]], per_replica: Mapping[str, int]) -> str:
    """One line of a :class:`Choice` (also read back from ``placement.yaml`` by the diff):
    types with their GPUs per replica (``a100 x8``) where the stage asks for throughput."""
    def named(gpu_type: str) -> str:
        return f"{gpu_type} x{per_replica[gpu_type]}" if gpu_type in per_replica else gpu_type

    which = f", alternative {alternative}" if alternative else ""
    head = f"{', '.join(map(named, chosen))}{which} of [{', '.join(map(named, listed))}]"
    def verdict(gpu_type: str) -> str:  # an earlier type it runs on too, as a rule asked
        return "taken, not for every replica" if gpu_type in chosen else "not taken"

    return "; ".join([head, *(f"{named(gpu_type)} {verdict(gpu_type)}: {why}" for gpu_type, why in passed)])


def listed_types(stage: Stage) -> tuple[str, ...]:
    """The GPU types a stage chooses between: its ``gpuType`` list, else (asking for
    throughput) the types of its options."""
    return stage.gpu_types or tuple(o.gpu_type for o in stage.gpu_options)


def choices(model: FleetModel, placement: Placement) -> dict[str, Choice]:
    """Stage key -> its :class:`Choice`, for each placed stage choosing between two GPU types
    or more (:func:`listed_types`)."""
    stages = {s.key: (i, s) for i, s in enumerate(model.stages)}
    wanted = [(stages[p.stage], p) for p in placement.stages
              if p.stage in stages and p.assignments and len(listed_types(stages[p.stage][1])) > 1
              and stages[p.stage][1].gpus > 0]
    if not wanted:
        return {}
    clusters = {c.name: c for c in model.clusters}
    ledger = rules.Ledger(model, ((stages[p.stage][1], a.cluster, a.replicas) for p in placement.stages
                                  if p.stage in stages for a in p.assignments if a.cluster in clusters))
    totals = stage_totals(model, [s for (s, _), _ in wanted])
    found = {}
    for (s, stage), stage_placement in wanted:
        here = {a.cluster: a.replicas for a in stage_placement.assignments if a.cluster in clusters}
        found[stage.key] = _choice(model, stage, here, ledger, totals[s])
    return found


def _choice(model: FleetModel, stage: Stage, here: Mapping[str, int], ledger: rules.Ledger,
            total: np.ndarray) -> Choice:
    names = {c.name: i for i, c in enumerate(model.clusters)}
    listed = listed_types(stage)
    ordered = bool(stage.gpu_types)

    def rank(name: str) -> int:
        gpu_type = model.clusters[names[name]].gpu_type
        return listed.index(gpu_type) if gpu_type in listed else len(listed)

    chosen_ranks = sorted({rank(name) for name in here})
    # the replicas on the least preferred type's lowest-scoring cluster (any type's, unordered)
    worst = max(here, key=lambda name: (rank(name) if ordered else 0, -total[names[name]], name))
    others = listed[: rank(worst)] if ordered else tuple(t for i, t in enumerate(listed) if i not in chosen_ranks)
    moved = here[worst]
    held = _held_by_multicluster(model, stage, worst, moved)
    ledger.add(stage, worst, -moved)  # the stage's replicas there, taken out to try elsewhere
    try:
        passed = tuple(Passed(t, held or _why_not(model, stage, t, worst, here, moved, ledger, total, names, ordered))
                       for t in others)
    finally:
        ledger.add(stage, worst, moved)
    per_replica = tuple(o.gpus for t in listed for o in stage.gpu_options if o.gpu_type == t)
    return Choice(listed, tuple(listed[r] for r in chosen_ranks if r < len(listed)),
                  rank(worst) + 1 if ordered else 0, passed, per_replica)


def _held_by_multicluster(model: FleetModel, stage: Stage, worst: str, replicas: int) -> str:
    """The rule that decided, where the ``replicas`` on ``worst`` are the ones ``multiCluster``
    asks for there (its per-cluster minimum on each cluster of the active-active set): no score
    moved them, so none is named. '' otherwise."""
    if worst not in rules.ha_clusters(model, stage) or replicas > rules.min_replicas_per_cluster(stage):
        return ""
    platforms = sorted(p.name for p in model.platforms if stage.pipeline in p.pipelines
                       and worst in (p.primary_cluster, *p.secondary_clusters))
    return (f"the multiCluster set of {', '.join(platforms)} serves it active-active on each of its clusters, "
            f"{worst} among them ({_count(replicas, 'replica')} there)")


def _why_not(model: FleetModel, stage: Stage, gpu_type: str, worst: str, here: Mapping[str, int], moved: int,
             ledger: rules.Ledger, total: np.ndarray, names: Mapping[str, int], ordered: bool) -> str:
    """Why the ``moved`` replicas on ``worst`` do not run on a cluster of ``gpu_type``: the
    best-scoring cluster of that type with room, else what keeps the best-scoring few off (a
    fleet of many clusters of the type is searched only as far as the first with room)."""
    of_type = sorted((c for c in model.clusters if c.gpu_type == gpu_type),
                     key=lambda c: (-total[names[c.name]], names[c.name]))
    if not of_type:
        return f"no cluster of the fleet has {gpu_type}"
    reasons: list[str] = []
    for cluster in of_type:
        filtered = filter_reason(stage, cluster)
        more = moved if here.get(cluster.name) or not rules.below_minimum(stage, moved) \
            else rules.min_replicas_per_cluster(stage)
        if not filtered and ledger.room_for(stage, cluster.name, more):
            return (f"{cluster.name} has room, but the stage scores {total[names[cluster.name]]:.4f} there against "
                    f"{total[names[worst]]:.4f} on {worst}" + (" (preference penalty counted)" if ordered else ""))
        if len(reasons) >= _NAMED:
            reasons.append("")  # counted, not worded
        elif filtered:
            reasons.append(f"{cluster.name} is filtered out ({filtered})")
        else:
            word = "more replica" if here.get(cluster.name) else "replica"
            reasons.append(f"{cluster.name} has no room for {_count(more, word)}"
                           f"{_short_of(model, stage, cluster, ledger, more)}")
    shown = "; ".join(reasons[:_NAMED])
    return shown + (f"; and {len(reasons) - _NAMED} more clusters" if len(reasons) > _NAMED else "")


def _short_of(model: FleetModel, stage: Stage, cluster: Cluster, ledger: rules.Ledger, more: int) -> str:
    """`` (would take 24 of its 16 usable GPUs)``: the first resource they overrun, or the
    failover headroom they would break."""
    more_usage = rules.replica_usage(model, rules.on_cluster(stage, cluster), more)
    over = rules.overuse(model, cluster, ledger.used[cluster.name] + more_usage)
    if not over:
        return " (the failover headroom of its platform would break)"
    what, need, have = over[0]
    return f" (would take {need} of its {have} usable {what})"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"
