"""Hand-built models for the optimizer's tests: every field defaulted, each test names only
what it is about. Shared by test_scoring, test_optimize, test_verify, test_explain and
test_properties."""

from __future__ import annotations

from fleetc.model import (
    GPU_PRODUCT_LABELS,
    Cluster,
    FleetModel,
    GPUOption,
    GPUPolicy,
    Input,
    Platform,
    Source,
    Stage,
    StageType,
    Taint,
    Toleration,
)
from fleetc.nodefit import default_gpus_per_node
from fleetc.placement.scoring import GIB

SOURCE = Source("fleet.yaml", "spec")

GPU_TAINT = Taint("gpu-type", "a100", "NoSchedule")

#: What generated stages ask of GPU types: any, one, or alternatives in either order.
GPU_TYPE_CHOICES: tuple[tuple[str, ...], ...] = ((), ("a100",), ("h100",), ("h100", "a100"), ("a100", "h100"))
#: GPUs per replica per type of generated stages asking for throughput (None: a GPU count):
#: throughput 4 with an h100 worth two a100s, and the same listed the other way round.
THROUGHPUT_CHOICES: tuple[dict[str, int] | None, ...] = (None, {"h100": 2, "a100": 4}, {"a100": 4, "h100": 2})


def make_cluster(
    name: str = "c1",
    *,
    gpu_type: str | None = "a100",
    gpus: int = 8,
    cores: float = 64,
    memory_gib: float = 512,
    taints: tuple[Taint, ...] = (),
    region: str = "eu-west",
    jurisdiction: str = "EU",
    gpu_hour_cost: float = 2.0,
    cpu_hour_cost: float = 0.05,
    memory_gib_hour_cost: float = 0.01,
    energy_efficiency: float = 0.5,
    network_tier: str = "standard",
    low_latency: bool = False,
    utilization: float = 0.0,
    cordoned: bool = False,
    device_plugin_configured: bool = True,
    gpus_per_node: int | None = None,
    cpu_per_node: int | None = None,
    memory_per_node: int | None = None,
) -> Cluster:
    return Cluster(
        name=name,
        provider="aws",
        region=region,
        jurisdiction=jurisdiction,
        gpu_type=gpu_type,
        gpus=gpus,
        cpu_millis=int(cores * 1000),
        memory_bytes=int(memory_gib * GIB),
        taints=taints,
        gpu_hour_cost=gpu_hour_cost,
        cpu_hour_cost=cpu_hour_cost,
        memory_gib_hour_cost=memory_gib_hour_cost,
        energy_efficiency=energy_efficiency,
        network_tier=network_tier,
        low_latency=low_latency,
        edge=False,
        utilization=utilization,
        source=SOURCE,
        cordoned=cordoned,
        gpu_product=GPU_PRODUCT_LABELS.get(gpu_type, "") if gpu_type else "",
        device_plugin_configured=device_plugin_configured,
        gpus_per_node=default_gpus_per_node(gpus) if gpus_per_node is None else gpus_per_node,
        cpu_per_node=cpu_per_node,
        memory_per_node=memory_per_node,
    )


def make_stage(
    name: str = "train",
    *,
    pipeline: str = "llm",
    type: StageType = StageType.TRAINING,
    gpus: int = 8,
    gpu_type: str | None = None,
    gpu_types: tuple[str, ...] = (),
    throughput_gpus: dict[str, int] | None = None,
    replicas: int = 1,
    cores: float = 8,
    memory_gib: float = 64,
    min_replicas_per_cluster: int = 1,
    tolerations: tuple[Toleration, ...] = (),
    inputs: tuple[Input, ...] = (),
    shared_gpu: bool = False,
    jurisdiction: str | None = None,
    pods_per_replica: int = 1,
) -> Stage:
    return Stage(
        pipeline=pipeline,
        namespace="ml",
        name=name,
        type=type,
        dependencies=(),
        inputs=inputs,
        outputs=(),
        cpu_millis=int(cores * 1000),
        memory_bytes=int(memory_gib * GIB),
        gpus=next(iter(throughput_gpus.values())) if throughput_gpus else gpus,
        gpu_types=gpu_types or ((gpu_type,) if gpu_type else ()),
        throughput=4.0 if throughput_gpus else None,
        gpu_options=tuple(GPUOption(t, n) for t, n in (throughput_gpus or {}).items()),
        replicas=replicas,
        min_replicas_per_cluster=min_replicas_per_cluster,
        tolerations=tolerations,
        image="registry.example/ml:1",
        command=(),
        source=SOURCE,
        shared_gpu=shared_gpu,
        jurisdiction=jurisdiction,
        pods_per_replica=pods_per_replica,
    )


def make_serving(name: str = "serve", **fields: object) -> Stage:
    """A Deployment: 1 GPU, 4 cores, 16Gi per replica unless told otherwise."""
    defaults: dict[str, object] = {"gpus": 1, "cores": 4, "memory_gib": 16, "replicas": 4}
    return make_stage(name, type=StageType.DEPLOYMENT, **{**defaults, **fields})  # type: ignore[arg-type]


def make_fleet(
    clusters: tuple[Cluster, ...], stages: tuple[Stage, ...], **fields: object
) -> FleetModel:
    return FleetModel(
        name="fleet", namespace="fleet-system", clusters=clusters, stages=stages, **fields
    )  # type: ignore[arg-type]


def make_input(location: str | None, from_stage: str | None = None) -> Input:
    return Input(name="data", url=None, from_stage=from_stage, from_output=None, location=location)


def make_platform(
    primary: str | None = None,
    secondaries: tuple[str, ...] = (),
    *,
    pipelines: tuple[str, ...] = ("llm",),
    data_sovereignty: bool = False,
) -> Platform:
    return Platform(
        name="platform",
        data_sovereignty=data_sovereignty,
        audit_enabled=False,
        encryption_at_rest=False,
        inference_timeout_seconds=30.0,
        training_priority="medium",
        primary_cluster=primary,
        secondary_clusters=secondaries,
        pipelines=pipelines,
        source=SOURCE,
    )


def make_gpu_policy(
    *,
    time_slicing: int = 1,
    defragment_threshold: float | None = None,
    sharing: bool = False,
    max_sharers: int = 1,
) -> GPUPolicy:
    return GPUPolicy(
        name="gpu",
        time_slicing_replicas=time_slicing,
        defragment_threshold=defragment_threshold,
        compaction_strategy=None,
        sharing_enabled=sharing,
        max_sharers=max_sharers,
        source=SOURCE,
    )
