"""Render a placement as plain Kubernetes manifests: one folder per cluster, for Argo CD / Flux.

:func:`render` is a pure function of the model and the placement: the same input gives the same
bytes (everything is sorted; no timestamps, versions or environment are read). It returns
:class:`Rendered`: the files, keyed by relative POSIX path, and the warnings (policy settings
that have no Kubernetes form, named by file and field, never silently dropped).

* ``placement.yaml``: fleetc's own report of the placement (not a Kubernetes object);
* ``clusters/<cluster>/<kind>-<name>.yaml`` for cluster-scoped objects and
  ``clusters/<cluster>/<kind>-<namespace>-<name>.yaml`` for namespaced ones (kind in lower case),
  one object per file, for every cluster that runs at least one assignment, and
  ``clusters/<cluster>/kustomization.yaml`` listing them, sorted;
* ``argocd/``, ``flux/<cluster>/`` and ``kurator/``: the GitOps entrypoints the Fleet chose
  (:mod:`.gitops`, :mod:`.kurator`);
* ``.fleetc/render``: what each cluster's layers were rendered from and hold (:mod:`.record`),
  so a compile given ``reuse`` keeps the folders no change reaches.

Per cluster (one module per concern):

* :mod:`.cluster`: a Namespace per pipeline namespace, a Volcano Queue ``fleetc-<class>`` per
  workload class, and under ``dataSovereignty`` jurisdiction labels and an egress NetworkPolicy;
* :mod:`.kueue`: on a cluster that runs Kueue (Fleet ``batchScheduler: kueue``), ResourceFlavors,
  a ClusterQueue and LocalQueues instead of Volcano Queues, and a ``batch/v1`` Job per gang stage
  instead of a Volcano Job;
* :mod:`.workloads`: a Volcano Job per gang stage (the whole gang, with the governing platform's
  PriorityClass); per Deployment stage this cluster's share of the replicas with a Service, an
  HPA and a PodDisruptionBudget;
* :mod:`.gpu`: the NVIDIA device plugin's config (exclusive vs time-sliced nodes);
* :mod:`.data`: Fluid Dataset, AlluxioRuntime and DataLoad (and the DataProcess it waits for)
  for the data stages read.

Every object carries ``app.kubernetes.io/managed-by: fleetc`` and, where one policy is its
source, ``fleetc.dev/source: <policy file>#<field path>``. Secrets are never rendered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from fleetc.delivery import INFRA, WORKLOADS
from fleetc.errors import Diagnostic
from fleetc.infra.collector import gc_paused
from fleetc.infra.forkmap import fork_map
from fleetc.model import GPU_PRODUCT_LABELS, KUEUE, Cluster, FleetModel, Placement, Platform, Stage
from fleetc.render import yamlout
from fleetc.render.cluster import (
    egress_policy,
    identity_warnings,
    namespace,
    queue,
    security_warnings,
    sovereign_platform,
    team_queues,
)
from fleetc.render.common import Obj, cpu_quantity, folder_files, memory_quantity, object_name, stage_labels
from fleetc.render.context import Context, Work, placements, team_guarantees, work_by_cluster
from fleetc.render.data import FLUID_OPERATIONS, data_warnings, fluid_objects
from fleetc.render.gitops import (
    INFRA_WAVE,
    WORKLOADS_WAVE,
    cluster_kustomization,
    gitops_files,
    gitops_warnings,
    with_sync_wave,
)
from fleetc.render.gpu import cluster_gpu_warnings, device_plugin_config, gpu_warnings
from fleetc.render.kueue import kueue_job, kueue_queues
from fleetc.render.kurator import kurator_files
from fleetc.render.order import order_warnings
from fleetc.render.record import (
    RENDER_RECORD,
    Folder,
    Kept,
    Reusable,
    files_digest,
    folder_inputs,
    layer_prefixes,
    record_text,
)
from fleetc.render.release import GATE, held, held_deployment, release_infra, serving_held, ungate_job
from fleetc.render.report import placement_report
from fleetc.render.workloads import (
    PRIORITY_VALUES,
    autoscaler,
    deployment,
    disruption_budget,
    priority_class,
    service,
    stage_warnings,
    training_priority,
    volcano_job,
)
from fleetc.render.yamlout import dump

__all__ = [
    "GPU_PRODUCT_LABELS",
    "PRIORITY_VALUES",
    "Rendered",
    "cpu_quantity",
    "memory_quantity",
    "object_name",
    "placement_report",
    "render",
    "stage_labels",
]


@dataclass(frozen=True)
class Rendered:
    files: Mapping[str, str]  # relative POSIX path -> file text, sorted by path
    warnings: tuple[Diagnostic, ...]  # severity "warning", sorted, no duplicates
    #: Files of the output folder kept as they are instead of rendered (``reuse``); None when
    #: everything was rendered.
    kept: Kept | None = None


@dataclass(frozen=True)
class _Part:
    """One part of the output: files, warnings, and the record of the cluster folders it rendered."""

    files: Mapping[str, str]
    warnings: tuple[Diagnostic, ...] = ()
    folders: Mapping[str, Folder] = field(default_factory=dict)


# --------------------------------------------------------------------------- entry point
def render(model: FleetModel, placement: Placement,
           locate: Callable[[tuple[Diagnostic, ...]], tuple[Diagnostic, ...]] | None = None,
           reuse: Reusable | None = None) -> Rendered:
    """Every output file and every warning about settings that could not be rendered.

    ``locate`` (the compiler's: each warning's line and column in its policy file) is applied
    to the warnings where they are made, on another core than some clusters' files when the
    fleet is large enough to render on every core. ``reuse``: the cluster folders of the output
    folder that hold exactly their recorded files (:mod:`.record`); those whose inputs are
    unchanged are kept (``Rendered.kept``), not rendered."""
    # what rendering makes is handed on and dropped; every file is written by one YAML emitter
    with gc_paused(freeze=False), yamlout.caching():
        return _render(model, placement, locate or (lambda found: found), reuse or Reusable())


def _render(model: FleetModel, placement: Placement,
            locate: Callable[[tuple[Diagnostic, ...]], tuple[Diagnostic, ...]], reuse: Reusable) -> Rendered:
    """The output in independent parts (placement.yaml, each cluster's folder, the GitOps
    entrypoints, the warnings, located), made on every core once the fleet is large
    (:func:`fork_map`: the same result as the plain loop, in the same order). A cluster folder
    of ``reuse`` whose inputs digest is the recorded one is kept, not made."""
    work = work_by_cluster(model, placements(model, placement))
    ctx = replace(Context.of(model), guarantees=team_guarantees(model, work))
    inputs = folder_inputs(ctx, work)
    kept = {name: folder for name, folder in reuse.folders.items() if inputs.get(name) == folder.inputs}
    rendering = [c for c in model.clusters if c.name not in kept]
    whole = _STAGE_BYTES * len(model.stages) // 4  # what the report costs, about; the warnings, located, twice
    parts: list[tuple[Callable[[], _Part], int]] = [
        (lambda: _Part({"placement.yaml": dump(placement_report(model, placement))}), whole),
        (lambda: _Part({}, locate(_warnings(ctx, work))), 2 * whole),
        (lambda: _Part(_entry_points(ctx)
                       | {path: text for c in kept for path, text in cluster_kustomization(c).items()}), 0),
    ]
    for cluster in rendering:
        placed = work.get(cluster.name, [])
        parts.append((functools.partial(_cluster_part, ctx, cluster, placed, inputs[cluster.name]),
                      _CLUSTER_BYTES + _STAGE_BYTES * len(placed)))
    files: dict[str, str] = {}
    warnings: list[Diagnostic] = []
    folders = dict(kept)
    for part in fork_map(lambda make: make(), [make for make, _ in parts], [size for _, size in parts]):
        files |= part.files
        warnings += part.warnings
        folders |= part.folders
    files[RENDER_RECORD] = record_text(folders)
    return Rendered(dict(sorted(files.items())), tuple(sorted(set(warnings))),
                    Kept(tuple(sorted(kept)), reuse) if kept else None)


def _entry_points(ctx: Context) -> dict[str, str]:
    """The GitOps entry points the Fleet chose (``spec.gitops.entryPoints``)."""
    model, source = ctx.model, ctx.fleet_source("spec.gitops")
    chosen, clusters = model.delivery.entry_points, [c.name for c in model.clusters]
    files = gitops_files(model.gitops, source, clusters, chosen)
    if "kurator" in chosen:
        files |= kurator_files(model.gitops, source, model.name, model.namespace, clusters, model.delivery)
    return files


#: About what one cluster's folder and one stage placed there add to the output, in bytes: the
#: sizes :func:`fork_map` balances the parts by, and weighs against forking at all (it renders
#: a fleet of ~200 stages or more, ~1 MB, on every core).
_CLUSTER_BYTES = 2_000
_STAGE_BYTES = 5_000


def _cluster_part(ctx: Context, cluster: Cluster, work: Work, inputs: str) -> _Part:
    """A cluster's folder, and its record: the digest of its layers' files."""
    files = _cluster_files(ctx, cluster, work)
    infra, workloads = layer_prefixes(cluster.name)
    layers = files_digest((path, text.encode()) for path, text in sorted(files.items())
                          if path.startswith((infra, workloads)))
    return _Part(files, (), {cluster.name: Folder(inputs, layers)})


def _warnings(ctx: Context, work: dict[str, Work]) -> tuple[Diagnostic, ...]:
    model = ctx.model
    jurisdiction = {c.name: c.jurisdiction for c in model.clusters}
    found = [w for p in model.platforms
             for w in security_warnings(p, {jurisdiction[name] for name, placed in work.items()
                                            for stage, _ in placed if stage.pipeline in p.pipelines})]
    found += [w for p in model.platforms for w in identity_warnings(ctx, p, work)]
    if model.gpu_policy is not None:
        found += gpu_warnings(model.gpu_policy)
    found += [w for c in model.clusters if c.name in work for w in cluster_gpu_warnings(c, ctx.gpu_slots)]
    found += data_warnings(ctx, work)
    found += [w for stages in work.values() for w in stage_warnings(ctx, stages) + order_warnings(ctx, stages)]
    if work:
        found += gitops_warnings(model.gitops, ctx.fleet_source("spec.gitops"), model.delivery.entry_points)
    return tuple(sorted(set(found)))


# --------------------------------------------------------------------------- per cluster
def _cluster_files(ctx: Context, cluster: Cluster, work: Work) -> dict[str, str]:
    """``clusters/<cluster>/``: ``infra/`` (sync wave 0) and ``workloads/`` (wave 1), each with
    its kustomization, and a kustomization over both and the user's ``local/<cluster>/``
    (:mod:`.gitops` says why). Every cluster of the Fleet has one, also when it runs nothing:
    its kustomizations then list nothing (or only what is left), so Argo CD and Flux prune
    what the cluster ran before."""
    folder = f"clusters/{cluster.name}"
    infra, workloads = _cluster_objects(ctx, cluster, work)
    files = folder_files(f"{folder}/{INFRA}", with_sync_wave(infra, INFRA_WAVE))
    files |= folder_files(f"{folder}/{WORKLOADS}", with_sync_wave(workloads, WORKLOADS_WAVE))
    files |= cluster_kustomization(cluster.name)
    return files


def _cluster_objects(ctx: Context, cluster: Cluster, work: Work) -> tuple[list[Obj], list[Obj]]:
    """One cluster's objects in two layers: what workloads need to exist first (Namespaces,
    NetworkPolicies, Volcano Queues or Kueue's flavors and queues and what its release Jobs
    need, PriorityClasses, the device plugin's config, Fluid Datasets and runtimes), then the
    workloads (Volcano Jobs, or Kueue's batch Jobs; Deployments with their Services, HPAs and
    PDBs; Fluid DataLoads and DataProcesses)."""
    names = sorted({stage.namespace for stage, _ in work})
    infra = [namespace(ctx, cluster, name) for name in names]
    fenced = _fences(ctx, cluster, names)
    infra += [policy for policy, _ in fenced.values()]
    kueue = cluster.batch_scheduler == KUEUE
    infra += _queues(ctx, cluster, work, kueue)
    fluid = fluid_objects(ctx, work, frozenset(fenced), cluster.name)
    workloads = [obj for obj in fluid if obj["kind"] in FLUID_OPERATIONS]
    for stage, assignment in work:
        if stage.is_gang:
            workloads += kueue_job(ctx, cluster, stage) if kueue else _volcano_objects(ctx, cluster, stage)
        else:
            replicas = assignment.replicas
            held_here = serving_held(ctx, cluster, stage)
            workloads += held_deployment(ctx, cluster, stage) if held_here else [deployment(ctx, cluster, stage)]
            workloads += [service(stage), autoscaler(stage, replicas), disruption_budget(stage, replicas)]
    infra += release_infra(ctx, cluster, work, {name: platform for name, (_, platform) in fenced.items()},
                           workloads)
    infra += _priority_classes(ctx, work)
    if ctx.model.gpu_policy is not None:  # its Namespace once, also when a pipeline's too
        infra += [obj for obj in device_plugin_config(ctx.model.gpu_policy, cluster, ctx.gpu_slots)
                  if obj["kind"] != "Namespace" or obj["metadata"]["name"] not in names]
    infra += [obj for obj in fluid if obj["kind"] not in FLUID_OPERATIONS]
    return infra, workloads


def _volcano_objects(ctx: Context, cluster: Cluster, stage: Stage) -> list[Obj]:
    """A gang stage's Volcano Job, and the release Job of a held one (:mod:`.release`)."""
    if not held(ctx, stage):
        return [volcano_job(ctx, cluster, stage)]
    job = volcano_job(ctx, cluster, stage, GATE)
    return [job, ungate_job(ctx, stage, job)]


