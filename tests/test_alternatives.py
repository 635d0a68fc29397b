"""GPU alternatives (``gpuType: [h100, a100]``): the stage runs on one of its types, the
optimizer prefers earlier ones, and placement.yaml, explain and the diff say which it got and why.

The golden case ``tests/cases/gpu-alternatives`` holds the placement.yaml of the fallback;
here the choice is held to the rules on generated fleets, and explain and the diff to exact
text on that case's policies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import SOURCE, make_cluster, make_fleet, make_stage
from support.corpus import CASES

from fleetc.compiler import Options, compile_fleet
from fleetc.errors import PlacementError
from fleetc.model import Assignment, StageType, Team
from fleetc.placement.alternatives import choices
from fleetc.placement.explain import explain
from fleetc.placement.explain import format_text as explain_text
from fleetc.placement.optimize import place
from fleetc.placement.scoring import PREFERENCE_PENALTY, score_matrix
from fleetc.placement.verify import verify
from fleetc.report import as_json, compare, format_markdown, format_text, snapshot, snapshot_of_output
from fleetc.report.escape import words

CASE = CASES / "gpu-alternatives" / "policies"


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    order=st.sampled_from([("h100", "a100"), ("a100", "h100")]),
    kind=st.sampled_from([StageType.TRAINING, StageType.DEPLOYMENT]),
    replicas=st.integers(1, 3),
    gpus=st.sampled_from([1, 2, 4]),
    room=st.tuples(st.sampled_from([2, 4, 8, 16]), st.sampled_from([2, 4, 8, 16])),
)
def test_the_first_type_with_room_wins_between_equal_clusters(
        order: tuple[str, str], kind: StageType, replicas: int, gpus: int, room: tuple[int, int]) -> None:
    """Two clusters alike but for their GPU type: the stage runs where its first choice is
    whenever that has room for all of it, else on the second; never on a type it does not
    list, a gang on one type; placement.yaml's choice names the same."""
    clusters = tuple(make_cluster(name, gpu_type=name, gpus=n) for name, n in zip(("a100", "h100"), room, strict=True))
    stage = make_stage("s", type=kind, gpus=gpus, replicas=replicas, gpu_types=order)
    model = make_fleet(clusters, (stage,))
    scores = score_matrix(model)
    first, second = (model.clusters.index(next(c for c in model.clusters if c.gpu_type == t)) for t in order)
    if scores.allowed[0, first] and scores.allowed[0, second]:  # both hold one replica
        assert scores.total[0, second] == pytest.approx(scores.total[0, first] - PREFERENCE_PENALTY)
    need = gpus * replicas
    try:
        placement = place(model)
    except PlacementError:
        assert need > max(room) if kind is StageType.TRAINING else sum(n // gpus for n in room) < replicas
        return
    assert verify(model, placement) == []
    where = {model.cluster(a.cluster).gpu_type: a.replicas for a in placement.of(stage.key).assignments}
    assert set(where) <= set(order)
    if kind is StageType.TRAINING:
        assert len(where) == 1
    room_first = dict(zip(("a100", "h100"), room, strict=True))[order[0]]
    fits_first = room_first >= need
    if fits_first:
        assert where == {order[0]: replicas}
    elif kind is StageType.DEPLOYMENT:  # as many replicas on the first choice as it has room for
        assert where.get(order[0], 0) == room_first // gpus
    choice = choices(model, placement)[stage.key]
    assert choice.alternative == (1 if fits_first else 2)
    assert [p.gpu_type for p in choice.passed] == ([] if fits_first else [order[0]])


def _compile(tmp_path: Path, *, with_finetune: bool) -> Options:
    policies = tmp_path / "policies"
    shutil.copytree(CASE, policies, dirs_exist_ok=True)
    if not with_finetune:
        text = (policies / "pipeline.yaml").read_text()
        (policies / "pipeline.yaml").write_text(text[: text.index("  - name: finetune")])
    return Options(paths=(str(policies),), out=str(tmp_path / "out"), workdir=tmp_path)


def test_explain_names_the_alternative_and_why_not_the_first(tmp_path: Path) -> None:
    compiled = compile_fleet(_compile(tmp_path, with_finetune=True))
    text = explain_text(explain(compiled.model, compiled.placement, "llm/pretrain"))
    assert "    preference -0.1000 (a100 is alternative 2)" in text.splitlines()
    assert text.splitlines()[-3:-1] == [
        "chosen: gpu-a100",
        "GPU type: a100, alternative 2 of [h100, a100]; h100 not taken: gpu-h100 has no room for 2 replicas "
        "(would take 32 of its 16 usable GPUs)",
    ]


def test_diff_shows_the_type_chosen_before_and_after(tmp_path: Path) -> None:
    before = compile_fleet(_compile(tmp_path / "before", with_finetune=False))
    after = compile_fleet(_compile(tmp_path / "after", with_finetune=True))
    report = compare(snapshot(before.model, before.placement, before.files),
                     snapshot(after.model, after.placement, after.files), base_label="main", head_label="tree")
    assert report.gpu_choices == (("llm/pretrain", "h100, alternative 1 of [h100, a100]",
                                   "a100, alternative 2 of [h100, a100]; h100 not taken: gpu-h100 has no room "
                                   "for 2 replicas (would take 32 of its 16 usable GPUs)"),)
    text = format_text(report)
    assert ("GPU type of llm/pretrain:\n  before: h100, alternative 1 of [h100, a100]\n"
            "  now:    a100, alternative 2 of [h100, a100]; h100 not taken: gpu-h100 has no room for 2 replicas "
            "(would take 32 of its 16 usable GPUs)\n") in text
    assert as_json(report)["gpuChoices"] == [{"stage": "llm/pretrain", "before": report.gpu_choices[0][1],
                                              "after": report.gpu_choices[0][2]}]
    # in Markdown as prose, escaped (its brackets would otherwise start a link)
    assert f"- GPU type of `llm/pretrain`: {words(report.gpu_choices[0][1])} → {words(report.gpu_choices[0][2])}\n" \
        in format_markdown(report)
    assert "h100, alternative 1 of \\[h100, a100\\] → a100" in format_markdown(report)
    # A committed out/ tells the same from its placement.yaml alone.
    read_back = compare(snapshot_of_output(before.files, {}), snapshot_of_output(after.files, {}),
                        base_label="main", head_label="tree")
    assert read_back.gpu_choices == report.gpu_choices


# --- throughput: the GPU count follows the cluster's type ---------------------------------------


def test_throughput_takes_the_count_of_the_type_it_runs_on() -> None:
    """Throughput 4 is 2 h100 or 4 a100: an h100 cluster of 2 GPUs runs it (its per-pair
    count), though the stage's most (4) would not fit there; the assignment counts 2."""
    model = make_fleet((make_cluster("h", gpu_type="h100", gpus=2), make_cluster("a", gpu_type="a100", gpus=2)),
                       (make_stage("s", throughput_gpus={"a100": 4, "h100": 2}),))
    placement = place(model)
    assert placement.of("llm/s").assignments == (Assignment("h", 1, 2),)
    assert verify(model, placement) == []


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    room=st.tuples(st.sampled_from([2, 4, 8]), st.sampled_from([2, 4, 8])),
    replicas=st.integers(1, 3),
    kind=st.sampled_from([StageType.TRAINING, StageType.DEPLOYMENT]),
    large=st.sampled_from([0, 10**9]),
)
def test_throughput_placements_hold_on_both_paths(room: tuple[int, int], replicas: int, kind: StageType,
                                                  large: int) -> None:
    """Exact path and large path (column generation, which counts a throughput stage at its
    most GPUs): every placement passes the verifier with each pair's own count, its bound is
    not below its objective, and the exact path places whatever fits at the pairs' counts."""
    stages = (make_stage("t", type=kind, replicas=replicas, throughput_gpus={"h100": 2, "a100": 4}),
              make_stage("g", gpus=2, gpu_type="a100"))
    model = make_fleet((make_cluster("h", gpu_type="h100", gpus=room[0]),
                        make_cluster("a", gpu_type="a100", gpus=room[1])), stages)
    placement = place(model, large=large, allow_unplaced=True)
    assert verify(model, placement, allow_unplaced=True) == []
    assert placement.objective <= placement.bound + 1e-9
    for p in placement.stages:
        stage = model.stage(p.stage)
        for a in p.assignments:
            assert a.gpus == a.replicas * ({"h100": 2, "a100": 4}[model.cluster(a.cluster).gpu_type]
                                           if stage.name == "t" else 2)
    if large:
        # the exact path (large=10**9) places both gangs whenever they fit: t on h and g on a, or both on a
        both = (2 * replicas <= room[0] and 2 <= room[1]) or 4 * replicas + 2 <= room[1]
        if kind is StageType.TRAINING and both:
            assert all(p.assignments for p in placement.stages)


