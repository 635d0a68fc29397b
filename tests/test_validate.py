"""Unit tests of fleetc.policy.validate: schema errors translated, then cross-document checks."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetc.credentials import may_hold_credentials
from fleetc.errors import PolicyError
from fleetc.policy.load import Document, parse
from fleetc.policy.validate import credential_checks, validate

SEED = Path(__file__).parent / "seed"
SEED_FILES = sorted(p.name for p in SEED.glob("*.yaml"))
FINANCE = "finance-aigc-platform.yaml"

FLEET = """\
apiVersion: fleet.kurator.dev/v1alpha1
kind: Fleet
metadata:
  name: f
spec:
  clusters:
  - name: c
    provider: x
    region: cn-north-1
"""

PIPELINE = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPipeline
metadata:
  name: p
spec:
  stages:
"""

PLATFORM = """\
apiVersion: aigc.kurator.dev/v1alpha1
kind: AIGCPlatform
metadata:
  name: {name}
spec:
  {spec}
"""


def documents(*texts: str) -> list[Document]:
    """Each text is one file, named f0.yaml, f1.yaml, ..."""
    docs: list[Document] = []
    for i, text in enumerate(texts):
        parsed, problems = parse(textwrap.dedent(text), f"f{i}.yaml")
        assert problems == []
        docs += parsed
    return docs


def check(*texts: str) -> list[str]:
    _, diagnostics = validate(documents(*texts))
    return [d.format() for d in diagnostics]


def pipeline(*stages: str) -> str:
    return PIPELINE + "".join(f"  - {s}\n" for s in stages)


def platform(name: str, spec: str) -> str:
    return PLATFORM.format(name=name, spec=spec)


def cluster(extra: str) -> str:
    """FLEET with one more line under its only cluster."""
    return FLEET + f"    {extra}\n"


def seed_documents(names: list[str]) -> list[Document]:
    docs: list[Document] = []
    for name in names:
        parsed, problems = parse((SEED / name).read_text(encoding="utf-8"), name)
        assert problems == []
        docs += parsed
    return docs


# --- seed examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SEED_FILES)
def test_seed_example_validates_alone(name: str) -> None:
    policies, diagnostics = validate(seed_documents([name]))
    assert diagnostics == []
    assert sum(len(group) for group in vars(policies).values()) == 1


def test_first_scenario_validates_together() -> None:
    policies, diagnostics = validate(seed_documents([n for n in SEED_FILES if n != FINANCE]))
    assert diagnostics == []
    assert [f.name for f in policies.fleets] == ["aigc-platform"]
    assert [p.name for p in policies.pipelines] == ["llm-chinese-training"]
    assert len(policies.gpu_policies) == len(policies.data_policies) == 1
    assert policies.platforms == ()


def test_finance_platform_with_seed_fleet_names_its_unknown_clusters() -> None:
    _, diagnostics = validate(seed_documents(["aigc-fleet.yaml", FINANCE]))
    hint = "\n  hint: its clusters: gpu-cluster-huawei, inference-cluster-aliyun, " \
           "edge-cluster-factory"
    assert [d.format() for d in diagnostics] == [
        f"{FINANCE}:15:21: error: spec.multiCluster.primaryCluster: cluster 'finance-prod-hk' "
        f"is not in Fleet 'aigc-platform' (aigc-fleet.yaml){hint}",
        f"{FINANCE}:17:9: error: spec.multiCluster.secondaryClusters[0]: cluster "
        f"'finance-dr-sg' is not in Fleet 'aigc-platform' (aigc-fleet.yaml){hint}",
        f"{FINANCE}:18:9: error: spec.multiCluster.secondaryClusters[1]: cluster "
        f"'finance-edge-sh' is not in Fleet 'aigc-platform' (aigc-fleet.yaml){hint}",
    ]


# --- schema pass -------------------------------------------------------------------------------


