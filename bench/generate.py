"""Seeded generator of benchmark instances in fleetc's real policy format.

An instance is one Fleet and N AIGCPipelines (plus, optionally, a GPU, a data and a platform
policy) as YAML files, exactly what a user would keep under ``policies/``. Two modes:

* **load** (default): a realistic mix. GPU clusters of a100 / h100 / t4 / l4 (and some CPU-only
  clusters) spread over regions and jurisdictions; pipelines of DataProc (CPU only), Training
  gangs of 1-16 GPUs, Finetuning, Evaluation and Deployments with replicas. The GPUs the stages
  ask for add up to ``load`` x the fleet's usable GPUs, per GPU type (exactly, when the stage
  mix allows it; :attr:`Instance.gpu_demand` says what was reached). Usable and demanded follow
  fleetc's rules: a cluster's ``utilization`` takes its share of the GPUs, and a Deployment
  replica takes its whole GPU: the generated GPU policy time-slices GPUs 2 ways, but the
  generated clusters do not say their device plugin reads fleetc's config (attribute
  ``device-plugin-configured``), so no GPU is time-sliced (``fleetc.placement.rules.slots_on``).
* **perfect**: every GPU cluster's GPUs are split exactly into gang jobs of its GPU type, so a
  placement that uses 100% of the GPUs is known to exist ("all GPUs placed" checks).

``--node-gpus 6,8,8`` gives each GPU cluster nodes of one of these sizes (drawn from a stream of
its own, so a third of them on 6-GPU nodes here): attribute ``gpus-per-node``, and a GPU count
of as many nodes as the default draw (8 -> 6, 16 -> 12 on 6-GPU nodes). Gang replicas then come
in these sizes too (6 beside 8, 4, 2, 1), so that node fit has pods to pack; in perfect mode
each node's GPUs are split exactly into gangs of one replica each, so that every gang packs.
Without it every node carries 8 GPUs and the bytes are as before.

Everything is drawn from one ``random.Random(seed)``: the same arguments give the same bytes.
Use :func:`generate` as a library (it returns file texts) or run
``python -m bench.generate --clusters 20 --stages 200 --load 0.9 --out /tmp/instance``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetc.render.yamlout import dump

GPU_TYPES = ("a100", "h100", "t4", "l4")
#: Share of GPU clusters of each type, and the GPU counts such a cluster may have.
TYPE_WEIGHTS = {"a100": 0.35, "h100": 0.2, "t4": 0.25, "l4": 0.2}
CLUSTER_GPUS = {"a100": (8, 16, 32, 64), "h100": (8, 16, 32), "t4": (8, 16, 32), "l4": (8, 16, 32)}
#: Which GPU types each stage kind prefers (training on big GPUs, serving on small ones).
PREFERRED = {
    "Training": ("a100", "h100"),
    "Finetuning": ("a100", "h100", "l4"),
    "Evaluation": GPU_TYPES,
    "Deployment": ("t4", "l4"),
}
REGIONS = ("cn-north-1", "cn-east-1", "us-east-1", "us-west-2", "eu-west-1", "eu-central-1",
           "ap-southeast-1")
PROVIDERS = ("aws", "gcp", "azure", "huawei", "aliyun")
CPU_ONLY_SHARE = 0.15
MAX_GANG_GPUS = 16
DOCUMENTS_PER_FILE = 50
TEAMS = 20


@dataclass(frozen=True)
class Spec:
    """What to generate. ``load`` is the share of each GPU type's capacity stages ask for."""

    clusters: int = 20
    stages: int = 200
    load: float = 0.9
    seed: int = 0
    perfect: bool = False
    policies: bool = True  # add a GPUOptimizationPolicy and a DataOptimizationPolicy
    platform: bool = False  # add an AIGCPlatform governing every pipeline
    sovereignty: bool = False  # the platform keeps data in its jurisdiction
    #: Team quotas (with the platform): each of the TEAMS teams (a namespace each) gets a GPU
    #: quota per type of ``quotas`` x the GPUs of that type its stages ask for (0: no teams).
    quotas: float = 0.0
    #: With ``quotas``: each team's maxHourlyCost is ``budget`` x the GPU-hours its stages ask
    #: for at their type's default price (0: no cost cap).
    budget: float = 0.0
    #: Each stage also reads a reference dataset in a region of its own and asks for cores and
    #: memory of its own per GPU, so that hardly two stages are alike in what placement reads
    #: (drawn after everything else, from a stream of their own: the rest is as without it).
    diverse: bool = False
    #: GPUs per node a GPU cluster may have (one drawn per cluster; () : 8, the default, and
    #: no attribute written). See the module docstring.
    node_gpus: tuple[int, ...] = ()
    #: A platform whose serving stages run active-active (``multiCluster``) on the two largest
    #: t4 clusters (the first drawn on a tie); drawn nothing more, so the rest is as without it.
    ha: bool = False


