"""What would make it fit: the smallest change that places a stage left out, computed.

For each stage no placement took, one pass over the clusters re-checks it with the hard rules
of :mod:`fleetc.placement.rules`, beside what is placed on each cluster, under single changes:

- capacity: on each cluster the rules admit it to, the fewest GPUs (cores, memory) to add so
  that its replicas fit beside what is placed there, as the rules count usable capacity
  (utilisation and defragmentation headroom included); or a new cluster in its jurisdiction;
- one rule: on each cluster exactly one rule keeps it off (data sovereignty, the GPU type, a
  taint, a cordon) and where it fits beside what is placed, relaxing that rule places it.

A serving stage's replicas go on its whole HA set (``multiCluster``), its minimum on each; a
cluster of that set no change admits makes the HA set the rule that binds. A change that would
leave a platform short of its failover headroom (:func:`rules.failover_shortfalls`) is not
offered. Nothing is solved: the cost is one pass over the clusters per stage, and the answer
depends on the model and the placement alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement import rules

#: Cluster fields that hold each resource of :data:`rules.RESOURCES`, and the step one unit adds.
_FIELDS = (("gpus", 1), ("cpu_millis", 1), ("memory_bytes", rules.MIB))

#: How many clusters a relaxation names before "and N more".
_NAMED = 3


@dataclass(frozen=True)
class Fix:
    """The smallest change that places ``stage``, as one line (``text``)."""

    stage: str
    text: str

    def as_dict(self) -> dict[str, str]:
        return {"stage": self.stage, "fix": self.text}


def fixes(model: FleetModel, placed: Mapping[str, Mapping[str, int]], stage_keys: Iterable[str]) -> list[Fix]:
    """The fix of each of ``stage_keys`` (in fleet order), given ``placed``: stage key ->
    cluster -> replicas of the stages that are placed."""
    wanted = set(stage_keys)
    stages = {s.key: s for s in model.stages}
    on: dict[str, list[tuple[Stage, int]]] = {c.name: [] for c in model.clusters}
    for key, clusters in sorted(placed.items()):
        for name, replicas in sorted(clusters.items()):
            if key in stages and name in on and replicas > 0:
                on[name].append((stages[key], replicas))
    used = {name: rules.usage(model, there) for name, there in on.items()}
    return [Fix(s.key, f"{s.key}: {_fix(model, s, on, used)}") for s in model.stages if s.key in wanted]


def _fix(model: FleetModel, stage: Stage, on: Mapping[str, list[tuple[Stage, int]]],
         used: Mapping[str, rules.Usage]) -> str:
    clusters = {c.name: c for c in model.clusters}
    ha = rules.ha_clusters(model, stage)
    minimum = rules.min_replicas_per_cluster(stage)
    binding = _ha_binding(model, stage, ha, minimum, clusters)
    if binding:
        return binding
    options = []
    capacity = _capacity_option(model, stage, ha, minimum, clusters, on, used)
    if capacity:
        options.append(capacity)
    options += _rule_options(model, stage, ha, used)
    if options:
        return "; or ".join(options)
    return "no single change places it: every cluster is kept off by two rules or more, or taking it would " \
           "leave a platform short of its failover headroom"


def _ha_binding(model: FleetModel, stage: Stage, ha: tuple[str, ...], minimum: int,
                clusters: Mapping[str, Cluster]) -> str:
    """The HA set as the binding rule: a cluster of it that may never run the stage, or more
    clusters than the stage has replicas for at its minimum each."""
    platform = next((p for p in model.platforms if p.primary_cluster and stage.pipeline in p.pipelines), None)
    if platform is None:
        return ""
    where = f"platform {platform.name}'s multiCluster set ({model.display(platform.source.path)})"
    kept_off = [(name, rules.exclusions(stage, clusters[name])) for name in ha if name in clusters]
    missing = [name for name in ha if name not in clusters]
    blocked = [f"{name} ({'; '.join(why)})" for name, why in kept_off if why] + [
        f"{name} (not in the fleet)" for name in missing]
    if blocked:
        return f"the HA set binds: take {', '.join(blocked)} out of {where}, or admit the stage there"
    if len(ha) * minimum > stage.replicas:
        return (f"the HA set binds: {len(ha)} clusters with at least {minimum} replicas each need "
                f"{len(ha) * minimum}, the stage has {stage.replicas}; raise its replicas or shrink {where}")
    return ""


def _candidates(stage: Stage, ha: tuple[str, ...], minimum: int, where: str) -> dict[str, int]:
    """Replicas per cluster when the stage's replicas the HA set does not need go on ``where``."""
    spread = {name: minimum for name in ha}
    spread[where] = spread.get(where, 0) + stage.replicas - minimum * len(ha)
    return spread


