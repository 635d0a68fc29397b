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
on-the-fly remotes (``:s3:``, ``:gcs:``, ``:hdfs:``) configured by environment variables. Where
the output names a Secret (``secretName``, under the keys Alluxio names for its scheme,
:data:`fleetc.model.STORAGE_CREDENTIAL_KEYS`), the S3-compatible remote's provider, keys and
endpoint come from that Secret by reference (:data:`S3_CREDENTIALS`; no value is rendered);
otherwise rclone takes the pod's own cloud identity (``env_auth``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shlex
import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import replace
from enum import Enum
from typing import Any, TypeVar, cast

from fleetc.errors import Diagnostic
from fleetc.model import STORAGE_CREDENTIAL_KEYS, Stage, url_scheme
from fleetc.render.common import Obj, dns_label, split_url, warning
from fleetc.render.context import Context, Work

MARKER_IMAGE = "rclone/rclone:1.68"
MARKER = "_SUCCESS"
STATUS_PATH = "/fleetc/status"
STATUS_VOLUME = "fleetc-status"
MARKER_ROOT = "/fleetc/markers"
POLL_SECONDS = 30
WAIT_TIMEOUT_SECONDS = 24 * 3600
#: URL scheme -> rclone backend reached as an on-the-fly remote.
REMOTES = {"s3": "s3", "s3a": "s3", "cos": "s3", "cosn": "s3", "oss": "s3", "obs": "s3", "gs": "gcs",
           "hdfs": "hdfs"}
#: Schemes whose endpoint only a Secret names (AWS and GCS have well-known endpoints and
#: workload identity).
ENDPOINT_IN_SECRET = frozenset({"cos", "oss", "obs"})
#: The Tencent COS app id, from the Secret: rclone names a COS bucket ``<bucket>-<app id>``,
#: Alluxio's ``cos://<bucket>`` takes the app id apart (``fs.cos.app.id``).
COS_APP_ID = "FLEETC_COS_APP_ID"
#: URL scheme -> (rclone's S3 provider, rclone variable -> the key of the output's Secret, plain
#: variables that may name the Secret's ones as ``$(VAR)``): the Alluxio keys fleetc's Secrets
#: hold for each scheme, mapped onto rclone's S3 backend (rclone/rclone ``backend/s3/provider/
#: {AWS,Alibaba,HuaweiOBS,TencentCOS,GCS}.yaml``; GCS through its S3 interoperability with HMAC
#: keys).
S3_CREDENTIALS: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {
    "s3": ("AWS", {"RCLONE_S3_ACCESS_KEY_ID": "aws.accessKeyId", "RCLONE_S3_SECRET_ACCESS_KEY": "aws.secretKey"},
           {}),
    "s3a": ("AWS", {"RCLONE_S3_ACCESS_KEY_ID": "aws.accessKeyId", "RCLONE_S3_SECRET_ACCESS_KEY": "aws.secretKey"},
            {}),
    "oss": ("Alibaba", {"RCLONE_S3_ACCESS_KEY_ID": "fs.oss.accessKeyId",
                        "RCLONE_S3_SECRET_ACCESS_KEY": "fs.oss.accessKeySecret",
                        "RCLONE_S3_ENDPOINT": "fs.oss.endpoint"}, {}),
    "obs": ("HuaweiOBS", {"RCLONE_S3_ACCESS_KEY_ID": "fs.obs.accessKey",
                          "RCLONE_S3_SECRET_ACCESS_KEY": "fs.obs.secretKey",
                          "RCLONE_S3_ENDPOINT": "fs.obs.endpoint"}, {}),
    "cos": ("TencentCOS", {"RCLONE_S3_ACCESS_KEY_ID": "fs.cos.access.key",
                           "RCLONE_S3_SECRET_ACCESS_KEY": "fs.cos.secret.key", "RCLONE_S3_REGION": "fs.cos.region",
                           COS_APP_ID: "fs.cos.app.id"},
            {"RCLONE_S3_ENDPOINT": "cos.$(RCLONE_S3_REGION).myqcloud.com"}),
    "gs": ("GCS", {"RCLONE_S3_ACCESS_KEY_ID": "fs.gcs.accessKeyId",
                   "RCLONE_S3_SECRET_ACCESS_KEY": "fs.gcs.secretAccessKey"},
           {"RCLONE_S3_ENDPOINT": "https://storage.googleapis.com"}),
}