@dataclass(frozen=True)
class Instance:
    """Generated policy files (relative path -> YAML text) and what they add up to."""

    spec: Spec
    files: dict[str, str]
    gpu_capacity: int  # usable GPUs in the fleet
    gpu_demand: float  # GPUs the stages ask for (time-sliced replicas count 1/slots of a GPU)
    stages: int
    documents: int

    def write(self, folder: Path) -> Path:
        """Write every file under ``folder`` (created); return the folder."""
        for rel, text in self.files.items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return folder


@dataclass
class _Cluster:
    name: str
    region: str
    gpu_type: str | None
    gpus: int  # usable: after utilization
    document: dict[str, Any]
    node: int = 8  # GPUs per node


@dataclass
class _Stage:
    """A stage being drawn; ``total`` is its GPUs (gang) or GPU replicas (Deployment)."""

    name: str
    type: str
    total: int = 0
    gpu_type: str | None = None  # the type whose budget it counts against
    typed: bool = True  # write gpuType (an untyped stage runs on any GPU)
    slots: int = 1  # GPU slots one of its GPUs takes: SLOTS (whole) with the GPU policy
    one_replica: bool = False  # a gang of one replica of ``total`` GPUs (perfect mode on node shapes)


def generate(spec: Spec) -> Instance:
    """Draw one instance; see the module docstring."""
    rng = random.Random(spec.seed)
    clusters = _clusters(rng, spec.clusters, realistic=not spec.perfect)
    if spec.node_gpus:
        _shape_nodes(random.Random(spec.seed + NODES_STREAM), clusters, spec.node_gpus)
    slots = SLOTS if spec.policies else 1
    pipelines = _draw_pipelines(rng, spec, clusters, slots)
    files = {"fleet.yaml": dump(_fleet(clusters))}
    sizes = tuple(sorted({*REPLICA_GPUS, *spec.node_gpus}, reverse=True))
    documents = [_pipeline_document(rng, i, stages, clusters, sizes) for i, stages in enumerate(pipelines)]
    if spec.diverse:
        _diversify(random.Random(spec.seed + DIVERSE_STREAM), documents)
    files |= _pipeline_files(documents)
    if spec.policies:
        files["gpu-optimization.yaml"] = dump(GPU_POLICY)
        files["data-optimization.yaml"] = dump(DATA_POLICY)
    if spec.platform or spec.quotas or spec.ha:
        files["platform.yaml"] = dump(_platform_document(spec, clusters, pipelines, slots))
    stages = [s for p in pipelines for s in p]
    return Instance(
        spec=spec,
        files=files,
        gpu_capacity=sum(c.gpus for c in clusters),
        gpu_demand=sum(s.total * s.slots for s in stages) / slots,
        stages=len(stages),
        documents=1 + len(documents) + 2 * spec.policies + bool(spec.platform or spec.quotas or spec.ha),
    )



def _draw_pipelines(rng: random.Random, spec: Spec, clusters: list[_Cluster], slots: int) -> list[list[_Stage]]:
    if spec.perfect:
        return _perfect_pipelines(rng, clusters, spec.stages, slots, by_node=bool(spec.node_gpus))
    return _load_pipelines(rng, clusters, spec.stages, spec.load, slots)


def _pipeline_files(documents: list[dict[str, Any]]) -> dict[str, str]:
    """The pipeline documents, ``DOCUMENTS_PER_FILE`` to a file."""
    return {f"pipelines/pipelines-{start // DOCUMENTS_PER_FILE:04d}.yaml": "---\n".join(
                dump(d) for d in documents[start:start + DOCUMENTS_PER_FILE])
            for start in range(0, len(documents), DOCUMENTS_PER_FILE)}


