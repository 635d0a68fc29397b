"""Stage order at run time: completion markers beside the outputs, and init containers that
wait for them (docs/pipelines.md says why this and not Volcano JobFlow).

* A run-to-completion stage that another stage depends on (``dependencies`` or ``from:``)
  marks its completion the way Hadoop's and Spark's output committers do: a ``_SUCCESS`` file
  beside its first output, written only after its command exited 0, so after its outputs are
  complete. Its main container runs the command through ``sh`` and records the exit code in a
  shared ``emptyDir``; a ``fleetc-mark`` container waits for a 0 there (a failed run is
  restarted in place by ``restartPolicy: OnFailure``) and then writes the marker. A gang of
  ``n`` pods writes ``_SUCCESS.<rank>`` from each pod (``RANK``, see
  :func:`fleetc.render.workloads.distributed_plugins`), a one-pod stage ``_SUCCESS``. The
  marker holds the run's id (a digest of the producing stage as compiled), so a marker left by
  an earlier run of a changed stage is not taken for this one.
* Every pod of a dependant stage, on whichever cluster, starts with one ``fleetc-wait-<stage>``
  init container per run-to-completion stage it depends on: it polls the marker(s) every
  :data:`POLL_SECONDS`, logs one line per poll naming the stage and the marker, and fails after
  :data:`WAIT_TIMEOUT_SECONDS` (the pod then restarts it, logging why).

Markers are read and written with rclone (:data:`MARKER_IMAGE`): ``nfs://`` outputs are mounted
(the producing pod's own output volume) and used as local paths; object stores as rclone's
on-the-fly remotes (``:s3:``, ``:gcs:``, ``:hdfs:``) configured from the environment, which the optional Secret
:data:`STORAGE_SECRET` of the namespace supplies (endpoint and keys as ``RCLONE_S3_*``
variables; nothing is rendered when it is absent, and cloud workload identity works through
``env_auth``).
"""

from __future__ import annotations

import hashlib
import shlex
from urllib.parse import urlsplit

from fleetc.errors import Diagnostic
from fleetc.model import Stage
from fleetc.render.common import Obj, dns_label, warning
from fleetc.render.context import Context, Work
from fleetc.render.data import output_volume

MARKER_IMAGE = "rclone/rclone:1.68"
MARKER = "_SUCCESS"
STATUS_PATH = "/fleetc/status"
STATUS_VOLUME = "fleetc-status"
MARKER_ROOT = "/fleetc/markers"
STORAGE_SECRET = "fleetc-storage"
POLL_SECONDS = 30
WAIT_TIMEOUT_SECONDS = 24 * 3600
#: URL scheme -> rclone backend reached as an on-the-fly remote.
REMOTES = {"s3": "s3", "s3a": "s3", "cos": "s3", "cosn": "s3", "oss": "s3", "obs": "s3", "gs": "gcs",
           "hdfs": "hdfs"}


def run_id(stage: Stage) -> str:
    """What a marker holds: the same for the same compiled stage, else different."""
    return hashlib.sha256(repr(stage).encode()).hexdigest()[:16]


def producers(ctx: Context, stage: Stage) -> list[Stage]:
    """The run-to-completion stages ``stage`` waits for, in its dependency order."""
    found = []
    for name in stage.dependencies:
        upstream = ctx.stage(stage.pipeline, name)
        if upstream is not None and upstream.is_gang:
            found.append(upstream)
    return found


def marks(ctx: Context, stage: Stage) -> bool:
    """Whether the stage writes a completion marker: a gang another stage waits for, with an
    output to put it beside and a command fleetc can wrap."""
    return (stage.is_gang and bool(stage.outputs) and bool(stage.command)
            and reachable(stage.outputs[0].url) and ctx.depended_on(stage))


def reachable(url: str) -> bool:
    scheme = urlsplit(url).scheme.lower()
    return scheme == "nfs" or scheme in REMOTES


