"""Validate stage: loaded documents -> typed policies, or every problem at once.

Two passes. The schema pass checks each document alone against its kind's JSON Schema (the one
committed under ``schemas/``) and turns each schema error into a compiler-style diagnostic. The
semantic pass checks what a schema cannot: names unique across documents, references that
resolve, dependency cycles, quantities and percentages in range, attributes that parse.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import ValidationError

from fleetc.credentials import credential_kind, looks_like
from fleetc.delivery import kustomization_names
from fleetc.errors import Diagnostic, did_you_mean
from fleetc.infra.collector import gc_paused
from fleetc.model import (
    ATTACHED_CLUSTER,
    KUEUE_CPU_FLAVOR,
    MAX_GPU_PRODUCT,
    RESERVED_GPU_TYPES,
    STORAGE_CREDENTIAL_KEYS,
    default_gpu_product,
    gpus_for_throughput,
    url_scheme,
)
from fleetc.nodefit import default_gpus_per_node
from fleetc.policy import kinds as p
from fleetc.policy.load import Document, FieldPath, scan
from fleetc.policy.quantity import cpu_millis, memory_bytes, parse_percentage
from fleetc.policy.regions import region_checks
from fleetc.policy.schemas import schema_for

if TYPE_CHECKING:  # jsonschema words the diagnostics of invalid documents: imported for those only
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError as SchemaError


class _Named(Protocol):
    """What every policy kind has: standard object metadata."""

    @property
    def metadata(self) -> p.ObjectMeta: ...


T = TypeVar("T", bound=_Named)

#: Quantities beyond these are typos, not clusters (and would overflow the solver's numbers).
MAX_CPU_MILLIS = 10**9  # one million cores
MAX_MEMORY_BYTES = 2**60  # 1Ei
MAX_GPU_COUNT = 1_000_000
BOOLEAN_ATTRIBUTES = ("low-latency", "edge-node", "low-power", "device-plugin-configured")
NETWORK_TIERS = ("high-performance", "standard", "low")


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
        obj, problems = _check_document(doc, finite=text is not None)
        diagnostics.extend(problems)
        if suspect:
            diagnostics.extend(credential_checks(doc))
        if obj is not None:
            parsed.append(Parsed(obj, doc, text))
        elif (named := _kind_and_name(doc.data)) is not None:
            invalid.add(named)
    policies = PolicySet(
        fleets=_of_kind(parsed, p.Fleet),
        pipelines=_of_kind(parsed, p.AIGCPipeline),
        platforms=_of_kind(parsed, p.AIGCPlatform),
        gpu_policies=_of_kind(parsed, p.GPUOptimizationPolicy),
        data_policies=_of_kind(parsed, p.DataOptimizationPolicy),
    )
    diagnostics.extend(semantic_checks(policies, frozenset(invalid)))
    return policies, diagnostics


def _kind_and_name(data: Any) -> tuple[str, str] | None:
    """The kind and name an invalid document says it has, when it says so."""
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    kind, name = data.get("kind"), data["metadata"].get("name")
    return (kind, name) if isinstance(kind, str) and isinstance(name, str) else None


def _of_kind(parsed: Iterable[Parsed[Any]], kind: type[T]) -> tuple[Parsed[T], ...]:
    return tuple(item for item in parsed if isinstance(item.obj, kind))


# --- schema pass -------------------------------------------------------------------------------


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator  # ~35 ms of import that valid documents never need
    from jsonschema.validators import extend

    full_match = extend(Draft202012Validator, {"pattern": _full_pattern})  # type: ignore[no-untyped-call]
    return full_match(schema_for(kind))  # type: ignore[no-any-return]


def _full_pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[SchemaError]:
    """The ``pattern`` keyword with the whole string matched: the schemas' patterns end in
    ``$``, which in Python also matches before a final newline (``'c2\\n'`` would pass as a
    name, as it does not in jsonschema-rs and in ECMA-262 regular expressions)."""
    from jsonschema.exceptions import ValidationError as SchemaError

    if validator.is_type(instance, "string") and not _anchored(pattern).search(instance):
        yield SchemaError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _anchored(pattern: str) -> re.Pattern[str]:
    """``pattern`` with a final ``$`` made ``\\Z`` (the end of the string, and only that)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@functools.cache