def _fences(ctx: Context, cluster: Cluster, names: list[str]) -> dict[str, tuple[Obj, Platform]]:
    """Namespace -> its egress NetworkPolicy on ``cluster`` and the sovereign platform it
    comes from, for the namespaces ``names`` whose egress is fenced."""
    found = {}
    for name in names:
        platform = sovereign_platform(ctx, name)
        policy = egress_policy(cluster, name, platform) if platform is not None else None
        if platform is not None and policy is not None:
            found[name] = (policy, platform)
    return found


def _queues(ctx: Context, cluster: Cluster, work: Work, kueue: bool) -> list[Obj]:
    """Kueue's flavors and queues on a Kueue cluster; else a Volcano Queue per workload class
    and one per team."""
    if kueue:
        return kueue_queues(ctx, cluster, work)
    return ([queue(ctx, cluster, c) for c in sorted({stage.workload_class for stage, _ in work})]
            + team_queues(ctx, cluster, work))


def _priority_classes(ctx: Context, work: Work) -> list[Obj]:
    """One PriorityClass per training priority the gang stages on this cluster name."""
    levels: dict[str, str] = {}  # level -> first pipeline asking for it
    for stage, _ in work:
        level = training_priority(ctx, stage) if stage.is_gang else None
        if level is not None:
            levels.setdefault(level, stage.pipeline)
    return [priority_class(ctx, level, pipeline) for level, pipeline in sorted(levels.items())]
