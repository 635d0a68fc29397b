"""The policies of one compile once they passed the schema: :class:`PolicySet` (each object with
the document it came from, :class:`Parsed`), and what the checks and :mod:`fleetc.resolve` ask of
it (a pipeline's namespace and edges, a team's pipelines, what a platform governs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from fleetc.nodefit import default_gpus_per_node
from fleetc.policy import kinds as p
from fleetc.policy.load import Document


class _Named(Protocol):
    """What every policy kind has: standard object metadata."""

    @property
    def metadata(self) -> p.ObjectMeta: ...


T = TypeVar("T", bound=_Named)


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A typed policy object together with the document it came from (for messages)."""

    obj: T
    doc: Document
    #: The document's data as JSON text, keys sorted (what the inputs digest hashes); None where
    #: it holds NaN or infinity (or it was not made here).
    json: str | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.obj.metadata.name


@dataclass(frozen=True)
class PolicySet:
    """Every valid policy object of one compile, by kind, in file order."""

    fleets: tuple[Parsed[p.Fleet], ...] = ()
    pipelines: tuple[Parsed[p.AIGCPipeline], ...] = ()
    platforms: tuple[Parsed[p.AIGCPlatform], ...] = ()
    gpu_policies: tuple[Parsed[p.GPUOptimizationPolicy], ...] = ()
    data_policies: tuple[Parsed[p.DataOptimizationPolicy], ...] = ()


def of_kind(parsed: Iterable[Parsed[Any]], kind: type[T]) -> tuple[Parsed[T], ...]:
    return tuple(item for item in parsed if isinstance(item.obj, kind))


def whole_number(value: Any) -> int | None:
    """An attribute's value as a non-negative integer, or None when it is not one."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 7:
        return None
    return int(text)


def pipeline_namespace(pipeline: p.AIGCPipeline) -> str:
    """The namespace a pipeline's workloads run in: its own, else one named after it."""
    return pipeline.metadata.namespace or pipeline.metadata.name


def stage_edges(stage: p.PipelineStage) -> list[str]:
    """The stages this stage waits for: its dependencies and the producers of its inputs."""
    edges = list(stage.dependencies or [])
    for item in stage.inputs or []:
        if item.from_:
            producer = item.from_.split(".", 1)[0]
            if producer not in edges:
                edges.append(producer)
    return edges


def team_pipelines(team: p.Team, pipelines: Iterable[Parsed[p.AIGCPipeline]]) -> list[str]:
    """Names of the ``pipelines`` that belong to ``team``: their namespace is one of its
    ``namespaces``, or their labels carry all of its ``pipelineSelector`` (an empty selector
    selects none)."""
    namespaces = set(team.namespaces or [])
    selector = team.pipelineSelector or {}
    return [pl.name for pl in pipelines
            if pipeline_namespace(pl.obj) in namespaces
            or (selector and all((pl.obj.metadata.labels or {}).get(k) == v for k, v in selector.items()))]


def governed(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> list[str]:
    """Names of the pipelines a platform governs: those it lists, else all of them."""
    listed = platform.obj.spec.pipelines
    return list(listed) if listed is not None else [pl.name for pl in policies.pipelines]


def sovereign_pipelines(policies: PolicySet) -> frozenset[str]:
    """Names of the pipelines a platform with ``security.dataSovereignty`` governs."""
    return frozenset(name for pf in policies.platforms
                     if pf.obj.spec.security and pf.obj.spec.security.dataSovereignty
                     for name in governed(pf, policies))


def fleet_gpu_types(fleet: p.Fleet) -> list[str]:
    """The GPU types of the Fleet's clusters, sorted: each cluster's ``gpu-type`` unless its
    ``gpu-count`` is 0 (one that does not parse counts: its own error says so, and the stages
    asking for the type would only repeat it)."""
    return sorted({str(attributes["gpu-type"]).lower() for cluster in fleet.spec.clusters
                   if "gpu-type" in (attributes := cluster.attributes or {})
                   and whole_number(attributes.get("gpu-count", 0)) != 0})


def node_sizes(fleet: p.Fleet) -> list[tuple[str, str, int]]:
    """(cluster, gpu type, GPUs per node) of every GPU cluster whose attributes parse."""
    found = []
    for cluster in fleet.spec.clusters:
        attributes = cluster.attributes or {}
        count = whole_number(attributes.get("gpu-count", 0))
        if not count or "gpu-type" not in attributes:
            continue
        per_node = whole_number(attributes.get("gpus-per-node", default_gpus_per_node(count)))
        if per_node:
            found.append((cluster.name, str(attributes["gpu-type"]).lower(), per_node))
    return found
