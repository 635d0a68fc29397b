"""Every name fleetc derives fits the limit of the controller that uses it, checked over every
object of the bundled example, the golden cases, a generated 20-cluster fleet and a fleet of
names at their longest; storage credentials are named by Secret reference only; and the
review workflow: a stage's GPUs change, the diff renames exactly that Job."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from support.corpus import CASES, GOLDEN, ROOT, compile_texts, read_policies, read_tree
from support.k8s import require_upstream_schemas, validate_tree
from support.yamlread import manifest
from test_engines import Fleet

from bench.generate import Spec, generate
from fleetc.compiler import load_policy_sources
from fleetc.errors import PolicyError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
HELM_RELEASE = 53

LONG = "p" * 58 + "-2024"  # a 63-character pipeline name
FLEET = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata: {name: long}
spec:
  clusters:
  - name: c1
    provider: aws
    region: eu-west-1
    attributes: {gpu-type: a100, gpu-count: "64"}
    taints: []
"""
PIPELINE = f"""\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata: {{name: "2024-{'x' * 58}", namespace: ml}}
spec:
  stages:
  - name: "{'t' * 63}"
    type: Training
    replicas: 12
    resources: {{gpu: 1, gpuType: a100}}
    inputs:
    - name: corpus
      source: s3://{'b' * 40}/{'k' * 120}/
      secretName: corpus-s3
  - name: "{'s' * 63}"
    type: Deployment
    replicas: 2
    resources: {{gpu: 1}}
"""
DATA = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: DataOptimizationPolicy
metadata: {name: data}
spec:
  caching: {enabled: true}
  prefetching: {enabled: true}
"""
LONGEST = {"policies/fleet.yaml": FLEET, "policies/pipeline.yaml": PIPELINE, "policies/data.yaml": DATA}


def objects(files: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, text in sorted(files.items()):
        if path.startswith("clusters/") and not path.endswith("kustomization.yaml"):
            yield path, manifest(text)


def label_values(obj: dict[str, Any]) -> Iterator[str]:
    yield from obj["metadata"].get("labels", {}).values()
    spec = obj.get("spec", {})
    for task in spec.get("tasks", []):
        yield from task["template"]["metadata"].get("labels", {}).values()
    if "template" in spec:
        yield from spec["template"]["metadata"].get("labels", {}).values()
    yield from spec.get("selector", {}).get("matchLabels", {}).values() if isinstance(spec.get("selector"), dict) \
        else ()
    if obj["kind"] == "Service":
        yield from spec["selector"].values()


def name_problems(files: Mapping[str, str]) -> list[str]:
    """Every derived name over its controller's limit, as ``path: why``."""
    found = []
    for path, obj in objects(files):
        name, kind = obj["metadata"]["name"], obj["kind"]
        rule = DNS1035_LABEL if kind in ("Service", "Job") else (
            DNS1123_LABEL if kind in ("Namespace", "Deployment") else DNS1123_SUBDOMAIN)
        if not rule.match(name) or len(name) > 63:
            found.append(f"{path}: name {name!r} is not a {rule.pattern} of at most 63 characters")
        if kind == "Job" and obj["spec"].get("completionMode") == "Indexed":  # hostname <job>-<index>
            pod = f"{name}-{obj['spec']['parallelism'] - 1}"
            if len(pod) > 63:
                found.append(f"{path}: pod hostname {pod} is {len(pod)} characters")
        elif kind == "Job" and "tasks" in obj["spec"]:  # Volcano: pod and hostname <job>-<task>-<index>
            for task in obj["spec"]["tasks"]:
                pod = f"{name}-{task['name']}-{task['replicas'] - 1}"
                if len(pod) > 63:
                    found.append(f"{path}: pod hostname {pod} is {len(pod)} characters")
        if kind == "AlluxioRuntime" and (len(name) > HELM_RELEASE or len(f"{name}-master-0") > 63):
            found.append(f"{path}: runtime {name} is over Helm's 53 or its master pod over 63")
        if kind == "DataLoad" and len(f"{name}-loader") > HELM_RELEASE:
            found.append(f"{path}: Helm release {name}-loader is over 53 characters")
        if kind == "DataProcess" and len(f"{name}-processor") > HELM_RELEASE:  # fluid pkg/utils/dataprocess.go
            found.append(f"{path}: Helm release {name}-processor is over 53 characters")
        for value in label_values(obj):
            if len(value) > 63 or not LABEL_VALUE.match(value):
                found.append(f"{path}: label value {value!r} is not valid")
    return found


# --------------------------------------------------------------------------- name limits
def test_bundled_names_fit() -> None:
    assert name_problems(compile_texts(read_policies(ROOT / "policies"))) == []


@pytest.mark.parametrize("case", GOLDEN)
def test_golden_names_fit(case: str) -> None:
    assert name_problems(read_tree(CASES / case / "expected")) == []


@pytest.mark.slow
def test_generated_fleet_names_fit() -> None:
    assert name_problems(compile_texts(generate(Spec(clusters=20, stages=120, platform=True)).files)) == []


