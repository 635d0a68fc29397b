"""A stage's workload objects: Volcano Jobs for gangs; Deployment, Service,
HorizontalPodAutoscaler and PodDisruptionBudget for serving; the training PriorityClass.

Where the platform's ``performance`` settings go:

* ``trainingPriority`` -> ``priorityClassName: fleetc-training-<level>`` on every Volcano Job
  (and its pods) of a governed pipeline, with the PriorityClass rendered on that cluster. The
  values are :data:`PRIORITY_VALUES`: far apart so other teams can slot classes in between,
  and all below 1,000,000,000, which Kubernetes reserves for system-critical pods.
* ``inferenceTimeout`` -> the serving container's ``FLEETC_INFERENCE_TIMEOUT_SECONDS`` env var
  (the server enforces it per request: Kubernetes has no per-request timeout of its own for a
  ClusterIP Service, so no Service field or annotation carries it) and the readiness probe's
  ``timeoutSeconds`` (rounded up): a replica whose health check cannot answer within the
  request budget cannot answer requests either, so it must not receive traffic.

The warm minimum (the seed's answer to cold starts) is the replicas the placement put on the
cluster: the HPA scales the Deployment up to them and never below (``minReplicas``; it does
so without metrics, within its sync period) and the PodDisruptionBudget keeps all but one of
them ready through voluntary disruptions. The Deployment itself names no replica count, as
Kubernetes advises for a Deployment under an HPA: Flux applies every field of a manifest on
each reconcile and would reset what the HPA scaled to, back to the warm minimum.
"""

from __future__ import annotations

import math
import re

from fleetc.errors import Diagnostic
from fleetc.model import (
    DEFAULT_IMAGES,
    SHARED_PRODUCT_SUFFIX,
    Cluster,
    Serving,
    Stage,
    StageType,
    Toleration,
    url_scheme,
)
from fleetc.render.common import (
    GPU_RESOURCE,
    MAX_NAME,
    Obj,
    content_name,
    cpu_quantity,
    dns1035_label,
    memory_quantity,
    metadata,
    object_name,
    selector,
    stage_labels,
    stage_metadata,
    team_queue_name,
    warning,
)
from fleetc.render.context import Context, Work
from fleetc.render.data import DataMounts, cache_ready_wait, data_mounts
from fleetc.render.order import (
    MAX_RETRY,
    STATUS_PATH,
    STATUS_VOLUME,
    literal,
    mark_container,
    marker_share,
    marks,
    run_id,
    wait_containers,
    wrap_command,
)

#: ``trainingPriority`` -> PriorityClass value.
PRIORITY_VALUES: dict[str, int] = {"low": 1_000, "medium": 10_000, "high": 100_000, "critical": 1_000_000}

SERVICE_PORT = 80
#: Pod events on which Volcano restarts a gang's Job (``policies``), up to ``maxRetry`` times.
RESTART_EVENTS = ("PodEvicted", "PodFailed")
MASTER_TASK = "master"
WORKER_TASK = "worker"
RENDEZVOUS_PORT = 23456  # the pytorch plugin's default port
HPA_MAX_FACTOR = 2  # maxReplicas = this x the warm minimum
TIMEOUT_ENV = "FLEETC_INFERENCE_TIMEOUT_SECONDS"
#: Startup checks 10 s apart before liveness applies: 5 minutes to load models, as in Triton's chart.
STARTUP_CHECKS = 30
#: Model repository URL schemes tritonserver reads itself (besides local paths).
TRITON_SCHEMES = frozenset({"s3", "gs", "as"})
#: What Triton reads an ``s3://`` model repository with: the AWS SDK's variables
#: (triton-inference-server/server ``docs/user_guide/model_repository.md``, "S3"), each from
#: the key of the Secret named for the URL (the Alluxio names fleetc's Secrets hold,
#: :data:`fleetc.model.STORAGE_CREDENTIAL_KEYS`); ``AWS_DEFAULT_REGION`` is where the data lives.
TRITON_S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "aws.accessKeyId", "AWS_SECRET_ACCESS_KEY": "aws.secretKey"}

_ENV_UNSAFE = re.compile(r"[^A-Z0-9_]")


# --------------------------------------------------------------------------- platform settings
def priority_class_name(level: str) -> str:
    return f"fleetc-training-{level}"


