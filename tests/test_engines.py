"""fleetc's output converges on Flux and on Argo CD, as their apply semantics say it must
(modelled in :mod:`support.engines`): on a fresh cluster in one pass, and again after a policy
change (the old runs pruned, the unchanged ones untouched). Run over the bundled example, every
golden case and a generated 20-cluster fleet. Every test of the Flux entry point runs for the
Kurator one too (``entry``): the Kurator Application becomes Flux Kustomizations on the host,
one per sync policy and member cluster, which Flux reconciles the same way."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
from ruamel.yaml import YAML
from support.corpus import CASES, GOLDEN, ROOT, compile_texts, read_policies, read_tree
from support.engines import (
    KURATOR_FLEET_LABEL,
    PREINSTALLED_NAMESPACES,
    SERVED,
    ArgoState,
    Cluster,
    FluxState,
    Member,
    Refused,
    argo_sync,
    drifted,
    flux_reconcile,
    key,
    kurator_kustomizations,
    kurator_targets,
    kustomize_build,
)
from support.yamlread import read

from bench.generate import Spec, generate

_YAML = YAML(typ="safe", pure=True)

Files = Mapping[str, str]


# --------------------------------------------------------------------------- helpers
def clusters(files: Files) -> list[str]:
    return sorted({path.split("/")[1] for path in files if path.startswith("clusters/")})


def flux_kustomizations(files: Files, cluster: str) -> list[dict]:
    docs = [read(text) for path, text in files.items()
            if path.startswith(f"flux/{cluster}/") and not path.endswith("/kustomization.yaml")]
    return [doc for doc in docs if doc["kind"] == "Kustomization"]


def repository_folder(files: Files) -> str:
    """The output folder inside the repository, as the Flux Kustomizations' paths name it."""
    appset = read(files["argocd/applicationset-argocd-fleetc.yaml"])
    return appset["spec"]["template"]["spec"]["source"]["path"].removesuffix("clusters/{{.cluster}}").rstrip("/") or "."


def desired(files: Files, cluster: str) -> dict:
    return {key(obj): obj for obj in kustomize_build(files, f"clusters/{cluster}")}


#: The entry points whose Kustomizations Flux reconciles: fleetc's own, and Kurator's.
ENTRIES = ["flux", "kurator"]
#: The label the README tells Kurator users to put on each cluster object.
CLUSTER_LABEL = "fleetc.dev/cluster"


def with_entry_points(policies: Files, entry: str) -> dict[str, str]:
    """``policies`` with the Fleet's ``spec.gitops.entryPoints`` set for ``entry``: as they are
    for flux (the default), ``[argocd, kurator]`` for kurator (no Flux entry point at all)."""
    if entry == "flux":
        return dict(policies)
    path = fleet_path(policies)
    text = policies[path]
    line = "    entryPoints: [argocd, kurator]\n"
    if "\n    entryPoints:" in text:
        text = re.sub(r"\n    entryPoints: .*\n", "\n" + line, text, count=1)
    elif "\n  gitops:\n" in text:
        text = text.replace("\n  gitops:\n", "\n  gitops:\n" + line, 1)
    else:
        text = text.rstrip("\n") + "\n  gitops:\n" + line
    return {**policies, path: text}


def fleet_path(policies: Files) -> str:
    return next(p for p, text in sorted(policies.items()) if re.search(r"^kind: Fleet$", text, re.M))


def member_kinds(policies: Files) -> dict[str, str]:
    """The Kurator kind of each cluster the Fleet names one for."""
    fleet = _YAML.load(policies[fleet_path(policies)])
    return {c["name"]: c["kind"] for c in fleet["spec"]["clusters"] if "kind" in c}


def compile_for(policies: Files, entry: str) -> dict[str, str]:
    files = compile_texts(with_entry_points(policies, entry))
    assert any(path.startswith(f"{entry}/") for path in files), entry
    return files


def case_output(case: str, entry: str) -> dict[str, str]:
    """A golden case's output: as recorded for flux, compiled with the entry point otherwise."""
    if entry == "flux":
        return read_tree(CASES / case / "expected")
    return compile_for(read_policies(CASES / case / "policies"), entry)


def kurator_application(files: Files) -> dict:
    return next(read(text) for path, text in files.items()
                if path.startswith("kurator/application-"))


