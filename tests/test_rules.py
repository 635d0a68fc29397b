"""The hard rules (:mod:`fleetc.placement.rules`) against their vectorised form (hypothesis).

On random small fleets (cordons, sovereignty, GPU types, taints, node shapes, utilisation,
headroom, time-slicing with and without the device plugin configured, multiCluster with failover
headroom, previous placements), and for random candidate placements, some sound and some not:

- every pair the filters allow is one no rule excludes, and every pair no rule excludes and
  whose cluster holds one replica is allowed;
- the problem built of the fleet (:class:`fleetc.placement.problem.Problem`) holds the rules'
  demands, capacities, slots, minimums and HA clusters;
- its placement program accepts a candidate (its integral vector is feasible) whose pods pack
  onto every cluster's nodes (:func:`rules.unpacked`: the program counts totals, a relaxation
  of packing) exactly when the rules do (:func:`fleetc.placement.verify.verify`, which reads
  only the rules), but for one rule the program keeps in its objective instead: a serving
  stage running degraded and short leaves no room for one more replica (:func:`rules.room_left`);
- the program's capacity rows count, per cluster, what :func:`rules.taken` counts;
- the large path's repair (:class:`fleetc.placement.colgen.room._Room`) fits as many more replicas
  of a stage on a cluster as the rules' totals do (packing is restored after it).
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    GPU_TAINT,
    GPU_TYPE_CHOICES,
    THROUGHPUT_CHOICES,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_stage,
)

from fleetc.model import Assignment, FleetModel, Placement, StagePlacement, StageType, Toleration
from fleetc.placement import colgen, rules
from fleetc.placement.problem import Part, Problem, multicluster_conflicts
from fleetc.placement.program import Program, build_program, is_feasible
from fleetc.placement.scoring import GIB, score_matrix
from fleetc.placement.verify import verify

JURISDICTIONS = ("cn", "EU")
TOLERATE_GPU = Toleration(key=GPU_TAINT.key, operator="Equal", value=GPU_TAINT.value, effect=GPU_TAINT.effect)


@st.composite
def fleets(draw: st.DrawFn, failover: bool = False) -> FleetModel:
    """Small random fleets; with ``failover``, a platform asking for failover headroom over two
    to four clusters serves pipeline ``p``."""
    gpu_types = st.sampled_from(["a100", "h100", None])
    clusters = tuple(
        make_cluster(
            f"c{i}",
            gpu_type=(gpu_type := draw(gpu_types)),
            gpus=draw(st.sampled_from([2, 4, 8, 16])) if gpu_type else 0,
            cores=draw(st.sampled_from([8, 16, 64])),
            memory_gib=draw(st.sampled_from([32, 64, 256])),
            utilization=draw(st.sampled_from([0.0, 0.0, 0.25, 0.5])),
            cordoned=not failover and draw(st.integers(0, 6)) == 0,
            jurisdiction=draw(st.sampled_from(JURISDICTIONS)),
            taints=(GPU_TAINT,) if draw(st.integers(0, 4)) == 0 else (),
            device_plugin_configured=draw(st.integers(0, 3)) > 0,
            cpu_per_node=draw(st.sampled_from([None, None, 2_000, 8_000])),
            memory_per_node=draw(st.sampled_from([None, None, 8 * GIB, 32 * GIB])),
        )
        for i in range(draw(st.integers(2 if failover else 1, 4)))
    )
    stages = tuple(
        make_stage(
            f"s{i}",
            pipeline=draw(st.sampled_from(["p", "p" if failover else "q"])),
            type=(kind := draw(st.sampled_from([StageType.DEPLOYMENT, *StageType]))),
            gpus=draw(st.sampled_from([0, 1, 2, 4])),
            throughput_gpus=(throughput := draw(st.sampled_from(THROUGHPUT_CHOICES))),
            gpu_types=(tuple(throughput) if draw(st.booleans()) else ()) if throughput
            else draw(st.sampled_from(GPU_TYPE_CHOICES)),
            replicas=draw(st.integers(1, 5)),
            cores=draw(st.sampled_from([1, 4, 16])),
            memory_gib=draw(st.sampled_from([2, 16, 64])),
            min_replicas_per_cluster=draw(st.integers(1, 3)) if kind is StageType.DEPLOYMENT else 1,
            shared_gpu=draw(st.integers(0, 3)) > 0,
            jurisdiction=draw(st.sampled_from([None, *JURISDICTIONS])),
            tolerations=(TOLERATE_GPU,) if draw(st.booleans()) else (),
        )
        for i in range(draw(st.integers(1, 6)))
    )
    platforms = ()
    if failover or draw(st.booleans()):
        names = [c.name for c in clusters]
        ha = draw(st.lists(st.sampled_from(names), min_size=min(2, len(names)), max_size=3, unique=True))
        platform = make_platform(ha[0], tuple(ha[1:]), pipelines=("p",))
        platforms = (dataclasses.replace(platform, failover_headroom=failover or draw(st.booleans())),)
    gpu_policy = None
    if draw(st.integers(0, 3)):
        gpu_policy = make_gpu_policy(
            time_slicing=draw(st.sampled_from([4, 2, 3, 1])),
            defragment_threshold=draw(st.sampled_from([None, 0.5, 0.8])),
            sharing=draw(st.booleans()),
            max_sharers=draw(st.sampled_from([2, 3, 1])),
        )
    return make_fleet(clusters, stages, platforms=platforms, gpu_policy=gpu_policy)


@st.composite
def candidates(draw: st.DrawFn, model: FleetModel, allowed: np.ndarray) -> np.ndarray:
    """(S, C) replicas: each stage left out, or spread over a few clusters (mostly allowed
    ones), mostly with all its replicas, a gang mostly on one cluster."""
    replicas_at = np.zeros(allowed.shape, dtype=int)
    for s, stage in enumerate(model.stages):
        if draw(st.integers(0, 4)) == 0:
            continue
        ok = np.flatnonzero(allowed[s]).tolist()
        pool = ok if ok and draw(st.integers(0, 9)) else list(range(allowed.shape[1]))
        count = stage.replicas if draw(st.integers(0, 9)) else draw(st.integers(1, stage.replicas + 1))
        spread = 1 if stage.is_gang and draw(st.integers(0, 9)) else draw(st.integers(1, min(3, count)))
        clusters = draw(st.lists(st.sampled_from(pool), min_size=spread, max_size=spread))
        for i, c in enumerate(clusters):
            replicas_at[s, c] += count // spread + (i < count % spread)
    return replicas_at


def placement_of(model: FleetModel, replicas_at: np.ndarray) -> Placement:
    return Placement(
        stages=tuple(
            StagePlacement(stage.key, tuple(
                Assignment(model.clusters[c].name, int(replicas_at[s, c]),
                           int(replicas_at[s, c]) * rules.on_cluster(stage, model.clusters[c]).gpus)
                for c in np.flatnonzero(replicas_at[s])
            ), score=0.0)
            for s, stage in enumerate(model.stages)
        ),
        objective=0.0,
        bound=0.0,
        method="candidate",
    )


def vector_of(model: FleetModel, program: Program, replicas_at: np.ndarray, previous: np.ndarray) -> np.ndarray | None:
    """The program's integral ``v = [x | y | u | z | w | k | d]`` for ``replicas_at`` (the fewest
    time-sliced units given over to slots, every replica kept that can be, the replicas a placed stage
    running degraded goes short of), or None when it has no variables for it (a pair the
    filters refuse, part of a gang)."""
    units = np.zeros(replicas_at.shape, dtype=bool)
    units[program.unit_stage, program.unit_cluster] = True
    at_unit = replicas_at[program.unit_stage, program.unit_cluster]
    if np.any((replicas_at > 0) & ~units) or np.any(at_unit % program.unit_replicas):
        return None
    v = np.zeros(program.size)
    v[: len(at_unit)] = at_unit // program.unit_replicas
    v[len(at_unit) + np.arange(len(at_unit) - program.gangs)] = at_unit[program.gangs:] > 0  # u
    v[program.z] = replicas_at.any(axis=1)
    if len(program.w):
        shared = np.array([rules.uses_shared_slots(model, s) for s in model.stages])
        per_pair = np.array([[rules.on_cluster(s, c).gpus for c in model.clusters] for s in model.stages])
        slots = (per_pair * shared[:, np.newaxis] * replicas_at).sum(axis=0)
        unit = np.array([rules.time_sliced_unit(c) * rules.slots_on(model, c) for c in model.clusters])
        v[program.w] = -(-slots // unit)  # whole time-sliced units
    kept_unit = program.k_of  # the y entries of v the k entries keep replicas of
    v[program.k] = np.minimum(v[kept_unit], previous[program.unit_stage[kept_unit], program.unit_cluster[kept_unit]])
    placed = replicas_at[program.d_of].sum(axis=1)
    v[program.d] = np.where(placed > 0, np.array([model.stages[s].replicas for s in program.d_of]) - placed, 0)
    return v


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_program_accepts_exactly_what_the_rules_accept(data: st.DataObject) -> None:
    _check_against_the_rules(data, data.draw(fleets()))


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_failover_headroom_rows_follow_the_rules(data: st.DataObject) -> None:
    _check_against_the_rules(data, data.draw(fleets(failover=True)))


def _check_against_the_rules(data: st.DataObject, model: FleetModel) -> None:
    scores = score_matrix(model)
    for s, stage in enumerate(model.stages):
        for c, cluster in enumerate(model.clusters):
            excluded = bool(rules.exclusions(stage, cluster))
            too_small = (rules.on_cluster(stage, cluster).gpus > cluster.gpus or stage.cpu_millis > cluster.cpu_millis
                         or stage.memory_bytes > cluster.memory_bytes)
            assert scores.allowed[s, c] == (not excluded and not too_small), (stage, cluster)
    previous = np.array(data.draw(st.lists(st.lists(st.integers(0, 2), min_size=len(model.clusters),
                                                    max_size=len(model.clusters)),
                                           min_size=len(model.stages), max_size=len(model.stages))))
    previous = np.minimum(previous, [[s.replicas] for s in model.stages]).reshape(scores.allowed.shape)
    everything = Part(np.arange(len(model.stages)), np.arange(len(model.clusters)))
    problem = Problem.of(model, scores, multicluster_conflicts(model, scores), previous, everything)
    _assert_problem_states_the_rules(model, problem)
    program = build_program(problem)
    for _ in range(6):
        replicas_at = data.draw(candidates(model, scores.allowed))
        placement = placement_of(model, replicas_at)
        sound = [p for p in verify(model, placement, allow_unplaced=True)
                 if "replicas placed while it runs degraded, but" not in p] == []
        v = vector_of(model, program, replicas_at, previous)
        # the program counts each cluster's totals, a relaxation of packing pods onto nodes:
        # with the packing (rules.unpacked, which finish.packed restores) it is the rules
        packs = not any(rules.unpacked(model, cluster, [(rules.on_cluster(stage, cluster), int(replicas_at[s, c]))
                                                        for s, stage in enumerate(model.stages)])
                        for c, cluster in enumerate(model.clusters))
        assert (v is not None and is_feasible(program, v, program.lower) and packs) == sound, verify(
            model, placement, allow_unplaced=True)
        if v is not None:
            _assert_same_usage(model, program, v, replicas_at)
            _assert_same_headroom(model, program, v, replicas_at)
            _assert_same_caps(model, problem, program, v, replicas_at)
        _assert_repair_room_follows_the_rules(model, problem, replicas_at)


def _assert_problem_states_the_rules(model: FleetModel, problem: Problem) -> None:
    """The problem's per-stage and per-cluster arrays are the rules' figures."""
    names = [c.name for c in model.clusters]
    for s, stage in enumerate(model.stages):
        used = rules.replica_usage(model, stage, stage.replicas)
        # a stage asking for throughput: the most over its types per stage, each pair's own per pair
        assert problem.demand[0, s] == max([stage.gpus, *(o.gpus for o in stage.gpu_options)])
        for c, cluster in enumerate(model.clusters):
            assert problem.gpus_at(np.array([s]), np.array([c]))[0] == rules.on_cluster(stage, cluster).gpus
        assert max([stage.gpus, *(o.gpus for o in stage.gpu_options)]) * stage.replicas >= used.gpus + used.slots
        assert problem.shared[s] == (used.slots > 0)
        assert problem.demand[1, s] * stage.replicas * 1000 == pytest.approx(used.millis)
        assert problem.minimum[s] == rules.min_replicas_per_cluster(stage)
        assert [names[c] for c in problem.ha[s]] == [n for n in rules.ha_clusters(model, stage) if n in names]
    for c, cluster in enumerate(model.clusters):
        gpus, millis, memory = rules.usable_capacity(model, cluster)
        assert problem.capacity[:, c].tolist() == [gpus, millis / 1000, memory / GIB]
    assert problem.slots.tolist() == [rules.slots_on(model, c) for c in model.clusters]


def _assert_same_usage(model: FleetModel, program: Program, v: np.ndarray, replicas_at: np.ndarray) -> None:
    """The program's GPU, core and GiB rows count what :func:`rules.taken` counts."""
    rows = program.usage @ v
    n = len(model.clusters)
    for c, cluster in enumerate(model.clusters):
        used = rules.usage(model, [(rules.on_cluster(stage, cluster), int(replicas_at[s, c]))
                                   for s, stage in enumerate(model.stages)])
        gpus, millis, memory = rules.taken(model, cluster, used)
        assert rows[c] == gpus, cluster.name
        assert abs(rows[n + c] - millis / 1000) < 1e-9
        assert abs(rows[2 * n + c] - memory / GIB) < 1e-9


