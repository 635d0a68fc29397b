"""Output sized for a fleet (issue 28 item 4): warnings alike but for their place are one line,
and a refusal's last line counts the stages it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetc.cli import cli
from fleetc.errors import Diagnostic
from fleetc.grouping import alike, warning_lines

FLEET = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata:
  name: f
spec:
  gitops: {repoURL: "https://git.example.com/fleet.git"}
  clusters:
  - name: a
    provider: aws
    region: us-east-1
    attributes: {gpu-type: a100, gpu-count: "64"}
"""


def pipeline(name: str) -> str:
    """A pipeline whose one stage sets no command: one warning each, alike but for the place."""
    return (f"apiVersion: aigc.kurator.dev/v1alpha1\nkind: AIGCPipeline\nmetadata:\n  name: {name}\nspec:\n"
            "  stages:\n  - name: train\n    type: Training\n    resources: {gpu: 1, gpuType: a100}\n")


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "fleet.yaml").write_text(FLEET)
    for i in range(6):
        (tmp_path / "policies" / f"p{i}.yaml").write_text(pipeline(f"p{i}"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_warnings_alike_but_for_their_place_are_one_line_with_a_count_and_the_first_places(fleet: Path) -> None:
    result = CliRunner().invoke(cli, ["compile"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "sets no command" in line]
    assert len(lines) == 1
    assert lines[0].startswith("warning: policies/p0.yaml:6:3: spec.stages[0].command: stage 'train' sets no command")
    assert lines[0].endswith(" [and 5 more alike at policies/p1.yaml:6:3, policies/p2.yaml:6:3, "
                             "policies/p3.yaml:6:3, ...; --verbose lists each]")
    assert result.stdout.splitlines()[-1].startswith("placed 6 stages")  # the summary comes last


def test_verbose_and_json_list_every_warning(fleet: Path) -> None:
    verbose = CliRunner().invoke(cli, ["compile", "--verbose"])
    assert len([line for line in verbose.stderr.splitlines() if "sets no command" in line]) == 6
    as_json = CliRunner().invoke(cli, ["compile", "--format", "json"])
    warnings = json.loads(as_json.stdout)["warnings"]
    assert len([w for w in warnings if "sets no command" in w["message"]]) == 6


def test_a_few_alike_are_each_printed_and_unlike_ones_are_not_grouped() -> None:
    def at(line: int, message: str, field: str = "spec.clusters[0].attributes") -> Diagnostic:
        return Diagnostic("f.yaml", line, 3, field, message, severity="warning")

    few = [at(i, f"cluster c{i}: set spec.devicePlugin.config.name") for i in range(1, 5)]
    assert len(warning_lines(few)) == 4
    many = [*few, at(9, "cluster c9: set spec.devicePlugin.config.name", "spec.clusters[8].attributes")]
    assert len(warning_lines(many)) == 1
    assert alike(many[0]) == alike(many[-1])
    assert alike(at(1, "stage 'a' reads s3://x/ directly")) == alike(at(2, "stage 'b' reads s3://y/z/ directly"))
    assert alike(at(1, "shares each GPU 2 ways")) != alike(at(1, "shares each GPU 4 ways"))


def test_a_refusal_ends_with_how_many_stages_it_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "fleet.yaml").write_text(FLEET)
    (tmp_path / "policies" / "p.yaml").write_text(
        pipeline("fits") + "---\n" + pipeline("big").replace("gpu: 1,", "gpu: 128,"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["compile"])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "error: 1 of 2 stages refused, nothing written (--allow-unplaced renders the 1 that fit)")
