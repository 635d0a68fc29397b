"""The policy kinds, as users write them: the single source of truth for ``schemas/*.json``.

Field names are the YAML spellings (camelCase, as in Kubernetes). Every field has a description:
it reaches the JSON Schema and from there the user's editor. Optional fields default to ``None``
here; the documented defaults are applied by :mod:`fleetc.resolve`, which knows how to derive
them from what the seed examples do say (``gpu-count``, ``low-power``, ``region``...).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$"
PERCENTAGE_PATTERN = r"^[0-9]+(\.[0-9]+)?%$"
DURATION_PATTERN = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"
URL_PATTERN = r"^[a-z][a-z0-9+.-]*://[^\s]+$"
#: A Kubernetes label value (apimachinery ``IsValidLabelValue``): at most 63 characters.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A DNS-1123 subdomain (the name of a Secret): at most 253 characters.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: An IPv4 or IPv6 CIDR block, as NetworkPolicy ``ipBlock.cidr`` takes it.
CIDR_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}|[0-9A-Fa-f:]+/[0-9]{1,3})$"
#: A label value that is not empty: regions, providers, jurisdictions and GPU types end up in
#: labels and node selectors.
NONEMPTY_LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
#: A region (free text, mapped to a jurisdiction by the Fleet): no line breaks or control characters.
REGION_PATTERN = r"^[^\x00-\x1f\x7f]+$"
#: A qualified name, as taint and label keys are: an optional DNS subdomain prefix and a '/'.
QUALIFIED_NAME_PATTERN = (r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*"
                          r"[A-Za-z0-9])?$")
OUTPUT_REF_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.outputs\.[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

#: Custom schema keyword: what a value should look like, in words, for error messages.
EXPECTED = "x-fleetc-expected"


def _text(pattern: str, expected: str, max_length: int | None = None) -> WithJsonSchema:
    """The JSON Schema of a string field: the pattern it must match, its length limit, and what
    it should look like, in words (:data:`EXPECTED`, for messages and editors)."""
    length = {} if max_length is None else {"maxLength": max_length}
    return WithJsonSchema({"type": "string", "pattern": pattern, **length, EXPECTED: expected})


LABEL_VALUE_WORDS = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
DNSLabel = Annotated[str, _text(
    DNS_LABEL_PATTERN, "a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a "
    "letter or digit, at most 63 characters)", 63)]
LabelValue = Annotated[str, _text(
    LABEL_VALUE_PATTERN, f"a Kubernetes label value ({LABEL_VALUE_WORDS}, at most 63 characters)", 63)]
SecretName = Annotated[str, _text(
    DNS_SUBDOMAIN_PATTERN, "the name of a Kubernetes Secret (a DNS-1123 subdomain: lower-case letters, "
    "digits, '-' and '.', at most 253 characters)", 253)]
CIDR = Annotated[str, _text(CIDR_PATTERN, "an IPv4 or IPv6 CIDR block, e.g. 10.20.0.0/16")]
NonEmptyLabelValue = Annotated[str, _text(
    NONEMPTY_LABEL_VALUE_PATTERN, f"a Kubernetes label value ({LABEL_VALUE_WORDS}, at most 63 characters)", 63)]
RegionName = Annotated[str, _text(
    REGION_PATTERN, "a region name: printable text, no line breaks or other control characters", 253)]
QualifiedName = Annotated[str, _text(
    QUALIFIED_NAME_PATTERN, f"a Kubernetes key such as example.com/gpu ({LABEL_VALUE_WORDS}, after an "
    "optional DNS prefix and '/')", 317)]
Quantity = Annotated[
    int | float | str,
    WithJsonSchema({
        "type": ["integer", "number", "string"], "pattern": QUANTITY_PATTERN, "minimum": 0,
        EXPECTED: "a Kubernetes quantity such as 16, 500m or 64Gi",
    }),
]
Percentage = Annotated[str, _text(PERCENTAGE_PATTERN, "a percentage such as 80%")]
Duration = Annotated[str, _text(DURATION_PATTERN, "a duration such as 500ms, 5s, 2m or 1h")]
StorageURL = Annotated[str, _text(URL_PATTERN, "a storage URL such as cos://bucket/path/ or nfs://server/export/")]
OutputRef = Annotated[str, _text(OUTPUT_REF_PATTERN, "a reference of the form <stage>.outputs.<output>")]
Weight = Annotated[float, Field(ge=0, le=1)]
AttributeValue = Annotated[
    str | int | float | bool,
    WithJsonSchema({"type": ["string", "integer", "number", "boolean"]}),
]


class _Spec(BaseModel):
    """Base of every policy object: unknown fields are errors, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def describe(text: str, **kwargs: Any) -> Any:
    """``Field(None, description=...)``: the common shape of an optional, documented field."""
    return Field(None, description=text, **kwargs)


