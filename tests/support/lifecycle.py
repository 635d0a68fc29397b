"""A model of how a run-to-completion stage fails: the kubelet restarting a container in place
versus a pod failing, and what the batch controllers make of a failed pod.

Each rule is the upstream code it is named after:

* the kubelet (kubernetes v1.31): a terminated container is started again unless the pod's
  ``restartPolicy`` says not to (``pkg/kubelet/container/helpers.go``
  ``ShouldContainerBeRestarted``: ``Never`` never, ``OnFailure`` on a non-zero exit, ``Always``
  always), and the pod's phase follows its containers (``pkg/kubelet/kubelet_pods.go``
  ``getPhase``, ported in :func:`pod_phase`): Running while any container runs, Failed only
  when all have stopped, one of them failed and the policy is ``Never``; under ``OnFailure`` a
  failed container is restarted and the pod stays Running;
* a sidecar's behaviour is its script's: :func:`script_outcome` runs it in ``sh`` with the
  pod's shared status folder and stubbed ``rclone`` and ``sleep`` (a script that sleeps while
  the main container has already stopped would sleep for ever, since nothing changes);
* Volcano's job controller (volcano v1.15.1): it sees pods only through their phase
  (``pkg/controllers/job/job_controller_handler.go`` ``updatePod`` raises ``PodFailed`` when a
  pod's phase turns Failed); the event's action is the first of the task's then the Job's
  ``policies`` naming it, else ``SyncJob`` (``pkg/controllers/job/job_controller_util.go``
  ``applyPolicies``); ``RestartJob`` kills the pods and counts a retry
  (``pkg/controllers/job/state/running.go``), and a restarting Job whose ``retryCount`` reached
  ``maxRetry`` ends Failed (``state/restarting.go``); under ``SyncJob`` a Job all of whose pods
  ended is Completed when ``minAvailable`` of them succeeded, else Failed (``state/running.go``);
* the Job controller (kubernetes v1.31 ``pkg/controller/job/job_controller.go``): a failed pod
  is replaced until more than ``backoffLimit`` failed; under ``OnFailure`` the containers'
  restarts count too (``pastBackoffLimitOnFailure``); then the Job is Failed and its pods
  deleted.

The run is stepped: each step every live pod's main container runs its command once (exiting
with the code given) and the kubelet and the controller act. GPU-steps count the GPUs of the
pods that hold them (not in a terminal phase) at each step.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.runtime import GPU

STATUS_PATH = "/fleetc/status"  # fleetc.render.order.STATUS_PATH, the folder the wrapper writes


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """kubernetes ``ShouldContainerBeRestarted`` for a terminated container."""
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


def pod_phase(restart_policy: str, states: Mapping[str, int | None]) -> str:
    """kubernetes ``getPhase`` over the regular containers: ``states`` maps each to its exit
    code, or None while it runs (a container being restarted counts as stopped)."""
    running = sum(1 for code in states.values() if code is None)
    stopped = len(states) - running
    succeeded = sum(1 for code in states.values() if code == 0)
    if running > 0:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    if restart_policy == "Never":
        return "Failed"
    return "Running"  # OnFailure: the failed containers are restarted


_STUBS = {
    "rclone": "#!/bin/sh\ncat >/dev/null 2>&1\nexit 0\n",
    # Sleeping after the main container stopped is waiting for ever: nothing else changes.
    "sleep": "#!/bin/sh\nkill -TERM $PPID\nexit 0\n",
}


def script_outcome(container: Mapping[str, Any], main_exit: int) -> int | None:
    """How ``container`` (an ``sh -c`` script) ends once the main container exited with
    ``main_exit`` (the wrapper wrote it to the status folder): its exit code, or None when it
    would run for ever."""
    command = list(container["command"])
    assert command[:2] == ["sh", "-c"], command
    with tempfile.TemporaryDirectory() as folder:
        status = Path(folder, "status")
        status.mkdir()
        (status / "exit-code").write_text(f"{main_exit}\n")
        stubs = Path(folder, "bin")
        stubs.mkdir()
        for name, text in _STUBS.items():
            (stubs / name).write_text(text)
            (stubs / name).chmod(0o755)
        script = command[2].replace(STATUS_PATH, str(status))
        env = {"PATH": f"{stubs}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        done = subprocess.run(["sh", "-c", script, *command[3:]], env=env, capture_output=True, check=False)
    return None if done.returncode < 0 else done.returncode


@dataclass
class Run:
    """How a Job's run ended: its phase after the steps (Running: it had not ended), the
    retries its controller counted, and the GPU-steps its pods held."""

    phase: str
    retries: int
    gpu_steps: int
    gpus_held_at_end: int


def _pod_outcome(spec: Mapping[str, Any], main_exit: int) -> tuple[str, int]:
    """(phase, container restarts) of one pod one step after its main container exited with
    ``main_exit``: the sidecars end as their scripts do; the kubelet restarts what its policy
    says (a restarted main container runs again, so exits again, next step)."""
    policy = spec.get("restartPolicy", "Always")
    main, *sidecars = spec["containers"]
    states: dict[str, int | None] = {main["name"]: main_exit}
    states |= {c["name"]: script_outcome(c, main_exit) for c in sidecars}
    restarts = 0
    for name, code in list(states.items()):
        if code is not None and should_restart(policy, code):
            states[name] = None  # started again
            restarts += 1
    return pod_phase(policy, states), restarts


def _gpus(spec: Mapping[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0)) for c in spec["containers"])


def run_volcano_job(job: Mapping[str, Any], main_exit: int, steps: int = 20) -> Run:
    """A Volcano Job whose main containers all exit with ``main_exit`` on every run."""
    spec = job["spec"]
    pods = [(task, task["template"]["spec"]) for task in spec["tasks"] for _ in range(task["replicas"])]
    phase, retries, gpu_steps = "Running", 0, 0
    for _ in range(steps):
        if phase in ("Completed", "Failed"):
            break
        gpu_steps += sum(_gpus(pod) for _, pod in pods)
        outcomes = [(task, _pod_outcome(pod, main_exit)[0]) for task, pod in pods]
        failed = [task for task, pod_phase_ in outcomes if pod_phase_ == "Failed"]
        if failed:
            action = _volcano_action(spec, failed[0], "PodFailed")
            if action == "RestartJob":
                retries += 1  # running.go: KillJob, phase Restarting, retryCount++
                if retries >= spec.get("maxRetry", 3):
                    phase = "Failed"  # restarting.go
                continue  # restarting.go: back to Pending, the pods created again
        if all(p in ("Succeeded", "Failed") for _, p in outcomes):
            succeeded = sum(1 for _, p in outcomes if p == "Succeeded")
            phase = "Completed" if succeeded >= spec.get("minAvailable", len(pods)) else "Failed"
    held = 0 if phase in ("Completed", "Failed") else sum(_gpus(pod) for _, pod in pods)
    return Run(phase, retries, gpu_steps, held)


def _volcano_action(spec: Mapping[str, Any], task: Mapping[str, Any], event: str) -> str:
    """``applyPolicies``: the task's policies, then the Job's; ``SyncJob`` when none names the event."""
    for policy in (*task.get("policies", []), *spec.get("policies", [])):
        if policy.get("event") == event or event in policy.get("events", []):
            return str(policy["action"])
    return "SyncJob"


def run_batch_job(job: Mapping[str, Any], main_exit: int, steps: int = 20) -> Run:
    """A ``batch/v1`` Job whose main containers all exit with ``main_exit`` on every run."""
    spec = job["spec"]
    pod = spec["template"]["spec"]
    limit = spec.get("backoffLimit", 6)
    phase, failures, gpu_steps = "Running", 0, 0
    for _ in range(steps):
        gpu_steps += _gpus(pod) * spec.get("parallelism", 1)
        pod_phase_, restarts = _pod_outcome(pod, main_exit)
        failures += spec.get("parallelism", 1) * (restarts if pod_phase_ == "Running" else 1)
        if pod_phase_ == "Succeeded":
            phase = "Complete"
            break
        if failures > limit:
            phase = "Failed"
            break
    held = 0 if phase != "Running" else _gpus(pod) * spec.get("parallelism", 1)
    return Run(phase, failures, gpu_steps, held)
