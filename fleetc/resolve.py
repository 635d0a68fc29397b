"""Model stage: valid policies -> the immutable :class:`~fleetc.model.FleetModel`.

This is where every documented default lives, derived from what the seed's examples do say
(``gpu-count``, ``gpu-type``, ``low-power``, ``low-latency``, ``network-tier``, ``region``).
The functions are pure: the same policies give the same model, whatever their file order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import PurePath

from fleetc import model as m
from fleetc import nodefit
from fleetc.errors import Diagnostic, InternalError, PolicyError, UsageError, did_you_mean
from fleetc.infra.collector import gc_paused
from fleetc.policy import kinds as p
from fleetc.policy.policyset import (
    Parsed,
    PolicySet,
    governed,
    pipeline_namespace,
    sovereign_pipelines,
    stage_edges,
    team_pipelines,
)
from fleetc.policy.quantity import GIB, cpu_millis, memory_bytes, parse_percentage
from fleetc.policy.regions import table_jurisdiction

GPU_HOUR_PRICE = {"a100": 3.0, "h100": 5.0, "l4": 0.8, "a10": 1.0, "v100": 2.0, "t4": 0.5}
DEFAULT_GPU_HOUR_PRICE = 2.0
DEFAULT_CPU_HOUR_PRICE = 0.04
DEFAULT_MEMORY_GIB_HOUR_PRICE = 0.005

DEFAULT_NAMESPACE = "default"


#: The default serving image's server, as Triton's own chart runs it
#: (triton-inference-server/server deploy/k8s-onprem/templates/deployment.yaml): HTTP on 8000,
#: gRPC on 8001, metrics on 8002, ready at /v2/health/ready, live at /v2/health/live.
TRITON = m.Serving(port=8000, readiness_path="/v2/health/ready", liveness_path="/v2/health/live",
                   extra_ports=(("grpc", 8001), ("metrics", 8002)), triton=True)
#: The key of the taint fleetc gives GPU clusters (``gpu-type=<type>:NoSchedule``).
GPU_TAINT_KEY = "gpu-type"


def resolve(policies: PolicySet, where: str, drained: Sequence[str] = (),
            roots: Sequence[str] = (), workdir: str = ".") -> m.FleetModel:
    """Build the model of one compile.

    ``where`` names the input in the no-Fleet error; ``drained`` clusters are cordoned for this
    compile only (``--drain``), as if they were lost; ``roots`` are the policy paths fleetc was
    given (relative to ``workdir`` unless absolute): sources name policy files relative to them
    (see :func:`provenance_names`).
    """
    files = sorted({parsed.doc.path for kind in fields(policies) for parsed in getattr(policies, kind.name)})
    names = provenance_names(files, roots or files, workdir)
    with gc_paused():  # a large fleet's model is 20,000 stages that live as long as the compile
        return _renamed(_resolve(policies, where, drained, names), names)


def provenance_names(files: Sequence[str], roots: Sequence[str], workdir: str = ".") -> dict[str, str]:
    """Each policy file (as messages name it, relative to ``workdir`` unless absolute) -> its
    name relative to the policy root: the folder given, or the folder of a file given directly;
    with several roots, their common folder. Independent of the working folder, so the same
    policies give the same bytes wherever fleetc runs."""
    located = {f: os.path.normpath(os.path.join(workdir, f)) for f in files}
    named_files = set(located.values())
    bases = [os.path.dirname(r) if r in named_files or os.path.isfile(r) else r
             for r in (os.path.normpath(os.path.join(workdir, root)) for root in roots)]
    base = os.path.commonpath(bases) if bases else ""
    return {f: (PurePath(os.path.relpath(a, base)).as_posix() if base and _within(a, base) else f)
            for f, a in located.items()}


def _within(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([folder, path]) == folder
    except ValueError:  # one absolute, one relative
        return False


def _renamed(model: m.FleetModel, names: dict[str, str]) -> m.FleetModel:
    """``model`` with the sources of its policies (its clusters and stages are built named)
    naming their file by ``names``."""
    def named(source: m.Source) -> m.Source:
        return replace(source, path=names.get(source.path, source.path))

    gpu = model.gpu_policy
    return replace(
        model,
        platforms=tuple(replace(p, source=named(p.source)) for p in model.platforms),
        gpu_policy=replace(gpu, source=named(gpu.source)) if gpu is not None else None,
        data_policies=tuple(replace(d, source=named(d.source)) for d in model.data_policies),
        teams=tuple(replace(t, source=named(t.source)) for t in model.teams),
        budgets=tuple(replace(b, source=named(b.source)) for b in model.budgets),
        policy_files=tuple(sorted((name, path) for path, name in names.items())),
    )


def _resolve(policies: PolicySet, where: str, drained: Sequence[str], names: dict[str, str]) -> m.FleetModel:
    if not policies.fleets:
        raise PolicyError([Diagnostic(where, 0, 0, "", "no Fleet found: fleetc needs one Fleet "
                                      "to place pipelines on",
                                      hint="policies are valid only together with their Fleet: "
                                           "give its file too, or the folder that holds it")])
    fleet = policies.fleets[0]
    spec = fleet.obj.spec
    _check_drained(fleet, drained)
    fleet_tolerations = tuple(_toleration(t) for t in
                              (spec.placement.clusterTolerations or [] if spec.placement else []))
    clusters = tuple(sorted((_cluster(fleet, i, drained, names) for i in range(len(spec.clusters))),
                            key=lambda c: c.name))
    gpu_taints = _derived_gpu_taints(fleet)
    throughput = gpu_throughput(spec)
    stages = _with_jurisdictions(policies, clusters, tuple(
        _fitted(_with_gpu_tolerations(stage, gpu_taints), throughput)
        for pipeline in sorted(policies.pipelines, key=lambda pl: pl.name)
        for stage in _stages(pipeline, fleet_tolerations, names.get(pipeline.doc.path, pipeline.doc.path))
    ))
    return m.FleetModel(
        name=fleet.name,
        namespace=fleet.obj.metadata.namespace or DEFAULT_NAMESPACE,
        clusters=clusters,
        stages=stages,
        score_weights=_score_weights(spec.scoreWeights),
        class_weights=_class_weights(spec.aigcConfig),
        platforms=tuple(sorted((_platform(pf, policies) for pf in policies.platforms),
                               key=lambda x: x.name)),
        gpu_policy=_gpu_policy(policies.gpu_policies[0]) if policies.gpu_policies else None,
        data_policies=tuple(_data_policy(d) for d in policies.data_policies),
        move_cost=_or(spec.placement.moveCost if spec.placement else None, 0.05),
        gitops=_gitops(spec.gitops),
        delivery=_delivery(spec),
        cost_increase_limit=_or(spec.review.maxCostIncreasePercent if spec.review else None,
                                  100 * m.DEFAULT_COST_INCREASE) / 100,
        teams=tuple(team for pf in sorted(policies.platforms, key=lambda x: x.name)
                    for team in _teams(pf, policies)),
        budgets=_budgets(policies),
    )


def _check_drained(fleet: Parsed[p.Fleet], drained: Sequence[str]) -> None:
    """Refuses (:class:`UsageError`) a ``--drain`` of a cluster the Fleet does not have."""
    clusters = fleet.obj.spec.clusters
    unknown = sorted(set(drained) - {c.name for c in clusters})
    if unknown:
        known = [c.name for c in clusters]
        hint = did_you_mean(unknown[0], known) or f"its clusters: {', '.join(known)}"
        raise UsageError(f"--drain {unknown[0]}: no cluster of that name in Fleet "
                         f"'{fleet.name}' ({fleet.doc.path}); {hint}")


def _budgets(policies: PolicySet) -> tuple[m.PipelineBudget, ...]:
    """The cost cap (``maxHourlyCost``) of each pipeline that has one, by pipeline name."""
    return tuple(m.PipelineBudget(pl.name, float(pl.obj.spec.maxHourlyCost),
                                  m.Source(pl.doc.path, "spec.maxHourlyCost", pl.doc.index))
                 for pl in sorted(policies.pipelines, key=lambda pl: pl.name)
                 if pl.obj.spec.maxHourlyCost is not None)


def _teams(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> list[m.Team]:
    """The platform's teams, by name, each with the governed pipelines it selects."""
    mine = set(governed(platform, policies))
    pipelines = [pl for pl in policies.pipelines if pl.name in mine]
    teams = [
        m.Team(
            name=team.name,
            platform=platform.name,
            pipelines=tuple(sorted(team_pipelines(team, pipelines))),
            gpu_quota=tuple(sorted((k.lower(), v) for k, v in (team.gpuQuota or {}).items())),
            guaranteed=tuple(sorted((k.lower(), v) for k, v in (team.guaranteed or {}).items())),
            max_hourly_cost=team.maxHourlyCost,
            source=m.Source(platform.doc.path, f"spec.teams[{i}]", platform.doc.index),
        )
        for i, team in enumerate(platform.obj.spec.teams or [])
    ]
    return sorted(teams, key=lambda t: t.name)