class ObjectMeta(_Spec):
    name: DNSLabel = Field(description="Name of the object; unique per kind. Becomes part of "
                                       "paths and Kubernetes object names.")
    namespace: DNSLabel | None = describe(
        "Namespace. For an AIGCPipeline, the namespace its workloads run in (default: the "
        "pipeline's name; kube-*, default and the namespaces of Argo CD, Flux, Volcano, Fluid "
        "and the GPU operator are refused).")
    labels: dict[str, str] | None = describe("Free-form labels; not interpreted by fleetc.")
    annotations: dict[str, str] | None = describe("Free-form annotations; not interpreted.")


# --- Fleet -------------------------------------------------------------------------------------

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(_Spec):
    key: QualifiedName | None = describe("Taint key to tolerate; empty with operator Exists tolerates all.")
    operator: Literal["Exists", "Equal"] | None = describe(
        "Exists matches any value; Equal (the default) matches `value` exactly.")
    value: LabelValue | None = describe("Taint value to match with operator Equal.")
    effect: TaintEffect | None = describe("Taint effect to match; empty matches every effect.")


class Taint(_Spec):
    key: QualifiedName = Field(description="Taint key.")
    value: LabelValue | None = describe("Taint value (default: empty).")
    effect: TaintEffect = Field(description="What the taint does to work that does not "
                                            "tolerate it: NoSchedule and NoExecute repel it; "
                                            "PreferNoSchedule only discourages it.")


class ClusterCapacity(_Spec):
    cpu: Quantity | None = describe(
        "Allocatable CPU cores for fleetc's workloads. Default: 16 per GPU on GPU clusters, "
        "64 on clusters without GPUs (16 with attribute low-power).")
    memory: Quantity | None = describe(
        "Allocatable memory. Default: 128Gi per GPU on GPU clusters, 256Gi without GPUs "
        "(64Gi with attribute low-power).")


class ClusterPricing(_Spec):
    gpuHour: float | None = describe(
        "Price of one GPU-hour. Default from the GPU type: a100 3.0, h100 5.0, l4 0.8, "
        "a10 1.0, v100 2.0, t4 0.5, other types 2.0.", ge=0, le=1e6)
    cpuHour: float | None = describe("Price of one core-hour (default 0.04).", ge=0, le=1e6)
    memoryGiBHour: float | None = describe("Price of one GiB-hour of memory (default 0.005).",
                                           ge=0, le=1e6)