def output_volume(name: str) -> str:
    """The pod volume of an ``nfs://`` output (:func:`fleetc.render.data.data_mounts` mounts it;
    the completion marker is written through it too)."""
    return dns_label(f"output-{name}")


def marker_resources() -> Obj:
    """What every marker container asks for: it polls or copies a few bytes."""
    return {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}}


def run_id(stage: Stage) -> str:
    """What a marker holds: the same for the same compiled stage, else different. A stage
    asking for throughput is rendered as it runs on its cluster
    (:func:`fleetc.placement.rules.on_cluster`), its
    readers see the model's: both hash the model's (its first GPU option's figures). Which
    document of its file the stage's pipeline is does not count: reordering a file's policies
    changes nothing that runs.

    Remembered per stage object (:func:`_remembered`): a large render asks again for every
    marker, every wait on it and every DataProcess (55,478 times for 13,861 stages at 1,000 x
    20,000)."""
    return _remembered(stage, _digest)


T = TypeVar("T")
Owner = TypeVar("Owner")

#: id(object) -> (a weak reference to it, what :func:`_remembered` made of it).
_remembered_for: dict[int, tuple[weakref.ref[Any], Any]] = {}


def _remembered(owner: Owner, make: Callable[[Owner], T]) -> T:
    """``make(owner)``, made once per live ``owner`` (a frozen Stage, a render's Context): kept
    by id beside a weak reference to it, which tells a live owner from a dead one at a reused
    address, and whose callback drops the entry with the owner, so nothing outlives what it was
    made of."""
    known = _remembered_for.get(id(owner))
    if known is not None and known[0]() is owner:
        return cast(T, known[1])
    made = make(owner)
    key = id(owner)

    def forget(ref: weakref.ref[Any]) -> None:
        if _remembered_for.get(key, (None, None))[0] is ref:
            del _remembered_for[key]

    _remembered_for[key] = (weakref.ref(owner, forget), made)
    return made


def _memo(ctx: Context) -> dict[Hashable, Any]:
    """What this module makes from ``ctx`` and is asked for again in the same render (whether
    a stage marks, the containers waiting for the same upstreams), for as long as ``ctx``
    lives. Keys name stages by id: each entry holds its stages, so no id is reused while it
    is there."""
    return _remembered(ctx, lambda _: {})


def _digest(stage: Stage) -> str:
    """:func:`run_id` computed: sha256 of the stage's canonical JSON (:func:`_canonical`), with
    its first GPU option's GPUs, one pod per replica (node fit splits it per cluster: the run is
    the same on every cluster) and its source's document as 0, as if replaced there."""
    overrides: dict[str, object] = {"pods_per_replica": 1}
    if stage.gpu_options:
        overrides["gpus"] = stage.gpu_options[0].gpus
    overrides["source"] = replace(stage.source, document=0)
    text = json.dumps(_canonical(stage, overrides), sort_keys=True, check_circular=False)  # no cycles in a Stage
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(value: object, overrides: dict[str, object] | None = None) -> object:
    """``value`` as plain JSON data for :func:`run_id`: a dataclass as the fields that differ
    from their defaults (``overrides`` in place of some of its fields' values), so that a field
    a later fleetc adds with a default keeps every run id (and every Job named after its spec,
    :func:`fleetc.render.workloads.job_name`) as it was."""
    kind = type(value)
    if kind is str or kind is int or kind is float or value is None:  # the common cases first
        return value
    if kind is tuple or kind is list:
        return [_canonical(item) for item in value]  # type: ignore[attr-defined]
    table = _FIELDS.get(kind)
    if table is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        table = _FIELDS[kind] = _field_table(kind)
    if table is not None:
        found = {}
        for name, has_default, default in table:
            item = getattr(value, name) if overrides is None or name not in overrides else overrides[name]
            if not (has_default and bool(item == default)):
                found[name] = _canonical(item)
        return found
    if isinstance(value, Enum):
        return _canonical(value.value)
    if isinstance(value, (tuple, list)):
        return [_canonical(item) for item in value]
    if isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"run_id cannot hash a {type(value).__name__}")  # a new model type: say how


