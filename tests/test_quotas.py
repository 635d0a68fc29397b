"""Team quotas and cost caps (AIGCPlatform ``spec.teams``, AIGCPipeline ``spec.maxHourlyCost``):
the rule (:func:`fleetc.placement.rules.caps`), the optimizer keeping it, the verifier checking
it, explain naming it, and the queues each cluster renders for a team."""

from __future__ import annotations

import itertools
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import (
    THROUGHPUT_CHOICES,
    make_cluster,
    make_fleet,
    make_gpu_policy,
    make_platform,
    make_stage,
)
from support.corpus import CASES, compile_texts, compiled_in, read_policies
from support.runtime import GPU, kueue_problems, objects, volcano_queue_problems

from bench.generate import Spec, generate
from fleetc.compiler import check_policies, compile_policies, load_policy_sources
from fleetc.errors import PlacementError, PolicyError
from fleetc.model import Assignment, FleetModel, PipelineBudget, Placement, Source, StagePlacement, StageType, Team
from fleetc.placement import colgen, rules
from fleetc.placement.explain import explain
from fleetc.placement.explain import format_text as format_explanation
from fleetc.placement.fixes import fixes
from fleetc.placement.optimize import place
from fleetc.placement.problem import Problem, components, problems
from fleetc.placement.scoring import score_matrix
from fleetc.placement.verify import verify
from fleetc.report import as_json, compare, format_markdown, format_text, snapshot

QUOTAS = CASES / "team-quotas"


def model_of(files: dict[str, str]) -> FleetModel:
    return check_policies(load_policy_sources([(path, text.encode()) for path, text in sorted(files.items())], "bench"))


def team(name: str = "research", pipelines: tuple[str, ...] = ("llm",), quota: tuple[tuple[str, int], ...] = (),
         cost: float | None = None) -> Team:
    return Team(name, "platform", pipelines, quota, (), cost, Source("platform.yaml", "spec.teams[0]"))


def capped_fleet(quota: int, cost: float | None = None) -> FleetModel:
    """Two h100 clusters and an a100 one; the llm pipeline's two 8-GPU stages under one team."""
    clusters = (make_cluster("a", gpus=16, gpu_type="h100"), make_cluster("b", gpus=16, gpu_type="h100"),
                make_cluster("c", gpus=16, gpu_type="a100", gpu_hour_cost=4.0))
    stages = (make_stage("pretrain", gpus=8, gpu_type="h100"), make_stage("tune", gpus=8))
    return make_fleet(clusters, stages, teams=(team(quota=(("h100", quota),), cost=cost),))


def placed(*where: tuple[str, str, int]) -> Placement:
    return Placement(tuple(StagePlacement(f"llm/{stage}", (Assignment(cluster, 1, gpus),), 0.5)
                           for stage, cluster, gpus in where), 1.0, 1.0, "milp")


def test_the_verifier_counts_a_team_quota_over_the_whole_fleet() -> None:
    model = capped_fleet(8)
    assert verify(model, placed(("pretrain", "a", 8), ("tune", "b", 8))) == [
        "team research: 16 h100 placed, quota 8"]
    assert verify(model, placed(("pretrain", "a", 8), ("tune", "c", 8))) == []


def test_the_optimizer_keeps_the_quota_and_trades_score_for_it() -> None:
    free = place(capped_fleet(16))
    capped = place(capped_fleet(8))
    assert [a.cluster for p in free.stages for a in p.assignments if a.cluster == "c"] == []
    assert [a.cluster for p in capped.stages for a in p.assignments][1] == "c"  # llm/tune, on the dearer a100
    assert capped.objective < free.objective


def test_a_binding_quota_names_itself_in_the_refusal() -> None:
    with pytest.raises(PlacementError) as error:
        place(capped_fleet(4))
    assert error.value.reasons == (
        "0/3 clusters fit llm/pretrain: 2 are over team research's h100 quota (4 of 4 left), 1 has no h100",)


