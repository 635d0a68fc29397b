"""Stage order at run time: completion markers beside the outputs, and init containers that
wait for them (docs/pipelines.md says why this and not Volcano JobFlow).

* A run-to-completion stage that another stage depends on (``dependencies`` or ``from:``)
  marks its completion the way Hadoop's and Spark's output committers do: a ``_SUCCESS`` file
  beside its first output, written only after its command exited 0, so after its outputs are
  complete. Its main container runs the command under :data:`RUN_SCRIPT` and records the exit
  code in a shared ``emptyDir``; a ``fleetc-mark`` container (:data:`MARK_SCRIPT`) waits for it
  and then writes the marker, or a ``_FAILED`` marker when the command failed, then exits with
  the failure so the pod (``restartPolicy: Never``) ends Failed and the Job's retries take over
  (:func:`fleetc.render.workloads.gang_pod_template`). A gang of
  ``n`` pods writes ``_SUCCESS.<rank>`` from each pod (``RANK``, see
  :func:`fleetc.render.workloads.distributed_plugins`), a one-pod stage ``_SUCCESS``. The
  marker holds the run's id (a digest of the producing stage as compiled), so a marker left by
  an earlier run of a changed stage is not taken for this one.
* Every pod of a dependant stage, on whichever cluster, starts with one ``fleetc-wait-<stage>``
  init container per run-to-completion stage it depends on (:data:`WAIT_SCRIPT`): it polls the
  marker(s) every :data:`POLL_SECONDS`, logs one line per poll naming the stage and the marker
  and every read error, and fails after :data:`WAIT_TIMEOUT_SECONDS` or at once when the
  upstream's last attempt failed (the pod then restarts it, logging why).

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
from collections import Counter
from collections.abc import Hashable
from dataclasses import replace
from enum import Enum
from typing import Any, cast

from fleetc.errors import Diagnostic
from fleetc.model import STORAGE_CREDENTIAL_KEYS, Stage, url_scheme
from fleetc.render.common import Obj, cpu_quantity, dns_label, memory_quantity, split_url, warning
from fleetc.render.context import Context, Work

MARKER_IMAGE = "rclone/rclone:1.68"
MARKER = "_SUCCESS"
#: The failure marker beside it: ``<run id> <exit code> final|retried`` (:data:`MARK_SCRIPT`).
FAILED = "_FAILED"
#: How often Volcano restarts a failed Job (``maxRetry``) before it fails it.
MAX_RETRY = 3
#: The pod annotation Volcano's job controller sets to the Job's ``status.retryCount`` when it
#: creates the pod (volcano-sh/apis ``pkg/apis/batch/v1alpha1/labels.go`` ``JobRetryCountKey``;
#: volcano ``pkg/controllers/job/job_controller_util.go`` ``createJobPod``).
RETRY_COUNT = "volcano.sh/job-retry-count"
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


#: What every marker container requests: millicores and bytes (it polls or copies a few bytes).
#: A marking stage's pods take it out of the main container's requests (:func:`marker_share`).
MARKER_MILLIS = 10
MARKER_MEMORY = 32 * 2**20


def marker_resources() -> Obj:
    """What every marker container asks for: it polls or copies a few bytes."""
    return {"requests": {"cpu": cpu_quantity(MARKER_MILLIS), "memory": memory_quantity(MARKER_MEMORY)},
            "limits": {"cpu": "100m", "memory": "128Mi"}}


def marker_share(millis: int, memory: int) -> tuple[int, int]:
    """The main container's requests of a pod that also runs the marker container: what the
    pod asks for (``millis``, ``memory``, what the placement counted and packed onto a node)
    less the marker's requests, so that the pod's containers together request exactly that
    (1m and 1Mi at the least: a pod asking for less than the marker is at most that over)."""
    return max(1, millis - MARKER_MILLIS), max(2**20, memory - MARKER_MEMORY)


def run_id(ctx: Context, stage: Stage) -> str:
    """What a marker holds: one id per run, chained like a build action's key. It covers what
    the stage runs, so a change to any of it is a new run:

    * the stage as compiled (:func:`_digest`);
    * its main container as rendered (image, command, environment: the URLs its ``from:``
      inputs resolve to, the paths its cached inputs are mounted at, the data policy's
      preprocessing settings; resources and mounts), which edits outside the stage (a data
      policy, a Secret named for a URL) change, and the PriorityClass it runs under: what
      renames its Job (:func:`fleetc.render.workloads.job_name`) changes its run id;
    * the run ids of the stages it depends on, so a re-run of an upstream stage is a new run
      of every stage downstream of it and of nothing else, and a marker an earlier run left
      never satisfies a wait on this one.

    What differs between the clusters a stage could run on (the node selector) does not
    count: every reader, on whichever cluster, computes the same id. Remembered per stage in
    a render (a large render asks again for every marker, every wait on it and every
    DataProcess)."""
    memo = _memo(ctx)
    known = memo.get(("run", id(stage)))
    if known is None:
        upstream = [run_id(ctx, u) for u in producers(ctx, stage)]
        facts = {"stage": stage_digest(stage), "runs": _runs(ctx, stage), "after": upstream}
        made = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
        known = memo[("run", id(stage))] = (stage, made)
    return cast(str, known[1])


def stage_digest(stage: Stage) -> str:
    """The stage as compiled (:func:`_digest`); :func:`run_id` remembers it per render."""
    return _digest(stage)


def _runs(ctx: Context, stage: Stage) -> object:
    """The main container of the stage's pods and their PriorityClass, as rendered."""
    from fleetc.render import data, workloads  # they render the containers this module wraps

    mounted = data.data_mounts(ctx, stage)
    return {"container": workloads.main_container(ctx, stage, mounted),
            "priority": workloads.training_priority(ctx, stage)}


