"""``fleetc diff --what-if``: the placement now against a scenario that changes no policy."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from git import Repo
from ruamel.yaml import YAML
from support.corpus import read_tree_bytes

from fleetc import Options, Scenario, what_if_fleet
from fleetc.cli import cli

CASES = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parents[1]
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


def load_workflow() -> dict[str, Any]:
    workflow = YAML(typ="safe", pure=True).load((ROOT / ".github" / "workflows" / "fleetc.yml").read_text())
    assert isinstance(workflow, dict)
    return workflow


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The two-cluster pipeline (train on a100, serve on l4), compiled to out/."""
    shutil.copytree(CASES / "two-cluster-pipeline" / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    assert run("compile").exit_code == 0
    return tmp_path


REVIEW_SECTIONS = ("DANGER: ", "stages changed: ", "fleetc's bookkeeping")


def summary(output: str) -> str:
    """The report without the object diffs and the review's sections (they are ``fleetc
    diff``'s, tested there and in test_report's golden cases)."""
    blocks = output.split("\n--- ", 1)[0].split("\n\n")
    return "\n\n".join(b for b in blocks if not b.startswith(REVIEW_SECTIONS))


def test_a_lost_cluster_leaves_its_stage_unplaced_and_nothing_changes_on_disk(project: Path) -> None:
    before = read_tree_bytes(project)
    result = run("diff", "--what-if", "drain=serve-l4")
    assert result.exit_code == 0, result.output
    assert summary(result.stdout) == (
        "fleetc diff now -> what-if drain=serve-l4\n\n"
        "serve-l4: +0 ~0 -12 objects; GPUs 2 l4 -> 0; cost/h 2.40 -> 0.00\n"
        "  - llm/serve\n\n"
        "GPUs l4: 2 -> 0 (-2)\n"
        "pipeline llm: GPUs 18 -> 16, cost/h 51.36 -> 48.96\n\n"
        "unplaced in the scenario: 1 stage\n"
        "  llm/serve: 0/2 clusters fit llm/serve: 1 is drained, 1 has no l4\n"
        "cost/h: 51.36 -> 48.96 (-2.40)\n"
        "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 0/0\n")
    assert "-      - name: serve-l4\n" in result.stdout  # the placement.yaml diff follows
    assert "  unplaced: llm/serve: placed on serve-l4 x2 before, not placed now: " in result.stdout
    assert read_tree_bytes(project) == before
    assert run("diff", "--what-if", "drain=serve-l4", "--exit-code").exit_code == 1


def test_fewer_gpus_and_another_price(project: Path) -> None:
    result = run("diff", "--what-if", "gpus=train-a100=8", "--what-if", "price=serve-l4=2")
    assert result.exit_code == 0, result.output
    assert summary(result.stdout) == (
        "fleetc diff now -> what-if gpus=train-a100=8 price=serve-l4=2\n\n"
        "serve-l4: +0 ~0 -0 objects; GPUs 2 l4 -> 2 l4; cost/h 2.40 -> 4.80\n"
        "train-a100: +0 ~0 -3 objects; GPUs 16 a100 -> 0; cost/h 48.96 -> 0.00\n"
        "  - llm/train\n\n"
        "GPUs a100: 16 -> 0 (-16)\n"
        "pipeline llm: GPUs 18 -> 2, cost/h 51.36 -> 4.80\n\n"
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
        "serve-l4: +2 ~4 -0 objects; GPUs 2 l4 -> 4 l4; cost/h 2.40 -> 4.48\n"
        "  + extra/tune\n"
        "train-a100: +0 ~1 -0 objects; GPUs 16 a100 -> 16 a100; cost/h 48.96 -> 48.96\n\n"
        "GPUs l4: 2 -> 4 (+2)\n"
        "pipeline extra: GPUs 0 -> 2, cost/h 0.00 -> 2.08\n\n"
        "unplaced in the scenario: 0 stages\n"
        "cost/h: 51.36 -> 53.44 (+2.08)\n"
        "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 4/8\n")
    # its Job and the finetuning Queue are added; the namespace now serves two pipelines (and the
    # account of the serving releaser there names the namespace's first pipeline as its source)
    files = [line.split("/", 3)[3] for line in result.stdout.splitlines() if line.startswith("+++ b/out/clusters/")]
    assert [re.sub(r"-[0-9a-f]{8}\.yaml$", "-HASH.yaml", f) for f in files if "kustomization" not in f] == [
        "serve-l4/workloads/job-ml-extra-tune-HASH.yaml", "serve-l4/infra/namespace-ml.yaml",  # what runs first,
        "serve-l4/infra/queue-fleetc-finetuning.yaml",  # then what it needs
        "serve-l4/infra/role-ml-fleetc-release.yaml", "serve-l4/infra/rolebinding-ml-fleetc-release.yaml",
        "serve-l4/infra/serviceaccount-ml-fleetc-release.yaml", "train-a100/infra/namespace-ml.yaml"]
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
    assert "  extra/tune: 0/2 clusters fit extra/tune: 1 is drained, 1 has no l4\n" in from_file.stdout


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
    (["--what-if", "drain=serve-l4", "--scenario", "policies"],
     "error: give the scenario as --what-if settings or as --scenario FILE, not both\n"),
    (["--scenario", "nowhere"], "error: --scenario nowhere: no such file or directory\n"),
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
    assert found.unplaced == (("llm/serve", "0/2 clusters fit llm/serve: 1 is drained, 1 has no l4"),)
    assert [m.stage for m in found.report.moves] == ["llm/serve"]
    monkeypatch.chdir(project)
    comment = run("diff", "--what-if", "drain=serve-l4", "--format", "markdown").stdout
    assert comment.startswith("### fleetc: review of `now` → `what-if drain=serve-l4`\n\n"
                              "#### What-if `what-if drain=serve-l4`\n\n```text\nunplaced in the scenario: 1 stage\n")
    assert "| `serve-l4` | 0 / 0 / 12 |" in comment


# --------------------------------------------------------------------------- scenarios in review
LOSE_L4 = "whatIf:\n- drain=serve-l4\n"
ADD_EXTRA = "whatIf:\n- pipeline=pipelines/extra.yaml\n- price=serve-l4=2\n"


def keep_scenarios(project: Path) -> None:
    """scenarios/ beside policies/: two scenarios, and the pipeline file one of them adds."""
    (project / "scenarios" / "pipelines").mkdir(parents=True)
    (project / "scenarios" / "pipelines" / "extra.yaml").write_text(NEW_PIPELINE)
    (project / "scenarios" / "lose-l4.yaml").write_text(LOSE_L4)
    (project / "scenarios" / "extra.yaml").write_text(ADD_EXTRA)


SCENARIOS_TEXT = (
    "scenarios/extra.yaml: what-if pipeline=pipelines/extra.yaml price=serve-l4=2\n"
    "stages moved in the scenario: 1 stage\n"
    "  extra/tune: (none) -> serve-l4\n"
    "unplaced in the scenario: 0 stages\n"
    "cost/h: 51.36 -> 58.24 (+6.88)\n"
    "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 4/8\n"
    "\n"
    "scenarios/lose-l4.yaml: what-if drain=serve-l4\n"
    "stages moved in the scenario: 1 stage\n"
    "  llm/serve: serve-l4 -> (none)\n"
    "unplaced in the scenario: 1 stage\n"
    "  llm/serve: 0/2 clusters fit llm/serve: 1 is drained, 1 has no l4\n"
    "cost/h: 51.36 -> 48.96 (-2.40)\n"
    "headroom (free / capacity GPUs): a100 0/16 -> 0/16; l4 6/8 -> 0/0\n")


@pytest.fixture
def reviewed(project: Path) -> Path:
    """The project in git with scenarios/, origin/main its first commit; the pull request then
    grows the training cluster to 24 a100."""
    repo = Repo.init(project, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    keep_scenarios(project)
    repo.git.add("--all")
    repo.git.commit("--quiet", "--message", "policies, out/ and scenarios")
    repo.git.update_ref("refs/remotes/origin/main", "HEAD")
    fleet = project / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace('gpu-count: "16"', 'gpu-count: "24"'))
    assert run("compile").exit_code == 0
    return project


def run_diff_step(folder: Path) -> str:
    """The workflow's own diff step, run in ``folder`` against main: the report it writes."""
    [step] = [s for s in load_workflow()["jobs"]["diff"]["steps"]
              if s.get("name") == "Diff the placement against the base branch"]
    environment = {**os.environ, "BASE_REF": "main", "PYTHONPATH": str(ROOT),
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=folder, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return (folder / "report.md").read_text()


@pytest.mark.slow
def test_the_pull_request_report_adds_each_scenario_on_the_head(reviewed: Path) -> None:
    """The report is the diff from the base, then each scenario under scenarios/ compared
    with the pull request's placement; without scenarios/ it is the diff alone."""
    report = run_diff_step(reviewed)
    head, scenarios = report.split("#### What-if scenarios on the working tree\n\n", 1)
    assert head.startswith("### fleetc: review of `origin/main` → `working tree`\n\n"
                           "no danger found; 0 stages changed; ")
    assert "| `train-a100` | 0 / 1 / 0 | 16 a100 → 16 a100 |" in head  # its Queue grows
    with_more_a100 = SCENARIOS_TEXT.replace("a100 0/16 -> 0/16", "a100 8/24 -> 8/24")
    assert scenarios.split("#### Rendered files", 1)[0] == "".join(
        f"```text\n{section.rstrip()}\n```\n\n" for section in with_more_a100.split("\n\n"))
    shutil.rmtree(reviewed / "scenarios")
    alone = run_diff_step(reviewed)
    assert "What-if" not in alone and alone == report.replace(
        "#### What-if scenarios on the working tree\n\n" + scenarios.split("#### Rendered files", 1)[0], "")


def test_scenarios_below_the_text_and_json_diff(reviewed: Path) -> None:
    result = run("diff", "--base", "origin/main", "--scenario", "scenarios")
    assert result.exit_code == 0, result.output
    summary, rest = result.stdout.split("\n\nscenarios/extra.yaml: ", 1)
    assert summary.split("\n\n", 2)[2] == "train-a100: +0 ~1 -0 objects; GPUs 16 a100 -> 16 a100; cost/h 48.96 -> 48.96"
    assert ("scenarios/extra.yaml: " + rest).startswith(SCENARIOS_TEXT.replace("a100 0/16 -> 0/16", "a100 8/24 -> 8/24")
                                                        + "\n--- a/out/")
    report = json.loads(run("diff", "--base", "origin/main", "--scenario", "scenarios/lose-l4.yaml",
                            "--format", "json").stdout)
    assert report["scenarios"] == [{
        "file": "scenarios/lose-l4.yaml", "settings": ["drain=serve-l4"],
        "stages": [{"stage": "llm/serve", "before": ["serve-l4"], "after": []}],
        "unplaced": [{"stage": "llm/serve", "reason": "0/2 clusters fit llm/serve: 1 is drained, 1 has no l4"}],
        "costPerHour": {"before": 51.36, "after": 48.96},
        "headroom": {"a100": {"capacity": {"before": 24, "after": 24}, "free": {"before": 8, "after": 8}},
                     "l4": {"capacity": {"before": 8, "after": 0}, "free": {"before": 6, "after": 0}}},
    }]
    unchanged = run("diff", "--base", "HEAD", "--scenario", "scenarios/lose-l4.yaml", "--exit-code")
    assert unchanged.exit_code == 1  # the pull request's own change counts; the scenario does not


@pytest.mark.parametrize(("files", "args", "message"), [
    ({"scenarios/notes.yaml": "owner: platform\n"}, ["--scenario", "scenarios"],
     "error: --scenario scenarios/notes.yaml: neither a what-if scenario (one YAML document 'whatIf:') nor a "
     "pipeline file a scenario there adds (pipeline=FILE)\n"
     "  hint: keep only scenarios and the pipelines they add under a scenario folder\n"),
    ({"scenarios/lose-l4.yaml": "whatIf:\n- drain=serve-l4\n- gpus=serve-l5=8\n"},
     ["--scenario", "scenarios/lose-l4.yaml"],
     "error: scenarios/lose-l4.yaml:3:3: whatIf[1]: gpus=serve-l5=8: no cluster 'serve-l5' in Fleet 'fleet' "
     "(policies/fleet.yaml)\n  hint: did you mean 'serve-l4'?\n"),
    ({"scenarios/extra.yaml": "whatIf:\n- pipeline=pipelines/gone.yaml\n"}, ["--scenario", "scenarios/extra.yaml"],
     "error: scenarios/extra.yaml:2:3: whatIf[0]: pipeline=pipelines/gone.yaml: no such file\n"
     "  hint: name a policy file with the AIGCPipeline(s) to add\n"),
    ({}, ["--scenario", "scenarios"],
     "error: 2 scenarios under scenarios: without --base, give one\n"
     "  hint: --base REF --scenario PATH reports each below the diff from REF\n"),
    ({"scenarios/empty/.keep": ""}, ["--scenario", "scenarios/empty"],
     "error: --scenario scenarios/empty: no scenario file there (*.yaml, *.yml or *.json, "
     "one YAML document 'whatIf:')\n"),
])
def test_a_scenario_folder_reads_every_file_or_names_it(project: Path, files: dict[str, str], args: list[str],
                                                         message: str) -> None:
    keep_scenarios(project)
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    result = run("diff", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", message)


def test_a_scenario_among_the_policies_is_refused_with_where_it_belongs(project: Path) -> None:
    (project / "policies" / "lose-l4.yaml").write_text(LOSE_L4)
    result = run("validate")
    assert (result.exit_code, result.stderr) == (1, (
        "policies/lose-l4.yaml:1:1: error: whatIf: a what-if scenario is not a policy\n"
        "  hint: keep scenario files out of the policy folders (e.g. in scenarios/) and run "
        "`fleetc diff --scenario FILE`\n1 error in 1 file\n"))


def test_scenarios_cut_whole_to_fit_the_comment() -> None:
    from fleetc.report import EMPTY, Report, WhatIf, compare, format_markdown

    found = WhatIf(compare(EMPTY, EMPTY, base_label="now", head_label="what-if drain=a"),
                   tuple((f"p/s{i}", "no room") for i in range(25)), (1.0, 2.0), (), "scenarios/a.yaml")
    report: Report = replace(compare(EMPTY, EMPTY, base_label="main", head_label="working tree"),
                             scenarios=(found, replace(found, source="scenarios/b.yaml")))
    comment = format_markdown(report)
    assert comment.count("  p/s") == 2 * 20 and comment.count("  ... and 5 more\n") == 2
    section = comment.split("#### What-if scenarios on the working tree\n\n")[1].split("```\n\n")[0] + "```\n\n"
    cut = format_markdown(report, limit=2 * (len("#### What-if scenarios on the working tree\n\n") + len(section)))
    assert cut.endswith(section + "> **Cut to fit GitHub's comment limit:** 1 scenario left out: "
                        "`scenarios/b.yaml`. Run `fleetc diff --scenario FILE` to see each.\n")


def test_the_bundled_scenarios_run_on_the_bundled_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("policies", "out", "scenarios"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    found = {}
    for name in ("half-the-t4s", "lose-gpu-cluster-huawei"):
        result = run("diff", "--scenario", f"scenarios/{name}.yaml", "--format", "json")
        assert result.exit_code == 0, result.output
        found[name] = json.loads(result.stdout)["whatIf"]
    assert [u["stage"] for u in found["lose-gpu-cluster-huawei"]["unplaced"]] == [
        "customer-service-assistant/lora-finetuning", "llm-chinese-training/model-training"]
    # capacity is what fleetc may use: defragmentThreshold 80% keeps a fifth of the GPUs free
    # (64 a100 -> 51, 32 t4 -> 25, 16 -> 12), so "free" is what a stage could still get
    assert found["lose-gpu-cluster-huawei"]["headroom"]["a100"] == {"capacity": {"before": 51, "after": 0},
                                                                   "free": {"before": 35, "after": 0}}
    assert found["half-the-t4s"]["unplaced"] == []
    assert found["half-the-t4s"]["headroom"]["t4"] == {"capacity": {"before": 25, "after": 12},
                                                       "free": {"before": 18, "after": 5}}


def test_free_gpus_count_the_utilization_others_have(project: Path) -> None:
    """Issue 28: 11/32 free GPUs were shown where work fleetc does not place used 65% of them
    and 3 were usable. Headroom counts what fleetc may use (rules.usable_capacity)."""
    fleet = project / "policies" / "fleet.yaml"
    data = YAML(typ="safe", pure=True).load(fleet.read_text())
    data["spec"]["clusters"][1]["utilization"] = 0.5  # serve-l4: 8 GPUs, 4 usable, 2 taken
    with fleet.open("w") as handle:
        YAML(typ="safe", pure=True).dump(data, handle)
    assert run("compile").exit_code == 0
    result = run("diff", "--what-if", "price=serve-l4=1.0", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["whatIf"]["headroom"]["l4"] == {"capacity": {"before": 4, "after": 4},
                                                                    "free": {"before": 2, "after": 2}}
