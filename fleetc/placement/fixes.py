"""What would make it fit: the smallest change that places a stage left out, computed.

For each stage no placement took, one pass over the clusters re-checks it with the hard rules
of :mod:`fleetc.placement.rules`, beside what is placed on each cluster, under single changes:

- capacity: on each cluster the rules admit it to, the fewest GPUs (cores, memory) to add so
  that its replicas fit beside what is placed there, as the rules count usable capacity
  (utilisation and defragmentation headroom included); or a new cluster in its jurisdiction;
- one rule: on each cluster exactly one rule keeps it off (data sovereignty, the GPU type, a
  taint, a cordon) and where it fits beside what is placed, relaxing that rule places it.

A new cluster has the cores and memory a cluster gets per GPU by default, and more where the
stage needs more: the fix then names them and says they bind (``a new cluster in eu with 8
h100 and 200 cores (cores bind: 16 per GPU is not enough)``); the verifier checks the stage on
it beside the placement now.

A serving stage's replicas go on its whole HA set (``multiCluster``), its minimum on each; a
cluster of that set no change admits makes the HA set the rule that binds. A change that would
leave a platform short of its failover headroom (:func:`rules.failover_shortfalls`) is not
offered. None of this solves: one pass over the clusters per stage.

When two or more stages left out ask for one GPU type in one jurisdiction, one more line gives
the smallest change that places them together, found by re-solving the part of the fleet it
touches with it (one cluster grown in GPUs, or a new cluster, sized by bisection;
:func:`_joint_fixes`, :class:`fleetc.placement.local.Checker`): the stages' own fixes do not
add up, since together they may need more than the sum (node packing beside what is placed) or
less (a placed stage moves to the new cluster and frees room). The re-solves of one call share
a budget of stage-cluster pairs (:data:`fleetc.placement.local.JOINT_BUDGET_PAIRS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from fleetc.model import (
    CORES_PER_GPU,
    MEMORY_PER_GPU,
    Assignment,
    Cluster,
    FleetModel,
    Placement,
    Stage,
    StagePlacement,
)
from fleetc.placement import local, rules
from fleetc.policy.quantity import GIB

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
    by_name = {c.name: c for c in model.clusters}
    on: dict[str, list[tuple[Stage, int]]] = {c.name: [] for c in model.clusters}
    for key, clusters in sorted(placed.items()):
        for name, replicas in sorted(clusters.items()):
            if key in stages and name in on and replicas > 0:
                on[name].append((rules.on_cluster(stages[key], by_name[name]), replicas))
    used = {name: rules.usage(model, there) for name, there in on.items()}
    checks = local.NewCluster(model, _placement(model, _placed(on)))
    capped = rules.caps_used(model, ((s, by_name[name], n) for name, there in on.items() for s, n in there))
    checker = local.Checker(model, placed)
    left_out = [s for s in model.stages if s.key in wanted]
    found = [Fix(s.key, f"{s.key}: {_fix(model, s, on, used, capped, checks, checker.may_run(s))}")
             for s in left_out]
    return found + _joint_fixes(model, checker, on, left_out)


def _joint_fixes(model: FleetModel, checker: local.Checker, on: Mapping[str, list[tuple[Stage, int]]],
                 left_out: list[Stage]) -> list[Fix]:
    """For each jurisdiction and GPU type that two or more stages left out ask for (and no HA
    set ties to clusters of their own), the smallest new cluster there that places them all
    together, found by re-solving: the optimizer places the part of the fleet the cluster
    touches with it added (sticky to the placement now, :class:`local.Checker`), and the fewest
    GPUs (a bisection between the largest stage's own new cluster and one for them all) with
    which every stage placed now stays placed and each of them is placed too. Cores and memory
    follow :func:`_sized` (named where they bind). A group whose part is larger than
    :data:`local.JOINT_COMPONENT_PAIRS`, or met when the re-solves so far took more than
    :data:`local.JOINT_BUDGET_PAIRS`, is not re-solved."""
    groups: dict[tuple[str, str], list[Stage]] = {}
    for stage in left_out:
        first = _first_type(stage)
        if stage.gpus and first and not rules.ha_clusters(model, stage):
            groups.setdefault((stage.jurisdiction or "", first), []).append(stage)
    joint = []
    for (jurisdiction, gpu_type), stages in sorted(groups.items()):
        if len(stages) < 2:
            continue
        keys = ", ".join(s.key for s in stages)
        refused = _not_re_solved(model, checker, stages, jurisdiction or None, gpu_type)
        if refused:
            joint.append(Fix(keys, f"{keys} together: not re-solved: {refused}"))
            continue
        grow = [f"{gpus} {gpu_type} to {name}" for name, gpus in _joint_growth(model, checker, on, stages, gpu_type)]
        new = _joint_cluster(model, checker, stages, jurisdiction or None, gpu_type)
        if new is not None:
            where, why = _described(new, jurisdiction or None)
            grow.append(f"a new cluster{where}{f' ({why})' if why else ''}")
        text = (f"add {', or '.join(grow)} (re-solved: {'it places' if len(grow) == 1 else 'each places'} them all)"
                if grow else "no cluster grown in GPUs and no new cluster places them all (re-solved)")
        joint.append(Fix(keys, f"{keys} together: {text}"))
    return joint


def _not_re_solved(model: FleetModel, checker: local.Checker, stages: list[Stage], jurisdiction: str | None,
                   gpu_type: str) -> str:
    """Why the joint fix of ``stages`` is not re-solved ('' when it is): the part of the fleet a
    new cluster for them touches is too large, for one re-solve or for :data:`local.JOINT_SOLVES`
    of them within the whole budget, or the re-solves so far left the budget too little for them.
    The part is measured with a new cluster of all but unbounded capacity, which admits every
    stage any of their candidates could."""
    fresh = _fresh(model, jurisdiction, gpu_type)
    unbounded = replace(fresh, gpus=10**6, cpu_millis=10**12, memory_bytes=10**18, cpu_per_node=None,
                        memory_per_node=None)
    part, _ = checker.component(stages, unbounded)
    pairs = len(part.stages) * len(part.clusters)
    if pairs > local.JOINT_COMPONENT_PAIRS:
        return (f"the stages and clusters they compete for make {pairs} stage-cluster pairs, more than the "
                f"{local.JOINT_COMPONENT_PAIRS} fleetc re-solves for a joint fix")
    if local.JOINT_SOLVES * pairs > checker.budget:  # too large for the budget, whatever came before
        return (f"the stages and clusters they compete for make {pairs} stage-cluster pairs: the "
                f"{local.JOINT_SOLVES} re-solves of a joint fix would take {local.JOINT_SOLVES * pairs}, more than "
                f"the {checker.budget} fleetc re-solves for the joint fixes of one compile")
    if checker.spent + local.JOINT_SOLVES * pairs > checker.budget:
        return (f"the joint fixes above left too little of the {checker.budget} stage-cluster pairs fleetc "
                f"re-solves for the joint fixes of one compile")
    return ""


def _joint_growth(model: FleetModel, checker: local.Checker, on: Mapping[str, list[tuple[Stage, int]]],
                  stages: list[Stage], gpu_type: str) -> list[tuple[str, int]]:
    """The fewest GPUs to add to one cluster that takes every one of ``stages`` (of their GPU
    type, in their jurisdiction: no rule keeps any off it) for the re-solved fleet to place them
    all; the best cluster, and those that need as few. Of the clusters that take them, the
    :data:`_NAMED` with the most usable GPUs free are tried (each takes a few solves; after the
    first that places them, the others only up to its GPUs: more capacity never places less)."""
    fresh = _fresh(model, None, gpu_type)
    together = _sized(model, fresh, [(rules.on_cluster(s, fresh), s.replicas) for s in stages])
    if together is None:
        return []
    admitting = [c for c in checker.may_run(stages[0])
                 if c.gpus and all(c.name in checker.may_run_on(s) for s in stages)]
    free = {c.name: rules.usable_capacity(model, c)[0] - rules.taken(model, c, rules.usage(model, on[c.name]))[0]
            for c in admitting}
    found: list[tuple[int, str]] = []
    for cluster in sorted(admitting, key=lambda c: (-free[c.name], c.name))[:_NAMED]:
        most = together.gpus  # to add: with utilisation and headroom, what gives that many usable GPUs
        usable = rules.usable_capacity(model, cluster)[0]
        while rules.usable_capacity(model, replace(cluster, gpus=cluster.gpus + most))[0] - usable < together.gpus:
            most += together.gpus
            if most > 100 * together.gpus:
                break

        def places_all(n: int, cluster: Cluster = cluster) -> bool:
            return checker.places_all(stages, replace(cluster, gpus=cluster.gpus + n))

        most = min([most, *(gpus for gpus, _ in found)])
        if places_all(most):
            found.append((_least(1, most, places_all), cluster.name))
    found.sort()
    return [(name, gpus) for gpus, name in found if gpus == found[0][0]][:_NAMED]


def _joint_cluster(model: FleetModel, checker: local.Checker, stages: list[Stage], jurisdiction: str | None,
                   gpu_type: str) -> Cluster | None:
    """The smallest new cluster the re-solved fleet places ``stages`` on (with everything placed
    now): the fewest GPUs with the cores and memory they all need, then the fewest cores, then
    the least memory (whole cores and GiB, never below the default per GPU)."""
    empty = _fresh(model, jurisdiction, gpu_type)
    alone = [_sized(model, empty, [(s, s.replicas)]) for s in stages]
    together = _sized(model, empty, [(s, s.replicas) for s in stages])
    if together is None or any(a is None for a in alone):
        return None

    def places_all(new: Cluster) -> bool:
        return checker.places_all(stages, new)

    if not places_all(together):
        return None
    gpus = _least(max(a.gpus for a in alone if a is not None), together.gpus,
                  lambda n: places_all(_with_gpus(together, n, together.cpu_millis, together.memory_bytes)))
    new = _with_gpus(together, gpus, together.cpu_millis, together.memory_bytes)
    cores = _least(gpus * CORES_PER_GPU, new.cpu_millis // 1000,
                   lambda n: places_all(replace(new, cpu_millis=n * 1000)))
    new = replace(new, cpu_millis=cores * 1000)
    gib = _least(gpus * MEMORY_PER_GPU // GIB, new.memory_bytes // GIB,
                 lambda n: places_all(replace(new, memory_bytes=n * GIB)))
    return replace(new, memory_bytes=gib * GIB)


def _least(low: int, high: int, holds: Callable[[int], bool]) -> int:
    """The least n in [low, high] for which ``holds`` (true at ``high``, and for all n above the
    least: more capacity never places less), by bisection."""
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _fix(model: FleetModel, stage: Stage, on: Mapping[str, list[tuple[Stage, int]]],
         used: Mapping[str, rules.Usage], capped: list[tuple[rules.Cap, rules.CapUsage]],
         checks: local.NewCluster, admitting: tuple[Cluster, ...]) -> str:
    """The fix line of ``stage``, left out; ``admitting``: the clusters of the fleet it may run on."""
    clusters = {c.name: c for c in model.clusters}
    ha = rules.ha_clusters(model, stage)
    minimum = rules.min_replicas_per_cluster(stage)
    binding = _ha_binding(model, stage, ha, minimum, clusters)
    if binding:
        return binding
    options = []
    capacity = _capacity_option(model, stage, ha, minimum, clusters, on, used, checks, admitting)
    cap = _cap_binding(model, stage, capped, admitting)
    if cap:
        return cap if capacity.startswith("it fits") or not capacity else f"{cap}, and {capacity}"
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


def _cap_binding(model: FleetModel, stage: Stage, used: list[tuple[rules.Cap, rules.CapUsage]],
                 admitting: tuple[Cluster, ...]) -> str:
    """A team quota or cost cap as the binding rule: on every cluster the rules admit the stage
    to, a cap over its pipeline leaves too little for it (its replicas, or a serving stage's
    minimum); the smallest raise that admits it somewhere (``raise team research's h100 quota
    by 8 (policies/platform.yaml spec.teams[0].gpuQuota)``). '' when some cluster is within
    every cap. A stage the HA set places (:func:`rules.ha_clusters`) must serve on each of its
    clusters, so there a cap binds when it leaves any of them too little. ``used``: each cap
    with what the placement takes of it (:func:`rules.caps_used`), read once for every stage;
    ``admitting``: the clusters the rules admit the stage to."""
    used = [(cap, usage) for cap, usage in used if stage.pipeline in cap.pipelines]  # the others never bind
    if not used:
        return ""
    clusters = {c.name: c for c in model.clusters}
    per_gpu = rules.slots_per_gpu(model)
    ha = [clusters[name] for name in rules.ha_clusters(model, stage) if name in clusters]
    raises: list[tuple[int, int, int, str]] = []  # (limits raised, GPUs, cost micros, what)
    for cluster in [c for c in ha if c.name in {a.name for a in admitting}] if ha else admitting:
        short = [_cap_raise(model, found, per_gpu) for found in rules.cap_shortfalls(model, used, stage, cluster)]
        if short:
            raises.append(_raises_together(short, f" (for {cluster.name})" if ha else ""))
        elif not ha:
            return ""
    if not raises:
        return ""
    return "a cap binds: " + (" and ".join(text for *_, text in raises) if ha else min(raises)[3])


def _cap_raise(model: FleetModel, found: rules.CapShortfall, per_gpu: int) -> tuple[int, int, str]:
    """The raise of one cap that leaves a stage too little: (GPUs, cost micros, what)."""
    cap, room = found.cap, found.room
    if room.gpu_type is not None:
        gpus = -(-room.short // per_gpu)
        return (gpus, 0, f"raise {cap.name}'s {room.gpu_type} quota by {gpus} "
                         f"({model.display(cap.path)} {cap.field}.gpuQuota)")
    return (0, room.short, f"raise {cap.name}'s cost cap by {rules.money(room.short)}/h "
                           f"({model.display(cap.path)} {cap.cost_field})")


def _raises_together(short: list[tuple[int, int, str]], suffix: str) -> tuple[int, int, int, str]:
    """The cap raises one cluster needs, as one: (limits raised, GPUs, cost micros, what)."""
    return (len(short), sum(g for g, _, _ in short), sum(m for _, m, _ in short),
            " and ".join(text for _, _, text in short) + suffix)


def _candidates(stage: Stage, ha: tuple[str, ...], minimum: int, where: str) -> dict[str, int]:
    """Replicas per cluster when the stage's replicas the HA set does not need go on ``where``."""
    spread = {name: minimum for name in ha}
    spread[where] = spread.get(where, 0) + stage.replicas - minimum * len(ha)
    return spread


def _capacity_option(model: FleetModel, stage: Stage, ha: tuple[str, ...], minimum: int,
                     clusters: Mapping[str, Cluster], on: Mapping[str, list[tuple[Stage, int]]],
                     used: Mapping[str, rules.Usage], checks: local.NewCluster, admitting: tuple[Cluster, ...]) -> str:
    """The fewest resources to add on one cluster the rules admit the stage to (``admitting``;
    GPUs first), and a new cluster in its jurisdiction when the stage may run off its HA set."""
    best: tuple[tuple[int, ...], str, dict[str, tuple[int, int, int]]] | None = None
    for cluster in admitting:
        adds: dict[str, tuple[int, int, int]] = {}
        for name, replicas in _candidates(stage, ha, minimum, cluster.name).items():
            there = used[name] + rules.replica_usage(model, rules.on_cluster(stage, clusters[name]), replicas)
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
    new = _new_cluster(model, stage, checks) if not ha else ""
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
        after[name] = after[name] + rules.replica_usage(model, rules.on_cluster(stage, model.cluster(name)), replicas)
    for _, members, serving in rules.failover_groups(model):
        if not set(members) & set(spread):
            continue
        serving_on = {name: rules.usage(model, [(rules.on_cluster(stage, model.cluster(name)), n)]
                                        if stage.key in serving else [])
                      for name, n in spread.items()}
        for lost in members:
            need = serving_on.get(lost, rules.Usage()) + rules.usage(
                model, [(s, n) for s, n in on[lost] if s.key in serving])
            others = [(grown.get(o) or model.cluster(o), after[o]) for o in members if o != lost]
            if rules.failover_shortfalls(model, (grown.get(lost) or model.cluster(lost), need), others):
                return False
    return True


def _new_cluster(model: FleetModel, stage: Stage, checks: local.NewCluster) -> str:
    """`` in eu with 16 h100``: the fewest GPUs a new cluster (nothing used, no taints) needs to
    run all the stage's replicas, as the rules count its usable GPUs, and the cores or memory
    beyond what a cluster has per GPU by default where those bind (`` with 8 h100 and 200 cores
    (cores bind: ...)``); checked by the verifier with the stage there beside the placement
    now; '' without GPUs, when no GPU policy headroom leaves room, or when the verifier refuses."""
    if not stage.gpus or not model.clusters:
        return ""
    fresh = _fresh(model, stage.jurisdiction, _first_type(stage))
    new = _sized(model, fresh, [(rules.on_cluster(stage, fresh), stage.replicas)])
    if new is None:
        return ""
    if not checks.accepts(stage, new):
        return ""
    where, why = _described(new, stage.jurisdiction)
    return f"{where} ({why})" if why else where


def _first_type(stage: Stage) -> str | None:
    """The GPU type a new cluster for ``stage`` has: its first choice (None: any type)."""
    if stage.gpu_types:
        return stage.gpu_types[0]
    return stage.gpu_options[0].gpu_type if stage.gpu_options else None  # asking for throughput: the fastest


def _fresh(model: FleetModel, jurisdiction: str | None, gpu_type: str | None) -> Cluster:
    """An empty cluster (no GPUs yet) in ``jurisdiction``, named apart from the fleet's."""
    names = {c.name for c in model.clusters}
    name = next(f"new-cluster-{i}" for i in range(len(names) + 1) if f"new-cluster-{i}" not in names)
    template = model.clusters[0]
    return replace(template, name=name, jurisdiction=jurisdiction or template.jurisdiction,
                   gpu_type=gpu_type or template.gpu_type, gpus=0, cpu_millis=0, memory_bytes=0, utilization=0.0,
                   taints=(), cordoned=False, drained=False)


def _sized(model: FleetModel, empty: Cluster, placed: Iterable[tuple[Stage, int]]) -> Cluster | None:
    """``empty`` with the fewest GPUs for ``placed`` to fit, and the cores and memory a cluster
    has per GPU by default (:data:`fleetc.model.CORES_PER_GPU`), more (in whole cores and GiB) where
    ``placed`` needs more; None when headroom leaves no room."""
    placed = list(placed)
    used = rules.usage(model, placed)
    need = rules.taken(model, replace(empty, gpus=1), used)
    gpus = need[0]
    while rules.usable_capacity(model, replace(empty, gpus=gpus))[0] < need[0]:
        gpus += 1
        if gpus > 100 * max(need[0], 1):
            return None
    while gpus <= 100 * max(need[0], 1):
        # each node's share of the cores and memory holds the largest pod, and the pods pack
        # onto the nodes (fleetc.nodefit): else one GPU more
        nodes = max(1, gpus // max(empty.gpus_per_node, 1))
        pods = [rules.pod_of(rules.on_cluster(stage, replace(empty, gpus=gpus))) for stage, _ in placed]
        millis = max([need[1], *(nodes * pod.millis for pod in pods)])
        memory = max([need[2], *(nodes * pod.memory for pod in pods)])
        sized = _with_gpus(empty, gpus, millis, memory)
        if not rules.unpacked(model, sized, [(rules.on_cluster(stage, sized), n) for stage, n in placed]):
            return sized
        gpus += 1
    return None


def _with_gpus(empty: Cluster, gpus: int, millis: int, memory: int) -> Cluster:
    """``empty`` with ``gpus`` GPUs and the default cores and memory for them, or ``millis`` and
    ``memory`` (rounded up to whole cores and GiB) where more, shared equally by its nodes."""
    return replace(empty, gpus=gpus, cpu_millis=max(gpus * CORES_PER_GPU * 1000, -(-millis // 1000) * 1000),
                   memory_bytes=max(gpus * MEMORY_PER_GPU, -(-memory // GIB) * GIB),
                   cpu_per_node=None, memory_per_node=None)


def _described(new: Cluster, jurisdiction: str | None) -> tuple[str, str]:
    """(`` in eu with 8 h100 and 200 cores``, ``cores bind: 16 per GPU is not enough``): the
    cluster, naming the cores or memory beyond the default per GPU, and which of them bind."""
    parts = [f"{new.gpus} {new.gpu_type or 'GPUs'}"]
    binding = []
    if new.cpu_millis > new.gpus * CORES_PER_GPU * 1000:
        parts.append(f"{new.cpu_millis // 1000} cores")
        binding.append(f"cores bind: {CORES_PER_GPU} per GPU")
    if new.memory_bytes > new.gpus * MEMORY_PER_GPU:
        parts.append(f"{new.memory_bytes // GIB}Gi memory")
        binding.append(f"memory binds: {MEMORY_PER_GPU // GIB}Gi per GPU")
    what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    why = f"{' and '.join(binding)} {'is' if len(binding) == 1 else 'are'} not enough" if binding else ""
    return f"{f' in {jurisdiction}' if jurisdiction else ''} with {what}", why


def _placed(on: Mapping[str, list[tuple[Stage, int]]]) -> dict[str, dict[str, int]]:
    """Stage key -> cluster -> replicas, from ``on`` (cluster -> what is placed there)."""
    placed: dict[str, dict[str, int]] = {}
    for cluster, there in on.items():
        for stage, replicas in there:
            placed.setdefault(stage.key, {})[cluster] = replicas
    return placed


def _placement(model: FleetModel, placed: Mapping[str, Mapping[str, int]]) -> Placement:
    clusters = {c.name: c for c in model.clusters}
    return Placement(stages=tuple(StagePlacement(s.key, tuple(
        Assignment(c, n, n * (rules.on_cluster(s, clusters[c]).gpus if c in clusters else s.gpus))
        for c, n in sorted(placed.get(s.key, {}).items())), 0.0)
        for s in model.stages), objective=0.0, bound=0.0, method="milp")


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
    replicas = rules.min_replicas_per_cluster(stage) if ha else stage.replicas
    for cluster in [c for c in model.clusters if c.name in ha] if ha else model.clusters:
        rule = _single_rule(stage, cluster)
        if not rule:
            continue
        there = used[cluster.name] + rules.replica_usage(model, rules.on_cluster(stage, cluster), replicas)
        if not rules.overuse(model, cluster, there):
            admits.setdefault(rule, []).append(cluster.name)
    return [f"{rule} (it fits on {_names(names)})" for rule, names in sorted(admits.items(), key=_rule_order)]


def _single_rule(stage: Stage, cluster: Cluster) -> str:
    """The one rule that keeps ``stage`` off ``cluster``, worded as its relaxation; '' when none
    or more than one does (none is worded before it is known to be the one)."""
    if rules.lacks_gpus(stage, cluster):
        return ""
    outside = rules.outside_jurisdiction(stage, cluster)
    other_type = rules.lacks_gpu_type(stage, cluster)
    taints = rules.repelling_taints(stage, cluster)
    if cluster.cordoned + outside + other_type + len(taints) != 1:
        return ""
    if cluster.cordoned:
        return f"stop draining {cluster.name}" if cluster.drained else f"uncordon {cluster.name}"
    if outside:
        return f"allow {stage.key} outside {stage.jurisdiction}"
    if other_type:
        return (f"ask for {cluster.gpu_type} instead of {stage.gpu_types[0]} (gpuType)"
                if len(stage.gpu_types) == 1 else f"add {cluster.gpu_type} to its gpuType alternatives")
    taint = taints[0]
    return f"tolerate the taint {taint.key}={taint.value}:{taint.effect}"


def _rule_order(item: tuple[str, list[str]]) -> tuple[int, str]:
    rule = item[0]
    order = ("allow ", "ask for ", "tolerate ", "uncordon ", "stop draining ")
    return next(i for i, start in enumerate(order) if rule.startswith(start)), rule


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")
