"""Issue 25 item 4 for serving: a serving Deployment that waits for upstream stages takes no GPU
while it waits. Its pods are created gated (``fleetc.dev/upstream-completed``) by its
ReplicaSet, with random names, at every scale-up and rollout; a CPU-only releaser Deployment
waits, then lets the Pending pods of the run go, for as long as it runs
(:mod:`fleetc.render.release`; the model: tests/support/runtime.py, tests/support/admission.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from support.admission import admitter
from support.corpus import CASES, ROOT, compiled_in, read_tree
from support.runtime import (
    gates,
    gpu_seconds_waiting,
    objects,
    order_problems,
    pods,
    release_round,
    releaser_of,
    releasers,
    replica_set,
    replica_set_pods,
    ungate_problems,
)

from fleetc.compiler import Compiled
from fleetc.render.release import GATE, RUN_LABEL
from fleetc.render.yamlout import dump

#: The Kueue golden case with both clusters on Volcano, as render version 14 rendered it: the
#: serving Deployment's pods waited in init containers, scheduled with their GPU each.
OLD_SERVING = ROOT / "tests" / "fixtures" / "render-14-serving"
RUNTIME = {"llm/tokenize": 2 * 3600, "llm/train": 6 * 3600}


def volcano_case(tmp_path: Path, edit: Any = None) -> Compiled:
    shutil.copytree(CASES / "kueue-two-cluster-pipeline" / "policies", tmp_path / "policies")
    fleet = tmp_path / "policies" / "fleet.yaml"
    fleet.write_text(fleet.read_text().replace("    batchScheduler: kueue\n", ""))
    if edit is not None:
        edit(tmp_path / "policies")
    return compiled_in(tmp_path)


def _serving(files: Any) -> tuple[str, dict[str, Any]]:
    ((cluster, deployment),) = [(c, o) for c, o in objects(files) if o["kind"] == "Deployment"
                                and releaser_of(c, o) is None]
    return cluster, deployment


def test_the_model_sees_gpus_held_while_serving_waits_in_the_old_output() -> None:
    old = read_tree(OLD_SERVING)
    assert gpu_seconds_waiting(old, RUNTIME) == {"llm/serve": 2 * 1 * 6 * 3600}
    assert releasers(old) == []


def test_a_serving_dependant_takes_no_gpu_while_it_waits(tmp_path: Path) -> None:
    result = volcano_case(tmp_path)
    assert gpu_seconds_waiting(result.files, RUNTIME) == {}
    serve = [p for p in pods(result.files) if p.stage == "llm/serve"]
    assert len(serve) == 2 and len({p.name for p in serve}) == 2
    assert all(gates(p.spec) == [GATE] and "initContainers" not in p.spec for p in serve)
    (releaser,) = releasers(result.files)
    assert (releaser.cluster, releaser.namespace, releaser.target_namespace) == ("serve-l4", "ml", "ml")
    assert list(releaser.waited) == ["fleetc-wait-train"]
    assert all(c["resources"]["requests"].keys() == {"cpu", "memory"}
               for c in [*releaser.spec["initContainers"], *releaser.spec["containers"]])
    _, deployment = _serving(result.files)
    assert dict(releaser.selector) == {**deployment["spec"]["selector"]["matchLabels"],
                                       RUN_LABEL: deployment["spec"]["template"]["metadata"]["labels"][RUN_LABEL]}
    # the releaser's own pods are no serving pods: no Service, PDB or Deployment selects them
    for _, obj in objects(result.files):
        selected = obj["spec"].get("selector") if obj["kind"] == "Service" else None
        if obj["kind"] in ("PodDisruptionBudget", "Deployment") and releaser_of("", obj) is None:
            selected = obj["spec"]["selector"]["matchLabels"]
        assert not (selected and selected.items() <= releaser.labels.items()), obj["metadata"]["name"]
    assert ungate_problems(result.files) == []
    assert order_problems(result.model, result.files, set()) == []
    assert not [w for w in result.warnings if "holds its GPUs" in w.message]


def test_the_releaser_lets_go_the_pods_a_scale_up_creates_and_only_its_runs(tmp_path: Path) -> None:
    """The ReplicaSet creates two gated pods, the releaser (after its waits) lets both go; the
    HPA scales up to four and the two new pods, named at random, are let go at the next round;
    a pod of another run (labelled with another run id) is left gated."""
    result = volcano_case(tmp_path)
    cluster, deployment = _serving(result.files)
    (releaser,) = releasers(result.files)
    admit = admitter([o for c, o in objects(result.files) if c == cluster])
    live = replica_set_pods(deployment, 2)
    said = release_round(releaser, live, admit)
    assert said == [f"removed scheduling gate {GATE} from pod {p['metadata']['name']}" for p in live]
    assert all(gates(p["spec"]) == [] for p in live)
    live += replica_set_pods(deployment, 4, start=2)
    other = replica_set_pods(deployment, 1)[0]
    other["metadata"]["labels"][RUN_LABEL] = "0123456789abcdef"
    other["metadata"]["name"] += "-old"
    live.append(other)
    said = release_round(releaser, live, admit)
    assert said == [f"removed scheduling gate {GATE} from pod {p['metadata']['name']}" for p in live[2:4]]
    assert [gates(p["spec"]) for p in live] == [[], [], [], [], [GATE]]
    assert len({p["metadata"]["name"] for p in live[:4]}) == 4
    assert all(p["metadata"]["generateName"] == replica_set(deployment)["metadata"]["name"] + "-" for p in live)


def test_a_retrain_rolls_the_serving_pods_out_under_a_new_releaser(tmp_path: Path) -> None:
    """A new training image is a new run of training and of serving: the serving pod template
    changes (its run label: a rollout, new pods, gated) and a new releaser, waiting for the new
    training's marker, replaces the old one (GitOps prunes it)."""
    before = volcano_case(tmp_path / "a")
    after = volcano_case(tmp_path / "b", lambda folder: (folder / "pipeline.yaml").write_text(
        (folder / "pipeline.yaml").read_text().replace("llm/train:3.0", "llm/train:3.1")))
    (old,), (new,) = releasers(before.files), releasers(after.files)
    assert old.deployment != new.deployment and old.selector[RUN_LABEL] != new.selector[RUN_LABEL]
    assert old.waited["fleetc-wait-train"] != new.waited["fleetc-wait-train"]
    (_, old_deployment), (_, new_deployment) = _serving(before.files), _serving(after.files)
    assert old_deployment["metadata"]["name"] == new_deployment["metadata"]["name"]
    assert old_deployment["spec"]["selector"] == new_deployment["spec"]["selector"]  # immutable: kept
    assert replica_set(old_deployment)["metadata"]["name"] != replica_set(new_deployment)["metadata"]["name"]


