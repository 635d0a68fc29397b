"""What would make it fit (:mod:`fleetc.placement.fixes`): the smallest change that places each
stage left out, in compile's error, the ``--allow-unplaced`` warnings and ``fleetc explain``."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from support.builders import make_cluster, make_fleet, make_platform, make_stage

from fleetc.cli import cli
from fleetc.model import Assignment, FleetModel, Placement, StagePlacement, StageType, Taint
from fleetc.placement.fixes import fixes
from fleetc.placement.verify import verify

CASE = Path(__file__).parent / "cases" / "error-what-would-fit" / "policies"

FINETUNE = ("llm/finetune: add 8 h100 to frankfurt (other stages take 16 of its 16 usable GPUs), or a new "
            "cluster in eu with 8 h100; or allow llm/finetune outside eu (it fits on virginia); or tolerate the "
            "taint dedicated=research:NoSchedule (it fits on paris)")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(CASE, tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_compile_error_allow_unplaced_and_explain_say_the_same_fix(project: Path) -> None:
    refused = run("compile", "--format", "json")
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["fixes"] == [FINETUNE]
    placed = run("compile", "--allow-unplaced")
    assert placed.exit_code == 0, placed.output
    assert f"  fix: {FINETUNE}" in placed.stderr.splitlines()
    checked = run("compile", "--allow-unplaced", "--check", "--format", "json")
    assert checked.exit_code == 0, checked.output
    summary = json.loads(checked.stdout)
    assert summary["fixes"] == [FINETUNE]
    explained = run("explain", "llm/finetune")
    assert explained.exit_code == 0, explained.output
    assert f"\nfix: {FINETUNE}\n" in explained.stdout
    assert json.loads(run("explain", "llm/finetune", "--format", "json").stdout)["fix"] == FINETUNE
    assert json.loads(run("explain", "llm/pretrain", "--format", "json").stdout)["fix"] == ""


def _placed_with(model: FleetModel, placed: dict[str, dict[str, int]]) -> Placement:
    return Placement(stages=tuple(
        StagePlacement(s.key, tuple(Assignment(c, n, n * s.gpus) for c, n in sorted(placed.get(s.key, {}).items())),
                       0.0) for s in model.stages), objective=0.0, bound=0.0, method="milp")


def test_the_gpus_to_add_are_the_fewest_the_verifier_accepts() -> None:
    """Computed, not guessed: with the GPUs the fix names the verifier accepts the stage there
    beside what is placed; with one fewer it does not (usable capacity after utilisation)."""
    busy = make_cluster("a", gpus=16, utilization=0.3)
    model = make_fleet((busy,), (make_stage("big", gpus=8, gpu_type="a100"), make_stage("small", gpus=4)))
    placed = {"llm/small": {"a": 1}}
    [fix] = fixes(model, placed, ["llm/big"])
    assert fix.text == ("llm/big: add 2 a100 to a (other stages take 4 of its 11 usable GPUs), "
                        "or a new cluster with 8 a100")
    both = {**placed, "llm/big": {"a": 1}}
    for added, problems in ((2, []), (1, ["a: 12 GPUs placed, capacity 11"])):
        grown = dataclasses.replace(model, clusters=(dataclasses.replace(busy, gpus=16 + added),))
        assert verify(grown, _placed_with(grown, both)) == problems


def test_the_ha_set_binds_when_one_of_its_clusters_may_not_run_the_stage() -> None:
    serve = make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, replicas=2)
    model = make_fleet(
        (make_cluster("a"), make_cluster("b", taints=(Taint("dedicated", "x", "NoSchedule"),))),
        (serve,), platforms=(make_platform("a", ("b",)),))
    [fix] = fixes(model, {}, ["llm/serve"])
    assert fix.text == ("llm/serve: the HA set binds: take b (untolerated taint dedicated=x:NoSchedule) out of "
                        "platform platform's multiCluster set (fleet.yaml), or admit the stage there")


def test_two_rules_on_every_cluster_leave_a_new_cluster_or_no_single_change() -> None:
    model = make_fleet((make_cluster("a", gpu_type="t4", cordoned=True),), (make_stage(gpu_type="h100"),))
    [fix] = fixes(model, {}, ["llm/train"])
    assert fix.text == "llm/train: add a new cluster with 8 h100"
    kept_off = make_cluster("a", cordoned=True, taints=(Taint("k", "v", "NoSchedule"),))
    cpu_only = dataclasses.replace(model, stages=(make_stage(gpus=0, cores=8),), clusters=(kept_off,))
    [fix] = fixes(cpu_only, {}, ["llm/train"])
    assert fix.text == ("llm/train: no single change places it: every cluster is kept off by two rules or more, "
                        "or taking it would leave a platform short of its failover headroom")
