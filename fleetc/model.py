"""The typed, immutable model that the optimizer and the renderer work on.

Policies say what users wrote; this model says what fleetc will act on: every default filled in,
every quantity in base units, every reference resolved. It is built by :mod:`fleetc.resolve` and
never changes afterwards, so the optimizer and the renderer are pure functions of it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum

#: fleetc's GPU type names -> the ``nvidia.com/gpu.product`` label GPU feature discovery gives
#: their nodes (the NVML device name, spaces as '-': NVIDIA/k8s-device-plugin
#: internal/lm/resource.go), for the common variant; a cluster whose nodes carry another (an
#: A100 40GB or PCIe) states it as attribute ``gpu-product``. Other types default to
#: ``NVIDIA-<TYPE>``, which the compile reports.
GPU_PRODUCT_LABELS: dict[str, str] = {
    "a100": "NVIDIA-A100-SXM4-80GB",
    "a10": "NVIDIA-A10",
    "a10g": "NVIDIA-A10G",
    "h100": "NVIDIA-H100-80GB-HBM3",
    "h200": "NVIDIA-H200",
    "l4": "NVIDIA-L4",
    "l40": "NVIDIA-L40",
    "l40s": "NVIDIA-L40S",
    "t4": "Tesla-T4",
    "v100": "Tesla-V100-SXM2-32GB",
}
#: GPU feature discovery appends this to the product label of nodes whose GPUs are time-sliced
#: (NVIDIA/k8s-device-plugin internal/lm/resource.go: productLabel adds "SHARED" when the
#: config shares the resource with replicas > 1 and does not rename it, fleetc's
#: ``renameByDefault: false``), so shared and exclusive nodes differ.
SHARED_PRODUCT_SUFFIX = "-SHARED"
#: The longest ``gpu.product`` label a cluster may have: with :data:`SHARED_PRODUCT_SUFFIX` it
#: is still a label value (63 characters).
MAX_GPU_PRODUCT = 63 - len(SHARED_PRODUCT_SUFFIX)


#: Kueue's ResourceFlavor for CPU and memory (:mod:`fleetc.render.kueue`). A GPU type's flavor is
#: ``fleetc-<type>``, so no GPU type may be named so that its flavor is this one.
KUEUE_CPU_FLAVOR = "fleetc-default"
RESERVED_GPU_TYPES = ("default",)


def default_gpu_product(gpu_type: str) -> str:
    """The ``nvidia.com/gpu.product`` label of a GPU type's nodes when the Fleet names none."""
    return GPU_PRODUCT_LABELS.get(gpu_type, f"NVIDIA-{gpu_type.upper()}")



class StageType(StrEnum):
    DATAPROC = "DataProc"
    TRAINING = "Training"
    FINETUNING = "Finetuning"
    EVALUATION = "Evaluation"
    DEPLOYMENT = "Deployment"


class WorkloadClass(StrEnum):
    """The three classes the Fleet's ``aigcConfig`` weighs against each other."""

    TRAINING = "training"
    INFERENCE = "inference"
    FINETUNING = "finetuning"


#: Which class a stage type competes in. DataProc and Evaluation belong to a training run.
STAGE_CLASS: dict[StageType, WorkloadClass] = {
    StageType.DATAPROC: WorkloadClass.TRAINING,
    StageType.TRAINING: WorkloadClass.TRAINING,
    StageType.EVALUATION: WorkloadClass.TRAINING,
    StageType.FINETUNING: WorkloadClass.FINETUNING,
    StageType.DEPLOYMENT: WorkloadClass.INFERENCE,
}

#: What a stage gets per GPU when it states no cores or memory (a CPU stage's defaults are in
#: :mod:`fleetc.resolve`); the fixes suggest from the same figures.
CORES_PER_GPU = 16
MEMORY_PER_GPU = 128 * 2**30  # 128 GiB