def test_the_model_sees_a_held_deployment_nothing_releases(tmp_path: Path) -> None:
    """What the releaser needs, each taken away: the releaser itself (the pods never start), its
    waits, its Role's list and patch of any pod, the admission policy (its Role would let it
    change any pod: an image), its labels kept out of the Service's selector."""
    result = volcano_case(tmp_path)
    files = dict(result.files)
    (path,) = [p for p in files if "/deployment-ml-llm-serve-release-" in p]
    (releaser,) = releasers(files)
    where = f"serve-l4: Deployment/{releaser.deployment}"
    without = {p: t for p, t in files.items() if p != path}
    assert [p for p in ungate_problems(without) if "no release removes" in p] == [
        f"serve-l4: Deployment/llm-serve pod {pod.name}: gated by {GATE}, which no release removes: it never starts"
        for pod in sorted((p for p in pods(files) if p.stage == "llm/serve"), key=lambda p: p.name)]
    waitless = YAML(typ="safe").load(files[path])
    waitless["spec"]["template"]["spec"].pop("initContainers")
    assert ungate_problems({**files, path: dump(waitless)}) == [
        f"{where}: releases its pods without waiting for anything"]
    (role,) = [p for p in files if p.startswith("clusters/serve-l4/") and p.endswith("/role-ml-fleetc-release.yaml")]
    narrow = YAML(typ="safe").load(files[role])
    narrow["rules"][0]["verbs"] = ["patch"]
    assert ungate_problems({**files, role: dump(narrow)}) == [
        f"{where}: its service account may not list any pod of ml"]
    unguarded = {p: t for p, t in files.items() if "validatingadmissionpolicy" not in p}
    assert ungate_problems(unguarded) == [
        f"{where}: its account may change any pod of ml (an image: no admission policy keeps it to removing the gate)"]
    (service,) = [p for p in files if p.startswith("clusters/serve-l4/") and "/service-" in p]
    routed = YAML(typ="safe").load(files[service])
    routed["spec"]["selector"] = {"fleetc.dev/role": "release"}
    assert f"{where}: Service/llm-serve selects its pods" in ungate_problems({**files, service: dump(routed)})


def test_no_deployment_names_a_kueue_queue(tmp_path: Path) -> None:
    """Kueue manages a Deployment or a pod only when it names a LocalQueue
    (``kueue.x-k8s.io/queue-name``; ``manageJobsWithoutQueueName`` is off by default): the held
    Deployment and its releaser name none, on the bundled example with every cluster on Kueue,
    so Kueue neither gates nor admits them and the scheduling gate is fleetc's alone."""
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    fleet = tmp_path / "policies" / "fleet.yaml"
    text = re.sub(r"(\n  - name: [a-z-]+\n)(\s+)", r"\1\2batchScheduler: kueue\n\2", fleet.read_text())
    fleet.write_text(text)
    result = compiled_in(tmp_path)
    deployments = [o for _, o in objects(result.files) if o["kind"] == "Deployment"]
    assert len(releasers(result.files)) == 4 and len(deployments) == 8
    for obj in deployments:
        for labels in (obj["metadata"]["labels"], obj["spec"]["template"]["metadata"]["labels"]):
            assert "kueue.x-k8s.io/queue-name" not in labels
    assert gpu_seconds_waiting(result.files, {s.key: 3600 for s in result.model.stages}) == {}
    assert ungate_problems(result.files) == []
