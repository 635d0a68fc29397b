"""Failure simulation: ``--drain CLUSTER`` and ``cordoned: true`` compile as if a cluster were lost.

Each cluster of the bundled example is drained in turn. Either every stage is placed again within
the hard constraints (the independent verifier agrees, and the drained cluster gets no folder
under out/), or the compile fails naming the exact shortage. The bundled platform serves
active-active on two clusters (``multiCluster``): a drained one drops out of that set with a
warning and serving goes on on the other; the same is done without the platform.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fleetc.cli import cli
from fleetc.compiler import Options, compile_policies, load_policies
from fleetc.model import Assignment, StagePlacement
from fleetc.placement.previous import parse_previous
from fleetc.placement.verify import verify

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ["edge-cluster-factory", "gpu-cluster-huawei", "inference-cluster-aliyun"]
HEADER = "error: no placement satisfies every hard constraint:\n"


NO_A100 = "1 is drained, 1 has no GPUs, 1 has no a100\n"


FINETUNING = f"  0/3 clusters fit customer-service-assistant/lora-finetuning: {NO_A100}"
TRAINING = f"  0/3 clusters fit llm-chinese-training/model-training: {NO_A100}"
#: The last line counts the stages refused (issue 28).
REFUSED = "error: 2 of 7 stages refused, nothing written (--allow-unplaced renders the 5 that fit)\n"

#: scenario -> drained cluster -> None (everything placed again) or the exact error output.
EXPECTED: dict[str, dict[str, str | None]] = {
    "bundled": {
        "edge-cluster-factory": None,
        # A drained multiCluster member drops out of the active-active set: only the work that
        # needs its a100s is short, serving goes on on the surviving cluster.
        "gpu-cluster-huawei": HEADER + FINETUNING + TRAINING + REFUSED,
        "inference-cluster-aliyun": None,
    },
    "without-platform": {
        "edge-cluster-factory": None,
        "gpu-cluster-huawei": HEADER + FINETUNING + TRAINING + REFUSED,
        "inference-cluster-aliyun": None,
    },
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def compile_here(*args: str) -> Result:
    return CliRunner().invoke(cli, ["compile", "policies", "--out", "out", *args])


def running(out: Path) -> list[str]:
    """The clusters of a compiled output that run something (every Fleet cluster has a folder;
    one that runs nothing has a workloads layer that lists nothing)."""
    return sorted(folder.name for folder in (out / "clusters").iterdir()
                  if "resources: []" not in (folder / "workloads" / "kustomization.yaml").read_text())


def errors_only(stderr: str) -> str:
    """stderr without warnings (they describe the policies, not the drain) and fix lines
    (tests/test_fixes.py checks those)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(("warning: ", "  fix: ")))


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
@pytest.mark.parametrize("drained", CLUSTERS)
def test_draining_each_cluster_replaces_its_work_or_names_the_shortage(
        project: Path, scenario: str, drained: str) -> None:
    if scenario == "without-platform":
        (project / "policies" / "aigc-platform.yaml").unlink()
    result = compile_here("--drain", drained)
    expected = EXPECTED[scenario][drained]
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if expected is not None:
        assert result.exit_code == 1, result.output
        assert errors_only(result.stderr) == expected
        assert not (project / "out").exists()
        return
    assert result.exit_code == 0, result.output
    clusters = running(project / "out")
    assert drained not in clusters and clusters
    assert (project / "out" / "clusters" / drained / "kustomization.yaml").is_file()  # emptied, so pruned
    compiled = compile_policies(load_policies(["policies"]), Options(drain=(drained,)))
    assert verify(compiled.model, compiled.placement) == []
    assert len(compiled.placement.stages) == len(compiled.model.stages) == 7
    assert all(a.cluster != drained for s in compiled.placement.stages for a in s.assignments)


def test_a_cordoned_cluster_in_the_fleet_compiles_like_a_drained_one(project: Path) -> None:
    drained = compile_here("--drain", "edge-cluster-factory", "--out", "drained")
    fleet = project / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace(
        "  - name: edge-cluster-factory\n", "  - name: edge-cluster-factory\n    cordoned: true\n"))
    cordoned = compile_here("--out", "cordoned")
    assert drained.exit_code == cordoned.exit_code == 0, drained.output + cordoned.output
    def report(out: str) -> list[str]:  # the inputs differ (a flag, a policy field): their digest too
        return [line for line in (project / out / "placement.yaml").read_text().splitlines()
                if not line.startswith("inputs: ")]

    # placement.yaml records the drain (a drained compile is explained and checked with it)
    assert report("cordoned") == [line for line in report("drained")
                                  if line not in ("drained:", "  - edge-cluster-factory")]
    assert "edge-cluster-factory" not in running(project / "cordoned")


