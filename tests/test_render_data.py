"""Rendering of the data policy: Fluid Dataset, AlluxioRuntime and DataLoad where stages read
data, preprocessing settings for DataProc stages, and what has no Fluid form."""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from enum import Enum
from typing import Any

from support.builders import make_serving, make_stage
from test_render import fleet, objects

from fleetc.model import DataPolicy, FleetModel, Input, Output, Placement, Serving, Source, Stage, StageType, Toleration
from fleetc.render import order, render
from fleetc.render.common import digest
from fleetc.render.context import Context
from fleetc.render.data import dataset_name
from fleetc.render.order import run_id, stage_digest

DATA_FILE = "policies/data.yaml"
RAW = "s3://data/raw"
RAW_NAME = "data-s3-data-raw-6f8c904b"  # pinned: names must not drift between releases


def data_policy(**kw: Any) -> DataPolicy:
    fields: dict[str, Any] = dict(
        name="data", parallelization=16, compression=True, caching_enabled=True, caching_strategy="LFU",
        caching_size_bytes=100 * 1024**3, prefetching_enabled=True, prefetch_lookahead=32,
        source=Source(DATA_FILE, "spec"),
    )
    fields.update(kw)
    return DataPolicy(**fields)


def with_data(**kw: Any) -> tuple[FleetModel, Placement]:
    model, placement = fleet()
    return replace(model, data_policies=(data_policy(**kw),)), placement


def data_objects(**kw: Any) -> dict[str, dict[str, Any]]:
    return objects(dict(render(*with_data(**kw)).files))


def meta(name: str, namespace: str, field: str, wave: str = "0") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "fleetc"},
        "annotations": {"fleetc.dev/source": f"{DATA_FILE}#{field}", "argocd.argoproj.io/sync-wave": wave,
                        "argocd.argoproj.io/sync-options": "SkipDryRunOnMissingResource=true"},  # a Fluid CR
    }


def test_dataset_names_are_stable_and_distinct() -> None:
    assert dataset_name(RAW) == RAW_NAME
    assert RAW_NAME.endswith(hashlib.sha256(RAW.encode()).hexdigest()[:8])
    assert dataset_name("s3://a/b") != dataset_name("s3://a-b")
    long = dataset_name("s3://" + "x" * 200)
    assert len(long) <= 63 and long.startswith("data-s3-xxx") and not long.endswith("--")


def test_fluid_objects_exact() -> None:
    objs = data_objects()
    base = f"clusters/gpu-east/{{}}-ml-{RAW_NAME}"
    assert objs[base.format("dataset") + ".yaml"] == {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "Dataset",
        "metadata": meta(RAW_NAME, "ml", "spec.caching"),
        "spec": {"mounts": [{"name": "data", "mountPoint": RAW, "path": "/", "readOnly": True}]},
    }
    assert objs[base.format("alluxioruntime") + ".yaml"] == {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "AlluxioRuntime",
        "metadata": meta(RAW_NAME, "ml", "spec.caching"),
        "spec": {
            "replicas": 1,
            "properties": {
                "alluxio.worker.block.annotator.class": "alluxio.worker.block.annotator.LRFUAnnotator",
                "alluxio.worker.block.annotator.lrfu.step.factor": "0.0",
            },
            "tieredstore": {"levels": [{
                "mediumtype": "SSD", "volumeType": "hostPath", "path": "/var/lib/fleetc/cache",
                "quota": "35791394133", "high": "0.95", "low": "0.7",  # 100Gi over gpu-east's 3 runtimes
            }]},
        },
    }
    assert objs[base.format("dataload") + "-prefetch.yaml"] == {
        "apiVersion": "data.fluid.io/v1alpha1",
        "kind": "DataLoad",
        "metadata": meta(f"{RAW_NAME}-prefetch", "ml", "spec.prefetching", wave="1"),
        "spec": {"dataset": {"name": RAW_NAME, "namespace": "ml"}, "loadMetadata": True,
                 "target": [{"path": "/", "replicas": 1}]},
    }