def _fitted(stage: m.Stage, throughput: Mapping[str, float]) -> m.Stage:
    """A stage asking for throughput gets one :class:`~fleetc.model.GPUOption` per GPU type it
    may run on (node fit splits its replicas per cluster, :func:`fleetc.placement.rules.on_cluster`)."""
    if stage.throughput is not None:
        return _throughput_options(stage, throughput)
    return stage


def gpu_throughput(spec: p.FleetSpec) -> dict[str, float]:
    """The Fleet's ``gpuThroughput``, GPU types in lower case as the model has them."""
    return {t.lower(): float(v) for t, v in (spec.gpuThroughput or {}).items()}


def _throughput_options(stage: m.Stage, throughput: Mapping[str, float]) -> m.Stage:
    """The stage's GPU options, one per type it lists (else per type the Fleet states a
    throughput for, fastest first), with the first one's figures as its own."""
    wanted = stage.throughput or 0.0
    types = stage.gpu_types or tuple(sorted(throughput, key=lambda t: (-throughput[t], t)))
    options = []
    for gpu_type in (t for t in types if t in throughput):
        options.append(m.GPUOption(gpu_type, m.gpus_for_throughput(wanted, throughput[gpu_type])))
    if not options:  # validation refuses this; a model without options would drop the stage's GPUs
        raise InternalError(f"{stage.key}: asks for throughput, but none of its GPU types has one")
    first = options[0]
    return replace(stage, gpus=first.gpus, gpu_options=tuple(options))


