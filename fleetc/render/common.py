"""What every renderer module shares: names, labels, provenance, quantities, file layout."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import SplitResult, urlsplit

from fleetc.errors import Diagnostic, FleetcError, InternalError, PolicyError
from fleetc.model import Source, Stage
from fleetc.render.yamlout import dump

Obj = dict[str, Any]

MANAGED_BY = {"app.kubernetes.io/managed-by": "fleetc"}
SOURCE_ANNOTATION = "fleetc.dev/source"
#: The label of a release Job and its pods (:mod:`fleetc.render.release`): its stage's labels and this.
ROLE_LABEL = "fleetc.dev/role"
RELEASE_ROLE = "release"
GPU_RESOURCE = "nvidia.com/gpu"

#: Argo CD applies objects wave by wave (lowest first), each wave only once the previous one is
#: healthy (gitops-engine ``pkg/sync/sync_context.go``); see :mod:`.gitops`.
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
#: Argo CD's per-object sync options, comma separated.
ARGO_SYNC_OPTIONS = "argocd.argoproj.io/sync-options"

_GI = 1024**3
_MI = 1024**2
#: A DNS-1123 / DNS-1035 label, a label value, a pod hostname: at most 63 characters.
MAX_NAME = 63
#: Helm release names (Fluid installs every runtime, and every DataLoad, as a Helm release).
MAX_HELM_RELEASE = 53
_NAME_HASH_LEN = 8
_SLUG_UNSAFE = re.compile(r"[^a-z0-9]+")


# --------------------------------------------------------------------------- URLs
@functools.lru_cache(maxsize=1 << 16)
def split_url(url: str) -> SplitResult:
    """:func:`urllib.parse.urlsplit`, cached (an immutable result): a large fleet's stages name
    a few thousand URLs, split again for every object, marker and warning that reads one."""
    return urlsplit(url)


# --------------------------------------------------------------------------- names, labels
def digest(text: str, length: int = _NAME_HASH_LEN) -> str:
    """The first ``length`` hex digits of sha256(text): the hash in every shortened name."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def shorten(name: str, limit: int = MAX_NAME) -> str:
    """``name`` when it has at most ``limit`` characters, else its first ``limit - 9`` plus
    ``-<8 hex of sha256(name)>``: deterministic, and two long names that share a prefix still
    differ."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - _NAME_HASH_LEN - 1]}-{digest(name)}"


def dns_label(name: str) -> str:
    """``name`` when it fits in 63 characters, else cut to 54 plus ``-<8 hex of sha256>``."""
    return shorten(name, MAX_NAME)


def team_queue_name(team: str) -> str:
    """``fleetc-team-<team>``: the queue a team's gangs go to, on every cluster (Volcano Queue,
    Kueue ClusterQueue and LocalQueue), a label value (Kueue's queue-name label) at most 63
    characters long."""
    return dns_label(f"fleetc-team-{team}")


def dns1035_label(name: str, limit: int = MAX_NAME) -> str:
    """A DNS-1035 label (what Services need: it starts with a letter) of at most ``limit``
    characters: ``name`` shortened, with ``x-`` in front when it starts with a digit
    (``2024-chat-serve`` -> ``x-2024-chat-serve``)."""
    return shorten(name if name[:1].isalpha() else f"x-{name}", limit)


def hashed_slug(prefix: str, text: str, limit: int = MAX_NAME) -> str:
    """A stable DNS label of at most ``limit`` characters for free text (a URL):
    ``<prefix>-<slug>-<8 hex>``. The hash is always there, so two texts that slug alike
    (``a/b``, ``a-b``) never share a name."""
    slug = _SLUG_UNSAFE.sub("-", text.lower()).strip("-")
    room = limit - len(prefix) - _NAME_HASH_LEN - 2
    return "-".join(p for p in (prefix, slug[:room].strip("-"), digest(text)) if p)


def content_name(base: str, content: object, limit: int = MAX_NAME) -> str:
    """``<base>-<8 hex of sha256 of content>``, a DNS-1035 label of at most ``limit``
    characters (``base`` shortened to make room). For objects Kubernetes will not update in
    place (a Volcano Job's spec is immutable): a new content is a new object, the same content
    keeps its name byte for byte. ``content`` is hashed as canonical JSON (sorted keys)."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      check_circular=False)  # the same text; rendered objects hold no cycles
    return f"{dns1035_label(base, limit - _NAME_HASH_LEN - 1)}-{digest(text)}"


def object_name(stage: Stage) -> str:
    """``<pipeline>-<stage>``, cut to 54 characters plus ``-<8 hex of sha256>`` past 63."""
    return dns_label(f"{stage.pipeline}-{stage.name}")


def selector(stage: Stage) -> dict[str, str]:
    """The labels that identify a stage's pods (stable: Deployment selectors are immutable)."""
    return {"fleetc.dev/pipeline": dns_label(stage.pipeline), "fleetc.dev/stage": dns_label(stage.name)}


def stage_labels(stage: Stage) -> dict[str, str]:
    """Labels on every object (and pod template) that belongs to one stage."""
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": dns_label(stage.name),
        "app.kubernetes.io/part-of": dns_label(stage.pipeline),
        **selector(stage),
    }


def provenance(source: Source, field: str | None = None) -> dict[str, str]:
    """The ``fleetc.dev/source`` annotation: policy file and field path (never a line number,
    so editing an unrelated line of a policy does not change every rendered object)."""
    return {SOURCE_ANNOTATION: f"{source.path}#{field or source.field}"}


def stage_metadata(stage: Stage) -> Obj:
    return {
        "name": object_name(stage),
        "namespace": stage.namespace,
        "labels": stage_labels(stage),
        "annotations": provenance(stage.source),
    }


#: What keeps an object on the cluster once it leaves fleetc's output: Argo CD skips its prune
#: (gitops-engine ``pkg/sync/sync_context.go``, sync option ``Prune=false``) and Flux's
#: kustomize-controller too (fluxcd/pkg ``ssa/manager_delete.go`` ``DeleteAll`` leaves an object
#: annotated ``kustomize.toolkit.fluxcd.io/prune: disabled``). On a Namespace: deleting it would
#: delete what the user put in it (the credential Secrets fleetc names but never renders).
NEVER_PRUNED = {ARGO_SYNC_OPTIONS: "Prune=false", "kustomize.toolkit.fluxcd.io/prune": "disabled"}


def metadata(name: str, namespace: str | None = None, source: Source | None = None,
             field: str | None = None) -> Obj:
    """Metadata of an object that is not a stage's: fleetc's label and, when one policy is its
    source, the provenance annotation."""
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(MANAGED_BY)
    if source is not None:
        meta["annotations"] = provenance(source, field)
    return meta


def warning(source: Source, field: str, message: str) -> Diagnostic:
    """A compile warning about one policy field (whole-file position: the model has no lines)."""
    return Diagnostic(source.path, 0, 0, field, message, severity="warning", document=source.document)


# --------------------------------------------------------------------------- quantities
def cpu_quantity(millis: int) -> str:
    """Whole cores as ``"16"``, anything else in millicores (``"500m"``)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(size: int) -> str:
    """``"64Gi"`` when a whole number of GiB, else ``"<n>Mi"``, else plain bytes."""
    if size % _GI == 0:
        return f"{size // _GI}Gi"
    if size % _MI == 0:
        return f"{size // _MI}Mi"
    return str(size)


def whole_gib(size: int) -> str:
    return f"{size // _GI}Gi"


# --------------------------------------------------------------------------- files
def file_name(obj: Obj) -> str:
    """``<kind>-<name>.yaml`` (cluster-scoped) or ``<kind>-<namespace>-<name>.yaml``."""
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(p for p in parts if p) + ".yaml"


def folder_files(folder: str, objects: Iterable[Obj]) -> dict[str, str]:
    """One file per object plus a kustomization.yaml listing them. Two objects of one name
    from two policy fields are a policy error (names are cut to fit, so two stages may end as
    one name: :func:`shorten`); from one, a bug."""
    files: dict[str, str] = {}
    made: dict[str, Obj] = {}
    for obj in objects:
        name = file_name(obj)
        if name in files:
            raise _clash(f"{folder}/{name}", made[name], obj)
        files[name], made[name] = dump(obj), obj
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    files["kustomization.yaml"] = dump(kustomization)
    return {f"{folder}/{name}": text for name, text in sorted(files.items())}


def _clash(path: str, first: Obj, second: Obj) -> FleetcError:
    """Two objects that would be one file: a :class:`PolicyError` at both policy fields they
    come from (``fleetc.dev/source``), an :class:`InternalError` when they come from one."""
    sources = [obj["metadata"].get("annotations", {}).get(SOURCE_ANNOTATION, "") for obj in (first, second)]
    if not all(sources) or sources[0] == sources[1]:
        return InternalError(f"two objects would both be written to {path}")
    meta = first["metadata"]
    where = f" in namespace '{meta['namespace']}'" if meta.get("namespace") else ""
    what = f"{first['kind']} '{meta['name']}'{where}"
    diagnostics = []
    for here, there in ((sources[0], sources[1]), (sources[1], sources[0])):
        file, _, field = here.partition("#")
        diagnostics.append(Diagnostic(file, 0, 0, field, f"renders {what}, as {there} does: their names are one "
                                                         f"once cut to fit Kubernetes' limits (out/{path})",
                                      hint="rename one of them (shorter names are never cut)"))
    return PolicyError(diagnostics)
