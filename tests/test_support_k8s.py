"""Tests for tests/support/k8s.py: the validator must accept real manifests and refuse broken ones.

Every negative test matters: a validator that accepts everything would make every
manifest test in the suite pass vacuously.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from support.k8s import (
    kustomize_build,
    require_upstream_schemas,
    validate_kustomization,
    validate_object,
    validate_tree,
)

POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "trainer"}},
    "spec": {
        "containers": [{
            "name": "main",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "train.py"],
            "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "16", "memory": "64Gi"}},
        }],
        "restartPolicy": "OnFailure",
    },
}


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }]},
            },
        },
    }


def volcano_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "llm-train", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "queue": "research",
            "minAvailable": 2,
            "tasks": [{"name": "worker", "replicas": 2, "template": copy.deepcopy(POD_TEMPLATE)}],
        },
    }


# --------------------------------------------------------------------------- core kinds
def test_valid_deployment_passes() -> None:
    assert validate_object(deployment()) == []


def test_deployment_typo_field_is_refused() -> None:
    obj = deployment()
    obj["spec"]["replica"] = obj["spec"].pop("replicas")
    errors = validate_object(obj)
    assert errors and "replica" in errors[0], errors


def test_deployment_unknown_nested_field_is_refused() -> None:
    obj = deployment()
    obj["spec"]["template"]["spec"]["containers"][0]["imagePolicy"] = "Always"
    assert any("imagePolicy" in e for e in validate_object(obj))


def test_deployment_wrong_type_is_refused() -> None:
    obj = deployment()
    obj["spec"]["replicas"] = "two"
    errors = validate_object(obj)
    assert errors and errors[0].startswith("spec/replicas:"), errors


def test_bad_name_is_refused() -> None:
    obj = deployment()
    obj["metadata"]["name"] = "Web_1"
    assert any("metadata/name" in e for e in validate_object(obj))
    del obj["metadata"]["name"]
    assert "metadata/name: required" in validate_object(obj)


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
     "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}},
    {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
              "minReplicas": 1, "maxReplicas": 5,
              "metrics": [{"type": "Resource", "resource": {
                  "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}},
    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
    {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny"},
     "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
     "value": 1000, "globalDefault": False},
], ids=lambda o: o["kind"])
def test_other_core_kinds_pass(obj: dict[str, Any]) -> None:
    assert validate_object(obj) == []


def test_unknown_kind_is_refused() -> None:
    errors = validate_object({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert len(errors) == 1 and errors[0].startswith("no schema for example.com/v1 Widget"), errors
    # a look-alike group must not borrow a core schema
    obj = deployment()
    obj["apiVersion"] = "apps.example.com/v1"
    assert validate_object(obj)[0].startswith("no schema for apps.example.com/v1 Deployment")


def test_validate_1000_deployments_is_fast() -> None:
    obj = deployment()
    validate_object(obj)  # warm-up: builds and caches the validator
    start = time.perf_counter()
    for _ in range(1000):
        validate_object(obj)
    print(f"\nvalidate_object: {time.perf_counter() - start:.3f} s per 1,000 Deployments")


# --------------------------------------------------------------------------- CRD kinds
def test_volcano_job_passes_and_unknown_task_field_is_refused() -> None:
    require_upstream_schemas()
    assert validate_object(volcano_job()) == []
    bad = volcano_job()
    bad["spec"]["tasks"][0]["gpuCount"] = 8
    errors = validate_object(bad)
    assert errors and errors[0].startswith("spec/tasks/0:") and "gpuCount" in errors[0], errors


def test_volcano_job_wrong_type_and_bad_metadata_are_refused() -> None:
    require_upstream_schemas()
    bad = volcano_job()
    bad["spec"]["minAvailable"] = "two"
    assert any(e.startswith("spec/minAvailable:") for e in validate_object(bad))
    bad = volcano_job()
    bad["metadata"]["labelz"] = {"a": "b"}
    assert any(e.startswith("metadata:") and "labelz" in e for e in validate_object(bad))


def test_kueue_objects_validate_against_their_v1beta2_schemas() -> None:
    require_upstream_schemas()
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
             "spec": {"cohortName": "all", "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                 {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}}
    assert validate_object(queue) == []
    queue["spec"]["cohort"] = queue["spec"].pop("cohortName")  # v1beta1's spelling
    assert validate_object(queue) == ["spec: Additional properties are not allowed ('cohort' was unexpected)"]
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": "q"}}
    assert validate_object(local) == []


def test_int_or_string_accepts_both() -> None:
    require_upstream_schemas()
    job = volcano_job()
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": "http"}}
    assert validate_object(job) == []
    container["livenessProbe"]["httpGet"]["port"] = 8080
    assert validate_object(job) == []
    container["livenessProbe"]["httpGet"]["port"] = [8080]
    assert validate_object(job) != []


def test_argocd_applicationset_passes() -> None:
    require_upstream_schemas()
    appset = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "trainer", "namespace": "argocd"},
        "spec": {
            "goTemplate": True,
            "generators": [{"list": {"elements": [{"cluster": "gpu-east", "url": "https://10.0.0.1"}]}}],
            "template": {
                "metadata": {"name": "trainer-{{.cluster}}"},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": "https://git.example.com/fleet.git", "targetRevision": "main",
                               "path": "clusters/{{.cluster}}"},
                    "destination": {"server": "{{.url}}", "namespace": "ml"},
                    "syncPolicy": {"automated": {"prune": True, "selfHeal": True}},
                },
            },
        },
    }
    assert validate_object(appset) == []
    appset["spec"]["template"]["spec"]["sauce"] = {}
    assert any("sauce" in e for e in validate_object(appset))


def test_flux_kustomization_and_gitrepository_pass() -> None:
    require_upstream_schemas()
    repo = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": "https://git.example.com/fleet.git", "ref": {"branch": "main"}},
    }
    ks = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "gpu-east", "namespace": "flux-system"},
        "spec": {"interval": "10m", "path": "./clusters/gpu-east", "prune": True,
                 "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
    }
    assert validate_object(repo) == []
    assert validate_object(ks) == []
    ks["apiVersion"] = "kustomize.toolkit.fluxcd.io/v1beta2"  # removed upstream: no schema
    assert validate_object(ks)[0].startswith("no schema for")


# --------------------------------------------------------------------------- kustomize and trees
def test_validate_kustomization() -> None:
    good = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "namespace": "ml", "resources": ["job.yaml"]}
    assert validate_kustomization(good) == []
    assert validate_kustomization({**good, "resource": ["x"]}) == ["resource: unknown kustomization field"]
    assert validate_kustomization({**good, "resources": [1]}) != []


def test_kustomize_build(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "namespace: ml\nresources:\n- cm.yaml\n"
    )
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  k: v\n")
    out = kustomize_build(tmp_path)
    assert "kind: ConfigMap" in out and "namespace: ml" in out
    (tmp_path / "kustomization.yaml").write_text("resources:\n- missing.yaml\n")
    with pytest.raises(AssertionError, match="missing.yaml"):
        kustomize_build(tmp_path)


def test_validate_tree(tmp_path: Path) -> None:
    (tmp_path / "placement.yaml").write_text("clusters: {a: [1, 2]}\n")  # fleetc's report: skipped
    (tmp_path / ".fleetc").mkdir()
    (tmp_path / ".fleetc" / "state.yaml").write_text("anything: 1\n")
    app = tmp_path / "clusters" / "a"
    app.mkdir(parents=True)
    (app / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- all.yaml\n")
    (app / "all.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n  creationTimestamp: 2024-01-01T00:00:00Z\n"
        "---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  k: v\n  extra: 1\n")
    assert validate_tree(tmp_path) == ["clusters/a/all.yaml#1: data/extra: 1 is not of type 'string', 'null'"]