def test_the_prefetch_of_an_output_runs_after_a_data_process_that_waits_for_its_writer() -> None:
    objs = data_objects()
    ckpt = "s3://models/ckpt"
    loads = {p: o for p, o in objs.items()
             if o["kind"] == "DataLoad" and o["spec"]["dataset"]["name"] == dataset_name(ckpt)}
    model = with_data()[0]
    train = next(s for s in model.stages if s.name == "train")
    name = f"{dataset_name(ckpt)}-{digest(run_id(Context.of(model), train))}"  # named after the run of its writer
    assert sorted(loads) == [f"clusters/{c}/dataload-{ns}-{name}-prefetch.yaml"
                             for c, ns in (("gpu-east", "serving"), ("gpu-west", "ml"), ("gpu-west", "serving"))]
    load = loads[f"clusters/gpu-west/dataload-ml-{name}-prefetch.yaml"]
    gate = f"{name}-wait"
    assert load["spec"] == {"dataset": {"name": dataset_name(ckpt), "namespace": "ml"}, "loadMetadata": True,
                            "target": [{"path": "/", "replicas": 1}], "runAfter": {"kind": "DataProcess", "name": gate}}
    process = objs[f"clusters/gpu-west/dataprocess-ml-{gate}.yaml"]
    assert process["metadata"] == meta(gate, "ml", "spec.prefetching", wave="1")
    assert process["spec"]["dataset"] == {"name": dataset_name(ckpt), "namespace": "ml", "mountPath": ""}
    pod = process["spec"]["processor"]["job"]["podSpec"]
    assert pod["restartPolicy"] == "Never"
    # the same init container train's dependants wait in (eval's release, which ungates eval): one source
    evaluate = objs["clusters/gpu-west/job-ml-llm-eval-release.yaml"]["spec"]["template"]["spec"]
    assert pod["initContainers"] == evaluate["initContainers"]
    assert [c["name"] for c in pod["initContainers"]] == ["fleetc-wait-train"]
    assert pod["containers"][0]["command"] == [  # no shell: the message holds the URL
        "echo", f"fleetc: llm/train completed; DataLoad {name}-prefetch may cache s3://models/ckpt"]


def test_a_writer_without_a_marker_leaves_its_output_without_a_data_load() -> None:
    model, placement = with_data()
    train = next(s for s in model.stages if s.name == "train")
    model = replace(model, stages=tuple(replace(s, command=()) if s is train else s for s in model.stages))
    rendered = render(model, placement)
    assert not any("-s3-models-ckpt-" in p and ("/dataload-" in p or "/dataprocess-" in p) for p in rendered.files)
    assert [w.format() for w in rendered.warnings if w.field == "spec.prefetching.enabled"] == [
        "policies/data.yaml: warning: spec.prefetching.enabled: no DataLoad for s3://models/ckpt: a DataLoad of "
        "it waits for the completion marker of every stage that writes it, and stage 'llm/train' sets no command "
        "for fleetc to wrap, so its completion cannot be marked; set command"]


def test_a_changed_writer_gets_a_new_data_process_and_data_load() -> None:
    model, placement = with_data()
    again = replace(model, stages=tuple(replace(s, command=(*s.command, "--resume")) if s.name == "train" else s
                                        for s in model.stages))
    before = {p for p in objects(dict(render(model, placement).files)) if "-s3-models-ckpt-" in p and "/data" in p}
    after = {p for p in objects(dict(render(again, placement).files)) if "-s3-models-ckpt-" in p and "/data" in p}
    assert before - after and after - before  # a Fluid data operation runs once: new names, new runs
    assert {p for p in before if "/dataset-" in p} == {p for p in after if "/dataset-" in p}


