"""What the fixes check, read from the part of the fleet a change touches, not the whole fleet.

A fix (:mod:`fleetc.placement.fixes`) adds one cluster, or grows one, and asks whether the
placement then holds more. Only the clusters and stages near that cluster can answer differently
from the placement now, so these checks read those alone:

- :class:`NewCluster`: whether the verifier accepts the placement now with one stage more on a
  new cluster of its own (:func:`fleetc.placement.verify.verify` of the grown fleet, read as what
  the new cluster changes: the stage itself and the new cluster, the caps its pipeline is under,
  and the serving stages running short that the new cluster might take more of; the rest was
  checked once).
- :class:`Checker`: whether the fleet re-solved with a cluster added or grown places a group of
  stages left out and keeps every stage placed now placed: the optimizer places the affected
  component only (the clusters the group may run on and the cluster changed, every stage placed
  there or short that may run there, closed over the clusters those stages run on or must run on),
  sticky to the placement now, everything else stays where it is. The verifier checks the
  component, and the caps the rest shares with it are checked beside what the rest takes.
  Each check is charged its stage-cluster pairs against :data:`JOINT_BUDGET_PAIRS`. A check
  whose component cannot hold what it must place, by a count of GPUs, cores and memory
  (:func:`too_little_room`) or of what a team quota or cost cap leaves beside the rest of the
  fleet (:func:`cap_too_little`), is answered without solving: no placement the verifier
  accepts places them all, so the re-solve could not either. The count is a relaxation, so it
  changes no answer, only which checks are solved (the budget charges both alike, so which
  groups are re-solved stays as it was). Past the counts, a check whose component's program
  cannot place what it must even in its LP relaxation is answered no alike
  (:func:`_relaxation_refuses`). A check whose component's program places every stage
  at the first step of an exact solve (HiGHS direct, without cvxpy), as the verifier and the
  caps accept, is answered yes without the full re-solve (:meth:`Checker.places_all`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from fleetc.errors import InternalError, PlacementError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.placement import LARGE, rules
from fleetc.placement.verify import verify

if TYPE_CHECKING:
    from fleetc.placement.program import Program
    from fleetc.placement.scoring import Scores

#: Stage-cluster pairs all the joint fixes of one compile may re-solve together (each re-solve of
#: a component is charged its pairs): it bounds their cost whatever the fleet.
JOINT_BUDGET_PAIRS = 20_000
#: About the most re-solves the bisections of one joint fix take (three clusters grown, then a
#: new cluster's GPUs, cores and memory): a group is re-solved only when that many re-solves of
#: its part fit what is left of :data:`JOINT_BUDGET_PAIRS`.
JOINT_SOLVES = 20
#: The most stage-cluster pairs one re-solved component may have: the exact path's
#: (:data:`fleetc.placement.LARGE`), a second or less a solve.
JOINT_COMPONENT_PAIRS = LARGE


def admits(stage: Stage, cluster: Cluster) -> bool:
    """Whether no rule keeps ``stage`` off ``cluster`` (``rules.exclusions`` is empty), read
    without wording any rule (:func:`rules.excluded`)."""
    return not rules.excluded(stage, cluster)


class NewCluster:
    """Whether the verifier accepts the placement ``placed`` (stage key -> cluster -> replicas)
    with one stage more, all its replicas on a new cluster of its own: :meth:`accepts` answers as
    ``verify(grown fleet, placement with the stage there, allow_unplaced=True)`` is empty."""

    def __init__(self, model: FleetModel, placement: Placement) -> None:
        self.model = model
        self.sound = not verify(model, placement, allow_unplaced=True)
        stages = {s.key: s for s in model.stages}
        clusters = {c.name: c for c in model.clusters}
        placed = [(stages[p.stage], clusters[a.cluster], a.replicas) for p in placement.stages if p.stage in stages
                  for a in p.assignments if a.cluster in clusters]
        self.capped = [(cap, rules.cap_usage(model, cap, placed)) for cap in rules.caps(model)]
        counts: dict[str, int] = {}
        for stage, _, replicas in placed:
            counts[stage.key] = counts.get(stage.key, 0) + replicas
        #: the serving stages running short, with the replicas they have
        self.short = [(stages[key], n) for key, n in sorted(counts.items())
                      if rules.least_replicas(model, stages[key]) <= n < stages[key].replicas]

    def accepts(self, stage: Stage, new: Cluster) -> bool:
        """Whether the verifier accepts ``stage`` (placed nowhere now, not of an HA set) with all
        its replicas on ``new`` beside the placement."""
        if not self.sound:
            return False  # the verifier names what the placement breaks already
        here = rules.on_cluster(stage, new)
        alone = replace(self.model, clusters=(new,), stages=(stage,))
        assignment = Assignment(new.name, stage.replicas, stage.replicas * here.gpus)
        if verify(alone, Placement(stages=(StagePlacement(stage.key, (assignment,), 0.0),), objective=0.0,
                                   bound=0.0, method="milp"), allow_unplaced=True):
            return False  # the stage itself, the new cluster's capacity and nodes
        with_stage = self._capped([(stage, new, stage.replicas)])
        if any(rules.cap_overuse(self.model, cap, used) for cap, used in with_stage):
            return False
        return not any(self._room_for(short, n, new, [(here, stage.replicas)], with_stage) for short, n in self.short)

    def _capped(self, more: Iterable[tuple[Stage, Cluster, int]], capped: Iterable[tuple[rules.Cap, rules.CapUsage]]
                | None = None) -> list[tuple[rules.Cap, rules.CapUsage]]:
        more = list(more)
        return [(cap, _plus(used, rules.cap_usage(self.model, cap, more)))
                for cap, used in (self.capped if capped is None else capped)]

    def _room_for(self, short: Stage, placed: int, new: Cluster, there: list[tuple[Stage, int]],
                  capped: list[tuple[rules.Cap, rules.CapUsage]]) -> bool:
        """Whether ``new`` holding ``there`` has room for the per-cluster minimum of ``short``
        more (a serving stage with ``placed`` replicas, running short), within the caps: then
        the verifier refuses (:func:`rules.room_left`; every other cluster had none)."""
        more = rules.min_replicas_per_cluster(short)
        if placed + more > short.replicas or rules.excluded(short, new):
            return False
        on = [*there, (rules.on_cluster(short, new), more)]
        if rules.overuse(self.model, new, rules.usage(self.model, on)) or rules.unpacked(self.model, new, on):
            return False
        return not any(rules.cap_overuse(self.model, cap, used)
                       for cap, used in self._capped([(short, new, more)], capped))


def _plus(used: rules.CapUsage, more: rules.CapUsage) -> rules.CapUsage:
    slots = dict(used.slots)
    for gpu_type, n in more.slots:
        slots[gpu_type] = slots.get(gpu_type, 0) + n
    return rules.CapUsage(tuple(sorted(slots.items())), used.cost + more.cost)


class Checker:
    """Whether the fleet re-solved with one cluster added or grown places a group of stages
    left out and keeps every stage placed now placed (:meth:`places_all`), re-solving only the
    affected component; :meth:`component` says how large that is, :attr:`spent` what the
    re-solves took of :data:`JOINT_BUDGET_PAIRS`."""

    def __init__(self, model: FleetModel, placed: Mapping[str, Mapping[str, int]]) -> None:
        self.model = model
        self.placed = {key: {name: n for name, n in there.items() if n > 0} for key, there in placed.items()}
        self.placed = {key: there for key, there in self.placed.items() if there}
        self.spent = 0
        self.budget = JOINT_BUDGET_PAIRS
        self._stages = [(s.key, s) for s in model.stages]
        self._by_key = dict(self._stages)
        self._order = {key: i for i, (key, _) in enumerate(self._stages)}  # stage key -> its place in the fleet
        self._placed_order = {key: i for i, key in enumerate(self.placed)}
        self._clusters = {c.name: c for c in model.clusters}
        self._may_run: dict[str, tuple[Cluster, ...]] = {}  # stage key -> the clusters of the fleet it may run on
        self._admitting: dict[str, frozenset[str]] = {}  # the same, by name
        self._needs: dict[str, dict[str, tuple[int, int, int] | None]] = {}  # stage key -> cluster -> replica_need
        self._on: dict[str, set[str]] = {}  # cluster -> the keys of the stages placed there
        for key, there in self.placed.items():
            for name in there:
                self._on.setdefault(name, set()).add(key)
        counts = {key: sum(there.values()) for key, there in self.placed.items()}
        #: the stages left out or short of their replicas
        self._short = [(key, s) for key, s in self._stages if counts.get(key, 0) < s.replicas]
        self._short_on: dict[str, set[str]] | None = None  # cluster -> the keys of the short stages it admits

    def may_run(self, stage: Stage) -> tuple[Cluster, ...]:
        """The clusters of the fleet that ``stage`` may run on (:func:`admits`), in fleet order:
        the rules are read once per stage, for every fix line and check that asks."""
        found = self._may_run.get(stage.key)
        if found is None:
            found = self._may_run[stage.key] = tuple(c for c in self.model.clusters if admits(stage, c))
            self._admitting[stage.key] = frozenset(c.name for c in found)
        return found

    def may_run_on(self, stage: Stage) -> frozenset[str]:
        """The names of :meth:`may_run`."""
        self.may_run(stage)
        return self._admitting[stage.key]

    def admitting(self, stage: Stage, cluster: Cluster) -> frozenset[str]:
        """The clusters of the fleet grown by ``cluster`` that ``stage`` may run on."""
        found = self.may_run_on(stage) - {cluster.name}
        return found | {cluster.name} if admits(stage, cluster) else found

    def need(self, stage: Stage, cluster: Cluster) -> tuple[int, int, int] | None:
        """:func:`replica_need` of ``stage`` on ``cluster``, read once for a cluster of the fleet."""
        if self._clusters.get(cluster.name) is not cluster:  # added or grown: read each time
            return replica_need(self.model, stage, cluster)
        needs = self._needs.setdefault(stage.key, {})
        if cluster.name not in needs:
            needs[cluster.name] = replica_need(self.model, stage, cluster)
        return needs[cluster.name]

    def grown(self, cluster: Cluster) -> FleetModel:
        """The fleet with ``cluster`` added, or in place of its namesake."""
        clusters = tuple(cluster if c.name == cluster.name else c for c in self.model.clusters)
        if cluster.name not in {c.name for c in self.model.clusters}:
            clusters = (*clusters, cluster)
        return replace(self.model, clusters=clusters)

    def component(self, stages: Iterable[Stage], cluster: Cluster) -> tuple[FleetModel, set[str]]:
        """The part of the fleet grown by ``cluster`` that placing ``stages`` touches: its
        clusters and stages (as a model, in fleet order), and the keys of its stages."""
        grown = self.grown(cluster)
        keys = {s.key for s in stages}
        names = {cluster.name}.union(*(self.admitting(s, cluster) for s in stages))
        names, keys = self._closure(grown, names, keys, cluster)
        part = replace(grown, clusters=tuple(c for c in grown.clusters if c.name in names),
                       stages=tuple(self._by_key[key] for key in sorted(keys, key=self._order.__getitem__)))
        return part, keys

    def _short_wanting(self, names: set[str], cluster: Cluster) -> set[str]:
        """The keys of the stages left out or short that a cluster of the fleet among ``names``,
        other than ``cluster``, admits."""
        if self._short_on is None:
            self._short_on = {}
            for key, stage in self._short:
                for c in self.may_run(stage):
                    self._short_on.setdefault(c.name, set()).add(key)
        return set().union(*(self._short_on.get(n, ()) for n in names if n != cluster.name))

    def _closure(self, grown: FleetModel, names: set[str], keys: set[str],
                 cluster: Cluster) -> tuple[set[str], set[str]]:
        """``names`` (clusters, ``cluster`` among them) and ``keys`` (stages) grown until
        closed: the stages placed on the clusters or left out or short that may run there, and
        the clusters those stages are placed on or their HA set names (read once a stage)."""
        in_grown = self._clusters.keys() | {cluster.name}
        keys = keys | {key for key, stage in self._short if key not in keys and admits(stage, cluster)}
        read: set[str] = set()  # the keys whose clusters are among names
        size = (-1, -1)
        while size != (len(names), len(keys)):
            size = (len(names), len(keys))
            keys = keys.union(*(self._on.get(n, ()) for n in names))
            keys |= self._short_wanting(names, cluster)
            for key in keys - read:
                names |= {n for n in self.placed.get(key, {}) if n in in_grown}
                names |= {n for n in rules.ha_clusters(grown, self._by_key[key]) if n in in_grown}
            read |= keys
        return names, keys

    def places_all(self, stages: list[Stage], cluster: Cluster) -> bool:
        """Whether the fleet re-solved with ``cluster`` places ``stages`` and keeps every stage
        placed now placed, as the verifier accepts (the component; the caps with the rest)."""
        from fleetc.placement.optimize import place  # the solver: imported when a joint fix is asked for

        part, keys = self.component(stages, cluster)
        self.spent += len(part.stages) * len(part.clusters)
        previous = {key: self.placed[key]  # in the placement's order, as the re-solve always read it
                    for key in sorted(keys & self.placed.keys(), key=self._placed_order.__getitem__)}
        must = {s.key for s in stages} | set(previous)
        if too_little_room(part, must, self.need) or self._caps_leave_too_little(part, keys, must):
            return False  # no placement the verifier accepts places them all: nor can the re-solve
        scores, program = _sticky_program(part, previous)
        if _relaxation_refuses(program, part, must):
            return False
        if self._every_stage_placed(part, scores, program, previous, must, keys):
            return True
        try:
            solved = place(part, previous=previous, allow_unplaced=True)
        except PlacementError:  # the large path's search ran out: not shown to place them
            return False
        except InternalError:
            # The optimizer's placement broke a rule the verifier holds it to: known of the churn
            # rule when stages swap room in a cycle the put-back cannot undo (the MILP's 1e-4
            # gap lets such swaps through). Not shown to place them; the compile itself stays
            # as it was.
            return False
        done = {p.stage for p in solved.stages if p.assignments}
        if not ({s.key for s in stages} | set(previous)) <= done:
            return False
        return not self._caps_broken(part, solved, keys)

    def _every_stage_placed(self, part: FleetModel, scores: Scores, program: Program,
                            previous: Mapping[str, Mapping[str, int]], must: set[str], keys: set[str]) -> bool:
        """Whether the first step of an exact solve answers: the component's ``program`` (sticky
        to ``previous`` as the re-solve is) with every one of its stages placed has a solution
        (:func:`_every_stage_values`) that places ``must``, as the verifier accepts (nodes,
        churn rule), within the caps beside the rest of the fleet. Then the full re-solve's
        first step places every stage too (``tests/test_fixes_local.py`` holds the two
        together). False sends the check to the full re-solve: a program that cannot place
        them all, a placement the verifier or a cap refuses, or a solver that fails."""
        from fleetc.placement import program as programs  # the solver: imported when a joint fix is asked for
        from fleetc.placement.optimize import stage_placements

        try:
            values = _every_stage_values(program)
        except InternalError:  # HiGHS failed: the full re-solve answers (and says why where it fails too)
            return False
        if values is None:
            return False
        placement = Placement(stage_placements(part, programs.replicas_of(program, values), scores.total, {}),
                              objective=0.0, bound=0.0, method="milp")
        if not must <= {p.stage for p in placement.stages if p.assignments}:
            return False
        if verify(part, placement, allow_unplaced=True, previous=previous, total=scores.total):
            return False
        return not self._caps_broken(part, placement, keys)

    def _caps_leave_too_little(self, part: FleetModel, keys: set[str], must: set[str]) -> bool:
        """Whether a cap, beside what the rest of the fleet (the stages placed outside the
        component ``part`` of ``keys``) takes of it, leaves too little for the stages of
        ``must`` (:func:`cap_too_little`): then no re-solve places them all within the caps."""
        found = rules.caps(self.model)
        if not found:
            return False
        stages, clusters = self._by_key, self._clusters
        rest = [(stages[key], clusters[name], n) for key, there in self.placed.items()
                if key not in keys and key in stages for name, n in there.items() if name in clusters]
        placed = [s for s in part.stages if s.key in must]
        where = {s.key: [c for c in part.clusters if self.need(s, c) is not None] for s in placed}
        return any(cap_too_little(part, cap, rules.cap_usage(self.model, cap, rest), placed, where) for cap in found)

    def _caps_broken(self, part: FleetModel, solved: Placement, keys: set[str]) -> bool:
        """Whether the component as ``solved``, beside what the rest of the fleet takes, breaks a cap."""
        found = rules.caps(self.model)
        if not found:
            return False
        clusters = {c.name: c for c in part.clusters} | {c.name: c for c in self.model.clusters
                                                         if c.name not in {p.name for p in part.clusters}}
        stages = {s.key: s for s in self.model.stages}
        rest = [(stages[key], clusters[name], n) for key, there in self.placed.items()
                if key not in keys and key in stages for name, n in there.items() if name in clusters]
        inside = [(stages[p.stage], clusters[a.cluster], a.replicas) for p in solved.stages for a in p.assignments]
        return any(rules.cap_overuse(self.model, cap, rules.cap_usage(self.model, cap, rest + inside))
                   for cap in found)


def _sticky_program(part: FleetModel, previous: Mapping[str, Mapping[str, int]]) -> tuple[Scores, Program]:
    """The scores of the component ``part`` and its program, sticky to ``previous`` as the
    re-solve is."""
    from fleetc.placement import program as programs  # the solver: imported when a joint fix is asked for
    from fleetc.placement.problem import Part, Problem, multicluster_conflicts, previous_matrix
    from fleetc.placement.scoring import score_matrix

    scores = score_matrix(part)
    problem = Problem.of(part, scores, multicluster_conflicts(part, scores), previous_matrix(part, previous),
                         Part(np.arange(len(part.stages)), np.arange(len(part.clusters))))
    return scores, programs.build_program(problem)


def _relaxation_refuses(program: Program, part: FleetModel, must: set[str]) -> bool:
    """Whether the LP relaxation of the component's ``program`` with every stage of ``must``
    placed is infeasible: its rows hold for every placement of the component the verifier
    accepts, so none places them all, and the re-solve cannot. At 100 x 2,000 ``--platform
    --sovereignty`` (seeds 1, 2 and 4) 8 of the 9 checks the full re-solve answered were
    refuted so, in 0.01 s each against 0.07-0.87 s. A solver that fails refutes nothing."""
    from fleetc.placement import program as programs
    from fleetc.placement.problem import Budget

    lower = program.lower.copy()
    lower[program.z[[i for i, stage in enumerate(part.stages) if stage.key in must]]] = 1.0
    try:
        relaxed = programs.solve_program(replace(program, lower=lower), Budget(), require_all=False, integral=False)
    except InternalError:
        return False
    return relaxed.infeasible


def _every_stage_values(program: Program) -> np.ndarray | None:
    """A solution of ``program`` with every stage placed (HiGHS direct): its LP relaxation's
    where that is whole (a vertex of it often is, at a third of the MILP's time), else the
    MILP's (:func:`fleetc.placement.program.every_stage`); None where there is none (the LP
    proves it for the MILP)."""
    from fleetc.placement import program as programs
    from fleetc.placement.problem import Budget

    relaxed = programs.solve_program(program, Budget(), require_all=True, integral=False)
    if relaxed.infeasible:
        return None
    if relaxed.values is not None:
        whole: np.ndarray = np.rint(relaxed.values)
        lower = program.lower.copy()
        lower[program.z] = 1.0
        if np.all(np.abs(relaxed.values - whole) <= 1e-6) and programs.is_feasible(program, whole, lower):
            return whole
    return programs.every_stage(program, Budget(), programs.HighsDirect()).values


def too_little_room(part: FleetModel, keys: set[str],
                    need: Callable[[Stage, Cluster], tuple[int, int, int] | None] | None = None) -> bool:
    """Whether no placement of ``part`` that the verifier accepts places every stage of ``keys``,
    by counting: then :meth:`Checker.places_all` is False without solving.

    Sound (it never says so of a placement that exists): a placement the verifier accepts
    (:func:`fleetc.placement.verify.verify` of ``part``) puts each stage it places on clusters of
    ``part`` no rule keeps it off (``rules.exclusions`` of the stage as it runs there), at
    least ``rules.least_replicas`` replicas in all, and on each cluster no more than its usable
    GPUs, cores and memory (:func:`rules.overuse`: time-sliced slots take whole GPUs, at least
    their share ``1 / rules.slots_on`` each). So for any set ``T`` of clusters, the stages that
    may run only on ``T`` need, each, at least its least replicas times its smallest need on
    any cluster it may run on, and together no more than ``T`` has. Checked for each set of
    clusters some stage may run on, and for all of them; GPUs counted in time-sliced slots
    (``rules.slots_per_gpu`` to a GPU), so every count is a whole number. ``need``: what one
    replica takes of a cluster, as :func:`replica_need` counts it (:meth:`Checker.need` reads it
    once a pair)."""
    per_gpu = rules.slots_per_gpu(part)
    room = {c.name: _scaled(rules.usable_capacity(part, c), per_gpu) for c in part.clusters}
    needs: dict[frozenset[str], list[int]] = {}  # clusters the stages may run on -> what they need together
    for stage in part.stages:
        if stage.key not in keys:
            continue
        per_replica = {c.name: each for c in part.clusters
                       if (each := need(stage, c) if need else replica_need(part, stage, c)) is not None}
        if not per_replica:
            return True
        least = rules.least_replicas(part, stage)
        together = [least * min(each[r] for each in per_replica.values()) for r in range(3)]
        names = frozenset(per_replica)
        needs[names] = [a + b for a, b in zip(needs.get(names, [0, 0, 0]), together, strict=True)]
    for clusters in {*needs, frozenset().union(*needs)}:
        inside_need = [sum(n[r] for inside, n in needs.items() if inside <= clusters) for r in range(3)]
        if any(inside_need[r] > sum(room[name][r] for name in clusters) for r in range(3)):
            return True
    return False


def replica_need(model: FleetModel, stage: Stage, cluster: Cluster) -> tuple[int, int, int] | None:
    """What one replica of ``stage`` takes of ``cluster`` at least, as it runs there
    (:func:`_replica_need`); None where a rule keeps it off."""
    here = rules.on_cluster(stage, cluster)
    if not admits(here, cluster):
        return None
    return _replica_need(model, here, cluster, rules.slots_per_gpu(model))


def _scaled(capacity: tuple[int, int, int], per_gpu: int) -> tuple[int, int, int]:
    """Usable GPUs (in time-sliced slots), millicores and bytes."""
    return capacity[0] * per_gpu, capacity[1], capacity[2]


def _replica_need(part: FleetModel, stage: Stage, cluster: Cluster, per_gpu: int) -> tuple[int, int, int]:
    """What one replica of ``stage`` (as it runs on ``cluster``) takes of it at least: GPUs in
    time-sliced slots (a time-sliced GPU of its own is ``per_gpu / slots_on`` slots of the
    GPUs :func:`rules.taken` counts), millicores, bytes."""
    used = rules.replica_usage(part, stage, 1)
    return used.gpus * per_gpu + used.slots * per_gpu // rules.slots_on(part, cluster), used.millis, used.memory


def cap_too_little(part: FleetModel, cap: rules.Cap, rest: rules.CapUsage, stages: list[Stage],
                   where: Mapping[str, list[Cluster]]) -> bool:
    """Whether ``cap``, beside ``rest`` (what is placed outside ``part`` takes of it), leaves
    too little for ``stages`` (of ``part``), each placed on clusters of ``where`` (its key ->
    the clusters no rule keeps it off) with at least its least replicas.

    Sound as :func:`too_little_room` is: what a placement of them takes of the cap
    (:func:`rules.cap_usage`) is, per stage, at least its least replicas times the least one
    replica takes on any cluster it may run on, in cost (when no price is negative) and in
    quota slots of the cluster's GPU type; a stage that may run where the quota does not count
    it (a GPU type it does not cap, or no GPUs there) is left out of the quota's count. The
    quota is counted for each set of its GPU types some stage may run on only, and for all."""
    members = [s for s in stages if s.pipeline in cap.pipelines]
    if not members:
        return False
    if any(not where[s.key] for s in members):
        return True
    least = {s.key: rules.least_replicas(part, s) for s in members}
    on = {(s.key, c.name): rules.on_cluster(s, c) for s in members for c in where[s.key]}
    return (_cost_too_little(part, cap, rest, members, where, least, on)
            or _quota_too_little(part, cap, rest, members, where, least, on))


_StagesOn = Mapping[tuple[str, str], Stage]  # (stage key, cluster name) -> the stage as it runs there


def _cost_too_little(part: FleetModel, cap: rules.Cap, rest: rules.CapUsage, members: list[Stage],
                     where: Mapping[str, list[Cluster]], least: Mapping[str, int], on: _StagesOn) -> bool:
    """The cost half of :func:`cap_too_little` (counted only when no price is negative)."""
    limit = cap.max_cost_micros
    if limit is None:
        return False
    costs = [[rules.replica_cost_micros(part, on[s.key, c.name], c) for c in where[s.key]] for s in members]
    return min(map(min, costs)) >= 0 and rest.cost + sum(
        least[s.key] * min(cost) for s, cost in zip(members, costs, strict=True)) > limit


def _quota_too_little(part: FleetModel, cap: rules.Cap, rest: rules.CapUsage, members: list[Stage],
                      where: Mapping[str, list[Cluster]], least: Mapping[str, int], on: _StagesOn) -> bool:
    """The GPU quota half of :func:`cap_too_little`, in time-sliced slots."""
    per_gpu = rules.slots_per_gpu(part)
    left = {gpu_type: quota * per_gpu - rest.of(gpu_type) for gpu_type, quota in cap.gpu_quota}
    needs: dict[frozenset[str], int] = {}  # the GPU types the stages may run on -> slots they need together
    for stage in members:
        taken = [(c.gpu_type, rules.quota_slots(part, on[stage.key, c.name], c, 1)) for c in where[stage.key]
                 if on[stage.key, c.name].gpus > 0 and c.gpu_type in left]
        if len(taken) == len(where[stage.key]):  # every cluster it may run on counts it
            types = frozenset(gpu_type for gpu_type, _ in taken if gpu_type is not None)
            needs[types] = needs.get(types, 0) + least[stage.key] * min(n for _, n in taken)
    return any(sum(n for inside, n in needs.items() if inside <= types) > sum(left[t] for t in types)
               for types in {*needs, frozenset().union(*needs)})