def _capacity_option(model: FleetModel, stage: Stage, ha: tuple[str, ...], minimum: int,
                     clusters: Mapping[str, Cluster], on: Mapping[str, list[tuple[Stage, int]]],
                     used: Mapping[str, rules.Usage]) -> str:
    """The fewest resources to add on one cluster the rules admit the stage to (GPUs first),
    and a new cluster in its jurisdiction when the stage may run off its HA set."""
    best: tuple[tuple[int, ...], str, dict[str, tuple[int, int, int]]] | None = None
    for cluster in model.clusters:
        if rules.exclusions(stage, cluster):
            continue
        adds: dict[str, tuple[int, int, int]] = {}
        for name, replicas in _candidates(stage, ha, minimum, cluster.name).items():
            there = used[name] + rules.replica_usage(model, stage, replicas)
            add = _to_add(model, clusters[name], there)
            if add is None:
                break
            if any(add):
                adds[name] = add
        else:
            grown = {name: _grown(clusters[name], add) for name, add in adds.items()}
            if not _headroom_kept(model, stage, _candidates(stage, ha, minimum, cluster.name), grown, on, used):
                continue
            if not adds:
                return f"it fits on {cluster.name} beside what is placed there now (the search stopped short)"
            rank = tuple(sum(a[r] for a in adds.values()) for r in range(3)) + (len(adds),)
            if best is None or (rank, cluster.name) < (best[0], best[1]):
                best = (rank, cluster.name, adds)
    new = _new_cluster(model, stage) if not ha else ""
    if best is None:
        return f"add a new cluster{new}" if new else ""
    parts = [f"{_amounts(clusters[name].gpu_type, add)} to {name}{_taken_by_others(model, clusters[name], used[name])}"
             for name, add in sorted(best[2].items())]
    return "add " + " and ".join(parts) + (f", or a new cluster{new}" if new else "")


def _to_add(model: FleetModel, cluster: Cluster, used: rules.Usage) -> tuple[int, int, int] | None:
    """The fewest GPUs, millicores and bytes to add to ``cluster`` for ``used`` to fit its usable
    capacity (:func:`rules.overuse`); None when adding cannot help (no GPUs of its own to grow,
    or utilisation and headroom leave nothing of what is added)."""
    add = [0, 0, 0]
    for what, need, have in rules.overuse(model, cluster, used):
        r = rules.RESOURCES.index(what)
        field, step = _FIELDS[r]
        if r == 0 and not cluster.gpus:
            return None
        share = rules.usable_capacity(model, replace(cluster, **{field: getattr(cluster, field) + 10**6 * step}))[r]
        if share - have <= 0:
            return None
        per_step = (share - have) / 10**6  # what one step adds, at most
        n = max(1, math.ceil((need - have) / per_step) - 2)
        while rules.usable_capacity(model, replace(cluster, **{field: getattr(cluster, field) + n * step}))[r] < need:
            n += 1
        while n > 1 and rules.usable_capacity(
                model, replace(cluster, **{field: getattr(cluster, field) + (n - 1) * step}))[r] >= need:
            n -= 1
        add[r] = n * step
    return add[0], add[1], add[2]


def _grown(cluster: Cluster, add: tuple[int, int, int]) -> Cluster:
    return replace(cluster, gpus=cluster.gpus + add[0], cpu_millis=cluster.cpu_millis + add[1],
                   memory_bytes=cluster.memory_bytes + add[2])


def _headroom_kept(model: FleetModel, stage: Stage, spread: Mapping[str, int], grown: Mapping[str, Cluster],
                   on: Mapping[str, list[tuple[Stage, int]]], used: Mapping[str, rules.Usage]) -> bool:
    """Whether every platform keeps its failover headroom with ``spread`` of the stage added
    (on the clusters as ``grown``)."""
    after = dict(used)
    for name, replicas in spread.items():
        after[name] = after[name] + rules.replica_usage(model, stage, replicas)
    for _, members, serving in rules.failover_groups(model):
        if not set(members) & set(spread):
            continue
        serving_on = {name: rules.usage(model, [(stage, n)] if stage.key in serving else [])
                      for name, n in spread.items()}
        for lost in members:
            need = serving_on.get(lost, rules.Usage()) + rules.usage(
                model, [(s, n) for s, n in on[lost] if s.key in serving])
            others = [(grown.get(o) or model.cluster(o), after[o]) for o in members if o != lost]
            if rules.failover_shortfalls(model, need, others):
                return False
    return True