#: The image of a stage that names none, by type (the renderer knows a default serving image
#: runs Triton's command).
DEFAULT_IMAGES = {
    StageType.DATAPROC: "python:3.11-slim",
    StageType.TRAINING: "nvcr.io/nvidia/pytorch:24.05-py3",
    StageType.FINETUNING: "nvcr.io/nvidia/pytorch:24.05-py3",
    StageType.EVALUATION: "nvcr.io/nvidia/pytorch:24.05-py3",
    StageType.DEPLOYMENT: "nvcr.io/nvidia/tritonserver:24.05-py3",
}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class Toleration:
    """A Kubernetes toleration; ``tolerates`` follows the kube-scheduler's rules."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:  # an empty key with Exists tolerates everything
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> tuple[Taint, ...]:
    """The taints that repel a workload: hard ones (not PreferNoSchedule) no toleration covers."""
    return tuple(
        t
        for t in taints
        if t.effect != "PreferNoSchedule" and not any(tol.tolerates(t) for tol in tolerations)
    )


@dataclass(frozen=True)
class Source:
    """Where a fact came from: the policy file (relative to the policy root fleetc was given,
    so the same from any working folder), field path, and which of the file's documents holds
    it (0-based: a file may hold several policies, each with its own ``spec.stages[0]``)."""

    path: str
    field: str
    #: Left out of ``repr``, the canonical form of what a cluster's folder is rendered from
    #: (:func:`fleetc.render.record.folder_inputs`): reordering a file's policies changes no
    #: rendered object (run ids drop it too), only where warnings point.
    document: int = dataclasses.field(default=0, repr=False)  # in this class, `field` names a field


#: A cluster's batch admission layer (Fleet ``batchScheduler``): what its gang stages render as.
VOLCANO = "volcano"
KUEUE = "kueue"


@dataclass(frozen=True)
class Cluster:
    name: str
    provider: str
    region: str
    jurisdiction: str
    gpu_type: str | None  # lower case, e.g. "a100"; None when the cluster has no GPUs
    gpus: int
    cpu_millis: int
    memory_bytes: int
    taints: tuple[Taint, ...]
    gpu_hour_cost: float  # currency units per GPU-hour
    cpu_hour_cost: float  # per core-hour
    memory_gib_hour_cost: float  # per GiB-hour
    energy_efficiency: float  # 0..1, higher is better
    network_tier: str  # high-performance | standard | low
    low_latency: bool
    edge: bool
    utilization: float  # 0..1, the share of the cluster already in use by work fleetc does not place
    source: Source
    cordoned: bool = False  # out of placement (a Fleet flag or --drain)
    gpus_per_node: int = 8  # GPUs one node carries (attribute gpus-per-node; see fleetc.nodefit)
    #: Millicores and bytes one node offers (attributes cpu-per-node, memory-per-node); None:
    #: the cluster's share per node (:func:`fleetc.nodefit.node_of`).
    cpu_per_node: int | None = None
    memory_per_node: int | None = None
    gpu_product: str = ""  # its nodes' nvidia.com/gpu.product label (attribute gpu-product)
    device_plugin_configured: bool = False  # its ClusterPolicy reads fleetc's device-plugin config
    drained: bool = False  # cordoned for this compile only, by --drain
    batch_scheduler: str = VOLCANO  # what admits its gangs: VOLCANO or KUEUE (Fleet batchScheduler)
    #: ``taints`` is fleetc's derived ``gpu-type=<type>:NoSchedule`` (the cluster states no taints):
    #: a preference, never a filter (:func:`fleetc.placement.rules.repelling_taints`).
    taints_derived: bool = False


#: The Alluxio properties a mount of each URL scheme needs, which Fluid takes from the Secret an
#: input names, under the same keys (Alluxio's property list: ``aws.accessKeyId``,
#: ``fs.cos.access.key``...; Fluid's ``encryptOptions``, fluid ``docs/en/samples/
#: use_encryptoptions.md``). Other schemes take no credentials fleetc can name.
STORAGE_CREDENTIAL_KEYS: dict[str, tuple[str, ...]] = {
    "s3": ("aws.accessKeyId", "aws.secretKey"),
    "s3a": ("aws.accessKeyId", "aws.secretKey"),
    "cos": ("fs.cos.access.key", "fs.cos.secret.key", "fs.cos.region", "fs.cos.app.id"),
    "oss": ("fs.oss.accessKeyId", "fs.oss.accessKeySecret", "fs.oss.endpoint"),
    "obs": ("fs.obs.accessKey", "fs.obs.secretKey", "fs.obs.endpoint"),
    "gs": ("fs.gcs.accessKeyId", "fs.gcs.secretAccessKey"),
}


def url_scheme(url: str) -> str:
    """``cos`` for ``cos://bucket/x``; "" for a URL without a scheme."""
    return url.partition("://")[0].lower() if "://" in url else ""


