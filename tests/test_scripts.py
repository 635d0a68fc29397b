"""The scripts fleetc renders into containers, as the kubelet starts them and a real ``sh``
runs them: the kubelet's ``$(VAR)`` expansion (ported in :mod:`support.expansion`), the wait,
mark and run scripts of :mod:`fleetc.render.order`, and no policy value ever running as a
command (issue 25: waits that never finish, failures nobody sees, SIGTERM swallowed; issue 27:
shell injection through output URLs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from support.corpus import CASES, ROOT, compile_texts, compiled_in, read_policies, read_tree
from support.expansion import expand, mapping_func_for, references
from support.runtime import (
    VOLCANO_ANNOTATIONS,
    kubelet_view,
    markers_written,
    objects,
    order_problems,
    plugin_env,
    reads,
    release_of,
    releaser_of,
    replica_set_pods,
    ungate_of,
)

from fleetc.errors import PolicyError
from fleetc.render.order import LOADED_SCRIPT, MARK_SCRIPT, RUN_SCRIPT, STATUS_PATH, WAIT_SCRIPT
from fleetc.render.release import RELEASE_SCRIPT, RELEASER_SCRIPT, UNGATE_SCRIPT
from fleetc.render.yamlout import dump

#: Every script text fleetc renders, by name.
SCRIPTS = {"run": RUN_SCRIPT, "mark": MARK_SCRIPT, "wait": WAIT_SCRIPT, "release": RELEASE_SCRIPT,
           "ungate": UNGATE_SCRIPT, "releaser": RELEASER_SCRIPT, "loaded": LOADED_SCRIPT}

SHELLS = [shell for shell in ("dash", "bash") if shutil.which(shell)]
OLD_RENDER = ROOT / "tests" / "fixtures" / "render-1"
TRAINING = "llm-chinese-training/model-training"
COS_APP_ID = "{secret:cos-credentials:fs.cos.app.id}"  # the model's stand-in for the Secret's value


# --------------------------------------------------------------------------- the kubelet's expansion
@pytest.mark.parametrize(("text", "expanded"), [
    ("$(VAR_A)", "A"),
    ("___$(VAR_B)___", "___B___"),
    ("$(VAR_A)-$(VAR_B)", "A-B"),
    ("$$(VAR_A)", "$(VAR_A)"),  # escaped
    ("$$$(VAR_A)", "$A"),
    ("$(UNKNOWN)", "$(UNKNOWN)"),  # left as written
    ("$(VAR_A", "$(VAR_A"),  # incomplete
    ("$VAR_A", "$VAR_A"),  # not a reference
    ("ends in $", "ends in $"),
    ("$(VAR_EMPTY)x", "x"),
    # a reference ends at the first ')': the one nested in a command substitution stays
    ("$(rclone cat m-$(VAR_A)/x)", "$(rclone cat m-$(VAR_A)/x)"),
    ("é$(VAR_A)é", "éAé"),
])
def test_the_kubelet_expands_references_as_expand_go_does(text: str, expanded: str) -> None:
    """Cases of kubernetes ``third_party/forked/golang/expansion/expand_test.go``."""
    assert expand(text, mapping_func_for({"VAR_A": "A", "VAR_B": "B", "VAR_EMPTY": ""})) == expanded


def test_the_rendered_scripts_are_left_as_they_are_by_the_kubelet() -> None:
    """No ``$(`` and no ``$$`` in a script: whatever the container's variables, the kubelet
    passes it on unchanged, and nothing depends on a reference nested in shell text."""
    for script in SCRIPTS.values():
        assert references(script) == [] and "$$" not in script
        assert expand(script, lambda name: "X") == script


def test_old_output_waits_for_a_cos_bucket_literally_named_after_the_variable() -> None:
    """On the output of render version 1, the training's marker goes to the bucket
    ``models-<app id>`` while every wait polls ``models-$(FLEETC_COS_APP_ID)``: the kubelet
    ends the reference in ``$(rclone cat ':s3:models-$(FLEETC_COS_APP_ID)/...')`` at the first
    ``)``, so the inner one is never filled in, and the wait never finishes."""
    bundled = compiled_in(ROOT)
    old = {f"{path}": text for path, text in read_tree(OLD_RENDER).items()}
    (run,) = {content for _, content in markers_written(old)[TRAINING]}
    assert markers_written(old)[TRAINING] == {(f":s3:models-{COS_APP_ID}/llm/v1/_SUCCESS", run)}
    polled = {read for _, obj in objects(old) for read in _reads(obj) if read[1] == run}
    assert polled == {(":s3:models-$(FLEETC_COS_APP_ID)/llm/v1/_SUCCESS", run)}
    assert [p for p in order_problems(bundled.model, old, set()) if "does not wait" in p] == [
        "inference-cluster-aliyun: Job/llm-chinese-training-model-evaluation-c1b9ce37 pod 0 does not wait for "
        "model-training's markers"]
    # today: every wait on the trained model polls the bucket the marker is written to
    written = markers_written(bundled.files)[TRAINING]
    assert written == {(f":s3:models-{COS_APP_ID}/llm/v1/_SUCCESS", next(iter(written))[1])}
    polled = {read for _, obj in objects(bundled.files) for read in _reads(obj)
              if read[1] == next(iter(written))[1]}
    assert polled == written
    assert order_problems(bundled.model, bundled.files, set()) == []


def _reads(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """What every init container of ``obj``'s pods polls."""
    for spec in _pod_specs(obj):
        for init in spec.get("initContainers", []):
            yield from reads(init, {})