def _fast_validator(kind: str) -> Any:
    try:
        import jsonschema_rs
    except ImportError:  # pragma: no cover - a dependency; without it jsonschema does it all
        return None
    return jsonschema_rs.validator_for(schema_for(kind))


def _schema_valid(kind: str, data: Any) -> bool:
    """Whether ``data`` passes its kind's schema, by jsonschema-rs (about 40x faster than
    jsonschema). Only a document it rejects, or cannot read (integers beyond 64 bits), goes
    through jsonschema, whose errors the diagnostics are made of; where the two disagree on
    validity, jsonschema decides (its ``pattern`` is made a full match, as here)."""
    validator = _fast_validator(kind)
    if validator is None:
        return False
    try:
        return bool(validator.is_valid(data))
    except Exception:  # noqa: BLE001 - whatever it cannot read, jsonschema reads
        return False


def _check_document(doc: Document, *, finite: bool) -> tuple[p.PolicyObject | None,
                                                             list[Diagnostic]]:
    """Schema and model check of one document; ``finite``: it holds no NaN nor infinity."""
    data = doc.data
    if not isinstance(data, dict):
        # A string is not shown: a document of one string may be a whole file's text (a file
        # that is no policy, named by pipeline=FILE or planted under a policy folder).
        return None, [doc.diagnostic((), f"expected a policy object (a mapping), got "
                                         f"{'a string' if isinstance(data, str) else _describe(data)}")]
    kind_problem = _check_kind(doc, data)
    if kind_problem:
        return None, [kind_problem]
    kind = data["kind"]
    # JSON Schema's range checks are false for NaN, so they let it through: find it here.
    nan_paths = set() if finite else set(_nan_paths(data, ()))
    valid = not nan_paths and _schema_valid(kind, data)  # the fast check; errors come below
    errors = [] if valid else [e for e in _validator(kind).iter_errors(data)
                               if tuple(e.absolute_path) not in nan_paths]
    if errors or nan_paths:
        return None, [*(doc.diagnostic(path, "expected a number, got .nan (not a number)")
                        for path in sorted(nan_paths, key=str)),
                      *(d for e in errors for d in _translate(doc, e))]
    try:
        return p.KINDS[kind].model_validate(data), []
    except ValidationError as err:  # the schema and the models agree; this is a safety net
        return None, [doc.diagnostic(tuple(e["loc"]), e["msg"]) for e in err.errors()]