def training_priority(ctx: Context, stage: Stage) -> str | None:
    """The highest ``trainingPriority`` of the platforms governing the stage's pipeline."""
    levels = [p.training_priority for p in ctx.platforms(stage.pipeline)]
    return max(levels, key=PRIORITY_VALUES.__getitem__) if levels else None


def inference_timeout(ctx: Context, stage: Stage) -> float | None:
    """The strictest (smallest) ``inferenceTimeout`` of the governing platforms."""
    timeouts = [p.inference_timeout_seconds for p in ctx.platforms(stage.pipeline)]
    return min(timeouts) if timeouts else None


def priority_class(ctx: Context, level: str, pipeline: str) -> Obj:
    """The PriorityClass a governed gang stage names; its source is the first governing platform
    asking for this level (the object is the same whichever platform it came from)."""
    platform = next(p for p in ctx.platforms(pipeline) if p.training_priority == level)
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": metadata(priority_class_name(level), source=platform.source,
                             field="spec.performance.trainingPriority"),
        "value": PRIORITY_VALUES[level],
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"fleetc: training work of platforms with trainingPriority {level}",
    }


# --------------------------------------------------------------------------- pods
def _env_name(prefix: str, name: str) -> str:
    return prefix + _ENV_UNSAFE.sub("_", name.upper())


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def env_vars(ctx: Context, stage: Stage, mounted: DataMounts) -> list[Obj]:
    """The container's environment, sorted by name:

    * ``FLEETC_INPUT_<NAME>`` / ``FLEETC_OUTPUT_<NAME>``: the data URLs;
    * ``FLEETC_INPUT_<NAME>_PATH`` / ``FLEETC_OUTPUT_<NAME>_PATH``: where a cached or ``nfs://``
      input, or an ``nfs://`` output, is mounted (``mounted``, from :func:`.data.data_mounts`);
    * ``FLEETC_OUTPUT_<NAME>_CREDENTIALS``: the folder an object-store output's Secret is
      mounted in, one file per key;
    * DataProc stages, with a data policy: ``FLEETC_PREPROCESS_PARALLELISM`` and
      ``FLEETC_PREPROCESS_COMPRESSION`` (``preprocessing``; env vars rather than more task
      replicas, because the gang's size and resources are what the placement reserved);
    * Deployment stages of a governed pipeline: :data:`TIMEOUT_ENV`.
    """
    env = {_env_name("FLEETC_INPUT_", i.name): ctx.input_url(stage, i) for i in stage.inputs}
    env |= {_env_name("FLEETC_INPUT_", name) + "_PATH": path for name, path in mounted.paths.items()}
    env |= {_env_name("FLEETC_OUTPUT_", o.name): o.url for o in stage.outputs}
    env |= {_env_name("FLEETC_OUTPUT_", name) + "_PATH": path for name, path in mounted.output_paths.items()}
    env |= {_env_name("FLEETC_OUTPUT_", name) + "_CREDENTIALS": path for name, path in mounted.credentials.items()}
    data = ctx.data_policy
    if data is not None and stage.type is StageType.DATAPROC:
        env["FLEETC_PREPROCESS_PARALLELISM"] = str(data.parallelization)
        env["FLEETC_PREPROCESS_COMPRESSION"] = "true" if data.compression else "false"
    timeout = inference_timeout(ctx, stage)
    if timeout is not None and stage.type is StageType.DEPLOYMENT:
        env[TIMEOUT_ENV] = _seconds(timeout)
    if stage.is_gang:
        env |= _rendezvous_env(stage)
    # Values come from policies: '$' doubled, so the kubelet fills in no $(VAR) of theirs.
    return [{"name": name, "value": literal(env[name])} for name in sorted(env)]


