"""A failing run ends (issue 25): a run-to-completion stage whose command keeps failing ends
Failed after its Job's retries and releases its GPUs, on Volcano and on Kueue, as the kubelet and
the batch controllers do it (modelled in :mod:`support.lifecycle`)."""

from __future__ import annotations

from typing import Any

import pytest
from support.corpus import CASES, ROOT, compiled_in
from support.lifecycle import pod_phase, run_batch_job, run_volcano_job, script_outcome
from support.yamlread import manifest


def _jobs(files: dict[str, str], api: str) -> dict[str, dict[str, Any]]:
    return {path: manifest(text) for path, text in sorted(files.items())
            if "/workloads/job-" in path and f"apiVersion: {api}" in text}


@pytest.fixture(scope="module")
def volcano_jobs() -> dict[str, dict[str, Any]]:
    jobs = _jobs(dict(compiled_in(ROOT).files), "batch.volcano.sh/v1alpha1")
    assert any("model-training" in path for path in jobs)
    return jobs


def test_the_kubelet_restarts_in_place_under_on_failure_and_fails_the_pod_under_never() -> None:
    assert pod_phase("OnFailure", {"main": 1}) == "Running"
    assert pod_phase("Never", {"main": 1}) == "Failed"
    assert pod_phase("Never", {"main": 1, "sidecar": None}) == "Running"  # a container still runs
    assert pod_phase("Never", {"main": 0, "sidecar": 0}) == "Succeeded"


def test_a_permanently_failing_training_ends_failed_and_releases_its_gpus(
        volcano_jobs: dict[str, dict[str, Any]]) -> None:
    for path, job in volcano_jobs.items():
        run = run_volcano_job(job, main_exit=1)
        assert run.phase == "Failed", f"{path}: still {run.phase} after {run.retries} retries, holding GPUs"
        assert run.retries == job["spec"]["maxRetry"] and run.gpus_held_at_end == 0, path
        assert run_volcano_job(job, main_exit=0).phase == "Completed", path


def test_the_marker_container_ends_with_the_main_containers_failure(volcano_jobs: dict[str, dict[str, Any]]) -> None:
    marking = [c for job in volcano_jobs.values() for task in job["spec"]["tasks"]
               for c in task["template"]["spec"]["containers"] if c["name"] == "fleetc-mark"]
    assert marking
    for container in marking:
        assert script_outcome(container, 3) not in (None, 0)  # ends, failed: no marker
        assert script_outcome(container, 0) == 0


def test_a_permanently_failing_kueue_job_ends_failed() -> None:
    jobs = _jobs(dict(compiled_in(CASES / "kueue-two-cluster-pipeline").files), "batch/v1")
    assert jobs
    for path, job in jobs.items():
        run = run_batch_job(job, main_exit=1)
        assert run.phase == "Failed" and run.gpus_held_at_end == 0, path
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never", path  # a failure fails the pod
        assert run_batch_job(job, main_exit=0).phase == "Complete", path


def test_the_serving_service_exposes_every_port_the_server_listens_on() -> None:
    """Triton listens on http, grpc and metrics: the Service must reach all three."""
    files = dict(compiled_in(ROOT).files)
    deployments = {p: manifest(t) for p, t in files.items() if "/workloads/deployment-" in p}
    assert deployments
    for path, deployment in deployments.items():
        if deployment["spec"]["template"]["metadata"]["labels"].get("fleetc.dev/role") == "release":
            continue  # a held Deployment's releaser: no Service, no port
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        service = manifest(files[path.replace("/deployment-", "/service-")])
        exposed = {port["targetPort"] for port in service["spec"]["ports"]}
        assert exposed == {port["name"] for port in container["ports"]}, path
