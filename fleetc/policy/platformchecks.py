"""Semantic checks of platforms (teams, what they select and govern, each pipeline governed at
most once) and of the GPU and data optimization policies."""

from __future__ import annotations

from collections.abc import Iterator

from fleetc.errors import Diagnostic, did_you_mean
from fleetc.policy import kinds as p
from fleetc.policy.checking import MAX_MEMORY_BYTES, quantity_check
from fleetc.policy.load import Document, FieldPath
from fleetc.policy.pipelinechecks import RESERVED_NAMESPACE_PREFIX, RESERVED_NAMESPACES
from fleetc.policy.policyset import Parsed, PolicySet, governed, pipeline_namespace, team_pipelines
from fleetc.policy.quantity import memory_bytes, parse_percentage


def platform_checks(platform: Parsed[p.AIGCPlatform], policies: PolicySet,
                     invalid: frozenset[tuple[str, str]]) -> Iterator[Diagnostic]:
    doc, spec = platform.doc, platform.obj.spec
    multi = spec.multiCluster
    if multi:
        secondaries = multi.secondaryClusters or []
        for j, name in enumerate(secondaries):
            if name == multi.primaryCluster:
                yield doc.diagnostic(("spec", "multiCluster", "secondaryClusters", j),
                                     f"'{name}' is already the primary cluster")
            elif name in secondaries[:j]:
                yield doc.diagnostic(("spec", "multiCluster", "secondaryClusters", j),
                                     f"'{name}' is listed twice")
        if policies.fleets:
            fleet = policies.fleets[0]
            known = [c.name for c in fleet.obj.spec.clusters]
            refs: list[tuple[FieldPath, str]] = [(("spec", "multiCluster", "primaryCluster"), multi.primaryCluster)]
            refs += [(("spec", "multiCluster", "secondaryClusters", j), n)
                     for j, n in enumerate(secondaries)]
            for path, name in refs:
                if name not in known:
                    hint = did_you_mean(name, known) or f"its clusters: {', '.join(known)}"
                    yield doc.diagnostic(path, f"cluster '{name}' is not in Fleet "
                                               f"'{fleet.name}' ({fleet.doc.path})", hint=hint)
    if spec.pipelines and policies.pipelines:
        known = [pl.name for pl in policies.pipelines]
        for j, name in enumerate(spec.pipelines):
            if name not in known and ("AIGCPipeline", name) not in invalid:
                yield doc.diagnostic(("spec", "pipelines", j), f"no AIGCPipeline named '{name}'",
                                     hint=did_you_mean(name, known))
    yield from _governed_once(platform, policies)
    yield from _team_checks(platform, policies)


