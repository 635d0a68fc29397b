"""Tests for fleetc.render: valid, deterministic manifests that say what the placement says."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.k8s import kustomize_build, require_upstream_schemas, validate_tree
from support.tree import by_logical_path
from support.yamlread import read, read_all

from fleetc.errors import InternalError
from fleetc.model import (
    GPU_PRODUCT_LABELS,
    Assignment,
    ClassWeights,
    Cluster,
    FleetModel,
    Input,
    Output,
    Placement,
    Source,
    Stage,
    StagePlacement,
    StageType,
    Taint,
    Toleration,
)
from fleetc.render import object_name, render
from fleetc.render.order import MARK_SCRIPT, RUN_SCRIPT, WAIT_SCRIPT
from fleetc.render.release import UNGATE_SCRIPT

GI = 1024**3
MI = 1024**2


def cluster(name: str, gpu_type: str | None, gpus: int, **kw: Any) -> Cluster:
    fields: dict[str, Any] = dict(
        name=name, provider="aws", region="us-east-1", jurisdiction="us", gpu_type=gpu_type, gpus=gpus,
        cpu_millis=256_000, memory_bytes=1024 * GI, taints=(), gpu_hour_cost=2.5, cpu_hour_cost=0.04,
        memory_gib_hour_cost=0.005, energy_efficiency=0.8, network_tier="high-performance",
        low_latency=False, edge=False, utilization=0.1, source=Source("fleet.yaml", f"spec.clusters.{name}"),
        gpu_product=GPU_PRODUCT_LABELS.get(gpu_type or "", ""), device_plugin_configured=True,
    )
    fields.update(kw)
    return Cluster(**fields)


def stage(pipeline: str, name: str, type_: StageType, **kw: Any) -> Stage:
    fields: dict[str, Any] = dict(
        pipeline=pipeline, namespace="ml", name=name, type=type_, dependencies=(), inputs=(), outputs=(),
        cpu_millis=4000, memory_bytes=16 * GI, gpus=0, gpu_types=(), replicas=1, min_replicas_per_cluster=1,
        tolerations=(), image=f"registry.example.com/{name}:1.0", command=(),
        source=Source("pipelines/llm.yaml", f"spec.stages.{name}"),
    )
    fields.update(kw)
    return Stage(**fields)


def fleet() -> tuple[FleetModel, Placement]:
    """Three clusters: two with A100s, one CPU-only cluster that runs nothing."""
    clusters = (
        cluster("cpu-only", None, 0),
        cluster("gpu-east", "a100", 16, taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),)),
        cluster("gpu-west", "a100", 8, memory_bytes=512 * GI + 512 * MI, cpu_millis=128_500),
    )
    gpu_tol = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    stages = (
        stage(
            "llm", "prep", StageType.DATAPROC, cpu_millis=500, memory_bytes=512 * MI, replicas=2,
            inputs=(Input("raw-corpus", "s3://data/raw", None, None, "us-east-1"),),
            outputs=(Output("tokens", "s3://data/tokens", "us-east-1"),),
            command=("python", "-m", "prep", "--shards", "64"),
        ),
        stage(
            "llm", "train", StageType.TRAINING, cpu_millis=32_000, memory_bytes=256 * GI, gpus=8,
            gpu_types=("a100",), replicas=1, dependencies=("prep",), tolerations=gpu_tol,
            inputs=(Input("tokens", None, "prep", "tokens", None),),
            outputs=(Output("checkpoint", "s3://models/ckpt", None), Output("metrics", "s3://models/metrics", None)),
            command=("torchrun", "--nproc-per-node", "8", "train.py"),
        ),
        stage(
            "llm", "eval", StageType.EVALUATION, gpus=1, replicas=1, dependencies=("train",), tolerations=gpu_tol,
            inputs=(Input("model", None, "train", "checkpoint", None),),
        ),
        stage(
            "llm", "serve", StageType.DEPLOYMENT, namespace="serving", gpus=1, replicas=3,
            tolerations=gpu_tol, inputs=(Input("model", None, "train", "checkpoint", None),),
        ),
    )
    model = FleetModel(name="prod", namespace="fleetc-system", clusters=clusters, stages=stages)
    placement = Placement(
        stages=(
            StagePlacement("llm/prep", (Assignment("gpu-east", 2, 0),), 0.8),
            StagePlacement("llm/train", (Assignment("gpu-east", 1, 8),), 0.9),
            StagePlacement("llm/eval", (Assignment("gpu-west", 1, 1),), 0.7),
            StagePlacement("llm/serve", (Assignment("gpu-east", 2, 2), Assignment("gpu-west", 1, 1)), 0.75),
        ),
        objective=0.8123456789,
        bound=0.85,
        method="milp",
    )
    return model, placement


def rendered(model: FleetModel, placement: Placement) -> dict[str, str]:
    """The files of a render (the warnings have tests of their own)."""
    return dict(render(model, placement).files)


def objects(files: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every rendered Kubernetes object keyed by its logical path (``clusters/<c>/<file>``,
    :mod:`support.tree`), not the kustomizations or the report."""
    return {
        path: read(text)
        for path, text in by_logical_path(files).items()
        if path.startswith("clusters/") and not path.endswith("/kustomization.yaml")
    }