class FleetCluster(_Spec):
    name: DNSLabel = Field(description="Cluster name, as registered with the GitOps tool.")
    provider: NonEmptyLabelValue = Field(description="Infrastructure provider (huawei, aliyun, kubeedge...).")
    region: RegionName = Field(description=(
        "Region of the cluster, as its provider names it (e.g. cn-north-1, europe-west3, "
        "eastus): a region no provider of fleetc's table has is refused unless jurisdiction is "
        "stated or the Fleet maps it in regionJurisdictions; for an edge provider (kubeedge, "
        "openyurt...) the name of its site."))
    attributes: dict[str, AttributeValue] | None = describe(
        "Free-form attributes (Kurator's). fleetc reads: gpu-type (GPU model, e.g. a100), "
        "gpu-count (number of GPUs), gpus-per-node (GPUs one node carries; default 8, or the "
        "largest divisor of gpu-count below 8; a gang replica asking for more is split into "
        "pods that fit a node of this cluster, and what is placed must pack onto its nodes), "
        "cpu-per-node and memory-per-node (the cores and memory one node "
        "offers, e.g. 96 and 1Ti; default: the cluster's capacity shared equally over its "
        "gpu-count / gpus-per-node nodes, the whole cluster without GPUs; when given without "
        "capacity, the capacity defaults to that many nodes of it. A stage whose pods do not fit "
        "one node may not run on the cluster, and pods pack onto nodes by cores and memory "
        "too), gpu-product (the "
        "nvidia.com/gpu.product label of its nodes; default "
        "per gpu-type, e.g. NVIDIA-A100-SXM4-80GB for a100), device-plugin-configured (\"true\" "
        "once its GPU Operator ClusterPolicy sets devicePlugin.config.name to fleetc's ConfigMap: "
        "only then do time-sliced pods select -SHARED nodes), network-tier (high-performance | standard | low), "
        "low-latency (\"true\" for clusters close to users), edge-node, low-power (\"true\" for "
        "energy-efficient sites). Other keys are kept and ignored.")
    jurisdiction: NonEmptyLabelValue | None = describe(
        "Legal jurisdiction whose data-residency law applies (default: the Fleet's "
        "regionJurisdictions entry for its region, else the jurisdiction fleetc's table of "
        "provider regions gives it, e.g. eu for europe-west3; required for a region the table "
        "does not know, and under data sovereignty for an edge site). Under data sovereignty it labels namespaces "
        "(fleetc.dev/jurisdiction), so it must be a label value.")
    capacity: ClusterCapacity | None = describe("CPU and memory available to fleetc.")
    pricing: ClusterPricing | None = describe("Prices used by the cost score.")
    energyEfficiency: Weight | None = describe(
        "Energy efficiency in [0, 1], higher is better (default 0.9 with attribute low-power "
        "\"true\", else 0.6).")
    utilization: Weight | None = describe(
        "Share of the cluster already used by work fleetc does not place, in [0, 1] "
        "(default 0). Feeds the utilisation part of the compute score.")
    taints: list[Taint] | None = describe(
        "Cluster taints (Karmada style). Default: a cluster with attribute gpu-type carries "
        "gpu-type=<type>:NoSchedule. A stage that asks for GPUs of that type (or of any type) "
        "tolerates it by itself, as Kubernetes' ExtendedResourceToleration does; other work "
        "lands there only when it tolerates the taint (its tolerations, or the Fleet's "
        "clusterTolerations).")
    cordoned: bool | None = describe(
        "Take the cluster out of placement, as if it were lost (default false): its work is "
        "placed elsewhere, or the compile names the shortage. `fleetc compile --drain NAME` "
        "does the same for one compile.")
    batchScheduler: Literal["volcano", "kueue"] | None = describe(
        "The batch admission layer the cluster runs, which its gang stages are rendered for "
        "(default volcano): volcano renders Volcano Jobs and Queues; kueue renders batch/v1 Jobs "
        "labelled for a Kueue LocalQueue, with a ResourceFlavor per GPU type and a ClusterQueue "
        "(docs/pipelines.md, Kueue).")
    kind: Literal["AttachedCluster", "Cluster"] | None = describe(
        "Kind of the Kurator object that registers the cluster, as in Kurator's Fleet "
        "(default AttachedCluster). The Kurator entry point names the Flux Kustomizations "
        "Kurator makes for the cluster after it (README, Kurator).")


class FleetPlacement(_Spec):
    clusterTolerations: list[Toleration] | None = describe(
        "Tolerations every pipeline stage gets, in addition to its own.")
    moveCost: Weight | None = describe(
        "Stability: the score a stage must gain, in [0, 1], before fleetc moves it away from "
        "the cluster(s) the previous out/placement.yaml gave it (default 0.05; 0 disables).")


EntryPoint = Literal["argocd", "flux", "kurator"]


