"""Rendering of the platform and GPU policies: PriorityClass, HPA, PDB, inference timeout,
jurisdiction labels and egress NetworkPolicy, the device plugin ConfigMap, and the warnings."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.k8s import kustomize_build, require_upstream_schemas, validate_tree
from support.yamlread import read, read_all
from test_render import fleet, objects, write

from fleetc.errors import Diagnostic
from fleetc.model import Assignment, DataPolicy, FleetModel, GitOps, GPUPolicy, Placement, Platform, Source
from fleetc.render import PRIORITY_VALUES, render
from fleetc.render.release import API_EGRESS_POLICY

PLATFORM_FILE = "policies/platform.yaml"
GPU_FILE = "policies/gpu.yaml"


def platform(name: str = "prod", **kw: Any) -> Platform:
    fields: dict[str, Any] = dict(
        name=name, data_sovereignty=True, audit_enabled=True, encryption_at_rest=True,
        inference_timeout_seconds=2.5, training_priority="high", primary_cluster=None,
        secondary_clusters=(), pipelines=("llm",), source=Source(PLATFORM_FILE, "spec"),
        storage_endpoints=(("us", ("10.20.0.0/16", "192.0.2.10/32")),),
    )
    fields.update(kw)
    return Platform(**fields)


def gpu_policy(**kw: Any) -> GPUPolicy:
    fields: dict[str, Any] = dict(
        name="gpu", time_slicing_replicas=4, defragment_threshold=0.8, compaction_strategy="lazy",
        sharing_enabled=True, max_sharers=2, source=Source(GPU_FILE, "spec"),
    )
    fields.update(kw)
    return GPUPolicy(**fields)


def governed(**kw: Any) -> tuple[FleetModel, Placement]:
    """The test fleet with a platform governing ``llm`` and a GPU policy; serving shares GPUs."""
    model, placement = fleet()
    stages = tuple(replace(s, shared_gpu=True) if s.name == "serve" else s for s in model.stages)
    fields: dict[str, Any] = dict(stages=stages, platforms=(platform(),), gpu_policy=gpu_policy())
    fields.update(kw)
    return replace(model, **fields), placement


def governed_objects(**kw: Any) -> dict[str, dict[str, Any]]:
    return objects(dict(render(*governed(**kw)).files))


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    template = obj["spec"]["tasks"][0]["template"] if obj["kind"] == "Job" else obj["spec"]["template"]
    spec: dict[str, Any] = template["spec"]
    return spec


# --------------------------------------------------------------------------- validity
def test_every_object_validates_and_builds(tmp_path: Path) -> None:
    require_upstream_schemas()
    data = DataPolicy("data", 8, True, True, "LFU", 50 * 1024**3, True, 4, Source("policies/data.yaml", "spec"))
    write(dict(render(*governed(data_policies=(data,))).files), tmp_path)
    assert validate_tree(tmp_path) == []
    for folder in sorted((tmp_path / "clusters").iterdir()):
        built = read_all(kustomize_build(folder))
        listed = [entry for layer in ("infra", "workloads")
                  for entry in read((folder / layer / "kustomization.yaml").read_text())["resources"]]
        assert len(built) == len(listed)
        assert all(obj["kind"] != "Secret" for obj in built)


#: What a credential looks like in rendered text (the validator rejects these in policies).
CREDENTIALS = [
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"(?i)(password|passwd|secret|token)\s*[=:]\s*\S"),
    re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),  # URL userinfo user:pass@
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]


def strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (k, *strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def test_no_credential_like_string_is_rendered() -> None:
    data = DataPolicy("data", 8, True, True, "LRU", 1024**3, True, 0, Source("policies/data.yaml", "spec"))
    files = render(*governed(data_policies=(data,))).files
    found = [(path, s) for path, text in files.items() for s in strings(read(text))
             if any(p.search(s) for p in CREDENTIALS)]
    assert found == []


@pytest.mark.parametrize("bad", ["AKIAIOSFODNN7EXAMPLE", "password=hunter2", "token: abc",
                                 "s3://user:pass@host/bucket", "-----BEGIN RSA PRIVATE KEY-----"])
def test_the_credential_scan_can_fail(bad: str) -> None:
    assert any(p.search(bad) for p in CREDENTIALS)


# --------------------------------------------------------------------------- trainingPriority
def test_priority_class_exact() -> None:
    objs = governed_objects()
    for c in ("gpu-east", "gpu-west"):  # both run gang stages of the governed pipeline
        assert objs[f"clusters/{c}/priorityclass-fleetc-training-high.yaml"] == {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": "fleetc-training-high",
                "labels": {"app.kubernetes.io/managed-by": "fleetc"},
                "annotations": {"fleetc.dev/source": "policies/platform.yaml#spec.performance.trainingPriority",
                                "argocd.argoproj.io/sync-wave": "0"},
            },
            "value": 100_000,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "fleetc: training work of platforms with trainingPriority high",
        }


def test_value_table_is_ordered_and_below_system_classes() -> None:
    levels = ["low", "medium", "high", "critical"]
    assert list(PRIORITY_VALUES) == levels
    values = [PRIORITY_VALUES[level] for level in levels]
    assert values == sorted(values) and values[-1] < 1_000_000_000


def test_jobs_name_the_priority_class() -> None:
    job = governed_objects()["clusters/gpu-east/job-ml-llm-train.yaml"]
    assert job["spec"]["priorityClassName"] == "fleetc-training-high"
    assert pod_spec(job)["priorityClassName"] == "fleetc-training-high"


def test_highest_priority_of_several_platforms_wins() -> None:
    platforms = (platform("a", training_priority="low"), platform("b", training_priority="critical"))
    objs = governed_objects(platforms=platforms)
    assert objs["clusters/gpu-west/job-ml-llm-eval.yaml"]["spec"]["priorityClassName"] == "fleetc-training-critical"
    assert sorted(p for p in objs if "priorityclass" in p) == [
        "clusters/gpu-east/priorityclass-fleetc-training-critical.yaml",
        "clusters/gpu-west/priorityclass-fleetc-training-critical.yaml",
    ]


def test_ungoverned_pipeline_has_no_priority() -> None:
    objs = governed_objects(platforms=(platform(pipelines=("other",)),))
    assert not any("priorityclass" in p for p in objs)
    job = objs["clusters/gpu-east/job-ml-llm-train.yaml"]
    assert "priorityClassName" not in job["spec"] and "priorityClassName" not in pod_spec(job)


# --------------------------------------------------------------------------- serving
def test_inference_timeout_reaches_env_and_probe() -> None:
    platforms = (platform("a", inference_timeout_seconds=30.0), platform("b", inference_timeout_seconds=2.5))
    deployment = governed_objects(platforms=platforms)["clusters/gpu-east/deployment-serving-llm-serve.yaml"]
    (container,) = pod_spec(deployment)["containers"]
    assert {"name": "FLEETC_INFERENCE_TIMEOUT_SECONDS", "value": "2.5"} in container["env"]
    assert container["readinessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "timeoutSeconds": 3}


def test_whole_second_timeout_is_an_integer_string() -> None:
    deployment = governed_objects(platforms=(platform(inference_timeout_seconds=5.0),))[
        "clusters/gpu-west/deployment-serving-llm-serve.yaml"]
    assert {"name": "FLEETC_INFERENCE_TIMEOUT_SECONDS", "value": "5"} in pod_spec(deployment)["containers"][0]["env"]


def test_timeout_is_not_given_to_gang_stages() -> None:
    job = governed_objects()["clusters/gpu-east/job-ml-llm-train.yaml"]
    assert all(e["name"] != "FLEETC_INFERENCE_TIMEOUT_SECONDS" for e in pod_spec(job)["containers"][0]["env"])


@pytest.mark.parametrize(("cluster", "warm", "min_available"), [("gpu-east", 2, 1), ("gpu-west", 1, 1)])
def test_autoscaler_and_disruption_budget_exact(cluster: str, warm: int, min_available: int) -> None:
    objs = governed_objects()
    selector = {"fleetc.dev/pipeline": "llm", "fleetc.dev/stage": "serve"}
    hpa = objs[f"clusters/{cluster}/horizontalpodautoscaler-serving-llm-serve.yaml"]
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-serve"},
        "minReplicas": warm,
        "maxReplicas": 2 * warm,
        "metrics": [{"type": "Resource",
                     "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
    }
    assert "replicas" not in objs[f"clusters/{cluster}/deployment-serving-llm-serve.yaml"]["spec"]
    pdb = objs[f"clusters/{cluster}/poddisruptionbudget-serving-llm-serve.yaml"]
    assert pdb["spec"] == {"minAvailable": min_available, "selector": {"matchLabels": selector}}
    assert hpa["metadata"]["annotations"] == {"fleetc.dev/source": "pipelines/llm.yaml#spec.stages.serve",
                                              "argocd.argoproj.io/sync-wave": "1"}


def test_disruption_budget_keeps_all_but_one_of_a_bigger_share() -> None:
    model, placement = governed()
    serve = replace(placement.stages[3], assignments=(Assignment("gpu-east", 5, 5),))
    placement = replace(placement, stages=(*placement.stages[:3], serve))
    objs = objects(dict(render(model, placement).files))
    assert objs["clusters/gpu-east/poddisruptionbudget-serving-llm-serve.yaml"]["spec"]["minAvailable"] == 4
    assert objs["clusters/gpu-east/horizontalpodautoscaler-serving-llm-serve.yaml"]["spec"]["maxReplicas"] == 10


# --------------------------------------------------------------------------- dataSovereignty
def test_namespaces_carry_the_jurisdiction() -> None:
    model, placement = governed()
    model = replace(model, clusters=tuple(replace(c, jurisdiction="eu") if c.name == "gpu-west" else c
                                          for c in model.clusters))
    objs = objects(dict(render(model, placement).files))
    assert objs["clusters/gpu-east/namespace-ml.yaml"]["metadata"] == {
        "name": "ml",
        "labels": {"app.kubernetes.io/managed-by": "fleetc", "fleetc.dev/pipeline": "llm",
                   "fleetc.dev/jurisdiction": "us"},
        "annotations": {"fleetc.dev/source": "pipelines/llm.yaml#metadata.namespace",
                        "argocd.argoproj.io/sync-options": "Prune=false",  # never pruned: it holds the user's Secrets
                        "kustomize.toolkit.fluxcd.io/prune": "disabled",
                        "argocd.argoproj.io/sync-wave": "0"},
    }
    assert objs["clusters/gpu-west/namespace-ml.yaml"]["metadata"]["labels"]["fleetc.dev/jurisdiction"] == "eu"
    # eu has no storage endpoints declared: no egress policy there (it would cut the stages off
    # their storage), one in us, and a warning naming eu
    assert "clusters/gpu-east/networkpolicy-ml-fleetc-jurisdiction-egress.yaml" in objs
    assert "clusters/gpu-west/networkpolicy-ml-fleetc-jurisdiction-egress.yaml" not in objs
    warnings = [w.message for w in render(model, placement).warnings
                if w.field == "spec.security.storageEndpoints" and w.message.startswith("no storage endpoints")]
    assert warnings == ["no storage endpoints declared for jurisdiction(s) eu: no egress NetworkPolicy rendered "
                        "there (placement still keeps the stages in their jurisdiction); declare them as "
                        "spec.security.storageEndpoints: [{jurisdiction: <name>, cidrs: [<CIDR>, ...]}]"]


def test_egress_policy_exact() -> None:
    policy = governed_objects()["clusters/gpu-east/networkpolicy-serving-fleetc-jurisdiction-egress.yaml"]
    assert policy == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "fleetc-jurisdiction-egress",
            "namespace": "serving",
            "labels": {"app.kubernetes.io/managed-by": "fleetc"},
            "annotations": {"fleetc.dev/source": "policies/platform.yaml#spec.security.storageEndpoints",
                            "argocd.argoproj.io/sync-wave": "0"},
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {"to": [{"podSelector": {}}]},  # its own namespace
                {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "192.0.2.10/32"}}]},
            ],
        },
    }


def test_endpoints_without_sovereignty_are_reported() -> None:
    model, placement = governed(platforms=(platform(data_sovereignty=False),))
    (warning,) = [w for w in render(model, placement).warnings if w.field == "spec.security.storageEndpoints"]
    assert warning.message == "has effect only with spec.security.dataSovereignty; not rendered"


def test_no_sovereignty_no_label_no_policy() -> None:
    objs = governed_objects(platforms=(platform(data_sovereignty=False),))
    assert not any("networkpolicy" in p for p in objs)
    assert "fleetc.dev/jurisdiction" not in objs["clusters/gpu-east/namespace-ml.yaml"]["metadata"]["labels"]


# --------------------------------------------------------------------------- GPU policy
CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: fleetc-device-plugin-config
  namespace: gpu-operator
  labels:
    app.kubernetes.io/managed-by: fleetc
  annotations:
    fleetc.dev/source: policies/gpu.yaml#spec
    fleetc.dev/node-selection: "label a node nvidia.com/device-plugin.config=exclusive (training, the default) \
or nvidia.com/device-plugin.config=time-sliced (inference: each GPU shared 2 ways)"
    argocd.argoproj.io/sync-wave: "0"
data:
  exclusive: |
    version: v1
    flags:
      migStrategy: none
  time-sliced: |
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: true
        resources:
          - name: nvidia.com/gpu
            replicas: 2
"""


