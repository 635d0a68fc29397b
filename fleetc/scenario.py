"""What-if scenarios for ``fleetc diff --what-if``: changes to the fleet that are not made to the
policies, only to one compile of them.

A scenario is a list of settings, from the command line or a scenario file (YAML: ``whatIf:`` a
list of the same strings; pipeline files relative to the scenario file):

* ``drain=CLUSTER``: the cluster is lost (as ``--drain``);
* ``gpus=CLUSTER=N`` or ``gpus=CLUSTER:TYPE=N``: the cluster has N GPUs (of TYPE: its GPU type
  changes too); CPU and memory the Fleet leaves to their defaults follow the GPU count;
* ``price=CLUSTER=X``: one GPU-hour on the cluster costs X;
* ``pipeline=FILE``: the pipeline(s) in FILE are added to the policies.

A repository keeps its scenarios in a folder of their own (``scenarios/`` beside ``policies/``:
a scenario is no policy, and the policy loader refuses one), read by :func:`read_paths`: every
``*.yaml``/``*.yml``/``*.json`` file under it is a scenario file or a pipeline file a scenario there adds;
anything else is an error that names it. ``fleetc diff --base REF --scenario scenarios`` reports
each scenario on the working tree below the diff (the pull-request comment).

Settings are parsed and checked against the Fleet here; a bad one is a usage error naming it, with
a hint. :func:`apply` is pure: it returns the Fleet with the changes made (a new object; the
policies are never written).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetc.errors import Diagnostic, PolicyError, UsageError, did_you_mean
from fleetc.model import MAX_GPU_PRODUCT, RESERVED_GPU_TYPES, default_gpu_product
from fleetc.policy import kinds as p
from fleetc.policy.checking import MAX_GPU_COUNT
from fleetc.policy.files import discover, display_path, read_source
from fleetc.policy.load import Document, load_sources
from fleetc.policy.policyset import Parsed, PolicySet

SETTINGS = ("drain=CLUSTER", "gpus=CLUSTER[:TYPE]=N", "price=CLUSTER=X", "pipeline=FILE")
_GPUS = re.compile(r"([^:=]+)(?::([^:=]+))?=([^=]*)")  # each used with fullmatch
_PRICE = re.compile(r"([^=]+)=([^=]*)")
_GPU_TYPE = re.compile(p.NONEMPTY_LABEL_VALUE_PATTERN)
MAX_PRICE = 1e6


@dataclass(frozen=True)
class GPUChange:
    cluster: str
    gpu_type: str | None  # None: the cluster's own type
    count: int


@dataclass(frozen=True)
class Scenario:
    settings: tuple[str, ...] = ()  # as given, for the report's title
    drain: tuple[str, ...] = ()
    gpus: tuple[GPUChange, ...] = ()
    prices: tuple[tuple[str, float], ...] = ()  # (cluster, GPU-hour price)
    pipelines: tuple[str, ...] = ()  # policy files to add, relative to the working folder
    file: str = ""  # the scenario file, as named ('' for --what-if settings)
    #: Where each setting was given, as messages name it: ``--what-if `` or
    #: ``scenarios/a.yaml:2:3: whatIf[0]: `` (one per setting; none: all ``--what-if``).
    origins: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "what-if " + " ".join(self.settings)

    def named(self, setting: str) -> str:
        """``setting`` as messages name it: with ``--what-if``, or its file, line and column."""
        i = self.settings.index(setting) if setting in self.settings else -1
        return (self.origins[i] if 0 <= i < len(self.origins) else "--what-if ") + setting


def _fail(named: str, problem: str, hint: str) -> UsageError:
    return UsageError(f"{named}: {problem}\n  hint: {hint}")


def parse(settings: Sequence[str], origin: str = "", *, file: str = "", origins: Sequence[str] = ()) -> Scenario:
    """The scenario the settings describe; ``origin``: the folder pipeline files are relative to
    ('' for the working folder); ``file`` and ``origins``: see :class:`Scenario`."""
    scenario = Scenario(settings=tuple(settings), file=file, origins=tuple(origins))
    for setting in settings:
        named = scenario.named(setting)
        name, sep, value = setting.partition("=")
        if not sep or name not in ("drain", "gpus", "price", "pipeline"):
            raise _fail(named, "not a what-if setting", f"give one of {', '.join(SETTINGS)}")
        if not value:
            raise _fail(named, "says nothing after '='", f"give {next(s for s in SETTINGS if s.startswith(name))}")
        if name == "drain":
            scenario = dataclasses.replace(scenario, drain=(*scenario.drain, value))
        elif name == "gpus":
            scenario = dataclasses.replace(scenario, gpus=(*scenario.gpus, _gpu_change(named, value)))
        elif name == "price":
            scenario = dataclasses.replace(scenario, prices=(*scenario.prices, _price(named, value)))
        else:
            scenario = dataclasses.replace(scenario, pipelines=(*scenario.pipelines,
                                                                str(Path(origin) / value) if origin else value))
    return scenario


def _gpu_change(named: str, value: str) -> GPUChange:
    match = _GPUS.fullmatch(value)
    if match is None:
        raise _fail(named, "expected gpus=CLUSTER=N or gpus=CLUSTER:TYPE=N", "for example gpus=gpu-east:a100=16")
    cluster, gpu_type, count = match.groups()
    if not (count.isascii() and count.isdigit()):
        raise _fail(named, f"expected a whole number of GPUs, got {count!r}", "for example gpus=gpu-east=16")
    if len(count.lstrip("0")) > len(str(MAX_GPU_COUNT)) or int(count) > MAX_GPU_COUNT:
        raise _fail(named, f"expected at most {MAX_GPU_COUNT} GPUs (a Fleet's gpu-count), got {count[:20]}"
                           f"{'...' if len(count) > 20 else ''}", "for example gpus=gpu-east=16")
    if gpu_type is not None and (not _GPU_TYPE.fullmatch(gpu_type)
                                 or gpu_type.lower().replace("_", "-") in RESERVED_GPU_TYPES):
        raise _fail(named, f"{gpu_type!r} is not a GPU type", "a Kubernetes label value such as a100 or h100")
    if gpu_type is not None and len(product := default_gpu_product(gpu_type.lower())) > MAX_GPU_PRODUCT:
        raise _fail(named, f"GPU type {gpu_type[:20]!r}... is too long: its nodes' label nvidia.com/gpu.product "
                           f"would be {len(product)} characters, more than {MAX_GPU_PRODUCT}",
                    "a GPU type such as a100 or h100")
    return GPUChange(cluster, gpu_type.lower() if gpu_type else None, int(count))


def _price(named: str, value: str) -> tuple[str, float]:
    match = _PRICE.fullmatch(value)
    if match is None:
        raise _fail(named, "expected price=CLUSTER=X", "for example price=gpu-east=2.5 (per GPU-hour)")
    cluster, text = match.groups()
    try:
        price = float(text)
    except ValueError:
        price = -1.0
    if not 0 <= price <= MAX_PRICE:
        raise _fail(named, f"expected a GPU-hour price from 0 to {MAX_PRICE:g}, got {text!r}",
                    "for example price=gpu-east=2.5")
    return cluster, price


def read_file(path: Path, shown: str) -> Scenario:
    """A scenario file: ``whatIf:`` a list of settings; pipeline files relative to its folder."""
    document = _document(path, shown)
    settings = document.data.get("whatIf") if _is_scenario(document) else None
    if not isinstance(settings, list) or not settings or not all(isinstance(s, str) for s in settings):
        raise UsageError(f"--scenario {shown}: expected one YAML document 'whatIf:' with a list of settings\n"
                         f"  hint: for example whatIf: [drain=gpu-east, \"gpus=gpu-west:a100=16\"]")
    origins = []
    for i in range(len(settings)):
        line, column = document.locate(("whatIf", i))
        origins.append(f"{shown}:{line}:{column}: whatIf[{i}]: ")
    return parse(settings, origin=str(Path(shown).parent) if Path(shown).parent != Path(".") else "",
                 file=shown, origins=origins)


def _document(path: Path, shown: str) -> Document:
    """The one YAML document of a file under a scenario path (a usage error otherwise)."""
    source = read_source(path, shown)  # as a policy file is read: a regular file, bounded in size
    if isinstance(source, Diagnostic):
        raise PolicyError([source])
    loaded = load_sources([source])
    if loaded.diagnostics:  # not YAML: reported as a policy file's would be
        raise PolicyError(loaded.diagnostics)
    documents = loaded.documents
    if len(documents) != 1:
        raise UsageError(f"--scenario {shown}: expected one YAML document 'whatIf:' with a list of settings, "
                         f"got {len(documents)} documents\n"
                         f"  hint: for example whatIf: [drain=gpu-east, \"gpus=gpu-west:a100=16\"]")
    return documents[0]


def _is_scenario(document: Document) -> bool:
    return isinstance(document.data, dict) and set(document.data) == {"whatIf"}


def read_paths(paths: Sequence[str], workdir: Path) -> tuple[Scenario, ...]:
    """The scenarios under ``paths`` (``--scenario``; relative to ``workdir``), in path order. A
    file named is a scenario file; a folder holds scenario files (``whatIf:``) and the pipeline
    files they add (``pipeline=``), found recursively as the policy loader finds files (hidden
    entries skipped, links followed inside the folder, a broken link an error). A file there
    that is neither is an error naming it, never skipped."""
    try:
        found = discover(paths, workdir)
    except UsageError as err:  # a path that does not exist
        raise UsageError(f"--scenario {err}") from None
    if found.problems:
        raise PolicyError(found.problems)
    named = {os.path.normpath(workdir / given) for given in paths}
    scenarios: list[Scenario] = []
    others: list[str] = []
    for path in found.files:
        shown = display_path(path, workdir)
        if os.path.normpath(path) in named or _is_scenario(_document(path, shown)):
            scenarios.append(read_file(path, shown))
        else:
            others.append(shown)
    added = {os.path.normpath(workdir / pipeline) for s in scenarios for pipeline in s.pipelines}
    for shown in others:
        if os.path.normpath(workdir / shown) not in added:
            raise UsageError(f"--scenario {shown}: neither a what-if scenario (one YAML document 'whatIf:') nor a "
                             "pipeline file a scenario there adds (pipeline=FILE)\n"
                             "  hint: keep only scenarios and the pipelines they add under a scenario folder")
    if not scenarios:
        raise UsageError(f"--scenario {', '.join(paths)}: no scenario file there (*.yaml, *.yml or *.json, "
                         "one YAML document 'whatIf:')")
    return tuple(scenarios)


def apply(policies: PolicySet, scenario: Scenario) -> PolicySet:
    """The policies with the scenario's GPU and price changes made to their Fleet (``drain`` and
    ``pipelines`` are the compile's: ``Options.drain`` and its paths)."""
    if not policies.fleets or not (scenario.gpus or scenario.prices or scenario.drain):
        return policies
    fleet = policies.fleets[0]
    clusters = list(fleet.obj.spec.clusters)
    index = {c.name: i for i, c in enumerate(clusters)}
    for name in scenario.drain:
        _known(scenario.named(f"drain={name}"), name, index, fleet)
    for change in scenario.gpus:
        setting = scenario.named(next(s for s in scenario.settings if s.startswith(f"gpus={change.cluster}")))
        i = _known(setting, change.cluster, index, fleet)
        clusters[i] = _with_gpus(setting, clusters[i], change)
    for cluster, price in scenario.prices:
        i = _known(scenario.named(next(s for s in scenario.settings if s.startswith(f"price={cluster}="))),
                   cluster, index, fleet)
        pricing = clusters[i].pricing or p.ClusterPricing()
        clusters[i] = clusters[i].model_copy(update={"pricing": pricing.model_copy(update={"gpuHour": price})})
    spec = fleet.obj.spec.model_copy(update={"clusters": clusters})
    changed = Parsed(fleet.obj.model_copy(update={"spec": spec}), fleet.doc)
    return dataclasses.replace(policies, fleets=(changed, *policies.fleets[1:]))