def write(files: dict[str, str], out: Path) -> None:
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --------------------------------------------------------------------------- validity
def test_rendered_tree_is_valid_and_builds(tmp_path: Path) -> None:
    require_upstream_schemas()
    write(rendered(*fleet()), tmp_path)
    assert validate_tree(tmp_path) == []
    folders = sorted(p.name for p in (tmp_path / "clusters").iterdir())
    assert folders == ["cpu-only", "gpu-east", "gpu-west"]  # cpu-only runs nothing: an empty folder
    for name in folders:
        built = read_all(kustomize_build(tmp_path / "clusters" / name))
        folder = tmp_path / "clusters" / name
        listed = [entry for layer in ("infra", "workloads")
                  for entry in read((folder / layer / "kustomization.yaml").read_text())["resources"]]
        # gpu-east and gpu-west each with a gated training and its release: Job, ServiceAccount, Role, RoleBinding
        assert len(built) == len(listed) == {"cpu-only": 0, "gpu-east": 14, "gpu-west": 13}[name]


def test_file_layout() -> None:
    files = rendered(*fleet())
    assert list(files) == sorted(files)
    # a Job's name ends in the hash of its spec (pinned by test_engines and test_names, not here)
    files = {re.sub(r"-[0-9a-f]{8}\.yaml$", "-HASH.yaml", p) if "/job-" in p else p:
             re.sub(r"(job-ml-llm-[\w-]+?)-[0-9a-f]{8}\.yaml", r"\1-HASH.yaml", t) for p, t in files.items()}
    west = sorted(p.removeprefix("clusters/gpu-west/") for p in files if p.startswith("clusters/gpu-west/"))
    assert west == [
        "infra/kustomization.yaml",
        "infra/namespace-ml.yaml",
        "infra/namespace-serving.yaml",
        "infra/queue-fleetc-inference.yaml",
        "infra/queue-fleetc-training.yaml",
        "infra/role-ml-fleetc-release.yaml",
        "infra/rolebinding-ml-fleetc-release.yaml",
        "infra/serviceaccount-ml-fleetc-release.yaml",
        "kustomization.yaml",
        "workloads/deployment-serving-llm-serve.yaml",
        "workloads/horizontalpodautoscaler-serving-llm-serve.yaml",
        "workloads/job-ml-llm-eval-HASH.yaml",
        "workloads/job-ml-llm-eval-release-HASH.yaml",
        "workloads/kustomization.yaml",
        "workloads/poddisruptionbudget-serving-llm-serve.yaml",
        "workloads/service-serving-llm-serve.yaml",
    ]
    others = sorted(p for p in files if not p.startswith("clusters/gpu-"))
    assert others == [
        ".fleetc/render",
        "argocd/applicationset-argocd-fleetc.yaml",
        "argocd/kustomization.yaml",
        "clusters/cpu-only/infra/kustomization.yaml",
        "clusters/cpu-only/kustomization.yaml",
        "clusters/cpu-only/workloads/kustomization.yaml",
        *(f"flux/{c}/{name}" for c in ("cpu-only", "gpu-east", "gpu-west")
          for name in ("gitrepository-flux-system-fleetc.yaml", "kustomization-flux-system-fleetc-infra.yaml",
                       "kustomization-flux-system-fleetc-local.yaml",
                       "kustomization-flux-system-fleetc-workloads.yaml", "kustomization.yaml")),
        "local/cpu-only/kustomization.yaml",
        "local/gpu-east/kustomization.yaml",
        "local/gpu-west/kustomization.yaml",
        "placement.yaml",
    ]
    assert files["clusters/gpu-west/workloads/kustomization.yaml"] == (
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources:\n"
        "  - deployment-serving-llm-serve.yaml\n"
        "  - horizontalpodautoscaler-serving-llm-serve.yaml\n"
        "  - job-ml-llm-eval-HASH.yaml\n"
        "  - job-ml-llm-eval-release-HASH.yaml\n"
        "  - poddisruptionbudget-serving-llm-serve.yaml\n"
        "  - service-serving-llm-serve.yaml\n"
    )
    assert files["clusters/gpu-west/kustomization.yaml"] == (
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources:\n"
        "  - infra\n"
        "  - workloads\n"
        "  - ../../local/gpu-west\n"
    )
    assert files["clusters/cpu-only/workloads/kustomization.yaml"].endswith("resources: []\n")