def _rendezvous_env(stage: Stage) -> dict[str, str]:
    """What ``torchrun`` reads, the same names whatever the gang's size: ``PET_NPROC_PER_NODE``
    (torchrun's ``--nproc-per-node`` from the environment: the pod's GPUs); for a one-pod gang
    also the variables the ``pytorch`` plugin sets on larger gangs (:func:`distributed_plugins`),
    so one command, ``torchrun --nnodes=$(WORLD_SIZE) --node-rank=$(RANK)
    --master-addr=$(MASTER_ADDR) --master-port=$(MASTER_PORT) ...``, runs either way."""
    env = {"PET_NPROC_PER_NODE": str(stage.pod_gpus)} if stage.pod_gpus else {}
    if stage.pods == 1:
        env |= {"MASTER_ADDR": "localhost", "MASTER_PORT": str(RENDEZVOUS_PORT), "WORLD_SIZE": "1",
                "RANK": "0"}
    return env


def _resources(stage: Stage, *, marked: bool = False) -> Obj:
    """One pod's share of a replica (a replica split over the nodes of its cluster shares GPUs,
    CPU and memory evenly, :func:`fleetc.placement.rules.on_cluster`); ``marked``: the pod also
    runs the marker container, whose requests come out of this one's (:func:`marker_share`), so
    that the pod requests what the placement counted, no more. Limits stay the pod's share."""
    millis, memory = stage.pod_cpu_millis, stage.pod_memory_bytes
    limits = {"cpu": cpu_quantity(millis), "memory": memory_quantity(memory)}
    if marked:
        millis, memory = marker_share(millis, memory)
    amounts = {"cpu": cpu_quantity(millis), "memory": memory_quantity(memory)}
    if stage.pod_gpus > 0:
        amounts[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(stage.pod_gpus)
    return {"requests": amounts, "limits": limits}


def main_container(ctx: Context, stage: Stage, mounted: DataMounts) -> Obj:
    container: Obj = {"name": stage.type.value.lower(), "image": stage.image}
    if stage.command:
        container["command"] = list(stage.command)
    env = env_vars(ctx, stage, mounted)
    if env:
        container["env"] = env
    container["resources"] = _resources(stage)
    if mounted.mounts:
        container["volumeMounts"] = list(mounted.mounts)
    return container


def _toleration(t: Toleration) -> Obj:
    fields = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in fields.items() if v}


def time_sliced(ctx: Context, cluster: Cluster, stage: Stage) -> bool:
    """Whether the stage's pods on ``cluster`` select time-sliced nodes: they take shared slots,
    and the cluster's device plugin reads fleetc's time-sliced config (the Fleet says its
    ClusterPolicy points at it: attribute ``device-plugin-configured``); elsewhere no node
    carries the ``-SHARED`` product label, so they select whole GPUs."""
    return ctx.shares_gpus(stage) and cluster.device_plugin_configured


def _pod_spec(ctx: Context, cluster: Cluster, stage: Stage, container: Obj, mounted: DataMounts,
              waiting: bool = True, **extra: str) -> Obj:
    """Pod spec: ``extra`` fields (restart policy, priority class), the GPU node selector (known
    GPU types only; the ``-SHARED`` product on time-sliced nodes), tolerations; and when
    ``waiting``, the init containers that wait for the stage's upstream markers (a held Job's
    pods wait for nothing: its release Job waited, :mod:`fleetc.render.release`)."""
    spec: Obj = dict(extra)
    if stage.gpus > 0 and cluster.gpu_product:
        suffix = SHARED_PRODUCT_SUFFIX if time_sliced(ctx, cluster, stage) else ""
        spec["nodeSelector"] = {"nvidia.com/gpu.product": cluster.gpu_product + suffix}
    if stage.tolerations:
        spec["tolerations"] = [_toleration(t) for t in stage.tolerations]
    waits, volumes = wait_containers(ctx, stage) if waiting else ([], [])
    if waits:
        spec["initContainers"] = waits
    spec["containers"] = [container]
    if marks(ctx, stage):
        container["command"] = wrap_command(container["command"])
        container["resources"] = _resources(stage, marked=True)
        container.setdefault("volumeMounts", []).append({"name": STATUS_VOLUME, "mountPath": STATUS_PATH})
        marker, marker_volumes = mark_container(ctx, stage, spec.get("restartPolicy", "Always"))
        spec["containers"].append(marker)
        volumes += marker_volumes
    volumes = mounted.volumes + volumes
    if volumes:
        spec["volumes"] = volumes
    return spec