def test_one_dataset_per_url_and_namespace_where_it_is_read() -> None:
    datasets = sorted(p for p in data_objects() if "/dataset-" in p)
    # gpu-east: prep reads s3://data/raw, train reads prep's tokens, serve reads the checkpoint;
    # gpu-west: eval and serve both read the checkpoint (ml and serving: two namespaces).
    assert datasets == sorted([
        f"clusters/gpu-east/dataset-ml-{RAW_NAME}.yaml",
        f"clusters/gpu-east/dataset-ml-{dataset_name('s3://data/tokens')}.yaml",
        f"clusters/gpu-east/dataset-serving-{dataset_name('s3://models/ckpt')}.yaml",
        f"clusters/gpu-west/dataset-ml-{dataset_name('s3://models/ckpt')}.yaml",
        f"clusters/gpu-west/dataset-serving-{dataset_name('s3://models/ckpt')}.yaml",
    ])


def test_lru_cache_and_no_prefetch() -> None:
    objs = data_objects(caching_strategy="LRU", prefetching_enabled=False, caching_size_bytes=3 * 512 * 1024**2)
    runtime = objs[f"clusters/gpu-east/alluxioruntime-ml-{RAW_NAME}.yaml"]["spec"]
    lru = "alluxio.worker.block.annotator.LRUAnnotator"
    assert runtime["properties"] == {"alluxio.worker.block.annotator.class": lru}
    assert runtime["tieredstore"]["levels"][0]["quota"] == "512Mi"  # gpu-east caches 3 URLs: a third each
    quotas = [o["spec"]["tieredstore"]["levels"][0]["quota"] for p, o in objs.items()
              if p.startswith("clusters/gpu-east/alluxioruntime-")]
    assert quotas == ["512Mi"] * 3  # they add up to the policy's size
    assert not any("/dataload-" in p for p in objs)


def test_no_caching_no_fluid_objects_but_preprocessing_still_applies() -> None:
    objs = data_objects(caching_enabled=False)
    assert not any(obj["apiVersion"].startswith("data.fluid.io/") for obj in objs.values())
    prep = objs["clusters/gpu-east/job-ml-llm-prep.yaml"]
    assert prep["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"][:2] == [
        {"name": "FLEETC_INPUT_RAW_CORPUS", "value": RAW},
        {"name": "FLEETC_OUTPUT_TOKENS", "value": "s3://data/tokens"},
    ]


def env(obj: dict[str, Any]) -> list[dict[str, str]]:
    result: list[dict[str, str]] = obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    return result


def test_preprocessing_reaches_dataproc_stages_only() -> None:
    objs = data_objects(parallelization=8, compression=False)
    assert env(objs["clusters/gpu-east/job-ml-llm-prep.yaml"]) == [
        {"name": "FLEETC_INPUT_RAW_CORPUS", "value": RAW},
        {"name": "FLEETC_INPUT_RAW_CORPUS_PATH", "value": "/fleetc/inputs/raw-corpus"},
        {"name": "FLEETC_OUTPUT_TOKENS", "value": "s3://data/tokens"},
        {"name": "FLEETC_PREPROCESS_COMPRESSION", "value": "false"},
        {"name": "FLEETC_PREPROCESS_PARALLELISM", "value": "8"},
    ]
    train = env(objs["clusters/gpu-east/job-ml-llm-train.yaml"])
    assert all(not e["name"].startswith("FLEETC_PREPROCESS") for e in train)
    assert objs["clusters/gpu-east/job-ml-llm-prep.yaml"]["spec"]["minAvailable"] == 2  # gang size unchanged