def test_deterministic() -> None:
    assert rendered(*fleet()) == rendered(*fleet())


def test_no_secret_is_rendered() -> None:
    files = rendered(*fleet())
    assert all(obj["kind"] != "Secret" for obj in objects(files).values())
    assert not any("kind: Secret" in text for text in files.values())


# --------------------------------------------------------------------------- labels, names
def test_every_object_is_labelled() -> None:
    for path, obj in objects(rendered(*fleet())).items():
        meta = dict(obj["metadata"])
        if obj["kind"] == "Job":  # the name ends in the hash of the spec
            meta["name"] = re.sub(r"-[0-9a-f]{8}$", "", meta["name"])
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "fleetc", path
        if obj["kind"] in ("Namespace", "Queue", "ServiceAccount", "Role", "RoleBinding"):  # per namespace
            assert "fleetc.dev/stage" not in meta["labels"], path
            continue
        if meta["name"].endswith("-release"):  # the release Job of a gated stage: its stage's, and its role
            assert meta["labels"].pop("fleetc.dev/role") == "release", path
            meta["name"] = meta["name"].removesuffix("-release")
        expected = {
            "app.kubernetes.io/managed-by": "fleetc",
            "app.kubernetes.io/name": meta["name"].removeprefix("llm-"),
            "app.kubernetes.io/part-of": "llm",
            "fleetc.dev/pipeline": "llm",
            "fleetc.dev/stage": meta["name"].removeprefix("llm-"),
        }
        assert meta["labels"] == expected, path
        assert meta["annotations"]["fleetc.dev/source"].startswith("pipelines/llm.yaml#spec.stages."), path
        if obj["kind"] == "Job" and "tasks" in obj["spec"]:
            assert obj["spec"]["tasks"][0]["template"]["metadata"]["labels"] == expected
        elif obj["kind"] == "Job":
            assert obj["spec"]["template"]["metadata"]["labels"] == {**expected, "fleetc.dev/role": "release"}
        if obj["kind"] == "Deployment":
            assert obj["spec"]["template"]["metadata"]["labels"] == expected


def test_namespace_pipeline_label_only_when_single_pipeline() -> None:
    model, placement = fleet()
    other = stage("other", "serve", StageType.DEPLOYMENT, namespace="serving")
    model = replace(model, stages=(*model.stages, other))
    placement = replace(
        placement, stages=(*placement.stages, StagePlacement("other/serve", (Assignment("gpu-east", 1, 0),), 0.5))
    )
    objs = objects(rendered(model, placement))
    assert objs["clusters/gpu-east/namespace-ml.yaml"]["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "fleetc",
        "fleetc.dev/pipeline": "llm",
    }
    # shared by two pipelines, on every cluster (even where only one of them runs)
    for c in ("gpu-east", "gpu-west"):
        assert objs[f"clusters/{c}/namespace-serving.yaml"]["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "fleetc"
        }


