"""The ValidatingAdmissionPolicy fleetc renders for the releasers of held Deployments
(:func:`fleetc.render.release.ungate_only_policy`), evaluated with a real CEL interpreter as
the API server's validating policy plugin does (tests/support/admission.py): the releaser's
account may remove fleetc's scheduling gate from a pod and change nothing else of it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.admission import admitter, evaluate
from support.k8s import validate_object

from fleetc.render.release import GATE, ungate_only_policy

RELEASER = "system:serviceaccount:ml:fleetc-release"


def pod(gates: list[str] | None = None) -> dict[str, Any]:
    """A gated serving pod as its ReplicaSet creates it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "llm-serve-7d9c5b6f4-x2x7q", "namespace": "ml",
                         "labels": {"fleetc.dev/pipeline": "llm", "fleetc.dev/stage": "serve"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "llm-serve-7d9c5b6f4", "uid": "1", "controller": True}]},
            "spec": {"schedulingGates": [{"name": g} for g in (gates if gates is not None else [GATE])],
                     "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                     "containers": [{"name": "deployment", "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                                     "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def changed(before: dict[str, Any], change: Any) -> dict[str, Any]:
    after = copy.deepcopy(before)
    change(after)
    return after


@pytest.fixture(scope="module")
def admit() -> Any:
    return admitter(ungate_only_policy())


def test_the_policy_and_its_binding_are_valid_v1_objects() -> None:
    for obj in ungate_only_policy():
        assert validate_object(obj) == [], obj["kind"]
    policy, _ = ungate_only_policy()
    broken = changed(policy, lambda p: p["spec"].update(failurePolicy="Fail", validationActionz=["Deny"]))
    assert validate_object(broken)  # validated against the 1.33 schema, not skipped


def test_the_releaser_may_remove_fleetcs_gate(admit: Any) -> None:
    before = pod()
    assert admit(RELEASER, "ml", before, changed(before, lambda p: p["spec"].pop("schedulingGates"))) is None
    assert admit(RELEASER, "ml", before, changed(before, lambda p: p["spec"].update(schedulingGates=[]))) is None
    other = pod([GATE, "example.com/other"])
    freed = changed(other, lambda p: p["spec"].update(schedulingGates=[{"name": "example.com/other"}]))
    assert admit(RELEASER, "ml", other, freed) is None


@pytest.mark.parametrize(("what", "change"), [
    ("image", lambda p: p["spec"]["containers"][0].update(image="attacker.example/miner:latest")),
    ("label", lambda p: p["metadata"]["labels"].update({"fleetc.dev/stage": "other"})),
    ("new label", lambda p: p["metadata"]["labels"].update({"extra": "x"})),
    ("annotation", lambda p: p["metadata"].update(annotations={"a": "b"})),
    ("gate added", lambda p: p["spec"]["schedulingGates"].append({"name": "example.com/other"})),
    ("toleration added", lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}])),
    ("node selector", lambda p: p["spec"]["nodeSelector"].update({"kubernetes.io/hostname": "n1"})),
    ("affinity", lambda p: p["spec"].update(affinity={"nodeAffinity": {}})),
    ("deadline", lambda p: p["spec"].update(activeDeadlineSeconds=1)),
    ("owner", lambda p: p["metadata"].pop("ownerReferences")),
    ("finalizer", lambda p: p["metadata"].update(finalizers=["example.com/keep"])),
])
def test_any_other_change_by_the_releaser_is_denied(admit: Any, what: str, change: Any) -> None:
    before = pod()
    denied = admit(RELEASER, "ml", before, changed(before, change))
    assert denied is not None and "fleetc-release-ungate-only" in denied, what
    if what != "gate added":  # with the gate removed in the same patch, too
        assert admit(RELEASER, "ml", before, changed(before, lambda p: (change(p), p["spec"].pop("schedulingGates"))))


def test_another_gate_removed_is_denied(admit: Any) -> None:
    before = pod([GATE, "example.com/other"])
    after = changed(before, lambda p: p["spec"].update(schedulingGates=[{"name": GATE}]))
    assert "may only remove the scheduling gate" in admit(RELEASER, "ml", before, after)


def test_another_user_is_not_matched(admit: Any) -> None:
    before = pod()
    after = changed(before, lambda p: p["spec"]["containers"][0].update(image="example.com/new:1"))
    for user in ("system:serviceaccount:ml:default", "system:serviceaccount:other:fleetc-release",
                 "kubernetes-admin", "system:serviceaccount:ml:fleetc-release-x"):
        assert admit(user, "ml", before, after) is None, user


def test_cel_python_evaluates_what_the_policy_needs() -> None:
    """The CEL features the policy uses, as cel-go evaluates them."""
    assert evaluate("[{'name': 'a'}, {'name': 'b'}].filter(g, g.name != 'a') == [{'name': 'b'}]", {})
    assert evaluate("has(x.y) == false", {"x": {}})
    assert evaluate("{'a': 1} == {'a': 1} && {'a': 1} != {'a': 2}", {})
    with pytest.raises(ValueError):
        evaluate("x.y == 1", {"x": {}})  # a missing field read without has() is an error