def default_jurisdiction(region: str, provider: str | None = None) -> str:
    """The documented default: the jurisdiction the table of known regions gives the region
    (:mod:`fleetc.policy.regions`), else its first '-'-separated part (an edge site's name)."""
    return table_jurisdiction(region, provider) or region.split("-", 1)[0]


def region_jurisdiction(region: str, clusters: Sequence[m.Cluster],
                        regions: Mapping[str, str] | None = None) -> str:
    """The jurisdiction of data in ``region``: the Fleet's ``regionJurisdictions`` entry, else
    that of the fleet's clusters there (the first by name), else the default (the table of
    known regions, else the name's first part)."""
    if regions and region in regions:
        return regions[region]
    here = sorted(c.name for c in clusters if c.region == region)
    if here:
        return next(c.jurisdiction for c in clusters if c.name == here[0])
    return default_jurisdiction(region)


def _with_jurisdictions(policies: PolicySet, clusters: tuple[m.Cluster, ...],
                        stages: tuple[m.Stage, ...]) -> tuple[m.Stage, ...]:
    """Data sovereignty: a stage of a pipeline that a platform with ``dataSovereignty`` governs
    runs only in the jurisdiction of the data it reads, directly (``inputs[].location``) or
    through ``from:`` chains (the producing stage's data, transitively). Data of two
    jurisdictions in one stage can never be placed, so it is a policy error."""
    sovereign = sovereign_pipelines(policies)
    by_key = {s.key: s for s in stages}
    regions = policies.fleets[0].obj.spec.regionJurisdictions
    memo: dict[str, frozenset[tuple[str, str]]] = {}
    resolved, problems = [], []
    for stage in stages:
        if stage.pipeline not in sovereign:
            resolved.append(stage)
            continue
        where = {jurisdiction or region_jurisdiction(region, clusters, regions): region
                 for region, jurisdiction in sorted(_data_places(stage, by_key, memo), reverse=True)}
        if len(where) > 1:
            problems.append(_two_jurisdictions(policies, stage, where))
        resolved.append(replace(stage, jurisdiction=min(where)) if where else stage)
    if problems:
        raise PolicyError(problems)
    return tuple(resolved)