def test_warnings_name_lookahead_and_uncacheable_inputs() -> None:
    model, placement = with_data()
    prep = replace(model.stages[0], inputs=(Input("raw", "nfs://filer/raw", None, None, None),
                                            Input("local", "/mnt/raw", None, None, None)))
    model = replace(model, stages=(prep, *model.stages[1:]))
    warnings = [w.format() for w in render(model, placement).warnings if w.path != "fleet.yaml"]
    assert warnings == [
        "pipelines/llm.yaml: warning: spec.stages.prep.inputs[0]: nfs:// cannot be cached by Fluid/Alluxio; "
        "the stage reads it directly",
        "pipelines/llm.yaml: warning: spec.stages.prep.inputs[1]: a URL without a scheme cannot be cached by "
        "Fluid/Alluxio; the stage reads it directly",
        "policies/data.yaml: warning: spec.caching.size: reaches only AlluxioRuntimes created after it: Fluid "
        "never resizes an existing one (fluid v1.0.8 pkg/ddc/alluxio/sync_runtime.go: AlluxioEngine.SyncRuntime "
        "is a no-op), so after a change of size delete each AlluxioRuntime (its cache is rebuilt) for the new "
        "size to take effect",
        "policies/data.yaml: warning: spec.prefetching.lookahead: has no Fluid form (a DataLoad warms the whole "
        "dataset once); not rendered",
    ]
    files = render(model, placement).files
    assert not any("nfs-filer" in path for path in files)


def test_no_lookahead_warning_without_prefetching() -> None:
    assert [w.field for w in render(*with_data(prefetching_enabled=False)).warnings] == [
        "spec.gitops.repoURL", "spec.caching.size"]


def test_stages_mount_their_cached_inputs() -> None:
    objs = data_objects()
    pod = objs["clusters/gpu-west/deployment-serving-llm-serve.yaml"]["spec"]["template"]["spec"]
    ckpt = dataset_name("s3://models/ckpt")
    assert pod["volumes"] == [{"name": "input-model", "persistentVolumeClaim": {"claimName": ckpt, "readOnly": True}}]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "input-model", "mountPath": "/fleetc/inputs/model", "readOnly": True}]
    assert {"name": "FLEETC_INPUT_MODEL_PATH", "value": "/fleetc/inputs/model"} in container["env"]
    # the claim is the PVC Fluid creates for the Dataset beside the pod
    assert objs[f"clusters/gpu-west/dataset-serving-{ckpt}.yaml"]["metadata"]["namespace"] == "serving"


def test_nfs_inputs_are_mounted_from_the_server_not_cached() -> None:
    model, placement = with_data()
    prep = replace(model.stages[0], inputs=(Input("raw", "nfs://filer/exports/raw/", None, None, None),))
    model = replace(model, stages=(prep, *model.stages[1:]))
    files = dict(render(model, placement).files)
    job = objects(files)["clusters/gpu-east/job-ml-llm-prep.yaml"]
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "input-raw", "nfs": {"server": "filer", "path": "/exports/raw",
                                                              "readOnly": True}}
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "input-raw", "mountPath": "/fleetc/inputs/raw",
                                                       "readOnly": True}
    assert {"name": "FLEETC_INPUT_RAW_PATH", "value": "/fleetc/inputs/raw"} in pod["containers"][0]["env"]


def test_nfs_outputs_are_mounted_writable_at_the_path_the_container_is_told() -> None:
    model, placement = with_data()
    prep = replace(model.stages[0], outputs=(Output("tokens", "nfs://filer/exports/tokens/", None),))
    model = replace(model, stages=(prep, *model.stages[1:]))
    files = dict(render(model, placement).files)
    job = objects(files)["clusters/gpu-east/job-ml-llm-prep.yaml"]
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    assert {"name": "output-tokens", "nfs": {"server": "filer", "path": "/exports/tokens"}} in pod["volumes"]
    assert {"name": "output-tokens", "mountPath": "/fleetc/outputs/tokens"} in pod["containers"][0]["volumeMounts"]
    env = pod["containers"][0]["env"]
    assert {"name": "FLEETC_OUTPUT_TOKENS", "value": "nfs://filer/exports/tokens/"} in env
    assert {"name": "FLEETC_OUTPUT_TOKENS_PATH", "value": "/fleetc/outputs/tokens"} in env