def test_long_names_are_truncated_with_a_hash(tmp_path: Path) -> None:
    require_upstream_schemas()
    long_pipeline = "a-very-long-pipeline-name-for-the-quarterly-retraining"
    long_stage = "evaluation-on-the-holdout-set"
    full = f"{long_pipeline}-{long_stage}"
    assert len(full) > 63
    model = FleetModel(
        name="f", namespace="fleetc-system", clusters=(cluster("c1", "h100", 8),),
        stages=(stage(long_pipeline, long_stage, StageType.EVALUATION, gpus=1),),
    )
    key = f"{long_pipeline}/{long_stage}"
    placement = Placement((StagePlacement(key, (Assignment("c1", 1, 1),), 1.0),), 1, 1, "milp")
    expected = full[:54] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    assert object_name(model.stages[0]) == expected
    assert len(expected) == 63
    files = rendered(model, placement)
    [job] = [obj for path, obj in objects(files).items() if "/job-" in path]
    # room for the pod hostname <job>-worker-0 in 63 characters, the spec's hash at the end
    name = job["metadata"]["name"]
    assert len(name) == 63 - len("-worker-0")
    assert re.fullmatch(rf"{full[:36]}-[0-9a-f]{{8}}-[0-9a-f]{{8}}", name), name
    assert job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    write(files, tmp_path)
    assert validate_tree(tmp_path) == []


def test_short_names_are_kept() -> None:
    assert object_name(stage("p", "s" * 61, StageType.TRAINING)) == "p-" + "s" * 61