def _data_places(stage: m.Stage, by_key: dict[str, m.Stage],
                 memo: dict[str, frozenset[tuple[str, str]]]) -> frozenset[tuple[str, str]]:
    """(region, jurisdiction the policy names or '') of every piece of data ``stage`` reads,
    following ``from:`` to the producers (on an explicit stack: a chain of any length takes no
    recursion). Data with a named jurisdiction and no location is placed by its name alone
    (region '')."""
    def producers(reader: m.Stage) -> list[m.Stage]:
        found = (by_key.get(f"{reader.pipeline}/{i.from_stage}") for i in reader.inputs if i.from_stage)
        return [producer for producer in found if producer is not None]

    pending = [(stage, False)]
    while pending:
        current, expanded = pending.pop()
        if expanded:  # its producers are done
            places = {(i.location or "", i.jurisdiction or "") for i in current.inputs
                      if i.location or i.jurisdiction}
            for producer in producers(current):
                places |= memo[producer.key]
            memo[current.key] = frozenset(places)
        elif current.key not in memo:
            memo[current.key] = frozenset()  # a cycle (rejected by validation) ends here
            pending.append((current, True))
            pending.extend((producer, False) for producer in producers(current)
                           if producer.key not in memo)
    return memo[stage.key]


def _two_jurisdictions(policies: PolicySet, stage: m.Stage, where: dict[str, str]) -> Diagnostic:
    pipeline = next(pl for pl in policies.pipelines if pl.name == stage.pipeline)
    index = [s.name for s in pipeline.obj.spec.stages].index(stage.name)
    found = " and ".join(f"{j} ({where[j]})" if where[j] else j for j in sorted(where))
    return pipeline.doc.diagnostic(
        ("spec", "stages", index),
        f"data sovereignty: stage '{stage.name}' reads data of jurisdictions {found}, "
        "and may run in only one",
        hint="keep the data a stage reads (and the data its from: inputs were made of) "
             "in one jurisdiction, or turn security.dataSovereignty off")


def gpu_taint(gpu_type: str) -> m.Taint:
    """The taint fleetc gives a GPU cluster that states no ``taints`` of its own."""
    return m.Taint(GPU_TAINT_KEY, gpu_type, "NoSchedule")


def _derived_gpu_taints(fleet: Parsed[p.Fleet]) -> tuple[m.Taint, ...]:
    """The GPU taints fleetc derived (not those a cluster's ``taints`` states), one per type."""
    types = {_gpu_type(c.attributes or {}) for c in fleet.obj.spec.clusters if c.taints is None}
    return tuple(gpu_taint(t) for t in sorted(t for t in types if t))


def _with_gpu_tolerations(stage: m.Stage, gpu_taints: tuple[m.Taint, ...]) -> m.Stage:
    """What Kubernetes' ExtendedResourceToleration admission plugin does for device resources:
    a stage that asks for GPUs of type T tolerates the taint fleetc derives for T (of each type
    it lists as an alternative), and a stage that asks for any GPU every derived GPU taint.
    CPU-only stages get nothing here: they prefer clusters without GPUs, and where one runs on
    a GPU cluster its pods there tolerate the taint (:func:`fleetc.placement.rules.rendered_on`).
    Tolerations a stage already has
    that cover the taint are left as they are (no duplicates in the rendered pods)."""
    if stage.gpus <= 0:
        return stage
    wanted = [t for t in gpu_taints if stage.preference(t.value) is not None]
    added = tuple(m.Toleration(t.key, "Equal", t.value, t.effect) for t in wanted
                  if m.untolerated((t,), stage.tolerations))
    return replace(stage, tolerations=stage.tolerations + added) if added else stage


def _gpu_type(attributes: Mapping[str, object]) -> str | None:
    gpus = int(str(attributes.get("gpu-count", 0)))
    return str(attributes["gpu-type"]).lower() if gpus and "gpu-type" in attributes else None