def _platform_document(spec: Spec, clusters: list[_Cluster], pipelines: list[list[_Stage]],
                       slots: int) -> dict[str, Any]:
    teams = _teams(pipelines, slots, spec.quotas, spec.budget) if spec.quotas else []
    ha = sorted((c for c in clusters if c.gpu_type == "t4"), key=lambda c: -c.gpus)[:2] if spec.ha else []
    return _platform(spec.sovereignty, teams, [c.name for c in ha])


# --- the fleet ---------------------------------------------------------------------------------


def _clusters(rng: random.Random, count: int, *, realistic: bool) -> list[_Cluster]:
    """``realistic`` adds CPU-only clusters and clusters partly used by other work."""
    clusters = []
    for i in range(count):
        if i < len(GPU_TYPES):  # every GPU type is present whenever the fleet is big enough
            gpu_type: str | None = GPU_TYPES[i]
        elif realistic and rng.random() < CPU_ONLY_SHARE:
            gpu_type = None
        else:
            gpu_type = rng.choices(GPU_TYPES, weights=[TYPE_WEIGHTS[t] for t in GPU_TYPES])[0]
        clusters.append(_cluster(rng, i, gpu_type, realistic))
    return clusters


def _cluster(rng: random.Random, index: int, gpu_type: str | None, realistic: bool) -> _Cluster:
    name = f"c{index:04d}-{gpu_type or 'cpu'}"
    region = rng.choice(REGIONS)
    document: dict[str, Any] = {"name": name, "provider": rng.choice(PROVIDERS), "region": region}
    attributes: dict[str, str] = {}
    gpus = 0
    if gpu_type:
        gpus = rng.choice(CLUSTER_GPUS[gpu_type])
        attributes = {"gpu-type": gpu_type, "gpu-count": str(gpus),
                      "network-tier": rng.choice(("high-performance", "standard", "standard"))}
        if gpu_type in ("t4", "l4") and rng.random() < 0.5:
            attributes["low-latency"] = "true"
    else:
        attributes = {"network-tier": rng.choice(("standard", "low"))}
        if rng.random() < 0.3:
            attributes |= {"edge-node": "true", "low-power": "true"}
        document["capacity"] = {"cpu": rng.choice((64, 128, 256)), "memory": "512Gi"}
    document["attributes"] = attributes
    if realistic and rng.random() < 0.3:
        utilization = rng.choice((0.1, 0.25, 0.5))
        document["utilization"] = utilization
        gpus = math.floor(gpus * (1 - utilization) + 1e-9)  # fleetc.placement.rules.usable_capacity
    return _Cluster(name, region, gpu_type, gpus, document)


#: Offset of the seed of ``--node-gpus``' own random stream.
NODES_STREAM = 2_000_003


def _shape_nodes(rng: random.Random, clusters: list[_Cluster], sizes: tuple[int, ...]) -> None:
    """Give each GPU cluster nodes of one of ``sizes`` GPUs (in place): as many nodes as its
    drawn GPU count makes of 8-GPU nodes, its usable GPUs after its utilization again."""
    for cluster in clusters:
        attributes = cluster.document["attributes"]
        if not cluster.gpu_type:
            continue
        size = rng.choice(sizes)
        count = int(attributes["gpu-count"]) // 8 * size
        attributes["gpu-count"] = str(count)
        attributes["gpus-per-node"] = str(size)
        cluster.gpus = math.floor(count * (1 - cluster.document.get("utilization", 0.0)) + 1e-9)
        cluster.node = size


def _fleet(clusters: list[_Cluster]) -> dict[str, Any]:
    return {
        "apiVersion": "fleet.kurator.dev/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "bench-fleet", "namespace": "kurator-system"},
        "spec": {
            "clusters": [c.document for c in clusters],
            "placement": {"clusterTolerations": [
                {"key": "gpu-type", "operator": "Exists", "effect": "NoSchedule"}]},
            "aigcConfig": {"trainingWeight": 0.6, "inferenceWeight": 0.3, "finetuningWeight": 0.1},
        },
    }


# --- load mode ---------------------------------------------------------------------------------

