"""The data policy as Fluid objects: a cache near the stages that read the data.

On a cluster that runs stages with inputs, for each (namespace, input URL) pair, when the
policy's ``caching.enabled``:

* a ``Dataset`` mounting the URL read-only, and an ``AlluxioRuntime`` of the same name (Fluid
  binds them by name) whose one tiered-store level holds its share of ``caching.size`` (the size
  split evenly over the cluster's runtimes, so they add up to it) on the node's SSD and
  evicts by ``caching.strategy`` (LRU: Alluxio's ``LRUAnnotator``; LFU: its ``LRFUAnnotator``
  with step factor 0, which makes LRFU pure LFU);
* the stage pods mount the Dataset's volume read-only at ``/fleetc/inputs/<input name>``
  (``FLEETC_INPUT_<NAME>_PATH``; ``FLEETC_INPUT_<NAME>`` keeps the URL);
* a ``DataLoad`` that warms the cache once when ``prefetching.enabled``. For data stages of
  the compile write, it waits for them (:func:`prefetch`): a ``DataProcess`` whose pod polls
  each writer's completion marker, with the init containers the writers' dependants start
  with (:func:`fleetc.render.order.waits`), and the ``DataLoad`` ``runAfter`` it, which Fluid
  holds until the DataProcess completed; docs/pipelines.md cites the Fluid code. Fluid has no
  "lookahead" (a DataLoad loads the dataset, not the next N files), so
  ``prefetching.lookahead`` is reported, not rendered.

Names are ``data-<url slug>-<8 hex of sha256(url)>``: stable, different for different URLs, and
short enough for the Helm releases Fluid makes of them (:func:`dataset_name`, :func:`data_load_name`).
Only URL schemes Alluxio mounts as an under-store (:data:`CACHEABLE_SCHEMES`) are cached;
others (``nfs://``, for example) are read directly and reported. No credentials are rendered: an
input that names a Secret (``secretName``) gets its Dataset mount options from it by reference,
under the keys Alluxio names for the scheme (:data:`fleetc.model.STORAGE_CREDENTIAL_KEYS`).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import NamedTuple

from fleetc.errors import Diagnostic
from fleetc.model import STORAGE_CREDENTIAL_KEYS, DataPolicy, Source, Stage, url_scheme
from fleetc.render.common import (
    MAX_HELM_RELEASE,
    Obj,
    digest,
    dns_label,
    hashed_slug,
    memory_quantity,
    metadata,
    shorten,
    split_url,
    warning,
)
from fleetc.render.context import Context, Work
from fleetc.render.order import (
    ENDPOINT_IN_SECRET,
    MARKER_IMAGE,
    literal,
    loaded_container,
    loaded_marker,
    loaded_wait,
    marker_resources,
    output_volume,
    run_id,
    unmarked,
    waits,
)

#: URL schemes Alluxio (and so Fluid's AlluxioRuntime) mounts as an under-file-system.
CACHEABLE_SCHEMES = frozenset({"cos", "cosn", "gs", "hdfs", "obs", "oss", "s3", "s3a"})
CACHE_PATH = "/var/lib/fleetc/cache"
ANNOTATOR = "alluxio.worker.block.annotator.class"
_ANNOTATORS = {
    "LRU": {ANNOTATOR: "alluxio.worker.block.annotator.LRUAnnotator"},
    "LFU": {ANNOTATOR: "alluxio.worker.block.annotator.LRFUAnnotator",
            "alluxio.worker.block.annotator.lrfu.step.factor": "0.0"},
}


#: Fluid data operations: they run once Datasets are bound, so they go with the workloads.
FLUID_OPERATIONS = frozenset({"DataLoad", "DataProcess"})

#: Where a stage's container finds a cached or ``nfs://`` input: ``<MOUNT_ROOT>/<input name>``.
MOUNT_ROOT = "/fleetc/inputs"
#: Where it writes an ``nfs://`` output: ``<OUTPUT_ROOT>/<output name>``.
OUTPUT_ROOT = "/fleetc/outputs"
#: Where it finds the keys of an object-store output's Secret: ``<CREDENTIALS_ROOT>/<output name>``.
CREDENTIALS_ROOT = "/fleetc/credentials"


@functools.lru_cache(maxsize=1 << 14)  # every stage reading a URL names its dataset
def dataset_name(url: str) -> str:
    """The Dataset's and its AlluxioRuntime's name: Fluid installs the runtime as a Helm
    release of that name (fluid ``pkg/ddc/alluxio/master_internal.go``), at most 53 characters,
    which also keeps ``<name>-master-0`` within 63."""
    return hashed_slug("data", url, MAX_HELM_RELEASE)


def data_load_name(url: str) -> str:
    """The DataLoad's name: Fluid installs it as the Helm release ``<name>-loader`` (fluid
    ``pkg/utils/dataload.go``), so the name has at most 53 - 7 characters."""
    return shorten(f"{dataset_name(url)}-prefetch", MAX_HELM_RELEASE - len("-loader"))


def is_cached(ctx: Context, url: str) -> bool:
    """Whether stages read ``url`` through a Fluid cache (on every cluster that reads it)."""
    policy = ctx.data_policy
    return policy is not None and policy.caching_enabled and url_scheme(url) in CACHEABLE_SCHEMES


def cached_urls(ctx: Context, work: Work) -> list[tuple[str, str]]:
    """Sorted (namespace, url) pairs the stages on one cluster read through a cache."""
    pairs = {(stage.namespace, url) for stage, _ in work for _, url in ctx.input_urls(stage) if is_cached(ctx, url)}
    return sorted(pairs)


class DataMounts(NamedTuple):
    """A stage's mounted inputs and outputs, as its pod needs them."""

    volumes: list[Obj]  # pod volumes: the PVC Fluid creates for a Dataset (named like it), or nfs
    mounts: list[Obj]  # container volumeMounts: inputs read-only, outputs read-write
    paths: dict[str, str]  # input name -> mount path, for FLEETC_INPUT_<NAME>_PATH
    output_paths: dict[str, str]  # output name -> mount path, for FLEETC_OUTPUT_<NAME>_PATH
    #: output name -> the folder its Secret's keys are files in, FLEETC_OUTPUT_<NAME>_CREDENTIALS
    credentials: dict[str, str]