#: Dataclass type -> (field name, whether it has a default, the default) per field, in order.
_FIELDS: dict[type, tuple[tuple[str, bool, object], ...]] = {}


def _field_table(kind: type) -> tuple[tuple[str, bool, object], ...]:
    table = []
    for spec in dataclasses.fields(kind):
        if spec.default is not dataclasses.MISSING:
            table.append((spec.name, True, spec.default))
        elif spec.default_factory is not dataclasses.MISSING:
            table.append((spec.name, True, spec.default_factory()))
        else:
            table.append((spec.name, False, None))
    return tuple(table)


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
    return unmarked(ctx, stage) is None


def unmarked(ctx: Context, stage: Stage) -> str | None:
    """Why the stage writes no completion marker (what to change, after its name), or None
    when it writes one."""
    memo = _memo(ctx)
    known = memo.get(("unmarked", id(stage)))
    if known is None:
        known = memo[("unmarked", id(stage))] = (stage, _unmarked(ctx, stage))
    return cast("str | None", known[1])


def _unmarked(ctx: Context, stage: Stage) -> str | None:
    if not stage.is_gang:
        return "is a serving stage (a Deployment), which never completes"
    if not stage.outputs:
        return "has no outputs to put its completion marker beside; give it an output"
    if not reachable(stage.outputs[0].url):
        return (f"writes its first output to {split_url(stage.outputs[0].url).scheme}://, where fleetc "
                "cannot put a completion marker; make its first output nfs:// or an object store")
    if not stage.command:
        return "sets no command for fleetc to wrap, so its completion cannot be marked; set command"
    if not ctx.depended_on(stage):
        return ("is no stage's dependency, so it writes no completion marker; make a stage that reads "
                "its output depend on it (dependencies, or a from: input)")
    return None


@functools.lru_cache(maxsize=1 << 16)  # asked for every marking stage, by objects and warnings
def reachable(url: str) -> bool:
    """Whether fleetc can put a completion marker at ``url``: ``nfs://`` or an object store."""
    scheme = split_url(url).scheme.lower()
    return scheme == "nfs" or scheme in REMOTES


def _location(url: str, slot: int, secret: str | None) -> tuple[str, Obj | None, list[Obj]]:
    """(rclone path of the folder, the NFS volume it needs or None, the env the remote needs:
    the Secret's keys by reference first, so later plain values may name them as ``$(VAR)``)."""
    parts = split_url(url)
    scheme = parts.scheme.lower()
    path = parts.path.strip("/")
    if scheme == "nfs":
        volume = {"name": f"fleetc-marker-{slot}", "nfs": {"server": parts.hostname or "", "path": f"/{path}"}}
        return f"{MARKER_ROOT}/{slot}", volume, []
    backend = REMOTES[scheme]
    if backend == "hdfs":
        return f":hdfs:/{path}", None, _env({"RCLONE_HDFS_NAMENODE": parts.netloc})
    if secret is not None and scheme in S3_CREDENTIALS:
        provider, keys, plain = S3_CREDENTIALS[scheme]
        bucket = f"{parts.netloc}-$({COS_APP_ID})" if COS_APP_ID in keys else parts.netloc
        env = [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": keys[name]}}}
               for name in sorted(keys)]
        return f":s3:{bucket}/{path}", None, env + _env({"RCLONE_S3_PROVIDER": provider, **plain})
    if backend == "s3":
        provider = S3_CREDENTIALS[scheme][0] if scheme in S3_CREDENTIALS else "Other"
        return f":s3:{parts.netloc}/{path}", None, _env({"RCLONE_S3_PROVIDER": provider, "RCLONE_S3_ENV_AUTH": "true"})
    return f":gcs:{parts.netloc}/{path}", None, _env({"RCLONE_GCS_ENV_AUTH": "true"})


def _marker_names(stage: Stage) -> list[str]:
    return [MARKER] if stage.pods == 1 else [f"{MARKER}.{rank}" for rank in range(stage.pods)]


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": values[k]} for k in sorted(values)]


def wrap_command(command: list[str]) -> list[str]:
    """Run ``command`` and record its exit code for the ``fleetc-mark`` container."""
    script = f'"$@"; code=$?; echo "$code" > {STATUS_PATH}/exit-code; exit "$code"'
    return ["sh", "-c", script, "fleetc-run", *command]