def test_unknown_field_with_hint() -> None:
    assert check(cluster("regoin: x")) == [
        "f0.yaml:10:5: error: spec.clusters[0].regoin: unknown field 'regoin'\n"
        "  hint: did you mean 'region'?"
    ]


def test_unknown_field_lists_known_fields() -> None:
    assert check(cluster("zzz: x")) == [
        "f0.yaml:10:5: error: spec.clusters[0].zzz: unknown field 'zzz'\n"
        "  hint: known fields: name, provider, region, attributes, jurisdiction, capacity, "
        "pricing, energyEfficiency, utilization, taints, cordoned, batchScheduler, kind"
    ]


def test_unknown_top_level_field_points_at_the_key() -> None:
    assert check(FLEET.replace("metadata:", "metdata: {}\nmetadata:")) == [
        "f0.yaml:3:1: error: metdata: unknown field 'metdata'\n  hint: did you mean 'metadata'?"
    ]


def test_missing_required_field_points_at_the_parent() -> None:
    assert check(FLEET.replace("    region: cn-north-1\n", "")) == [
        "f0.yaml:7:5: error: spec.clusters[0].region: missing required field 'region'"
    ]


@pytest.mark.parametrize(
    ("effect", "hint"),
    [("NoSchedul", "\n  hint: did you mean 'NoSchedule'?"), ("Nothing", "")],
)
def test_enum(effect: str, hint: str) -> None:
    text = FLEET + f"  placement:\n    clusterTolerations:\n    - effect: {effect}\n"
    assert check(text) == [
        "f0.yaml:12:15: error: spec.placement.clusterTolerations[0].effect: expected one of "
        f"'NoSchedule', 'PreferNoSchedule', 'NoExecute', got '{effect}'{hint}"
    ]


def test_stage_type_enum() -> None:
    assert check(pipeline("{name: a, type: Traning}")) == [
        "f0.yaml:7:21: error: spec.stages[0].type: expected one of 'DataProc', 'Training', "
        "'Finetuning', 'Evaluation', 'Deployment', got 'Traning'\n"
        "  hint: did you mean 'Training'?"
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("fleet.kurator.dev/v1alpha1", "aigc.kurator.dev/v1alpha1",
         "f0.yaml:1:13: error: apiVersion: expected 'fleet.kurator.dev/v1alpha1' for kind "
         "Fleet, got 'aigc.kurator.dev/v1alpha1'"),
        ("apiVersion: fleet.kurator.dev/v1alpha1\n", "",
         "f0.yaml:1:1: error: apiVersion: expected 'fleet.kurator.dev/v1alpha1' for kind "
         "Fleet, got nothing"),
    ],
)
def test_api_version_mismatch(old: str, new: str, expected: str) -> None:
    assert check(FLEET.replace(old, new)) == [expected]


KINDS_HINT = "AIGCPipeline, AIGCPlatform, DataOptimizationPolicy, Fleet, GPUOptimizationPolicy"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("kind: Fleet", "kind: Flet",
         "f0.yaml:2:7: error: kind: unknown kind 'Flet'\n  hint: did you mean 'Fleet'?"),
        ("kind: Fleet", "kind: Banana",
         f"f0.yaml:2:7: error: kind: unknown kind 'Banana'\n  hint: fleetc reads: {KINDS_HINT}"),
        ("kind: Fleet", "kind: 3",
         f"f0.yaml:2:7: error: kind: unknown kind 3\n  hint: fleetc reads: {KINDS_HINT}"),
        ("kind: Fleet\n", "",
         f"f0.yaml:1:1: error: kind: missing required field 'kind'\n  hint: one of: {KINDS_HINT}"),
    ],
)
def test_unknown_or_missing_kind(old: str, new: str, expected: str) -> None:
    assert check(FLEET.replace(old, new)) == [expected]


@pytest.mark.parametrize(("kind", "described"), [("[Fleet]", "a list"), ("{a: 1}", "a mapping")])
def test_unhashable_kind_is_a_diagnostic(kind: str, described: str) -> None:
    [message] = check(FLEET.replace("kind: Fleet", f"kind: {kind}"))
    assert message.startswith(f"f0.yaml:2:7: error: kind: unknown kind {described}")


