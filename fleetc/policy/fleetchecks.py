"""Semantic checks of the Fleet: clusters (names, regions, attributes, node sizes, quantities),
its GitOps settings, and the names Kurator would make of them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from fleetc.delivery import kustomization_names
from fleetc.errors import Diagnostic, did_you_mean
from fleetc.model import (
    ATTACHED_CLUSTER,
    KUEUE_CPU_FLAVOR,
    MAX_GPU_PRODUCT,
    RESERVED_GPU_TYPES,
    default_gpu_product,
)
from fleetc.policy import kinds as p
from fleetc.policy.checking import (
    BOOLEAN_ATTRIBUTES,
    MAX_CPU_MILLIS,
    MAX_GPU_COUNT,
    MAX_MEMORY_BYTES,
    NETWORK_TIERS,
    describe,
    quantity_check,
)
from fleetc.policy.load import Document, FieldPath
from fleetc.policy.policyset import Parsed, whole_number
from fleetc.policy.quantity import cpu_millis, memory_bytes
from fleetc.policy.schemacheck import anchored


def fleet_checks(fleet: Parsed[p.Fleet]) -> Iterator[Diagnostic]:
    doc, spec = fleet.doc, fleet.obj.spec
    seen: dict[str, int] = {}
    for i, cluster in enumerate(spec.clusters):
        base: FieldPath = ("spec", "clusters", i)
        if cluster.name in seen:
            yield doc.diagnostic(base + ("name",), f"duplicate cluster name '{cluster.name}' "
                                                   f"(also spec.clusters[{seen[cluster.name]}])")
        seen.setdefault(cluster.name, i)
        derived = cluster.region.split("-", 1)[0]
        mapped = cluster.region in (spec.regionJurisdictions or {})
        if cluster.jurisdiction is None and not mapped and not _is_label_value(derived):
            yield doc.diagnostic(base + ("region",), f"the jurisdiction derived from region {cluster.region!r} "
                                                     f"({derived!r}) is not a Kubernetes label value, which it "
                                                     "must be (it labels namespaces)",
                                 hint="set jurisdiction: (or map the region in spec.regionJurisdictions) to "
                                      "a label value (letters, digits, '-', '_', '.', at most 63 characters), "
                                      "e.g. jurisdiction: eu")
        yield from _attribute_checks(doc, base + ("attributes",), cluster.attributes or {})
        if cluster.capacity:
            yield from quantity_check(doc, base + ("capacity", "cpu"), cluster.capacity.cpu,
                                       cpu_millis, MAX_CPU_MILLIS)
            yield from quantity_check(doc, base + ("capacity", "memory"),
                                       cluster.capacity.memory, memory_bytes, MAX_MEMORY_BYTES)
            yield from _node_above_cluster(doc, base, cluster)
    if spec.gitops:
        yield from _gitops_checks(doc, spec.gitops)
        if "kurator" in (spec.gitops.entryPoints or ()):
            yield from _kurator_name_checks(doc, spec.clusters)
    weights = spec.aigcConfig
    if weights and all(w == 0 for w in (weights.trainingWeight, weights.inferenceWeight,
                                        weights.finetuningWeight)):
        yield doc.diagnostic(("spec", "aigcConfig"), "all class weights are 0",
                             hint="give at least one workload class a positive weight")
    score = spec.scoreWeights
    if score and all(getattr(score, f) == 0 for f in ("compute", "cost", "network", "energy")):
        yield doc.diagnostic(("spec", "scoreWeights"), "all score weights are 0",
                             hint="give at least one score term a positive weight")


def _kurator_name_checks(doc: Document, clusters: Sequence[p.FleetCluster]) -> Iterator[Diagnostic]:
    """Kurator cuts the names of the Kustomizations it makes to 63 characters
    (:func:`fleetc.delivery.kustomization_name`): two long cluster names alike in their
    first characters would share them, and one cluster would be delivered the other's folder."""
    first: dict[str, int] = {}
    for i, cluster in enumerate(clusters):
        for name in kustomization_names(cluster.name, cluster.kind or ATTACHED_CLUSTER).values():
            j = first.setdefault(name, i)
            if j != i and clusters[j].name != cluster.name:  # a duplicate name is reported as such
                yield doc.diagnostic(("spec", "clusters", i, "name"),
                                     f"cluster '{cluster.name}' and cluster '{clusters[j].name}' "
                                     f"(spec.clusters[{j}]) would share the Kustomization '{name}' that "
                                     "Kurator makes for the kurator entry point (it cuts names to 63 "
                                     "characters)", hint="shorten one of the cluster names")
                break


