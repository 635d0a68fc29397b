"""The command line: exit codes, messages, --check, --format json, and out/ left alone on error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fleetc.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SEED = Path(__file__).parent / "seed"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled example as the working folder."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def without_warnings(stderr: str) -> str:
    """stderr minus the compile's warnings (settings with no Kubernetes form; tested elsewhere)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("warning: "))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_validate_defaults_to_policies(project: Path) -> None:
    result = run("validate")
    assert result.exit_code == 0, result.output
    assert result.stdout == "policies: 6 policy documents valid\n"


#: The Fleet each seed example is written for: the seed's own, and for the finance platform
#: (whose clusters the seed's Fleet does not have) the fleet of the seed-finance-scenario case.
SEED_FLEET = {"finance-aigc-platform.yaml": Path(__file__).parent / "cases" / "seed-finance-scenario" /
              "policies" / "finance-fleet.yaml"}


@pytest.mark.parametrize("name", sorted(p.name for p in SEED.glob("*.yaml")))
def test_each_seed_example_validates_unchanged_with_its_fleet(name: str) -> None:
    fleet = SEED_FLEET.get(name, SEED / "aigc-fleet.yaml")
    result = run("validate", str(fleet), str(SEED / name))
    assert result.exit_code == 0, result.output


def test_validate_without_a_fleet_fails_as_compile_does(tmp_path: Path) -> None:
    pipeline = SEED / "llm-training-pipeline.yaml"
    for command in ("validate", "compile"):
        result = run(command, str(pipeline), *(["--out", str(tmp_path / "out")] if command == "compile" else []))
        assert (result.exit_code, result.stderr) == (1, (
            f"{pipeline.as_posix()}: error: no Fleet found: fleetc needs one Fleet to place pipelines on\n"
            "  hint: policies are valid only together with their Fleet: give its file too, or the folder "
            "that holds it\n1 error in 1 file\n")), command


def test_validate_reports_errors_with_exit_1(tmp_path: Path) -> None:
    policy = tmp_path / "fleet.yaml"
    policy.write_text((SEED / "aigc-fleet.yaml").read_text().replace('"64"', '"sixty"'))
    result = run("validate", str(policy))
    assert result.exit_code == 1
    assert result.stderr == (
        f"{policy.as_posix()}:13:18: error: spec.clusters[0].attributes.gpu-count: "
        "expected an integer, got 'sixty'\n1 error in 1 file\n")