class GitOps(_Spec):
    repoURL: str | None = describe(
        "Git repository that holds the compiled output, as Argo CD and Flux fetch it "
        "(default: https://git.example.com/fleet.git, a placeholder to replace).")
    branch: str | None = describe("Branch Argo CD and Flux follow (default: main).")
    path: str | None = describe(
        "Folder of the compiled output inside the repository (default: out).")
    secretName: SecretName | None = describe(
        "Secret with the credentials Flux clones a private repository with (GitRepository "
        "secretRef: username and password, or identity and known_hosts): in flux-system for "
        "the Flux entry point, in the Fleet's namespace for the Kurator one. Argo CD keeps "
        "repository credentials in its own repository Secrets.")
    entryPoints: list[EntryPoint] | None = describe(
        "The GitOps entry points rendered (default [argocd, flux]): argocd (argocd/, an "
        "ApplicationSet), flux (flux/<cluster>/, a GitRepository and Kustomizations per "
        "cluster), kurator (kurator/, a Kurator Application in the Fleet's namespace), any "
        "combination. Each names every cluster folder in the order it must be applied.",
        min_length=1, json_schema_extra={"uniqueItems": True})


class FleetReview(_Spec):
    maxCostIncreasePercent: float | None = describe(
        "The rise of the fleet's cost per hour, in percent, above which the pull-request review "
        "(fleetc diff) lists the change under its dangers (default 20; fleetc diff --fail-on "
        "danger then fails).", ge=0, le=1_000_000)


class AIGCConfig(_Spec):
    trainingWeight: Weight | None = describe(
        "Weight of training work (Training, DataProc, Evaluation stages) when capacity is "
        "short (default 0.6).")
    inferenceWeight: Weight | None = describe("Weight of inference (Deployment stages), "
                                              "default 0.3.")
    finetuningWeight: Weight | None = describe("Weight of Finetuning stages, default 0.1.")


class ScoreWeightsSpec(_Spec):
    compute: float | None = describe("Weight of the compute score (default 0.35).", ge=0, le=1)
    cost: float | None = describe("Weight of the cost score (default 0.25).", ge=0, le=1)
    network: float | None = describe("Weight of the network score (default 0.20).", ge=0, le=1)
    energy: float | None = describe("Weight of the energy score (default 0.20).", ge=0, le=1)


class FleetSpec(_Spec):
    clusters: list[FleetCluster] = Field(description="Member clusters.", min_length=1)
    placement: FleetPlacement | None = describe("Fleet-wide placement rules.")
    aigcConfig: AIGCConfig | None = describe("Relative weights of the AIGC workload classes.")
    scoreWeights: ScoreWeightsSpec | None = describe(
        "Weights of the four score terms; they need not sum to 1 (fleetc normalises them).")
    gitops: GitOps | None = describe(
        "Where Argo CD, Flux and Kurator find the compiled output, and which of them are rendered for.")
    review: FleetReview | None = describe("What the pull-request review (fleetc diff) calls dangerous.")
    gpuThroughput: dict[NonEmptyLabelValue, Annotated[float, Field(gt=0, le=1_000_000)]] | None = describe(
        "GPU type -> its relative throughput, e.g. {h100: 2.0, a100: 1.0}: a stage may then ask "
        "for resources.throughput instead of a GPU count, and gets ceil(throughput / the type's "
        "throughput) GPUs per replica on a cluster of that type (8 a100 or 4 h100 for 8).")
    regionJurisdictions: dict[str, LabelValue] | None = describe(
        "Region -> legal jurisdiction, for clusters and data in that region (e.g. a site "
        "munich-dc: eu, or a region fleetc's table of provider regions does not know yet); "
        "it also declares the region known. A cluster's own jurisdiction and a data location's "
        "own jurisdiction take precedence.")


class Fleet(_Spec):
    """A fleet of clusters (Kurator's Fleet, with the fields fleetc needs to place work)."""

    apiVersion: Literal["fleet.kurator.dev/v1alpha1"] = Field(description="API version.")
    kind: Literal["Fleet"] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: FleetSpec = Field(description="The fleet's clusters and placement rules.")


# --- AIGCPipeline ------------------------------------------------------------------------------

StageTypeName = Literal["DataProc", "Training", "Finetuning", "Evaluation", "Deployment"]