# --------------------------------------------------------------------------- workloads
def test_gang_job() -> None:
    job = objects(rendered(*fleet()))["clusters/gpu-east/job-ml-llm-train.yaml"]
    spec = job["spec"]
    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"], spec["maxRetry"]) == (
        "volcano", "fleetc-training", 1, 3,
    )
    assert spec["policies"] == [{"event": "PodEvicted", "action": "RestartJob"},
                                {"event": "PodFailed", "action": "RestartJob"}]
    (task,) = spec["tasks"]
    assert (task["name"], task["replicas"]) == ("worker", 1)
    pod = task["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # a failure fails the pod; the Job retries (test_lifecycle)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    container, marker = pod["containers"]  # serve depends on train: train marks its completion
    assert (container["name"], marker["name"]) == ("training", "fleetc-mark")
    assert container["command"][3:] == ["fleetc-run", "torchrun", "--nproc-per-node", "8", "train.py"]
    # the marker's 10m and 32Mi come out of the main container's requests: the pod requests the
    # stage's 32 cores and 256Gi, what the placement counted; the limits stay the stage's
    amounts = {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
    assert container["resources"] == {"requests": {"cpu": "31990m", "memory": "262112Mi", "nvidia.com/gpu": "8"},
                                      "limits": amounts}
    assert marker["resources"]["requests"] == {"cpu": "10m", "memory": "32Mi"}


def test_whole_gang_and_small_quantities() -> None:
    job = objects(rendered(*fleet()))["clusters/gpu-east/job-ml-llm-prep.yaml"]
    assert job["spec"]["minAvailable"] == 2
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [("master", 1), ("worker", 1)]
    assert job["spec"]["plugins"] == {"env": [], "pytorch": ["--master=master", "--worker=worker", "--port=23456"],
                                      "svc": []}
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod  # no GPUs asked for
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}


def test_odd_memory_is_plain_bytes() -> None:
    model, placement = fleet()
    model = replace(model, stages=tuple(replace(s, memory_bytes=1_000_001) for s in model.stages))
    job = objects(rendered(model, placement))["clusters/gpu-east/job-ml-llm-prep.yaml"]
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1000001"


def test_deployment_split_across_clusters() -> None:
    objs = objects(rendered(*fleet()))
    east = objs["clusters/gpu-east/deployment-serving-llm-serve.yaml"]
    west = objs["clusters/gpu-west/deployment-serving-llm-serve.yaml"]
    minimums = [objs[f"clusters/{c}/horizontalpodautoscaler-serving-llm-serve.yaml"]["spec"]["minReplicas"]
                for c in ("gpu-east", "gpu-west")]
    assert minimums == [2, 1]
    # the HPA owns the count: a replica count in the manifest would be re-applied by Flux on
    # every reconcile, undoing each scale-up
    assert "replicas" not in east["spec"] and "replicas" not in west["spec"]
    selector = {"fleetc.dev/pipeline": "llm", "fleetc.dev/stage": "serve"}
    assert east["spec"]["selector"] == {"matchLabels": selector}
    (container,) = east["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["readinessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}}
    assert east["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    svc = objs["clusters/gpu-west/service-serving-llm-serve.yaml"]
    assert svc["spec"] == {
        "type": "ClusterIP",
        "selector": selector,
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
    }


def test_pods_select_the_product_label_their_cluster_states() -> None:
    model, placement = fleet()
    model = replace(model, clusters=tuple(replace(c, gpu_product="NVIDIA-A100-PCIE-40GB") if c.gpus else c
                                          for c in model.clusters))
    job = objects(rendered(model, placement))["clusters/gpu-east/job-ml-llm-train.yaml"]
    assert job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB"}


def test_queues() -> None:
    model, placement = fleet()
    objs = objects(rendered(replace(model, class_weights=ClassWeights(0.96, 0.04, 0.0)), placement))
    training = objs["clusters/gpu-west/queue-fleetc-training.yaml"]
    assert training["metadata"] == {
        "name": "fleetc-training",
        "labels": {"app.kubernetes.io/managed-by": "fleetc"},
        "annotations": {"fleetc.dev/source": "fleet.yaml#spec.aigcConfig", "argocd.argoproj.io/sync-wave": "0",
                        "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"},
    }
    assert training["spec"] == {
        "weight": 10,
        "reclaimable": True,
        "capability": {"cpu": "128500m", "memory": "512Gi", "nvidia.com/gpu": "8"},
    }
    assert objs["clusters/gpu-west/queue-fleetc-inference.yaml"]["spec"]["weight"] == 1  # minimum 1
    default = objects(rendered(*fleet()))
    weights = [default[f"clusters/gpu-east/queue-fleetc-{c}.yaml"]["spec"]["weight"] for c in ("training", "inference")]
    assert weights == [6, 3]


def test_finetuning_queue_and_cpu_cluster() -> None:
    model = FleetModel(
        name="f", namespace="fleetc-system",
        clusters=(cluster("cpu", None, 0, cpu_millis=64_000, memory_bytes=128 * GI),),
        stages=(stage("p", "tune", StageType.FINETUNING),),
    )
    placement = Placement((StagePlacement("p/tune", (Assignment("cpu", 1, 0),), 1.0),), 1, 1, "milp")
    objs = objects(rendered(model, placement))
    q = objs["clusters/cpu/queue-fleetc-finetuning.yaml"]
    assert q["spec"] == {"weight": 1, "reclaimable": True, "capability": {"cpu": "64", "memory": "128Gi"}}
    job = objs["clusters/cpu/job-ml-p-tune.yaml"]
    assert job["spec"]["queue"] == "fleetc-finetuning"
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["name"] == "finetuning"


def test_env_var_wiring() -> None:
    objs = objects(rendered(*fleet()))

    def env(path: str) -> list[dict[str, str]]:
        obj = objs[path]
        template = obj["spec"]["tasks"][0]["template"] if obj["kind"] == "Job" else obj["spec"]["template"]
        return template["spec"]["containers"][0].get("env", [])

    assert env("clusters/gpu-east/job-ml-llm-prep.yaml") == [  # two pods: Volcano's pytorch plugin sets rank
        {"name": "FLEETC_INPUT_RAW_CORPUS", "value": "s3://data/raw"},
        {"name": "FLEETC_OUTPUT_TOKENS", "value": "s3://data/tokens"},
    ]
    assert env("clusters/gpu-east/job-ml-llm-train.yaml") == [
        {"name": "FLEETC_INPUT_TOKENS", "value": "s3://data/tokens"},  # from: prep.outputs.tokens
        {"name": "FLEETC_OUTPUT_CHECKPOINT", "value": "s3://models/ckpt"},
        {"name": "FLEETC_OUTPUT_METRICS", "value": "s3://models/metrics"},
        {"name": "MASTER_ADDR", "value": "localhost"},  # one pod: fleetc sets what the plugin would
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "PET_NPROC_PER_NODE", "value": "8"},
        {"name": "RANK", "value": "0"},
        {"name": "WORLD_SIZE", "value": "1"},
    ]
    assert env("clusters/gpu-west/deployment-serving-llm-serve.yaml") == [
        {"name": "FLEETC_INPUT_MODEL", "value": "s3://models/ckpt"},
    ]