def _memo(ctx: Context) -> dict[Hashable, Any]:
    """What this module makes from ``ctx`` and is asked for again in the same render (whether
    a stage marks, the containers waiting for the same upstreams), for as long as ``ctx``
    lives (:attr:`Context.memo`). Keys name stages by id: each entry holds its stages, so no id
    is reused while it is there."""
    return ctx.memo


def _digest(stage: Stage) -> str:
    """:func:`run_id` computed: sha256 of the stage's canonical JSON (:func:`_canonical`), with
    its first GPU option's GPUs, one pod per replica (node fit splits it per cluster: the run is
    the same on every cluster) and its source's document as 0, as if replaced there:
    reordering a file's policies changes nothing that runs."""
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
    table = _field_table(kind) if dataclasses.is_dataclass(kind) else None
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


@functools.cache  # per dataclass type: the model's few
def _field_table(kind: type) -> tuple[tuple[str, bool, object], ...]:
    """(field name, whether it has a default, the default) per field of dataclass ``kind``, in order."""
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


def literal(value: str) -> str:
    """``value`` as the kubelet must leave it in a ``command`` item or ``env`` value: every
    ``$`` doubled, so that ``$(VAR)`` in a policy value is not filled in from the container's
    environment (kubernetes ``third_party/forked/golang/expansion/expand.go``: ``$$`` is one
    literal ``$``)."""
    return value.replace("$", "$$")


def _location(url: str, slot: int, secret: str | None) -> tuple[str, Obj | None, list[Obj]]:
    """(rclone path of the folder as the kubelet expands it in an ``env`` value: the URL's parts
    literal, the COS app id a reference to the Secret's variable; the NFS volume it needs or
    None; the env the remote needs: the Secret's keys by reference first, so later plain values
    may name them as ``$(VAR)``, which the kubelet fills in from variables defined before)."""
    parts = split_url(url)
    scheme = parts.scheme.lower()
    path = literal(parts.path.strip("/"))
    if scheme == "nfs":
        export = f"/{parts.path.strip('/')}"  # a volume field: the kubelet does not expand it
        volume = {"name": f"fleetc-marker-{slot}", "nfs": {"server": parts.hostname or "", "path": export}}
        return f"{MARKER_ROOT}/{slot}", volume, []
    backend = REMOTES[scheme]
    netloc = literal(parts.netloc)
    if backend == "hdfs":
        return f":hdfs:/{path}", None, _env({"RCLONE_HDFS_NAMENODE": netloc})
    if secret is not None and scheme in S3_CREDENTIALS:
        provider, keys, plain = S3_CREDENTIALS[scheme]
        bucket = f"{netloc}-$({COS_APP_ID})" if COS_APP_ID in keys else netloc
        env = [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": keys[name]}}}
               for name in sorted(keys)]
        return f":s3:{bucket}/{path}", None, env + _env({"RCLONE_S3_PROVIDER": provider, **plain})
    if backend == "s3":
        provider = S3_CREDENTIALS[scheme][0] if scheme in S3_CREDENTIALS else "Other"
        return f":s3:{netloc}/{path}", None, _env({"RCLONE_S3_PROVIDER": provider, "RCLONE_S3_ENV_AUTH": "true"})
    return f":gcs:{netloc}/{path}", None, _env({"RCLONE_GCS_ENV_AUTH": "true"})