class StageInput(_Spec):
    name: DNSLabel = Field(description="Input name, unique within the stage.")
    source: StorageURL | None = describe("Where the data is: a storage URL. Give this or from.")
    from_: OutputRef | None = Field(
        None, alias="from",
        description="Another stage's output: <stage>.outputs.<output>. Give this or source.")
    location: RegionName | None = describe(
        "Region where the data lives (for data locality and data sovereignty): a region of "
        "fleetc's table, of a Fleet cluster, or of the Fleet's regionJurisdictions, unless "
        "jurisdiction is stated. For from: inputs, the producing output's location applies.")
    jurisdiction: NonEmptyLabelValue | None = describe(
        "Legal jurisdiction of the data, when it is not that of its location's region (default: "
        "the Fleet's regionJurisdictions entry for location, else that of the Fleet's clusters "
        "in that region, else the one fleetc's table of provider regions gives it). For from: inputs, the "
        "producing output's jurisdiction applies.")
    secretName: SecretName | None = describe(
        "Secret, in the pipeline's namespace on every cluster that reads the input, holding the "
        "storage credentials Fluid mounts it with, under the keys Alluxio names for the URL "
        "scheme (s3: aws.accessKeyId, aws.secretKey; cos: fs.cos.access.key, "
        "fs.cos.secret.key, fs.cos.region, fs.cos.app.id; oss: fs.oss.accessKeyId, "
        "fs.oss.accessKeySecret, fs.oss.endpoint; obs: fs.obs.accessKey, fs.obs.secretKey, "
        "fs.obs.endpoint; gs: fs.gcs.accessKeyId, fs.gcs.secretAccessKey). Omit it for "
        "public data or nfs.")


class StageOutput(_Spec):
    name: DNSLabel = Field(description="Output name, unique within the stage.")
    storage: StorageURL = Field(description="Where the output is written: a storage URL.")
    location: RegionName | None = describe("Region where the storage lives.")
    secretName: SecretName | None = describe(
        "Secret, in the pipeline's namespace on every cluster that runs the stage or a stage "
        "reading the output, holding the storage credentials the output is written, marked "
        "complete and read with, under the keys Alluxio names for the URL scheme (as for an "
        "input's secretName). The stage's container finds them as files in the folder "
        "FLEETC_OUTPUT_<NAME>_CREDENTIALS. Omit it for nfs, or where the pods' own cloud "
        "identity reaches the storage.")
    jurisdiction: NonEmptyLabelValue | None = describe(
        "Legal jurisdiction of the stored data, when it is not that of its location's region.")


#: Most GPU types one stage may list: the optimizer's preference penalty (0.1 per rank, see
#: :mod:`fleetc.placement.scoring`) then stays below 1, so every allowed pair still adds value.
MAX_GPU_ALTERNATIVES = 8

GPUTypes = Annotated[
    str | list[str],
    WithJsonSchema({
        "type": ["string", "array"], "pattern": NONEMPTY_LABEL_VALUE_PATTERN, "maxLength": 63,
        "items": {"type": "string", "pattern": NONEMPTY_LABEL_VALUE_PATTERN, "maxLength": 63,
                  EXPECTED: f"a GPU type: a Kubernetes label value ({LABEL_VALUE_WORDS}, at most 63 characters)"},
        "minItems": 1, "maxItems": MAX_GPU_ALTERNATIVES,
        EXPECTED: "a GPU type such as a100, or a list of them in order of preference such as [h100, a100]",
    }),
]


class StageResources(_Spec):
    cpu: Quantity | None = describe("CPU per replica (default: 4 for DataProc, 8 otherwise).")
    memory: Quantity | None = describe("Memory per replica (default: 16Gi for DataProc and "
                                       "Deployment, 32Gi otherwise).")
    gpu: int | None = describe("GPUs per replica (default: 0 for DataProc, 1 otherwise).",
                               ge=0, le=1024)
    throughput: float | None = describe(
        "Instead of gpu: the throughput one replica needs, in the units of the Fleet's "
        "gpuThroughput; on a cluster of GPU type t a replica gets ceil(throughput / "
        "gpuThroughput[t]) GPUs (then node fit). It runs on the types gpuType lists (default: "
        "every type the Fleet states a throughput for).", gt=0, le=1_000_000)
    gpuType: GPUTypes | None = describe(
        "GPU model required, e.g. a100, or the models it may run on in order of preference, "
        "e.g. [h100, a100]: it runs on one of them (a gang's pods all on one), and the optimizer "
        "prefers earlier entries (default: any).")
    sharedGPU: bool | None = describe(
        "Accept time-sliced, shared GPU slots (GPUOptimizationPolicy) instead of whole GPUs "
        "(default: true for Deployment stages, false otherwise; never for Training and "
        "Finetuning, whose GPUs stay exclusive).")

    def gpu_types(self) -> tuple[str, ...]:
        """``gpuType`` as the ordered tuple of lower-case types it names (empty: any)."""
        if self.gpuType is None:
            return ()
        listed = [self.gpuType] if isinstance(self.gpuType, str) else self.gpuType
        return tuple(t.lower() for t in listed)