def _is_label_value(text: str) -> bool:
    return len(text) <= 63 and re.fullmatch(p.LABEL_VALUE_PATTERN, text) is not None


#: What git refuses in a branch name (git check-ref-format), and template braces: Argo CD's
#: ApplicationSet renders its template with goTemplate, so ``{{ ... }}`` would be evaluated.
_BRANCH_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\{}]|\.\.|@\{|//|/\.|^[-/.]|[/.]\Z|\.lock(?:/|\Z)")


#: A folder inside the repository: relative, no '..', no glob or template characters (the
#: ApplicationSet's goTemplate names ``<path>/clusters/{{.cluster}}``; a glob in a path is
#: never what a reader of the repository expects).
_PATH_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f*?\[\]{}\\]")


_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f{}]")


def _gitops_checks(doc: Document, gitops: p.GitOps) -> Iterator[Diagnostic]:
    base: FieldPath = ("spec", "gitops")
    branch = gitops.branch
    if branch is not None and (branch in ("", "@", "HEAD") or _BRANCH_FORBIDDEN.search(branch)):
        yield doc.diagnostic(base + ("branch",), f"expected a git branch name, got {describe(branch)}",
                             hint="a name git accepts (git check-ref-format --branch), such as main "
                                  "or release/2024-06; no spaces, '..', '~^:?*[\\' or template "
                                  "braces")
    path = gitops.path
    if path is not None:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or _PATH_FORBIDDEN.search(path):
            yield doc.diagnostic(base + ("path",), f"expected a relative folder inside the repository, "
                                                   f"got {describe(path)}",
                                 hint="a path such as out or deploy/fleet: no leading '/', no '..', "
                                      "no glob or template characters")
    url = gitops.repoURL
    if url is not None and (not url or _URL_FORBIDDEN.search(url)):
        yield doc.diagnostic(base + ("repoURL",), f"expected a git repository URL, got {describe(url)}",
                             hint="no spaces, control characters or template braces")


