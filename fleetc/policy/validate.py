"""Validate stage: loaded documents -> typed policies, or every problem at once.

Two passes. The schema pass checks each document alone against its kind's JSON Schema (the one
committed under ``schemas/``) and turns each schema error into a compiler-style diagnostic. The
semantic pass checks what a schema cannot: names unique across documents, references that
resolve, dependency cycles, quantities and percentages in range, attributes that parse.

This module runs both passes and the checks across kinds (names, singletons, credentials); the
schema pass is :mod:`.schemacheck`, the semantic checks of each kind :mod:`.fleetchecks`,
:mod:`.pipelinechecks`, :mod:`.platformchecks`, :mod:`.gpuchecks` and :mod:`.regions`, sharing
:mod:`.checking`; the result is a :class:`~fleetc.policy.policyset.PolicySet`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from fleetc.credentials import credential_kind
from fleetc.errors import Diagnostic
from fleetc.infra.collector import gc_paused
from fleetc.policy import kinds as p
from fleetc.policy.fleetchecks import fleet_checks
from fleetc.policy.gpuchecks import gpu_type_checks, serving_fit_checks, throughput_checks
from fleetc.policy.load import Document, FieldPath, scan
from fleetc.policy.pipelinechecks import pipeline_checks, storage_secret_checks
from fleetc.policy.platformchecks import data_policy_checks, gpu_policy_checks, platform_checks
from fleetc.policy.policyset import Parsed, PolicySet, of_kind, pipeline_namespace, sovereign_pipelines
from fleetc.policy.regions import region_checks
from fleetc.policy.schemacheck import check_document


def validate(documents: Sequence[Document]) -> tuple[PolicySet, list[Diagnostic]]:
    """Check every document; return the policies that passed and every diagnostic found."""
    with gc_paused():
        return _validate(documents)


def _validate(documents: Sequence[Document]) -> tuple[PolicySet, list[Diagnostic]]:
    parsed: list[Parsed[Any]] = []
    diagnostics: list[Diagnostic] = []
    invalid: set[tuple[str, str]] = set()  # (kind, name) of documents already reported
    for doc in documents:
        text, suspect = doc.scanned or scan(doc.data)
        obj, problems = check_document(doc, finite=text is not None)
        diagnostics.extend(problems)
        if suspect:
            diagnostics.extend(credential_checks(doc))
        if obj is not None:
            parsed.append(Parsed(obj, doc, text))
        elif (named := _kind_and_name(doc.data)) is not None:
            invalid.add(named)
    policies = PolicySet(
        fleets=of_kind(parsed, p.Fleet),
        pipelines=of_kind(parsed, p.AIGCPipeline),
        platforms=of_kind(parsed, p.AIGCPlatform),
        gpu_policies=of_kind(parsed, p.GPUOptimizationPolicy),
        data_policies=of_kind(parsed, p.DataOptimizationPolicy),
    )
    diagnostics.extend(semantic_checks(policies, frozenset(invalid)))
    return policies, diagnostics


def _kind_and_name(data: Any) -> tuple[str, str] | None:
    """The kind and name an invalid document says it has, when it says so."""
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    kind, name = data.get("kind"), data["metadata"].get("name")
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else None


def semantic_checks(policies: PolicySet,
                    invalid: frozenset[tuple[str, str]] = frozenset()) -> list[Diagnostic]:
    """Cross-document checks; each check is a generator of diagnostics. ``invalid``: the (kind,
    name) of documents already reported invalid: a reference to one is no further error."""
    checks = [
        _unique_names(policies),
        _singletons(policies),
        _object_name_collisions(policies),
        *(fleet_checks(f) for f in policies.fleets),
        *(pipeline_checks(pl) for pl in policies.pipelines),
        storage_secret_checks(policies),
        *(platform_checks(pf, policies, invalid) for pf in policies.platforms),
        *(gpu_policy_checks(g) for g in policies.gpu_policies),
        *(data_policy_checks(d) for d in policies.data_policies),
        serving_fit_checks(policies),
        gpu_type_checks(policies),
        throughput_checks(policies),
        region_checks(policies, sovereign_pipelines(policies)),
    ]
    return [d for check in checks for d in check]


def _unique_names(policies: PolicySet) -> Iterator[Diagnostic]:
    """Names become paths and object names: two objects of one kind may not share one."""
    for group in (policies.fleets, policies.pipelines, policies.platforms,
                  policies.gpu_policies, policies.data_policies):
        first: dict[str, Parsed[Any]] = {}
        for item in group:
            earlier = first.setdefault(item.name, item)
            if earlier is not item:
                line, _ = earlier.doc.locate(("metadata", "name"))
                yield item.doc.diagnostic(
                    ("metadata", "name"), f"duplicate {item.obj.kind} name '{item.name}' "
                                          f"(first defined at {earlier.doc.path}:{line})")


def _object_name_collisions(policies: PolicySet) -> Iterator[Diagnostic]:
    """A stage's objects are named ``<pipeline>-<stage>`` in the pipeline's namespace (and its
    files after them), so pipeline ``b`` stage ``c-d`` and pipeline ``b-c`` stage ``d`` would be
    one object: each location is reported, naming the other."""
    seen: dict[tuple[str, str], tuple[Parsed[p.AIGCPipeline], int]] = {}
    for pipeline in policies.pipelines:
        namespace = pipeline_namespace(pipeline.obj)
        for i, stage in enumerate(pipeline.obj.spec.stages):
            key = (namespace, f"{pipeline.name}-{stage.name}")
            first = seen.setdefault(key, (pipeline, i))
            if first[0].name == pipeline.name:
                continue  # the same stage, or a duplicate name :func:`_unique_names` reports
            for (here, j), (there, k) in (((pipeline, i), first), (first, (pipeline, i))):
                line, _ = there.doc.locate(("spec", "stages", k, "name"))
                yield here.doc.diagnostic(
                    ("spec", "stages", j, "name"),
                    f"pipeline '{here.name}' stage '{here.obj.spec.stages[j].name}' and pipeline "
                    f"'{there.name}' stage '{there.obj.spec.stages[k].name}' "
                    f"({there.doc.path}:{line}) would both be named '{key[1]}' in namespace "
                    f"'{namespace}'", hint="rename one of the stages or pipelines, or give the "
                                           "pipelines different namespaces")


def _singletons(policies: PolicySet) -> Iterator[Diagnostic]:
    """One compile reads one Fleet, one GPU policy and one data policy (differently named
    duplicates; same-named ones are reported by :func:`_unique_names`)."""
    for group in (policies.fleets, policies.gpu_policies, policies.data_policies):
        for extra in group[1:]:
            if extra.name != group[0].name:
                kind = extra.obj.kind
                yield extra.doc.diagnostic(
                    ("metadata", "name"),
                    f"a second {kind} ('{extra.name}'); fleetc compiles one {kind} at a "
                    f"time (the first is '{group[0].name}' in {group[0].doc.path})",
                    hint="compile each fleet from its own folder")


def credential_checks(doc: Document) -> Iterator[Diagnostic]:
    """Refuse values that look like credentials: fleetc's output lives in git, so a secret in a
    policy would be published; the policy must name a Kubernetes Secret instead."""
    for path, key, value in _strings(doc.data, ()):
        what = credential_kind(key, value)
        if what:
            yield doc.diagnostic(path, f"looks like a credential ({what}); fleetc never renders "
                                       "secrets",
                                 hint="store it in a Kubernetes Secret and reference the Secret "
                                      "by name")


def _strings(data: Any, path: FieldPath) -> Iterator[tuple[FieldPath, str, str]]:
    """Every string value under ``data`` with its path and the mapping key it sits under."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str):
                yield path + (key,), str(key), value
            else:
                yield from _strings(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if isinstance(value, str):
                yield path + (i,), str(path[-1]) if path else "", value
            else:
                yield from _strings(value, path + (i,))