def _nan_paths(data: Any, path: FieldPath) -> Iterator[FieldPath]:
    if isinstance(data, float) and math.isnan(data):
        yield path
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _nan_paths(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _nan_paths(value, path + (i,))


def _check_kind(doc: Document, data: dict[str, Any]) -> Diagnostic | None:
    kind = data.get("kind")
    if kind is None:
        if set(data) == {"whatIf"}:  # fleetc's other YAML input, in the wrong folder
            return doc.diagnostic(("whatIf",), "a what-if scenario is not a policy", key=True,
                                  hint="keep scenario files out of the policy folders (e.g. in scenarios/) and "
                                       "run `fleetc diff --scenario FILE`")
        return doc.diagnostic(("kind",), "missing required field 'kind'",
                              hint=f"one of: {', '.join(sorted(p.KINDS))}")
    if not isinstance(kind, str) or kind not in p.KINDS:
        hint = did_you_mean(str(kind), p.KINDS) or f"fleetc reads: {', '.join(sorted(p.KINDS))}"
        return doc.diagnostic(("kind",), f"unknown kind {_describe(kind)}", hint=hint)
    expected = p.api_version(kind)
    version = data.get("apiVersion")
    if version != expected:
        got = "nothing" if version is None else _describe(version)
        return doc.diagnostic(("apiVersion",), f"expected '{expected}' for kind {kind}, got {got}")
    return None


_TYPE_NAMES = {
    "integer": "an integer", "number": "a number", "string": "a string",
    "boolean": "a boolean (true or false)", "object": "a mapping", "array": "a list",
    "null": "null",
}


def _describe(value: Any) -> str:
    """How a value reads in a message: strings quoted, unless shaped like a credential (never
    shown: a message reaches CI logs), containers by their kind."""
    if isinstance(value, str):
        if what := looks_like(value):
            return f"a value that looks like a credential ({what}; not shown)"
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _expected(error: SchemaError) -> str:
    schema = error.schema if isinstance(error.schema, dict) else {}
    if p.EXPECTED in schema:
        return str(schema[p.EXPECTED])
    types = schema.get("type")
    if isinstance(types, list):
        return " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in types)
    return _TYPE_NAMES.get(str(types), str(types))


def _translate(doc: Document, error: SchemaError) -> Iterator[Diagnostic]:
    """One jsonschema error -> the diagnostics a user should read."""
    path: FieldPath = tuple(error.absolute_path)
    # JSON values, set on every error jsonschema reports (its types also allow "unset")
    value: Any = error.instance
    rule: Any = error.validator_value  # the failing keyword's value in the schema
    kind = error.validator
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if kind == "additionalProperties":
        known = schema.get("properties", {})
        for key in sorted(set(value) - set(known)):
            hint = did_you_mean(key, known) or f"known fields: {', '.join(known)}"
            yield doc.diagnostic(path + (key,), f"unknown field '{key}'", hint=hint, key=True)
    elif kind == "required":
        for name in rule:
            if name not in value:
                yield doc.diagnostic(path + (name,), f"missing required field '{name}'")
    elif kind in ("type", "pattern", "maxLength", "minLength"):
        yield doc.diagnostic(path, f"expected {_expected(error)}, got {_describe(value)}")
    elif kind == "enum":
        choices = ", ".join(f"'{c}'" for c in rule)
        yield doc.diagnostic(path, f"expected one of {choices}, got {_describe(value)}",
                             hint=did_you_mean(str(value), map(str, rule)))
    elif kind == "const":
        yield doc.diagnostic(path, f"expected '{rule}', got {_describe(value)}")
    elif kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        sign = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
                "exclusiveMaximum": "<"}[kind]
        noun = "an integer" if schema.get("type") == "integer" else "a number"
        yield doc.diagnostic(path, f"expected {noun} {sign} {rule}, got "
                                   f"{_describe(value)}")
    elif kind == "minItems":
        yield doc.diagnostic(path, f"expected at least {rule} item(s), got "
                                   f"{len(value)}")
    elif kind == "maxItems":
        yield doc.diagnostic(path, f"expected at most {rule} item(s), got {len(value)}")
    else:
        yield doc.diagnostic(path, error.message)


# --- semantic pass -----------------------------------------------------------------------------