def test_diff_shows_the_count_a_throughput_stage_got(tmp_path: Path) -> None:
    """With room for both on the h100 cluster, sweep takes 4 h100; with room for one, 8 a100:
    the diff names the type and the count, from the compile and from placement.yaml alike."""
    compiled = []
    for side, h100s in (("before", "8"), ("after", "4")):
        policies = tmp_path / side / "policies"
        shutil.copytree(CASES / "gpu-throughput" / "policies", policies)
        fleet = policies / "fleet.yaml"
        fleet.write_text(fleet.read_text().replace('gpu-count: "4"', f'gpu-count: "{h100s}"'))
        compiled.append(compile_fleet(Options(paths=(str(policies),), out=str(tmp_path / side / "out"),
                                              workdir=tmp_path / side)))
    before, after = compiled
    report = compare(snapshot(before.model, before.placement, before.files),
                     snapshot(after.model, after.placement, after.files), base_label="main", head_label="tree")
    assert report.gpu_choices == (
        ("llm/sweep", "h100 x4 of [h100 x4, a100 x8]; a100 x8 not taken: gpu-a100 has room, but the stage "
                      "scores 0.8147 there against 0.8450 on gpu-h100",
         "a100 x8 of [h100 x4, a100 x8]; h100 x4 not taken: gpu-h100 has no room for 1 replica (would take 8 of "
         "its 4 usable GPUs)"),)
    read_back = compare(snapshot_of_output(before.files, {}), snapshot_of_output(after.files, {}),
                        base_label="main", head_label="tree")
    assert read_back.gpu_choices == report.gpu_choices
    assert (report.gpu_totals["h100"], report.gpu_totals["a100"]) == ((8, 4), (0, 8))


