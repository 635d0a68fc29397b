"""What-if scenarios for ``fleetc diff --what-if``: changes to the fleet that are not made to the
policies, only to one compile of them.

A scenario is a list of settings, from the command line or a scenario file (YAML: ``whatIf:`` a
list of the same strings; pipeline files relative to the scenario file):

* ``drain=CLUSTER``: the cluster is lost (as ``--drain``);
* ``gpus=CLUSTER=N`` or ``gpus=CLUSTER:TYPE=N``: the cluster has N GPUs (of TYPE: its GPU type
  changes too); CPU and memory the Fleet leaves to their defaults follow the GPU count;
* ``price=CLUSTER=X``: one GPU-hour on the cluster costs X;
* ``pipeline=FILE``: the pipeline(s) in FILE are added to the policies.

Settings are parsed and checked against the Fleet here; a bad one is a usage error naming it, with
a hint. :func:`apply` is pure: it returns the Fleet with the changes made (a new object; the
policies are never written).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml.error import YAMLError

from fleetc.errors import UsageError, did_you_mean
from fleetc.policy import kinds as p
from fleetc.policy.load import yaml_documents
from fleetc.policy.validate import Parsed, PolicySet

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

    @property
    def label(self) -> str:
        return "what-if " + " ".join(self.settings)


def _fail(setting: str, problem: str, hint: str) -> UsageError:
    return UsageError(f"--what-if {setting}: {problem}\n  hint: {hint}")


def parse(settings: Sequence[str], origin: str = "") -> Scenario:
    """The scenario the settings describe; ``origin``: the folder pipeline files are relative to
    ('' for the working folder)."""
    scenario = Scenario(settings=tuple(settings))
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not sep or name not in ("drain", "gpus", "price", "pipeline"):
            raise _fail(setting, "not a what-if setting", f"give one of {', '.join(SETTINGS)}")
        if not value:
            raise _fail(setting, "says nothing after '='", f"give {next(s for s in SETTINGS if s.startswith(name))}")
        if name == "drain":
            scenario = dataclasses.replace(scenario, drain=(*scenario.drain, value))
        elif name == "gpus":
            scenario = dataclasses.replace(scenario, gpus=(*scenario.gpus, _gpu_change(setting, value)))
        elif name == "price":
            scenario = dataclasses.replace(scenario, prices=(*scenario.prices, _price(setting, value)))
        else:
            scenario = dataclasses.replace(scenario, pipelines=(*scenario.pipelines,
                                                                str(Path(origin) / value) if origin else value))
    return scenario


def _gpu_change(setting: str, value: str) -> GPUChange:
    match = _GPUS.fullmatch(value)
    if match is None:
        raise _fail(setting, "expected gpus=CLUSTER=N or gpus=CLUSTER:TYPE=N", "for example gpus=gpu-east:a100=16")
    cluster, gpu_type, count = match.groups()
    if not (count.isascii() and count.isdigit()):
        raise _fail(setting, f"expected a whole number of GPUs, got {count!r}", "for example gpus=gpu-east=16")
    if gpu_type is not None and not _GPU_TYPE.fullmatch(gpu_type):
        raise _fail(setting, f"{gpu_type!r} is not a GPU type", "a Kubernetes label value such as a100 or h100")
    return GPUChange(cluster, gpu_type.lower() if gpu_type else None, int(count))


def _price(setting: str, value: str) -> tuple[str, float]:
    match = _PRICE.fullmatch(value)
    if match is None:
        raise _fail(setting, "expected price=CLUSTER=X", "for example price=gpu-east=2.5 (per GPU-hour)")
    cluster, text = match.groups()
    try:
        price = float(text)
    except ValueError:
        price = -1.0
    if not 0 <= price <= MAX_PRICE:
        raise _fail(setting, f"expected a GPU-hour price from 0 to {MAX_PRICE:g}, got {text!r}",
                    "for example price=gpu-east=2.5")
    return cluster, price


def read_file(path: Path, shown: str) -> Scenario:
    """A scenario file: ``whatIf:`` a list of settings; pipeline files relative to its folder."""
    try:
        documents = yaml_documents(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--scenario {shown}: cannot read it: {err}") from err
    except YAMLError as err:
        raise UsageError(f"--scenario {shown}: not YAML: {err}") from err
    data = documents[0] if len(documents) == 1 else None
    settings = data.get("whatIf") if isinstance(data, dict) and set(data) == {"whatIf"} else None
    if not isinstance(settings, list) or not settings or not all(isinstance(s, str) for s in settings):
        raise UsageError(f"--scenario {shown}: expected one YAML document 'whatIf:' with a list of settings\n"
                         f"  hint: for example whatIf: [drain=gpu-east, \"gpus=gpu-west:a100=16\"]")
    return parse(settings, origin=str(Path(shown).parent) if Path(shown).parent != Path(".") else "")


def apply(policies: PolicySet, scenario: Scenario) -> PolicySet:
    """The policies with the scenario's GPU and price changes made to their Fleet (``drain`` and
    ``pipelines`` are the compile's: ``Options.drain`` and its paths)."""
    if not policies.fleets or not (scenario.gpus or scenario.prices or scenario.drain):
        return policies
    fleet = policies.fleets[0]
    clusters = list(fleet.obj.spec.clusters)
    index = {c.name: i for i, c in enumerate(clusters)}
    for name in scenario.drain:
        _known(f"drain={name}", name, index, fleet)
    for change in scenario.gpus:
        setting = next(s for s in scenario.settings if s.startswith(f"gpus={change.cluster}"))
        i = _known(setting, change.cluster, index, fleet)
        clusters[i] = _with_gpus(setting, clusters[i], change)
    for cluster, price in scenario.prices:
        i = _known(f"price={cluster}={price:g}", cluster, index, fleet)
        pricing = clusters[i].pricing or p.ClusterPricing()
        clusters[i] = clusters[i].model_copy(update={"pricing": pricing.model_copy(update={"gpuHour": price})})
    spec = fleet.obj.spec.model_copy(update={"clusters": clusters})
    changed = Parsed(fleet.obj.model_copy(update={"spec": spec}), fleet.doc)
    return dataclasses.replace(policies, fleets=(changed, *policies.fleets[1:]))


