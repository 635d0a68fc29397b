"""``fleetc diff --what-if``: the placement now against a scenario that changes no policy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fleetc import Options, Scenario, what_if_fleet
from fleetc.cli import cli

CASES = Path(__file__).parent / "cases"
NEW_PIPELINE = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata:
  name: extra
  namespace: ml
spec:
  stages:
  - name: tune
    type: Finetuning
    image: registry.example.com/llm/tune:1.0
    command: [python, -m, llm.tune]
    resources:
      gpu: 2
      gpuType: l4
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The two-cluster pipeline (train on a100, serve on l4), compiled to out/."""
    shutil.copytree(CASES / "two-cluster-pipeline" / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    assert run("compile").exit_code == 0
    return tmp_path


def summary(output: str) -> str:
    """The report without the object diffs (they are ``fleetc diff``'s, tested there)."""
    return output.split("\n--- ", 1)[0]


def test_a_lost_cluster_leaves_its_stage_unplaced_and_nothing_changes_on_disk(project: Path) -> None:
    before = tree(project)
    result = run("diff", "--what-if", "drain=serve-l4")
    assert result.exit_code == 0, result.output
    assert summary(result.stdout) == (
        "fleetc diff now -> what-if drain=serve-l4\n\n"
        "serve-l4: +0 ~0 -6 objects; GPUs 2 l4 -> 0; cost/h 2.40 -> 0.00\n"
        "  - llm/serve\n\n"
        "GPUs l4: 2 -> 0 (-2)\n\n"
        "unplaced in the scenario: 1 stage\n"
        "  llm/serve: 0/2 clusters fit llm/serve: 1 is cordoned, 1 has no l4\n"
        "cost/h: 51.36 -> 48.96 (-2.40)\n"
        "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 0/0\n")
    assert "-      - name: serve-l4\n" in result.stdout  # the placement.yaml diff follows
    assert tree(project) == before
    assert run("diff", "--what-if", "drain=serve-l4", "--exit-code").exit_code == 1


def test_fewer_gpus_and_another_price(project: Path) -> None:
    result = run("diff", "--what-if", "gpus=train-a100=8", "--what-if", "price=serve-l4=2")
    assert result.exit_code == 0, result.output
    assert summary(result.stdout) == (
        "fleetc diff now -> what-if gpus=train-a100=8 price=serve-l4=2\n\n"
        "serve-l4: +0 ~0 -0 objects; GPUs 2 l4 -> 2 l4; cost/h 2.40 -> 4.80\n"
        "train-a100: +0 ~0 -3 objects; GPUs 16 a100 -> 0; cost/h 48.96 -> 0.00\n"
        "  - llm/train\n\n"
        "GPUs a100: 16 -> 0 (-16)\n\n"
        "unplaced in the scenario: 1 stage\n"
        "  llm/train: 0/2 clusters fit llm/train: 1 has 8 of 8 free a100, 1 has no a100\n"
        "cost/h: 51.36 -> 4.80 (-46.56)\n"
        "headroom (free / capacity GPUs): a100 0/16 -> 8/8; l4 6/8 -> 6/8\n")


def test_more_gpus_of_another_type_in_json(project: Path) -> None:
    result = run("diff", "--what-if", "gpus=serve-l4:l4=16", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["changed"] is True  # the l4 cluster's Queue grows
    assert report["stages"] == []  # nothing moves
    assert report["whatIf"] == {
        "settings": ["gpus=serve-l4:l4=16"],
        "unplaced": [],
        "costPerHour": {"before": 51.36, "after": 51.36},
        "headroom": {"a100": {"capacity": {"before": 16, "after": 16}, "free": {"before": 0, "after": 0}},
                     "l4": {"capacity": {"before": 8, "after": 16}, "free": {"before": 6, "after": 14}}},
    }


def test_an_added_pipeline_is_placed_where_there_is_room(project: Path) -> None:
    (project / "extra.yaml").write_text(NEW_PIPELINE)
    result = run("diff", "--what-if", "pipeline=extra.yaml")
    assert result.exit_code == 0, result.output
    assert summary(result.stdout) == (
        "fleetc diff now -> what-if pipeline=extra.yaml\n\n"
        "serve-l4: +2 ~1 -0 objects; GPUs 2 l4 -> 4 l4; cost/h 2.40 -> 4.48\n"
        "  + extra/tune\n"
        "train-a100: +0 ~1 -0 objects; GPUs 16 a100 -> 16 a100; cost/h 48.96 -> 48.96\n\n"
        "GPUs l4: 2 -> 4 (+2)\n\n"
        "unplaced in the scenario: 0 stages\n"
        "cost/h: 51.36 -> 53.44 (+2.08)\n"
        "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 4/8\n")
    # its Job and the finetuning Queue are added; the namespace now serves two pipelines
    files = [line.split("/", 3)[3] for line in result.stdout.splitlines() if line.startswith("+++ b/out/clusters/")]
    assert [f for f in files if "kustomization" not in f] == [
        "serve-l4/infra/namespace-ml.yaml", "serve-l4/infra/queue-fleetc-finetuning.yaml",
        "serve-l4/workloads/job-ml-extra-tune-d1d85dee.yaml", "train-a100/infra/namespace-ml.yaml"]
    assert "+    fleetc.dev/source: extra.yaml#spec.stages[0]\n" in result.stdout  # named as the others are


def test_a_scenario_file_says_the_same_as_the_settings(project: Path) -> None:
    (project / "scenarios").mkdir()
    (project / "scenarios" / "extra.yaml").write_text(NEW_PIPELINE)
    (project / "scenarios" / "lose-l4.yaml").write_text("whatIf:\n- drain=serve-l4\n- pipeline=extra.yaml\n")
    from_file = run("diff", "--scenario", "scenarios/lose-l4.yaml")
    assert from_file.exit_code == 0, from_file.output
    settings = run("diff", "--what-if", "drain=serve-l4", "--what-if", "pipeline=scenarios/extra.yaml")
    assert from_file.stdout.split("\n", 1)[1] == settings.stdout.split("\n", 1)[1]
    assert from_file.stdout.startswith("fleetc diff now -> what-if drain=serve-l4 pipeline=extra.yaml\n")
    assert "  extra/tune: 0/2 clusters fit extra/tune: 1 is cordoned, 1 has no l4\n" in from_file.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--what-if", "gpus=nope=8"],
     "error: --what-if gpus=nope=8: no cluster 'nope' in Fleet 'fleet' (policies/fleet.yaml)\n"
     "  hint: its clusters: serve-l4, train-a100\n"),
    (["--what-if", "drain=serve-l5"],
     "error: --what-if drain=serve-l5: no cluster 'serve-l5' in Fleet 'fleet' (policies/fleet.yaml)\n"
     "  hint: did you mean 'serve-l4'?\n"),
    (["--what-if", "gpus=train-a100=eight"],
     "error: --what-if gpus=train-a100=eight: expected a whole number of GPUs, got 'eight'\n"
     "  hint: for example gpus=gpu-east=16\n"),
    (["--what-if", "gpus=train-a100=\u00b2"],  # a digit to str.isdigit, not to int()
     "error: --what-if gpus=train-a100=\u00b2: expected a whole number of GPUs, got '\u00b2'\n"
     "  hint: for example gpus=gpu-east=16\n"),
    (["--what-if", "gpus=train-a100:a100\n=8"],  # a trailing newline is not part of a label value
     "error: --what-if gpus=train-a100:a100\n=8: 'a100\\n' is not a GPU type\n"
     "  hint: a Kubernetes label value such as a100 or h100\n"),
    (["--what-if", "price=serve-l4=-1"],
     "error: --what-if price=serve-l4=-1: expected a GPU-hour price from 0 to 1e+06, got '-1'\n"
     "  hint: for example price=gpu-east=2.5\n"),
    (["--what-if", "cost=1"],
     "error: --what-if cost=1: not a what-if setting\n"
     "  hint: give one of drain=CLUSTER, gpus=CLUSTER[:TYPE]=N, price=CLUSTER=X, pipeline=FILE\n"),
    (["--what-if", "drain="],
     "error: --what-if drain=: says nothing after '='\n  hint: give drain=CLUSTER\n"),
    (["--what-if", "pipeline=missing.yaml"],
     "error: --what-if pipeline=missing.yaml: no such file\n"
     "  hint: name a policy file with the AIGCPipeline(s) to add\n"),
    (["--what-if", "drain=serve-l4", "--base", "HEAD"],
     "error: --base and a scenario cannot be combined: a scenario is compared with the placement now\n"),
    (["--scenario", "policies/fleet.yaml"],
     "error: --scenario policies/fleet.yaml: expected one YAML document 'whatIf:' with a list of settings\n"
     "  hint: for example whatIf: [drain=gpu-east, \"gpus=gpu-west:a100=16\"]\n"),
    ([], "error: diff needs --base REF, or a scenario (--what-if SETTING or --scenario FILE)\n"),
])
def test_bad_settings_are_usage_errors_with_a_hint(project: Path, args: list[str], message: str) -> None:
    result = run("diff", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)


