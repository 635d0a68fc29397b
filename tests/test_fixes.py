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


def _places(model: FleetModel, placed: dict[str, dict[str, int]]) -> set[str]:
    """The stages the optimizer places, re-solving ``model`` from ``placed``."""
    from fleetc.placement.optimize import place

    return {p.stage for p in place(model, previous=placed, allow_unplaced=True).stages if p.assignments}


def test_a_new_cluster_names_the_cores_and_memory_that_bind() -> None:
    """A new cluster gets 16 cores and 128Gi per GPU; a stage that needs more says so, and the
    verifier accepts it on that cluster, not on one with the defaults."""
    hungry = make_stage("hungry", gpus=8, gpu_type="a100", cores=200, memory_gib=1536, jurisdiction="EU")
    model = make_fleet((make_cluster("a", gpus=8, cores=64),), (hungry,))
    [fix] = fixes(model, {}, ["llm/hungry"])
    # its pod fits no node of a (64 cores, 512Gi): more capacity on a is no fix, a new cluster is
    assert fix.text == ("llm/hungry: add a new cluster in EU with 8 a100, "
                        "200 cores and 1536Gi memory (cores bind: 16 per GPU and memory binds: 128Gi per GPU "
                        "are not enough)")
    hungry_cpu = dataclasses.replace(hungry, memory_bytes=64 * 2**30)
    [fix] = fixes(dataclasses.replace(model, stages=(hungry_cpu,)), {}, ["llm/hungry"])
    assert fix.text.endswith("a new cluster in EU with 8 a100 and 200 cores (cores bind: 16 per GPU is not "
                             "enough)")
    new = make_cluster("new", gpus=8, cores=200, memory_gib=1536)
    for cores, problems in ((200, []), (128, ["llm/hungry on new: its pods (8 GPUs, 200 cores, 1536Gi) fit no node "
                                              "of the cluster (8 GPUs, 128 cores, 1536Gi each)",
                                              "new: 200000 CPU millicores placed, capacity 128000"])):
        grown = dataclasses.replace(model, clusters=(dataclasses.replace(new, cpu_millis=cores * 1000),))
        assert verify(grown, _placed_with(grown, {"llm/hungry": {"new": 1}})) == problems


def test_several_stages_left_out_get_a_joint_fix_re_solved_not_summed() -> None:
    """Alone each stage needs 4 more GPUs on a; together 4 + 4 is not enough (a's 4-GPU nodes
    hold pretrain's 12 beside them), 12 is; a new cluster of 12 takes pretrain and frees a."""
    a = make_cluster("a", gpus=16, cores=256, memory_gib=2048, gpus_per_node=4)
    stages = (make_stage("pretrain", gpus=12, gpu_type="h100"), make_stage("tune", gpus=8, gpu_type="h100"),
              make_stage("eval", gpus=8, gpu_type="h100"))
    # as resolve splits them for a's 4-GPU nodes (fleetc.nodefit)
    stages = tuple(dataclasses.replace(s, pods_per_replica=s.gpus // 4) for s in stages)
    model = make_fleet((dataclasses.replace(a, gpu_type="h100"),), stages)
    placed = {"llm/pretrain": {"a": 1}}
    found = fixes(model, placed, ["llm/tune", "llm/eval"])
    assert [f.text for f in found] == [
        "llm/tune: add 4 h100 to a (other stages take 12 of its 16 usable GPUs), or a new cluster with 8 h100",
        "llm/eval: add 4 h100 to a (other stages take 12 of its 16 usable GPUs), or a new cluster with 8 h100",
        "llm/tune, llm/eval together: add 12 h100 to a, or a new cluster with 12 h100 (re-solved: each places "
        "them all)"]
    assert found[-1].stage == "llm/tune, llm/eval"
    everything = {"llm/pretrain", "llm/tune", "llm/eval"}
    grown = [dataclasses.replace(model, clusters=(dataclasses.replace(model.clusters[0], gpus=16 + n),))
             for n in (8, 12)]
    assert [_places(m, placed) == everything for m in grown] == [False, True]  # the sum is not enough
    new = [dataclasses.replace(model, clusters=(*model.clusters, make_cluster("b", gpu_type="h100", gpus=n,
                                                                                 cores=16 * n, memory_gib=128 * n,
                                                                                 gpus_per_node=4)))
           for n in (8, 12)]
    assert [_places(m, placed) == everything for m in new] == [False, True]


def test_a_joint_fix_names_the_part_too_large_to_re_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The part a new cluster touches: a (the stages may run there), the new cluster, and x (on
    a), y and z: 6 pairs."""
    from fleetc.placement import local

    monkeypatch.setattr(local, "JOINT_COMPONENT_PAIRS", 5)
    model = make_fleet((make_cluster("a", gpus=8),), tuple(make_stage(n, gpus=8, gpu_type="a100")
                                                            for n in ("x", "y", "z")))
    assert fixes(model, {"llm/x": {"a": 1}}, ["llm/y", "llm/z"])[-1].text == (
        "llm/y, llm/z together: not re-solved: the stages and clusters they compete for make 6 stage-cluster "
        "pairs, more than the 5 fleetc re-solves for a joint fix")


def test_a_joint_fix_too_large_for_the_whole_budget_says_so_though_none_came_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The part of 6 pairs (a, the new cluster, x, y, z) re-solved twice takes 12 of a budget of
    10: the first group is refused for its size, not for joint fixes above it (there are none)."""
    from fleetc.placement import local

    monkeypatch.setattr(local, "JOINT_BUDGET_PAIRS", 10)
    monkeypatch.setattr(local, "JOINT_SOLVES", 2)
    model = make_fleet((make_cluster("a", gpus=8),), tuple(make_stage(n, gpus=8, gpu_type="a100")
                                                            for n in ("x", "y", "z")))
    assert fixes(model, {"llm/x": {"a": 1}}, ["llm/y", "llm/z"])[-1].text == (
        "llm/y, llm/z together: not re-solved: the stages and clusters they compete for make 6 stage-cluster "
        "pairs: the 2 re-solves of a joint fix would take 12, more than the 10 fleetc re-solves for the joint "
        "fixes of one compile")


def test_the_joint_fixes_share_a_budget_of_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups (a100 and h100), each on a part of 6 pairs (its cluster, the new one, and its
    three stages); the first group's re-solves take the budget, so the second is not re-solved,
    and says why."""
    from fleetc.placement import local

    monkeypatch.setattr(local, "JOINT_BUDGET_PAIRS", 10)  # one re-solve of a part of 6 pairs, not two
    monkeypatch.setattr(local, "JOINT_SOLVES", 1)
    model = make_fleet((make_cluster("a", gpus=8), make_cluster("h", gpus=8, gpu_type="h100")),
                       tuple(make_stage(n, gpus=8, gpu_type=t) for n, t in
                             (("x", "a100"), ("y", "a100"), ("z", "a100"), ("p", "h100"), ("q", "h100"),
                              ("r", "h100"))))
    found = fixes(model, {"llm/x": {"a": 1}, "llm/p": {"h": 1}}, ["llm/y", "llm/z", "llm/q", "llm/r"])
    assert [f.text for f in found[-2:]] == [
        "llm/y, llm/z together: add 16 a100 to a, or a new cluster with 16 a100 (re-solved: each places them all)",
        "llm/q, llm/r together: not re-solved: the joint fixes above left too little of the 10 stage-cluster "
        "pairs fleetc re-solves for the joint fixes of one compile"]