def _marker_names(stage: Stage) -> list[str]:
    return [MARKER] if stage.pods == 1 else [f"{MARKER}.{rank}" for rank in range(stage.pods)]


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": values[k]} for k in sorted(values)]


#: The scripts below are the same text for every stage: what differs (URLs, names, run ids)
#: reaches them as environment variables or positional parameters, always quoted, never as
#: script text. They hold no ``$(`` and no ``$$``, the two things the kubelet's expansion of a
#: ``command`` item acts on (kubernetes ``third_party/forked/golang/expansion/expand.go``), so
#: it passes them on unchanged: command substitution is written with backquotes.
#:
#: The main container's wrapper (``sh -c RUN_SCRIPT fleetc-run <command...>``): runs the
#: stage's command as its child with the words it was given (never re-read by the shell), passes
#: SIGTERM and SIGINT on to it (a shell as PID 1 has no default action for them, so without
#: the trap a training would never see the kubelet's SIGTERM and could not checkpoint), and
#: records the exit code for ``fleetc-mark`` unless the container was being stopped. A ``wait``
#: the trap interrupts returns 128 + the signal, not the child's code, so it waits again (the
#: child, not yet reported, is still the shell's to wait for, also once it has exited). The code
#: is written to a temporary name first so the marker never reads half a file.
RUN_SCRIPT = (
    f'status={STATUS_PATH}; rm -f "$status/exit-code"; stopped=; child=\n'
    "trap 'stopped=1; woken=1; [ -n \"$child\" ] && kill -TERM \"$child\"' TERM INT\n"
    '"$@" &\n'
    "child=$!\n"
    'while :; do woken=; wait "$child"; code=$?; [ -z "$woken" ] && break; done\n'
    'if [ -z "$stopped" ]; then\n'
    '  printf \'%s\\n\' "$code" > "$status/exit-code.tmp" && mv "$status/exit-code.tmp" "$status/exit-code"\n'
    "fi\n"
    'exit "$code"\n')

#: ``fleetc-mark`` (``sh -c MARK_SCRIPT fleetc-mark <marker name>``; the stage, folder and run
#: in ``FLEETC_STAGE``, ``FLEETC_MARKER_DIR``, ``FLEETC_RUN``): once the main container
#: recorded 0, writes the run id to ``<folder>/<marker name>`` (10 tries, each error logged);
#: once it recorded a failure, writes ``<run id> <exit code> final|retried`` to the
#: ``_FAILED`` marker of the same rank. ``final`` when Volcano will not restart the Job again:
#: it fails a Job whose ``status.retryCount`` reached ``maxRetry``
#: (volcano ``pkg/controllers/job/state/restarting.go``) and annotates each pod with the count
#: it was created at (``volcano.sh/job-retry-count``, ``FLEETC_RETRY_COUNT``; empty elsewhere,
#: so never final there). Then, with ``restartPolicy: Never``, it exits so the pod can fail;
#: otherwise it waits for the next attempt in place (the code changes, or the file is gone:
#: the wrapper removes it when it starts; a missing file is no error to report).
MARK_SCRIPT = (
    "trap 'exit 143' TERM\n"
    f"status={STATUS_PATH}; name=$1; failed=\"{FAILED}${{name#{MARKER}}}\"\n"
    'err="${TMPDIR:-/tmp}/fleetc-mark.err"\n'
    "while :; do\n"
    '  until [ -f "$status/exit-code" ]; do sleep 5 & wait $!; done\n'
    '  code=`cat "$status/exit-code"`\n'
    '  if [ "$code" = 0 ]; then\n'
    "    tries=1\n"
    '    until printf \'%s\\n\' "$FLEETC_RUN" | rclone rcat "$FLEETC_MARKER_DIR/$name" 2>"$err"; do\n'
    '      why=`cat "$err"`\n'
    "      printf 'fleetc: %s completed, but writing %s/%s failed (try %s of 10): %s\\n' "
    '"$FLEETC_STAGE" "$FLEETC_MARKER_DIR" "$name" "$tries" "$why"\n'
    '      [ "$tries" -ge 10 ] && exit 1\n'
    "      tries=`expr $tries + 1`; sleep 30 & wait $!\n"
    "    done\n"
    "    printf 'fleetc: %s completed; wrote %s/%s\\n' \"$FLEETC_STAGE\" \"$FLEETC_MARKER_DIR\" \"$name\"\n"
    "    exit 0\n"
    "  fi\n"
    "  final=retried\n"
    "  case $FLEETC_RETRY_COUNT in\n"
    "    ''|*[!0-9]*) ;;\n"
    f'    *) [ "$FLEETC_RETRY_COUNT" -ge {MAX_RETRY - 1} ] && final=final ;;\n'
    "  esac\n"
    '  if ! printf \'%s %s %s\\n\' "$FLEETC_RUN" "$code" "$final" \\\n'
    '      | rclone rcat "$FLEETC_MARKER_DIR/$failed" 2>"$err"; then\n'
    '    why=`cat "$err"`\n'
    "    printf 'fleetc: writing %s/%s failed: %s\\n' \"$FLEETC_MARKER_DIR\" \"$failed\" \"$why\"\n"
    "  fi\n"
    "  printf 'fleetc: %s failed with exit code %s (%s); wrote %s/%s\\n' "
    '"$FLEETC_STAGE" "$code" "$final" "$FLEETC_MARKER_DIR" "$failed"\n'
    '  [ "$FLEETC_RESTART_POLICY" = Never ] && exit 1\n'
    '  now=$code\n'
    '  while [ "$now" = "$code" ]; do sleep 5 & wait $!; now=`cat "$status/exit-code" 2>/dev/null`; done\n'
    "done\n")