class Fleet:
    """Every cluster of a fleet as both engines see it, kept across commits. ``entry``: whose
    Flux Kustomizations Flux reconciles, fleetc's ``flux/<cluster>/`` or those Kurator makes
    from ``kurator/`` (each cluster object labelled as the README says, of kind ``kinds``'s,
    default AttachedCluster)."""

    def __init__(self, entry: str = "flux", kinds: Mapping[str, str] | None = None,
                 preinstalled: frozenset[str] = PREINSTALLED_NAMESPACES) -> None:
        self.entry = entry
        self.preinstalled = preinstalled
        self.kinds = dict(kinds or {})
        self.flux: dict[str, tuple[Cluster, FluxState]] = {}
        self.argo: dict[str, tuple[Cluster, ArgoState]] = {}
        #: The Kustomizations last reconciled per cluster: they stay when the cluster leaves the
        #: output (Flux's are the user's to delete; Kurator never deletes those it made).
        self.kustomizations: dict[str, list[dict]] = {}
        self._kurator: dict[str, dict] = {}  # what Kurator made, by name

    def entry_kustomizations(self, files: Files, cluster: str) -> list[dict]:
        if self.entry == "flux":
            return flux_kustomizations(files, cluster)
        application = kurator_application(files)
        fleet = application["spec"]["destination"]["fleet"]
        members = [Member(name, self.kinds.get(name, "AttachedCluster"),
                          {CLUSTER_LABEL: name, KURATOR_FLEET_LABEL: fleet}) for name in clusters(files)]
        self._kurator |= {k["metadata"]["name"]: k for k in kurator_kustomizations(application, members)}
        return kurator_targets(list(self._kurator.values()), cluster)

    def sync(self, files: Files) -> None:
        """One pass of both engines on every cluster of ``files``; each must converge."""
        for cluster in clusters(files):
            live, state = self.flux.setdefault(cluster, (Cluster(preinstalled=self.preinstalled), FluxState()))
            self.kustomizations[cluster] = self.entry_kustomizations(files, cluster)
            failures = flux_reconcile(live, files, self.kustomizations[cluster], state,
                                      repository_folder(files))
            assert failures == {}, f"Flux on {cluster}: {failures}"
            assert_converged(live, files, cluster, "Flux")
            live, argo = self.argo.setdefault(cluster, (Cluster(preinstalled=self.preinstalled), ArgoState()))
            failure = argo_sync(live, kustomize_build(files, f"clusters/{cluster}"), argo)
            assert failure is None, f"Argo CD on {cluster}: {failure}"
            assert_converged(live, files, cluster, "Argo CD")

    def uids(self) -> dict[tuple[str, str], dict]:
        return {(engine, cluster): live.uids()
                for engine, by_cluster in (("flux", self.flux), ("argo", self.argo))
                for cluster, (live, _) in by_cluster.items()}


def assert_converged(live: Cluster, files: Files, cluster: str, engine: str) -> None:
    """The cluster holds exactly the objects of ``files``, each as its manifest says (the
    webhooks' defaults besides), and every Kueue Job started."""
    wanted = desired(files, cluster)
    kept = {k for k, o in live.objects.items() if k[1] == "Secret" or _never_pruned(o.obj)}
    assert _started(live).keys() - kept == wanted.keys() - kept, f"{engine} on {cluster}"
    assert drifted(live, list(wanted.values())) == [], f"{engine} on {cluster}"


def _never_pruned(obj: dict) -> bool:
    annotations = obj["metadata"].get("annotations", {})
    return (annotations.get("argocd.argoproj.io/sync-options") == "Prune=false"
            and annotations.get("kustomize.toolkit.fluxcd.io/prune") == "disabled")


def _objects(live: Cluster) -> dict:
    return {k: v.obj for k, v in live.objects.items()}


def _started(live: Cluster) -> dict:
    """The objects once the release Jobs ran (their upstreams taken as completed) and Kueue
    admitted what it can: every Kueue Job must have started (its queues exist); the LocalQueues
    the release Jobs created, which no manifest renders, and ``spec.suspend``, which Kueue
    owns, are left out of the comparison."""
    live.release()
    live.kueue_admit()
    found = {k: obj for k, obj in _objects(live).items() if not obj["metadata"].get("ownerReferences")}
    for k, obj in found.items():
        if k[:2] == ("batch", "Job") and "suspend" in obj["spec"]:
            assert obj["spec"]["suspend"] is False, f"{k} stays suspended: {live.kueue_queue_problem(k[2], obj)}"
            found[k] = {**obj, "spec": {n: v for n, v in obj["spec"].items() if n != "suspend"}}
    return found