def degraded_serving(model: m.FleetModel, placement: m.Placement) -> list[Diagnostic]:
    """A warning for every cluster of a platform's ``multiCluster`` set that is cordoned or
    drained: it drops out of the active-active set, and the platform's serving runs degraded on
    the clusters left (see :func:`fleetc.placement.rules.ha_clusters`); and one for every
    serving stage that runs there with fewer replicas than it asks for, because only those fit
    (:func:`fleetc.placement.rules.least_replicas`)."""
    clusters = {c.name: c for c in model.clusters}
    found = _short_serving(model, placement)
    for platform in model.platforms:
        if not platform.primary_cluster:
            continue
        members = (platform.primary_cluster, *platform.secondary_clusters)
        survivors = [n for n in members if n in clusters and not clusters[n].cordoned]
        rest = (f"it serves active-active on {', '.join(survivors)}" if survivors
                else "no cluster of its active-active set is left; its serving stages run where they fit")
        for index, name in enumerate(members):
            cluster = clusters.get(name)
            if cluster is None or not cluster.cordoned:
                continue
            field = ("spec.multiCluster.primaryCluster" if index == 0
                     else f"spec.multiCluster.secondaryClusters[{index - 1}]")
            state = "drained" if cluster.drained else "cordoned"
            found.append(Diagnostic(platform.source.path, 0, 0, field,
                                    f"serving of {platform.name} runs degraded: {name} is {state}; {rest}",
                                    severity="warning", document=platform.source.document))
    return found


def _short_serving(model: m.FleetModel, placement: m.Placement) -> list[Diagnostic]:
    platforms = {p.name: p for p in model.platforms}
    placed_of = {p.stage: p.assignments for p in placement.stages}
    found = []
    for stage in model.stages:
        assignments = placed_of.get(stage.key, ())
        placed = sum(a.replicas for a in assignments)
        degraded = m.degraded_platforms(model, stage)
        if not degraded or not 0 < placed < stage.replicas:
            continue
        platform = platforms[degraded[0]]
        where = ", ".join(f"{a.replicas} on {a.cluster}" for a in assignments)
        found.append(Diagnostic(platform.source.path, 0, 0, "spec.multiCluster",
                                f"serving of {platform.name} runs degraded: {stage.key} runs {placed} of its "
                                f"{stage.replicas} replicas ({where}), no cluster it may use has room for more",
                                severity="warning", document=platform.source.document))
    return found


def _gitops(spec: p.GitOps | None) -> m.GitOps:
    default = m.GitOps()
    if spec is None:
        return default
    return m.GitOps(repo_url=spec.repoURL or default.repo_url,
                    branch=spec.branch or default.branch, path=spec.path or default.path,
                    secret_name=spec.secretName)


def _delivery(spec: p.FleetSpec) -> m.Delivery:
    chosen = set(spec.gitops.entryPoints if spec.gitops and spec.gitops.entryPoints else m.DEFAULT_ENTRY_POINTS)
    return m.Delivery(tuple(e for e in m.ENTRY_POINTS if e in chosen),
                      tuple(sorted((c.name, c.kind) for c in spec.clusters if c.kind)))


def _flag(attributes: Mapping[str, object], key: str) -> bool:
    return str(attributes.get(key, "false")).lower() == "true"