def test_dangling_input_reference_is_an_internal_error() -> None:
    model, placement = fleet()
    broken = replace(model.stages[2], inputs=(Input("model", None, "train", "nope", None),))
    model = replace(model, stages=(*model.stages[:2], broken, model.stages[3]))
    with pytest.raises(InternalError, match="llm/train.nope"):
        rendered(model, placement)


def test_missing_stage_placement_is_an_internal_error() -> None:
    model, placement = fleet()
    with pytest.raises(InternalError, match="llm/serve"):
        rendered(model, replace(placement, stages=placement.stages[:3]))


def test_file_name_clash_is_an_internal_error() -> None:
    model, placement = fleet()
    # namespace "ml" + "llm-x-prep" and namespace "ml-llm" + "x-prep" would share a file name
    a = stage("llm-x", "prep", StageType.DEPLOYMENT)
    b = stage("x", "prep", StageType.DEPLOYMENT, namespace="ml-llm")
    model = replace(model, stages=(a, b))
    placement = Placement(
        (StagePlacement("llm-x/prep", (Assignment("gpu-east", 1, 0),), 1.0),
         StagePlacement("x/prep", (Assignment("gpu-east", 1, 0),), 1.0)),
        1, 1, "milp",
    )
    with pytest.raises(InternalError, match="deployment-ml-llm-x-prep.yaml"):
        rendered(model, placement)


# --------------------------------------------------------------------------- placement.yaml
def test_placement_report_exact_text() -> None:
    model = FleetModel(
        name="small", namespace="fleetc-system", clusters=(cluster("c1", "a100", 8), cluster("c2", "t4", 4)),
        stages=(
            stage("p", "train", StageType.TRAINING, gpus=4, gpu_types=("a100",), replicas=2),
            stage("p", "serve", StageType.DEPLOYMENT, gpus=1, replicas=3),
            stage("p", "eval", StageType.EVALUATION),
        ),
    )
    placement = Placement(
        stages=(
            StagePlacement("p/train", (Assignment("c1", 2, 8),), 0.91234567),
            StagePlacement("p/serve", (Assignment("c1", 1, 1), Assignment("c2", 2, 2)), 2 / 3),
            StagePlacement("p/eval", (), 0.0, reason="0/2 clusters fit p/eval: 2 are cordoned"),
        ),
        objective=1.2345678901,
        bound=1.5,
        method="lp-rounding",
    )
    assert rendered(model, placement)["placement.yaml"] == """\
apiVersion: fleetc.dev/v1alpha1
kind: Placement
fleet: small
method: lp-rounding
optimal: false
objective: 1.234568
bound: 1.5
gap: 0.176955
stages:
  - pipeline: p
    stage: train
    type: Training
    class: training
    gpuType: a100
    gpusPerReplica: 4
    replicas: 2
    clusters:
      - name: c1
        replicas: 2
        gpus: 8
    score: 0.912346
  - pipeline: p
    stage: serve
    type: Deployment
    class: inference
    gpuType: null
    gpusPerReplica: 1
    replicas: 3
    clusters:
      - name: c1
        replicas: 1
        gpus: 1
      - name: c2
        replicas: 2
        gpus: 2
    score: 0.666667
  - pipeline: p
    stage: eval
    type: Evaluation
    class: training
    gpuType: null
    gpusPerReplica: 0
    replicas: 1
    clusters: []
    score: 0.0
    unplaced: true
    reason: "0/2 clusters fit p/eval: 2 are cordoned"
"""