def _assert_same_headroom(model: FleetModel, program: Program, v: np.ndarray, replicas_at: np.ndarray) -> None:
    """Each failover headroom row of the program holds exactly when
    :func:`rules.failover_shortfalls` finds no shortfall of its cluster and resource."""
    n = len(model.clusters)
    row = (4 if len(program.w) else 3) * n
    slack = program.capacity - program.usage @ v
    index = {c.name: i for i, c in enumerate(model.clusters)}
    for _name, members, serving in rules.failover_groups(model):
        for lost in members:
            on_lost = [(rules.on_cluster(stage, model.cluster(lost)), int(replicas_at[s, index[lost]]))
                       for s, stage in enumerate(model.stages) if stage.key in serving]
            others = [(model.cluster(o), rules.usage(model, [(rules.on_cluster(stage, model.cluster(o)),
                                                                int(replicas_at[s, index[o]]))
                                                               for s, stage in enumerate(model.stages)]))
                      for o in members if o != lost]
            lost_usage = (model.cluster(lost), rules.usage(model, on_lost))
            short = {what for what, _, _ in rules.failover_shortfalls(model, lost_usage, others)}
            for what in ("GPU slots" if rules.slots_per_gpu(model) > 1 else "GPUs", *rules.RESOURCES[1:]):
                assert (slack[row] >= -1e-6) == (what not in short), (lost, what)
                row += 1
    assert row == len(slack) - len(program_caps(model))