def assert_second_pass_keeps_unchanged_runs(before: Files, after: Files, entry: str = "flux") -> Fleet:
    """Sync ``before``, then ``after``: both converge; every Job rendered the same in both
    keeps its uid (it never restarted), and every Job only ``before`` had is gone."""
    fleet = Fleet(entry)
    fleet.sync(before)
    uids = fleet.uids()
    fleet.sync(after)
    for (engine, cluster), old in uids.items():
        if cluster not in clusters(after):
            continue
        kept = desired(before, cluster).keys() & desired(after, cluster).keys()
        live = fleet.uids()[(engine, cluster)]
        for k in kept:
            if k[1] == "Job":
                assert live[k] == old[k], f"{engine} restarted {k} on {cluster}"
    return fleet


# --------------------------------------------------------------------------- the model refuses what upstream refuses
QUEUE = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}


def job(name: str = "train", image: str = "a", wave: int | None = None) -> dict:
    meta: dict = {"name": name, "namespace": "ml"}
    if wave is not None:
        meta["annotations"] = {"argocd.argoproj.io/sync-wave": str(wave)}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
            "spec": {"queue": "q", "tasks": [{"name": "worker", "replicas": 1, "image": image}]}}


def test_volcano_refuses_a_job_without_its_queue_also_on_a_dry_run() -> None:
    cluster = Cluster()
    cluster.apply(NAMESPACE)
    with pytest.raises(Refused, match="unable to find job queue: q"):
        cluster.apply(job(), dry_run=True)
    cluster.apply(QUEUE)
    cluster.apply(job())
    with pytest.raises(Refused, match="job updates may not change"):
        cluster.apply(job(image="b"))


def test_volcano_fills_task_defaults_on_create_only_and_refuses_a_reapply_that_drops_them() -> None:
    """mutate_job.go on CREATE, an atomic ``spec.tasks`` under server-side apply, and
    validateJobUpdate: the same manifest applied twice is refused the second time unless it
    sets every field the webhook filled."""
    cluster = Cluster()
    cluster.apply(NAMESPACE)
    cluster.apply(QUEUE)
    cluster.apply(job())
    task = cluster.objects[key(job())].obj["spec"]["tasks"][0]
    assert (task["minAvailable"], task["maxRetry"]) == (1, 3)
    assert drifted(cluster, [job()]) == [key(job())]  # Argo CD: OutOfSync
    with pytest.raises(Refused, match="job updates may not change fields"):
        cluster.apply(job(), dry_run=True)  # Flux's dry run of the workloads
    explicit = job(name="explicit")
    explicit["spec"]["tasks"][0] |= {"minAvailable": 1, "maxRetry": 3}
    cluster.apply(explicit)
    cluster.apply(explicit)
    assert drifted(cluster, [explicit]) == []
    files = {"c/kustomization.yaml": "resources: [job.yaml, explicit.yaml]\n", "c/job.yaml": _dump(job()),
             "c/explicit.yaml": _dump(explicit)}
    failures = flux_reconcile(cluster, files, [{"metadata": {"name": "w"}, "spec": {"path": "./c"}}],
                              FluxState(), ".")
    assert "validatejob.volcano.sh denied" in failures["w"]  # one refused dry run fails them all


def test_one_flux_kustomization_with_queue_and_job_never_applies_the_queue() -> None:
    files = {"c/kustomization.yaml": "resources: [ns.yaml, q.yaml, job.yaml]\n",
             "c/ns.yaml": _dump(NAMESPACE), "c/q.yaml": _dump(QUEUE), "c/job.yaml": _dump(job())}
    kustomization = {"metadata": {"name": "all"}, "spec": {"path": "./c", "prune": True}}
    cluster = Cluster()
    failures = flux_reconcile(cluster, files, [kustomization], FluxState(), ".")
    assert "unable to find job queue" in failures["all"]
    assert set(cluster.objects) == {key(NAMESPACE)}  # stage one only; the Queue never came


def test_argo_without_waves_applies_the_job_before_the_queue() -> None:
    cluster = Cluster()
    assert "unable to find job queue" in (argo_sync(cluster, [NAMESPACE, QUEUE, job()], ArgoState()) or "")
    assert argo_sync(Cluster(), [NAMESPACE, QUEUE, job(wave=1)], ArgoState()) is None