# --------------------------------------------------------------------------- warnings
def stage_warnings(ctx: Context, work: Work) -> list[Diagnostic]:
    """What would make a rendered stage do nothing or never get Ready:

    * a run-to-completion stage on a default image without ``command``: the image's own
      command (``python3`` in python:3.11-slim, a shell in the PyTorch image) exits at once,
      so the Job reports Completed having done nothing;
    * a Deployment on the default Triton image whose model repository Triton cannot reach.
    """
    found = []
    for stage, _ in work:
        if stage.is_gang and not stage.command and stage.image == DEFAULT_IMAGES[stage.type]:
            found.append(warning(stage.source, f"{stage.source.field}.command",
                                 f"stage '{stage.name}' sets no command: its default image {stage.image} "
                                 "exits at once and the Job reports Completed having done nothing; set "
                                 "command to what the stage runs (for example [torchrun, train.py])"))
        if stage.serving is not None and stage.serving.triton:
            mounted = data_mounts(ctx, stage)
            _, problem = model_repository(ctx, stage, mounted)
            if problem:
                found.append(warning(stage.source, f"{stage.source.field}.inputs", problem))
            _, unread = triton_credentials(ctx, stage, mounted)
            if unread:
                found.append(warning(stage.source, f"{stage.source.field}.inputs[0]", unread))
    return found


# --------------------------------------------------------------------------- stage objects
def gang_pod_template(ctx: Context, cluster: Cluster, stage: Stage, waiting: bool = True) -> Obj:
    """The pod template of a gang stage's pods, whichever batch scheduler admits them, with the
    governing platform's PriorityClass; without the waits for the upstream markers unless
    ``waiting`` (a held Kueue Job, :mod:`fleetc.render.release`).

    ``restartPolicy: Never``: a failed command fails its pod, which is what the batch
    controllers count. Under ``OnFailure`` the kubelet restarts the container in place and the
    pod stays Running (kubernetes ``pkg/kubelet/kubelet_pods.go`` ``getPhase``); Volcano acts
    on pod phases only (``pkg/controllers/job/job_controller_handler.go`` ``updatePod``), so
    its ``policies`` and ``maxRetry`` never fired and a broken run crash-looped on its GPUs for
    ever. Retries are the Job's: Volcano's ``PodFailed -> RestartJob`` bounded by ``maxRetry``
    (:func:`volcano_job`), the Job controller's ``backoffLimit`` on Kueue."""
    level = training_priority(ctx, stage)
    priority = {"priorityClassName": priority_class_name(level)} if level else {}
    mounted = data_mounts(ctx, stage)
    pod = _pod_spec(ctx, cluster, stage, main_container(ctx, stage, mounted), mounted, waiting,
                    restartPolicy="Never", **priority)
    return {"metadata": {"labels": stage_labels(stage)}, "spec": pod}


def volcano_job(ctx: Context, cluster: Cluster, stage: Stage, gate: str | None = None) -> Obj:
    """A gang stage as a Volcano Job: all its pods (``stage.replicas``, each split into
    ``pods_per_replica`` that fit a node) start together or not at all.

    A gang of more than one pod is distributed: a ``master`` task of one pod and a ``worker``
    task of the rest, with Volcano's ``pytorch``, ``svc`` and ``env`` plugins (see
    :func:`distributed_plugins`).

    A failed or evicted pod restarts the whole Job (:data:`RESTART_EVENTS`: a gang's ranks
    cannot go on without one of theirs); Volcano counts the restarts and, once ``maxRetry``
    of them failed, kills the pods and ends the Job Failed (volcano v1.15.1
    ``pkg/controllers/job/state/running.go`` ``RestartJobAction`` increments ``retryCount``,
    ``state/restarting.go`` fails the Job at ``retryCount >= maxRetry``): its GPUs are
    released and its dependants never get its marker.

    With a ``gate``, the Job is held (:mod:`fleetc.render.release`): its pods carry that
    scheduling gate instead of the waits, and its name covers the stage's run id."""
    level = training_priority(ctx, stage)
    priority = {"priorityClassName": priority_class_name(level)} if level else {}
    template = gang_pod_template(ctx, cluster, stage, waiting=gate is None)
    if gate is not None:
        template["spec"]["schedulingGates"] = [{"name": gate}]
    if stage.pods > 1:
        tasks = [_task(MASTER_TASK, 1, template), _task(WORKER_TASK, stage.pods - 1, template)]
        plugins = {"plugins": distributed_plugins()}
    else:
        tasks, plugins = [_task(WORKER_TASK, 1, template)], {}
    job: Obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": stage_metadata(stage),
        "spec": {
            "schedulerName": "volcano",
            "queue": job_queue(ctx, stage),
            **priority,
            "minAvailable": stage.pods,
            "maxRetry": MAX_RETRY,
            "policies": [{"event": event, "action": "RestartJob"} for event in RESTART_EVENTS],
            **plugins,
            "tasks": tasks,
        },
    }
    job["metadata"]["name"] = job_name(job, run_id(ctx, stage) if gate is not None else None)
    return job