def program_caps(model: FleetModel) -> list[tuple[rules.Cap, str | None]]:
    """The limits the program has a row of, after its failover headroom rows: per cap covering a
    stage, each GPU type of its quota, then its cost cap (None)."""
    found = [cap for cap in rules.caps(model) if any(s.pipeline in cap.pipelines for s in model.stages)]
    return [(cap, limit) for cap in found
            for limit in [*(t for t, _ in cap.gpu_quota), *([None] if cap.max_cost is not None else [])]]


def _assert_same_caps(model: FleetModel, problem: Problem, program: Program, v: np.ndarray,
                      replicas_at: np.ndarray) -> None:
    """Each cap row of the program holds exactly when the ledger (:func:`rules.caps_used`,
    :func:`rules.cap_overuse`) finds that limit within its cap."""
    limits = program_caps(model)
    slack = (program.capacity - program.usage @ v)[len(program.capacity) - len(limits):]
    placed = [(stage, model.clusters[c], int(replicas_at[s, c]))
              for s, stage in enumerate(model.stages) for c in np.flatnonzero(replicas_at[s])]
    per_gpu = rules.slots_per_gpu(model)
    at = 0
    for cap, used in rules.caps_used(model, placed):
        for gpu_type, limit in [*((t, q * per_gpu) for t, q in cap.gpu_quota),
                                *([(None, cap.max_cost_micros)] if cap.max_cost is not None else [])]:
            if (cap, gpu_type) not in limits:
                continue
            within = (used.of(gpu_type) if gpu_type is not None else used.cost) <= (limit or 0)
            assert (slack[at] >= -1e-6) == within, (cap.name, gpu_type)
            at += 1
    assert at == len(limits) and len(problem.caps) == len({cap.name for cap, _ in limits})