@dataclass(frozen=True)
class Input:
    name: str
    url: str | None  # a storage URL, for inputs with ``source:``
    from_stage: str | None  # for inputs with ``from: <stage>.outputs.<name>``
    from_output: str | None
    location: str | None  # region where the data lives, when known
    jurisdiction: str | None = None  # the data's jurisdiction, when the policy names it
    #: The Secret with the storage credentials Fluid mounts ``url`` with (None: public data).
    secret_name: str | None = None


@dataclass(frozen=True)
class Output:
    name: str
    url: str
    location: str | None
    jurisdiction: str | None = None  # when the policy names it
    #: The Secret with the storage credentials the output is written with (None: the pod's own).
    secret_name: str | None = None


@dataclass(frozen=True)
class Serving:
    """How a Deployment stage's server is reached and scaled (defaults in :mod:`fleetc.resolve`)."""

    port: int = 8080  # the HTTP port: container port "http", the Service's target, the probes'
    readiness_path: str = "/healthz"
    liveness_path: str | None = None  # only where the server is known to have one
    extra_ports: tuple[tuple[str, int], ...] = ()  # (name, port) the server also listens on
    metric: str = "cpu"  # "cpu", or a per-pod custom metric's name
    target: str = "70"  # cpu: percent of the request; custom: average value per pod
    triton: bool = False  # the default image: fleetc writes tritonserver's command


def gpus_for_throughput(throughput: float, per_gpu: float) -> int:
    """GPUs per replica that give ``throughput`` at ``per_gpu`` each: ``ceil(throughput /
    per_gpu)``, the quotient rounded to 9 decimals first (8 / 1.0 = 8, 0.3 / 0.1 = 3)."""
    return max(1, math.ceil(round(throughput / per_gpu, 9)))


@dataclass(frozen=True)
class GPUOption:
    """What one replica of a stage asking for throughput takes on clusters of one GPU type:
    ``ceil(throughput / the type's throughput)`` GPUs (split into pods per cluster by node fit,
    :func:`fleetc.placement.rules.on_cluster`)."""

    gpu_type: str
    gpus: int  # per replica