def _attribute_checks(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[
        Diagnostic]:
    count = attributes.get("gpu-count")
    if count is not None:
        text = str(count).strip()
        if isinstance(count, bool) or not (text.isascii() and text.isdigit()):
            yield doc.diagnostic(base + ("gpu-count",),
                                 f"expected an integer, got {describe(count)}")
        elif len(text) > 7 or int(text) > MAX_GPU_COUNT:
            yield doc.diagnostic(base + ("gpu-count",),
                                 f"expected at most {MAX_GPU_COUNT} GPUs, got {text}")
        elif int(text) > 0 and "gpu-type" not in attributes:
            yield doc.diagnostic(base + ("gpu-count",), "gpu-count without gpu-type",
                                 hint="add attribute gpu-type (for example a100)")
    elif "gpu-type" in attributes:
        yield doc.diagnostic(base + ("gpu-type",), "gpu-type without gpu-count",
                             hint="add attribute gpu-count (the number of GPUs)")
    yield from _gpu_type_label_checks(doc, base, attributes)
    yield from _gpus_per_node_check(doc, base, attributes)
    for name, convert, limit, example in (("cpu-per-node", cpu_millis, MAX_CPU_MILLIS, "cores, e.g. 96"),
                                          ("memory-per-node", memory_bytes, MAX_MEMORY_BYTES, "memory, e.g. 1Ti")):
        value = attributes.get(name)
        if isinstance(value, bool):
            yield doc.diagnostic(base + (name,), f"expected a quantity, got {describe(value)}",
                                 hint=f"the {example}, that one node offers")
        else:
            yield from quantity_check(doc, base + (name,), value, convert, limit)
    for name in BOOLEAN_ATTRIBUTES:
        value = attributes.get(name)
        if value is not None and str(value).lower() not in ("true", "false"):
            yield doc.diagnostic(base + (name,),
                                 f"expected \"true\" or \"false\", got {describe(value)}")
    tier = attributes.get("network-tier")
    if tier is not None and tier not in NETWORK_TIERS:
        yield doc.diagnostic(base + ("network-tier",),
                             f"expected one of {', '.join(NETWORK_TIERS)}, got {describe(tier)}",
                             hint=did_you_mean(str(tier), NETWORK_TIERS))


def _gpu_type_label_checks(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[Diagnostic]:
    """``gpu-type`` is a label value, names no flavor fleetc renders for other resources, and
    implies (or ``gpu-product`` states) a product label that is one."""
    gpu_type = attributes.get("gpu-type")
    if gpu_type is None:
        return
    if not _label_value(str(gpu_type)):
        yield doc.diagnostic(base + ("gpu-type",), f"expected a GPU type that is a Kubernetes label "
                                                   f"value, such as a100, got {describe(gpu_type)}")
    elif str(gpu_type).lower().replace("_", "-") in RESERVED_GPU_TYPES:
        yield doc.diagnostic(base + ("gpu-type",), f"GPU type {describe(gpu_type)} is reserved: its Kueue "
                                                   f"ResourceFlavor would be {KUEUE_CPU_FLAVOR}, the one for CPU "
                                                   "and memory", hint="name the GPU model, e.g. a100")
    else:
        yield from _gpu_product_check(doc, base, attributes, str(gpu_type).lower())


def _label_value(text: str, limit: int = 63) -> bool:
    return len(text) <= limit and anchored(p.NONEMPTY_LABEL_VALUE_PATTERN).search(text) is not None


def _gpu_product_check(doc: Document, base: FieldPath, attributes: dict[str, Any], gpu_type: str) -> Iterator[
        Diagnostic]:
    """The ``nvidia.com/gpu.product`` label the cluster's GPU pods select (its ``gpu-product``,
    else the one its GPU type implies) is a label value, also with ``-SHARED`` appended (the
    time-sliced nodes'): a manifest that selects an invalid label is refused on apply."""
    product = attributes.get("gpu-product")
    if product is None:
        default = default_gpu_product(gpu_type)
        if not _label_value(default, MAX_GPU_PRODUCT):
            yield doc.diagnostic(base + ("gpu-type",), f"its nodes' label nvidia.com/gpu.product would be "
                                                       f"{describe(default)}, more than {MAX_GPU_PRODUCT} "
                                                       "characters (with -SHARED for time-sliced GPUs, "
                                                       "a label value's 63)",
                                 hint="shorten the GPU type, or state the label as attribute gpu-product")
    elif not _label_value(str(product), MAX_GPU_PRODUCT):
        yield doc.diagnostic(base + ("gpu-product",), f"expected the nodes' nvidia.com/gpu.product label: a "
                                                      f"Kubernetes label value ({p.LABEL_VALUE_WORDS}) of at most "
                                                      f"{MAX_GPU_PRODUCT} characters (-SHARED is appended for "
                                                      f"time-sliced GPUs), got {describe(product)}",
                             hint="the label GPU feature discovery gives the nodes, e.g. NVIDIA-A100-SXM4-40GB")


def _gpus_per_node_check(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[
        Diagnostic]:
    """``gpus-per-node``: a positive integer that divides ``gpu-count`` (whole nodes)."""
    value = attributes.get("gpus-per-node")
    if value is None:
        return
    per_node, count = whole_number(value), whole_number(attributes.get("gpu-count", 0))
    if not per_node:
        yield doc.diagnostic(base + ("gpus-per-node",),
                             f"expected a positive integer, got {describe(value)}")
    elif count is not None and count % per_node:
        yield doc.diagnostic(base + ("gpus-per-node",),
                             f"gpu-count {count} is not a whole number of nodes of {per_node} GPUs",
                             hint="state the GPUs one node carries; gpu-count must be a multiple of it")


def _node_above_cluster(doc: Document, base: FieldPath, cluster: p.FleetCluster) -> Iterator[Diagnostic]:
    """``cpu-per-node`` / ``memory-per-node`` no more than the cluster's stated capacity: one
    node cannot offer more than the whole cluster."""
    attributes = cluster.attributes or {}
    capacity = cluster.capacity or p.ClusterCapacity()
    for name, total, field, convert in (("cpu-per-node", capacity.cpu, "cpu", cpu_millis),
                                        ("memory-per-node", capacity.memory, "memory", memory_bytes)):
        value = attributes.get(name)
        if value is None or total is None or isinstance(value, bool):
            continue
        try:
            node, whole = convert(value), convert(total)
        except ValueError:
            continue  # reported by the quantity checks
        if node > whole:
            yield doc.diagnostic(base + ("attributes", name),
                                 f"{name} {describe(value)} is more than the whole cluster's "
                                 f"capacity.{field} {describe(total)}",
                                 hint=f"state what one node offers in {name}, and all the nodes "
                                      f"together in capacity.{field}")