@pytest.mark.parametrize(
    ("text", "got"), [("- a\n- b\n", "a list"), ("hello\n", "a string"), ("42\n", "42")]
)
def test_document_must_be_a_mapping(text: str, got: str) -> None:
    assert check(text) == [f"f0.yaml:1:1: error: expected a policy object (a mapping), got {got}"]


def test_schema_errors_skip_the_semantic_checks_of_that_document() -> None:
    assert check(pipeline("{name: a, type: Training, dependencies: [a], replicas: 0}")) == [
        "f0.yaml:7:60: error: spec.stages[0].replicas: expected an integer >= 1, got 0"
    ]


# --- cluster attributes and fleet weights ------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ("{gpu-count: sixty, gpu-type: a100}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: expected an integer, got 'sixty'"),
        ("{gpu-count: 64.0, gpu-type: a100}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: expected an integer, got 64.0"),
        ("{gpu-count: -1, gpu-type: a100}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: expected an integer, got -1"),
        ("{gpu-count: true, gpu-type: a100}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: expected an integer, got true"),
        ("{gpu-count: '1000001', gpu-type: a100}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: expected at most 1000000 GPUs, "
         "got 1000001"),
        ("{gpu-count: '8'}",
         "10:29: error: spec.clusters[0].attributes.gpu-count: gpu-count without gpu-type\n"
         "  hint: add attribute gpu-type (for example a100)"),
        ("{gpu-type: a100}",
         "10:28: error: spec.clusters[0].attributes.gpu-type: gpu-type without gpu-count\n"
         "  hint: add attribute gpu-count (the number of GPUs)"),
        ("{low-latency: 'yes'}",
         "10:31: error: spec.clusters[0].attributes.low-latency: expected \"true\" or "
         "\"false\", got 'yes'"),
        ("{edge-node: 1}",
         "10:29: error: spec.clusters[0].attributes.edge-node: expected \"true\" or \"false\", "
         "got 1"),
        ("{network-tier: standrd}",
         "10:32: error: spec.clusters[0].attributes.network-tier: expected one of "
         "high-performance, standard, low, got 'standrd'\n  hint: did you mean 'standard'?"),
        ("{network-tier: fast}",
         "10:32: error: spec.clusters[0].attributes.network-tier: expected one of "
         "high-performance, standard, low, got 'fast'"),
    ],
)
def test_bad_attribute(attributes: str, expected: str) -> None:
    assert check(cluster(f"attributes: {attributes}")) == [f"f0.yaml:{expected}"]


@pytest.mark.parametrize(
    "attributes",
    ["{gpu-count: ' 8 ', gpu-type: a100}", "{gpu-count: 8, gpu-type: a100}",
     "{gpu-count: '0'}", "{low-power: 'TRUE', edge-node: true, low-latency: 'false'}",
     "{network-tier: low, custom: anything}"],
)
def test_good_attributes(attributes: str) -> None:
    assert check(cluster(f"attributes: {attributes}")) == []


@pytest.mark.parametrize("count", ["'²'", "'" + "9" * 5000 + "'"])
def test_gpu_count_that_int_cannot_read_is_a_diagnostic(count: str) -> None:
    [message] = check(cluster(f"attributes: {{gpu-type: a100, gpu-count: {count}}}"))
    assert "spec.clusters[0].attributes.gpu-count" in message


def test_all_class_weights_zero() -> None:
    text = FLEET + "  aigcConfig: {trainingWeight: 0, inferenceWeight: 0, finetuningWeight: 0}\n"
    assert check(text) == [
        "f0.yaml:10:15: error: spec.aigcConfig: all class weights are 0\n"
        "  hint: give at least one workload class a positive weight"
    ]


def test_class_weights_left_out_are_not_zero() -> None:
    assert check(FLEET + "  aigcConfig: {trainingWeight: 0}\n") == []