def test_drain_is_repeatable(project: Path) -> None:
    (project / "policies" / "aigc-platform.yaml").unlink()
    result = compile_here("--drain", "edge-cluster-factory", "--drain", "inference-cluster-aliyun")
    assert result.exit_code == 0, result.output
    assert running(project / "out") == ["gpu-cluster-huawei"]


def test_draining_an_unknown_cluster_is_a_usage_error(project: Path) -> None:
    result = compile_here("--drain", "gpu-cluster-huawai")
    assert result.exit_code == 2
    assert result.stderr == ("error: --drain gpu-cluster-huawai: no cluster of that name in Fleet "
                             "'aigc-platform' (policies/fleet.yaml); did you mean 'gpu-cluster-huawei'?\n")
    assert not (project / "out").exists()
    far = compile_here("--drain", "eu-t5")
    assert far.exit_code == 2
    assert far.stderr == ("error: --drain eu-t5: no cluster of that name in Fleet 'aigc-platform' "
                          "(policies/fleet.yaml); its clusters: gpu-cluster-huawei, "
                          "inference-cluster-aliyun, edge-cluster-factory\n")


def test_a_drain_leaves_the_previous_out_alone_when_it_fails(project: Path) -> None:
    assert compile_here().exit_code == 0
    before = {p: p.read_bytes() for p in sorted((project / "out").rglob("*")) if p.is_file()}
    result = compile_here("--drain", "gpu-cluster-huawei")
    assert result.exit_code == 1
    assert {p: p.read_bytes() for p in sorted((project / "out").rglob("*")) if p.is_file()} == before


DEGRADED = ("warning: policies/aigc-platform.yaml:20:9: spec.multiCluster.secondaryClusters[0]: serving of "
            "aigc-platform-cn runs degraded: gpu-cluster-huawei is {state}; it serves active-active on "
            "inference-cluster-aliyun\n")


def test_a_drained_multicluster_member_drops_out_and_serving_goes_on(project: Path) -> None:
    result = compile_here("--drain", "inference-cluster-aliyun")
    assert result.exit_code == 0, result.output
    assert ("warning: policies/aigc-platform.yaml:18:5: spec.multiCluster.primaryCluster: serving of "
            "aigc-platform-cn runs degraded: inference-cluster-aliyun is drained; it serves active-active "
            "on gpu-cluster-huawei\n") in result.stderr
    compiled = compile_policies(load_policies(["policies"]), Options(drain=("inference-cluster-aliyun",)))
    for key in ("customer-service-assistant/assistant-serving", "llm-chinese-training/model-deployment"):
        stage = compiled.model.stage(key)
        assert [(a.cluster, a.replicas) for a in compiled.placement.of(key).assignments] == [
            ("gpu-cluster-huawei", stage.replicas)]


def test_allow_unplaced_keeps_serving_on_the_surviving_cluster(project: Path) -> None:
    result = compile_here("--drain", "gpu-cluster-huawei", "--allow-unplaced")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("placed 5 of 7 stages, 2 left out (--allow-unplaced) (proven within ")
    assert DEGRADED.format(state="drained") in result.stderr
    placed = parse_previous((project / "out" / "placement.yaml").read_text()).clusters
    assert placed["customer-service-assistant/assistant-serving"] == {"inference-cluster-aliyun": 6}
    assert placed["llm-chinese-training/model-deployment"] == {"inference-cluster-aliyun": 4}


def test_a_cordoned_multicluster_member_is_said_cordoned(project: Path) -> None:
    fleet = project / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace(
        "  - name: gpu-cluster-huawei\n", "  - name: gpu-cluster-huawei\n    cordoned: true\n"))
    result = compile_here("--allow-unplaced")
    assert result.exit_code == 0, result.output
    assert DEGRADED.format(state="cordoned") in result.stderr


HEADROOM = ROOT / "tests" / "cases" / "failover-headroom" / "policies"


