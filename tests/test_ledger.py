"""Every reader of capacity, quota and budget use against the one ledger (hypothesis, issue 29).

The ledger (:class:`fleetc.placement.rules.Ledger`, :func:`fleetc.placement.rules.caps_used`,
:class:`fleetc.placement.rules.FleetUsage`) counts what a placement takes of each cluster and of
each cap. On random small fleets (``test_rules.fleets``: GPU types, throughput stages,
time-slicing with and without the device plugin, utilisation, headroom, failover headroom) under
random team quotas, team cost caps and pipeline budgets, for random candidate placements, each
reader that keeps its own count must agree with it:

- the exact program's capacity and cap rows, row by row (``program.build_program``: what a
  placement's variables add up to on each cluster's GPU, core, GiB and time-sliced slot row and
  on each cap's quota and cost row), and as a whole (it accepts exactly what the verifier
  accepts: ``test_rules._check_against_the_rules``, here with caps);
- column generation's count of what is taken (``colgen.room._taken``, ``_free``);
- the incremental path's (``incremental._taken``, ``_overfull``);
- the verifier's cap problems;
- the one cap check the refusal's reasons, the fixes and explain word (``rules.cap_shortfalls``);
- the PR report's GPUs and cost per cluster (``FleetUsage``, as ``report.snapshot`` shows them).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import make_gpu_policy
from test_rules import _check_against_the_rules, candidates, fleets, placement_of

from fleetc.model import FleetModel, PipelineBudget, Source, Team
from fleetc.placement import colgen, incremental, rules
from fleetc.placement.problem import Part, Problem, multicluster_conflicts
from fleetc.placement.program import build_program
from fleetc.placement.scoring import GIB, score_matrix
from fleetc.placement.verify import cap_problems
from fleetc.report import snapshot


@st.composite
def capped_fleets(draw: st.DrawFn) -> FleetModel:
    """``test_rules.fleets`` under a team over pipeline ``p`` (a GPU quota per type, a cost cap,
    either or both) and, sometimes, a budget of pipeline ``q``."""
    model = draw(fleets(failover=draw(st.booleans())))
    quota = tuple(sorted((t, draw(st.integers(0, 12))) for t in draw(st.sets(st.sampled_from(["a100", "h100"])))))
    cost = draw(st.sampled_from([None, 5.0, 20.0, 80.0]))
    teams = (Team("research", "platform", ("p",), quota, (), cost, Source("platform.yaml", "spec.teams[0]")),)
    budgets = ((PipelineBudget("q", draw(st.sampled_from([3.0, 30.0])), Source("q.yaml", "spec.maxHourlyCost")),)
               if draw(st.booleans()) else ())
    if draw(st.booleans()) and model.gpu_policy is None:
        model = dataclasses.replace(model, gpu_policy=make_gpu_policy(time_slicing=4))
    return dataclasses.replace(model, teams=teams if quota or cost is not None else (), budgets=budgets)


def _ledger(model: FleetModel, replicas_at: np.ndarray) -> rules.Ledger:
    return rules.Ledger(model, ((stage, model.clusters[c].name, int(replicas_at[s, c]))
                                for s, stage in enumerate(model.stages) for c in np.flatnonzero(replicas_at[s])))


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_the_program_accepts_what_the_ledger_accepts_under_caps(data: st.DataObject) -> None:
    """The exact program's rows, the large path's repair room and the verifier, on fleets with
    team quotas, cost caps and budgets (``test_rules`` draws none)."""
    _check_against_the_rules(data, data.draw(capped_fleets()))


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_every_reader_counts_what_the_ledger_counts(data: st.DataObject) -> None:
    model = data.draw(capped_fleets())
    scores = score_matrix(model)
    replicas_at = data.draw(candidates(model, scores.allowed))
    replicas_at = np.where(scores.allowed, replicas_at, 0)  # the solvers see allowed pairs only
    ledger = _ledger(model, replicas_at)
    taken = [rules.taken(model, cluster, ledger.used[cluster.name]) for cluster in model.clusters]
    problem = Problem.of(model, scores, multicluster_conflicts(model, scores), np.zeros_like(replicas_at),
                         Part(np.arange(len(model.stages)), np.arange(len(model.clusters))))
    _program_counts(model, problem, replicas_at, ledger)
    _incremental_counts(model, problem, replicas_at, ledger, taken)
    if not any(len({o.gpus for o in stage.gpu_options}) > 1 for stage in model.stages):
        _column_generation_counts(model, problem, replicas_at, taken)  # it counts the most GPUs per stage
    _report_counts(model, replicas_at, taken)
    placement = placement_of(model, replicas_at)
    assert bool(cap_problems(model, placement)) == (not ledger.within_caps())
    _cap_check_is_the_ledgers(model, ledger)


def _program_counts(model: FleetModel, problem: Problem, replicas_at: np.ndarray, ledger: rules.Ledger) -> None:
    """The exact program's rows, times the variables of ``replicas_at`` (``x`` the share of a
    gang's replicas, ``y`` a Deployment's replicas, no time-sliced units ``w``), are the
    ledger's use of each cluster (whole GPUs, cores, GiB, time-sliced slots) and of each cap
    (quota slots per GPU type, cost micros)."""
    program = build_program(problem)
    values = np.zeros(program.size)
    values[: program.binaries] = (replicas_at[program.unit_stage, program.unit_cluster]
                                  / program.unit_replicas)
    counted = program.usage @ values
    n = len(model.clusters)
    for c, cluster in enumerate(model.clusters):
        used = ledger.used[cluster.name]
        assert math.isclose(counted[c], used.gpus, abs_tol=1e-6), cluster.name
        assert math.isclose(counted[n + c] * 1000, used.millis, abs_tol=1e-3), cluster.name
        assert math.isclose(counted[2 * n + c] * GIB, used.memory, abs_tol=1.0), cluster.name
        slots = counted[3 * n + c] if len(program.w) else 0.0
        assert math.isclose(slots, used.slots, abs_tol=1e-6), cluster.name
    capped = dict(zip((cap.name for cap in ledger.caps), ledger.capped, strict=True))
    expected = [figure for cap in problem.caps
                for figure in ([float(capped[cap.name].of(t)) for t, _on, _quota in cap.quotas]
                               + ([float(capped[cap.name].cost)] if cap.cost is not None else []))]
    assert np.allclose(counted[len(counted) - len(expected):], expected, rtol=0.0, atol=1e-3)


def _incremental_counts(model: FleetModel, problem: Problem, replicas_at: np.ndarray, ledger: rules.Ledger,
                        taken: list[tuple[int, int, int]]) -> None:
    """``incremental._taken`` is the ledger's use; ``_overfull`` its :func:`rules.overuse`."""
    counted = incremental._taken(problem, incremental._Pairs.of(replicas_at))
    overfull = incremental._overfull(problem, counted)
    for c, cluster in enumerate(model.clusters):
        used = ledger.used[cluster.name]
        assert (counted[0, c], counted[3, c]) == (used.gpus, used.slots), cluster.name
        assert math.isclose(counted[1, c] * 1000, used.millis) and math.isclose(counted[2, c] * GIB, used.memory)
        assert overfull[c] == bool(rules.overuse(model, cluster, used)), cluster.name