def test_device_plugin_config_exact_text() -> None:
    files = render(*governed()).files
    assert files["clusters/gpu-east/infra/configmap-gpu-operator-fleetc-device-plugin-config.yaml"] == CONFIG_MAP
    config = read(read(CONFIG_MAP)["data"]["time-sliced"])
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]
    assert read(read(CONFIG_MAP)["data"]["exclusive"]) == {"version": "v1", "flags": {"migStrategy": "none"}}


def test_slots_follow_time_slicing_without_a_sharer_cap() -> None:
    objs = governed_objects(gpu_policy=gpu_policy(sharing_enabled=False, max_sharers=1))
    config = objs["clusters/gpu-west/configmap-gpu-operator-fleetc-device-plugin-config.yaml"]
    assert "replicas: 4\n" in config["data"]["time-sliced"]


def test_no_config_map_without_sharing_or_gpus() -> None:
    objs = governed_objects(gpu_policy=gpu_policy(time_slicing_replicas=1))
    assert not any("configmap" in p for p in objs)
    model, placement = governed()
    model = replace(model, clusters=tuple(replace(c, gpus=0, gpu_type=None) for c in model.clusters))
    assert not any("configmap" in p for p in objects(dict(render(model, placement).files)))


def test_shared_serving_selects_time_sliced_nodes_training_stays_exclusive() -> None:
    objs = governed_objects()
    serve = pod_spec(objs["clusters/gpu-east/deployment-serving-llm-serve.yaml"])
    train = pod_spec(objs["clusters/gpu-east/job-ml-llm-train.yaml"])
    assert serve["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"}
    assert train["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


# --------------------------------------------------------------------------- warnings
def test_warnings_exact() -> None:
    warnings = render(*governed()).warnings
    assert [w.format() for w in warnings] == [
        "fleet.yaml: warning: spec.gitops.repoURL: not set: Argo CD and Flux would read the placeholder "
        "https://git.example.com/fleet.git",
        "policies/gpu.yaml: warning: spec.memoryManagement.compactionStrategy: has no Kubernetes form "
        "(the device plugin does not compact GPU memory); not rendered",
        "policies/platform.yaml: warning: spec.security.auditEnabled: has no portable Kubernetes object "
        "(audit policy is API-server configuration); not rendered",
        "policies/platform.yaml: warning: spec.security.encryptionAtRest: has no portable Kubernetes object "
        "(encryption at rest is API-server or storage-class configuration); not rendered",
        "policies/platform.yaml: warning: spec.security.storageEndpoints: llm/eval (s3://models/ckpt), "
        "llm/prep (s3://data/raw), llm/prep (s3://data/tokens), llm/serve (s3://models/ckpt), "
        "llm/train (s3://data/tokens), llm/train (s3://models/ckpt), llm/train (s3://models/metrics): reached "
        "with the pods' cloud identity (no secretName), whose endpoints (the instance metadata service "
        "169.254.169.254/32, the cloud's token service) the egress NetworkPolicy blocks: add them to "
        "storageEndpoints, or name a secretName",
    ]
    assert all(isinstance(w, Diagnostic) and w.severity == "warning" for w in warnings)


def test_no_warnings_when_everything_has_a_form() -> None:
    model, placement = governed(
        platforms=(platform(data_sovereignty=False, audit_enabled=False, encryption_at_rest=False,
                            storage_endpoints=()),),
        gpu_policy=gpu_policy(compaction_strategy=None),
    )
    model = replace(model, gitops=GitOps(repo_url="https://git.example.org/team/fleet.git"))
    # a Volcano stage that waits is scheduling-gated until its release lets it go: no warning
    assert render(model, placement).warnings == ()


def test_two_platforms_report_each_once() -> None:
    other = platform("other", source=Source("policies/other.yaml", "spec"), data_sovereignty=False,
                     encryption_at_rest=False, storage_endpoints=())
    warnings = render(*governed(platforms=(platform(), other))).warnings
    fields = [(w.path, w.field) for w in warnings if "platform" in w.path or "other" in w.path]
    assert fields == [
        ("policies/other.yaml", "spec.security.auditEnabled"),
        ("policies/platform.yaml", "spec.security.auditEnabled"),
        ("policies/platform.yaml", "spec.security.encryptionAtRest"),
        ("policies/platform.yaml", "spec.security.storageEndpoints"),  # the cloud identity's endpoints
    ]


def _egress_reaches(policy: dict[str, Any], namespace: str, host_network: bool) -> bool:
    """Whether the egress rules of ``policy`` let a pod of its namespace reach a pod of
    ``namespace``: a ``podSelector`` peer (with no ``namespaceSelector``: the policy's own
    namespace) selects pod-network pods only; a host-network pod has its node's IP, which only
    an ``ipBlock`` matches (kubernetes ``website/content/en/docs/concepts/services-networking/
    network-policies.md``: "NetworkPolicy ... behavior for hostNetwork pods is undefined", in
    practice treated as node traffic)."""
    for rule in policy["spec"]["egress"]:
        for peer in rule.get("to", []):
            if host_network:
                continue  # node IPs: the declared blocks are storage's, not the nodes'
            own = namespace == policy["metadata"]["namespace"]
            if "podSelector" in peer and "namespaceSelector" not in peer and own:
                return True
    return False


def test_dataload_pods_reach_the_alluxio_master_under_the_egress_policy() -> None:
    """Fluid runs Alluxio on the host network unless told otherwise; under the sovereignty
    egress policy a DataLoad pod (an Alluxio client) could then not reach its master."""
    data = DataPolicy("data", 8, True, True, "LFU", 50 * 1024**3, True, 4, Source("policies/data.yaml", "spec"))
    objs = governed_objects(data_policies=(data,))
    policies = {o["metadata"]["namespace"]: o for o in objs.values() if o["kind"] == "NetworkPolicy"
                and o["metadata"]["name"] != API_EGRESS_POLICY}  # not the release pods' own
    runtimes = [o for o in objs.values() if o["kind"] == "AlluxioRuntime" and o["metadata"]["namespace"] in policies]
    assert runtimes
    for runtime in runtimes:
        host = any(runtime["spec"].get(part, {}).get("networkMode", "HostNetwork") != "ContainerNetwork"
                   for part in ("master", "worker", "fuse"))
        namespace = runtime["metadata"]["namespace"]
        assert _egress_reaches(policies[namespace], namespace, host_network=host), runtime["metadata"]["name"]