HTTP_PATH_PATTERN = r"^/[!-~]*$"


class ServingMetric(_Spec):
    name: str | None = describe(
        "What the HorizontalPodAutoscaler scales on: cpu (the default: CPU use as a share of "
        "the request), or the name of a per-pod custom metric served by the cluster's custom "
        "metrics API (for example nv_inference_queue_duration_us through prometheus-adapter).",
        pattern=r"^[A-Za-z_][A-Za-z0-9_:.-]*$", max_length=253)
    target: Quantity | None = describe(
        "The target: for cpu, the percentage of the request (default 70); for a custom metric, "
        "the average value per pod (required).")


class Serving(_Spec):
    port: int | None = describe(
        "The port the server listens on for HTTP (default: 8000 for the default Triton image, "
        "else 8080). The Service, the probes and the container port all use it.", ge=1, le=65535)
    readinessPath: str | None = describe(
        "HTTP path that answers 200 once the server can take requests (default: "
        "/v2/health/ready for the default Triton image, else /healthz).",
        pattern=HTTP_PATH_PATTERN, max_length=1024)
    metric: ServingMetric | None = describe("The autoscaling metric (default: cpu at 70%).")


class PipelineStage(_Spec):
    name: DNSLabel = Field(description="Stage name, unique within the pipeline.")
    type: StageTypeName = Field(description="What the stage does; decides how it is scheduled "
                                            "(Deployment serves; the others run to completion "
                                            "as a gang).")
    dependencies: list[DNSLabel] | None = describe("Stages that must finish first.")
    inputs: list[StageInput] | None = describe("Data the stage reads.")
    outputs: list[StageOutput] | None = describe("Data the stage writes.")
    resources: StageResources | None = describe("Resources per replica.")
    replicas: int | None = describe(
        "Deployment: serving replicas in total across clusters (default 2). Other types: pods "
        "in the gang, all placed in one cluster (default 1).", ge=1, le=100_000)
    minReplicasPerCluster: int | None = describe(
        "Deployment only: a cluster that serves the stage runs at least this many replicas, "
        "the warm minimum against cold starts (default 1).", ge=1, le=100_000)
    tolerations: list[Toleration] | None = describe("Cluster taints this stage tolerates.")
    image: str | None = describe(
        "Container image (default by type: python:3.11-slim for DataProc, "
        "nvcr.io/nvidia/pytorch:24.05-py3 for Training, Finetuning and Evaluation, "
        "nvcr.io/nvidia/tritonserver:24.05-py3 for Deployment).")
    command: list[str] | None = describe(
        "Container command (default: the image's; for the default Triton image of a Deployment, "
        "tritonserver serving the stage's first input as its model repository).")
    serving: Serving | None = describe(
        "Deployment only: the server's HTTP port, readiness path and autoscaling metric.")


class PipelineSpec(_Spec):
    stages: list[PipelineStage] = Field(description="The pipeline's stages.", min_length=1)
    maxHourlyCost: float | None = describe(
        "Cap on the hourly cost of the pipeline's stages together (replicas x (GPUs x GPU-hour + "
        "cores x core-hour + GiB x GiB-hour) on the clusters they run on): capped, placement "
        "trades score for cost within it.", ge=0, le=1e9)


class AIGCPipeline(_Spec):
    """An end-to-end AIGC pipeline: data preparation, training, evaluation, serving."""

    apiVersion: Literal["aigc.kurator.dev/v1alpha1"] = Field(description="API version.")
    kind: Literal["AIGCPipeline"] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: PipelineSpec = Field(description="The pipeline's stages.")