def _new_cluster(model: FleetModel, stage: Stage) -> str:
    """`` in eu with 16 h100``: the fewest GPUs a new cluster (nothing used, no taints) needs to
    run all the stage's replicas, as the rules count its usable GPUs; '' without GPUs or
    when no GPU policy headroom leaves room."""
    if not stage.gpus or not model.clusters:
        return ""
    template = replace(model.clusters[0], gpus=0, utilization=0.0, taints=(), cordoned=False)
    need = rules.taken(model, template, rules.replica_usage(model, stage, stage.replicas))[0]
    gpus = need
    while rules.usable_capacity(model, replace(template, gpus=gpus))[0] < need:
        gpus += 1
        if gpus > 100 * need:
            return ""
    where = f" in {stage.jurisdiction}" if stage.jurisdiction else ""
    return f"{where} with {gpus} {stage.gpu_types[0] if stage.gpu_types else 'GPUs'}"


def _amounts(gpu_type: str | None, add: tuple[int, int, int]) -> str:
    gpus, millis, memory = add
    parts = [f"{gpus} {gpu_type or 'GPUs'}"] if gpus else []
    parts += [f"{millis / 1000:g} cores"] if millis else []
    parts += [f"{memory // rules.MIB / 1024:g}Gi memory"] if memory else []
    return " and ".join(parts)


def _taken_by_others(model: FleetModel, cluster: Cluster, used: rules.Usage) -> str:
    gpus = rules.taken(model, cluster, used)[0]
    usable = rules.usable_capacity(model, cluster)[0]
    return f" (other stages take {gpus} of its {usable} usable GPUs)" if gpus else ""


def _rule_options(model: FleetModel, stage: Stage, ha: tuple[str, ...],
                  used: Mapping[str, rules.Usage]) -> list[str]:
    """One option per single rule whose relaxation admits the stage to a cluster where it then
    fits beside what is placed (off its HA set only when it has none)."""
    admits: dict[str, list[str]] = {}
    for cluster in model.clusters:
        rule = _single_rule(stage, cluster)
        if not rule or (ha and cluster.name not in ha):
            continue
        there = used[cluster.name] + rules.replica_usage(model, stage, stage.replicas if not ha else
                                                         rules.min_replicas_per_cluster(stage))
        if not rules.overuse(model, cluster, there):
            admits.setdefault(rule, []).append(cluster.name)
    return [f"{rule} (it fits on {_names(names)})" for rule, names in sorted(admits.items(), key=_rule_order)]


def _single_rule(stage: Stage, cluster: Cluster) -> str:
    """The one rule that keeps ``stage`` off ``cluster``, worded as its relaxation; '' when none
    or more than one does."""
    rules_found = []
    if cluster.cordoned:
        rules_found.append(f"stop draining {cluster.name}" if cluster.drained else f"uncordon {cluster.name}")
    if rules.outside_jurisdiction(stage, cluster):
        rules_found.append(f"allow {stage.key} outside {stage.jurisdiction}")
    if rules.lacks_gpus(stage, cluster):
        return ""
    if rules.lacks_gpu_type(stage, cluster):
        rules_found.append(f"ask for {cluster.gpu_type} instead of {stage.gpu_types[0]} (gpuType)"
                           if len(stage.gpu_types) == 1 else f"add {cluster.gpu_type} to its gpuType alternatives")
    taints = rules.repelling_taints(stage, cluster)
    if len(taints) > 1:
        return ""
    rules_found += [f"tolerate the taint {t.key}={t.value}:{t.effect}" for t in taints]
    return rules_found[0] if len(rules_found) == 1 else ""


def _rule_order(item: tuple[str, list[str]]) -> tuple[int, str]:
    rule = item[0]
    order = ("allow ", "ask for ", "tolerate ", "uncordon ", "stop draining ")
    return next(i for i, start in enumerate(order) if rule.startswith(start)), rule


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")