def test_all_score_weights_zero() -> None:
    text = FLEET + "  scoreWeights: {compute: 0, cost: 0, network: 0, energy: 0}\n"
    assert check(text) == [
        "f0.yaml:10:17: error: spec.scoreWeights: all score weights are 0\n"
        "  hint: give at least one score term a positive weight"
    ]


# --- quantities and percentages ----------------------------------------------------------------


def test_quantity_out_of_range() -> None:
    assert check(cluster("capacity: {cpu: 2000000, memory: 2Ei}")) == [
        "f0.yaml:10:21: error: spec.clusters[0].capacity.cpu: quantity 2000000 is out of range",
        "f0.yaml:10:38: error: spec.clusters[0].capacity.memory: quantity '2Ei' is out of range",
    ]


def test_quantity_at_the_limit_is_accepted() -> None:
    assert check(cluster("capacity: {cpu: 1000000, memory: 1Ei}")) == []


@pytest.mark.parametrize("zero", ["0", "0.0", "'0m'"])
def test_zero_quantity(zero: str) -> None:
    assert check(pipeline(f"{{name: a, type: Training, resources: {{cpu: {zero}}}}}")) == [
        f"f0.yaml:7:48: error: spec.stages[0].resources.cpu: expected a positive quantity, "
        f"got {zero}"
    ]


def test_sub_milli_cpu_rounds_up_and_is_positive() -> None:
    assert check(pipeline("{name: a, type: Training, resources: {cpu: '0.0001'}}")) == []


def test_zero_cache_size() -> None:
    text = """\
        apiVersion: aigc.kurator.dev/v1alpha1
        kind: DataOptimizationPolicy
        metadata:
          name: d
        spec:
          caching: {size: 0}
        """
    assert check(text) == [
        "f0.yaml:6:19: error: spec.caching.size: expected a positive quantity, got 0"
    ]


@pytest.mark.parametrize("value", [".inf", ".nan", "1e400"])
def test_non_finite_quantity_is_a_diagnostic(value: str) -> None:
    [message] = check(pipeline(f"{{name: a, type: Training, resources: {{cpu: {value}}}}}"))
    assert message.startswith("f0.yaml:7:48: error: spec.stages[0].resources.cpu: ")


GPU_POLICY = """\
apiVersion: scheduling.kurator.dev/v1alpha1
kind: GPUOptimizationPolicy
metadata:
  name: g
spec:
  memoryManagement:
    defragmentThreshold: {threshold}
"""


@pytest.mark.parametrize("threshold", ["180%", "100.5%"])
def test_percentage_over_100(threshold: str) -> None:
    assert check(GPU_POLICY.format(threshold=threshold)) == [
        "f0.yaml:7:26: error: spec.memoryManagement.defragmentThreshold: expected a "
        f"percentage from 0% to 100%, got '{threshold}'"
    ]


@pytest.mark.parametrize("threshold", ["0%", "100%", "99.9%"])
def test_percentage_in_range(threshold: str) -> None:
    assert check(GPU_POLICY.format(threshold=threshold)) == []


def test_percentage_without_sign() -> None:
    assert check(GPU_POLICY.format(threshold="80")) == [
        "f0.yaml:7:26: error: spec.memoryManagement.defragmentThreshold: expected a "
        "percentage such as 80%, got 80"
    ]


# --- names -------------------------------------------------------------------------------------


def test_duplicate_name_of_the_same_kind_across_files() -> None:
    stage = "{name: a, type: Training}"
    assert check(pipeline(stage), pipeline(stage)) == [
        "f1.yaml:4:9: error: metadata.name: duplicate AIGCPipeline name 'p' "
        "(first defined at f0.yaml:4)"
    ]


def test_same_name_for_different_kinds_is_fine() -> None:
    data_policy = """\
        apiVersion: aigc.kurator.dev/v1alpha1
        kind: DataOptimizationPolicy
        metadata: {name: p}
        spec: {}
        """
    fleet = FLEET.replace("name: f", "name: p")
    assert check(fleet, pipeline("{name: a, type: Training}"), platform("p", "{}"),
                 data_policy) == []