def test_time_sliced_slots_count_a_fraction_of_a_gpu() -> None:
    serve = make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, replicas=3, shared_gpu=True)
    model = make_fleet((make_cluster("a", gpus=8, gpu_type="h100"),), (serve,),
                       gpu_policy=make_gpu_policy(time_slicing=2), teams=(team(quota=(("h100", 1),)),))
    cap = rules.caps(model)[0]
    used = rules.cap_usage(model, cap, [(serve, model.clusters[0], 3)])
    assert used.of("h100") == 3  # slots, two to a GPU
    assert rules.cap_overuse(model, cap, used) == ["1.5 h100 placed, quota 1"]


def test_time_sliced_slots_take_whole_gpus_of_a_quota_and_a_cost_where_the_plugin_does_not_slice() -> None:
    serve = make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, replicas=3, shared_gpu=True)
    sliced = make_cluster("a", gpus=8, gpu_type="h100")
    whole = make_cluster("b", gpus=8, gpu_type="h100", device_plugin_configured=False)
    model = make_fleet((sliced, whole), (serve,), gpu_policy=make_gpu_policy(time_slicing=2),
                       teams=(team(quota=(("h100", 2),), cost=100.0),))
    cap = rules.caps(model)[0]
    on_whole = rules.cap_usage(model, cap, [(serve, whole, 3)])
    assert on_whole.of("h100") == 6  # three whole GPUs, two slots each
    assert rules.cap_overuse(model, cap, on_whole) == ["3 h100 placed, quota 2"]
    half_a_gpu_hour = rules.MICROS * whole.gpu_hour_cost / 2  # the same prices on both clusters
    assert rules.replica_cost_micros(model, serve, whole) - rules.replica_cost_micros(model, serve, sliced) == (
        half_a_gpu_hour)
    (problem,), _ = problems(model, score_matrix(model), {})
    s, c = np.nonzero(problem.allowed)
    pairs = list(zip(s.tolist(), c.tolist(), strict=True))
    assert problem.quota_at(s, c).tolist() == [
        rules.quota_slots(model, problem.stages[i], problem.clusters[j], 1) for i, j in pairs] == [1, 2]
    assert problem.cost_at(s, c).tolist() == [
        rules.replica_cost_micros(model, problem.stages[i], problem.clusters[j]) for i, j in pairs]
    placement = place(model)  # the quota holds two GPUs: 3 slots fit it only where they are slots
    assert [(a.cluster, a.replicas) for p in placement.stages for a in p.assignments] == [("a", 3)]
    assert verify(model, placement) == []


def test_the_cost_rule_and_the_problem_count_the_same_micros() -> None:
    model = capped_fleet(16, cost=100.0)
    (problem,), _ = problems(model, score_matrix(model), {})
    s, c = np.nonzero(problem.allowed)
    expected = [rules.replica_cost_micros(model, problem.stages[i], problem.clusters[j])
                for i, j in zip(s.tolist(), c.tolist(), strict=True)]
    assert problem.cost_at(s, c).tolist() == expected


def test_a_cost_cap_binds_the_optimizer_and_the_verifier() -> None:
    model = capped_fleet(16, cost=30.0)  # one stage: 8 GPUs at 2.00, 8 cores at 0.05, 64Gi at 0.01: 17.04/h
    with pytest.raises(PlacementError) as error:
        place(model)
    assert error.value.reasons == (
        "0/3 clusters fit llm/tune: 3 are over team research's cost cap (12.96/h of 30.00/h left)",)
    assert verify(model, placed(("pretrain", "a", 8), ("tune", "c", 8))) == [
        "team research: cost 50.08/h, cap 30.00/h"]
    assert rules.caps(capped_fleet(16, cost=34.08))[0].max_cost_micros == 34_080_000
    assert [a.cluster for p in place(capped_fleet(16, cost=34.08)).stages for a in p.assignments] != []


def test_a_cap_joins_the_components_of_the_stages_it_covers() -> None:
    allowed = np.array([[True, False], [False, True], [False, True]])
    assert [p.stages.tolist() for p in components(allowed)] == [[0], [1, 2]]
    assert [(p.stages.tolist(), p.clusters.tolist()) for p in components(allowed, [np.array([0, 2])])] == [
        ([0, 1, 2], [0, 1])]