@dataclass(frozen=True)
class Stage:
    pipeline: str
    namespace: str
    name: str
    type: StageType
    dependencies: tuple[str, ...]
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    cpu_millis: int  # per replica
    memory_bytes: int  # per replica
    gpus: int  # per replica, as asked (node fit splits it into pods per cluster, never rounds it)
    #: The GPU types it may run on, in order of preference (``gpuType``, lower case); empty:
    #: any type (or none needed when gpus == 0). Each cluster has one type, so a gang (on one
    #: cluster) runs on one type; a serving stage's clusters may differ in type.
    gpu_types: tuple[str, ...]
    replicas: int  # Deployment: serving replicas; other types: pods in the gang
    min_replicas_per_cluster: int  # Deployment only: a cluster that serves runs at least this many
    tolerations: tuple[Toleration, ...]  # the stage's own plus the Fleet's clusterTolerations
    image: str
    command: tuple[str, ...]
    source: Source
    shared_gpu: bool = False  # accepts time-sliced GPU slots (never for Training/Finetuning)
    #: Data sovereignty: the jurisdiction whose clusters alone may run the stage (None: any).
    jurisdiction: str | None = None
    #: Node fit (:mod:`fleetc.nodefit`): the pods one replica is split into. It depends on the
    #: nodes of the cluster the stage runs on, so the model's stage has 1 and
    #: :func:`fleetc.placement.rules.on_cluster` gives a cluster's split.
    pods_per_replica: int = 1
    serving: Serving | None = None  # Deployment stages only
    #: ``resources.throughput``: the GPUs per replica depend on the cluster's GPU type, one
    #: :class:`GPUOption` per type it may run on (preference order; ``gpus`` above is the
    #: first option's). Use
    #: :func:`fleetc.placement.rules.on_cluster` for a cluster's figures. None: ``gpus`` holds.
    throughput: float | None = None
    gpu_options: tuple[GPUOption, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.pipeline}/{self.name}"

    def preference(self, gpu_type: str | None) -> int | None:
        """The rank of ``gpu_type`` among the stage's GPU types (0: its first choice; 0 for
        every type when it names none), None when it may not run on that type."""
        if not self.gpu_types:
            return 0
        return self.gpu_types.index(gpu_type) if gpu_type in self.gpu_types else None

    @property
    def workload_class(self) -> WorkloadClass:
        return STAGE_CLASS[self.type]

    @property
    def is_gang(self) -> bool:
        """Gang stages run all their pods in one cluster; Deployments split replicas."""
        return self.type is not StageType.DEPLOYMENT

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.replicas

    @property
    def pod_gpus(self) -> int:
        """The GPUs each of the stage's pods requests."""
        return self.gpus // self.pods_per_replica

    @property
    def pod_cpu_millis(self) -> int:
        """The millicores each of the stage's pods requests (a split replica's share, rounded up)."""
        return -(-self.cpu_millis // self.pods_per_replica)

    @property
    def pod_memory_bytes(self) -> int:
        """The bytes each of the stage's pods requests (a split replica's share, rounded up)."""
        return -(-self.memory_bytes // self.pods_per_replica)

    @property
    def pods(self) -> int:
        """Pods of the whole stage (a gang's size; a Deployment's replicas)."""
        return self.replicas * self.pods_per_replica


@dataclass(frozen=True)
class ScoreWeights:
    """The seed's multi-objective weights; compute itself splits 0.5 / 0.3 / 0.2."""

    compute: float = 0.35
    cost: float = 0.25
    network: float = 0.20
    energy: float = 0.20


@dataclass(frozen=True)
class ClassWeights:
    training: float = 0.6
    inference: float = 0.3
    finetuning: float = 0.1

    def of(self, workload_class: WorkloadClass) -> float:
        return float(getattr(self, workload_class.value))


@dataclass(frozen=True)
class Platform:
    name: str
    data_sovereignty: bool
    audit_enabled: bool
    encryption_at_rest: bool
    inference_timeout_seconds: float
    training_priority: str  # low | medium | high | critical
    primary_cluster: str | None
    secondary_clusters: tuple[str, ...]
    pipelines: tuple[str, ...]  # pipelines it governs (all, when the policy names none)
    source: Source
    #: multiCluster.failoverHeadroom: losing one HA cluster leaves room for its serving replicas.
    failover_headroom: bool = False
    #: Under data sovereignty: jurisdiction -> the CIDR blocks of its storage, sorted.
    storage_endpoints: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Team:
    """A team of an AIGCPlatform (``spec.teams``): its pipelines, its fleet-wide GPU quota per
    type (lower case) and the part of it the in-cluster schedulers guarantee, and its hourly
    cost cap (the rules: :func:`fleetc.placement.rules.caps`)."""

    name: str
    platform: str
    pipelines: tuple[str, ...]  # sorted
    gpu_quota: tuple[tuple[str, int], ...]  # (GPU type, GPUs), sorted by type
    guaranteed: tuple[tuple[str, int], ...]
    max_hourly_cost: float | None
    source: Source  # field: spec.teams[i]


@dataclass(frozen=True)
class PipelineBudget:
    """A pipeline's hourly cost cap (``spec.maxHourlyCost``)."""

    pipeline: str
    max_hourly_cost: float
    source: Source


@dataclass(frozen=True)
class GPUPolicy:
    name: str
    time_slicing_replicas: int  # 1 when time-slicing is off
    defragment_threshold: float | None  # 0..1
    compaction_strategy: str | None
    sharing_enabled: bool
    max_sharers: int
    source: Source
    device_plugin_namespace: str = "gpu-operator"  # where the device-plugin ConfigMap goes


@dataclass(frozen=True)
class DataPolicy:
    name: str
    parallelization: int
    compression: bool
    caching_enabled: bool
    caching_strategy: str
    caching_size_bytes: int
    prefetching_enabled: bool
    prefetch_lookahead: int
    source: Source


@dataclass(frozen=True)
class GitOps:
    repo_url: str = "https://git.example.com/fleet.git"
    branch: str = "main"
    path: str = "out"
    secret_name: str | None = None  # the Secret Flux clones the repository with


#: The pull-request review calls a rise of the fleet's cost per hour above this fraction a
#: danger, unless the Fleet sets another (``spec.review.maxCostIncreasePercent``).
DEFAULT_COST_INCREASE = 0.20

#: The GitOps entry points fleetc renders, in this order, and those it renders unless the
#: Fleet's ``spec.gitops.entryPoints`` says otherwise.
ENTRY_POINTS = ("argocd", "flux", "kurator")
DEFAULT_ENTRY_POINTS = ("argocd", "flux")
#: The kind of Kurator object that registers a cluster unless the Fleet says (Kurator's examples').
ATTACHED_CLUSTER = "AttachedCluster"


@dataclass(frozen=True)
class Delivery:
    """Which GitOps entry points are rendered, and the Kurator kind of each cluster (the Fleet's
    ``spec.gitops.entryPoints`` and ``spec.clusters[].kind``). Kept apart from :class:`GitOps`
    and :class:`Cluster` because no cluster folder depends on it, so the record of what those
    folders are rendered from (:func:`fleetc.render.record.folder_inputs`) leaves it out."""

    entry_points: tuple[str, ...] = DEFAULT_ENTRY_POINTS  # in ENTRY_POINTS order
    #: (cluster, kind) of the clusters whose kind the Fleet names, by cluster name; the others
    #: are ATTACHED_CLUSTER (:meth:`kurator_kind`).
    kurator_kinds: tuple[tuple[str, str], ...] = ()

    def kurator_kind(self, cluster: str) -> str:
        return dict(self.kurator_kinds).get(cluster, ATTACHED_CLUSTER)


@dataclass(frozen=True)
class FleetModel:
    """Everything one compile places and renders. Tuples are sorted by name for determinism."""

    name: str
    namespace: str
    clusters: tuple[Cluster, ...]
    stages: tuple[Stage, ...]
    score_weights: ScoreWeights = field(default_factory=ScoreWeights)
    class_weights: ClassWeights = field(default_factory=ClassWeights)
    platforms: tuple[Platform, ...] = ()
    gpu_policy: GPUPolicy | None = None
    data_policies: tuple[DataPolicy, ...] = ()
    move_cost: float = 0.05  # score a stage must gain before it leaves its previous cluster
    gitops: GitOps = field(default_factory=GitOps)
    delivery: Delivery = field(default_factory=Delivery)
    #: (provenance name, name in messages) of every policy file: sources name files relative
    #: to the policy root (the same from any folder), messages as the user named them.
    policy_files: tuple[tuple[str, str], ...] = ()
    teams: tuple[Team, ...] = ()  # by platform, then team name
    budgets: tuple[PipelineBudget, ...] = ()  # by pipeline
    #: The rise of the fleet's cost per hour (a fraction) above which the pull-request review
    #: calls a change dangerous (Fleet ``spec.review.maxCostIncreasePercent``).
    cost_increase_limit: float = DEFAULT_COST_INCREASE

    def team_of(self, pipeline: str) -> Team | None:
        """The team ``pipeline`` belongs to, if any (validation allows at most one)."""
        return next((t for t in self.teams if pipeline in t.pipelines), None)

    def display(self, path: str) -> str:
        """How messages name the policy file a :class:`Source` names."""
        return dict(self.policy_files).get(path, path)

    def cluster(self, name: str) -> Cluster:
        return next(c for c in self.clusters if c.name == name)

    def stage(self, key: str) -> Stage:
        return next(s for s in self.stages if s.key == key)


@dataclass(frozen=True)
class Assignment:
    """Part (or all) of a stage on one cluster."""

    cluster: str
    replicas: int
    gpus: int  # total GPUs on this cluster (replicas x per-replica GPUs)


@dataclass(frozen=True)
class StagePlacement:
    stage: str  # Stage.key
    assignments: tuple[Assignment, ...]  # sorted by cluster name
    score: float  # weighted score in [0, 1] less the GPU type preference, replica-weighted
    reason: str = ""  # why the stage is unplaced (empty assignments, --allow-unplaced)


@dataclass(frozen=True)
class Recompile:
    """What an incremental recompile re-solved (:mod:`fleetc.placement.incremental`): the stages
    the change touched, and the candidates its last neighbourhood MILP placed (those and the
    residents it let move); ``lp_bound`` whether its bound is the LP's over the whole fleet
    (:func:`fleetc.placement.colgen.solve.relaxation_bound`), else a Lagrangian one."""

    touched: int
    candidates: int
    lp_bound: bool = True


@dataclass(frozen=True)
class Placement:
    """The optimizer's answer.

    ``bound`` is the LP relaxation's value: no placement scores more (``objective`` <= ``bound``).
    ``optimal``: the solver proved no placement is better (the exact path, solved to its
    tolerance, every stage placed, no time limit cut it short). ``gap`` is what is proven of
    this placement: 0 when it is optimal, else at most 1 - objective / bound short of the best.
    """

    stages: tuple[StagePlacement, ...]  # in FleetModel.stages order
    objective: float
    bound: float
    method: str  # e.g. "milp", "lp-rounding"
    #: Digest of the inputs it was compiled from (set by :mod:`fleetc.compiler`; '' if unknown).
    inputs: str = ""
    #: The time limit (seconds) that ran out while it was solved (set by :mod:`fleetc.placement.optimize`):
    #: more time may find better.
    time_limit: float | None = None
    #: Proven optimal (see the class docstring).
    optimal: bool = False
    #: The ``--solver`` it was compiled with when not the default (set by :mod:`fleetc.compiler`;
    #: '' for the default): ``explain`` needs it to tell the placement is not stale.
    solver: str = ""
    #: Set when a recompile re-solved only what the change touched (method ``incremental``).
    recompiled: Recompile | None = None

    @property
    def gap(self) -> float:
        """The proven gap: 0 for an optimal placement; else how far below the LP bound it is (the
        relaxation's own integrality gap included, so the true shortfall may be smaller)."""
        if self.optimal or self.bound <= 0:
            return 0.0
        return max(0.0, 1.0 - self.objective / self.bound)

    def of(self, stage_key: str) -> StagePlacement:
        return next(p for p in self.stages if p.stage == stage_key)


def degraded_platforms(model: FleetModel, stage: Stage) -> tuple[str, ...]:
    """The platforms governing serving ``stage`` whose active-active set lost a cluster (cordoned
    or drained): the stage then runs degraded (:func:`fleetc.placement.rules.least_replicas`),
    and resolve warns of it when it runs short."""
    if stage.type is not StageType.DEPLOYMENT:
        return ()
    governing = [platform for platform in model.platforms
                 if platform.primary_cluster and stage.pipeline in platform.pipelines]
    if not governing:
        return ()
    lost = {c.name for c in model.clusters if c.cordoned}
    return tuple(platform.name for platform in governing
                 if lost & {platform.primary_cluster, *platform.secondary_clusters})