def semantic_checks(policies: PolicySet,
                    invalid: frozenset[tuple[str, str]] = frozenset()) -> list[Diagnostic]:
    """Cross-document checks; each check is a generator of diagnostics. ``invalid``: the (kind,
    name) of documents already reported invalid: a reference to one is no further error."""
    checks = [
        _unique_names(policies),
        _singletons(policies),
        _object_name_collisions(policies),
        *(_fleet_checks(f) for f in policies.fleets),
        *(_pipeline_checks(pl) for pl in policies.pipelines),
        _storage_secret_checks(policies),
        *(_platform_checks(pf, policies, invalid) for pf in policies.platforms),
        *(_gpu_policy_checks(g) for g in policies.gpu_policies),
        *(_data_policy_checks(d) for d in policies.data_policies),
        _serving_fit_checks(policies),
        _gpu_type_checks(policies),
        _throughput_checks(policies),
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


def _fleet_checks(fleet: Parsed[p.Fleet]) -> Iterator[Diagnostic]:
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
            yield from _quantity_check(doc, base + ("capacity", "cpu"), cluster.capacity.cpu,
                                       cpu_millis, MAX_CPU_MILLIS)
            yield from _quantity_check(doc, base + ("capacity", "memory"),
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
        yield doc.diagnostic(base + ("branch",), f"expected a git branch name, got {_describe(branch)}",
                             hint="a name git accepts (git check-ref-format --branch), such as main "
                                  "or release/2024-06; no spaces, '..', '~^:?*[\\' or template "
                                  "braces")
    path = gitops.path
    if path is not None:
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or _PATH_FORBIDDEN.search(path):
            yield doc.diagnostic(base + ("path",), f"expected a relative folder inside the repository, "
                                                   f"got {_describe(path)}",
                                 hint="a path such as out or deploy/fleet: no leading '/', no '..', "
                                      "no glob or template characters")
    url = gitops.repoURL
    if url is not None and (not url or _URL_FORBIDDEN.search(url)):
        yield doc.diagnostic(base + ("repoURL",), f"expected a git repository URL, got {_describe(url)}",
                             hint="no spaces, control characters or template braces")


def _attribute_checks(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[
        Diagnostic]:
    count = attributes.get("gpu-count")
    if count is not None:
        text = str(count).strip()
        if isinstance(count, bool) or not (text.isascii() and text.isdigit()):
            yield doc.diagnostic(base + ("gpu-count",),
                                 f"expected an integer, got {_describe(count)}")
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
            yield doc.diagnostic(base + (name,), f"expected a quantity, got {_describe(value)}",
                                 hint=f"the {example}, that one node offers")
        else:
            yield from _quantity_check(doc, base + (name,), value, convert, limit)
    for name in BOOLEAN_ATTRIBUTES:
        value = attributes.get(name)
        if value is not None and str(value).lower() not in ("true", "false"):
            yield doc.diagnostic(base + (name,),
                                 f"expected \"true\" or \"false\", got {_describe(value)}")
    tier = attributes.get("network-tier")
    if tier is not None and tier not in NETWORK_TIERS:
        yield doc.diagnostic(base + ("network-tier",),
                             f"expected one of {', '.join(NETWORK_TIERS)}, got {_describe(tier)}",
                             hint=did_you_mean(str(tier), NETWORK_TIERS))


def _gpu_type_label_checks(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[Diagnostic]:
    """``gpu-type`` is a label value, names no flavor fleetc renders for other resources, and
    implies (or ``gpu-product`` states) a product label that is one."""
    gpu_type = attributes.get("gpu-type")
    if gpu_type is None:
        return
    if not _label_value(str(gpu_type)):
        yield doc.diagnostic(base + ("gpu-type",), f"expected a GPU type that is a Kubernetes label "
                                                   f"value, such as a100, got {_describe(gpu_type)}")
    elif str(gpu_type).lower().replace("_", "-") in RESERVED_GPU_TYPES:
        yield doc.diagnostic(base + ("gpu-type",), f"GPU type {_describe(gpu_type)} is reserved: its Kueue "
                                                   f"ResourceFlavor would be {KUEUE_CPU_FLAVOR}, the one for CPU "
                                                   "and memory", hint="name the GPU model, e.g. a100")
    else:
        yield from _gpu_product_check(doc, base, attributes, str(gpu_type).lower())


def _label_value(text: str, limit: int = 63) -> bool:
    return len(text) <= limit and _anchored(p.NONEMPTY_LABEL_VALUE_PATTERN).search(text) is not None


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
                                                       f"{_describe(default)}, more than {MAX_GPU_PRODUCT} "
                                                       "characters (with -SHARED for time-sliced GPUs, "
                                                       "a label value's 63)",
                                 hint="shorten the GPU type, or state the label as attribute gpu-product")
    elif not _label_value(str(product), MAX_GPU_PRODUCT):
        yield doc.diagnostic(base + ("gpu-product",), f"expected the nodes' nvidia.com/gpu.product label: a "
                                                      f"Kubernetes label value ({p.LABEL_VALUE_WORDS}) of at most "
                                                      f"{MAX_GPU_PRODUCT} characters (-SHARED is appended for "
                                                      f"time-sliced GPUs), got {_describe(product)}",
                             hint="the label GPU feature discovery gives the nodes, e.g. NVIDIA-A100-SXM4-40GB")


def _whole(value: Any) -> int | None:
    """An attribute's value as a non-negative integer, or None when it is not one."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 7:
        return None
    return int(text)


def _gpus_per_node_check(doc: Document, base: FieldPath, attributes: dict[str, Any]) -> Iterator[
        Diagnostic]:
    """``gpus-per-node``: a positive integer that divides ``gpu-count`` (whole nodes)."""
    value = attributes.get("gpus-per-node")
    if value is None:
        return
    per_node, count = _whole(value), _whole(attributes.get("gpu-count", 0))
    if not per_node:
        yield doc.diagnostic(base + ("gpus-per-node",),
                             f"expected a positive integer, got {_describe(value)}")
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
                                 f"{name} {_describe(value)} is more than the whole cluster's "
                                 f"capacity.{field} {_describe(total)}",
                                 hint=f"state what one node offers in {name}, and all the nodes "
                                      f"together in capacity.{field}")


def fleet_gpu_types(fleet: p.Fleet) -> list[str]:
    """The GPU types of the Fleet's clusters, sorted: each cluster's ``gpu-type`` unless its
    ``gpu-count`` is 0 (one that does not parse counts: its own error says so, and the stages
    asking for the type would only repeat it)."""
    return sorted({str(attributes["gpu-type"]).lower() for cluster in fleet.spec.clusters
                   if "gpu-type" in (attributes := cluster.attributes or {})
                   and _whole(attributes.get("gpu-count", 0)) != 0})


def node_sizes(fleet: p.Fleet) -> list[tuple[str, str, int]]:
    """(cluster, gpu type, GPUs per node) of every GPU cluster whose attributes parse."""
    found = []
    for cluster in fleet.spec.clusters:
        attributes = cluster.attributes or {}
        count = _whole(attributes.get("gpu-count", 0))
        if not count or "gpu-type" not in attributes:
            continue
        per_node = _whole(attributes.get("gpus-per-node", default_gpus_per_node(count)))
        if per_node:
            found.append((cluster.name, str(attributes["gpu-type"]).lower(), per_node))
    return found


def _serving_fit_checks(policies: PolicySet) -> Iterator[Diagnostic]:
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
            if stage.type != "Deployment" or res is None or not (res.gpu or res.throughput):
                continue
            wanted = res.gpu_types()
            fits = [(-n, c, asked, t) for t, (n, c) in largest.items() if (not wanted or t in wanted)
                    and (asked := _serving_gpus(res, t, throughput)) is not None]
            if fits and all(node < asked for node, _, asked, _ in fits):
                node, cluster, asked, gpu_type = min(fits, key=lambda f: (-f[0], f[1]))
                field = "gpu" if res.throughput is None else "throughput"
                most = (f"{node} GPUs" if res.throughput is None
                        else f"a throughput of {node * throughput[gpu_type]:g} ({node} {gpu_type})")
                yield pipeline.doc.diagnostic(
                    ("spec", "stages", i, "resources", field),
                    f"a serving replica is one pod and cannot be split over nodes: {asked} GPUs "
                    f"per replica, but the largest node it may run on (cluster {cluster}) carries {node}",
                    hint=f"ask for at most {most} per replica"
                         + ("" if wanted else ", or set gpuType to a type with larger nodes"))


def _gpu_type_checks(policies: PolicySet) -> Iterator[Diagnostic]:
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


def _throughput_checks(policies: PolicySet) -> Iterator[Diagnostic]:
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
            res = stage.resources
            if res is None or res.throughput is None:
                continue
            path = ("spec", "stages", i, "resources")
            if res.gpu is not None:
                yield pipeline.doc.diagnostic(path + ("throughput",), "give gpu or throughput, not both",
                                              hint="throughput lets the GPU count follow the cluster's GPU type; "
                                                   "gpu fixes it", key=True)
            elif fleet is not None and not stated:
                yield pipeline.doc.diagnostic(path + ("throughput",),
                                              f"Fleet '{fleet.name}' states no gpuThroughput", key=True,
                                              hint="state each GPU type's relative throughput in the Fleet's "
                                                   "spec.gpuThroughput (e.g. {h100: 2.0, a100: 1.0}), or ask for gpu")
            elif fleet is not None:
                for j, gpu_type in enumerate(res.gpu_types()):
                    if gpu_type not in stated and gpu_type in known:  # _gpu_type_checks words the rest
                        where = path + ("gpuType",) + ((j,) if isinstance(res.gpuType, list) else ())
                        yield pipeline.doc.diagnostic(
                            where, f"asks for throughput, but Fleet '{fleet.name}' states no throughput for "
                                   f"{gpu_type}", hint=f"add {gpu_type} to the Fleet's spec.gpuThroughput")


def _serving_gpus(res: p.StageResources, gpu_type: str, throughput: Mapping[str, float]) -> int | None:
    """GPUs one replica asks for on ``gpu_type``: ``gpu``, or for throughput the type's count
    (None where the Fleet states no throughput for the type: it never runs there)."""
    if res.throughput is None:
        return res.gpu
    if gpu_type not in throughput:
        return None
    return gpus_for_throughput(res.throughput, throughput[gpu_type])


def _quantity_check(doc: Document, path: FieldPath, value: Any, convert: Any,
                    limit: int) -> Iterator[Diagnostic]:
    if value is None:
        return
    try:
        amount = _amount(convert, value)
    except ValueError:
        yield doc.diagnostic(path, f"expected a finite, non-negative quantity, got "
                                   f"{_describe(value)}")
        return
    if amount > limit:
        yield doc.diagnostic(path, f"quantity {_describe(value)} is out of range")
    elif amount == 0:
        yield doc.diagnostic(path, f"expected a positive quantity, got {_describe(value)}")


@functools.lru_cache(maxsize=4096, typed=True)
def _amount(convert: Callable[[Any], int], value: Any) -> int:
    """``convert(value)``, remembered: a large fleet repeats the same few quantities."""
    return convert(value)


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


def pipeline_namespace(pipeline: p.AIGCPipeline) -> str:
    """The namespace a pipeline's workloads run in: its own, else one named after it."""
    return pipeline.metadata.namespace or pipeline.metadata.name


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


def _pipeline_checks(pipeline: Parsed[p.AIGCPipeline]) -> Iterator[Diagnostic]:
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
                                                f"{_describe(stage.image)}",
                             hint="such as nvcr.io/nvidia/pytorch:24.05-py3 or registry:5000/team/app@sha256:...")
    for j, dep in enumerate(stage.dependencies or []):
        if dep == stage.name:
            yield doc.diagnostic(base + ("dependencies", j), "a stage cannot depend on itself")
        elif dep not in index:
            yield doc.diagnostic(base + ("dependencies", j), f"no stage named '{dep}' in this "
                                 "pipeline", hint=did_you_mean(dep, index))
    if len(stage.inputs or ()) > 1 or len(stage.outputs or ()) > 1:  # a name twice needs two (most have one)
        yield from _names_unique(doc, base + ("inputs",), stage.inputs or [])
        yield from _names_unique(doc, base + ("outputs",), stage.outputs or [])
        yield from _env_names_distinct(doc, base, stage)
    for j, item in enumerate(stage.inputs or []):
        yield from _input_checks(doc, base + ("inputs", j), item, stage.name, stages, index)
    resources = stage.resources
    if resources:
        yield from _quantity_check(doc, base + ("resources", "cpu"), resources.cpu,
                                   cpu_millis, MAX_CPU_MILLIS)
        yield from _quantity_check(doc, base + ("resources", "memory"), resources.memory,
                                   memory_bytes, MAX_MEMORY_BYTES)
        if resources.gpu == 0 and resources.gpuType:
            yield doc.diagnostic(base + ("resources", "gpuType"), "gpuType set but gpu is 0",
                                 hint="remove gpuType, or ask for at least one GPU")
        if resources.sharedGPU and stage.type in ("Training", "Finetuning"):
            yield doc.diagnostic(base + ("resources", "sharedGPU"),
                                 f"{stage.type} stages get exclusive GPUs",
                                 hint="remove sharedGPU; GPU sharing is for serving and "
                                      "evaluation")
    deployment = stage.type == "Deployment"
    yield from _serving_checks(doc, base, stage)
    if stage.minReplicasPerCluster is not None:
        if not deployment:
            yield doc.diagnostic(base + ("minReplicasPerCluster",),
                                 "only Deployment stages split replicas across clusters",
                                 key=True)
        elif stage.minReplicasPerCluster > (stage.replicas or 2):
            yield doc.diagnostic(base + ("minReplicasPerCluster",),
                                 f"greater than replicas ({stage.replicas or 2})")


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
        yield from _quantity_check(doc, target, metric.target, cpu_millis, MAX_CPU_MILLIS)
    elif metric.target is not None and (isinstance(metric.target, bool) or not isinstance(metric.target, int)
                                        or not 0 < metric.target <= 1000):
        yield doc.diagnostic(target, f"expected a whole percentage of the CPU request, got "
                                     f"{_describe(metric.target)}", hint="for example 70")


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


def _storage_secret_checks(policies: PolicySet) -> Iterator[Diagnostic]:
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


def stage_edges(stage: p.PipelineStage) -> list[str]:
    """The stages this stage waits for: its dependencies and the producers of its inputs."""
    edges = list(stage.dependencies or [])
    for item in stage.inputs or []:
        if item.from_:
            producer = item.from_.split(".", 1)[0]
            if producer not in edges:
                edges.append(producer)
    return edges


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


def _platform_checks(platform: Parsed[p.AIGCPlatform], policies: PolicySet,
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


def team_pipelines(team: p.Team, pipelines: Iterable[Parsed[p.AIGCPipeline]]) -> list[str]:
    """Names of the ``pipelines`` that belong to ``team``: their namespace is one of its
    ``namespaces``, or their labels carry all of its ``pipelineSelector`` (an empty selector
    selects none)."""
    namespaces = set(team.namespaces or [])
    selector = team.pipelineSelector or {}
    return [pl.name for pl in pipelines
            if pipeline_namespace(pl.obj) in namespaces
            or (selector and all((pl.obj.metadata.labels or {}).get(k) == v for k, v in selector.items()))]


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
        for field in ("gpuQuota", "guaranteed"):
            for gpu_type in getattr(team, field) or {}:
                if policies.fleets and gpu_type.lower() not in fleet_types:
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
        for name in team_pipelines(team, pipelines):
            if name in owner:
                yield doc.diagnostic(base, f"pipeline '{name}' belongs to teams '{owner[name]}' and "
                                           f"'{team.name}'; a pipeline belongs to at most one team",
                                     hint="narrow the teams' namespaces or pipelineSelector")
            owner.setdefault(name, team.name)


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


def governed(platform: Parsed[p.AIGCPlatform], policies: PolicySet) -> list[str]:
    """Names of the pipelines a platform governs: those it lists, else all of them."""
    listed = platform.obj.spec.pipelines
    return list(listed) if listed is not None else [pl.name for pl in policies.pipelines]


def sovereign_pipelines(policies: PolicySet) -> frozenset[str]:
    """Names of the pipelines a platform with ``security.dataSovereignty`` governs."""
    return frozenset(name for pf in policies.platforms
                     if pf.obj.spec.security and pf.obj.spec.security.dataSovereignty
                     for name in governed(pf, policies))


def _gpu_policy_checks(gpu: Parsed[p.GPUOptimizationPolicy]) -> Iterator[Diagnostic]:
    memory = gpu.obj.spec.memoryManagement
    if memory and memory.defragmentThreshold is not None:
        if parse_percentage(memory.defragmentThreshold) > 1:
            yield gpu.doc.diagnostic(("spec", "memoryManagement", "defragmentThreshold"),
                                     f"expected a percentage from 0% to 100%, got "
                                     f"'{memory.defragmentThreshold}'")


def _data_policy_checks(data: Parsed[p.DataOptimizationPolicy]) -> Iterator[Diagnostic]:
    caching = data.obj.spec.caching
    if caching:
        yield from _quantity_check(data.doc, ("spec", "caching", "size"), caching.size,
                                   memory_bytes, MAX_MEMORY_BYTES)


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