def _known(setting: str, name: str, index: dict[str, int], fleet: Parsed[p.Fleet]) -> int:
    if name not in index:
        known = sorted(index)
        raise _fail(setting, f"no cluster {name!r} in Fleet '{fleet.name}' ({fleet.doc.path})",
                    did_you_mean(name, known) or f"its clusters: {', '.join(known)}")
    return index[name]


def _with_gpus(setting: str, cluster: p.FleetCluster, change: GPUChange) -> p.FleetCluster:
    attributes = dict(cluster.attributes or {})
    gpu_type = change.gpu_type or (str(attributes["gpu-type"]).lower() if "gpu-type" in attributes else None)
    if change.count and gpu_type is None:
        raise _fail(setting, f"cluster {cluster.name!r} has no GPU type", f"name one: gpus={cluster.name}:a100="
                                                                          f"{change.count}")
    per_node = attributes.get("gpus-per-node")
    if change.count and per_node is not None and change.count % int(str(per_node)):
        raise _fail(setting, f"cluster {cluster.name!r} carries {per_node} GPUs per node (gpus-per-node)",
                    f"give a multiple of {per_node}")
    attributes["gpu-count"] = str(change.count)
    if gpu_type is not None:
        if gpu_type != str(attributes.get("gpu-type", "")).lower():
            attributes.pop("gpu-product", None)  # another GPU's product label: the default for the type
        attributes["gpu-type"] = gpu_type
    return cluster.model_copy(update={"attributes": attributes})