def test_the_golden_case_renders_each_teams_share_where_it_runs() -> None:
    files = dict(compiled_in(QUOTAS).files)
    assert volcano_queue_problems(files) == []
    assert kueue_problems(files) == []
    queues = {(cluster, o["kind"], o["metadata"]["name"]): o["spec"] for cluster, o in objects(files)
              if o["kind"] in ("Queue", "ClusterQueue")}
    research = queues[("virginia", "Queue", "fleetc-team-research")]
    assert (research["capability"], research["guarantee"]) == ({GPU: "16"}, {"resource": {GPU: "8"}})
    assert ("oregon", "ClusterQueue", "fleetc") not in queues  # every gang on oregon is a team's
    gpu_quota = {name: spec["resourceGroups"][1]["flavors"] for cluster, kind, name in queues
                 if kind == "ClusterQueue" for spec in [queues[(cluster, kind, name)]]}
    assert gpu_quota == {
        "fleetc-team-prod": [{"name": "fleetc-a100", "resources": [{"name": GPU, "nominalQuota": "8"}]}],
        "fleetc-team-research": [{"name": "fleetc-a100", "resources": [{"name": GPU, "nominalQuota": "8"}]}],
    }


def test_a_queue_over_its_capability_is_caught_by_the_runtime_model() -> None:
    files = dict(compiled_in(QUOTAS).files)
    path = "clusters/virginia/infra/queue-fleetc-team-research.yaml"
    short = {**files, path: files[path].replace('nvidia.com/gpu: "16"', 'nvidia.com/gpu: "8"')}
    assert volcano_queue_problems(short) == [
        "virginia: Queue/fleetc-team-research: its Jobs ask for 16 nvidia.com/gpu, capability 8"]


TEAM_MISTAKES = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPlatform
metadata:
  name: shared-fleet
spec:
  teams:
  - name: research
    namespaces: [research]
    gpuQuota: {h100: 16, h10: 4}
    guaranteed: {h100: 32}
  - name: research
    pipelineSelector: {team: prod}
  - name: all
    namespaces: [research]
  - name: none