#: ``fleetc-wait-<stage>`` (``sh -c WAIT_SCRIPT fleetc-wait <marker name>...``; the upstream,
#: folder and run in ``FLEETC_UPSTREAM``, ``FLEETC_MARKER_DIR``, ``FLEETC_RUN``): polls every
#: marker until each holds the run, logging each poll and every read error other than "not
#: there yet" (rclone's "not found", a local "no such file"); stops with the upstream named
#: when a ``_FAILED`` marker of the run says ``final``, and after the timeout.
WAIT_SCRIPT = (
    'err="${TMPDIR:-/tmp}/fleetc-wait.err"\n'
    "fetch() {\n"
    '  if got=`rclone cat "$FLEETC_MARKER_DIR/$1" 2>"$err"`; then [ -n "$got" ]; return; fi\n'
    '  why=`cat "$err"`\n'
    "  case $why in\n"
    '    *"not found"*|*"o such file"*) ;;\n'
    "    *) printf 'fleetc: reading %s/%s, the marker of %s, failed: %s\\n' "
    '"$FLEETC_MARKER_DIR" "$1" "$FLEETC_UPSTREAM" "$why" ;;\n'
    "  esac\n"
    "  return 1\n"
    "}\n"
    f"deadline=`date +%s`; deadline=`expr $deadline + {WAIT_TIMEOUT_SECONDS}`\n"
    "while :; do\n"
    "  complete=yes\n"
    '  for name in "$@"; do\n'
    f'    failed="{FAILED}${{name#{MARKER}}}"\n'
    '    if fetch "$failed"; then\n'
    '      case $got in\n'
    '        "$FLEETC_RUN "*" final")\n'
    "          printf 'fleetc: %s failed: its last attempt ended with %s (%s/%s); not starting\\n' "
    '"$FLEETC_UPSTREAM" "$got" "$FLEETC_MARKER_DIR" "$failed"\n'
    "          exit 1 ;;\n"
    '        "$FLEETC_RUN "*)\n'
    "          printf 'fleetc: %s: an attempt failed (%s/%s: %s); waiting for its retry\\n' "
    '"$FLEETC_UPSTREAM" "$FLEETC_MARKER_DIR" "$failed" "$got" ;;\n'
    "      esac\n"
    "    fi\n"
    '    if ! fetch "$name" || [ "$got" != "$FLEETC_RUN" ]; then complete=no; fi\n'
    "  done\n"
    '  [ "$complete" = yes ] && break\n'
    '  if [ "`date +%s`" -ge "$deadline" ]; then\n'
    f"    printf 'fleetc: gave up after {WAIT_TIMEOUT_SECONDS}s waiting for %s to complete (%s/{MARKER}*)\\n' "
    '"$FLEETC_UPSTREAM" "$FLEETC_MARKER_DIR"\n'
    "    exit 1\n"
    "  fi\n"
    f"  printf 'fleetc: waiting for %s to complete (%s/{MARKER}*)\\n' \"$FLEETC_UPSTREAM\" \"$FLEETC_MARKER_DIR\"\n"
    f"  sleep {POLL_SECONDS}\n"
    "done\n"
    "printf 'fleetc: %s completed; starting\\n' \"$FLEETC_UPSTREAM\"\n")


