"""validate and compile agree on GPU types in every form (issue 28 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetc.cli import cli
from fleetc.compiler import compile_policies, load_policy_sources
from fleetc.errors import PolicyError

FLEET = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata:
  name: f
spec:
  clusters:
  - name: a
    provider: aws
    region: us-east-1
    attributes: {gpu-type: a100, gpu-count: "16"}
"""


def pipeline(gpu_type: str) -> str:
    return ("apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: p\nspec:\n"
            "  stages:\n  - name: train\n    type: Training\n    resources:\n      gpu: 8\n"
            f"      gpuType: {gpu_type}\n")


def load(gpu_type: str):
    return load_policy_sources([("fleet.yaml", FLEET.encode()), ("p.yaml", pipeline(gpu_type).encode())], "test")


@pytest.mark.parametrize("written", ["a10O", "[a10O]", "[a10O, h10]"])
def test_a_type_no_cluster_has_is_a_validate_error_where_it_is_written(written: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load(written)
    [error] = caught.value.diagnostics
    assert (error.path, error.line, error.column, error.field) == ("p.yaml", 11, 16, "spec.stages[0].resources.gpuType")
    assert "did you mean 'a100'?" in error.hint


def test_alternatives_may_name_types_the_fleet_lacks_with_a_warning_naming_them() -> None:
    loaded = load("[h100, a100]")
    [warning] = loaded.warnings
    assert warning.severity == "warning" and (warning.line, warning.column) == (11, 16)
    assert "h100" in warning.message and "runs only on a100" in warning.message
    compiled = compile_policies(loaded)
    assert warning in compiled.warnings
    [placed] = compiled.placement.stages
    assert [(a.cluster, a.replicas) for a in placed.assignments] == [("a", 1)]


def test_the_cli_validate_prints_the_warning_and_succeeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "p.yaml").write_text(pipeline("[h100, a100]"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["validate", "."])
    assert result.exit_code == 0, result.output
    assert ("warning: p.yaml:11:16: spec.stages[0].resources.gpuType: no cluster of Fleet 'f' has GPU type h100"
            in result.stderr)
    assert "  hint: did you mean 'a100'?" in result.stderr
    result = CliRunner().invoke(cli, ["validate", ".", "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["diagnostics"][0]["severity"] == "warning"