#: What both rclone containers of a Job with object-store data (the init container that waits for
#: an upstream stage's output, and the sidecar that marks the stage's own output done) are given.
RCLONE_ENV = """\
                - name: RCLONE_S3_ENV_AUTH
                  value: "true"
                - name: RCLONE_S3_PROVIDER
                  value: AWS"""
MARKER_RESOURCES = """\
              resources:
                requests:
                  cpu: 10m
                  memory: 32Mi
                limits:
                  cpu: 100m
                  memory: 128Mi"""


def _elide_scripts(text: str) -> str:
    """``text`` with every ``|`` block in a sequence cut to ``- | <its first line> ...``: the
    scripts are constants of fleetc.render.order, run by tests/test_scripts.py."""
    out: list[str] = []
    lines = iter(text.splitlines(keepends=True))
    for line in lines:
        out.append(line)
        if line.rstrip().endswith("- |"):
            first = next(lines)
            out[-1] = f"{line.rstrip()} {first.strip()} ...\n"
            depth = len(first) - len(first.lstrip())
            for following in lines:
                if following.strip() and len(following) - len(following.lstrip()) < depth:
                    out.append(following)
                    break
    return "".join(out)


def test_sample_job_exact_text() -> None:
    """Pins the full shape of a rendered Volcano Job (the reference sample in the docs): it
    waits for prep, so its pods are scheduling-gated and its release Job has the wait."""
    files = by_logical_path(rendered(*fleet()))
    text = files["clusters/gpu-east/job-ml-llm-train.yaml"]
    job = read(text)
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    assert [c["command"][2] for c in spec["containers"]] == [RUN_SCRIPT, MARK_SCRIPT]
    release = read(files["clusters/gpu-east/job-ml-llm-train-release.yaml"])
    pod = release["spec"]["template"]["spec"]
    assert [c["command"][2] for c in pod["initContainers"] + pod["containers"]] == [WAIT_SCRIPT, UNGATE_SCRIPT]
    assert pod["containers"][0]["command"][3:] == ["fleetc-release", f"{job['metadata']['name']}-worker-0"]
    assert pod["initContainers"][0]["command"][3:] == ["fleetc-wait", "_SUCCESS.0", "_SUCCESS.1"]
    text = _elide_scripts(text)
    text = re.sub(r"^  name: llm-train-[0-9a-f]{8}$", "  name: llm-train-HASH", text, flags=re.M)
    text = re.sub(r"(- name: FLEETC_RUN\n +value:) [0-9a-f]{16}$", r"\1 RUN", text, flags=re.M)
    assert text == f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: llm-train-HASH
  namespace: ml
  labels:
    app.kubernetes.io/managed-by: fleetc
    app.kubernetes.io/name: train
    app.kubernetes.io/part-of: llm
    fleetc.dev/pipeline: llm
    fleetc.dev/stage: train
  annotations:
    fleetc.dev/source: pipelines/llm.yaml#spec.stages.train
    argocd.argoproj.io/sync-wave: "1"
    argocd.argoproj.io/sync-options: SkipDryRunOnMissingResource=true