def _column_generation_counts(model: FleetModel, problem: Problem, replicas_at: np.ndarray,
                              taken: list[tuple[int, int, int]]) -> None:
    """What column generation leaves free of each cluster's usable capacity is what the ledger
    takes of it (time-sliced slots in whole time-sliced units)."""
    large = colgen.large._large(problem)
    free = colgen.room._free(large, colgen.room._taken(large, replicas_at))
    for c, cluster in enumerate(model.clusters):
        gpus, millis, memory = taken[c]
        usable = rules.usable_capacity(model, cluster)
        assert math.isclose(usable[0] - free[0, c], gpus, abs_tol=1e-6), cluster.name
        assert math.isclose(usable[1] / 1000 - free[1, c], millis / 1000, abs_tol=1e-6)
        assert math.isclose(usable[2] / GIB - free[2, c], memory / GIB, abs_tol=1e-6)


def _report_counts(model: FleetModel, replicas_at: np.ndarray, taken: list[tuple[int, int, int]]) -> None:
    """The PR report's GPUs per cluster are the ledger's, its cost what they and the cores and
    memory placed there cost per hour."""
    side = snapshot(model, placement_of(model, replicas_at), {})
    assert side.cost is not None
    for c, cluster in enumerate(model.clusters):
        gpus, millis, memory = taken[c]
        assert sum(side.gpus.get(cluster.name, {}).values()) == gpus, cluster.name
        cost = gpus * cluster.gpu_hour_cost + millis / 1000 * cluster.cpu_hour_cost \
            + memory / GIB * cluster.memory_gib_hour_cost
        assert math.isclose(side.cost.get(cluster.name, 0.0), cost, rel_tol=1e-9, abs_tol=1e-9), cluster.name


def _cap_check_is_the_ledgers(model: FleetModel, ledger: rules.Ledger) -> None:
    """The one cap check finds a cap short for what a stage takes on a cluster
    (:func:`rules.least_on_cluster`) exactly when the ledger, with those replicas added, is over
    a cap; both count the whole fleet."""
    if not ledger.within_caps():
        return
    placed = [(stage, ledger.clusters[name], n) for name, on in ledger.on.items() for stage, n in on.values()]
    capped = rules.caps_used(model, placed)
    for stage in model.stages:
        for cluster in model.clusters:
            short = rules.cap_shortfalls(model, capped, stage, cluster)
            ledger.add(stage, cluster.name, rules.least_on_cluster(stage))
            assert bool(short) == (not ledger.within_caps()), (stage.key, cluster.name)
            ledger.add(stage, cluster.name, -rules.least_on_cluster(stage))