def _task(name: str, replicas: int, template: Obj) -> Obj:
    """A Volcano task with every field Volcano's mutating webhook would fill on create set as it
    would fill it (``minAvailable`` = replicas, ``maxRetry`` = 3: volcano v1.15.1
    ``pkg/webhooks/admission/jobs/mutate/mutate_job.go`` ``mutateSpec``). The webhook runs on
    CREATE only and ``spec.tasks`` is an atomic list under server-side apply, so a re-apply
    that left them out would replace the tasks without them, which ``validateJobUpdate``
    refuses: Flux's workloads Kustomization would fail its dry run and Argo CD would show the
    Job OutOfSync for ever."""
    return {"name": name, "replicas": replicas, "minAvailable": replicas, "maxRetry": MAX_RETRY,
            "template": template}


def job_queue(ctx: Context, stage: Stage) -> str:
    """The Volcano Queue of a gang stage: its team's (:func:`fleetc.render.common.team_queue_name`),
    else its workload class's."""
    team = ctx.team(stage)
    return team_queue_name(team.name) if team is not None else f"fleetc-{stage.workload_class}"


def job_name(job: Obj, run: str | None = None) -> str:
    """A Volcano Job's name: ``<pipeline>-<stage>-<8 hex of its spec>`` (and of the stage's
    ``run`` id for a held Job, whose pods hold no wait that names its upstream's runs: a re-run
    upstream is a new Job, as on Kueue, :mod:`fleetc.render.release`).

    Volcano refuses any change to a Job's spec (``validateJobUpdate``, volcano
    ``pkg/webhooks/admission/jobs/validate/admit_job.go``), so a stage whose Job changes is a
    new Job: GitOps creates it and prunes the old one. A stage whose Job is unchanged keeps its
    name byte for byte, so unrelated policy changes never restart it. The name is a DNS-1035
    label (Volcano's ``svc`` plugin names a headless Service after the Job) short enough that
    every pod hostname ``<job>-<task>-<index>`` (``MakePodName``, ``pkg/controllers/job/
    helpers/helpers.go``; the ``svc`` plugin sets it as the hostname) fits in 63 characters."""
    longest_pod_suffix = max(len(f"-{task['name']}-{task['replicas'] - 1}") for task in job["spec"]["tasks"])
    content = job["spec"] if run is None else {"run": run, "spec": job["spec"]}
    return content_name(job["metadata"]["name"], content, MAX_NAME - longest_pod_suffix)


def distributed_plugins() -> Obj:
    """Volcano job plugins that let the pods of one gang find each other (volcano-sh/volcano
    ``pkg/controllers/job/plugins``):

    * ``svc``: a headless Service named after the Job, and each pod's ``hostname`` (its pod
      name, ``<job>-<task>-<index>``) and ``subdomain`` (the Job), so
      ``<job>-master-0.<job>`` resolves to the master pod; a ConfigMap lists every task's hosts
      (``VC_<TASK>_HOSTS``, mounted at ``/etc/volcano``);
    * ``env``: ``VC_TASK_INDEX`` (and the older ``VK_TASK_INDEX``), the pod's index in its task;
    * ``pytorch``: ``MASTER_ADDR`` (the master pod's DNS name), ``MASTER_PORT``
      (:data:`RENDEZVOUS_PORT`, opened on every container), ``WORLD_SIZE`` (pods in the gang)
      and ``RANK`` (0 on the master, 1.. on the workers): what ``torchrun --nnodes=$(WORLD_SIZE)
      --node-rank=$(RANK) --master-addr=$(MASTER_ADDR) --master-port=$(MASTER_PORT)`` needs.
    """
    return {
        "env": [],
        "pytorch": [f"--master={MASTER_TASK}", f"--worker={WORKER_TASK}", f"--port={RENDEZVOUS_PORT}"],
        "svc": [],
    }