def _assert_repair_room_follows_the_rules(model: FleetModel, problem: Problem, replicas_at: np.ndarray) -> None:
    """The large path's repair counts, for every stage and cluster, as many more replicas
    fitting beside ``replicas_at`` as the rules let fit: capacity and time-sliced slots on
    every cluster ``replicas_at`` does not already overfill (the repair never sees one), and
    with the failover headroom too (:meth:`rules.Ledger.room_for`) where ``replicas_at`` keeps
    it: time-sliced GPUs on the other clusters of an HA set take whole time-sliced units."""
    large = colgen.large._large(problem)
    per_replica = large.coefficients / large.replicas
    room = colgen.room._Room(large.capacity, colgen.room._taken(large, replicas_at), large.slots, large.unit,
                             large.headroom, per_replica, replicas_at, large.caps)
    # A stage asking for throughput counts there as the most GPUs any of its types takes: the
    # room is then never more than the rules', and exactly theirs when no stage's count varies.
    varying = any(len({o.gpus for o in stage.gpu_options}) > 1 for stage in model.stages)
    for c, cluster in enumerate(model.clusters):
        placed = [(rules.on_cluster(stage, cluster), int(replicas_at[s, c])) for s, stage in enumerate(model.stages)]
        if rules.overuse(model, cluster, rules.usage(model, placed)):
            continue
        for s, stage in enumerate(model.stages):
            fitting = 0
            here = rules.on_cluster(stage, cluster)
            while fitting < 12 and not rules.overuse(
                    model, cluster, rules.usage(model, [*placed, (here, fitting + 1)])):
                fitting += 1
            counted = min(room.capacity_fits(c, per_replica[:, s]), 12)
            assert counted <= fitting if varying else counted == fitting, (stage.key, cluster.name)
    # the repair counts totals, as the program does: packing onto nodes is restored after it
    # (finish.packed), so here the ledger's room is read without it
    with mock.patch.object(rules.ledger, "unpacked", lambda *_: ""):
        ledger = rules.Ledger(model, ((stage, model.clusters[c].name, int(replicas_at[s, c]))
                                      for s, stage in enumerate(model.stages) for c in np.flatnonzero(replicas_at[s])))
        if not all(ledger.fits(cluster.name) for cluster in model.clusters) or not ledger.within_caps():
            return  # the repair never sees a placement that breaks capacity, the headroom or a cap
        for c, cluster in enumerate(model.clusters):
            for s, stage in enumerate(model.stages):
                fitting = 0
                while fitting < 40 and ledger.room_for(stage, cluster.name, fitting + 1):
                    fitting += 1
                counted = min(room.fits(c, s), 40)
                assert counted <= fitting if varying else counted == fitting, (stage.key, cluster.name, "headroom")