"""


def test_team_mistakes_are_errors_with_their_place() -> None:
    policies = read_policies(QUOTAS / "policies")
    policies["policies/platform.yaml"] = TEAM_MISTAKES
    with pytest.raises(PolicyError) as error:
        compile_texts(policies)
    assert [(d.line, d.column, d.field, d.message, d.hint) for d in error.value.diagnostics] == [
        (9, 26, "spec.teams[0].gpuQuota.h10", "no cluster of the Fleet has GPU type 'h10'", "did you mean 'h100'?"),
        (10, 24, "spec.teams[0].guaranteed.h100", "guarantees 32 h100, more than its gpuQuota of 16", ""),
        (11, 11, "spec.teams[1].name", "duplicate team name 'research' (also spec.teams[0])", ""),
        (13, 5, "spec.teams[2]", "pipeline 'llm' belongs to teams 'research' and 'all'; a pipeline belongs to at "
                                 "most one team", "narrow the teams' namespaces or pipelineSelector"),
        (15, 5, "spec.teams[3]", "team 'none' selects no pipelines",
         "give it namespaces: [<namespace>, ...] or pipelineSelector: {<label>: <value>}"),
    ]


def test_the_large_path_keeps_quotas_and_cost_caps() -> None:
    """Teams whose quotas and budgets bind: the column generation's rows, rounding and repair
    keep every cap (``place`` re-verifies its placement and raises otherwise), and the caps
    bind: some stage runs elsewhere or stays out compared with the fleet without them."""
    spec = Spec(clusters=8, stages=60, load=0.8, seed=5, quotas=0.8, budget=1.2)
    capped = model_of(generate(spec).files)
    assert len(rules.caps(capped)) == len(capped.teams) == 17  # a team per namespace with pipelines
    large = place(capped, allow_unplaced=True, large=0)
    exact = place(capped, allow_unplaced=True)
    assert large.method == "colgen-lp-round" and exact.method == "milp"
    assert verify(capped, large, allow_unplaced=True) == verify(capped, exact, allow_unplaced=True) == []
    free = place(model_of(generate(replace(spec, quotas=0.0)).files), allow_unplaced=True, large=0)
    assert large.objective < free.objective
    assert large.objective >= 0.97 * exact.objective


def test_the_diff_shows_each_teams_cost_before_and_after() -> None:
    """Raising research's h100 quota lets llm/finetune leave the dearer a100 of oregon: the
    diff says what each team costs per hour on each side."""
    policies = read_policies(QUOTAS / "policies")
    raised = {**policies, "policies/platform.yaml": policies["policies/platform.yaml"].replace(
        "gpuQuota: {h100: 16}", "gpuQuota: {h100: 24}\n    maxHourlyCost: 200")}
    sides = []
    for texts in (policies, raised):
        loaded = load_policy_sources([(p, t.encode()) for p, t in sorted(texts.items())], "test")
        compiled = compile_policies(loaded)
        sides.append(snapshot(compiled.model, compiled.placement, compiled.files))
    report = compare(sides[0], sides[1], base_label="main", head_label="raised")
    assert [(t.name, t.before, t.after, t.cap) for t in report.teams] == [
        ("team prod", 59.28, 59.28, None), ("team research", 128.96, 120.96, 200.0)]
    summary = format_text(report).split("\n\n---")[0].splitlines()
    assert summary[-2:] == ["team prod: GPUs 10 -> 10, cost/h 59.28 -> 59.28; use: a100 8 of 8; h100 2 of 8",
                            "team research: GPUs 24 -> 24, cost/h 128.96 -> 120.96 (cap 200.00); use: h100 24 of 24; "
                            "cost 120.96 of 200.00/h"]
    markdown = format_markdown(report)
    assert "| `team research` | 24 → 24 | 128.96 → 120.96 | h100 24 of 24; cost 120.96 of 200.00/h |" in markdown
    # the raised quota is used up: a danger (prod's a100 quota was used up before: none)
    assert [(d.kind, d.subject) for d in report.dangers if d.kind == "quota"] == [("quota", "team research")]
    assert as_json(report)["teams"][1] == {"name": "team research", "costPerHour": {"before": 128.96, "after": 120.96},
                                           "cap": 200.0, "gpus": {"before": 24, "after": 24},
                                           "quota": ["h100 24 of 24", "cost 120.96 of 200.00/h"]}


def test_the_greedy_baselines_keep_the_same_caps() -> None:
    """bench's baselines, given the caps, never break one: what the bench compares is fleetc and
    the greedy schedulers under the same rules."""
    from bench.greedy import ORDERS, place_greedy
    from bench.strong import place_strong

    spec = Spec(clusters=8, stages=60, load=0.9, seed=2, quotas=0.8, budget=1.1)
    capped = model_of(generate(spec).files)
    uncapped = model_of(generate(replace(spec, quotas=0.0)).files)
    for placement in [*(place_greedy(capped, order) for order in ORDERS), place_strong(capped)]:
        assert verify(capped, placement, allow_unplaced=True) == [], placement.method
    # Without the caps the strong greedy would break them: the caps are no formality here.
    assert [p for p in verify(capped, place_strong(uncapped), allow_unplaced=True) if p.startswith("team ")] != []


def test_explain_names_the_cap_that_binds() -> None:
    """A cost cap keeps llm/finetune off the better-scoring h100 of frankfurt: explain names it,
    both as what the runner-up lost to and among the stage's caps."""
    compiled = compiled_in(CASES / "cost-cap-trades-score")
    text = format_explanation(explain(compiled.model, compiled.placement, "llm/finetune"))
    assert text.splitlines()[-3:] == [
        "chosen: oregon",
        "runner-up: frankfurt (margin -0.1762: it scores higher; moving the stage there breaks a hard constraint "
        "(pipeline llm: cost 40.48/h, cap 30.00/h))",
        "cap: pipeline llm's cost cap: 24.48/h of 30.00/h used (binds: keeps it off frankfurt, which scores "
        "higher: it would take 40.48/h there, the cap leaves it 30.00/h)",
    ]
    quotas = compiled_in(QUOTAS)
    assert explain(quotas.model, quotas.placement, "chat/evaluate").caps == (
        "team prod's a100 quota: 8 of 8 used", "team prod's h100 quota: 2 of 8 used")