# --- AIGCPlatform ------------------------------------------------------------------------------


class StorageEndpoints(_Spec):
    jurisdiction: LabelValue = Field(description="The jurisdiction whose storage this is.")
    cidrs: list[CIDR] = Field(description="Address blocks of that storage (object store, NFS "
                                          "server...), e.g. 10.20.0.0/16.", min_length=1)


class Security(_Spec):
    dataSovereignty: bool | None = describe(
        "Data never leaves its jurisdiction: a stage reading data located in a jurisdiction "
        "runs only on clusters of that jurisdiction (default false).")
    storageEndpoints: list[StorageEndpoints] | None = describe(
        "Under dataSovereignty, the storage each jurisdiction's stages may reach. With "
        "endpoints declared for a cluster's jurisdiction, the namespaces of governed pipelines "
        "there get a NetworkPolicy allowing egress only to DNS, their own namespace and these "
        "blocks; with none, no egress policy is rendered (a warning says so).")
    auditEnabled: bool | None = describe("Inference results are auditable (default false).")
    encryptionAtRest: bool | None = describe("Data is encrypted at rest (default false).")


class Performance(_Spec):
    inferenceTimeout: Duration | None = describe("Timeout of one inference request "
                                                 "(default 30s).")
    trainingPriority: Literal["low", "medium", "high", "critical"] | None = describe(
        "Scheduling priority of training work in the clusters (default medium).")


class MultiCluster(_Spec):
    primaryCluster: DNSLabel = Field(description="Cluster serving as the primary.")
    secondaryClusters: list[DNSLabel] | None = describe(
        "Clusters that also serve, active-active with the primary.")
    failoverHeadroom: bool | None = describe(
        "Keep failover headroom (default false): losing any one of these clusters leaves room "
        "on the others for all the serving replicas it ran (GPUs, cores and memory); the "
        "optimizer keeps that room free and the verifier checks it.")


GPUCount = Annotated[int, Field(ge=0, le=10_000_000)]


class Team(_Spec):
    name: DNSLabel = Field(description="Team name, unique within the platform. Names its queue on "
                                       "every cluster (Volcano Queue or Kueue ClusterQueue fleetc-team-<name>).")
    namespaces: list[DNSLabel] | None = describe(
        "The team's pipelines: those (governed by the platform) whose namespace is one of these.")
    pipelineSelector: dict[QualifiedName, LabelValue] | None = describe(
        "The team's pipelines: those (governed by the platform) whose metadata.labels carry all "
        "of these labels. With namespaces too, a pipeline matching either belongs to the team.")
    gpuQuota: dict[NonEmptyLabelValue, GPUCount] | None = describe(
        "Fleet-wide cap of GPUs per GPU type, e.g. {h100: 32}: the team's stages never take more "
        "GPUs of that type over all clusters together (time-sliced slots count 1 / slotsPerGPU of a "
        "GPU each). A hard rule of placement; each cluster's queue for the team caps it at the "
        "team's GPUs placed there.")
    guaranteed: dict[NonEmptyLabelValue, GPUCount] | None = describe(
        "GPUs per type the in-cluster schedulers keep for the team (at most its gpuQuota of that "
        "type): rendered as Volcano Queue guarantee and as the part of its Kueue quota the team "
        "does not lend, over the clusters its GPUs are placed on.")
    maxHourlyCost: float | None = describe(
        "Cap on the hourly cost of the team's stages together (replicas x (GPUs x GPU-hour + cores "
        "x core-hour + GiB x GiB-hour) on the clusters they run on): capped, placement trades score "
        "for cost within it.", ge=0, le=1e9)


class PlatformSpec(_Spec):
    security: Security | None = describe("Compliance settings.")
    performance: Performance | None = describe("Serving and scheduling performance settings.")
    multiCluster: MultiCluster | None = describe("High-availability layout of serving stages.")
    pipelines: list[DNSLabel] | None = describe(
        "Pipelines the platform governs (default: every pipeline compiled with it).")
    teams: list[Team] | None = describe(
        "Teams and their fleet-wide GPU quotas and budgets. A governed pipeline belongs to the "
        "team whose namespaces or pipelineSelector it matches (to at most one).")