KUEUE_API = "kueue.x-k8s.io/v1beta2"
FLAVOR = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "f"}, "spec": {}}
CLUSTER_QUEUE = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": "cq"},
                 "spec": {"resourceGroups": [{"coveredResources": ["cpu"],
                                              "flavors": [{"name": "f", "resources": [{"name": "cpu",
                                                                                       "nominalQuota": 8}]}]}]}}
LOCAL_QUEUE = {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": "ml"},
               "spec": {"clusterQueue": "cq"}}


def kueue_job(image: str = "a", wave: int | None = None) -> dict:
    meta: dict = {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if wave is not None:
        meta["annotations"] = {"argocd.argoproj.io/sync-wave": str(wave)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {"image": image}}}}


def test_kueue_accepts_a_job_before_its_queue_and_starts_it_once_the_queues_exist() -> None:
    cluster = Cluster()
    cluster.apply(NAMESPACE)
    cluster.apply(kueue_job(), dry_run=True)
    cluster.apply(kueue_job())
    live = cluster.objects[key(kueue_job())]
    assert live.obj["spec"]["suspend"] is True  # the webhook's default: created suspended
    assert cluster.kueue_admit() == []
    assert cluster.kueue_queue_problem("ml", live.obj) == "LocalQueue ml/lq does not exist"
    cluster.apply(LOCAL_QUEUE)
    cluster.apply(CLUSTER_QUEUE)
    assert cluster.kueue_queue_problem("ml", live.obj) == "ResourceFlavor f of ClusterQueue cq does not exist"
    cluster.apply(FLAVOR)
    assert cluster.kueue_admit() == [key(kueue_job())]
    assert live.obj["spec"]["suspend"] is False
    with pytest.raises(Refused, match="spec.template: field is immutable"):
        cluster.apply(kueue_job(image="b"))


def test_one_flux_kustomization_with_kueue_queues_and_job_converges() -> None:
    objects = {"ns": NAMESPACE, "f": FLAVOR, "cq": CLUSTER_QUEUE, "lq": LOCAL_QUEUE, "job": kueue_job()}
    files = {"c/kustomization.yaml": f"resources: [{', '.join(f'{n}.yaml' for n in objects)}]\n"}
    files |= {f"c/{n}.yaml": _dump(obj) for n, obj in objects.items()}
    kustomization = {"metadata": {"name": "all"}, "spec": {"path": "./c", "prune": True}}
    cluster = Cluster()
    assert flux_reconcile(cluster, files, [kustomization], FluxState(), ".") == {}
    assert cluster.kueue_admit() == [key(kueue_job())]
    assert argo_sync(Cluster(), list(objects.values()), ArgoState()) is None


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_sync_after_kueue_started_a_job_leaves_it_running(entry: str) -> None:
    """fleetc renders no ``spec.suspend``: re-applying the manifest must not stop the run."""
    files = case_output("kueue-two-cluster-pipeline", entry)
    assert not any("suspend" in text for path, text in files.items() if "/job-" in path)
    fleet = Fleet(entry)
    fleet.sync(files)
    uids = fleet.uids()
    fleet.sync(files)
    assert fleet.uids() == uids
    jobs: list[dict] = []
    for live, _ in [*fleet.flux.values(), *fleet.argo.values()]:
        # the release Jobs name no queue: Kueue does not manage them, nor suspend them
        jobs += [o.obj for k, o in live.objects.items() if k[:2] == ("batch", "Job")
                 and "kueue.x-k8s.io/queue-name" in o.obj["metadata"]["labels"]]
    assert jobs and all(job["spec"]["suspend"] is False for job in jobs)