def test_second_fleet() -> None:
    assert check(FLEET, FLEET.replace("name: f", "name: g")) == [
        "f1.yaml:4:9: error: metadata.name: a second Fleet ('g'); fleetc compiles one Fleet at "
        "a time (the first is 'f' in f0.yaml)\n  hint: compile each fleet from its own folder"
    ]


def test_duplicate_cluster_name() -> None:
    text = FLEET + "  - {name: c, provider: y, region: cn-east-2}\n"
    assert check(text) == [
        "f0.yaml:10:12: error: spec.clusters[1].name: duplicate cluster name 'c' "
        "(also spec.clusters[0])"
    ]


def test_duplicate_input_and_output_names() -> None:
    text = PIPELINE + """\
  - name: a
    type: Training
    inputs:
    - {name: i, source: 'cos://x/'}
    - {name: i, source: 'cos://y/'}
    outputs:
    - {name: o, storage: 'nfs://x/'}
    - {name: o, storage: 'nfs://y/'}
"""
    assert check(text) == [
        "f0.yaml:11:14: error: spec.stages[0].inputs[1].name: duplicate name 'i'",
        "f0.yaml:14:14: error: spec.stages[0].outputs[1].name: duplicate name 'o'",
    ]


# --- pipelines ---------------------------------------------------------------------------------


def test_dependency_on_itself() -> None:
    assert check(pipeline("{name: a, type: Training, dependencies: [a]}")) == [
        "f0.yaml:7:46: error: spec.stages[0].dependencies[0]: a stage cannot depend on itself"
    ]


def test_dependency_cycle() -> None:
    assert check(pipeline("{name: a, type: Training, dependencies: [c]}",
                          "{name: b, type: Training, dependencies: [a]}",
                          "{name: c, type: Training, dependencies: [b]}")) == [
        "f0.yaml:7:45: error: spec.stages[0].dependencies: dependency cycle: a -> c -> b -> a"
    ]


def test_cycle_through_an_input_is_found() -> None:
    assert check(pipeline(
        "{name: a, type: Training, dependencies: [b], outputs: [{name: o, storage: 'nfs://x/'}]}",
        "{name: b, type: Training, inputs: [{name: i, from: a.outputs.o}]}",
    )) == ["f0.yaml:7:45: error: spec.stages[0].dependencies: dependency cycle: a -> b -> a"]


def test_input_from_own_output_is_refused() -> None:
    diagnostics = check(pipeline("{name: b, type: DataProc, inputs: [{name: i, from: "
                                 "b.outputs.x}], outputs: [{name: x, storage: 'nfs://x/'}]}"))
    assert diagnostics == ["f0.yaml:7:56: error: spec.stages[0].inputs[0].from: a stage cannot "
                           "read its own output"]


FROM_STAGES = (
    "{name: a, type: DataProc, outputs: [{name: out, storage: 'nfs://x/'}]}",
    "{name: b, type: Training, inputs: [{name: i, from: %s}]}",
)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("a.outputs.outt", "stage 'a' has no output 'outt'\n  hint: did you mean 'out'?"),
        ("a.outputs.zzzz", "stage 'a' has no output 'zzzz'\n  hint: its outputs: out"),
        ("b.outputs.x", "a stage cannot read its own output"),
        ("zz.outputs.out", "no stage named 'zz' in this pipeline"),
        ("aa.outputs.out", "no stage named 'aa' in this pipeline\n  hint: did you mean 'a'?"),
    ],
)
def test_from_a_missing_stage_or_output(ref: str, expected: str) -> None:
    text = pipeline(FROM_STAGES[0], FROM_STAGES[1] % ref)
    assert check(text) == [f"f0.yaml:8:56: error: spec.stages[1].inputs[0].from: {expected}"]


@pytest.mark.parametrize("item", ["{name: i, source: 'cos://x/', from: a.outputs.out}",
                                  "{name: i}"])