def _nfs_volume(name: str, url: str, read_only: bool) -> Obj:
    """An ``nfs`` pod volume of ``nfs://server/export/path``: the kubelet mounts
    ``server:/export/path`` itself (no PersistentVolume needed)."""
    parts = split_url(url)
    nfs: Obj = {"server": parts.hostname or "", "path": "/" + parts.path.strip("/")}
    if read_only:
        nfs["readOnly"] = True
    return {"name": name, "nfs": nfs}


def data_mounts(ctx: Context, stage: Stage) -> DataMounts:
    """The stage's cached and ``nfs://`` inputs (read-only, at ``/fleetc/inputs/<name>``) and its
    ``nfs://`` outputs (read-write, at ``/fleetc/outputs/<name>``) as pod volumes, container
    volumeMounts and env values: the container is told each path it is given. An object-store
    output with a Secret (``secretName``) has the Secret mounted read-only at
    ``/fleetc/credentials/<name>``, one file per key (the keys Alluxio names for the scheme):
    the container writes with them; the Secret is named, its values never rendered."""
    found = DataMounts([], [], {}, {}, {})
    for index, url in ctx.input_urls(stage):
        nfs = url_scheme(url) == "nfs"
        if not nfs and not is_cached(ctx, url):
            continue
        name = stage.inputs[index].name
        volume = dns_label(f"input-{name}")
        if nfs:  # mounted from the NFS server itself, read-only
            found.volumes.append(_nfs_volume(volume, url, read_only=True))
        else:
            found.volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": dataset_name(url),
                                                                            "readOnly": True}})
        found.mounts.append({"name": volume, "mountPath": f"{MOUNT_ROOT}/{name}", "readOnly": True})
        found.paths[name] = f"{MOUNT_ROOT}/{name}"
    for output in stage.outputs:
        if url_scheme(output.url) != "nfs":
            continue
        volume = output_volume(output.name)
        found.volumes.append(_nfs_volume(volume, output.url, read_only=False))
        found.mounts.append({"name": volume, "mountPath": f"{OUTPUT_ROOT}/{output.name}"})
        found.output_paths[output.name] = f"{OUTPUT_ROOT}/{output.name}"
    for output in stage.outputs:
        secret = ctx.storage_secret(stage, output.url)
        if secret is None or url_scheme(output.url) not in STORAGE_CREDENTIAL_KEYS:
            continue
        volume = dns_label(f"credentials-{output.name}")
        found.volumes.append({"name": volume, "secret": {"secretName": secret}})
        found.mounts.append({"name": volume, "mountPath": f"{CREDENTIALS_ROOT}/{output.name}", "readOnly": True})
        found.credentials[output.name] = f"{CREDENTIALS_ROOT}/{output.name}"
    return found