def _cluster(fleet: Parsed[p.Fleet], index: int, drained: Sequence[str], names: dict[str, str]) -> m.Cluster:
    c = fleet.obj.spec.clusters[index]
    attributes = c.attributes or {}
    gpus = int(str(attributes.get("gpu-count", 0)))
    gpu_type = _gpu_type(attributes)
    low_power = _flag(attributes, "low-power")
    pricing = c.pricing or p.ClusterPricing()
    per_node, node_millis, node_memory = _node(attributes, gpus)
    cores, memory = _capacity(c.capacity or p.ClusterCapacity(), gpus // per_node if gpus else 1,
                              node_millis, node_memory, gpus, low_power)
    default_taints = (gpu_taint(gpu_type),) if gpu_type else ()
    return m.Cluster(
        name=c.name,
        provider=c.provider,
        region=c.region,
        jurisdiction=(c.jurisdiction or (fleet.obj.spec.regionJurisdictions or {}).get(c.region)
                      or default_jurisdiction(c.region, c.provider)),
        gpu_type=gpu_type,
        gpus=gpus,
        cpu_millis=cores,
        memory_bytes=memory,
        taints=(tuple(m.Taint(t.key, t.value or "", t.effect) for t in c.taints)
                if c.taints is not None else default_taints),
        gpu_hour_cost=_or(pricing.gpuHour,
                          GPU_HOUR_PRICE.get(gpu_type or "", DEFAULT_GPU_HOUR_PRICE)),
        cpu_hour_cost=_or(pricing.cpuHour, DEFAULT_CPU_HOUR_PRICE),
        memory_gib_hour_cost=_or(pricing.memoryGiBHour, DEFAULT_MEMORY_GIB_HOUR_PRICE),
        energy_efficiency=_or(c.energyEfficiency, 0.9 if low_power else 0.6),
        network_tier=str(attributes.get("network-tier", "standard")),
        low_latency=_flag(attributes, "low-latency"),
        edge=_flag(attributes, "edge-node"),
        utilization=_or(c.utilization, 0.0),
        source=m.Source(names.get(fleet.doc.path, fleet.doc.path), f"spec.clusters[{index}]", fleet.doc.index),
        cordoned=bool(c.cordoned) or c.name in drained,
        gpus_per_node=per_node,
        cpu_per_node=node_millis,
        memory_per_node=node_memory,
        drained=c.name in drained,
        gpu_product=_gpu_product(attributes, gpu_type),
        device_plugin_configured=_flag(attributes, "device-plugin-configured"),
        batch_scheduler=c.batchScheduler or m.VOLCANO,
        taints_derived=c.taints is None and bool(default_taints),
    )


def _node(attributes: Mapping[str, object], gpus: int) -> tuple[int, int | None, int | None]:
    """A cluster's node: its GPUs (stated, else :func:`fleetc.nodefit.default_gpus_per_node`),
    and its cores and memory where stated (None: an equal share of the cluster's)."""
    per_node_gpus = attributes.get("gpus-per-node")
    per_node = int(str(per_node_gpus)) if per_node_gpus is not None else nodefit.default_gpus_per_node(gpus)
    node_millis = cpu_millis(attributes["cpu-per-node"]) if "cpu-per-node" in attributes else None
    node_memory = memory_bytes(attributes["memory-per-node"]) if "memory-per-node" in attributes else None
    return per_node, node_millis, node_memory


def _capacity(capacity: p.ClusterCapacity, nodes: int, node_millis: int | None, node_memory: int | None,
              gpus: int, low_power: bool) -> tuple[int, int]:
    """A cluster's cores (millis) and memory: stated, else its nodes' (``nodes``: a cluster
    without GPUs is one node, unless it says more), else what its GPUs bring by default."""
    default_millis = (nodes * node_millis if node_millis is not None
                      else 1000 * (m.CORES_PER_GPU * gpus if gpus else (16 if low_power else 64)))
    default_memory = (nodes * node_memory if node_memory is not None
                      else m.MEMORY_PER_GPU * gpus if gpus else (64 if low_power else 256) * GIB)
    return (cpu_millis(capacity.cpu) if capacity.cpu is not None else default_millis,
            memory_bytes(capacity.memory) if capacity.memory is not None else default_memory)


def _gpu_product(attributes: Mapping[str, object], gpu_type: str | None) -> str:
    """The ``nvidia.com/gpu.product`` label of the cluster's GPU nodes ('' without GPUs)."""
    if gpu_type is None:
        return ""
    if "gpu-product" in attributes:
        return str(attributes["gpu-product"])
    return m.default_gpu_product(gpu_type)


def _or(value: float | None, default: float) -> float:
    return float(default if value is None else value)


def _toleration(t: p.Toleration) -> m.Toleration:
    return m.Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "",
                        effect=t.effect or "")


def _stages(pipeline: Parsed[p.AIGCPipeline],
            fleet_tolerations: tuple[m.Toleration, ...], path: str) -> list[m.Stage]:
    """The pipeline's stages; ``path`` names its file in their sources."""
    declared = pipeline.obj.spec.stages
    outputs = {(s.name, o.name): o for s in declared for o in s.outputs or []}
    return [
        _stage(pipeline, i, stage, outputs, fleet_tolerations, path) for i, stage in enumerate(declared)
    ]