def _serving_from(url: str, secret: str | None, location: str | None) -> tuple[dict[str, Any], list[str]]:
    """The serving container and the inputs warnings when serve's model comes from ``url``,
    uncached (no data policy), with ``secret`` named on serve's input."""
    model, placement = fleet()
    stages = tuple(
        replace(s, outputs=(replace(s.outputs[0], url=url), *s.outputs[1:])) if s.name == "train" else
        replace(s, inputs=(replace(s.inputs[0], secret_name=secret, location=location),),
                serving=Serving(triton=True)) if s.name == "serve" else s
        for s in model.stages)
    rendered = render(replace(model, stages=stages), placement)
    deployment = objects(dict(rendered.files))["clusters/gpu-west/deployment-serving-llm-serve.yaml"]
    return (deployment["spec"]["template"]["spec"]["containers"][0],
            [w.message for w in rendered.warnings if ".inputs" in w.field])


def test_triton_reads_an_uncached_s3_model_with_the_secret_named_for_it() -> None:
    container, warned = _serving_from("s3://models/ckpt", "models-s3", "us-west-2")
    assert container["command"][:2] == ["tritonserver", "--model-repository=$(FLEETC_INPUT_MODEL)"]
    assert [e for e in container["env"] if e["name"].startswith("AWS_")] == [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "models-s3", "key": "aws.accessKeyId"}}},
        {"name": "AWS_DEFAULT_REGION", "value": "us-west-2"},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "models-s3", "key": "aws.secretKey"}}},
    ]
    assert warned == []
    # no Secret: the SDK's default chain (the pod's identity); no region known: none set
    container, warned = _serving_from("s3://models/ckpt", None, None)
    assert not any(e["name"].startswith("AWS_") for e in container["env"]) and warned == []
    # Triton cannot use the HMAC keys of a gs:// Secret: said, not rendered
    container, warned = _serving_from("gs://models/ckpt", "models-gs", None)
    assert not any(e["name"].startswith(("AWS_", "GOOGLE_")) for e in container["env"])
    assert warned == [
        "Triton reads gs:// model repositories with its own credentials (a key file, or the pod's identity), "
        "not the keys of Secret models-gs: cache inputs[0] (DataOptimizationPolicy caching: Fluid mounts it "
        "with the Secret), or give the pods an identity that reads it"]


def test_a_prefetch_that_cannot_reach_its_writers_marker_is_reported() -> None:
    """serve (namespace serving) caches train's checkpoint, written to cos:// in namespace ml
    with a Secret named there only: its DataProcess could not read the marker, whose endpoint
    only a Secret names."""
    model, placement = with_data()
    stages = tuple(replace(s, outputs=(replace(s.outputs[0], url="cos://models/ckpt", secret_name="cos-ml"),
                                       *s.outputs[1:])) if s.name == "train" else s for s in model.stages)
    warned = [w.message for w in render(replace(model, stages=stages), placement).warnings
              if w.field == "spec.prefetching.enabled"]
    assert warned == [
        "the DataLoad in namespace serving waits for the completion marker at cos://models/ckpt, and no Secret "
        "is named for it in serving: cos:// needs the endpoint and keys one holds; name a Secret (secretName) on "
        "an input that reads it there"]
    named = tuple(replace(s, inputs=(replace(s.inputs[0], secret_name="cos-serving"),)) if s.name == "serve" else s
                  for s in stages)
    assert not [w for w in render(replace(model, stages=named), placement).warnings
                if w.field == "spec.prefetching.enabled"]


@dataclass(frozen=True)
class LaterStage(Stage):
    """The Stage of a later fleetc, with one more field."""

    priority: int = 0


def test_a_run_id_survives_a_model_field_added_with_its_default() -> None:
    """Job names hash their spec, and the spec holds the run id: were a new Stage field (at its
    default) to change every run id, upgrading fleetc would restart every Job in the fleet."""
    stage = make_stage("train", gpus=8)
    later = LaterStage(**{f.name: getattr(stage, f.name) for f in fields(stage)})
    assert stage_digest(later) == stage_digest(stage)
    assert stage_digest(replace(later, priority=1)) != stage_digest(stage)
    assert stage_digest(replace(stage, gpus=4)) != stage_digest(stage)
    assert stage_digest(replace(stage, shared_gpu=True)) != stage_digest(stage)