#: The marker a Fluid DataLoad's completion leaves beside the data it loaded:
#: ``_LOADED.<cluster>.<namespace>``, holding the digest of the writers' run ids it waited for.
LOADED = "_LOADED"

#: ``fleetc-loaded`` (``sh -c LOADED_SCRIPT fleetc-loaded <marker name>``; the folder and the run
#: in ``FLEETC_MARKER_DIR`` and ``FLEETC_RUN``, what was loaded in ``FLEETC_LOADED``): the pod of
#: the DataProcess that runs after a DataLoad writes the loaded marker, 10 tries 30 s apart,
#: each error logged, then fails (the DataProcess's Job retries it).
LOADED_SCRIPT = (
    'err="${TMPDIR:-/tmp}/fleetc-loaded.err"\n'
    "tries=1\n"
    'until printf \'%s\\n\' "$FLEETC_RUN" | rclone rcat "$FLEETC_MARKER_DIR/$1" 2>"$err"; do\n'
    '  why=`cat "$err"`\n'
    "  printf 'fleetc: %s is loaded, but writing %s/%s failed (try %s of 10): %s\\n' "
    '"$FLEETC_LOADED" "$FLEETC_MARKER_DIR" "$1" "$tries" "$why"\n'
    '  [ "$tries" -ge 10 ] && exit 1\n'
    "  tries=`expr $tries + 1`; sleep 30\n"
    "done\n"
    "printf 'fleetc: %s is loaded; wrote %s/%s\\n' \"$FLEETC_LOADED\" \"$FLEETC_MARKER_DIR\" \"$1\"\n")


def loaded_marker(cluster: str, namespace: str) -> str:
    """The name of the marker a DataLoad of ``namespace`` on ``cluster`` leaves (:data:`LOADED`)."""
    return f"{LOADED}.{cluster}.{namespace}"


def loaded_container(ctx: Context, namespace: str, url: str, marker: str, run: str, what: str) -> tuple[Obj, list[Obj]]:
    """The ``fleetc-loaded`` container that writes ``marker`` holding ``run`` beside ``url``
    (:data:`LOADED_SCRIPT`), with the Secret named for the URL in ``namespace``; its volumes."""
    folder, volume, env = _location(url, 0, ctx.storage_secrets.get((namespace, url)))
    if folder.startswith(":s3:"):
        env = env + _env({"RCLONE_S3_NO_CHECK_BUCKET": "true"})
    env = env + [{"name": "FLEETC_LOADED", "value": literal(what)}, {"name": "FLEETC_MARKER_DIR", "value": folder},
                 {"name": "FLEETC_RUN", "value": run}]
    container: Obj = {"name": "fleetc-loaded", "image": MARKER_IMAGE,
                      "command": ["sh", "-c", LOADED_SCRIPT, "fleetc-loaded", marker], "env": env,
                      "resources": marker_resources()}
    return _mounted(container, folder, volume, read_only=False)


def loaded_wait(ctx: Context, namespace: str, url: str, marker: str, run: str, what: str) -> tuple[Obj, list[Obj]]:
    """The ``fleetc-cache-ready`` init container that polls ``marker`` beside ``url`` until it
    holds ``run`` (:data:`WAIT_SCRIPT`, ``what`` named as the upstream); its volumes."""
    folder, volume, env = _location(url, 0, ctx.storage_secrets.get((namespace, url)))
    env = env + [{"name": "FLEETC_UPSTREAM", "value": literal(what)}, {"name": "FLEETC_MARKER_DIR", "value": folder},
                 {"name": "FLEETC_RUN", "value": run}]
    container: Obj = {"name": "fleetc-cache-ready", "image": MARKER_IMAGE,
                      "command": ["sh", "-c", WAIT_SCRIPT, "fleetc-wait", marker], "env": env,
                      "resources": marker_resources()}
    return _mounted(container, folder, volume, read_only=True)


