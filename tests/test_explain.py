"""``fleetc explain``: the pure :func:`fleetc.placement.explain.explain` and its text and JSON forms."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.builders import make_cluster, make_fleet, make_stage

from fleetc.cli import cli
from fleetc.errors import UsageError
from fleetc.model import FleetModel
from fleetc.placement.explain import explain, find_stage, format_text
from fleetc.placement.optimize import place

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def model() -> FleetModel:
    return make_fleet(
        (
            make_cluster("a", energy_efficiency=0.9),
            make_cluster("b", gpu_type="h100"),
            make_cluster("c", energy_efficiency=0.4),
        ),
        (make_stage(gpu_type="a100"),),
    )


def test_explain_gives_each_cluster_its_verdict_and_the_margin(model: FleetModel) -> None:
    explanation = explain(model, place(model), "llm/train")
    a, b, c = explanation.clusters
    assert (b.allowed, b.reason, b.terms, b.total) == (False, "no a100", (), 0.0)
    assert [t.name for t in a.terms] == ["compute", "cost", "network", "energy"]
    assert [t.weight for t in a.terms] == [0.35, 0.25, 0.2, 0.2]
    for verdict in (a, c):
        assert sum(t.weighted for t in verdict.terms) == pytest.approx(verdict.total, abs=1e-5)
    assert a.terms[3].value == 0.9 and c.terms[3].value == 0.4
    assert (a.replicas, c.replicas) == (1, 0)
    assert explanation.chosen == ("a",)
    assert explanation.runner_up == "c"
    assert explanation.margin == pytest.approx(0.2 * (0.9 - 0.4))
    assert explanation.unplaced == ""


def test_explain_text(model: FleetModel) -> None:
    assert format_text(explain(model, place(model), "llm/train")) == "\n".join([
        "llm/train:",
        "  a: total 0.9400 <- 1 replica",
        "    compute  1.0000 x 0.35 = 0.3500",
        "    cost     1.0000 x 0.25 = 0.2500",
        "    network  0.8000 x 0.20 = 0.1600",
        "    energy   0.9000 x 0.20 = 0.1800",
        "  b: filtered out: no a100",
        "  c: total 0.8400",
        "    compute  1.0000 x 0.35 = 0.3500",
        "    cost     1.0000 x 0.25 = 0.2500",
        "    network  0.8000 x 0.20 = 0.1600",
        "    energy   0.4000 x 0.20 = 0.0800",
        "chosen: a",
        "runner-up: c (margin +0.1000)",
    ])


def test_explain_says_why_a_better_scoring_cluster_did_not_get_the_stage(model: FleetModel) -> None:
    # The previous placement keeps it on c although a scores higher: moving gains less than the
    # move cost.
    sticky = dataclasses.replace(model, move_cost=0.5)
    previous = {"llm/train": {"c": 1}}
    explanation = explain(sticky, place(sticky, previous=previous), "llm/train", previous)
    assert (explanation.chosen, explanation.runner_up) == (("c",), "a")
    assert explanation.margin == pytest.approx(-0.1)
    assert format_text(explanation).splitlines()[-1] == (
        "runner-up: a (margin -0.1000: it scores higher; it has room, but the stage was on c in the "
        "previous placement, and moving gains 0.1000, no more than the move cost (0.5))")


def test_explain_says_when_a_better_scoring_cluster_is_full(model: FleetModel) -> None:
    # Two 8-GPU gangs on a's and c's 8 a100 each: the second-best stage gets c, and a is full.
    two = dataclasses.replace(model, stages=(make_stage("big", gpu_type="a100"), make_stage("small", gpus=8,
                                                                                          gpu_type="a100")))
    placement = place(two)
    loser = next(p.stage for p in placement.stages if p.assignments[0].cluster == "c")
    explanation = explain(two, placement, loser)
    assert (explanation.chosen, explanation.runner_up) == (("c",), "a")
    assert explanation.runner_up_lost == ("moving the stage there breaks a hard constraint "
                                          "(a: 16 GPUs placed, capacity 8)")


def test_explain_says_when_a_better_scoring_cluster_had_room(model: FleetModel) -> None:
    # A placement on c, with a free: a solver stopping short of the optimum could leave that.
    optimal = place(model)
    on_c = dataclasses.replace(optimal, stages=tuple(
        dataclasses.replace(p, assignments=(dataclasses.replace(p.assignments[0], cluster="c"),), score=0.84)
        for p in optimal.stages), objective=optimal.objective - 0.01, optimal=False)
    assert on_c.gap > 0
    explanation = explain(model, on_c, "llm/train")
    assert explanation.runner_up_lost == (f"it has room, but the placement stops {on_c.gap:.2%} short of the "
                                          "proven bound and this stage is part of that")
    # Had the previous placement put it on c too, a move cost below what moving gains (0.1)
    # would not have kept it there either.
    cheap = dataclasses.replace(model, move_cost=0.05)
    assert explain(cheap, on_c, "llm/train", {"llm/train": {"c": 1}}).runner_up_lost == explanation.runner_up_lost


def test_explain_an_unplaced_stage() -> None:
    model = make_fleet((make_cluster(cordoned=True),), (make_stage(),))
    explanation = explain(model, place(model, allow_unplaced=True), "llm/train")
    assert (explanation.chosen, explanation.runner_up, explanation.margin) == ((), None, None)
    assert format_text(explanation).splitlines()[-1] == "not placed: 0/1 clusters fit llm/train: 1 is cordoned"


def test_find_stage_suggests_the_closest_name(model: FleetModel) -> None:
    assert find_stage(model, "llm/train") == "llm/train"
    with pytest.raises(UsageError) as raised:
        find_stage(model, "llm/trian")
    assert str(raised.value) == "no stage 'llm/trian' (expected PIPELINE/STAGE); did you mean 'llm/train'?"


def test_cli_explain_text_json_and_unknown_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    text = runner.invoke(cli, ["explain", "llm-chinese-training/model-training"])
    assert text.exit_code == 0, text.output
    assert "  edge-cluster-factory: filtered out: no GPUs" in text.output
    assert "chosen: gpu-cluster-huawei" in text.output
    data = json.loads(runner.invoke(cli, ["explain", "llm-chinese-training/model-training", "--format", "json"]).stdout)
    assert data["chosen"] == ["gpu-cluster-huawei"]
    assert [c["cluster"] for c in data["clusters"]] == [
        "edge-cluster-factory", "gpu-cluster-huawei", "inference-cluster-aliyun"
    ]
    unknown = runner.invoke(cli, ["explain", "llm-chinese-training/model-trainin"])
    assert unknown.exit_code == 2
    assert "did you mean 'llm-chinese-training/model-training'?" in unknown.stderr


def test_cli_explain_takes_the_drain_the_placement_was_compiled_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """explain --drain explains a placement compiled with --drain (the drained cluster filtered
    out); without it, or with another, the placement is stale and the error says what to run."""
    shutil.copytree(ROOT / "tests" / "cases" / "degraded-serving" / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["compile", "--drain", "a"]).exit_code == 0
    drained = runner.invoke(cli, ["explain", "llm/serve", "--drain", "a"])
    assert drained.exit_code == 0, drained.output
    assert drained.stdout.startswith("llm/serve:\n  a: filtered out: drained\n  b: total 0.8170 <- 4 replicas\n")
    assert drained.stdout.endswith("chosen: b, d\nrunner-up: none (every allowed cluster runs it)\n")
    assert "\ndrained:\n  - a\n" in (tmp_path / "out" / "placement.yaml").read_text()  # it records the drain
    stale = ("error: cannot explain: out/placement.yaml was compiled with --drain a, this explain runs {}; give "
             "explain --drain a to explain it, or run `fleetc compile{}` first\n")
    plain = runner.invoke(cli, ["explain", "llm/serve"])
    assert (plain.exit_code, plain.stderr) == (1, stale.format("without --drain", ""))
    other = runner.invoke(cli, ["explain", "llm/serve", "--drain", "b"])
    assert (other.exit_code, other.stderr) == (1, stale.format("with --drain b", " --drain b"))
    check = runner.invoke(cli, ["compile", "--check"])
    assert check.exit_code == 1
    assert check.stderr.splitlines()[-1].endswith(
        "; it was compiled with --drain a and this check runs without --drain "
        "(`fleetc compile --check --drain a` checks that compile)")
    assert runner.invoke(cli, ["compile", "--check", "--drain", "a"]).exit_code == 0
    unknown = runner.invoke(cli, ["explain", "llm/serve", "--drain", "nope"])
    assert (unknown.exit_code, unknown.stderr) == (2, "error: --drain nope: no cluster of that name in Fleet 'demo' "
                                                      "(policies/fleet.yaml); its clusters: a, b, c, d\n")