def test_input_needs_exactly_one_of_source_and_from(item: str) -> None:
    text = pipeline(FROM_STAGES[0], f"{{name: b, type: Training, inputs: [{item}]}}")
    assert check(text) == [
        "f0.yaml:8:40: error: spec.stages[1].inputs[0]: an input needs exactly one of "
        "'source' or 'from'"
    ]


def test_min_replicas_on_a_non_deployment_points_at_the_key() -> None:
    assert check(pipeline("{name: a, type: Training, minReplicasPerCluster: 1}")) == [
        "f0.yaml:7:31: error: spec.stages[0].minReplicasPerCluster: only Deployment stages "
        "split replicas across clusters"
    ]


@pytest.mark.parametrize(
    ("stage", "expected"),
    [
        ("{name: a, type: Deployment, replicas: 3, minReplicasPerCluster: 4}",
         "7:69: error: spec.stages[0].minReplicasPerCluster: greater than replicas (3)"),
        ("{name: a, type: Deployment, minReplicasPerCluster: 3}",
         "7:56: error: spec.stages[0].minReplicasPerCluster: greater than replicas (2)"),
    ],
)
def test_min_replicas_greater_than_replicas(stage: str, expected: str) -> None:
    assert check(pipeline(stage)) == [f"f0.yaml:{expected}"]


def test_min_replicas_equal_to_replicas_is_fine() -> None:
    assert check(pipeline("{name: a, type: Deployment, minReplicasPerCluster: 2}")) == []


def test_gpu_type_with_zero_gpus() -> None:
    assert check(pipeline("{name: a, type: Training, resources: {gpu: 0, gpuType: a100}}")) == [
        "f0.yaml:7:60: error: spec.stages[0].resources.gpuType: gpuType set but gpu is 0\n"
        "  hint: remove gpuType, or ask for at least one GPU"
    ]


# --- platforms ---------------------------------------------------------------------------------

ONE_STAGE = pipeline("{name: a, type: Training}")


def test_platform_referencing_unknown_pipelines() -> None:
    assert check(ONE_STAGE, platform("x", "pipelines: [p, q, pp]")) == [
        "f1.yaml:6:18: error: spec.pipelines[1]: no AIGCPipeline named 'q'",
        "f1.yaml:6:21: error: spec.pipelines[2]: no AIGCPipeline named 'pp'\n"
        "  hint: did you mean 'p'?",
    ]


def test_two_platforms_listing_the_same_pipeline() -> None:
    assert check(ONE_STAGE, platform("x", "pipelines: [p]"), platform("y", "pipelines: [p]")) == [
        "f2.yaml:6:14: error: spec.pipelines: pipeline(s) p are also governed by AIGCPlatform "
        "'x'\n  hint: list the pipelines each platform governs in spec.pipelines"
    ]


def test_platform_without_a_list_governs_every_pipeline() -> None:
    assert check(ONE_STAGE, platform("x", "pipelines: [p]"), platform("y", "security: {}")) == [
        "f2.yaml:6:3: error: spec.pipelines: pipeline(s) p are also governed by AIGCPlatform "
        "'x'\n  hint: list the pipelines each platform governs in spec.pipelines"
    ]


def test_platforms_governing_different_pipelines_are_fine() -> None:
    other = ONE_STAGE.replace("name: p", "name: q")
    assert check(ONE_STAGE, other, platform("x", "pipelines: [p]"),
                 platform("y", "pipelines: [q]")) == []


def test_multi_cluster_primary_listed_again_and_twice() -> None:
    spec = "multiCluster: {primaryCluster: c, secondaryClusters: [c, d, d]}"
    fleet = FLEET + "  - {name: d, provider: y, region: cn-east-2}\n"
    assert check(fleet, platform("x", spec)) == [
        "f1.yaml:6:57: error: spec.multiCluster.secondaryClusters[0]: 'c' is already the "
        "primary cluster",
        "f1.yaml:6:63: error: spec.multiCluster.secondaryClusters[2]: 'd' is listed twice",
    ]