def _known(named: str, name: str, index: dict[str, int], fleet: Parsed[p.Fleet]) -> int:
    if name not in index:
        known = sorted(index)
        raise _fail(named, f"no cluster {name!r} in Fleet '{fleet.name}' ({fleet.doc.path})",
                    did_you_mean(name, known) or f"its clusters: {', '.join(known)}")
    return index[name]


def _with_gpus(named: str, cluster: p.FleetCluster, change: GPUChange) -> p.FleetCluster:
    attributes = dict(cluster.attributes or {})
    gpu_type = change.gpu_type or (str(attributes["gpu-type"]).lower() if "gpu-type" in attributes else None)
    if change.count and gpu_type is None:
        raise _fail(named, f"cluster {cluster.name!r} has no GPU type", f"name one: gpus={cluster.name}:a100="
                                                                          f"{change.count}")
    per_node = attributes.get("gpus-per-node")
    if change.count and per_node is not None and change.count % int(str(per_node)):
        raise _fail(named, f"cluster {cluster.name!r} carries {per_node} GPUs per node (gpus-per-node)",
                    f"give a multiple of {per_node}")
    attributes["gpu-count"] = str(change.count)
    if gpu_type is not None:
        if gpu_type != str(attributes.get("gpu-type", "")).lower():
            attributes.pop("gpu-product", None)  # another GPU's product label: the default for the type
        attributes["gpu-type"] = gpu_type
    return cluster.model_copy(update={"attributes": attributes})