@pytest.mark.slow
def test_names_at_their_longest_fit_and_converge(tmp_path: Path) -> None:
    files = compile_texts(LONGEST)
    assert name_problems(files) == []
    kinds = {obj["kind"] for _, obj in objects(files)}
    assert {"Job", "Service", "AlluxioRuntime", "DataLoad", "Deployment"} <= kinds
    service = next(obj for _, obj in objects(files) if obj["kind"] == "Service")
    assert service["metadata"]["name"].startswith("x-2024-")  # DNS-1035: a letter first
    Fleet().sync(files)
    require_upstream_schemas()
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert validate_tree(tmp_path) == []


def test_the_name_check_catches_what_it_checks() -> None:
    job = ("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n  name: 2024-x\n  labels: {a: 'EU/DE'}\n"
           "spec:\n  tasks:\n  - {name: worker, replicas: 1, template: {metadata: {}}}\n")
    runtime = "apiVersion: data.fluid.io/v1alpha1\nkind: AlluxioRuntime\nmetadata:\n  name: " + "r" * 54 + "\n"
    problems = name_problems({"clusters/c/workloads/job.yaml": job, "clusters/c/infra/rt.yaml": runtime})
    assert [p.split(": ", 1)[1].split(" ", 2)[:2] for p in problems] == [
        ["runtime", "r" * 54], ["name", "'2024-x'"], ["label", "value"]]


# --------------------------------------------------------------------------- credentials
def test_dataset_mount_options_come_from_the_named_secret() -> None:
    files = compile_texts(LONGEST)
    [dataset] = [obj for _, obj in objects(files) if obj["kind"] == "Dataset"]
    assert dataset["spec"]["mounts"][0]["encryptOptions"] == [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": "corpus-s3", "key": key}}}
        for key in ("aws.accessKeyId", "aws.secretKey")]
    assert not any(obj["kind"] == "Secret" for _, obj in objects(files))


@pytest.mark.parametrize(("scheme", "keys"), [
    ("cos", ["fs.cos.access.key", "fs.cos.secret.key", "fs.cos.region", "fs.cos.app.id"]),
    ("oss", ["fs.oss.accessKeyId", "fs.oss.accessKeySecret", "fs.oss.endpoint"]),
    ("obs", ["fs.obs.accessKey", "fs.obs.secretKey", "fs.obs.endpoint"]),
])
def test_each_scheme_gets_its_alluxio_options(scheme: str, keys: list[str]) -> None:
    pipeline = PIPELINE.replace("source: s3://", f"source: {scheme}://")
    files = compile_texts({**LONGEST, "policies/pipeline.yaml": pipeline})
    [dataset] = [obj for _, obj in objects(files) if obj["kind"] == "Dataset"]
    assert [o["name"] for o in dataset["spec"]["mounts"][0]["encryptOptions"]] == keys


def validation_errors(policies: Mapping[str, str]) -> list[str]:
    with pytest.raises(PolicyError) as err:
        load_policy_sources([(path, text.encode()) for path, text in sorted(policies.items())], "test")
    return [d.format() for d in err.value.diagnostics]


def test_credentials_on_nfs_and_two_secrets_for_one_dataset_are_errors() -> None:
    nfs = PIPELINE.replace(f"source: s3://{'b' * 40}/{'k' * 120}/", "source: nfs://server/share/")
    assert validation_errors({**LONGEST, "policies/pipeline.yaml": nfs}) == [
        "policies/pipeline.yaml:13:19: error: spec.stages[0].inputs[0].secretName: nfs://server/share/ takes no "
        "credentials fleetc can pass to Fluid\n  hint: credentials are named for cos://, gs://, obs://, oss://, "
        "s3://, s3a:// URLs; remove secretName"]
    two = PIPELINE + f"""\
    inputs:
    - name: corpus
      source: s3://{'b' * 40}/{'k' * 120}/
      secretName: other
"""
    [error] = validation_errors({**LONGEST, "policies/pipeline.yaml": two})
    assert error.startswith("policies/pipeline.yaml:21:19: error: spec.stages[1].inputs[0].secretName: "
                            f"s3://{'b' * 40}/{'k' * 120}/ is read in namespace ml with Secret 'corpus-s3' "
                            "(policies/pipeline.yaml: spec.stages[0].inputs[0]) and 'other' here")


def test_a_secret_named_while_caching_is_off_is_reported() -> None:
    loaded = load_policy_sources([(p, t.encode()) for p, t in sorted(LONGEST.items()) if "data" not in p], "test")
    from fleetc.compiler import compile_policies
    warnings = [w.format() for w in compile_policies(loaded).warnings if "secretName" in w.field]
    assert warnings == ["policies/pipeline.yaml:13:7: warning: spec.stages[0].inputs[0].secretName: is used by Fluid "
                        "cache mounts, and caching is off (DataOptimizationPolicy spec.caching.enabled); "
                        "not rendered"]