def _mounted(container: Obj, folder: str, volume: Obj | None, read_only: bool) -> tuple[Obj, list[Obj]]:
    """``container`` with the ``nfs://`` folder of a marker mounted where it reads or writes it
    (``volume``, renamed for the cache-ready marker so it is no other volume of the pod), and
    the volumes to add; as it is, and none, for an object store."""
    if volume is None:
        return container, []
    volume = {"name": "fleetc-cache-marker", "nfs": {**volume["nfs"], **({"readOnly": True} if read_only else {})}}
    mount: Obj = {"name": volume["name"], "mountPath": folder}
    if read_only:
        mount["readOnly"] = True
    return {**container, "volumeMounts": [mount]}, [volume]


def wrap_command(command: list[str]) -> list[str]:
    """Run ``command`` and record its exit code for the ``fleetc-mark`` container
    (:data:`RUN_SCRIPT`): its words are the shell's positional parameters, never script text."""
    return ["sh", "-c", RUN_SCRIPT, "fleetc-run", *command]


def _marker_env(ctx: Context, folder: str, what: str, stage: Stage) -> list[Obj]:
    """What a mark or wait script reads: the stage it names (``FLEETC_STAGE`` or
    ``FLEETC_UPSTREAM``), the marker folder (after the remote's variables it may name) and the
    run id."""
    return [{"name": what, "value": literal(stage.key)}, {"name": "FLEETC_MARKER_DIR", "value": folder},
            {"name": "FLEETC_RUN", "value": run_id(ctx, stage)}]


def mark_container(ctx: Context, stage: Stage, restart_policy: str) -> tuple[Obj, list[Obj]]:
    """The ``fleetc-mark`` container of a marking stage's pods (:data:`MARK_SCRIPT`), and the
    volumes it needs. Writes go with ``no_check_bucket``: rclone's S3 backend otherwise calls
    CreateBucket before an upload (rclone v1.68 ``backend/s3/s3.go``: ``makeBucket`` returns at
    once only with ``NoCheckBucket``), which a key allowed to write objects only is refused."""
    folder, volume, env = _location(stage.outputs[0].url, 0, ctx.storage_secret(stage, stage.outputs[0].url))
    name = MARKER if stage.pods == 1 else f"{MARKER}.$(RANK)"  # $(RANK): the kubelet's to expand
    if folder.startswith(":s3:"):
        env = env + _env({"RCLONE_S3_NO_CHECK_BUCKET": "true"})
    env = env + _marker_env(ctx, folder, "FLEETC_STAGE", stage) + [
        {"name": "FLEETC_RESTART_POLICY", "value": restart_policy},
        {"name": "FLEETC_RETRY_COUNT",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{RETRY_COUNT}']"}}}]
    mounts = [{"name": STATUS_VOLUME, "mountPath": STATUS_PATH}]
    volumes: list[Obj] = [{"name": STATUS_VOLUME, "emptyDir": {}}]
    if volume is not None:  # the pod mounts the nfs:// output already (fleetc.render.data.data_mounts)
        mounts.append({"name": output_volume(stage.outputs[0].name), "mountPath": folder})
    container: Obj = {"name": "fleetc-mark", "image": MARKER_IMAGE,
                      "command": ["sh", "-c", MARK_SCRIPT, "fleetc-mark", name], "env": env,
                      "resources": marker_resources(), "volumeMounts": mounts}
    return container, volumes


def wait_containers(ctx: Context, stage: Stage) -> tuple[list[Obj], list[Obj]]:
    """One init container per producer with a marker, and the volumes they need."""
    return waits(ctx, stage.namespace, producers(ctx, stage))


def waits(ctx: Context, namespace: str, upstreams: list[Stage]) -> tuple[list[Obj], list[Obj]]:
    """One container per stage of ``upstreams`` that writes a marker, polling for it every
    :data:`POLL_SECONDS` and giving up after :data:`WAIT_TIMEOUT_SECONDS`
    (:data:`WAIT_SCRIPT`), each reaching the
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
        label = upstream.name if names[upstream.name] == 1 else f"{upstream.pipeline}-{upstream.name}"
        container: Obj = {"name": dns_label(f"fleetc-wait-{label}"), "image": MARKER_IMAGE,
                          "command": ["sh", "-c", WAIT_SCRIPT, "fleetc-wait", *_marker_names(upstream)],
                          "env": env + _marker_env(ctx, folder, "FLEETC_UPSTREAM", upstream),
                          "resources": marker_resources()}
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