def _source(policy: DataPolicy, field: str) -> Source:
    return _field_of(policy.source, field)


@functools.lru_cache(maxsize=64)  # a few fields of one policy, asked for by every Fluid object
def _field_of(source: Source, field: str) -> Source:
    return replace(source, field=field)


def dataset(policy: DataPolicy, namespace: str, url: str, secret: str | None = None) -> Obj:
    """The Dataset mounting ``url``; with ``secret`` (the Secret an input reading it names), the
    mount options its scheme needs come from that Secret, by reference (``encryptOptions``,
    ``secretKeyRef``): no credential is ever rendered."""
    # path "/": the data at the volume's root, where the pods are told it is (fluid
    # pkg/utils/ufs_path_builder.go mounts a mount without an absolute path at /<name>)
    mount: Obj = {"name": "data", "mountPoint": url, "path": "/", "readOnly": True}
    if secret is not None:
        mount["encryptOptions"] = [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                                   for key in STORAGE_CREDENTIAL_KEYS[url_scheme(url)]]
    return {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "Dataset",
        "metadata": metadata(dataset_name(url), namespace, _source(policy, "spec.caching")),
        "spec": {"mounts": [mount]},
    }


#: Where an AlluxioRuntime's pods run when their namespace's egress is fenced by the
#: sovereignty NetworkPolicy (:func:`fleetc.render.cluster.egress_policy`): on the pod network.
#: Fluid runs Alluxio's master, workers and FUSE on the host network by default (fluid v1.0.8
#: ``api/v1alpha1/alluxioruntime_types.go`` ``networkMode``, ``pkg/ddc/alluxio/transform.go``),
#: at node IPs that the policy's own-namespace rule (a ``podSelector``) does not match, so the
#: DataLoad pods, which reach the master as Alluxio clients, were cut off. On the pod network
#: they are pods of the namespace, reachable under that rule and fenced by the policy too.
CONTAINER_NETWORK = {"networkMode": "ContainerNetwork"}