def test_validate_json_format(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipline\n")
    result = run("validate", "--format", "json", str(policy))
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["valid"] is False
    assert payload["diagnostics"] == [{
        "path": policy.as_posix(), "line": 2, "column": 7, "field": "kind",
        "severity": "error", "message": "unknown kind 'AIGCPipline'",
        "hint": "did you mean 'AIGCPipeline'?"}]


@pytest.mark.parametrize("args", [
    ("validate", "no-such-folder"),
    ("compile", "no-such-folder"),
    ("compile", "--no-such-option"),
    ("compile", "--time-limit", "-1"),
    ("frobnicate",),
])
def test_usage_errors_exit_2(args: tuple[str, ...], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_missing_path_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("validate", "nowhere")
    assert result.stderr == "error: nowhere: no such file or directory\n"


def test_compile_writes_out_and_check_passes(project: Path) -> None:
    result = run("compile")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("placed 7 stages")
    assert (project / "out" / "placement.yaml").is_file()
    check = run("compile", "--check")
    assert check.exit_code == 0, check.output
    assert check.stdout == "out/ is up to date\n"


def test_check_lists_every_stale_file_and_never_writes(project: Path) -> None:
    assert run("compile").exit_code == 0
    out = project / "out"
    (out / "placement.yaml").write_text("edited by hand\n")
    stale_job = next((out / "clusters").rglob("job-*.yaml"))
    stale_job.unlink()
    before = snapshot(out)
    result = run("compile", "--check")
    assert result.exit_code == 1
    assert without_warnings(result.stderr) == (
        f"would add {Path('out') / stale_job.relative_to(out)}\n"
        f"would change {Path('out') / 'placement.yaml'}\n"
        "out/ is stale: 2 files would change\n")
    assert "warning: out/placement.yaml: ignored as the previous placement" in result.stderr
    assert snapshot(out) == before


def test_check_json_format(project: Path) -> None:
    result = run("compile", "--check", "--format", "json")
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["current"] is False
    assert {c["status"] for c in payload["changes"]} == {"added"}


def test_failed_compile_leaves_out_untouched(project: Path) -> None:
    assert run("compile").exit_code == 0
    before = snapshot(project / "out")
    pipeline = project / "policies" / "llm-training-pipeline.yaml"
    pipeline.write_text(pipeline.read_text().replace("gpu: 8", "gpu: 800"))
    result = run("compile")
    assert result.exit_code == 1
    assert "0/3 clusters fit llm-chinese-training/model-training" in result.stderr
    assert snapshot(project / "out") == before


def test_policy_error_leaves_out_untouched(project: Path) -> None:
    assert run("compile").exit_code == 0
    before = snapshot(project / "out")
    (project / "policies" / "broken.yaml").write_text("kind: [\n")
    result = run("compile")
    assert result.exit_code == 1
    assert result.stderr.startswith("policies/broken.yaml:2:1: error: invalid YAML")
    assert snapshot(project / "out") == before


@pytest.mark.slow
def test_compile_output_holds_no_solver_chatter(project: Path) -> None:
    """In a fresh process: solver libraries print banners once per process, on first use."""
    result = subprocess.run([sys.executable, "-m", "fleetc", "compile"], cwd=project,
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith("placed 7 stages"), result.stdout
    assert result.stdout.count("\n") == 1
    assert without_warnings(result.stderr) == ""


def test_internal_errors_are_reported_without_traceback(project: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetc.compiler

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(fleetc.compiler, "compile_policies", explode)
    result = run("compile")
    assert result.exit_code == 3
    assert "internal error: RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.output


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("fleetc, version ")


def test_explain_names_the_toleration_that_admits_a_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(Path(__file__).parent / "cases" / "cpu-stage-on-gpu-cluster" / "policies", tmp_path / "policies")
    fleet = tmp_path / "policies" / "fleet.yaml"  # a taint the Fleet states is hard (fleetc's own is not)
    fleet.write_text(fleet.read_text() + "    taints:\n    - {key: gpu-type, value: h100, effect: NoSchedule}\n")
    monkeypatch.chdir(tmp_path)
    assert run("compile", "--allow-unplaced").exit_code == 0
    result = run("explain", "llm/prepare")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(
        "  gpu-h: filtered out: untolerated taint gpu-type=h100:NoSchedule\n"
        "not placed: 0/1 clusters fit llm/prepare: 1 has untolerated taint gpu-type=h100:NoSchedule\n"
        "fix: llm/prepare: tolerate the taint gpu-type=h100:NoSchedule (it fits on gpu-h)\n"
        "hint: llm/prepare: the toleration {key: gpu-type, operator: Equal, value: h100, effect: NoSchedule} "
        "admits it to clusters tainted gpu-type=h100:NoSchedule; write it under spec.stages[0].tolerations in "
        "policies/pipeline.yaml (this stage), or under spec.placement.clusterTolerations in "
        "policies/fleet.yaml (every stage)\n")
    as_json = run("explain", "llm/prepare", "--format", "json")
    assert json.loads(as_json.stdout)["hints"] == [result.stdout.splitlines()[-1].removeprefix("hint: ")]


def test_allow_unplaced_never_drops_a_stage_the_previous_placement_runs(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: raising one training's GPUs with --allow-unplaced silently dropped two running
    stages of other pipelines ("2 left out"). Now that is an error naming them, unless the user
    names them; and compile --check with the same flag agrees with what was compiled."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    assert run("compile").exit_code == 0
    training = tmp_path / "policies" / "llm-training-pipeline.yaml"
    training.write_text(training.read_text().replace("gpu: 8", "gpu: 48", 1))
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    refused = run("compile", "--allow-unplaced")
    assert refused.exit_code == 1, refused.output
    assert "error: --allow-unplaced would stop stages the previous placement runs" in refused.stderr
    dropped = "customer-service-assistant/lora-finetuning,llm-chinese-training/model-deployment"
    for stage in dropped.split(","):
        assert f"  {stage}: runs on " in refused.stderr
    assert f"hint: to drop them on purpose, name them: --allow-unplaced={dropped}" in refused.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before  # untouched
    assert run("compile", f"--allow-unplaced={dropped}").exit_code == 0
    assert run("compile", "--check", f"--allow-unplaced={dropped}").exit_code == 0
    assert run("compile", "--check", "--allow-unplaced").exit_code == 0  # out/ runs them no more
    unknown = run("compile", "--allow-unplaced=llm-chinese-training/serving")
    assert unknown.exit_code == 2 and "names no stage 'llm-chinese-training/serving'" in unknown.stderr


def test_fail_on_danger_is_for_a_change_under_review() -> None:
    result = run("diff", "--what-if", "drain=x", "--fail-on", "danger")
    assert result.exit_code == 2
    assert "--fail-on danger is for --base" in result.stderr