def mark_container(ctx: Context, stage: Stage) -> tuple[Obj, list[Obj]]:
    """The ``fleetc-mark`` container of a marking stage's pods, and the volumes it needs."""
    folder, volume, env = _location(stage.outputs[0].url, 0, ctx.storage_secret(stage, stage.outputs[0].url))
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
        container["env"] = env
    container["resources"] = marker_resources()
    container["volumeMounts"] = mounts
    return container, volumes


def wait_containers(ctx: Context, stage: Stage) -> tuple[list[Obj], list[Obj]]:
    """One init container per producer with a marker, and the volumes they need."""
    return waits(ctx, stage.namespace, producers(ctx, stage))


def waits(ctx: Context, namespace: str, upstreams: list[Stage]) -> tuple[list[Obj], list[Obj]]:
    """One container per stage of ``upstreams`` that writes a marker, polling for it every
    :data:`POLL_SECONDS` and giving up after :data:`WAIT_TIMEOUT_SECONDS`, each reaching the
    marker with the Secret named for its URL in ``namespace``; and the volumes they need. The
    init containers of a dependant's pods, and of the Fluid DataProcess a prefetch waits for
    (:mod:`fleetc.render.data`). Named ``fleetc-wait-<stage>``, or ``fleetc-wait-<pipeline>-
    <stage>`` where two upstreams of different pipelines share a stage name.

    Made once per namespace and upstreams in a render (their dependants on every cluster, and
    the DataProcesses of what they write, wait alike); each caller gets its own lists of the
    same containers and volumes, which no caller changes."""
    memo = _memo(ctx)
    key = ("waits", namespace, *map(id, upstreams))
    known = memo.get(key)
    if known is None:
        known = memo[key] = (tuple(upstreams), *_waits(ctx, namespace, upstreams))
    _, containers, volumes = known
    return list(containers), list(volumes)


def _waits(ctx: Context, namespace: str, upstreams: list[Stage]) -> tuple[list[Obj], list[Obj]]:
    containers: list[Obj] = []
    volumes: list[Obj] = []
    names = Counter(upstream.name for upstream in upstreams)
    for slot, upstream in enumerate(upstreams, start=1):
        if not marks(ctx, upstream):
            continue
        url = upstream.outputs[0].url
        folder, volume, env = _location(url, slot, ctx.storage_secrets.get((namespace, url)))
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
        label = upstream.name if names[upstream.name] == 1 else f"{upstream.pipeline}-{upstream.name}"
        container: Obj = {"name": dns_label(f"fleetc-wait-{label}"), "image": MARKER_IMAGE,
                          "command": ["sh", "-c", script]}
        if env:
            container["env"] = env
        container["resources"] = marker_resources()
        if volume is not None:
            volume = {**volume, "nfs": {**volume["nfs"], "readOnly": True}}
            container["volumeMounts"] = [{"name": volume["name"], "mountPath": folder, "readOnly": True}]
            volumes.append(volume)
        containers.append(container)
    return containers, volumes


def order_warnings(ctx: Context, work: Work) -> list[Diagnostic]:
    """Dependencies fleetc cannot enforce, and completion markers that cannot reach their store
    (an S3-compatible store other than AWS, with no Secret naming its endpoint and keys), each
    named with its fix."""
    found = []
    for stage, _ in work:
        url = stage.outputs[0].url if stage.outputs else ""
        if (marks(ctx, stage) and url_scheme(url) in ENDPOINT_IN_SECRET
                and ctx.storage_secret(stage, url) is None):
            found.append(warning(stage.source, f"{stage.source.field}.outputs[0].secretName",
                                 f"stage '{stage.name}' writes its completion marker to {url} with no "
                                 f"Secret, and {url_scheme(url)}:// needs the endpoint and keys one holds; "
                                 f"name a Secret with {', '.join(STORAGE_CREDENTIAL_KEYS[url_scheme(url)])}"))
    for stage, _ in work:
        for upstream in producers(ctx, stage):
            why = unmarked(ctx, upstream)
            if why is None:
                continue
            found.append(warning(stage.source, f"{stage.source.field}.dependencies",
                                 f"stage '{stage.name}' may start before '{upstream.name}' completed: "
                                 f"'{upstream.name}' {why}"))
    return found