class AIGCPlatform(_Spec):
    """Platform-wide rules for the pipelines it governs: compliance, performance, HA."""

    apiVersion: Literal["aigc.kurator.dev/v1alpha1"] = Field(description="API version.")
    kind: Literal["AIGCPlatform"] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: PlatformSpec = Field(description="The platform's rules.")


# --- GPUOptimizationPolicy ---------------------------------------------------------------------


class TimeSlicing(_Spec):
    enabled: bool | None = describe("Advertise each GPU as several (default false).")
    replicas: int | None = describe("How many slots each GPU is advertised as (default 1).",
                                    ge=1, le=64)


class MemoryManagement(_Spec):
    defragmentThreshold: Percentage | None = describe(
        "GPU memory use above which a node is defragmented; capacity above it is kept free.")
    compactionStrategy: Literal["lazy", "eager"] | None = describe(
        "When to compact GPU memory (default lazy).")


class SharingStrategy(_Spec):
    enabled: bool | None = describe("Let workloads share a GPU (default false).")
    maxSharers: int | None = describe("Most workloads on one GPU (default 1).", ge=1, le=64)


class DevicePlugin(_Spec):
    namespace: DNSLabel | None = describe(
        "Namespace of the NVIDIA device plugin, where fleetc renders its ConfigMap (default "
        "gpu-operator, the GPU Operator's).")


class GPUPolicySpec(_Spec):
    timeSlicing: TimeSlicing | None = describe("NVIDIA device plugin time-slicing.")
    devicePlugin: DevicePlugin | None = describe("Where the NVIDIA device plugin runs.")
    memoryManagement: MemoryManagement | None = describe("GPU memory fragmentation control.")
    sharingStrategy: SharingStrategy | None = describe("GPU sharing between workloads.")


class GPUOptimizationPolicy(_Spec):
    """How the fleet's GPUs are shared and kept unfragmented."""

    apiVersion: Literal["scheduling.kurator.dev/v1alpha1"] = Field(description="API version.")
    kind: Literal["GPUOptimizationPolicy"] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: GPUPolicySpec = Field(description="GPU sharing and memory rules.")


# --- DataOptimizationPolicy --------------------------------------------------------------------


class Preprocessing(_Spec):
    parallelization: int | None = describe("Parallel workers of DataProc stages (default 1).",
                                           ge=1, le=4096)
    compression: bool | None = describe("Compress preprocessed data (default false).")


class Caching(_Spec):
    enabled: bool | None = describe("Cache input data near the compute (default false).")
    strategy: Literal["LRU", "LFU"] | None = describe("Cache eviction strategy (default LRU).")
    size: Quantity | None = describe("Cache size per cluster (default 100Gi).")


class Prefetching(_Spec):
    enabled: bool | None = describe("Load data before the stage asks for it (default false).")
    lookahead: int | None = describe("How many files ahead to prefetch (default 0).", ge=0,
                                     le=1_000_000)


class DataPolicySpec(_Spec):
    preprocessing: Preprocessing | None = describe("Data preparation settings.")
    caching: Caching | None = describe("Data caching near the GPUs.")
    prefetching: Prefetching | None = describe("Data prefetching.")


class DataOptimizationPolicy(_Spec):
    """How training data reaches the GPUs: preprocessing, caching, prefetching."""

    apiVersion: Literal["aigc.kurator.dev/v1alpha1"] = Field(description="API version.")
    kind: Literal["DataOptimizationPolicy"] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: DataPolicySpec = Field(description="Data path settings.")


PolicyObject = Fleet | AIGCPipeline | AIGCPlatform | GPUOptimizationPolicy | DataOptimizationPolicy

#: Every kind fleetc reads, by kind name.
KINDS: dict[str, type[PolicyObject]] = {
    model.model_fields["kind"].annotation.__args__[0]: model  # type: ignore[union-attr]
    for model in (Fleet, AIGCPipeline, AIGCPlatform, GPUOptimizationPolicy,
                  DataOptimizationPolicy)
}


def api_version(kind: str) -> str:
    return KINDS[kind].model_fields["apiVersion"].annotation.__args__[0]  # type: ignore