#: Pipeline shapes (stage types in dependency order) and how often each is drawn.
SHAPES = (
    (("DataProc", "Training", "Evaluation", "Deployment"), 0.45),
    (("DataProc", "Finetuning", "Deployment"), 0.35),
    (("DataProc", "Training", "Evaluation"), 0.1),
    (("DataProc",), 0.1),
)
STAGE_NAMES = {"DataProc": "prepare", "Training": "train", "Finetuning": "finetune",
               "Evaluation": "evaluate", "Deployment": "serve"}


def _load_pipelines(rng: random.Random, clusters: list[_Cluster], stage_count: int,
                    load: float, slots: int) -> list[list[_Stage]]:
    pipelines: list[list[_Stage]] = []
    left = stage_count
    while left > 0:
        shape = rng.choices([s for s, _ in SHAPES], weights=[w for _, w in SHAPES])[0][:left]
        pipelines.append([_initial_stage(rng, kind, slots) for kind in shape])
        left -= len(shape)
    capacity = {t: sum(c.gpus for c in clusters if c.gpu_type == t) for t in GPU_TYPES}
    biggest = {t: max((c.gpus for c in clusters if c.gpu_type == t), default=0) for t in GPU_TYPES}
    gpu_stages = [s for p in pipelines for s in p if s.total]
    _assign_types(rng, gpu_stages, capacity, load, slots)
    for gpu_type in GPU_TYPES:
        mine = [s for s in gpu_stages if s.gpu_type == gpu_type]
        _fit_budget(rng, mine, round(load * capacity[gpu_type] * slots),
                    min(biggest[gpu_type], MAX_GANG_GPUS))
    return pipelines


def _initial_stage(rng: random.Random, kind: str, slots: int) -> _Stage:
    stage = _Stage(STAGE_NAMES[kind], kind, slots=slots)
    if kind == "Training":
        stage.total = rng.choice((1, 2, 4, 8, 8, 16))
    elif kind == "Finetuning":
        stage.total = rng.choice((1, 2, 4, 8))
    elif kind == "Evaluation":
        stage.total = rng.choice((1, 1, 2))
        stage.typed = rng.random() < 0.5
    elif kind == "Deployment":
        stage.total = rng.randint(2, 8)
    return stage


def _assign_types(rng: random.Random, stages: list[_Stage], capacity: dict[str, int],
                  load: float, slots: int) -> None:
    """Give each GPU stage the preferred type with the most budget left (relative) among those
    whose budget still holds one more GPU beside a GPU for each stage given it so far; where
    none of its preferred types does, any type's that does: a stage shrinks to one GPU at the
    least (:func:`_fit_budget`), so more stages of a type than its budget holds GPUs would ask
    for more than ``load`` of it (t4 and l4 did, with many Deployments)."""
    left = {t: load * capacity[t] * slots for t in GPU_TYPES}
    room = dict(left)  # the budget less one GPU per stage given the type
    for stage in rng.sample(stages, len(stages)):
        present = [t for t in GPU_TYPES if capacity[t]]
        preferred = [t for t in PREFERRED[stage.type] if capacity[t]] or present
        options = ([t for t in preferred if room[t] >= stage.slots]
                   or [t for t in present if room[t] >= stage.slots] or preferred)
        if not options:
            stage.total = 0
            continue
        stage.gpu_type = max(options, key=lambda t: (left[t] / capacity[t], t))
        left[stage.gpu_type] -= stage.total * stage.slots
        room[stage.gpu_type] -= stage.slots