@pytest.mark.parametrize("case", ["team-quotas", "cost-cap-trades-score", "error-team-quota", "error-pipeline-budget"])
def test_the_golden_caps_hold_on_the_large_path(case: str) -> None:
    """Every cap case on the large path: a placement the verifier accepts (``place`` checks),
    with the same objective, or the same refusal."""
    model = check_policies(load_policy_sources(
        [(p, t.encode()) for p, t in sorted(read_policies(CASES / case / "policies").items())], "test"))
    try:
        exact = place(model)
    except PlacementError as error:
        with pytest.raises(PlacementError) as large:
            place(model, large=0)
        assert large.value.reasons == error.reasons
    else:
        assert place(model, large=0).objective == pytest.approx(exact.objective, rel=1e-6)


def test_a_team_selecting_nothing_by_a_typo_is_an_error() -> None:
    """A misspelt namespace or label would leave the team's caps capping nothing."""
    policies = read_policies(QUOTAS / "policies")
    policies["policies/platform.yaml"] = policies["policies/platform.yaml"].replace(
        "namespaces: [research]", "namespaces: [reserch]").replace("{team: prod}", "{team: prd}")
    with pytest.raises(PolicyError) as error:
        compile_texts(policies)
    assert [(d.line, d.column, d.field, d.message, d.hint) for d in error.value.diagnostics] == [
        (8, 18, "spec.teams[0].namespaces[0]", "no pipeline the platform governs runs in namespace 'reserch'",
         "did you mean 'research'?"),
        (12, 23, "spec.teams[1].pipelineSelector", "no pipeline the platform governs carries these labels",
         "a pipeline is the team's when its metadata.labels carry every label given here"),
    ]


def test_team_names_are_unique_over_the_platforms() -> None:
    """Each team names its queue on every cluster (fleetc-team-<name>): two platforms' teams of
    one name would render two queues of that name."""
    policies = read_policies(QUOTAS / "policies")
    policies["policies/other.yaml"] = (
        "apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPlatform\nmetadata:\n  name: zz-other\nspec:\n"
        "  pipelines: []\n  teams:\n  - name: research\n    gpuQuota: {h100: 8}\n")
    with pytest.raises(PolicyError) as error:
        compile_texts(policies)
    assert [(d.path, d.line, d.column, d.field, d.message) for d in error.value.diagnostics] == [
        ("policies/other.yaml", 8, 5, "spec.teams[0]", "team 'research' selects no pipelines"),
        ("policies/platform.yaml", 7, 11, "spec.teams[0].name",
         "team name 'research' is also a team of AIGCPlatform 'zz-other'"),
    ]


def test_a_quota_binds_on_the_ha_set_even_where_another_cluster_has_room() -> None:
    """A serving stage must run on each cluster of its HA set: a quota that leaves one of them
    too little binds, though a cluster off the quota (here the t4 one) has room."""
    serve = make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, replicas=4, min_replicas_per_cluster=2)
    model = make_fleet((make_cluster("a", gpu_type="h100", gpus=16), make_cluster("b", gpu_type="t4", gpus=16)),
                       (make_stage("pretrain", gpus=8, gpu_type="h100"), serve),
                       platforms=(make_platform("a", ("b",)),), teams=(team(quota=(("h100", 9),)),))
    [fix] = fixes(model, {"llm/pretrain": {"a": 1}}, ["llm/serve"])
    assert fix.text == ("llm/serve: a cap binds: raise team research's h100 quota by 1 "
                        "(platform.yaml spec.teams[0].gpuQuota) (for a)")
    raised = replace(model, teams=(team(quota=(("h100", 10),)),))
    assert sorted((p.stage, a.cluster, a.replicas) for p in place(raised).stages for a in p.assignments) == [
        ("llm/pretrain", "a", 1), ("llm/serve", "a", 2), ("llm/serve", "b", 2)]