def test_the_repair_counts_time_sliced_gpus_on_the_other_ha_clusters_in_whole_units() -> None:
    """h1 and h2 keep failover headroom for pipeline p; q/side's one time-sliced slot on h2
    takes a whole GPU there (a node of 1 GPU, 4 slots each). Losing h1 needs p's 2 exclusive
    GPUs (8 slots: two 1-GPU pods, as its nodes hold) plus p/small's slots back on h2, which
    leaves (8 - 2 - 1) x 4 = 20 slots: 12 replicas of p/small fit h1, as the rules count.
    Counting the slot on h2 as a quarter GPU, the repair found room for 15, and the verifier
    refused the placement (exit 3)."""
    clusters = (make_cluster("h1", gpus=8, gpus_per_node=1), make_cluster("h2", gpus=8, gpus_per_node=1))
    platform = dataclasses.replace(make_platform("h1", ("h2",), pipelines=("p",)), failover_headroom=True)
    stages = (
        make_stage("big", pipeline="p", type=StageType.DEPLOYMENT, gpus=1, replicas=4, cores=1, memory_gib=1),
        make_stage("small", pipeline="p", type=StageType.DEPLOYMENT, gpus=1, replicas=20, cores=1, memory_gib=1,
                   shared_gpu=True),
        make_stage("side", pipeline="q", type=StageType.DEPLOYMENT, gpus=1, cores=1, memory_gib=1, shared_gpu=True),
    )
    model = make_fleet(clusters, stages, platforms=(platform,), gpu_policy=make_gpu_policy(time_slicing=4))
    scores = score_matrix(model)
    problem = Problem.of(model, scores, multicluster_conflicts(model, scores), np.zeros((3, 2), dtype=np.int32),
                         Part(np.arange(3), np.arange(2)))
    large = colgen.large._large(problem)
    placed = np.array([[2, 2], [0, 0], [0, 1]])
    room = colgen.room._Room(large.capacity, colgen.room._taken(large, placed), large.slots, large.unit, large.headroom,
                        large.coefficients / large.replicas, placed, large.caps)
    assert room.fits(0, 1) == 12
    ledger = rules.Ledger(model, [(stages[0], "h1", 2), (stages[0], "h2", 2), (stages[2], "h2", 1)])
    assert ledger.room_for(stages[1], "h1", 12) and not ledger.room_for(stages[1], "h1", 13)
    _assert_repair_room_follows_the_rules(model, problem, placed)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(fleets())
def test_excluded_is_whether_any_rule_keeps_the_stage_off(model: FleetModel) -> None:
    """:func:`rules.excluded` (the first rule that keeps a stage off, unworded) answers as the
    worded list (:func:`rules.exclusions`) is non-empty, on every stage and cluster (cordons,
    sovereignty, GPUs and their type, throughput, node fit, taints)."""
    for stage in model.stages:
        for cluster in model.clusters:
            assert rules.excluded(stage, cluster) == bool(rules.exclusions(stage, cluster))
