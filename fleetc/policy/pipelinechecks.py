"""Semantic checks of pipelines: namespaces, stages (images, resources, env, serving), inputs and
outputs, the Secrets storage URLs name, and dependency cycles."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from fleetc.errors import Diagnostic, did_you_mean
from fleetc.model import (
    STORAGE_CREDENTIAL_KEYS,
    url_scheme,
)
from fleetc.policy import kinds as p
from fleetc.policy.checking import MAX_CPU_MILLIS, MAX_MEMORY_BYTES, describe, quantity_check
from fleetc.policy.load import Document, FieldPath
from fleetc.policy.policyset import Parsed, PolicySet, pipeline_namespace, stage_edges
from fleetc.policy.quantity import cpu_millis, memory_bytes

#: Namespaces a pipeline may not run in: Kubernetes' own, and those of the controllers fleetc's
#: output is rendered for or relies on (Argo CD, Flux, Volcano, Kueue, Fluid, Kurator, the NVIDIA
#: GPU operator, cert-manager, which Kueue's and Volcano's webhooks take their certificates from).
#: fleetc labels a pipeline's namespace as its own and, under data sovereignty, denies egress to
#: every pod in it: in one of these it would cut a controller off the API server. ``default`` is
#: reserved too: it is where every object without a namespace lands, so it is nobody's own (a
#: pipeline without ``metadata.namespace`` runs in one named after it, never in ``default``).
RESERVED_NAMESPACES = ("default", "argocd", "flux-system", "volcano-system", "volcano-monitoring",
                       "kueue-system", "fluid-system", "kurator-system", "cert-manager", "gpu-operator",
                       "gpu-operator-resources", "nvidia-gpu-operator")


#: Kubernetes' own: kube-system, kube-public, kube-node-lease and any it adds.
RESERVED_NAMESPACE_PREFIX = "kube-"


def _reserved_namespace(pipeline: Parsed[p.AIGCPipeline]) -> Iterator[Diagnostic]:
    namespace = pipeline_namespace(pipeline.obj)
    if namespace in RESERVED_NAMESPACES or namespace.startswith(RESERVED_NAMESPACE_PREFIX):
        given = pipeline.obj.metadata.namespace is not None
        why = "" if given else " (the pipeline's name, as metadata.namespace is not set)"
        yield pipeline.doc.diagnostic(
            ("metadata", "namespace" if given else "name"),
            f"namespace '{namespace}'{why} is reserved for Kubernetes and the controllers fleetc's "
            "output runs on; fleetc would label it as its own and may deny its egress",
            hint="give the pipeline a namespace of its own in metadata.namespace")


def pipeline_checks(pipeline: Parsed[p.AIGCPipeline]) -> Iterator[Diagnostic]:
    doc, stages = pipeline.doc, pipeline.obj.spec.stages
    yield from _reserved_namespace(pipeline)
    index: dict[str, int] = {}
    for i, stage in enumerate(stages):
        if stage.name in index:
            yield doc.diagnostic(("spec", "stages", i, "name"),
                                 f"duplicate stage name '{stage.name}' "
                                 f"(also spec.stages[{index[stage.name]}])")
        else:
            index[stage.name] = i
    for i, stage in enumerate(stages):
        yield from _stage_checks(doc, ("spec", "stages", i), stage, stages, index)
    yield from _cycle_check(doc, stages, index)


#: A container image reference (registry/repository[:tag][@digest]), matched in full.
_IMAGE = re.compile(r"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
                    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]{32,})?")


def _stage_checks(doc: Document, base: FieldPath, stage: p.PipelineStage,
                  stages: Sequence[p.PipelineStage], index: dict[str, int]) -> Iterator[
        Diagnostic]:
    if stage.image is not None and not _IMAGE.fullmatch(stage.image):
        yield doc.diagnostic(base + ("image",), f"expected a container image reference, got "
                                                f"{describe(stage.image)}",
                             hint="such as nvcr.io/nvidia/pytorch:24.05-py3 or registry:5000/team/app@sha256:...")
    yield from _dependency_checks(doc, base, stage, index)
    if len(stage.inputs or ()) > 1 or len(stage.outputs or ()) > 1:  # a name twice needs two (most have one)
        yield from _names_unique(doc, base + ("inputs",), stage.inputs or [])
        yield from _names_unique(doc, base + ("outputs",), stage.outputs or [])
        yield from _env_names_distinct(doc, base, stage)
    for j, item in enumerate(stage.inputs or []):
        yield from _input_checks(doc, base + ("inputs", j), item, stage.name, stages, index)
    if stage.resources:
        yield from _resource_checks(doc, base + ("resources",), stage, stage.resources)
    yield from _serving_checks(doc, base, stage)
    if stage.minReplicasPerCluster is not None:
        if stage.type != "Deployment":
            yield doc.diagnostic(base + ("minReplicasPerCluster",),
                                 "only Deployment stages split replicas across clusters",
                                 key=True)
        elif stage.minReplicasPerCluster > (stage.replicas or 2):
            yield doc.diagnostic(base + ("minReplicasPerCluster",),
                                 f"greater than replicas ({stage.replicas or 2})")


def _dependency_checks(doc: Document, base: FieldPath, stage: p.PipelineStage,
                       index: dict[str, int]) -> Iterator[Diagnostic]:
    """Each dependency names another stage of the pipeline (``index``: stage name -> position)."""
    for j, dep in enumerate(stage.dependencies or []):
        if dep == stage.name:
            yield doc.diagnostic(base + ("dependencies", j), "a stage cannot depend on itself")
        elif dep not in index:
            yield doc.diagnostic(base + ("dependencies", j), f"no stage named '{dep}' in this "
                                 "pipeline", hint=did_you_mean(dep, index))


def _resource_checks(doc: Document, path: FieldPath, stage: p.PipelineStage,
                     resources: p.StageResources) -> Iterator[Diagnostic]:
    """A stage's cores and memory in range, a GPU type only with GPUs, shared GPUs only where
    a stage may share them."""
    yield from quantity_check(doc, path + ("cpu",), resources.cpu, cpu_millis, MAX_CPU_MILLIS)
    yield from quantity_check(doc, path + ("memory",), resources.memory, memory_bytes, MAX_MEMORY_BYTES)
    if resources.gpu == 0 and resources.gpuType:
        yield doc.diagnostic(path + ("gpuType",), "gpuType set but gpu is 0",
                             hint="remove gpuType, or ask for at least one GPU")
    if resources.sharedGPU and stage.type in ("Training", "Finetuning"):
        yield doc.diagnostic(path + ("sharedGPU",),
                             f"{stage.type} stages get exclusive GPUs",
                             hint="remove sharedGPU; GPU sharing is for serving and "
                                  "evaluation")


def _env_names_distinct(doc: Document, base: FieldPath, stage: p.PipelineStage) -> Iterator[Diagnostic]:
    """Inputs and outputs reach the container as FLEETC_INPUT_<NAME>, FLEETC_INPUT_<NAME>_PATH,
    FLEETC_OUTPUT_<NAME>, FLEETC_OUTPUT_<NAME>_PATH and FLEETC_OUTPUT_<NAME>_CREDENTIALS (upper
    case, '-' as '_'): two that would
    share a variable are an error, as one URL or path would silently replace the other. Called
    for stages with two inputs or two outputs: one input's two and one output's three differ in
    length, INPUT and OUTPUT apart."""
    seen: dict[str, FieldPath] = {}
    texts: dict[str, str] = {}
    names = [(f"FLEETC_INPUT_{i.name}", ("inputs", j)) for j, i in enumerate(stage.inputs or [])]
    names += [(f"FLEETC_INPUT_{i.name}_PATH", ("inputs", j)) for j, i in enumerate(stage.inputs or [])]
    names += [(f"FLEETC_OUTPUT_{o.name}", ("outputs", j)) for j, o in enumerate(stage.outputs or [])]
    names += [(f"FLEETC_OUTPUT_{o.name}_PATH", ("outputs", j)) for j, o in enumerate(stage.outputs or [])]
    names += [(f"FLEETC_OUTPUT_{o.name}_CREDENTIALS", ("outputs", j)) for j, o in enumerate(stage.outputs or [])]
    for raw, where in names:
        variable = raw.upper().replace("-", "_")
        if variable in seen and texts[variable] != raw:  # the same name twice is a duplicate, said once
            first = f"{seen[variable][0]}[{seen[variable][1]}]"
            yield doc.diagnostic(base + where + ("name",),
                                 f"its environment variable {variable} is also {first}'s",
                                 hint="rename one: names that differ only in '-' and a '_path' or '_credentials' "
                                      "ending collide")
        seen.setdefault(variable, where)
        texts.setdefault(variable, raw)


def _serving_checks(doc: Document, base: FieldPath, stage: p.PipelineStage) -> Iterator[Diagnostic]:
    serving = stage.serving
    if serving is None:
        return
    if stage.type != "Deployment":
        yield doc.diagnostic(base + ("serving",), "only Deployment stages serve", key=True,
                             hint="remove serving, or make the stage a Deployment")
        return
    metric = serving.metric
    if metric is None:
        return
    custom = metric.name not in (None, "cpu")
    target = base + ("serving", "metric", "target")
    if custom and metric.target is None:
        yield doc.diagnostic(base + ("serving", "metric"),
                             f"custom metric '{metric.name}' needs a target",
                             hint="add target: the average value per pod to scale at, such as 100")
    elif custom:
        yield from quantity_check(doc, target, metric.target, cpu_millis, MAX_CPU_MILLIS)
    elif metric.target is not None and (isinstance(metric.target, bool) or not isinstance(metric.target, int)
                                        or not 0 < metric.target <= 1000):
        yield doc.diagnostic(target, f"expected a whole percentage of the CPU request, got "
                                     f"{describe(metric.target)}", hint="for example 70")


def _names_unique(doc: Document, base: FieldPath, items: Sequence[Any]) -> Iterator[Diagnostic]:
    seen: set[str] = set()
    for j, item in enumerate(items):
        if item.name in seen:
            yield doc.diagnostic(base + (j, "name"), f"duplicate name '{item.name}'")
        seen.add(item.name)


def _input_checks(doc: Document, path: FieldPath, item: p.StageInput, reader: str,
                  stages: Sequence[p.PipelineStage], index: dict[str, int]) -> Iterator[
        Diagnostic]:
    if (item.source is None) == (item.from_ is None):
        yield doc.diagnostic(path, "an input needs exactly one of 'source' or 'from'")
        return
    if item.from_ is None:
        return
    stage_name, _, output = item.from_.split(".", 2)
    if stage_name == reader:
        yield doc.diagnostic(path + ("from",), "a stage cannot read its own output")
        return
    if stage_name not in index:
        yield doc.diagnostic(path + ("from",), f"no stage named '{stage_name}' in this pipeline",
                             hint=did_you_mean(stage_name, index))
        return
    outputs = [o.name for o in stages[index[stage_name]].outputs or []]
    if output not in outputs:
        hint = did_you_mean(output, outputs) or (
            f"its outputs: {', '.join(outputs)}" if outputs else "it declares no outputs")
        yield doc.diagnostic(path + ("from",), f"stage '{stage_name}' has no output '{output}'",
                             hint=hint)


def storage_secret_checks(policies: PolicySet) -> Iterator[Diagnostic]:
    """An input's or output's ``secretName`` must fit its URL's scheme, and one URL may not be
    named with two different Secrets in one namespace (one Fluid Dataset mounts it, and its
    writer and completion marker reach it, with one Secret)."""
    # (namespace, url) -> (secret, where: file, stage, "inputs" or "outputs", index)
    named: dict[tuple[str, str], tuple[str, tuple[str, int, str, int]]] = {}
    for pipeline in sorted(policies.pipelines, key=lambda pl: pl.doc.path):
        doc, stages = pipeline.doc, pipeline.obj.spec.stages
        outputs: dict[tuple[str, str], str] | None = None  # made for the first input naming a Secret
        namespace = pipeline_namespace(pipeline.obj)  # where its Datasets are rendered
        for i, stage in enumerate(stages):
            named_here: list[tuple[str, int, str | None, str]] = []
            for j, source in enumerate(stage.inputs or ()):
                if source.secretName is not None:
                    if outputs is None:
                        outputs = {(s.name, o.name): o.storage for s in stages for o in s.outputs or []}
                    named_here.append(("inputs", j, _input_url(source, outputs), source.secretName))
            named_here += [("outputs", j, o.storage, o.secretName) for j, o in enumerate(stage.outputs or ())
                           if o.secretName is not None]
            for kind, j, url, secret_name in named_here:
                if url is None:
                    continue
                path: FieldPath = ("spec", "stages", i, kind, j, "secretName")
                if url_scheme(url) not in STORAGE_CREDENTIAL_KEYS:
                    to = "Fluid" if kind == "inputs" else "the stage's containers"
                    yield doc.diagnostic(path, f"{url} takes no credentials fleetc can pass to {to}",
                                         hint="credentials are named for "
                                              f"{', '.join(s + '://' for s in sorted(STORAGE_CREDENTIAL_KEYS))}"
                                              " URLs; remove secretName")
                    continue
                secret, first = named.setdefault((namespace, url), (secret_name, (doc.path, i, kind, j)))
                if secret != secret_name:
                    verb = "read" if kind == "inputs" else "written"
                    yield doc.diagnostic(path, f"{url} is {verb} in namespace {namespace} with Secret "
                                               f"'{secret}' ({first[0]}: spec.stages[{first[1]}].{first[2]}"
                                               f"[{first[3]}]) and '{secret_name}' here; "
                                               "one Fluid Dataset mounts it, and its writers reach it, "
                                               "with one Secret",
                                         hint="name the same Secret wherever the URL is named")


def _input_url(item: p.StageInput, outputs: dict[tuple[str, str], str]) -> str | None:
    """The URL an input reads: its source, or the storage of the output its from: names."""
    if item.source is not None or item.from_ is None:
        return item.source
    producer, _, output = item.from_.partition(".outputs.")
    return outputs.get((producer, output))


def _cycle_check(doc: Document, stages: Sequence[p.PipelineStage],
                 index: dict[str, int]) -> Iterator[Diagnostic]:
    """Every dependency cycle, once each, found by a depth-first search on an explicit stack
    (a chain of any length, in any order, takes no recursion)."""
    graph = {s.name: [e for e in stage_edges(s) if e in index and e != s.name] for s in stages}
    done: set[str] = set()
    reported: set[frozenset[str]] = set()
    for stage in stages:
        if stage.name in done:
            continue
        trail = [stage.name]  # the current path; on_trail holds the same names
        on_trail = {stage.name}
        pending = [iter(graph[stage.name])]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                pending.pop()
                done.add(trail[-1])
                on_trail.discard(trail.pop())
            elif nxt in on_trail:
                cycle = trail[trail.index(nxt):] + [nxt]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    yield doc.diagnostic(("spec", "stages", index[nxt], "dependencies"),
                                         f"dependency cycle: {' -> '.join(cycle)}")
            elif nxt not in done:
                trail.append(nxt)
                on_trail.add(nxt)
                pending.append(iter(graph[nxt]))