@pytest.mark.parametrize("lost", ["a", "b"])
def test_failover_headroom_holds_when_either_cluster_is_drained(lost: str) -> None:
    """The case's placement keeps room on each HA cluster for the other's serving replicas:
    draining either, every replica it served finds room where the placement left it."""
    compiled = compile_policies(load_policies([str(HEADROOM)]))
    serve = {a.cluster: a.replicas for a in compiled.placement.of("llm/serve").assignments}
    drained = compile_policies(load_policies([str(HEADROOM)]), Options(drain=(lost,)))
    assert verify(drained.model, drained.placement) == []
    after = {a.cluster: a.replicas for a in drained.placement.of("llm/serve").assignments}
    assert sum(after.values()) == 6 and lost not in after
    survivor = "b" if lost == "a" else "a"
    assert after.get(survivor, 0) >= serve.get(survivor, 0)


def test_the_verifier_refuses_a_placement_without_the_headroom() -> None:
    """Without the headroom rule the optimizer puts the training gang on b; with it, that
    placement is refused, naming the shortage."""
    compiled = compile_policies(load_policies([str(HEADROOM)]))
    crowded = dataclasses.replace(compiled.placement, stages=(
        StagePlacement("llm/train", (Assignment("b", 1, 4),), 0.9),
        StagePlacement("llm/serve", (Assignment("a", 2, 2), Assignment("b", 4, 4)), 0.9)))
    assert verify(compiled.model, crowded) == [
        "failover headroom of chat: losing a leaves 0 GPUs free on b for its 2",
    ]


DEGRADED_CASE = ROOT / "tests" / "cases" / "degraded-serving"