def _serving(stage: Stage) -> Serving:
    """The stage's serving settings (a model built without them serves on the defaults)."""
    return stage.serving or Serving()


def deployment(ctx: Context, cluster: Cluster, stage: Stage, waiting: bool = True) -> Obj:
    """A serving stage's share on this cluster: pods behind a readiness probe, as many as its
    HPA says (see the module docstring); without the waits unless ``waiting`` (a held
    Deployment, whose releaser waits: :mod:`fleetc.render.release`)."""
    serving = _serving(stage)
    mounted = data_mounts(ctx, stage)
    container = main_container(ctx, stage, mounted)
    if serving.triton:
        container["command"] = triton_command(ctx, stage, mounted)
        credentials, _ = triton_credentials(ctx, stage, mounted)
        if credentials:
            container["env"] = sorted(container.get("env", []) + credentials, key=lambda e: str(e["name"]))
    ports = [("http", serving.port), *serving.extra_ports]
    container["ports"] = [{"name": name, "containerPort": number, "protocol": "TCP"} for name, number in ports]
    ready: Obj = {"httpGet": {"path": serving.readiness_path, "port": "http"}}
    timeout = inference_timeout(ctx, stage)
    if timeout is not None:
        ready["timeoutSeconds"] = max(1, math.ceil(timeout))
    container["readinessProbe"] = ready
    if serving.liveness_path:
        container["livenessProbe"] = {"httpGet": {"path": serving.liveness_path, "port": "http"},
                                      "periodSeconds": 10, "failureThreshold": 3}
        container["startupProbe"] = {"httpGet": {"path": serving.readiness_path, "port": "http"},
                                     "periodSeconds": 10, "failureThreshold": STARTUP_CHECKS}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": stage_metadata(stage),
        "spec": {
            "selector": {"matchLabels": selector(stage)},
            "template": {
                "metadata": {"labels": stage_labels(stage)},
                "spec": _serving_pod_spec(ctx, cluster, stage, container, mounted, waiting),
            },
        },
    }


def _serving_pod_spec(ctx: Context, cluster: Cluster, stage: Stage, container: Obj, mounted: DataMounts,
                      waiting: bool) -> Obj:
    """A serving pod: when ``waiting``, after its waits for upstream stages, the wait for the
    DataLoad that refreshes the cache it serves from (:func:`fleetc.render.data.cache_ready_wait`)."""
    spec = _pod_spec(ctx, cluster, stage, container, mounted, waiting)
    ready = cache_ready_wait(ctx, cluster.name, stage, mounted) if waiting else None
    if ready is not None:
        wait, volumes = ready
        spec["initContainers"] = [*spec.get("initContainers", []), wait]
        if volumes:
            spec["volumes"] = [*spec.get("volumes", []), *volumes]
    return spec


def model_repository(ctx: Context, stage: Stage, mounted: DataMounts) -> tuple[str, str]:
    """Where Triton finds its models: the stage's first input, as a mounted path when it is
    mounted, else as the URL when Triton reads that scheme itself; and what is wrong ('' when
    nothing is)."""
    if not stage.inputs:
        return "/models", ("the default Triton image serves a model repository, and the stage has no "
                           "input to serve: add the model as its first input, or set command")
    spec = stage.inputs[0]
    if spec.name in mounted.paths:
        return f"$({_env_name('FLEETC_INPUT_', spec.name)}_PATH)", ""
    url = ctx.input_url(stage, spec)
    if url_scheme(url) in TRITON_SCHEMES:
        return f"$({_env_name('FLEETC_INPUT_', spec.name)})", ""
    return f"$({_env_name('FLEETC_INPUT_', spec.name)})", (
        f"Triton cannot read {url_scheme(url) or 'this'}:// model repositories itself (it reads "
        f"{', '.join(sorted(TRITON_SCHEMES))} and local paths): cache or mount inputs[0] "
        "(DataOptimizationPolicy caching), or set command")