def _location(url: str, slot: int) -> tuple[str, Obj | None, dict[str, str]]:
    """(rclone path of the folder, the NFS volume it needs or None, env the remote needs)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    path = parts.path.strip("/")
    if scheme == "nfs":
        volume = {"name": f"fleetc-marker-{slot}", "nfs": {"server": parts.hostname or "", "path": f"/{path}"}}
        return f"{MARKER_ROOT}/{slot}", volume, {}
    backend = REMOTES[scheme]
    if backend == "hdfs":
        return f":hdfs:/{path}", None, {"RCLONE_HDFS_NAMENODE": parts.netloc}
    env = {"RCLONE_S3_PROVIDER": "Other", "RCLONE_S3_ENV_AUTH": "true"} if backend == "s3" else {
        "RCLONE_GCS_ENV_AUTH": "true"}
    return f":{backend}:{parts.netloc}/{path}", None, env


def _marker_names(stage: Stage) -> list[str]:
    return [MARKER] if stage.pods == 1 else [f"{MARKER}.{rank}" for rank in range(stage.pods)]


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": values[k]} for k in sorted(values)]


def _storage_env_from() -> list[Obj]:
    return [{"secretRef": {"name": STORAGE_SECRET, "optional": True}}]


def wrap_command(command: list[str]) -> list[str]:
    """Run ``command`` and record its exit code for the ``fleetc-mark`` container."""
    script = f'"$@"; code=$?; echo "$code" > {STATUS_PATH}/exit-code; exit "$code"'
    return ["sh", "-c", script, "fleetc-run", *command]


def mark_container(stage: Stage) -> tuple[Obj, list[Obj]]:
    """The ``fleetc-mark`` container of a marking stage's pods, and the volumes it needs."""
    folder, volume, env = _location(stage.outputs[0].url, 0)
    name = MARKER if stage.pods == 1 else f"{MARKER}.$(RANK)"
    target = f"{shlex.quote(folder)}/{name}"  # $(RANK) is the kubelet's to expand
    script = (f"until [ \"$(cat {STATUS_PATH}/exit-code 2>/dev/null)\" = 0 ]; do sleep 5; done; "
              f"echo {run_id(stage)} | rclone rcat {target} && "
              f"echo \"fleetc: {stage.key} completed; wrote {target}\"")
    mounts = [{"name": STATUS_VOLUME, "mountPath": STATUS_PATH}]
    volumes: list[Obj] = [{"name": STATUS_VOLUME, "emptyDir": {}}]
    if volume is not None:  # the pod mounts the nfs:// output already (fleetc.render.data.data_mounts)
        mounts.append({"name": output_volume(stage.outputs[0].name), "mountPath": folder})
    container: Obj = {"name": "fleetc-mark", "image": MARKER_IMAGE, "command": ["sh", "-c", script]}
    if env:
        container["env"] = _env(env)
    container["envFrom"] = _storage_env_from()
    container["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"},
                              "limits": {"cpu": "100m", "memory": "128Mi"}}
    container["volumeMounts"] = mounts
    return container, volumes


def wait_containers(ctx: Context, stage: Stage) -> tuple[list[Obj], list[Obj]]:
    """One init container per producer with a marker, and the volumes they need."""
    containers: list[Obj] = []
    volumes: list[Obj] = []
    for slot, upstream in enumerate(producers(ctx, stage), start=1):
        if not marks(ctx, upstream):
            continue
        folder, volume, env = _location(upstream.outputs[0].url, slot)
        checks = " && ".join(
            f"[ \"$(rclone cat {shlex.quote(folder + '/' + name)} 2>/dev/null)\" = {run_id(upstream)} ]"
            for name in _marker_names(upstream))
        what = f"{upstream.key} to complete ({folder}/{MARKER}*)"
        script = (f"deadline=$(( $(date +%s) + {WAIT_TIMEOUT_SECONDS} )); "
                  f"until {checks}; do "
                  f"if [ $(date +%s) -ge $deadline ]; then echo \"fleetc: gave up after "
                  f"{WAIT_TIMEOUT_SECONDS}s waiting for {what}\"; exit 1; fi; "
                  f"echo \"fleetc: waiting for {what}\"; sleep {POLL_SECONDS}; done; "
                  f"echo \"fleetc: {upstream.key} completed; starting\"")
        container: Obj = {"name": dns_label(f"fleetc-wait-{upstream.name}"), "image": MARKER_IMAGE,
                          "command": ["sh", "-c", script]}
        if env:
            container["env"] = _env(env)
        container["envFrom"] = _storage_env_from()
        container["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"},
                                  "limits": {"cpu": "100m", "memory": "128Mi"}}
        if volume is not None:
            volume = {**volume, "nfs": {**volume["nfs"], "readOnly": True}}
            container["volumeMounts"] = [{"name": volume["name"], "mountPath": folder, "readOnly": True}]
            volumes.append(volume)
        containers.append(container)
    return containers, volumes


def order_warnings(ctx: Context, work: Work) -> list[Diagnostic]:
    """Dependencies fleetc cannot enforce, each named with its fix."""
    found = []
    for stage, _ in work:
        for upstream in producers(ctx, stage):
            if marks(ctx, upstream):
                continue
            if not upstream.outputs:
                why = "has no outputs to put its completion marker beside; give it an output"
            elif not reachable(upstream.outputs[0].url):
                why = (f"writes its first output to {urlsplit(upstream.outputs[0].url).scheme}://, where "
                       "fleetc cannot put a completion marker; make its first output nfs:// or an object store")
            else:
                why = "sets no command for fleetc to wrap, so its completion cannot be marked; set command"
            found.append(warning(stage.source, f"{stage.source.field}.dependencies",
                                 f"stage '{stage.name}' may start before '{upstream.name}' completed: "
                                 f"'{upstream.name}' {why}"))
    return found