@pytest.mark.parametrize("large", [0, 10**9])
@pytest.mark.parametrize(("quota", "cap", "where"), [(1, None, "a"), (2, None, "h"), (8, 3.0, "h"), (8, 2.5, None)])
def test_team_caps_count_the_gpus_of_the_type_it_runs_on(large: int, quota: int, cap: float | None,
                                                          where: str | None) -> None:
    """Throughput 4 is 2 h100 (at 1.5/h) or 4 a100 (at 1.0/h): a team quota of 1 h100 keeps
    it off h100, one of 2 lets it on; a cost cap of 3.0/h lets the 2 h100 (3.0/h) run, 2.5/h
    leaves no placement (4 a100 cost 4.0/h). Both paths, and the verifier agrees."""
    team = Team("ml", "platform", ("llm",), (("h100", quota),), (), cap, SOURCE)
    model = make_fleet((make_cluster("h", gpu_type="h100", gpus=8, gpu_hour_cost=1.5, cpu_hour_cost=0.0,
                                     memory_gib_hour_cost=0.0),
                        make_cluster("a", gpu_type="a100", gpus=8, gpu_hour_cost=1.0, cpu_hour_cost=0.0,
                                     memory_gib_hour_cost=0.0)),
                       (make_stage("s", throughput_gpus={"h100": 2, "a100": 4}),), teams=(team,))
    placement = place(model, large=large, allow_unplaced=True)
    assert verify(model, placement, allow_unplaced=True) == []
    assert [a.cluster for a in placement.of("llm/s").assignments] == ([where] if where else [])