def test_a_quota_refusal_counts_a_throughput_stage_on_the_type_it_would_run_on() -> None:
    """4 GPUs per replica on h100, 8 on a100: a 6-GPU a100 quota keeps it off the a100 cluster,
    and the refusal says so (counted at the h100 figure, it would seem to fit)."""
    sweep = make_stage("sweep", gpus=4, throughput_gpus={"h100": 4, "a100": 8})
    model = make_fleet((make_cluster("c", gpus=16, gpu_type="a100"),), (sweep,),
                       teams=(team(quota=(("a100", 6),)),))
    assert rules.quota_slots(model, sweep, model.clusters[0], 1) == 8 * rules.slots_per_gpu(model)
    with pytest.raises(PlacementError) as error:
        place(model)
    assert error.value.reasons == (
        "0/1 clusters fit llm/sweep: 1 is over team research's a100 quota (6 of 6 left)",)


@st.composite
def capped_fleets(draw: st.DrawFn) -> tuple[FleetModel, list[tuple[int, int, int]]]:
    """A small fleet under a team's quotas and cost cap and a pipeline budget (time-sliced GPUs,
    device plugins configured or not, stages asking for throughput), and some replicas placed
    as (stage, cluster, replicas) indices."""
    clusters = tuple(make_cluster(f"c{i}", gpu_type=draw(st.sampled_from(["a100", "h100"])), gpus=16,
                                  gpu_hour_cost=draw(st.sampled_from([1.0, 2.5])),
                                  cpu_hour_cost=draw(st.sampled_from([0.0, 0.5])), memory_gib_hour_cost=0.0,
                                  device_plugin_configured=draw(st.booleans()))
                     for i in range(draw(st.integers(1, 3))))
    stages = tuple(make_stage(f"s{i}", pipeline=draw(st.sampled_from(["llm", "ops"])),
                              type=draw(st.sampled_from([StageType.TRAINING, StageType.DEPLOYMENT])),
                              gpus=draw(st.sampled_from([0, 1, 2])), cores=draw(st.sampled_from([1, 3])),
                              throughput_gpus=draw(st.sampled_from(THROUGHPUT_CHOICES)),
                              shared_gpu=draw(st.booleans()))
                   for i in range(draw(st.integers(1, 4))))
    quota = tuple((gpu_type, draw(st.integers(0, 4))) for gpu_type in ("a100", "h100") if draw(st.booleans()))
    teams = (team(quota=quota, cost=draw(st.sampled_from([None, 4.0, 10.0]))),)
    budgets = (PipelineBudget("ops", draw(st.sampled_from([3.0, 5.0])), Source("ops.yaml", "spec")),)
    model = make_fleet(clusters, stages, teams=teams, budgets=budgets,
                       gpu_policy=make_gpu_policy(time_slicing=draw(st.sampled_from([1, 2, 4]))))
    where = draw(st.lists(st.tuples(st.integers(0, len(stages) - 1), st.integers(0, len(clusters) - 1),
                                    st.integers(1, 2)), max_size=3))
    return model, where


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(capped_fleets())
def test_what_a_cap_leaves_is_what_the_ledger_admits(fleet: tuple[FleetModel, list[tuple[int, int, int]]]) -> None:
    """:func:`rules.cap_room`, which the refusal's reasons, the fixes and explain read, finds a
    cap short exactly when the verifier's count (:meth:`rules.Ledger.within_caps`) finds it
    exceeded with the replicas added, for one to four replicas of each stage on each cluster
    (exact fits and one over included)."""
    model, where = fleet
    placed = [(model.stages[s], model.clusters[c], n) for s, c, n in where]
    ledger = rules.Ledger(model, ((stage, cluster.name, n) for stage, cluster, n in placed))
    if not ledger.within_caps():
        return
    for stage, cluster, replicas in itertools.product(model.stages, model.clusters, range(1, 5)):
        short = [room for cap in ledger.caps
                 for room in rules.cap_room(model, cap, rules.cap_usage(model, cap, placed), stage, cluster, replicas)
                 if room.short > 0]
        ledger.add(stage, cluster.name, replicas)
        assert bool(short) == (not ledger.within_caps())
        ledger.add(stage, cluster.name, -replicas)