spec:
  schedulerName: volcano
  queue: fleetc-training
  minAvailable: 1
  maxRetry: 3
  policies:
    - event: PodEvicted
      action: RestartJob
    - event: PodFailed
      action: RestartJob
  tasks:
    - name: worker
      replicas: 1
      minAvailable: 1
      maxRetry: 3
      template:
        metadata:
          labels:
            app.kubernetes.io/managed-by: fleetc
            app.kubernetes.io/name: train
            app.kubernetes.io/part-of: llm
            fleetc.dev/pipeline: llm
            fleetc.dev/stage: train
        spec:
          restartPolicy: Never
          nodeSelector:
            nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
          tolerations:
            - key: nvidia.com/gpu
              operator: Exists
              effect: NoSchedule
          containers:
            - name: training
              image: registry.example.com/train:1.0
              command:
                - sh
                - -c
                - | status=/fleetc/status; rm -f "$status/exit-code"; stopped=; child= ...
                - fleetc-run
                - torchrun
                - --nproc-per-node
                - "8"
                - train.py
              env:
                - name: FLEETC_INPUT_TOKENS
                  value: s3://data/tokens
                - name: FLEETC_OUTPUT_CHECKPOINT
                  value: s3://models/ckpt
                - name: FLEETC_OUTPUT_METRICS
                  value: s3://models/metrics
                - name: MASTER_ADDR
                  value: localhost
                - name: MASTER_PORT
                  value: "23456"
                - name: PET_NPROC_PER_NODE
                  value: "8"
                - name: RANK
                  value: "0"
                - name: WORLD_SIZE
                  value: "1"
              resources:
                requests:
                  cpu: 31990m
                  memory: 262112Mi
                  nvidia.com/gpu: "8"
                limits:
                  cpu: "32"
                  memory: 256Gi
                  nvidia.com/gpu: "8"
              volumeMounts:
                - name: fleetc-status
                  mountPath: /fleetc/status
            - name: fleetc-mark
              image: rclone/rclone:1.68
              command:
                - sh
                - -c
                - | trap 'exit 143' TERM ...
                - fleetc-mark
                - _SUCCESS
              env:
{RCLONE_ENV}
                - name: RCLONE_S3_NO_CHECK_BUCKET
                  value: "true"
                - name: FLEETC_STAGE
                  value: llm/train
                - name: FLEETC_MARKER_DIR
                  value: ":s3:models/ckpt"
                - name: FLEETC_RUN
                  value: RUN
                - name: FLEETC_RESTART_POLICY
                  value: Never
                - name: FLEETC_RETRY_COUNT
                  valueFrom:
                    fieldRef:
                      fieldPath: metadata.annotations['volcano.sh/job-retry-count']
{MARKER_RESOURCES}
              volumeMounts:
                - name: fleetc-status
                  mountPath: /fleetc/status
          volumes:
            - name: fleetc-status
              emptyDir: {{}}
          schedulingGates:
            - name: fleetc.dev/upstream-completed
"""


@pytest.mark.first_row_fast
@pytest.mark.parametrize("generated", [False, True], ids=["bundled", "generated"])
def test_rendering_on_every_core_gives_the_one_process_bytes(generated: bool, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Clusters, placement.yaml, the GitOps entrypoints and the warnings (located in their
    policy files, as compile does), rendered split across forked processes (as a large fleet
    is): the same files, in the same order, and the same warnings as one process makes."""
    import sys

    import fleetc.render as rendering
    from fleetc.compiler import Options, compile_policies, load_policies
    from fleetc.infra import forkmap

    root = Path(__file__).resolve().parents[1]
    folder = root / "policies"
    if generated:
        sys.path.insert(0, str(root))
        from bench.generate import Spec, generate

        generate(Spec(clusters=12, stages=80, load=0.9, seed=3, platform=True, sovereignty=True)).write(tmp_path)
        folder = tmp_path
    loaded = load_policies([str(folder)])
    alone = compile_policies(loaded, Options(allow_unplaced=True))
    spawned: list[int] = []
    spawn = forkmap._spawn
    monkeypatch.setattr(forkmap, "_spawn", lambda *args: spawned.append(1) or spawn(*args))
    monkeypatch.setattr(forkmap, "MIN_PARALLEL_SIZE", 0)
    monkeypatch.setattr(forkmap, "usable_cores", lambda: 3)
    forks: list[int] = []  # children spawned by each of render's fork_map calls
    real = rendering.fork_map

    def counted(*args: Any) -> Any:
        before = len(spawned)
        result = real(*args)
        forks.append(len(spawned) - before)
        return result

    monkeypatch.setattr(rendering, "fork_map", counted)
    forked = compile_policies(loaded, Options(allow_unplaced=True))
    if forkmap._can_fork():
        assert forks == [2], "not rendered in two children"
    assert forked.placement == alone.placement
    assert list(forked.files.items()) == list(alone.files.items()) and len(alone.files) > 20
    assert forked.warnings == alone.warnings and all(w.line > 0 for w in alone.warnings)
    assert len(alone.warnings) >= (10 if generated else 1)  # several files and documents located