def _stage(pipeline: Parsed[p.AIGCPipeline], index: int, stage: p.PipelineStage,
           outputs: dict[tuple[str, str], p.StageOutput],
           fleet_tolerations: tuple[m.Toleration, ...], path: str) -> m.Stage:
    kind = m.StageType(stage.type)
    res = stage.resources or p.StageResources()
    deployment = kind is m.StageType.DEPLOYMENT
    default_gpus = 1 if res.gpuType or kind is not m.StageType.DATAPROC else 0
    return m.Stage(
        pipeline=pipeline.name,
        namespace=pipeline_namespace(pipeline.obj),
        name=stage.name,
        type=kind,
        dependencies=tuple(stage_edges(stage)),
        inputs=tuple(_input(i, outputs) for i in stage.inputs or []),
        outputs=tuple(m.Output(o.name, o.storage, o.location, o.jurisdiction, o.secretName)
                      for o in stage.outputs or []),
        cpu_millis=_stage_millis(kind, res),
        memory_bytes=_stage_memory(kind, res),
        gpus=res.gpu if res.gpu is not None else 1 if res.throughput is not None else default_gpus,
        throughput=res.throughput,
        gpu_types=res.gpu_types(),
        replicas=stage.replicas or (2 if deployment else 1),
        min_replicas_per_cluster=stage.minReplicasPerCluster or 1,
        tolerations=tuple(_toleration(t) for t in stage.tolerations or []) + fleet_tolerations,
        image=stage.image or m.DEFAULT_IMAGES[kind],
        command=tuple(stage.command or ()),
        source=m.Source(path, f"spec.stages[{index}]", pipeline.doc.index),
        shared_gpu=res.sharedGPU if res.sharedGPU is not None else deployment,
        serving=_serving(stage) if deployment else None,
    )


def _stage_millis(kind: m.StageType, res: p.StageResources) -> int:
    """A stage's cores (millis): asked for, else 4 for data processing and 8 for the rest."""
    return cpu_millis(res.cpu if res.cpu is not None else 4 if kind is m.StageType.DATAPROC else 8)


def _stage_memory(kind: m.StageType, res: p.StageResources) -> int:
    """A stage's memory: asked for, else 16Gi for data processing and serving, 32Gi for the rest."""
    return memory_bytes(res.memory if res.memory is not None
                        else "16Gi" if kind in (m.StageType.DATAPROC, m.StageType.DEPLOYMENT) else "32Gi")


def _serving(stage: p.PipelineStage) -> m.Serving:
    """The default Triton image's real server, or the documented defaults for other images;
    ``serving`` settings override either."""
    if stage.serving is None:  # most: a large fleet's thousands of serving stages share four
        return _DEFAULT_SERVING[(stage.image is None, stage.command is None)]
    return _serving_of(stage.image is None, stage.command is None, stage.serving)


def _serving_of(default_image: bool, default_command: bool, settings: p.Serving | None) -> m.Serving:
    """:func:`_serving` of a stage with or without its own image and command, and ``settings``."""
    base = TRITON if default_image else m.Serving()
    spec = settings or p.Serving()
    metric = spec.metric or p.ServingMetric()
    port = spec.port or base.port
    return replace(
        base,
        port=port,
        readiness_path=spec.readinessPath or base.readiness_path,
        extra_ports=tuple((name, number) for name, number in base.extra_ports if number != port),
        metric=metric.name or base.metric,
        target=str(metric.target) if metric.target is not None else base.target,
        triton=base.triton and default_command,
    )


#: :func:`_serving_of` without settings, by (default image, default command).
_DEFAULT_SERVING = {(image, command): _serving_of(image, command, None) for image in (True, False)
                    for command in (True, False)}


def _input(item: p.StageInput, outputs: dict[tuple[str, str], p.StageOutput]) -> m.Input:
    if item.from_ is None:
        return m.Input(item.name, item.source, None, None, item.location, item.jurisdiction,
                       secret_name=item.secretName)
    stage_name, _, output_name = item.from_.split(".", 2)
    produced = outputs[(stage_name, output_name)]
    return m.Input(item.name, produced.storage, stage_name, output_name,
                   item.location or produced.location, item.jurisdiction or produced.jurisdiction,
                   secret_name=item.secretName)


