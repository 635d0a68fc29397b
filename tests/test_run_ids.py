"""Run ids chain like build actions (issue 25): a stage's run id covers what it runs and the run
ids of the stages it depends on, so a re-run of a stage re-runs exactly its dependants, and no
completion marker an earlier run wrote satisfies a wait of the new one."""

from __future__ import annotations

from collections.abc import Mapping

from support.corpus import ROOT, compile_texts, read_policies
from support.runtime import _waited, markers_written, pods
from test_engines import _set_image, assert_second_pass_keeps_unchanged_runs

TRAINING = "policies/llm-training-pipeline.yaml"
SERVICE = "policies/customer-service-pipeline.yaml"
PIPELINE = "llm-chinese-training"


def _workloads(files: Mapping[str, str]) -> dict[str, str]:
    return {p: t for p, t in files.items() if "/workloads/" in p and not p.endswith("kustomization.yaml")}


def _changed(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    """The workload files only one side has, or that differ."""
    old, new = _workloads(before), _workloads(after)
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}


def _stage_of(path: str) -> str:
    for stage in ("data-preparation", "model-training", "model-evaluation", "model-deployment"):
        if f"{PIPELINE}-{stage}" in path:
            return stage
    return path


def test_a_new_data_preparation_image_re_runs_training_evaluation_and_serving() -> None:
    policies = read_policies(ROOT / "policies")
    before = compile_texts(policies)
    after = compile_texts({**policies, TRAINING: _set_image(policies[TRAINING], "data-preparation", "prep:v2")})
    jobs = {_stage_of(p) for p in _changed(before, after) if "/job-" in p}
    assert jobs == {"data-preparation", "model-training", "model-evaluation"}  # each a new Job: re-run
    served = {p for p in _changed(before, after) if "/deployment-" in p}
    assert served and all(_stage_of(p) == "model-deployment" for p in served)  # rolls out, waits anew
    written_before = markers_written(before)
    written_after = markers_written(after)
    for stage in ("data-preparation", "model-training", "model-evaluation"):
        key = f"{PIPELINE}/{stage}"
        old = {content for _, content in written_before[key]}
        new = {content for _, content in written_after[key]}
        assert old and new and not old & new, stage  # a new run id in every marker
    stale = {content for marks in written_before.values() for _, content in marks}
    for pod in pods(after):
        for init, marks in _waited(pod.spec).items():
            assert not {content for _, content in marks} & stale - _unchanged(written_before, written_after), \
                f"{pod.owner} {init} is satisfied by a marker of an earlier run"
    assert_second_pass_keeps_unchanged_runs(before, after)


def _unchanged(before: Mapping[str, set[tuple[str, str]]], after: Mapping[str, set[tuple[str, str]]]) -> set[str]:
    """Marker contents of the runs a change left as they were."""
    return {content for key, marks in after.items() if before.get(key) == marks for _, content in marks}


def test_an_edit_in_an_independent_pipeline_changes_nothing_of_another() -> None:
    policies = read_policies(ROOT / "policies")
    before = compile_texts(policies)
    after = compile_texts({**policies, SERVICE: _set_image(policies[SERVICE], "ticket-cleaning", "clean:v2")})
    changed = _changed(before, after)
    assert changed and all("customer-service-assistant" in p or "aigc-cs-data" in p for p in changed), \
        sorted(p for p in changed if "customer-service-assistant" not in p)
    assert not any(PIPELINE in p for p in changed)
