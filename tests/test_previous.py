"""Reading the previous ``placement.yaml``: what it keeps, and that bad files never crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetc.placement.previous import Previous, Recorded, parse_previous, read_previous

REPORT = """\
apiVersion: fleetc.dev/v1alpha1
kind: Placement
fleet: f
inputs: sha256:abc
method: milp
objective: 3.5
bound: 4
gap: 0.125
stages:
  - pipeline: p
    stage: train
    clusters:
      - name: a
        replicas: 1
        gpus: 8
  - pipeline: p
    stage: serve
    clusters:
      - name: a
        replicas: 2
        gpus: 2
      - name: b
        replicas: 3
        gpus: 3
  - pipeline: p
    stage: left-out
    clusters: []
    unplaced: true
"""


def test_parse_previous_maps_stage_keys_to_cluster_replicas() -> None:
    assert parse_previous(REPORT).clusters == {"p/train": {"a": 1}, "p/serve": {"a": 2, "b": 3}}


def test_parse_previous_keeps_the_reported_figures_and_inputs() -> None:
    previous = parse_previous(REPORT)
    assert (previous.inputs, previous.method, previous.objective, previous.bound) == ("sha256:abc", "milp", 3.5, 4.0)
    assert previous.stages == {"p/train", "p/serve", "p/left-out"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: [", "not YAML: "),
        ("kind: Fleet\n", "not a fleetc placement report (kind: Placement)"),
        ("kind: Placement\nstages: 3\n", "'stages' is not a list"),
        ("kind: Placement\nstages: [3]\n", "stages[0] is not a mapping"),
        ("kind: Placement\nstages: [{stage: s}]\n", "stages[0] has no pipeline and stage names"),
        (
            "kind: Placement\nstages: [{pipeline: p, stage: s, clusters: [{name: a, replicas: x}]}]\n",
            "stages[0].clusters has an entry without a name and replicas",
        ),
        ("kind: Placement\ndeep: " + "[" * 65 + "]" * 65 + "\n", "nested too deeply to be a placement report"),
        ("kind: Placement\ndeep: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply to be a placement report"),
        ("kind: Placement\n" + "".join("  " * i + f"k{i}:\n" for i in range(3000)), "nested too deeply to be a "
         "placement report"),
    ],
)
def test_parse_previous_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_previous(text)
    assert str(raised.value).startswith(problem)


def test_read_previous_ignores_a_missing_or_malformed_file(tmp_path: Path) -> None:
    assert read_previous(tmp_path) == (Previous(), "")
    (tmp_path / "placement.yaml").write_text(REPORT, encoding="utf-8")
    assert read_previous(tmp_path) == (parse_previous(REPORT), "")
    (tmp_path / "placement.yaml").write_bytes(b"\xff\xfe")
    previous, warning = read_previous(tmp_path)
    assert previous == Previous()
    assert warning.startswith(f"{tmp_path / 'placement.yaml'}: ignored as the previous placement: ")


def test_the_reader_reads_back_what_the_writer_wrote() -> None:
    """parse_previous and render/report.py's writer are one codec of placement.yaml: a real
    placement (11 of 80 stages left out with their reasons, shared-GPU and multi-cluster
    stages) written and read back gives every figure a recompile reads."""
    import sys

    from fleetc.compiler import Options, compile_policies, load_policy_sources, placed_clusters

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.generate import Spec, generate

    instance = generate(Spec(clusters=12, stages=80, load=1.3, seed=2, platform=True))
    loaded = load_policy_sources([(path, text.encode()) for path, text in instance.files.items()], "generated")
    compiled = compile_policies(loaded, Options(allow_unplaced=True))
    model, placement = compiled.model, compiled.placement
    previous = parse_previous(compiled.files["placement.yaml"])
    left_out = {p.stage: p.reason for p in placement.stages if not p.assignments}
    assert left_out and all(left_out.values()), "nothing left out: a weaker test"
    assert previous.clusters == placed_clusters(placement) and previous.reasons == left_out
    assert previous.stages == {stage.key for stage in model.stages}
    assert previous.recorded == {stage.key: Recorded.of(stage) for stage in model.stages}
    assert previous.scores == {p.stage: round(p.score, 6) for p in placement.stages}
    assert (previous.inputs, previous.method, previous.objective, previous.bound, previous.optimal) == (
        placement.inputs, placement.method, round(placement.objective, 6), round(placement.bound, 6),
        placement.optimal)