@pytest.mark.parametrize("entry", ENTRIES)
def test_kueue_second_compile_converges_and_keeps_unchanged_runs(entry: str) -> None:
    policies = read_policies(CASES / "kueue-two-cluster-pipeline" / "policies")
    before = compile_for(policies, entry)
    path = "policies/pipeline.yaml"
    trained = _set_image(policies[path], "train", "registry.example.com/llm/train:3.1")
    after = compile_for({**policies, path: trained}, entry)
    renamed = {p.rsplit("/", 1)[1].rsplit("-", 1)[0] for p in set(before) ^ set(after) if "/workloads/" in p}
    # a new run, its headless Service, and its release Job (the run's LocalQueue is a new one);
    # the serving stage's releaser, which waits for the new run's marker
    assert renamed == {"job-ml-llm-train", "service-ml-llm-train", "job-ml-llm-train-release",
                       "deployment-ml-llm-serve-release"}
    serve = "clusters/serve-l4/workloads/deployment-ml-llm-serve.yaml"
    assert before[serve] != after[serve]  # its pods serve the new run (their run label): a rollout
    fleet = assert_second_pass_keeps_unchanged_runs(before, after, entry)
    # the previous run's LocalQueue went with its pruned release Job (the garbage collector)
    held = {obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for obj in desired(after, "train-kueue").values()
            if obj["kind"] == "Job" and "kueue.x-k8s.io/queue-name" in obj["metadata"]["labels"]} - {"fleetc"}
    for live, _ in (fleet.flux["train-kueue"], fleet.argo["train-kueue"]):
        created = {k[3] for k, o in live.objects.items() if k[1] == "LocalQueue" and o.obj["metadata"].get(
            "ownerReferences")}
        assert len(held) == 1 and created == held


@pytest.mark.parametrize("entry", ENTRIES)
def test_bundled_example_on_kueue_converges_in_one_pass_and_again_after_a_change(entry: str) -> None:
    policies = read_policies(ROOT / "policies")
    path = "policies/fleet.yaml"
    kueue = re.sub(r"(\n  - name: [a-z-]+\n)(\s+)", r"\1\2batchScheduler: kueue\n\2", policies[path])
    assert kueue.count("batchScheduler: kueue") == 3
    policies = {**policies, path: kueue}
    before = compile_for(policies, entry)
    assert any("kind: ClusterQueue" in text for text in before.values())
    training = "policies/llm-training-pipeline.yaml"
    after = compile_for({**policies, training: _set_image(policies[training], "model-training", "trainer:v2")}, entry)
    assert_second_pass_keeps_unchanged_runs(before, after, entry)


def _dump(obj: dict) -> str:
    from fleetc.render.yamlout import dump
    return dump(obj)


# --------------------------------------------------------------------------- fresh clusters, one pass
@pytest.mark.parametrize("entry", ENTRIES)
def test_bundled_example_converges_in_one_pass(entry: str) -> None:
    Fleet(entry).sync(compile_for(read_policies(ROOT / "policies"), entry))


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case", GOLDEN)
def test_golden_case_converges_in_one_pass(case: str, entry: str) -> None:
    Fleet(entry, member_kinds(read_policies(CASES / case / "policies"))).sync(case_output(case, entry))


@pytest.fixture(scope="module")
def generated_fleet() -> dict[str, str]:
    instance = generate(Spec(clusters=20, stages=120, platform=True))
    return instance.files


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES)
def test_generated_20_cluster_fleet_converges_in_one_pass(generated_fleet: dict[str, str], entry: str) -> None:
    files = compile_for(generated_fleet, entry)
    assert len(clusters(files)) == 20
    Fleet(entry).sync(files)


def test_the_device_plugin_config_lands_on_a_cluster_without_the_gpu_operator() -> None:
    """The device plugin's ConfigMap goes into the GPU Operator's namespace; on a cluster not
    set up for it (no ``gpu-operator``) fleetc's infra layer must still converge."""
    files = compile_texts(read_policies(ROOT / "policies"))
    assert any("name: fleetc-device-plugin-config" in text for text in files.values())
    Fleet(preinstalled=PREINSTALLED_NAMESPACES - {"gpu-operator"}).sync(files)


def test_argo_syncs_what_it_can_before_fluids_crds_are_served_and_the_rest_once_they_are() -> None:
    """A cluster whose Fluid CRDs are not served yet (Fluid installed by another Application,
    or being upgraded): custom resources carry SkipDryRunOnMissingResource=true, so the dry run
    does not fail the whole sync: the Namespaces and Queues are applied, the Fluid objects are
    refused until their CRDs are served, and the next sync converges."""
    files = compile_texts(read_policies(ROOT / "policies"))
    cluster = next(c for c in clusters(files) if any(k[0] == "data.fluid.io" for k in desired(files, c)))
    objects = kustomize_build(files, f"clusters/{cluster}")
    fluid = frozenset((g, k) for g, k in SERVED if g == "data.fluid.io")
    live = Cluster(unserved=fluid)
    failure = argo_sync(live, objects, ArgoState())
    assert failure is not None and "data.fluid.io" in failure and "dry run" not in failure
    assert any(k[:2] == ("", "Namespace") for k in live.objects)  # the rest of the wave went in
    live.unserved = frozenset()
    state = ArgoState()
    assert argo_sync(live, objects, state) is None
    assert drifted(live, objects) == []