# --- the diagnostics as a whole ----------------------------------------------------------------

MANY_PROBLEMS = (
    cluster("attributes: {network-tier: fast}"),
    pipeline("{name: a, type: Training, dependencies: [a]}"),
    platform("x", "pipelines: [nope]"),
    "- not a mapping\n",
    GPU_POLICY.format(threshold="180%"),
)


def test_diagnostics_are_sorted_and_deduplicated() -> None:
    _, diagnostics = validate(documents(*MANY_PROBLEMS))
    error = PolicyError([*reversed(diagnostics), *diagnostics])
    assert error.diagnostics == tuple(sorted(set(diagnostics)))
    assert [(d.path, d.line) for d in error.diagnostics] == [
        ("f0.yaml", 10), ("f1.yaml", 7), ("f2.yaml", 6), ("f3.yaml", 1), ("f4.yaml", 7)
    ]
    assert str(error) == "\n".join(d.format() for d in error.diagnostics)


def test_document_order_does_not_change_the_diagnostics() -> None:
    docs = documents(*MANY_PROBLEMS)
    _, forward = validate(docs)
    _, backward = validate(list(reversed(docs)))
    assert len(forward) == 5
    assert sorted(set(forward)) == sorted(set(backward))


# --- the credential probe: most documents skip the scan of every value -------------------------

_CREDENTIAL_PIECES = [
    "AKIA" + "IOSFODNN7EXAMPLE", "ASIA" + "0123456789ABCDEF", "-----BEGIN RSA PRIVATE KEY-----",
    "s3://admin:hunter2@bucket/", "?token=abc", "&X-Api-Key=1", "ghp_" + "A1b2C3d4" * 5,
    "github_pat_" + "x" * 22, "xoxb-" + "1234567890", "9fA8b7C6d5E4f3G2h1J0", "\n", "\t", '"',
    "\\", "\x01", "é", "ſ", "K", "plain words", "cos://bucket/raw/",
]
_KEYS = st.sampled_from(["name", "apiKey", "db-password", "TOKEN", "ſecret", "Kredential",
                         "credential", "privateKey", "tokenSecretRef", "source", "a\"b", "secretName",
                         "keyRef", "passwordReference", "token\n", "tokenname\n", 'x": "token'])
_VALUES = st.lists(st.sampled_from(_CREDENTIAL_PIECES), max_size=3).map("".join)
_DOCUMENTS = st.recursive(_VALUES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)), max_leaves=6)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, _DOCUMENTS, max_size=4))
def test_the_credential_probe_never_skips_a_refused_value(data: dict) -> None:
    doc = Document("p.yaml", 0, data, {}, {})
    if list(credential_checks(doc)):
        assert may_hold_credentials(json.dumps(data, ensure_ascii=False))