def alluxio_runtime(policy: DataPolicy, namespace: str, url: str, share: int = 1, fenced: bool = False) -> Obj:
    """The cache of one Dataset: ``1/share`` of ``caching.size``, so the runtimes of a cluster
    (``share`` of them) add up to the size the policy sets; on the pod network where the
    namespace's egress is ``fenced`` (:data:`CONTAINER_NETWORK`)."""
    level = {
        "mediumtype": "SSD",
        "volumeType": "hostPath",
        "path": CACHE_PATH,
        "quota": memory_quantity(policy.caching_size_bytes // share),
        "high": "0.95",
        "low": "0.7",
    }
    spec: Obj = {
        "replicas": 1,
        "properties": dict(_ANNOTATORS.get(policy.caching_strategy.upper(), _ANNOTATORS["LRU"])),
        "tieredstore": {"levels": [level]},
    }
    if fenced:
        spec |= {part: dict(CONTAINER_NETWORK) for part in ("master", "worker", "fuse")}
    return {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "AlluxioRuntime",
        "metadata": metadata(dataset_name(url), namespace, _source(policy, "spec.caching")),
        "spec": spec,
    }


#: The Helm release Fluid installs a DataProcess as is ``<name>-processor`` (fluid
#: ``pkg/utils/dataprocess.go``), at most 53 characters.
MAX_DATA_PROCESS = MAX_HELM_RELEASE - len("-processor")


def _waiting_names(ctx: Context, url: str, writers: tuple[Stage, ...]) -> tuple[str, str]:
    """(DataProcess, DataLoad) names of a prefetch that waits for ``writers``: named after
    their runs (:func:`fleetc.render.order.run_id`), as a Fluid data operation runs once, so a
    changed writer gets a new pair that waits for its new marker."""
    runs = _writers_run(ctx, writers)
    prefix = hashed_slug("data", url, min(MAX_DATA_PROCESS - len("-wait"),
                                          MAX_HELM_RELEASE - len("-loader") - len("-prefetch")) - 9)
    return f"{prefix}-{runs}-wait", f"{prefix}-{runs}-prefetch"


def _writers_run(ctx: Context, writers: tuple[Stage, ...]) -> str:
    """The digest of the writers' run ids: what a prefetch's names and its loaded marker carry."""
    return digest(",".join(run_id(ctx, writer) for writer in writers))


def prefetch(ctx: Context, policy: DataPolicy, namespace: str, url: str, cluster: str = "",
             served: bool = False) -> list[Obj]:
    """The DataLoad that warms the cache of ``url`` in ``namespace``, and what it waits for.

    Data no stage writes is loaded as soon as the Dataset is bound. Data stages write is
    loaded only after each of them completed: a DataProcess whose pod completes once every
    writer's completion marker holds that writer's run (its init containers poll it, as the
    writers' dependants do, and fail after the same timeout), and the DataLoad with
    ``runAfter`` that DataProcess. Fluid keeps a data operation with ``runAfter`` Pending until
    the one it names is Complete, and Pending for good when that one Failed (fluid
    ``pkg/ddc/base/operation.go`` ``reconcilePending``, ``pkg/controllers/v1alpha1/dataflow/
    operations.go``), so the DataLoad never caches a half-written output. A writer that writes
    no marker (:func:`fleetc.render.order.unmarked`) leaves the URL without a DataLoad, and
    :func:`data_warnings` says why.

    Where a Deployment on ``cluster`` serves the data (``served``: its first input), once that
    DataLoad is Complete a second DataProcess (``runAfter`` it) writes the loaded marker beside
    the data (:func:`loaded_process`), which the Deployment waits for (:func:`cache_ready_wait`):
    Triton then loads its models from a cache that lists them."""
    writers = ctx.writers.get(url, ())
    if not writers:
        return [data_load(policy, namespace, url, data_load_name(url))]
    if any(unmarked(ctx, writer) is not None for writer in writers):
        return []
    gate, load = _waiting_names(ctx, url, writers)
    found = [data_process(ctx, policy, namespace, url, writers, gate, load),
             data_load(policy, namespace, url, load, after=gate)]
    return [*found, loaded_process(ctx, policy, namespace, url, writers, cluster)] if served else found


def loaded_process(ctx: Context, policy: DataPolicy, namespace: str, url: str, writers: tuple[Stage, ...],
                   cluster: str) -> Obj:
    """The DataProcess that runs after the DataLoad of ``url`` (``runAfter``: Fluid starts it
    once that DataLoad is Complete, ``pkg/controllers/v1alpha1/dataflow/operations.go``) and
    writes the loaded marker ``_LOADED.<cluster>.<namespace>`` beside the data, holding the
    writers' runs (:func:`fleetc.render.order.loaded_container`)."""
    gate, load = _waiting_names(ctx, url, writers)
    run = _writers_run(ctx, writers)
    container, volumes = loaded_container(ctx, namespace, url, loaded_marker(cluster, namespace), run,
                                          f"DataLoad {namespace}/{load} of {url}")
    pod: Obj = {"restartPolicy": "Never", "containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    return {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "DataProcess",
        "metadata": metadata(f"{gate[:-len('-wait')]}-ready", namespace, _source(policy, "spec.prefetching")),
        "spec": {
            "dataset": {"name": dataset_name(url), "namespace": namespace, "mountPath": ""},
            "runAfter": {"kind": "DataLoad", "name": load},
            "processor": {"job": {"podSpec": pod}},
        },
    }


def cache_ready_wait(ctx: Context, cluster: str, stage: Stage, mounted: DataMounts) -> tuple[Obj, list[Obj]] | None:
    """The init container of a Deployment serving its first input from the cache, when stages
    of the compile write that input and a DataLoad refreshes it: it waits for that DataLoad's
    loaded marker (:func:`loaded_process`), so the server starts on a cache that lists the new
    files; None otherwise."""
    policy = ctx.data_policy
    if policy is None or not policy.prefetching_enabled or not stage.inputs:
        return None
    if stage.inputs[0].name not in mounted.paths:
        return None
    url = ctx.input_url(stage, stage.inputs[0])
    writers = ctx.writers.get(url, ())
    if not is_cached(ctx, url) or not writers or any(unmarked(ctx, writer) is not None for writer in writers):
        return None  # an nfs:// input is mounted, not cached: no DataLoad refreshes it
    _, load = _waiting_names(ctx, url, writers)
    return loaded_wait(ctx, stage.namespace, url, loaded_marker(cluster, stage.namespace), _writers_run(ctx, writers),
                       f"DataLoad {stage.namespace}/{load} of {url}")


def data_process(ctx: Context, policy: DataPolicy, namespace: str, url: str, writers: tuple[Stage, ...],
                 name: str, load: str) -> Obj:
    """A Fluid DataProcess that completes once every writer of ``url`` completed: a Job
    processor (fluid ``api/v1alpha1/dataprocess_types.go``) whose init containers wait for the
    writers' markers (:func:`fleetc.render.order.waits`: the Secrets named for them by
    reference, the NFS folders read-only), then one container that says so. ``mountPath: ""``
    mounts no Dataset (fluid ``pkg/dataprocess/generate_values.go`` adds the Dataset's volume
    only for a non-empty one): the pod reads markers, not data. Its Job retries a failed pod
    three times (``charts/fluid-dataprocess/common/templates/job.yaml``, ``backoffLimit: 3``),
    so a writer that never completes fails it after four timeouts."""
    containers, volumes = waits(ctx, namespace, list(writers))
    done = (f"fleetc: {', '.join(writer.key for writer in writers)} completed; "
            f"DataLoad {load} may cache {url}")
    # echo, not a shell: the message holds a policy's URL
    ready: Obj = {"name": "fleetc-ready", "image": MARKER_IMAGE, "command": ["echo", literal(done)],
                  "resources": marker_resources()}
    pod: Obj = {"restartPolicy": "Never", "initContainers": containers, "containers": [ready]}
    if volumes:
        pod["volumes"] = volumes
    return {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "DataProcess",
        "metadata": metadata(name, namespace, _source(policy, "spec.prefetching")),
        "spec": {
            # Fluid fails a DataProcess whose dataset namespace is not its own (dataprocess/implement.go)
            "dataset": {"name": dataset_name(url), "namespace": namespace, "mountPath": ""},
            "processor": {"job": {"podSpec": pod}},
        },
    }


def data_load(policy: DataPolicy, namespace: str, url: str, name: str, after: str | None = None) -> Obj:
    """The DataLoad of ``url``'s Dataset, loading its metadata afresh (Fluid's loader lists the
    data with Alluxio's metadata sync interval 0, ``charts/fluid-dataloader/alluxio/templates/
    configmap.yaml``), so it sees what a writer added after the Dataset was mounted; with
    ``after``, only once that DataProcess is Complete."""
    spec: Obj = {
        "dataset": {"name": dataset_name(url), "namespace": namespace},
        "loadMetadata": True,
        "target": [{"path": "/", "replicas": 1}],
    }
    if after is not None:
        spec["runAfter"] = {"kind": "DataProcess", "name": after}
    return {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "DataLoad",
        "metadata": metadata(name, namespace, _source(policy, "spec.prefetching")),
        "spec": spec,
    }


def fluid_objects(ctx: Context, work: Work, fenced: frozenset[str] = frozenset(), cluster: str = "") -> list[Obj]:
    """Dataset, AlluxioRuntime and (prefetching) DataLoad, and the DataProcess it waits for,
    per cached URL of one cluster; ``fenced``: the namespaces whose egress a NetworkPolicy limits."""
    policy = ctx.data_policy
    if policy is None or not policy.caching_enabled:
        return []
    objects: list[Obj] = []
    cached = cached_urls(ctx, work)
    served = {(stage.namespace, ctx.input_url(stage, stage.inputs[0])) for stage, _ in work
              if stage.serving is not None and stage.inputs}
    for namespace, url in cached:
        objects += [dataset(policy, namespace, url, ctx.storage_secrets.get((namespace, url))),
                    alluxio_runtime(policy, namespace, url, len(cached), namespace in fenced)]
        if policy.prefetching_enabled:
            objects += prefetch(ctx, policy, namespace, url, cluster, (namespace, url) in served)
    return objects


def data_warnings(ctx: Context, work_by_cluster: dict[str, Work]) -> list[Diagnostic]:
    """The data policy's fields with no Fluid form, inputs whose URL Fluid cannot cache, and
    Secrets named for a cache that is off."""
    policy = ctx.data_policy
    if policy is None or not policy.caching_enabled:
        return _unused_secrets(ctx)
    found = _cache_size(ctx, policy, work_by_cluster)
    if policy.prefetching_enabled and policy.prefetch_lookahead > 0:
        found.append(warning(policy.source, "spec.prefetching.lookahead",
                             "has no Fluid form (a DataLoad warms the whole dataset once); not rendered"))
    cached = {url for work in work_by_cluster.values() for _, url in cached_urls(ctx, work)}
    unwaited = sorted({(url, writer.key, why) for url in cached if policy.prefetching_enabled
                       for writer in ctx.writers.get(url, ()) if (why := unmarked(ctx, writer)) is not None})
    for url, key, why in unwaited:
        found.append(warning(policy.source, "spec.prefetching.enabled",
                             f"no DataLoad for {url}: a DataLoad of it waits for the completion marker of "
                             f"every stage that writes it, and stage '{key}' {why}"))
    if policy.prefetching_enabled:
        found += _keyless_waits(ctx, policy, work_by_cluster)
    uncached: dict[tuple[str, str, int], str] = {}
    for work in work_by_cluster.values():
        for stage, _ in work:
            for index, url in ctx.input_urls(stage):
                if url_scheme(url) not in CACHEABLE_SCHEMES:
                    source = stage.source
                    uncached[(source.path, f"{source.field}.inputs[{index}]", source.document)] = url
    for (path, field, document), url in sorted(uncached.items()):
        kind = f"{url_scheme(url)}://" if url_scheme(url) else "a URL without a scheme"
        found.append(warning(Source(path, field, document), field,
                             f"{kind} cannot be cached by Fluid/Alluxio; the stage reads it directly"))
    return found


def _cache_size(ctx: Context, policy: DataPolicy, work_by_cluster: dict[str, Work]) -> list[Diagnostic]:
    """Where AlluxioRuntimes are rendered: their size reaches no runtime that exists already."""
    if not any(cached_urls(ctx, work) for work in work_by_cluster.values()):
        return []
    return [warning(policy.source, "spec.caching.size",
                    "reaches only AlluxioRuntimes created after it: Fluid never resizes an existing one "
                    "(fluid v1.0.8 pkg/ddc/alluxio/sync_runtime.go: AlluxioEngine.SyncRuntime is a no-op), "
                    "so after a change of size delete each AlluxioRuntime (its cache is rebuilt) for the new "
                    "size to take effect")]


def _keyless_waits(ctx: Context, policy: DataPolicy, work_by_cluster: dict[str, Work]) -> list[Diagnostic]:
    """DataProcesses that wait, in another namespace than the writer's, for a marker on a store
    whose endpoint only a Secret names, with no Secret named for it there: they could never
    read it, so their DataLoads would never run (in the writer's own namespace the writer's
    marker is reported, :func:`fleetc.render.order.order_warnings`)."""
    keyless = set()
    for work in work_by_cluster.values():
        for namespace, url in cached_urls(ctx, work):
            writers = ctx.writers.get(url, ())
            if any(unmarked(ctx, writer) is not None for writer in writers):
                continue  # no DataLoad, said above
            keyless |= {(namespace, writer.outputs[0].url) for writer in writers if writer.namespace != namespace
                        and url_scheme(writer.outputs[0].url) in ENDPOINT_IN_SECRET
                        and ctx.storage_secrets.get((namespace, writer.outputs[0].url)) is None}
    return [warning(policy.source, "spec.prefetching.enabled",
                    f"the DataLoad in namespace {namespace} waits for the completion marker at {marker}, "
                    f"and no Secret is named for it in {namespace}: {url_scheme(marker)}:// needs the endpoint "
                    f"and keys one holds; name a Secret (secretName) on an input that reads it there")
            for namespace, marker in sorted(keyless)]


def _unused_secrets(ctx: Context) -> list[Diagnostic]:
    """Inputs naming a Secret while nothing mounts through Fluid (no data policy, or caching
    off) and nothing else reaches their URL with it: neither a completion marker there
    (:mod:`fleetc.render.order`) nor Triton reading its ``s3://`` model repository itself
    (:func:`fleetc.render.workloads.triton_credentials`)."""
    found = []
    for stage in ctx.model.stages:
        for index, item in enumerate(stage.inputs):
            if item.secret_name is None:
                continue
            url = ctx.input_url(stage, item)
            marker = any(writer.outputs[0].url == url and unmarked(ctx, writer) is None
                         for writer in ctx.writers.get(url, ()))
            triton = (index == 0 and url_scheme(url) == "s3" and stage.serving is not None
                      and stage.serving.triton)
            if not marker and not triton:
                found.append(warning(replace(stage.source, field=f"{stage.source.field}.inputs[{index}]"),
                                     f"{stage.source.field}.inputs[{index}].secretName",
                                     "is used by Fluid cache mounts, and caching is off (DataOptimizationPolicy "
                                     "spec.caching.enabled); not rendered"))
    return found