def _plain_stage_digest(stage: Stage) -> str:
    """run_id as first written: the stage replaced as it says, walked generically."""
    def canonical(value: object) -> object:
        if is_dataclass(value) and not isinstance(value, type):
            return {f.name: canonical(getattr(value, f.name)) for f in fields(value)
                    if not (f.default is not MISSING and getattr(value, f.name) == f.default
                            or f.default_factory is not MISSING and getattr(value, f.name) == f.default_factory())}
        if isinstance(value, Enum):
            return canonical(value.value)
        if isinstance(value, (tuple, list)):
            return [canonical(item) for item in value]
        return value
    if stage.gpu_options:
        stage = replace(stage, gpus=stage.gpu_options[0].gpus)
    stage = replace(stage, pods_per_replica=1, source=replace(stage.source, document=0))
    return hashlib.sha256(json.dumps(canonical(stage), sort_keys=True).encode()).hexdigest()[:16]


def test_run_ids_are_the_generic_walk_of_the_stage() -> None:
    """run_id walks a stage through a table of its fields per type: the same JSON, so the same
    ids, as the generic walk over dataclasses.fields, whatever the stage holds."""
    throughput = make_stage("train", throughput_gpus={"a100": 4, "h100": 2}, gpu_types=("a100", "h100"))
    stages = [
        make_stage("train", gpus=8, tolerations=(Toleration(key="gpu", operator="Exists"),)),
        throughput,
        replace(throughput, gpus=2, pods_per_replica=2),  # as on_cluster renders it on an h100
        replace(make_serving(), serving=Serving(port=9000, extra_ports=(("grpc", 8001),), triton=True),
                source=Source("p.yaml", "spec.stages[3]", document=2), shared_gpu=True),
        replace(make_stage("prep", type=StageType.DATAPROC, gpus=0),
                inputs=(Input("raw", "s3://a/b", None, None, "eu", secret_name="s"),),
                outputs=(Output("data", "cos://c/d", None, jurisdiction="eu"),), command=("run", "x")),
    ]
    for stage in stages:
        assert stage_digest(stage) == _plain_stage_digest(stage)
        assert stage_digest(stage) == _plain_stage_digest(stage)  # the same again
    assert stage_digest(stages[1]) == stage_digest(stages[2])  # readers and the cluster's copy agree


def test_run_ids_are_remembered_by_the_render_not_the_module() -> None:
    """run_id remembers each stage's id in its render's Context (Context.memo), which goes with
    the render: nothing at module level keeps the stages of a model no render holds, and a
    Context made anew (or by replace) computes afresh."""
    model, _ = with_data()
    train = next(s for s in model.stages if s.name == "train")
    ctx = Context.of(model)
    expected = run_id(ctx, train)
    assert ctx.memo[("run", id(train))] == (train, expected)
    assert Context.of(model).memo == {} and replace(ctx, guarantees={}).memo == {}
    assert run_id(Context.of(model), train) == expected
    assert not hasattr(order, "_remembered_for")


def test_waits_made_once_per_render_give_each_caller_its_own_lists() -> None:
    """order.waits is made once per namespace and upstreams in a render: a second caller gets
    the same containers in lists of its own, so a pod spec appending its marker's volume
    changes no other pod's; a new render (a new Context) makes them afresh."""
    model, _ = with_data()
    train = next(s for s in model.stages if s.name == "train")
    ctx = Context.of(model)
    first, again = order.waits(ctx, "ml", [train]), order.waits(ctx, "ml", [train])
    assert [c["name"] for c in first[0]] == ["fleetc-wait-train"] and first == again
    assert first[0] is not again[0] and first[1] is not again[1]
    first[1].append({"name": "extra"})
    assert order.waits(ctx, "ml", [train])[1] == again[1]
    other = Context.of(model)
    assert order.waits(other, "ml", [train]) == again and order.waits(other, "ml", [train])[0][0] is not again[0][0]