@pytest.mark.parametrize("data", [
    {"ſecret": "9fA8b7C6d5E4f3G2h1J0"}, {"apı_key": "9fA8b7C6d5E4f3G2h1J0"},  # case-folded keys
    {"Token": "9fA8b7C6d5E4f3G2h1J0"}, {"a": ["x", "é\nAKIA" + "IOSFODNN7EXAMPLE"]},
    {"a": {"b": 'http://u:"p@h'}}, {'apiKey"x': "9fA8b7C6d5E4f3G2h1J0"},  # a quote after the word
    {"tokenf": "9fA8b7C6d5E4f3G2h1J0"}, {"passwordence": "9fA8b7C6d5E4f3G2h1J0"},  # nearly references
    {"secretName": "x", "keys": ["aws_secret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]},
])
def test_the_credential_probe_keeps_what_the_checks_refuse(data: dict) -> None:
    assert list(credential_checks(Document("p.yaml", 0, data, {}, {})))
    assert may_hold_credentials(json.dumps(data, ensure_ascii=False))


def test_the_credential_probe_passes_ordinary_policies() -> None:
    texts = [(SEED / name).read_text("utf-8") for name in SEED_FILES]
    data = [doc.data for text in texts for doc in parse(text, "p.yaml")[0]]
    assert data
    assert sum(may_hold_credentials(json.dumps(d, ensure_ascii=False)) for d in data) < len(data)


#: A pipeline as bench.generate writes them: every output names its Secret (``secretName``), and
#: nothing in it may be refused, so the probe lets it skip the scan.
_PIPELINE_DATA = {
    "apiVersion": "aigc.kurator.dev/v1alpha1", "kind": "AIGCPipeline",
    "metadata": {"name": "p", "namespace": "team-00", "labels": {"tokenRef": "t", "team": "a"}},
    "spec": {"stages": [
        {"name": "prepare", "type": "DataProc", "command": ["python", "-m", "prep", "--stage", "prepare"],
         "inputs": [{"name": "raw", "source": "cos://b/raw/", "location": "cn-north-1"}],
         "outputs": [{"name": "data", "storage": "cos://b/prepare/", "secretName": "store",
                      "passwordReference": "p", "apiKeyRef": "k"}],
         "resources": {"cpu": 8, "memory": "32Gi", "gpu": 0}},
        {"name": "train", "type": "Training", "dependencies": ["prepare"],
         "inputs": [{"name": "data", "from": "prepare.outputs.data"}],
         "resources": {"gpu": 2, "gpuType": "a100", "tolerations": [["x", {"y": [1, 2.5]}]]}},
    ]},
}
_AWS_SECRET = "aws_secret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
_PIECES = st.sampled_from([*_CREDENTIAL_PIECES[:10], _AWS_SECRET]) | st.permutations(
    "abcdefghKLMNOPQR012345").map("".join)  # random-looking tokens
#: Keys that name a secret, reference one, or nothing: a word of the secret-key rule (or none)
#: with anything before it and an ending a reference has, nearly has, or what JSON escapes.
_KEY_WORDS = st.sampled_from(["password", "Passwd", "SECRET", "token", "apiKey", "access_key", "private-key",
                              "credential", "ſecret", "Kredential", "key", "aws", ""])
_KEY_ENDS = st.sampled_from(["", "Name", "ref", "REFERENCE", "f", "ame", "ence", "s", "Store", "\n", '"x', "\\",
                             "é", ": "])
_ANY_KEY = st.builds(lambda a, word, end: a + word + end, st.text(max_size=3), _KEY_WORDS, _KEY_ENDS)
_FLAGGED = st.builds(lambda a, piece, b: a + piece + b, st.text(max_size=4), _PIECES, st.text(max_size=4))


def _containers(data: object) -> list[dict | list]:
    """Every mapping and list in ``data``, outermost first."""
    if not isinstance(data, dict | list):
        return []
    values = data.values() if isinstance(data, dict) else data
    return [data, *(inner for value in values for inner in _containers(value))]


def test_the_credential_probe_skips_an_ordinary_pipeline() -> None:
    assert list(credential_checks(Document("p.yaml", 0, _PIPELINE_DATA, {}, {}))) == []
    assert not may_hold_credentials(json.dumps(_PIPELINE_DATA, sort_keys=True, ensure_ascii=False))


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(_ANY_KEY, _FLAGGED, st.integers(min_value=0), st.integers(min_value=0))
def test_the_credential_probe_never_skips_a_refused_value_anywhere(key: str, value: str, where: int,
                                                                   at: int) -> None:
    """A value the per-string rules refuse, under any key, put anywhere in a document the probe
    skips: the probe no longer skips it (in the text validate probes and hashes: keys sorted)."""
    data = json.loads(json.dumps(_PIPELINE_DATA))
    containers = _containers(data)
    container = containers[where % len(containers)]
    if isinstance(container, dict):
        container[key] = value
    else:
        container.insert(at % (len(container) + 1), value)
    if list(credential_checks(Document("p.yaml", 0, data, {}, {}))):
        assert may_hold_credentials(json.dumps(data, sort_keys=True, ensure_ascii=False))
