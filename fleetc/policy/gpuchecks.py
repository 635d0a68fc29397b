"""Semantic checks across documents about GPUs: the GPU types a pipeline asks for exist in the
Fleet, a serving replica fits some node, a throughput target can be met."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from fleetc.errors import Diagnostic, did_you_mean
from fleetc.model import (
    gpus_for_throughput,
)
from fleetc.policy import kinds as p
from fleetc.policy.load import Document, FieldPath
from fleetc.policy.policyset import PolicySet, fleet_gpu_types, node_sizes


def serving_fit_checks(policies: PolicySet) -> Iterator[Diagnostic]:
    """A serving replica is one pod: it may not ask for more GPUs than the largest node of the
    clusters it may run on carries (a gang replica is split instead; see :mod:`fleetc.nodefit`).
    Clusters with smaller nodes only drop out of its candidates (node fit, per cluster)."""
    if not policies.fleets:
        return
    # GPU type -> its cluster with the largest nodes (GPUs per node, cluster name, first by name
    # among equals): where no node of the type is large enough, that one is named (once per
    # type, not per cluster: 5,000 serving stages on 1,000 clusters took 1.5 s)
    largest: dict[str, tuple[int, str]] = {}
    for cluster, gpu_type, per_node in node_sizes(policies.fleets[0].obj):
        largest[gpu_type] = min(largest.get(gpu_type, (-per_node, cluster)), (-per_node, cluster))
    throughput = {t.lower(): v for t, v in (policies.fleets[0].obj.spec.gpuThroughput or {}).items()}
    for pipeline in policies.pipelines:
        for i, stage in enumerate(pipeline.obj.spec.stages):
            res = stage.resources
            if stage.type == "Deployment" and res is not None and (res.gpu or res.throughput):
                yield from _serving_fit(pipeline.doc, i, res, largest, throughput)


def _serving_fit(doc: Document, i: int, res: p.StageResources, largest: Mapping[str, tuple[int, str]],
                 throughput: Mapping[str, float]) -> Iterator[Diagnostic]:
    """Serving stage ``i`` fits the largest node of some GPU type it may run on (``largest``:
    GPU type -> (minus GPUs per node, cluster) of its cluster with the largest nodes)."""
    wanted = res.gpu_types()
    fits = [(-n, c, asked, t) for t, (n, c) in largest.items() if (not wanted or t in wanted)
            and (asked := _serving_gpus(res, t, throughput)) is not None]
    if fits and all(node < asked for node, _, asked, _ in fits):
        node, cluster, asked, gpu_type = min(fits, key=lambda f: (-f[0], f[1]))
        field = "gpu" if res.throughput is None else "throughput"
        most = (f"{node} GPUs" if res.throughput is None
                else f"a throughput of {node * throughput[gpu_type]:g} ({node} {gpu_type})")
        yield doc.diagnostic(
            ("spec", "stages", i, "resources", field),
            f"a serving replica is one pod and cannot be split over nodes: {asked} GPUs "
            f"per replica, but the largest node it may run on (cluster {cluster}) carries {node}",
            hint=f"ask for at most {most} per replica"
                 + ("" if wanted else ", or set gpuType to a type with larger nodes"))


def gpu_type_checks(policies: PolicySet) -> Iterator[Diagnostic]:
    """``gpuType`` names GPU types of the Fleet's clusters (compared in lower case), so
    validate refuses what compile could never place. A single type none of them has is a typo
    (``a10O``) or work for a cluster yet to come: an error, with the closest type. A list of
    alternatives names each type once and exists so a pipeline can move between fleets: it may
    name types this fleet lacks (a warning names them; they are skipped here), but not only
    such types."""
    if not policies.fleets:
        return
    fleet = policies.fleets[0].name
    known = fleet_gpu_types(policies.fleets[0].obj)
    for pipeline in policies.pipelines:
        for i, stage in enumerate(pipeline.obj.spec.stages):
            listed = stage.resources.gpuType if stage.resources else None
            path: FieldPath = ("spec", "stages", i, "resources", "gpuType")
            if isinstance(listed, str) and listed.lower() not in known:
                yield pipeline.doc.diagnostic(path, f"no cluster of Fleet '{fleet}' has GPU type {listed.lower()}",
                                              hint=_gpu_hint(listed.lower(), known))
            elif isinstance(listed, list):
                yield from _gpu_list_checks(pipeline.doc, path, [t.lower() for t in listed], known, fleet)


def _gpu_list_checks(doc: Document, path: FieldPath, listed: list[str], known: list[str],
                     fleet: str) -> Iterator[Diagnostic]:
    first: dict[str, int] = {}
    for j, gpu_type in enumerate(listed):
        if gpu_type in first:
            yield doc.diagnostic(path + (j,), f"GPU type {gpu_type} listed twice (also gpuType[{first[gpu_type]}])",
                                 hint="list each alternative once, in order of preference")
        else:
            first[gpu_type] = j
    absent = [t for t in first if t not in known]
    if not absent:
        return
    if len(absent) == len(first):
        yield doc.diagnostic(path, f"no cluster of Fleet '{fleet}' has any of the GPU types {', '.join(absent)}",
                             hint=_gpu_hint(absent[0], known))
        return
    yield dataclasses.replace(doc.diagnostic(
        path, f"no cluster of Fleet '{fleet}' has GPU type{'s' if len(absent) > 1 else ''} {', '.join(absent)}: "
              f"the stage runs only on {', '.join(t for t in first if t in known)} here",
        hint=_gpu_hint(absent[0], known)), severity="warning")


def _gpu_hint(gpu_type: str, known: list[str]) -> str:
    return (did_you_mean(gpu_type, known)
            or (f"the fleet's GPU types: {', '.join(known)}" if known else "the fleet has no GPUs"))


def throughput_checks(policies: PolicySet) -> Iterator[Diagnostic]:
    """``gpuThroughput`` names GPU types of the Fleet's clusters; a stage asks for ``gpu`` or
    ``throughput``, not both, and for throughput only with the Fleet stating one for every
    type it lists (or at least one type, when it lists none)."""
    fleet = policies.fleets[0] if policies.fleets else None
    stated = {t.lower() for t in (fleet.obj.spec.gpuThroughput or {})} if fleet else set()
    known = fleet_gpu_types(fleet.obj) if fleet is not None else []
    if fleet is not None:
        for gpu_type in fleet.obj.spec.gpuThroughput or {}:
            if gpu_type.lower() not in known:
                yield fleet.doc.diagnostic(
                    ("spec", "gpuThroughput", gpu_type), f"no cluster of Fleet '{fleet.name}' has GPU type {gpu_type}",
                    hint=did_you_mean(gpu_type.lower(), known)
                    or (f"the fleet's GPU types: {', '.join(known)}" if known else "the fleet has no GPUs"), key=True)
    for pipeline in policies.pipelines:
        for i, stage in enumerate(pipeline.obj.spec.stages):
            if stage.resources is not None and stage.resources.throughput is not None:
                yield from _throughput_stage(pipeline.doc, ("spec", "stages", i, "resources"), stage.resources,
                                             None if fleet is None else fleet.name, stated, known)


def _throughput_stage(doc: Document, path: FieldPath, res: p.StageResources, fleet: str | None,
                      stated: set[str], known: list[str]) -> Iterator[Diagnostic]:
    """A stage asking for throughput: not with ``gpu`` too, and only where the Fleet (named
    ``fleet``; None: no Fleet) states the throughput of its GPU types (``stated``)."""
    if res.gpu is not None:
        yield doc.diagnostic(path + ("throughput",), "give gpu or throughput, not both",
                             hint="throughput lets the GPU count follow the cluster's GPU type; "
                                  "gpu fixes it", key=True)
    elif fleet is not None and not stated:
        yield doc.diagnostic(path + ("throughput",),
                             f"Fleet '{fleet}' states no gpuThroughput", key=True,
                             hint="state each GPU type's relative throughput in the Fleet's "
                                  "spec.gpuThroughput (e.g. {h100: 2.0, a100: 1.0}), or ask for gpu")
    elif fleet is not None:
        for j, gpu_type in enumerate(res.gpu_types()):
            if gpu_type not in stated and gpu_type in known:  # gpu_type_checks words the rest
                where = path + ("gpuType",) + ((j,) if isinstance(res.gpuType, list) else ())
                yield doc.diagnostic(
                    where, f"asks for throughput, but Fleet '{fleet}' states no throughput for "
                           f"{gpu_type}", hint=f"add {gpu_type} to the Fleet's spec.gpuThroughput")


def _serving_gpus(res: p.StageResources, gpu_type: str, throughput: Mapping[str, float]) -> int | None:
    """GPUs one replica asks for on ``gpu_type``: ``gpu``, or for throughput the type's count
    (None where the Fleet states no throughput for the type: it never runs there)."""
    if res.throughput is None:
        return res.gpu
    if gpu_type not in throughput:
        return None
    return gpus_for_throughput(res.throughput, throughput[gpu_type])