def triton_credentials(ctx: Context, stage: Stage, mounted: DataMounts) -> tuple[list[Obj], str]:
    """The environment Triton reads an uncached model repository with, and what it cannot be
    given ('' when nothing): for ``s3://``, the keys of the Secret named for the URL by
    ``secretKeyRef`` (:data:`TRITON_S3_CREDENTIALS`; no value is rendered) and the region
    where the data lives, when the input says it. Without a Secret Triton uses the pod's own
    identity (the AWS SDK's default chain: IRSA, the node's role). Triton reads ``gs://`` with
    a service-account key file or the pod's identity, not the HMAC keys fleetc's ``gs``
    Secrets hold, so a Secret named there is reported."""
    if not stage.inputs or stage.inputs[0].name in mounted.paths:
        return [], ""
    spec = stage.inputs[0]
    url = ctx.input_url(stage, spec)
    scheme, secret = url_scheme(url), ctx.storage_secret(stage, url)
    env: list[Obj] = []
    if scheme == "s3":
        if secret is not None:
            env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                    for name, key in sorted(TRITON_S3_CREDENTIALS.items())]
        if spec.location:
            env.append({"name": "AWS_DEFAULT_REGION", "value": literal(spec.location)})
        return env, ""
    if scheme in TRITON_SCHEMES and secret is not None:
        return [], (f"Triton reads {scheme}:// model repositories with its own credentials (a key file, or "
                    f"the pod's identity), not the keys of Secret {secret}: cache inputs[0] "
                    "(DataOptimizationPolicy caching: Fluid mounts it with the Secret), or give the pods an "
                    "identity that reads it")
    return [], ""


def triton_command(ctx: Context, stage: Stage, mounted: DataMounts) -> list[str]:
    serving = _serving(stage)
    repository, _ = model_repository(ctx, stage, mounted)
    return ["tritonserver", f"--model-repository={repository}", f"--http-port={serving.port}",
            *(f"--{name}-port={number}" for name, number in serving.extra_ports)]


def service(stage: Stage) -> Obj:
    """ClusterIP Service in front of a Deployment stage: port 80 -> the pods' ``http`` port,
    and every other port the server listens on (``serving`` extra ports: Triton's ``grpc`` and
    ``metrics``) under its own number and name, so gRPC clients and a metrics scraper reach the
    pods through the Service too. Its name is a DNS-1035 label, as the API server requires of
    Services (``x-`` in front of a name that starts with a digit)."""
    meta = stage_metadata(stage)
    meta["name"] = dns1035_label(meta["name"])
    ports = [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}]
    ports += [{"name": name, "port": number, "targetPort": name, "protocol": "TCP"}
              for name, number in _serving(stage).extra_ports if number != SERVICE_PORT]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": selector(stage),
            "ports": ports,
        },
    }


def _metric(serving: Serving) -> Obj:
    """``cpu``: utilisation of the request; anything else a per-pod custom metric (the
    custom metrics API, for example prometheus-adapter) averaged over the pods."""
    if serving.metric == "cpu":
        return {"type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                       "averageUtilization": int(serving.target)}}}
    return {"type": "Pods",
            "pods": {"metric": {"name": serving.metric},
                     "target": {"type": "AverageValue", "averageValue": serving.target}}}


def autoscaler(stage: Stage, replicas: int) -> Obj:
    """HPA over the Deployment: never below the warm minimum the placement reserved, up to
    :data:`HPA_MAX_FACTOR` times it on the stage's metric (``serving.metric``: CPU at 70% by
    default). Replicas past the minimum were not placed by the optimizer: they run where the
    cluster has room, else stay Pending (never evicting others)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": stage_metadata(stage),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": object_name(stage)},
            "minReplicas": replicas,
            "maxReplicas": HPA_MAX_FACTOR * replicas,
            "metrics": [_metric(_serving(stage))],
        },
    }


def disruption_budget(stage: Stage, replicas: int) -> Obj:
    """PDB: ``minAvailable = max(1, replicas - 1)``: a drain takes one warm replica at a time and
    never the last one (a one-replica share waits until the HPA or a reschedule adds another)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": stage_metadata(stage),
        "spec": {"minAvailable": max(1, replicas - 1), "selector": {"matchLabels": selector(stage)}},
    }