def _fit_budget(rng: random.Random, stages: list[_Stage], budget: int, gang_cap: int) -> None:
    """Grow or shrink stage sizes until their GPU slots add up to ``budget`` (or cannot move
    any more). A step never overshoots, so a gang (SLOTS slots per GPU) moves only while the
    difference is at least SLOTS; time-sliced replicas settle the rest."""
    if gang_cap <= 0:
        for stage in stages:
            stage.total = 0
        return
    for stage in stages:
        if stage.type != "Deployment":
            stage.total = min(stage.total, gang_cap)
    diff = budget - sum(s.total * s.slots for s in stages)
    while diff and stages:
        if diff > 0:
            movable = [s for s in stages if s.total < _cap(s, gang_cap) and s.slots <= diff]
        else:
            movable = [s for s in stages if s.total > 1 and s.slots <= -diff]
        if not movable:
            return
        stage = rng.choice(movable)
        if diff > 0:
            step = min(diff // stage.slots, _cap(stage, gang_cap) - stage.total, stage.total)
        else:
            step = -min(-diff // stage.slots, stage.total - 1, max(1, stage.total // 2))
        stage.total += step
        diff -= step * stage.slots


def _cap(stage: _Stage, gang_cap: int) -> int:
    return 64 if stage.type == "Deployment" else gang_cap


# --- perfect mode ------------------------------------------------------------------------------


def _perfect_pipelines(rng: random.Random, clusters: list[_Cluster], stage_count: int,
                       slots: int, *, by_node: bool = False) -> list[list[_Stage]]:
    """Split each GPU cluster's GPUs exactly into gangs of its type, about ``stage_count`` in
    all, and group them into pipelines of 1-3 stages; ``by_node``: each node's GPUs, into gangs
    of one replica (so that they pack onto the nodes whatever their size)."""
    gpu_clusters = [c for c in clusters if c.gpus]
    total = sum(c.gpus for c in gpu_clusters)
    gangs: list[_Stage] = []
    for cluster in gpu_clusters:
        low, high = math.ceil(cluster.gpus / MAX_GANG_GPUS), cluster.gpus
        parts = min(high, max(low, round(stage_count * cluster.gpus / total)))
        if by_node:
            nodes = cluster.gpus // cluster.node
            split = [max(1, min(cluster.node, round(parts / nodes)))] * nodes
            sizes = [size for share in split for size in _composition(rng, cluster.node, share)]
        else:
            sizes = _composition(rng, cluster.gpus, parts)
        for size in sizes:
            kind = rng.choice(("Training", "Training", "Finetuning"))
            gangs.append(_Stage(STAGE_NAMES[kind], kind, size, cluster.gpu_type, slots=slots, one_replica=by_node))
    rng.shuffle(gangs)
    pipelines = []
    while gangs:
        take = min(len(gangs), rng.randint(1, 3))
        chunk, gangs = gangs[:take], gangs[take:]
        pipelines.append([_Stage(f"{s.name}-{i}", s.type, s.total, s.gpu_type, slots=s.slots,
                                 one_replica=s.one_replica) for i, s in enumerate(chunk)])
    return pipelines


def _composition(rng: random.Random, total: int, parts: int) -> list[int]:
    """``parts`` positive integers of at most :data:`MAX_GANG_GPUS` adding up to ``total``."""
    sizes = [1] * parts
    for _ in range(total - parts):
        room = [i for i, s in enumerate(sizes) if s < MAX_GANG_GPUS]
        sizes[rng.choice(room)] += 1
    return sizes


# --- pipeline documents ------------------------------------------------------------------------


def _pipeline_document(rng: random.Random, index: int, stages: list[_Stage],
                       clusters: list[_Cluster], sizes: tuple[int, ...] = (8, 4, 2, 1)) -> dict[str, Any]:
    name = f"pipeline-{index:05d}"
    home = rng.choice(clusters).region  # where the pipeline's data lives
    bucket = f"cos://bench-{index:05d}"
    documents = []
    for position, stage in enumerate(stages):
        document: dict[str, Any] = {"name": stage.name, "type": stage.type}
        if position:
            previous = stages[position - 1]
            document["dependencies"] = [previous.name]
            document["inputs"] = [{"name": "data", "from": f"{previous.name}.outputs.data"}]
        else:
            document["inputs"] = [{"name": "raw", "source": f"{bucket}/raw/", "location": home}]
        if stage.type != "Deployment":  # a run-to-completion stage runs something (fleetc warns otherwise)
            document["command"] = ["python", "-m", f"bench.{stage.type.lower()}", "--stage", stage.name]
            document["outputs"] = [{"name": "data", "storage": f"{bucket}/{stage.name}/",
                                    "location": home, "secretName": "bench-store"}]
        document.update(_resources(rng, stage, sizes))
        documents.append(document)
    return {
        "apiVersion": "aigc.kurator.dev/v1alpha1",
        "kind": "AIGCPipeline",
        "metadata": {"name": name, "namespace": f"team-{index % TEAMS:02d}"},
        "spec": {"stages": documents},
    }


#: Offset of the seed of ``--diverse``'s own random stream.
DIVERSE_STREAM = 1_000_003


def _diversify(rng: random.Random, documents: list[dict[str, Any]]) -> None:
    """Give every stage a reference input located in a random region and its own cores and
    memory per GPU (in place; see :attr:`Spec.diverse`)."""
    for document in documents:
        bucket = f"cos://bench-{document['metadata']['name'].removeprefix('pipeline-')}"
        for stage in document["spec"]["stages"]:
            stage["inputs"].append({"name": "reference", "source": f"{bucket}/reference/{stage['name']}/",
                                    "location": rng.choice(REGIONS)})
            resources = stage["resources"]
            gpus = resources["gpu"]
            if not gpus:
                continue
            if stage["type"] == "Deployment":
                resources["cpu"], memory = rng.choice((2, 3, 4, 6)), rng.choice((8, 12, 16, 24))
            else:
                resources["cpu"], memory = gpus * rng.choice((2, 3, 4, 5, 6)), gpus * rng.choice((16, 24, 32, 48))
            resources["memory"] = f"{memory}Gi"


#: GPUs per gang replica: the largest of these that divides the gang's GPUs (with ``--node-gpus``
#: its node sizes too).
REPLICA_GPUS = (8, 4, 2, 1)


def _resources(rng: random.Random, stage: _Stage, sizes: tuple[int, ...] = REPLICA_GPUS) -> dict[str, Any]:
    """Replicas and per-replica resources for a stage of ``stage.total`` GPUs: gangs in replicas
    of the largest of ``sizes`` that divides it (one replica of it all: ``stage.one_replica``)."""
    if stage.type == "DataProc" or not stage.total:
        cores = rng.choice((4, 8, 16))
        return {"resources": {"cpu": cores, "memory": f"{cores * 4}Gi", "gpu": 0}}
    if stage.type == "Deployment":
        replicas = stage.total
        resources: dict[str, Any] = {"gpu": 1, "cpu": 4, "memory": "16Gi"}
        extra: dict[str, Any] = {"replicas": replicas,
                                 "minReplicasPerCluster": min(replicas, rng.choice((1, 2)))}
    else:
        per_replica = stage.total if stage.one_replica else next(g for g in sizes if stage.total % g == 0)
        replicas = stage.total // per_replica
        resources = {"gpu": per_replica, "cpu": 4 * per_replica, "memory": f"{32 * per_replica}Gi"}
        extra = {"replicas": replicas} if replicas > 1 else {}
    if stage.typed and stage.gpu_type:
        resources["gpuType"] = stage.gpu_type
    return {**extra, "resources": resources}


#: GPU slots per time-sliced GPU under GPU_POLICY: time-slicing 4, at most 2 sharers.
SLOTS = 2
#: No defragmentation threshold: it would hold GPUs back and blur what "load" means.
GPU_POLICY = {
    "apiVersion": "scheduling.kurator.dev/v1alpha1",
    "kind": "GPUOptimizationPolicy",
    "metadata": {"name": "gpu-optimization"},
    "spec": {"timeSlicing": {"enabled": True, "replicas": 4},
             "sharingStrategy": {"enabled": True, "maxSharers": SLOTS}},
}
DATA_POLICY = {
    "apiVersion": "aigc.kurator.dev/v1alpha1",
    "kind": "DataOptimizationPolicy",
    "metadata": {"name": "data-optimization"},
    "spec": {"preprocessing": {"parallelization": 16, "compression": True},
             "caching": {"enabled": True, "strategy": "LFU", "size": "100Gi"},
             "prefetching": {"enabled": True, "lookahead": 32}},
}


def _platform(sovereignty: bool, teams: list[dict[str, Any]], ha: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"security": {"dataSovereignty": sovereignty, "auditEnabled": True},
                            "performance": {"inferenceTimeout": "5s", "trainingPriority": "high"}}
    if teams:
        spec["teams"] = teams
    if ha:
        spec["multiCluster"] = {"primaryCluster": ha[0], "secondaryClusters": ha[1:]}
    return {
        "apiVersion": "aigc.kurator.dev/v1alpha1",
        "kind": "AIGCPlatform",
        "metadata": {"name": "bench-platform", "namespace": "kurator-system"},
        "spec": spec,
    }


#: The default price of a GPU-hour per type (fleetc.resolve's), for the teams' budgets.
GPU_HOUR = {"a100": 3.0, "h100": 5.0, "t4": 0.5, "l4": 0.8}


def _teams(pipelines: list[list[_Stage]], slots: int, quotas: float, budget: float) -> list[dict[str, Any]]:
    """One team per namespace with pipelines (``team-NN``, pipelines ``index % TEAMS``): a GPU quota of every
    type, ``quotas`` x the GPUs of that type its stages ask for (rounded down; 0 where it asks
    for none, so its untyped stages stay on the types it has), and with ``budget`` a cost cap
    of ``budget`` x those GPUs' hourly price."""
    asked = [dict.fromkeys(GPU_TYPES, 0.0) for _ in range(min(TEAMS, len(pipelines)))]  # teams with pipelines
    for index, stages in enumerate(pipelines):
        for stage in stages:
            if stage.gpu_type:
                asked[index % TEAMS][stage.gpu_type] += stage.total * stage.slots / slots
    teams = []
    for number, gpus in enumerate(asked):
        team: dict[str, Any] = {"name": f"team-{number:02d}", "namespaces": [f"team-{number:02d}"],
                                "gpuQuota": {t: math.floor(quotas * gpus[t]) for t in GPU_TYPES}}
        if budget:
            team["maxHourlyCost"] = round(budget * sum(gpus[t] * GPU_HOUR[t] for t in GPU_TYPES), 2)
        teams.append(team)
    return teams


# --- command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--stages", type=int, default=200)
    parser.add_argument("--load", type=float, default=0.9, help="share of GPUs demanded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--perfect", action="store_true", help="GPUs split exactly into gangs")
    parser.add_argument("--platform", action="store_true", help="add an AIGCPlatform")
    parser.add_argument("--sovereignty", action="store_true", help="platform keeps data local")
    parser.add_argument("--quotas", type=float, default=0.0,
                        help="teams with GPU quotas of this share of what they ask for (0: none)")
    parser.add_argument("--budget", type=float, default=0.0,
                        help="with --quotas: teams' hourly cost caps, this share of their GPUs' price")
    parser.add_argument("--diverse", action="store_true",
                        help="stages with data and cores/memory of their own (hardly two alike)")
    parser.add_argument("--node-gpus", type=node_sizes, default=(),
                        help="GPUs per node a GPU cluster may have, one drawn per cluster (e.g. 6,8,8)")
    parser.add_argument("--ha", action="store_true",
                        help="a platform serving active-active on the two largest t4 clusters")
    parser.add_argument("--out", type=Path, required=True, help="folder to write")
    return parser


def fleet_size(text: str) -> tuple[int, int]:
    """``50x1000`` -> (50, 1000): clusters and stages, both positive (an argparse type: a
    usage error, not a traceback, names what it cannot read)."""
    try:
        clusters, stages = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CLUSTERSxSTAGES such as 50x1000, got {text!r}") from None
    if clusters < 1 or stages < 1:
        raise argparse.ArgumentTypeError(f"expected positive clusters and stages, got {text!r}")
    return clusters, stages


def fleet_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``20x200,100x2000`` -> ((20, 200), (100, 2000)): :func:`fleet_size`, comma-separated."""
    return tuple(fleet_size(part) for part in text.split(","))


def node_sizes(text: str) -> tuple[int, ...]:
    """``6,8,8`` -> (6, 8, 8): positive GPUs per node."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPUs per node such as 6,8, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive GPUs per node, got {text!r}")
    return sizes


def spec_of(args: argparse.Namespace) -> Spec:
    return Spec(clusters=args.clusters, stages=args.stages, load=args.load, seed=args.seed,
                perfect=args.perfect, platform=args.platform, sovereignty=args.sovereignty,
                quotas=args.quotas, budget=args.budget, diverse=args.diverse, node_gpus=args.node_gpus,
                ha=args.ha)


def describe(instance: Instance) -> Iterator[str]:
    yield (f"{instance.spec.clusters} clusters, {instance.stages} stages, "
           f"{instance.documents} documents in {len(instance.files)} files")
    yield (f"GPUs demanded {instance.gpu_demand:g} of {instance.gpu_capacity} usable "
           f"({instance.gpu_demand / max(instance.gpu_capacity, 1):.1%})")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    instance = generate(spec_of(args))
    instance.write(args.out)
    for line in describe(instance):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