def assert_the_repair_reads_the_programs_bits(problem: Problem) -> None:
    """:meth:`_Caps.coefficients` of all the pairs of ``problem`` at once (the master LP's, each
    cap's rows counted only on the pairs they cover) and :meth:`_Caps.per_replica` of each pair
    (the repair's) are bit for bit the problem's count of every pair where the row covers it,
    0 elsewhere."""
    caps = colgen.large._Caps.of(problem)
    s, c = (a.ravel() for a in np.indices((len(problem.stages), len(problem.clusters))))
    for row in range(len(caps.bound)):
        count = problem.cost_at(s, c) if caps.cost[row] else problem.quota_at(s, c)
        expected = np.where(caps.members[row, s] & caps.on[row, c], count, 0.0)
        assert caps.coefficients(row, s, c).view(np.uint64).tolist() == expected.view(np.uint64).tolist(), row
        one_by_one = np.array([caps.per_replica(row, i, j) for i, j in zip(s.tolist(), c.tolist(), strict=True)])
        assert one_by_one.view(np.uint64).tolist() == expected.view(np.uint64).tolist(), row


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(capped_fleets())
def test_the_repair_counts_each_pair_as_the_program_does(fleet: tuple[FleetModel, list[tuple[int, int, int]]]) -> None:
    """The large path's repair reads a pair's cap use one at a time (:meth:`_Caps.per_replica`):
    it is the program's coefficient for that row, quota slots and cost micros alike, whether
    the cluster matters (throughput, whole GPUs where the plugin does not slice) or not."""
    model, _ = fleet
    for problem in problems(model, score_matrix(model), {})[0]:
        assert_the_repair_reads_the_programs_bits(problem)


def test_the_repair_reads_the_programs_bits_where_each_pair_counts_its_own() -> None:
    """The same on a generated fleet under team quotas and cost caps, whose throughput stages
    count their GPUs on each cluster's type (:attr:`Problem.counts_per_pair`): the repair's
    scalar arithmetic there is the program's vectorised one."""
    spec = Spec(clusters=8, stages=60, load=0.9, seed=2, platform=True, quotas=0.8, budget=1.1)
    model = model_of(generate(spec).files)
    (problem,), _ = problems(model, score_matrix(model), {})
    assert problem.counts_per_pair and problem.caps
    assert_the_repair_reads_the_programs_bits(problem)