def _pod_specs(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh/"):
        return [t["template"]["spec"] for t in obj["spec"]["tasks"]]
    if obj["kind"] in ("Deployment", "Job"):
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "DataProcess":
        return [obj["spec"]["processor"]["job"]["podSpec"]]
    return []


# --------------------------------------------------------------------------- running the scripts
#: rclone as far as the scripts use it: ``cat`` and ``rcat`` of a path in a folder standing
#: for every store (a missing object: rclone's "object not found"; the marker folders
#: ``/fleetc/markers/<slot>`` all mount the one ``nfs://`` export a test's policies name); ``STUB_FAIL`` makes every
#: call fail as a refused request does. Every call is logged, one line of arguments each.
RCLONE_STUB = r"""#!/usr/bin/env python3
import hashlib, os, re, sys
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(repr(sys.argv[1:]) + "\n")
if os.environ.get("STUB_FAIL"):
    sys.stderr.write("ERROR : AccessDenied: Access Denied\n")
    sys.exit(1)
where = re.sub(r"^/fleetc/markers/[0-9]+/", "nfs:", sys.argv[2])  # one export, mounted per slot
path = os.path.join(os.environ["STUB_STORE"], hashlib.sha256(where.encode()).hexdigest())
if sys.argv[1] == "cat":
    if not os.path.exists(path):
        sys.stderr.write("ERROR : Failed to cat: object not found\n")
        sys.exit(1)
    sys.stdout.write(open(path).read())
elif sys.argv[1] == "rcat":
    open(path, "w").write(sys.stdin.read())
"""


class Sandbox:
    """A folder with stubs for ``rclone`` and ``sleep`` first on PATH, a store, a log of rclone's
    calls, and the main container's status folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.store = root / "store"
        self.status = root / "status"
        for folder in (self.bin, self.store, self.status):
            folder.mkdir(parents=True, exist_ok=True)
        (self.bin / "rclone").write_text(RCLONE_STUB)
        (self.bin / "sleep").write_text("#!/bin/sh\nexit 0\n")
        for stub in ("rclone", "sleep"):
            (self.bin / stub).chmod(0o755)
        self.log = root / "rclone.log"
        self.log.touch()

    def run(self, shell: str, env: Mapping[str, str], argv: list[str],
            **extra: str) -> subprocess.CompletedProcess[str]:
        """``argv`` (``sh -c <script> <name> <args>...``) under ``shell``, with the container's
        ``env`` only (and PATH, TMPDIR), the status folder where the script says /fleetc/status."""
        assert argv[:2] == ["sh", "-c"]
        script = argv[2].replace(STATUS_PATH, str(self.status))
        environ = {**env, "PATH": f"{self.bin}:{os.environ['PATH']}", "TMPDIR": str(self.root),
                   "STUB_LOG": str(self.log), "STUB_STORE": str(self.store), **extra}
        return subprocess.run([shell, "-c", script, *argv[3:]], env=environ, capture_output=True, text=True,
                              timeout=120, check=False)


def _container(files: Mapping[str, str], name: str, kind: str = "Job") -> tuple[Mapping[str, Any], Any]:
    """The first container called ``name`` in an object of ``kind``, and its pod's plugin env."""
    for _, obj in objects(files):
        if obj["kind"] != kind:
            continue
        for spec in _pod_specs(obj):
            for container in spec.get("initContainers", []) + spec["containers"]:
                if container["name"] == name:
                    task = obj["spec"]["tasks"][0] if "tasks" in obj["spec"] else None
                    return container, (plugin_env(obj, task, 0) if task else [])
    raise AssertionError(f"no container {name}")


@pytest.fixture(scope="module")
def two_cluster() -> dict[str, str]:
    return dict(compiled_in(CASES / "two-cluster-pipeline").files)


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_mark_then_wait_complete_through_the_same_marker(shell: str, two_cluster: dict[str, str],
                                                         tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    mark, plugins = _container(two_cluster, "fleetc-mark")
    env, argv = kubelet_view(mark, plugins, VOLCANO_ANNOTATIONS)
    assert env["RCLONE_S3_NO_CHECK_BUCKET"] == "true"  # no CreateBucket before the upload
    (box.status / "exit-code").write_text("0\n")
    done = box.run(shell, env, argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"fleetc: llm/train completed; wrote :s3:models/llm/v2/{argv[4]}\n"
    wait, _ = _container(two_cluster, "fleetc-wait-train", "Deployment")
    env, argv = kubelet_view(wait)
    assert argv[4:] == ["_SUCCESS.0", "_SUCCESS.1"]
    for rank in ("_SUCCESS.0", "_SUCCESS.1"):  # the other rank's marker too
        box.run(shell, {**kubelet_view(mark, plugins)[0]}, ["sh", "-c", MARK_SCRIPT, "fleetc-mark", rank])
    done = box.run(shell, env, argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "fleetc: llm/train completed; starting"
    assert "not found" not in done.stdout  # "not there yet" is not an error


@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_a_wait_logs_every_error_but_not_found_naming_the_stage(shell: str, two_cluster: dict[str, str],
                                                                tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    wait, _ = _container(two_cluster, "fleetc-wait-train", "Deployment")
    env, argv = kubelet_view(wait)
    script = argv[2].replace("deadline=`expr $deadline + 86400`", "deadline=0")  # time out at once
    done = box.run(shell, env, [*argv[:2], script, *argv[3:]], STUB_FAIL="1")
    assert done.returncode == 1
    assert ("fleetc: reading :s3:models/llm/v2/_SUCCESS.0, the marker of llm/train, failed: "
            "ERROR : AccessDenied: Access Denied") in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == (
        "fleetc: gave up after 86400s waiting for llm/train to complete (:s3:models/llm/v2/_SUCCESS*)")


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_a_final_failure_is_marked_and_stops_its_dependants_naming_it(shell: str, two_cluster: dict[str, str],
                                                                      tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    mark, plugins = _container(two_cluster, "fleetc-mark")
    env, argv = kubelet_view(mark, plugins, VOLCANO_ANNOTATIONS)
    (box.status / "exit-code").write_text("3\n")
    # a first attempt: the Job will be restarted, dependants keep waiting
    env |= {"FLEETC_RESTART_POLICY": "Never"}
    done = box.run(shell, env, argv)
    assert done.returncode == 1
    assert done.stdout == (f"fleetc: llm/train failed with exit code 3 (retried); "
                           f"wrote :s3:models/llm/v2/_FAILED{argv[4].removeprefix('_SUCCESS')}\n")
    wait, _ = _container(two_cluster, "fleetc-wait-train", "Deployment")
    wait_env, wait_argv = kubelet_view(wait)
    script = wait_argv[2].replace("deadline=`expr $deadline + 86400`", "deadline=0")
    waited = box.run(shell, wait_env, [*wait_argv[:2], script, *wait_argv[3:]])
    assert "an attempt failed" in waited.stdout and "gave up after" in waited.stdout
    # the last attempt Volcano makes (maxRetry 3: created at retry count 2)
    done = box.run(shell, {**env, "FLEETC_RETRY_COUNT": "2"}, argv)
    assert "(final)" in done.stdout
    waited = box.run(shell, wait_env, wait_argv)
    assert waited.returncode == 1
    assert waited.stdout.splitlines()[-1].startswith("fleetc: llm/train failed: its last attempt ended with ")
    assert waited.stdout.splitlines()[-1].endswith(" 3 final (:s3:models/llm/v2/_FAILED.0); not starting")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_run_restarted_in_place_is_marked_once_it_succeeds(shell: str, two_cluster: dict[str, str],
                                                             tmp_path: Path) -> None:
    """Where a pod template restarts in place (``restartPolicy: OnFailure``; fleetc renders
    ``Never`` today, so a failed pod fails and Volcano's retries take over, but the mark must
    not depend on it) the kubelet restarts the main container in place: the mark reports the
    failure, then waits for the next attempt's code (even one that follows faster than it
    polls) and marks its success."""
    box = Sandbox(tmp_path)
    mark, plugins = _container(two_cluster, "fleetc-mark")
    env, argv = kubelet_view(mark, plugins, VOLCANO_ANNOTATIONS)
    assert env["FLEETC_RESTART_POLICY"] == "Never"
    env["FLEETC_RESTART_POLICY"] = "OnFailure"
    (box.status / "exit-code").write_text("3\n")
    script = argv[2].replace(STATUS_PATH, str(box.status))
    environ = {**env, "PATH": f"{box.bin}:{os.environ['PATH']}", "TMPDIR": str(tmp_path),
               "STUB_LOG": str(box.log), "STUB_STORE": str(box.store)}
    process = subprocess.Popen([shell, "-c", script, *argv[3:]], env=environ, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # until the failure is marked (a bound on waiting, not a timing assertion)
            if "_FAILED" in box.log.read_text():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        (box.status / "exit-code").write_text("0\n")  # the next attempt succeeded
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert out.splitlines() == [
        "fleetc: llm/train failed with exit code 3 (retried); wrote :s3:models/llm/v2/_FAILED.0",
        f"fleetc: llm/train completed; wrote :s3:models/llm/v2/{argv[4]}"]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("code", [0, 5])
def test_the_run_wrapper_records_the_exit_code(shell: str, code: int, tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    done = box.run(shell, {}, ["sh", "-c", RUN_SCRIPT, "fleetc-run", "sh", "-c", f"exit {code}"])
    assert done.returncode == code
    assert (box.status / "exit-code").read_text() == f"{code}\n"


#: A training that checkpoints on SIGTERM: it says it is ready, then on SIGTERM writes its
#: checkpoint and exits 0.
TRAINING_STUB = """
import pathlib, signal, sys
def stop(*_):
    pathlib.Path(sys.argv[1]).write_text("checkpoint")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[2]).write_text("ready")
signal.pause()
"""


@pytest.mark.parametrize("shell", SHELLS)
def test_sigterm_reaches_the_stages_command(shell: str, tmp_path: Path) -> None:
    """The kubelet stops a container with SIGTERM to its PID 1, the wrapper: it passes it on,
    so the training checkpoints, and records no exit code (a stopped run is no failure)."""
    box = Sandbox(tmp_path)
    checkpoint, ready = tmp_path / "checkpoint", tmp_path / "ready"
    script = RUN_SCRIPT.replace(STATUS_PATH, str(box.status))
    process = subprocess.Popen([shell, "-c", script, "fleetc-run", "python3", "-c", TRAINING_STUB,
                                str(checkpoint), str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # until the training runs (not a timing assertion: a bound on waiting)
            if ready.exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert ready.exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert checkpoint.read_text() == "checkpoint"
    assert not (box.status / "exit-code").exists()


# --------------------------------------------------------------------------- no injection
CANARY = "CANARY"
#: Shell metacharacters that would run ``touch CANARY`` if a value reached a shell as script
#: text, without whitespace (a storage URL holds none) and with it.
PAYLOADS = [
    "$(touch${IFS}CANARY)", "`touch${IFS}CANARY`", "';touch${IFS}CANARY;'", "\";touch${IFS}CANARY;\"",
    "$$(touch${IFS}CANARY)", "x;touch${IFS}CANARY", "$(FLEETC_RUN)", "a|touch${IFS}CANARY",
]
LOOSE_PAYLOADS = [*PAYLOADS, "\ntouch CANARY\n", "'\ntouch CANARY\n'", "$( touch CANARY )"]
SCHEMES = ["s3://models", "cos://models", "gs://models", "nfs://filer.example.com/exports", "hdfs://namenode:8020"]


@pytest.fixture(scope="module")
def prefetch_policies() -> dict[str, str]:
    policies = read_policies(CASES / "prefetch-waits-for-the-writer" / "policies")
    return policies


def _hostile(policies: dict[str, str], scheme: str, url: str, in_bucket: bool, words: list[str],
             canary: str) -> dict[str, str]:
    """The prefetch case with the policy values that reach a container hostile: the output
    and input URLs (in the bucket or the path), the command's words (the image is validated
    as an image reference, names as DNS labels: neither can hold these payloads)."""
    yaml = YAML(typ="safe")
    pipeline = yaml.load(policies["policies/pipeline.yaml"])
    train, serve = pipeline["spec"]["stages"]
    url = url.replace(CANARY, canary)
    train["outputs"][0]["storage"] = f"{scheme}{url}/v2/" if in_bucket else f"{scheme}/{url}/v2/"
    if not scheme.startswith(("s3", "cos", "gs")):
        train["outputs"][0].pop("secretName")
    train["inputs"][0]["source"] = f"s3://corpus/{url}/"
    train["command"] = ["true", *(word.replace(CANARY, canary) for word in words)]
    serve["command"] = ["true", words[0].replace(CANARY, canary)]
    return {**policies, "policies/pipeline.yaml": dump(pipeline)}


@settings(max_examples=16, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scheme=st.sampled_from(SCHEMES), url=st.sampled_from(PAYLOADS), in_bucket=st.booleans(),
       words=st.lists(st.sampled_from(LOOSE_PAYLOADS), min_size=1, max_size=3))
@pytest.mark.slow
def test_no_policy_value_runs_as_a_command(prefetch_policies: dict[str, str], scheme: str, url: str,
                                           in_bucket: bool, words: list[str]) -> None:
    """Every ``sh -c`` container of the output, as the kubelet starts it, run under a real
    shell: the marks (the main container exited 0), then every wait, which must find the marks
    where they were written, then the main containers' wrappers; no payload creates the
    canary, and the URL's payload reached rclone unchanged."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        canary = str(root / "canary")
        try:
            files = compile_texts(_hostile(prefetch_policies, scheme, url, in_bucket, words, canary))
        except PolicyError:  # a value the validation refuses never reaches a container
            assume(False)
        box = Sandbox(root / "box")
        containers = _shell_containers(files)
        # the marks, the loaded marks (after the DataLoad of what Triton serves, where it is cached),
        # the waits, the runs
        scripts = {argv[2] for _, argv, _ in containers}
        assert {RUN_SCRIPT, MARK_SCRIPT, WAIT_SCRIPT} <= scripts
        # the release of a gated Volcano Job talks to the API server (run below, against a stand-in)
        assert scripts <= {RUN_SCRIPT, MARK_SCRIPT, LOADED_SCRIPT, WAIT_SCRIPT, UNGATE_SCRIPT, RELEASER_SCRIPT}
        (box.status / "exit-code").write_text("0\n")
        for kind in (MARK_SCRIPT, LOADED_SCRIPT, WAIT_SCRIPT, RUN_SCRIPT):
            for env, argv, name in containers:
                if argv[2] == kind:
                    done = box.run(SHELLS[0], env, argv)
                    assert done.returncode == 0, (name, done.stdout, done.stderr)
        assert not Path(canary).exists()
        if not scheme.startswith("nfs") and not in_bucket:  # a bucket ends at its first '/'
            assert repr(url.replace(CANARY, canary))[1:-1] in box.log.read_text()


def _shell_containers(files: Mapping[str, str]) -> list[tuple[dict[str, str], list[str], str]]:
    """(env, argv, name) of every container of the output that runs ``sh -c``, as the kubelet
    starts it in each pod (once per distinct start); no other container runs a shell."""
    found: list[tuple[dict[str, str], list[str], str]] = []
    for _, obj in objects(files):
        pods: list[tuple[Mapping[str, Any], list[dict[str, str]]]] = []
        if obj["kind"] == "Job" and "tasks" in obj["spec"]:
            pods = [(t["template"]["spec"], plugin_env(obj, t, i)) for t in obj["spec"]["tasks"]
                    for i in range(t["replicas"])]
        else:
            pods = [(spec, []) for spec in _pod_specs(obj)]
        for spec, plugins in pods:
            for container in spec.get("initContainers", []) + spec["containers"]:
                appended = plugins if container in spec["containers"] else []
                env, argv = kubelet_view(container, appended, VOLCANO_ANNOTATIONS)
                if argv[:2] == ["sh", "-c"]:
                    if (env, argv, container["name"]) not in found:
                        found.append((env, argv, container["name"]))
                else:
                    assert argv[:1] != ["sh"], container["name"]
    return found


@pytest.mark.parametrize("script", list(SCRIPTS.values()), ids=list(SCRIPTS))
@pytest.mark.parametrize("shell", SHELLS)
def test_every_rendered_script_parses(shell: str, script: str) -> None:
    """``sh -n``: the script texts fleetc renders are whole shell programs."""
    done = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@settings(max_examples=6, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scheme=st.sampled_from(SCHEMES), url=st.sampled_from(PAYLOADS), in_bucket=st.booleans(),
       words=st.lists(st.sampled_from(LOOSE_PAYLOADS), min_size=1, max_size=3))
def test_a_policy_value_reaches_a_shell_only_as_a_variable_or_an_argument(
        prefetch_policies: dict[str, str], scheme: str, url: str, in_bucket: bool, words: list[str]) -> None:
    """Issue 27, promise 2, without running a shell (the slow test above runs them): the script
    text of every ``sh -c`` container is one of fleetc's script constants, whatever the policy
    values (command words, input and output URLs; names and images are validated as DNS labels
    and image references, so they hold no metacharacter), and each hostile value is found only
    in the container's environment or in the arguments after the script."""
    canary = "/nonexistent/canary"
    try:
        files = compile_texts(_hostile(prefetch_policies, scheme, url, in_bucket, words, canary))
    except PolicyError:
        assume(False)
    containers = _shell_containers(files)
    assert containers
    for _, argv, name in containers:
        assert argv[2] in SCRIPTS.values(), name
    values = [word.replace(CANARY, canary) for word in words] + [url.replace(CANARY, canary)]
    passed = "\0".join(f"{value}" for env, argv, _ in containers for value in [*env.values(), *argv[3:]])
    assert any(value in passed for value in values)


# --------------------------------------------------------------------------- the release of a held Kueue Job
#: curl as the release script uses it: logs its arguments, writes ``STUB_BODY`` where ``-o``
#: says, prints ``STUB_HTTP`` (what ``-w '%{http_code}'`` prints).
CURL_STUB = r"""#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(repr(args) + "\n")
open(args[args.index("-o") + 1], "w").write(os.environ.get("STUB_BODY", ""))
sys.stdout.write(os.environ["STUB_HTTP"])
"""
#: What the Job controller labels the release pod with, read through the downward API.
OWNER = {"FLEETC_OWNER": "llm-train-release-0", "FLEETC_OWNER_UID": "6f1c2d3e-0000-4000-8000-000000000001"}


@pytest.fixture(scope="module")
def kueue_case() -> dict[str, str]:
    return dict(compiled_in(CASES / "kueue-two-cluster-pipeline").files)


def _release(box: Sandbox, files: Mapping[str, str]) -> tuple[dict[str, str], list[str], Any]:
    """The Kueue case's release container as the kubelet starts it (the owner's labels filled
    in), its script reading the service account's files from the sandbox; and the model's view."""
    (job,) = [obj for cluster, obj in objects(files) if release_of(cluster, obj) is not None]
    env, argv = _started_in(box, CURL_STUB, job)
    return {**env, **OWNER}, argv, release_of("train-kueue", job)


def _started_in(box: Sandbox, api: str, job: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The environment and argv the kubelet starts ``job``'s container with, its script reading
    the service account's files from the sandbox and calling the API server through ``api``
    (a stand-in ``curl``)."""
    (curl := box.bin / "curl").write_text(api)
    curl.chmod(0o755)
    account = box.root / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("the-token")
    (account / "ca.crt").write_text("the-ca")
    env, argv = kubelet_view(job["spec"]["template"]["spec"]["containers"][0])
    script = argv[2].replace("/var/run/secrets/kubernetes.io/serviceaccount", str(account))
    return env, [*argv[:2], script, *argv[3:]]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_release_creates_the_held_jobs_local_queue_owned_by_its_job(shell: str, tmp_path: Path,
                                                                        kueue_case: dict[str, str]) -> None:
    box = Sandbox(tmp_path)
    env, argv, release = _release(box, kueue_case)
    done = box.run(shell, env, argv, STUB_HTTP="201")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"fleetc: llm/train may start: created LocalQueue ml/{release.queue} (ClusterQueue fleetc)"]
    (args,) = [eval(line) for line in box.log.read_text().splitlines()]  # noqa: S307 (our own repr)
    assert args[args.index("-X") + 1] == "POST" and args[-1] == (
        "https://kubernetes.default.svc/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/localqueues")
    assert "Authorization: Bearer the-token" in args and args[args.index("--cacert") + 1].endswith("/ca.crt")
    body = json.loads(args[args.index("--data") + 1])
    assert body == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": release.queue, "namespace": "ml",
                                 "labels": {"app.kubernetes.io/managed-by": "fleetc"},
                                 "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                      "name": OWNER["FLEETC_OWNER"],
                                                      "uid": OWNER["FLEETC_OWNER_UID"]}]},
                    "spec": {"clusterQueue": "fleetc"}}
    assert body["spec"] == release.local_queue()["spec"]  # what the suite's model takes it to create


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_a_release_whose_queue_exists_ends_and_one_refused_says_why_and_fails(shell: str, tmp_path: Path,
                                                                              kueue_case: dict[str, str]) -> None:
    box = Sandbox(tmp_path)
    env, argv, release = _release(box, kueue_case)
    done = box.run(shell, env, argv, STUB_HTTP="409")
    assert done.returncode == 0 and done.stdout.splitlines() == [
        f"fleetc: llm/train may start: LocalQueue ml/{release.queue} exists"]
    refused = '{"kind":"Status","reason":"Forbidden"}'
    done = box.run(shell, env, argv, STUB_HTTP="403", STUB_BODY=refused)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"fleetc: creating LocalQueue ml/{release.queue} failed (try {n} of 10): 403 {refused}" for n in range(1, 11)]


#: The start of each stand-in API server: log the call's arguments, read the state, take the
#: URL and method from curl's arguments; 404 unless the stub's own part answers otherwise.
_STUB_CALL = r"""args = sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(repr(args) + "\n")
path = os.environ["STUB_STATE"]
state = json.load(open(path))
url, method = args[-1], args[args.index("-X") + 1]
code, body = 404, '{"kind":"Status","code":404}'
"""


# --------------------------------------------------------------------------- the release of a gated Volcano Job
#: The API server as the ungate script uses it, with Volcano's job controller behind it
#: (``STUB_STATE``, JSON: ``pods``: name -> scheduling gates, absent until created; ``phases``:
#: the Job's phase at each read, the last one kept). A JSON patch ``test`` of the first gate
#: then ``remove`` of it, as RFC 6902 applies it (200; 422 when the test fails or there is no
#: gate; 404 for a pod not there). At a read that finds the Job ``Pending`` its pods are created
#: gated; at one that finds it ``Restarting`` they are deleted and created again from the
#: template, gated (volcano v1.15.1 ``job_controller_actions.go`` ``killJob``, ``syncJob``;
#: ``createJobPod`` copies the template). Every call is logged.
API_STUB = "#!/usr/bin/env python3\nimport json, os, sys\n" + _STUB_CALL + r"""if method == "PATCH" and "/pods/" in url:
    name = url.rsplit("/", 1)[1]
    if name in state["pods"]:
        test, remove = json.loads(args[args.index("--data") + 1])
        gates = state["pods"][name]
        assert (test["op"], test["path"], remove) == ("test", "/spec/schedulingGates/0/name",
                                                     {"op": "remove", "path": "/spec/schedulingGates/0"})
        if gates and gates[0] == test["value"]:
            state["pods"][name] = gates[1:]
            code, body = 200, "{}"
        else:
            code, body = 422, '{"kind":"Status","code":422}'
elif method == "GET" and "/apis/batch.volcano.sh/v1alpha1/namespaces/" in url and url.endswith("?pretty=false"):
    phase = state["phases"].pop(0) if len(state["phases"]) > 1 else state["phases"][0]
    if phase in ("Pending", "Restarting"):
        state["pods"] = {name: list(state["template"]) for name in state["names"]}
    code, body = 200, json.dumps({"kind": "Job", "status": {"state": {"phase": phase}}}, separators=(",", ":"))
json.dump(state, open(path, "w"))
open(args[args.index("-o") + 1], "w").write(body)
sys.stdout.write(str(code))
"""


def _ungate(box: Sandbox, files: Mapping[str, str]) -> tuple[dict[str, str], list[str], Any]:
    """The release container of the gated training of the Kueue case put on Volcano, as the
    kubelet starts it, reading the service account's files from the sandbox; the model's view."""
    ((cluster, job),) = [(c, obj) for c, obj in objects(files) if ungate_of(c, obj) is not None]
    env, argv = _started_in(box, API_STUB, job)
    return env, argv, ungate_of(cluster, job)


@pytest.fixture(scope="module")
def volcano_case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("volcano")
    shutil.copytree(CASES / "kueue-two-cluster-pipeline" / "policies", folder / "policies")
    fleet = folder / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("    batchScheduler: kueue\n", ""))
    return dict(compiled_in(folder).files)


def _api(box: Sandbox, ungate: Any, phases: list[str], pods: dict[str, list[str]] | None = None) -> Path:
    state = box.root / "api.json"
    state.write_text(json.dumps({"pods": pods or {}, "phases": phases, "names": list(ungate.pods),
                                 "template": [ungate.gate]}))
    return state


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_the_release_ungates_every_pod_again_after_a_restart_until_the_job_ended(
        shell: str, tmp_path: Path, volcano_case: dict[str, str]) -> None:
    """The pods are created gated once the Job is enqueued, released; a restart creates them
    again, gated, and they are released again; once the Job completed the release ends, every
    pod free of the gate. A pod not there yet (404) or already released (422) is not logged."""
    box = Sandbox(tmp_path)
    env, argv, ungate = _ungate(box, volcano_case)
    state = _api(box, ungate, ["Pending", "Running", "Restarting", "Running", "Completed"])
    done = box.run(shell, env, argv, STUB_STATE=str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    freed = [f"fleetc: llm/train may start: removed scheduling gate {ungate.gate} from pod ml/{pod}"
             for pod in ungate.pods]
    assert done.stdout.splitlines() == [*freed, *freed, f"fleetc: llm/train: Job ml/{ungate.target} ended; none "
                                        "of its pods is gated again"]
    assert json.loads(state.read_text())["pods"] == {pod: [] for pod in ungate.pods}
    calls = [eval(line) for line in box.log.read_text().splitlines()]  # noqa: S307 (our own repr)
    assert all("Authorization: Bearer the-token" in call for call in calls)
    assert {call[-1] for call in calls if call[call.index("-X") + 1] == "PATCH"} == {
        f"https://kubernetes.default.svc/api/v1/namespaces/ml/pods/{pod}" for pod in ungate.pods}


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_a_release_refused_says_why_and_goes_on_and_a_pod_with_another_gate_first_is_left(
        shell: str, tmp_path: Path, volcano_case: dict[str, str]) -> None:
    box = Sandbox(tmp_path)
    env, argv, ungate = _ungate(box, volcano_case)
    first, second = ungate.pods
    state = _api(box, ungate, ["Running", "Failed"], {first: ["example.com/other", ungate.gate]})
    done = box.run(shell, env, argv, STUB_STATE=str(state))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"fleetc: llm/train: Job ml/{ungate.target} ended; none of its pods is gated "
                                        "again"]
    assert json.loads(state.read_text())["pods"] == {first: ["example.com/other", ungate.gate]}
    (curl := box.bin / "curl").write_text("#!/bin/sh\nprintf '%s' '{\"reason\":\"Forbidden\"}' > \"$3\"\n"
                                          "printf 403\n")
    curl.chmod(0o755)
    (box.bin / "sleep").write_text("#!/bin/sh\nkill $PPID\n")  # one round, then stop the script
    done = box.run(shell, env, argv)
    assert done.stdout.splitlines() == [
        f"fleetc: removing scheduling gate {ungate.gate} from pod ml/{first} failed: 403 {{\"reason\":\"Forbidden\"}}",
        f"fleetc: removing scheduling gate {ungate.gate} from pod ml/{second} failed: 403 {{\"reason\":\"Forbidden\"}}",
        f"fleetc: reading Job ml/{ungate.target} failed: 403 {{\"reason\":\"Forbidden\"}}"]


# --------------------------------------------------------------------------- the releaser of a held Deployment
#: The API server as the releaser script uses it, with a ReplicaSet behind it (``STUB_STATE``,
#: JSON: ``pods``, the pods as the suite's model creates them, :func:`support.runtime.
#: replica_set_pods`; ``later``: pods the ReplicaSet creates after each list, a scale-up;
#: ``answers``: a status code forced on each PATCH, in turn). A list
#: (``labelSelector``, ``fieldSelector=status.phase=Pending``) answers the matching pods as
#: the API server writes a PodList: compact JSON, each item's fields in Go's struct order
#: (``metadata`` first, ``name`` first in it). A PATCH applies the JSON patch as RFC 6902 does
#: (200; 422 when the test fails; 404 for a pod not there). Every call is logged; the state
#: is written back after each.
RELEASER_API_STUB = ("#!/usr/bin/env python3\nimport json, os, sys, urllib.parse\n"
                     + _STUB_CALL + r"""pods = {p["metadata"]["name"]: p for p in state["pods"]}
if method == "GET" and "/api/v1/namespaces/" in url and url.split("?")[0].endswith("/pods"):
    query = urllib.parse.parse_qs(url.split("?", 1)[1])
    wanted = dict(term.split("=", 1) for term in query["labelSelector"][0].split(","))
    assert query["fieldSelector"] == ["status.phase=Pending"] and query["pretty"] == ["false"]
    items = [{"metadata": {"name": p["metadata"]["name"], "generateName": p["metadata"]["generateName"],
                           "namespace": p["metadata"]["namespace"], "labels": p["metadata"]["labels"],
                           "annotations": {"note": 'a "metadata":{"name":"not-a-pod" in a value'},
                           "ownerReferences": p["metadata"]["ownerReferences"]},
              "spec": p["spec"], "status": p["status"]}
             for p in state["pods"] if wanted.items() <= p["metadata"]["labels"].items()
             and p["status"]["phase"] == "Pending"]
    code = 200
    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                       "items": items}, separators=(",", ":"))
    if state["later"]:
        state["pods"] += state["later"].pop(0)
elif method == "PATCH" and "/pods/" in url:
    name = url.rsplit("/", 1)[1]
    forced = state["answers"].pop(0) if state["answers"] else None
    if forced is not None:
        code, body = forced, '{"kind":"Status","reason":"Forbidden"}'
    elif name in pods:
        test, remove = json.loads(args[args.index("--data") + 1])
        assert (test["op"], test["path"], remove) == ("test", "/spec/schedulingGates/0/name",
                                                     {"op": "remove", "path": "/spec/schedulingGates/0"})
        gates = pods[name]["spec"].get("schedulingGates", [])
        if gates and gates[0]["name"] == test["value"]:
            pods[name]["spec"]["schedulingGates"] = gates[1:]
            code, body = 200, "{}"
        else:
            code, body = 422, '{"kind":"Status","code":422}'
json.dump(state, open(path, "w"))
open(args[args.index("-o") + 1], "w").write(body)
sys.stdout.write(str(code))
""")


def _releaser(box: Sandbox, files: Mapping[str, str], rounds: int) -> tuple[dict[str, str], list[str], Any, Any]:
    """The releaser container of the serving Deployment of the Kueue case put on Volcano, as the
    kubelet starts it, stopped after ``rounds`` rounds (its ``sleep`` counts them); the model's
    view of it and the serving Deployment."""
    ((cluster, deployment),) = [(c, o) for c, o in objects(files) if releaser_of(c, o) is not None]
    (serving,) = [o for _, o in objects(files) if o["kind"] == "Deployment" and releaser_of("", o) is None]
    env, argv = _started_in(box, RELEASER_API_STUB, deployment)
    (box.bin / "sleep").write_text(f"#!/bin/sh\nn=`cat {box.root}/rounds 2>/dev/null || echo 0`\n"
                                   f"n=`expr $n + 1`; echo $n > {box.root}/rounds\n"
                                   f'[ "$n" -ge {rounds} ] && kill $PPID\nexit 0\n')
    return env, argv, releaser_of(cluster, deployment), serving


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_the_releaser_lets_go_the_pods_of_its_run_also_those_a_scale_up_creates(
        shell: str, tmp_path: Path, volcano_case: dict[str, str]) -> None:
    """Two gated pods, released at the first round; the ReplicaSet then creates two more (names
    at random): released at the next; a pod of another run and one already free are left; the
    script goes on (stopped here after three rounds, by its third sleep)."""
    box = Sandbox(tmp_path)
    env, argv, releaser, serving = _releaser(box, volcano_case, rounds=3)
    first, later = replica_set_pods(serving, 2), replica_set_pods(serving, 4, start=2)
    other = replica_set_pods(serving, 5, start=4)[0]
    other["metadata"]["labels"]["fleetc.dev/run"] = "0123456789abcdef"
    state = box.root / "api.json"
    state.write_text(json.dumps({"pods": [*first, other], "later": [later], "answers": []}))
    done = box.run(shell, env, argv, STUB_STATE=str(state))
    assert done.returncode != 0  # it never ends by itself
    freed = [f"fleetc: llm/serve may start: removed scheduling gate {releaser.gate} from pod ml/{p['metadata']['name']}"
             for p in [*first, *later]]
    assert done.stdout.splitlines() == freed, done.stderr
    final = {p["metadata"]["name"]: p["spec"].get("schedulingGates") for p in json.loads(state.read_text())["pods"]}
    assert final == {**{p["metadata"]["name"]: [] for p in [*first, *later]},
                     other["metadata"]["name"]: [{"name": releaser.gate}]}
    calls = [eval(line) for line in box.log.read_text().splitlines()]  # noqa: S307 (our own repr)
    assert all("Authorization: Bearer the-token" in call for call in calls)
    assert sum(call[call.index("-X") + 1] == "GET" for call in calls) == 3


@pytest.mark.slow
@pytest.mark.first_row_fast
@pytest.mark.parametrize("shell", SHELLS)
def test_a_releaser_refused_says_why_and_goes_on(shell: str, tmp_path: Path, volcano_case: dict[str, str]) -> None:
    """A refused patch (403) is logged with the API server's answer and tried again at the next
    round; a 404 (the pod went) and a 422 are not logged; a refused list is logged."""
    box = Sandbox(tmp_path)
    env, argv, releaser, serving = _releaser(box, volcano_case, rounds=2)
    pods = replica_set_pods(serving, 3)
    state = box.root / "api.json"
    state.write_text(json.dumps({"pods": pods, "later": [], "answers": [403, 404, 422]}))
    done = box.run(shell, env, argv, STUB_STATE=str(state))
    names = [p["metadata"]["name"] for p in pods]
    assert done.stdout.splitlines() == [
        f"fleetc: removing scheduling gate {releaser.gate} from pod ml/{names[0]} failed: 403 "
        '{"kind":"Status","reason":"Forbidden"}',
        f"fleetc: llm/serve may start: removed scheduling gate {releaser.gate} from pod ml/{names[0]}",
        f"fleetc: llm/serve may start: removed scheduling gate {releaser.gate} from pod ml/{names[1]}",
        f"fleetc: llm/serve may start: removed scheduling gate {releaser.gate} from pod ml/{names[2]}"], done.stderr
    (curl := box.bin / "curl").write_text("#!/bin/sh\nprintf '%s' '{\"reason\":\"Forbidden\"}' > \"$3\"\n"
                                          "printf 403\n")
    curl.chmod(0o755)
    (box.root / "rounds").write_text("1\n")
    done = box.run(shell, env, argv)
    assert done.stdout.splitlines() == [
        'fleetc: listing the pending pods of llm/serve in ml failed: 403 {"reason":"Forbidden"}']