def test_gpus_off_the_node_size_are_refused(project: Path) -> None:
    fleet = project / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace('gpu-count: "16"', 'gpu-count: "16"\n      gpus-per-node: "8"'))
    assert run("compile").exit_code == 0
    result = run("diff", "--what-if", "gpus=train-a100=12")
    assert (result.exit_code, result.stderr) == (
        2, "error: --what-if gpus=train-a100=12: cluster 'train-a100' carries 8 GPUs per node (gpus-per-node)\n"
           "  hint: give a multiple of 8\n")


def test_the_front_door_reads_from_its_workdir_and_the_markdown_carries_the_scenario(
        project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    found = what_if_fleet(Scenario(settings=("drain=serve-l4",), drain=("serve-l4",)), Options(workdir=project))
    assert found.unplaced == (("llm/serve", "0/2 clusters fit llm/serve: 1 is cordoned, 1 has no l4"),)
    assert [m.stage for m in found.report.moves] == ["llm/serve"]
    monkeypatch.chdir(project)
    comment = run("diff", "--what-if", "drain=serve-l4", "--format", "markdown").stdout
    assert comment.startswith("### fleetc: placement diff `now` → `what-if drain=serve-l4`\n\n"
                              "#### What-if `what-if drain=serve-l4`\n\n```text\nunplaced in the scenario: 1 stage\n")
    assert "| `serve-l4` | 0 / 0 / 6 |" in comment