def test_one_unhealthy_dataset_does_not_hold_back_the_workloads_on_flux() -> None:
    """A Fluid Dataset whose runtime failed a health check is not Current; the infra layer
    waits for its objects (``wait: true``) and the workloads depend on it: the Datasets' health
    must not decide it, or no workload change ever reaches the cluster again."""
    policies = read_policies(ROOT / "policies")
    before = compile_texts(policies)
    after = compile_texts({**policies, TRAINING: _set_image(policies[TRAINING], "model-training", "trainer:v2")})
    cluster = next(c for c in clusters(before) if any(k[1] == "Dataset" for k in desired(before, c))
                   and desired(before, c).keys() != desired(after, c).keys())
    live, state = Cluster(), FluxState()
    kustomizations = flux_kustomizations(before, cluster)
    assert flux_reconcile(live, before, kustomizations, state, repository_folder(before)) == {}
    live.unhealthy = {k for k in live.objects if k[1] == "Dataset"}
    assert live.unhealthy
    failures = flux_reconcile(live, after, flux_kustomizations(after, cluster), state, repository_folder(after))
    assert "fleetc-workloads" not in failures, failures
    assert desired(after, cluster).keys() <= live.objects.keys()


TRAINING = "policies/llm-training-pipeline.yaml"


# --------------------------------------------------------------------------- a second commit
def _set_image(text: str, stage: str, image: str) -> str:
    """The policy text with stage ``stage`` running ``image`` (its image line replaced, or one
    added after its type)."""
    start = text.index(f"- name: {stage}\n")
    end = text.find("\n  - name: ", start)
    end = len(text) if end < 0 else end
    block = text[start:end]
    if re.search(r"\n\s+image: .*", block):
        edited = re.sub(r"(\n\s+image: ).*", rf"\g<1>{image}", block, count=1)
    else:
        edited = re.sub(r"(\n(\s+)type: \w+\n)", rf"\1\2image: {image}\n", block, count=1)
    assert edited != block, stage
    return text[:start] + edited + text[end:]


def test_a_recompile_of_the_same_policies_changes_nothing_on_volcano_clusters() -> None:
    """A commit that renders the same output re-applies every Volcano Job as it is: both
    engines converge again (no refused update, nothing OutOfSync) and no Job restarts."""
    files = compile_texts(read_policies(ROOT / "policies"))
    assert any("kind: Job\napiVersion: batch.volcano.sh" in t or "batch.volcano.sh/v1alpha1" in t
               for t in files.values())
    fleet = Fleet()
    fleet.sync(files)
    uids = fleet.uids()
    fleet.sync(files)
    assert fleet.uids() == uids


@pytest.mark.parametrize("entry", ENTRIES)
def test_bundled_second_compile_converges_and_keeps_unchanged_runs(entry: str) -> None:
    policies = read_policies(ROOT / "policies")
    before = compile_for(policies, entry)
    path = "policies/llm-training-pipeline.yaml"
    after = compile_for({**policies, path: _set_image(policies[path], "model-training", "trainer:v2")}, entry)
    changed = {p for p in set(before) ^ set(after) if "/job-" in p}
    # the stage and the Evaluation that waits for its completion marker (it names the run)
    assert changed and all("model-training" in p or "model-evaluation" in p for p in changed)
    assert_second_pass_keeps_unchanged_runs(before, after, entry)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES)
def test_generated_fleet_second_compile_converges(generated_fleet: dict[str, str], entry: str) -> None:
    before = compile_for(generated_fleet, entry)
    path, text = next((p, t) for p, t in sorted(generated_fleet.items()) if "kind: AIGCPipeline" in t)
    stage = re.search(r"- name: (\S+)\n\s+type: (?:Training|Finetuning|DataProc|Evaluation)\n", text)
    assert stage is not None
    after = compile_for({**generated_fleet, path: _set_image(text, stage.group(1), "runner:v2")}, entry)
    assert before != after
    assert_second_pass_keeps_unchanged_runs(before, after, entry)