def test_jurisdictions_that_label_namespaces_are_validated() -> None:
    bad = FLEET.replace("region: eu-west-1", 'region: eu-west-1\n    jurisdiction: "EU/DE (GDPR)"')
    [error] = validation_errors({**LONGEST, "policies/fleet.yaml": bad})
    assert error.startswith("policies/fleet.yaml:9:19: error: spec.clusters[0].jurisdiction: expected a "
                            "Kubernetes label value")
    derived = FLEET.replace("region: eu-west-1", 'region: "EU/DE (GDPR)"')
    derived_error, unknown = validation_errors({**LONGEST, "policies/fleet.yaml": derived})
    assert derived_error.startswith("policies/fleet.yaml:8:13: error: spec.clusters[0].region: the jurisdiction "
                                    "derived from region 'EU/DE (GDPR)'")
    assert unknown.startswith("policies/fleet.yaml:8:13: error: spec.clusters[0].region: unknown region")
    mapped = derived + '  regionJurisdictions: {"EU/DE (GDPR)": eu}\n'
    compile_texts({**LONGEST, "policies/fleet.yaml": mapped})  # the map names a valid one
    mapped_badly = derived + '  regionJurisdictions: {"EU/DE (GDPR)": "EU/DE"}\n'
    [error] = validation_errors({**LONGEST, "policies/fleet.yaml": mapped_badly})
    assert "spec.regionJurisdictions.EU/DE (GDPR): expected a Kubernetes label value" in error


# --------------------------------------------------------------------------- the review workflow
def test_changing_a_stages_gpus_renames_exactly_that_job_and_the_jobs_that_wait_for_it() -> None:
    """Training gets 4 GPUs instead of 8: its Job is renamed; so is the Evaluation Job that waits
    for its completion marker (it must run again, on the new model; the marker names the run),
    and so are the Fluid DataProcess and DataLoad pairs that prefetch the model after it (each
    runs once), and the DataProcesses that mark those DataLoads done where the model is served;
    the serving Deployment, which also waits for it, rolls (its pods serve the new run) under a
    new releaser; the release Jobs of the two gated Jobs are renamed with them, and their Roles
    name the new Jobs. Nothing else changes."""
    policies = read_policies(ROOT / "policies")
    before = compile_texts(policies)
    path = "policies/llm-training-pipeline.yaml"
    assert policies[path].count("      gpu: 8\n") == 1
    after = compile_texts({**policies, path: policies[path].replace("      gpu: 8\n", "      gpu: 4\n")})
    job = re.compile(r"^(clusters/[^/]+/workloads/job-aigc-prod-llm-chinese-training-model-(\w+))-[0-9a-f]{8}\.yaml$")

    def renamed(paths: set[str]) -> list[tuple[str, str]]:
        return sorted((m.group(1), m.group(2)) for p in paths if (m := job.match(p)))

    fluid = re.compile(r"^(clusters/[^/]+/workloads/data(load|process)-[a-z-]+-data-cos-models-llm-[0-9a-f]{8})"
                       r"-[0-9a-f]{8}-(prefetch|wait|ready)\.yaml$")

    def prefetches(paths: set[str]) -> list[tuple[str, str]]:
        return sorted((m.group(1), m.group(3)) for p in paths if (m := fluid.match(p)))

    removed, added = set(before) - set(after), set(after) - set(before)
    assert renamed(removed) == renamed(added)
    assert sorted(stage for _, stage in renamed(added)) == ["evaluation", "training"]
    # 3 caches of the model, 2 of them served (a DataProcess marks their DataLoad done)
    assert prefetches(removed) == prefetches(added) and len(prefetches(added)) == 3 * 2 + 2
    # and the release Jobs that ungate the two Jobs (they name the Jobs' pods), and the releasers
    # of the serving Deployment, which wait for the new runs' markers
    releases = sorted(p.rsplit("-", 1)[0] for p in added if "-release-" in p)
    assert releases == sorted(p.rsplit("-", 1)[0] for p in removed if "-release-" in p) == [
        "clusters/gpu-cluster-huawei/workloads/deployment-aigc-prod-llm-chinese-training-model-deployment-release",
        "clusters/gpu-cluster-huawei/workloads/job-aigc-prod-llm-chinese-training-model-training-release",
        "clusters/inference-cluster-aliyun/workloads/deployment-aigc-prod-llm-chinese-training-model-deployment-release",
        "clusters/inference-cluster-aliyun/workloads/job-aigc-prod-llm-chinese-training-model-evaluation-release"]
    assert len(removed) == len(added) == 2 + 2 + 2 + 8
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    assert [p for p in changed if not p.endswith("/kustomization.yaml")] == [
        ".fleetc/render",  # the record of what the changed cluster folders hold
        # the Roles that let the release Jobs ungate those Jobs' pods, by name
        "clusters/gpu-cluster-huawei/infra/role-aigc-prod-fleetc-release.yaml",
        "clusters/gpu-cluster-huawei/workloads/deployment-aigc-prod-llm-chinese-training-model-deployment.yaml",
        "clusters/inference-cluster-aliyun/infra/role-aigc-prod-fleetc-release.yaml",
        "clusters/inference-cluster-aliyun/workloads/deployment-aigc-prod-llm-chinese-training-model-deployment.yaml",
        "placement.yaml"]
    [training] = [p for p in added if "model-training" in p and "-release-" not in p]
    assert manifest(after[training])["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == "4"