def test_degraded_serving_runs_the_replicas_that_fit_and_says_so(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Drained a leaves b and d room for 6 of the 10 serving replicas (the golden case compiles
    the same with its args file): serving runs those 6, at least the warm minimum of 2 on each
    surviving HA cluster, and the warning names the stage, the replicas asked and placed."""
    shutil.copytree(DEGRADED_CASE / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    whole = compile_here()
    assert whole.exit_code == 0, whole.output
    assert "runs degraded" not in whole.stderr
    result = compile_here("--drain", "a")
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "warning: policies/platform.yaml:6:3: spec.multiCluster: serving of chat runs degraded: llm/serve "
        "runs 6 of its 10 replicas (4 on b, 2 on d), no cluster it may use has room for more\n"
        "warning: policies/platform.yaml:7:5: spec.multiCluster.primaryCluster: serving of chat runs "
        "degraded: a is drained; it serves active-active on b, d\n")
    placed = parse_previous((tmp_path / "out" / "placement.yaml").read_text()).clusters
    assert placed["llm/serve"] == {"b": 4, "d": 2}
    compiled = compile_policies(load_policies(["policies"]), Options(drain=("a",)))
    assert verify(compiled.model, compiled.placement) == []


@pytest.mark.parametrize("large", [None, 0])  # the exact path, and the large path (column generation)
def test_both_paths_place_the_degraded_replicas_that_fit(large: int | None) -> None:
    compiled = compile_policies(load_policies([str(DEGRADED_CASE / "policies")]),
                                Options(drain=("a",), large=large))
    assert {a.cluster: a.replicas for a in compiled.placement.of("llm/serve").assignments} == {"b": 4, "d": 2}
    assert verify(compiled.model, compiled.placement) == []


def test_the_verifier_accepts_a_short_serving_stage_only_when_nothing_more_fits() -> None:
    """Running short is accepted for a degraded serving stage with no room left for one more
    replica, and for nothing weaker: room left, below the warm minimum of a surviving HA
    cluster, or a stage that is not degraded at all."""
    degraded = compile_policies(load_policies([str(DEGRADED_CASE / "policies")]), Options(drain=("a",)))
    model, placement = degraded.model, degraded.placement

    def serving(*assignments: Assignment) -> list[str]:
        return verify(model, dataclasses.replace(placement, stages=(
            StagePlacement("llm/serve", assignments, 0.8),)))

    assert serving(Assignment("b", 4, 4), Assignment("d", 2, 2)) == []
    assert serving(Assignment("b", 3, 3), Assignment("d", 2, 2)) == [
        "llm/serve: 5 of 10 replicas placed while it runs degraded, but b has room for 1 more"]
    assert serving(Assignment("b", 4, 4), Assignment("d", 1, 1)) == [
        "llm/serve on d: 1 replicas, below the minimum of 2",
        "llm/serve: 5 of 10 replicas placed while it runs degraded, but d has room for 1 more",
        "llm/serve: multiCluster needs at least 2 replicas on d, 1 placed",
    ]
    assert serving(Assignment("b", 3, 3)) == [
        "llm/serve: 3 replicas placed, the stage has 10 (at least 4 while it runs degraded)",
        "llm/serve: multiCluster needs at least 2 replicas on d, 0 placed",
    ]
    whole = compile_policies(load_policies([str(DEGRADED_CASE / "policies")]))
    assert verify(whole.model, dataclasses.replace(whole.placement, stages=(
        StagePlacement("llm/serve", (Assignment("a", 4, 4), Assignment("b", 2, 2), Assignment("d", 2, 2)),
                       0.8),))) == ["llm/serve: 8 replicas placed, the stage has 10"]


def headroom_fleet(clusters: int, trainings: int) -> str:
    """``clusters`` a100 clusters of 8 GPUs, the first two (fast network and cheap, so every
    stage scores best there) serving active-active with failover headroom; 6 serving replicas of 1 GPU, at
    least 3 per cluster, and ``trainings`` training gangs of 4 GPUs."""
    names = [f"gpu-{i:02d}" for i in range(clusters)]
    fleet = "".join(
        f"  - name: {name}\n    provider: aliyun\n    region: cn-east-1\n    attributes:\n"
        f"      gpu-type: a100\n      gpu-count: '8'\n      network-tier: {'high-performance' if i < 2 else 'low'}\n"
        + ("" if i < 2 else "    pricing:\n      gpuHour: 9.0\n")
        for i, name in enumerate(names))
    stages = "".join(f"  - name: train-{i:02d}\n    type: Training\n    resources:\n      gpu: 4\n      gpuType: a100\n"
                     for i in range(trainings))
    return (
        "apiVersion: fleet.kurator.dev/v1alpha1\nkind: Fleet\nmetadata:\n  name: demo\nspec:\n  clusters:\n" + fleet
        + "---\napiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: jobs\nspec:\n"
        "  stages:\n" + stages
        + "---\napiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: llm\nspec:\n  stages:\n"
        "  - name: serve\n    type: Deployment\n    replicas: 6\n    minReplicasPerCluster: 3\n"
        "    resources:\n      gpu: 1\n      gpuType: a100\n"
        "      sharedGPU: false\n"
        "---\napiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPlatform\nmetadata:\n  name: chat\nspec:\n"
        f"  multiCluster:\n    primaryCluster: {names[0]}\n    secondaryClusters: [{names[1]}]\n"
        "    failoverHeadroom: true\n")


@pytest.mark.parametrize("policies", ["case", "generated"])
def test_failover_headroom_holds_on_the_large_path(policies: str, tmp_path: Path) -> None:
    """Column generation, its rounding and its repair keep the failover headroom too (karmada#5179):
    the placement passes the verifier; losing either HA cluster, its serving replicas fit on the
    other one where the placement left everything else (the work that ran on the lost cluster
    aside); and ``--drain`` of either places every serving replica again."""
    folder, ha = HEADROOM, ["a", "b"]
    if policies == "generated":
        folder = tmp_path / "policies"
        folder.mkdir()
        (folder / "fleet.yaml").write_text(headroom_fleet(clusters=12, trainings=16))
        ha = ["gpu-00", "gpu-01"]
    compiled = compile_policies(load_policies([str(folder)]), Options(large=0))
    assert compiled.placement.method == "colgen-lp-round"
    assert verify(compiled.model, compiled.placement) == []
    assert set(ha) <= {a.cluster for a in compiled.placement.of("llm/serve").assignments}
    for lost in ha:
        survivor = ha[1 - ha.index(lost)]
        drained = compile_policies(load_policies([str(folder)]), Options(drain=(lost,), large=0))
        failed_over = dataclasses.replace(compiled.placement, stages=tuple(
            failover(p, lost, survivor) for p in compiled.placement.stages))
        assert verify(drained.model, failed_over, allow_unplaced=True) == []
        assert verify(drained.model, drained.placement) == []
        after = {a.cluster: a.replicas for a in drained.placement.of("llm/serve").assignments}
        assert sum(after.values()) == 6 and lost not in after


def failover(placement: StagePlacement, lost: str, survivor: str) -> StagePlacement:
    """``placement`` once ``lost`` is gone: serving replicas there move to ``survivor``, other
    work there is left out."""
    moved = {a.cluster: a.replicas for a in placement.assignments}
    gone = moved.pop(lost, 0)
    if placement.stage != "llm/serve":
        return dataclasses.replace(placement, assignments=() if gone else placement.assignments)
    moved[survivor] += gone
    return dataclasses.replace(placement, assignments=tuple(
        Assignment(cluster, replicas, replicas) for cluster, replicas in sorted(moved.items())))