def _team_checks(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> Iterator[Diagnostic]:
    """Teams: unique names, each selecting its pipelines somehow, quotas of GPU types the Fleet
    has, guarantees within the quota, and every governed pipeline in at most one team."""
    doc, teams = platform.doc, platform.obj.spec.teams or []
    mine = set(governed(platform, policies))
    pipelines = [pl for pl in policies.pipelines if pl.name in mine]
    fleet_types = sorted({str(c.attributes["gpu-type"]).lower() for f in policies.fleets[:1]
                          for c in f.obj.spec.clusters if c.attributes and "gpu-type" in c.attributes})
    owner: dict[str, str] = {}
    seen: dict[str, int] = {}
    earlier = {t.name: other.name for other in policies.platforms[: policies.platforms.index(platform)]
               for t in other.obj.spec.teams or []}
    for i, team in enumerate(teams):
        base: FieldPath = ("spec", "teams", i)
        if team.name in seen:
            yield doc.diagnostic(base + ("name",), f"duplicate team name '{team.name}' "
                                                   f"(also spec.teams[{seen[team.name]}])")
        elif team.name in earlier:  # its queues on every cluster are named after it
            yield doc.diagnostic(base + ("name",), f"team name '{team.name}' is also a team of AIGCPlatform "
                                                   f"'{earlier[team.name]}'",
                                 hint="team names are unique over the platforms: each names its queues")
        seen.setdefault(team.name, i)
        yield from _team_selects(doc, base, team, pipelines)
        yield from _team_gpu_checks(doc, base, team, fleet_types if policies.fleets else None)
        for name in team_pipelines(team, pipelines):
            if name in owner:
                yield doc.diagnostic(base, f"pipeline '{name}' belongs to teams '{owner[name]}' and "
                                           f"'{team.name}'; a pipeline belongs to at most one team",
                                     hint="narrow the teams' namespaces or pipelineSelector")
            owner.setdefault(name, team.name)


def _team_gpu_checks(doc: Document, base: FieldPath, team: p.Team,
                     fleet_types: list[str] | None) -> Iterator[Diagnostic]:
    """A team's quota and guarantees name GPU types of the Fleet (``fleet_types``; None: no
    Fleet to check against), and it guarantees no more than its quota."""
    for field in ("gpuQuota", "guaranteed"):
        for gpu_type in getattr(team, field) or {}:
            if fleet_types is not None and gpu_type.lower() not in fleet_types:
                yield doc.diagnostic(base + (field, gpu_type), f"no cluster of the Fleet has GPU type "
                                                               f"'{gpu_type}'",
                                     hint=did_you_mean(gpu_type.lower(), fleet_types)
                                     or f"its GPU types: {', '.join(fleet_types) or 'none'}", key=True)
    quota = {k.lower(): v for k, v in (team.gpuQuota or {}).items()}
    for gpu_type, count in (team.guaranteed or {}).items():
        if gpu_type.lower() in quota and count > quota[gpu_type.lower()]:
            yield doc.diagnostic(base + ("guaranteed", gpu_type),
                                 f"guarantees {count} {gpu_type}, more than its gpuQuota of "
                                 f"{quota[gpu_type.lower()]}")


def _team_selects(doc: Document, base: FieldPath, team: p.Team,
                  pipelines: list[Parsed[p.AIGCPipeline]]) -> Iterator[Diagnostic]:
    """A team selects its pipelines somehow, and each namespace and its selector select some
    governed pipeline: a typo would leave the team's caps capping nothing."""
    if not team.namespaces and not team.pipelineSelector:
        yield doc.diagnostic(base, f"team '{team.name}' selects no pipelines",
                             hint="give it namespaces: [<namespace>, ...] or pipelineSelector: {<label>: <value>}")
    if not pipelines:
        return
    known = sorted({pipeline_namespace(pl.obj) for pl in pipelines})
    for j, name in enumerate(team.namespaces or []):
        if name not in known:
            yield doc.diagnostic(base + ("namespaces", j), f"no pipeline the platform governs runs in namespace "
                                                          f"'{name}'",
                                 hint=did_you_mean(name, known) or f"their namespaces: {', '.join(known)}")
    selector_only = p.Team(name=team.name, pipelineSelector=team.pipelineSelector)
    if team.pipelineSelector and not team_pipelines(selector_only, pipelines):
        yield doc.diagnostic(base + ("pipelineSelector",), "no pipeline the platform governs carries these labels",
                             hint="a pipeline is the team's when its metadata.labels carry every label given here")


def _governed_once(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> Iterator[
        Diagnostic]:
    """A pipeline answers to one platform; two platforms claiming it is ambiguous."""
    earlier = policies.platforms[: policies.platforms.index(platform)]
    mine = set(governed(platform, policies))
    for other in earlier:
        shared = sorted(mine & set(governed(other, policies)))
        if shared:
            yield platform.doc.diagnostic(
                ("spec", "pipelines"),
                f"pipeline(s) {', '.join(shared)} are also governed by AIGCPlatform "
                f"'{other.name}'", hint="list the pipelines each platform governs in "
                                        "spec.pipelines")


#: Where the NVIDIA device plugin runs: the GPU Operator's namespaces, and ``kube-system``, where
#: its own manifests and Helm chart put it (NVIDIA/k8s-device-plugin, deployments/static/
#: nvidia-device-plugin.yml). Of the reserved namespaces (:data:`RESERVED_NAMESPACES`), the only
#: ones the device plugin's ConfigMap may go to.
DEVICE_PLUGIN_NAMESPACES = ("gpu-operator", "gpu-operator-resources", "nvidia-gpu-operator", "kube-system")


def gpu_policy_checks(gpu: Parsed[p.GPUOptimizationPolicy]) -> Iterator[Diagnostic]:
    plugin = gpu.obj.spec.devicePlugin
    namespace = plugin.namespace if plugin else None
    if namespace and namespace not in DEVICE_PLUGIN_NAMESPACES and (
            namespace in RESERVED_NAMESPACES or namespace.startswith(RESERVED_NAMESPACE_PREFIX)):
        # fleetc renders the Namespace and a ConfigMap there, applied with cluster-admin rights
        yield gpu.doc.diagnostic(("spec", "devicePlugin", "namespace"),
                                 f"namespace '{namespace}' is reserved for Kubernetes and the controllers "
                                 "fleetc's output runs on; fleetc would render its device-plugin ConfigMap "
                                 "and the Namespace there",
                                 hint="name the namespace the device plugin runs in: "
                                      f"{', '.join(DEVICE_PLUGIN_NAMESPACES)} or one of its own")
    memory = gpu.obj.spec.memoryManagement
    if memory and memory.defragmentThreshold is not None:
        if parse_percentage(memory.defragmentThreshold) > 1:
            yield gpu.doc.diagnostic(("spec", "memoryManagement", "defragmentThreshold"),
                                     f"expected a percentage from 0% to 100%, got "
                                     f"'{memory.defragmentThreshold}'")


def data_policy_checks(data: Parsed[p.DataOptimizationPolicy]) -> Iterator[Diagnostic]:
    caching = data.obj.spec.caching
    if caching:
        yield from quantity_check(data.doc, ("spec", "caching", "size"), caching.size,
                                   memory_bytes, MAX_MEMORY_BYTES)