@pytest.mark.parametrize("entry", ENTRIES)
def test_cluster_that_loses_its_last_stage_is_emptied_by_both_engines(entry: str) -> None:
    policies = read_policies(ROOT / "policies")
    before = compile_for(policies, entry)
    fleet_path = "policies/fleet.yaml"
    cordoned = re.sub(r"(- name: edge-cluster-factory\n(\s+))", r"\1cordoned: true\n\2", policies[fleet_path])
    assert cordoned != policies[fleet_path]
    after = compile_for({**policies, fleet_path: cordoned}, entry)
    assert desired(after, "edge-cluster-factory") == {}
    fleet = Fleet(entry)
    fleet.sync(before)
    assert fleet.flux["edge-cluster-factory"][0].objects
    fleet.sync(after)
    for engine in (fleet.flux, fleet.argo):  # all but the Namespaces (the next test says why)
        assert {k[1] for k in engine["edge-cluster-factory"][0].objects} == {"Namespace"}


def test_a_move_that_takes_a_namespaces_last_pipeline_off_a_cluster_keeps_the_users_secret() -> None:
    """The user's credential Secret lives in the namespace fleetc renders; when a placement
    change takes the namespace's last pipeline off the cluster, neither engine prunes the
    Namespace (deleting it would delete the Secret with it)."""
    policies = read_policies(ROOT / "policies")
    before = compile_texts(policies)
    fleet_path = "policies/fleet.yaml"
    cordoned = re.sub(r"(- name: edge-cluster-factory\n(\s+))", r"\1cordoned: true\n\2", policies[fleet_path])
    after = compile_texts({**policies, fleet_path: cordoned})
    cluster = "edge-cluster-factory"
    namespaces = {k[3] for k in desired(before, cluster) if k[:2] == ("", "Namespace")}
    assert namespaces and not any(k[:2] == ("", "Namespace") for k in desired(after, cluster))
    fleet = Fleet()
    fleet.sync(before)
    secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cos-credentials", "namespace": ns},
                "data": {}} for ns in sorted(namespaces)]
    for engine in (fleet.flux, fleet.argo):
        for secret in secrets:
            engine[cluster][0].apply(secret)  # the user's, not the engine's
    fleet.sync(after)
    for name, engine in (("Flux", fleet.flux), ("Argo CD", fleet.argo)):
        live = engine[cluster][0].objects
        assert all(key(secret) in live for secret in secrets), f"{name} deleted the user's Secrets"


@pytest.mark.parametrize("entry", ENTRIES)
def test_cluster_removed_from_the_fleet_keeps_its_workloads_on_both_engines(entry: str) -> None:
    """The safe default: a Fleet entry deleted (by mistake, or before draining) deletes nothing.
    Flux's Kustomizations fail on the missing path and keep what they applied (Kurator's too:
    it never deletes the Kustomizations of a sync policy that left the Application); Argo CD
    keeps the Application (create-update), which cannot render the missing path and so never
    syncs, never prunes."""
    files = compile_for(read_policies(ROOT / "policies"), entry)
    fleet = Fleet(entry)
    fleet.sync(files)
    cluster = "edge-cluster-factory"
    removed = {p: t for p, t in files.items() if not p.startswith((f"clusters/{cluster}/", f"flux/{cluster}/"))}
    live, state = fleet.flux[cluster]
    before = live.uids()
    kept = fleet.kustomizations[cluster]
    failures = flux_reconcile(live, removed, kept, state, repository_folder(files))
    assert len(kept) == 3 and set(failures) == {k["metadata"]["name"] for k in kept}
    assert live.uids() == before
    with pytest.raises(FileNotFoundError):
        kustomize_build(removed, f"clusters/{cluster}")  # Argo CD: ComparisonError, no sync
    appset = read(files["argocd/applicationset-argocd-fleetc.yaml"])
    assert appset["spec"]["syncPolicy"] == {"applicationsSync": "create-update",
                                            "preserveResourcesOnDeletion": True}
    for kustomization in flux_kustomizations(files, cluster):
        assert kustomization["spec"]["deletionPolicy"] == "Orphan"  # Kurator's has none: README


def test_argo_retries_failed_syncs_with_bounded_backoff() -> None:
    files = compile_texts(read_policies(ROOT / "policies"))
    policy = read(files["argocd/applicationset-argocd-fleetc.yaml"])["spec"]["template"]["spec"]["syncPolicy"]
    assert policy["automated"] == {"prune": True, "selfHeal": True}
    assert policy["retry"] == {"limit": 5, "backoff": {"duration": "10s", "factor": 2, "maxDuration": "5m"}}