@settings(max_examples=60, deadline=None)
@given(capped_fleets())
def test_the_repairs_room_counts_the_caps_as_the_program_does(
        fleet: tuple[FleetModel, list[tuple[int, int, int]]]) -> None:
    """What the repair's room lets fit (:meth:`_Room.fits`: the caps first, each pair's cap
    rows remembered) is what the capacity and every cap row leave, counted from the program's
    coefficients of the pair and what the placed replicas take of each row, beside any placement
    (caps already exceeded included)."""
    model, where = fleet
    for problem in problems(model, score_matrix(model), {})[0]:
        large = colgen.large._large(problem)
        replicas_at = np.zeros((len(problem.stages), len(problem.clusters)), dtype=int)
        for s, c, n in where:
            if s < len(problem.stages) and c < len(problem.clusters):
                replicas_at[s, c] += n
        per_replica = large.coefficients / large.replicas
        room = colgen.room._Room(large.capacity, colgen.room._taken(large, replicas_at), large.slots, large.unit,
                                 large.headroom, per_replica, replicas_at, large.caps)
        caps, capped = large.caps, large.caps.used(replicas_at)
        for s, c in itertools.product(range(len(problem.stages)), range(len(problem.clusters))):
            limits = [room.capacity_fits(c, per_replica[:, s])]
            for row in range(len(caps.bound)):
                use = float(caps.coefficients(row, np.array([s]), np.array([c]))[0])
                if use > 0:
                    limits.append(int((caps.bound[row] - capped[row]) // use))
            assert room.fits(c, s) == max(0, min(limits)), (s, c)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(capped_fleets())
def test_the_repair_skips_only_moves_that_cannot_free_a_cap(
        fleet: tuple[FleetModel, list[tuple[int, int, int]]]) -> None:
    """Where a cap keeps a left-out stage off every cluster, the eviction repair tries only the
    groups holding a stage under one of its caps (:meth:`_Room.capped_everywhere`): the large
    path places exactly what it places when it tries every group."""
    model, _ = fleet
    skipping = place(model, large=0, allow_unplaced=True)
    with mock.patch.object(colgen.room._Room, "capped_everywhere", lambda *_: False):
        trying = place(model, large=0, allow_unplaced=True)
    assert skipping.stages == trying.stages


def test_the_repair_moves_a_stage_under_the_same_quota_to_free_it() -> None:
    """A t4 stage kept out by its team's t4 quota alone: the eviction repair moves the team's
    sweep, which may run on a100, off the t4 cluster, and the freed quota takes the stage."""
    clusters = (make_cluster("a", gpus=8, gpu_type="a100"), make_cluster("t", gpus=8, gpu_type="t4"))
    stages = (make_stage("sweep", gpus=4, gpu_types=("t4", "a100")), make_stage("serve", gpus=4, gpu_type="t4"))
    model = make_fleet(clusters, stages, teams=(team(quota=(("t4", 4), ("a100", 4))),))
    (problem,), _ = problems(model, score_matrix(model), {})
    large = colgen.large._large(problem)
    sweep, serve = (problem.stages.index(s) for s in stages)
    replicas_at = np.zeros((2, 2), dtype=np.int32)
    replicas_at[sweep, 1] = 1  # the sweep holds the team's t4 quota
    assert colgen.room._room(large, replicas_at).capped_everywhere(serve, np.array([1]))
    colgen.repair._repair(problem, large, replicas_at)
    assert replicas_at[sweep].tolist() == [1, 0] and replicas_at[serve].tolist() == [0, 1]


def test_the_refusal_the_fix_and_explain_read_one_fleet_wide_cap_check() -> None:
    """A quota is fleet-wide: what the team runs on cluster a counts against a serving stage that
    may only run on cluster b (another component). The refusal's reason, the fix and explain read
    one check (rules.cap_shortfalls), so they agree on what the stage needs there: its
    per-cluster minimum (2 replicas, 2 GPUs), not all 4 of its replicas."""
    serve = make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, replicas=4, min_replicas_per_cluster=2,
                       gpu_type="h100", jurisdiction="eu")
    model = make_fleet((make_cluster("a", gpu_type="h100", gpus=16, jurisdiction="us"),
                        make_cluster("b", gpu_type="h100", gpus=16, jurisdiction="eu")),
                       (make_stage("pretrain", gpus=8, gpu_type="h100", jurisdiction="us"), serve),
                       teams=(team(quota=(("h100", 9),)),))
    assert len(components(score_matrix(model).allowed)) == 2
    clusters = {c.name: c for c in model.clusters}
    capped = rules.caps_used(model, [(model.stages[0], clusters["a"], 1)])
    [short] = rules.cap_shortfalls(model, capped, serve, clusters["b"])
    assert (short.room.takes, short.room.left) == (2 * rules.slots_per_gpu(model), 1 * rules.slots_per_gpu(model))
    assert short.words(model) == "over team research's h100 quota (1 of 9 left)"
    # one cluster's share alone would leave room: the check must count the whole fleet
    assert rules.cap_shortfalls(model, rules.caps_used(model, []), serve, clusters["b"]) == []
    with pytest.raises(PlacementError) as refused:
        place(model)
    assert "1 is over team research's h100 quota (1 of 9 left)" in str(refused.value)
    [fix] = fixes(model, {"llm/pretrain": {"a": 1}}, ["llm/serve"])
    assert fix.text == "llm/serve: a cap binds: raise team research's h100 quota by 1 (platform.yaml " \
                       "spec.teams[0].gpuQuota)"
    explanation = explain(model, Placement((StagePlacement("llm/pretrain", (Assignment("a", 1, 8),), 0.5),
                                            StagePlacement("llm/serve", (), 0.0, "left out")), 0.5, 0.5, "milp"),
                          "llm/serve")
    assert explanation.caps == ("team research's h100 quota: 8 of 9 used (binds: keeps it off b, which it may "
                                "use: it would take 2 there, the cap leaves it 1)",)