def _score_weights(spec: p.ScoreWeightsSpec | None) -> m.ScoreWeights:
    default = m.ScoreWeights()
    if spec is None:
        return default
    raw = {f: _or(getattr(spec, f), getattr(default, f))
           for f in ("compute", "cost", "network", "energy")}
    total = sum(raw.values())
    return m.ScoreWeights(**{f: w / total for f, w in raw.items()})


def _class_weights(spec: p.AIGCConfig | None) -> m.ClassWeights:
    default = m.ClassWeights()
    if spec is None:
        return default
    return m.ClassWeights(
        training=_or(spec.trainingWeight, default.training),
        inference=_or(spec.inferenceWeight, default.inference),
        finetuning=_or(spec.finetuningWeight, default.finetuning),
    )


def _duration_seconds(text: str) -> float:
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    raise ValueError(text)  # pragma: no cover - the schema's pattern excludes it


def _platform(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> m.Platform:
    spec = platform.obj.spec
    security = spec.security or p.Security()
    performance = spec.performance or p.Performance()
    multi = spec.multiCluster
    return m.Platform(
        name=platform.name,
        data_sovereignty=bool(security.dataSovereignty),
        audit_enabled=bool(security.auditEnabled),
        encryption_at_rest=bool(security.encryptionAtRest),
        inference_timeout_seconds=_duration_seconds(performance.inferenceTimeout or "30s"),
        training_priority=performance.trainingPriority or "medium",
        primary_cluster=multi.primaryCluster if multi else None,
        secondary_clusters=tuple(multi.secondaryClusters or []) if multi else (),
        pipelines=tuple(sorted(governed(platform, policies))),
        source=m.Source(platform.doc.path, "spec", platform.doc.index),
        failover_headroom=bool(multi.failoverHeadroom) if multi else False,
        storage_endpoints=_storage_endpoints(security.storageEndpoints or []),
    )


def _storage_endpoints(declared: list[p.StorageEndpoints]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Jurisdiction -> its storage CIDR blocks, merged when a jurisdiction is listed twice."""
    blocks: dict[str, set[str]] = {}
    for entry in declared:
        blocks.setdefault(entry.jurisdiction, set()).update(entry.cidrs)
    return tuple((jurisdiction, tuple(sorted(cidrs))) for jurisdiction, cidrs in sorted(blocks.items()))


def _gpu_policy(gpu: Parsed[p.GPUOptimizationPolicy]) -> m.GPUPolicy:
    spec = gpu.obj.spec
    slicing = spec.timeSlicing or p.TimeSlicing()
    memory = spec.memoryManagement or p.MemoryManagement()
    sharing = spec.sharingStrategy or p.SharingStrategy()
    return m.GPUPolicy(
        name=gpu.name,
        time_slicing_replicas=(slicing.replicas or 1) if slicing.enabled else 1,
        defragment_threshold=(float(parse_percentage(memory.defragmentThreshold))
                              if memory.defragmentThreshold else None),
        compaction_strategy=memory.compactionStrategy,
        sharing_enabled=bool(sharing.enabled),
        max_sharers=(sharing.maxSharers or 1) if sharing.enabled else 1,
        source=m.Source(gpu.doc.path, "spec", gpu.doc.index),
        device_plugin_namespace=(spec.devicePlugin.namespace if spec.devicePlugin and spec.devicePlugin.namespace
                                 else "gpu-operator"),
    )


def _data_policy(data: Parsed[p.DataOptimizationPolicy]) -> m.DataPolicy:
    spec = data.obj.spec
    pre = spec.preprocessing or p.Preprocessing()
    caching = spec.caching or p.Caching()
    prefetch = spec.prefetching or p.Prefetching()
    return m.DataPolicy(
        name=data.name,
        parallelization=pre.parallelization or 1,
        compression=bool(pre.compression),
        caching_enabled=bool(caching.enabled),
        caching_strategy=caching.strategy or "LRU",
        caching_size_bytes=memory_bytes(caching.size if caching.size is not None else "100Gi"),
        prefetching_enabled=bool(prefetch.enabled),
        prefetch_lookahead=prefetch.lookahead or 0,
        source=m.Source(data.doc.path, "spec", data.doc.index),
    )
