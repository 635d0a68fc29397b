"""Kubernetes' ValidatingAdmissionPolicy, evaluated for the suite with a real CEL interpreter.

The API server's validating policy plugin (kubernetes ``staging/src/k8s.io/apiserver/pkg/
admission/plugin/policy/validating``: ``dispatcher.go``, ``validator.go``; and ``.../policy/
matching`` for ``matchConstraints``) does, for each policy with a binding:

* the request must match ``matchConstraints.resourceRules`` (group, version, operation,
  resource; no subresource unless named);
* every ``matchConditions`` expression must be true, else the policy does not apply (false);
  an error in one is the policy's ``failurePolicy`` (``Fail``: denied);
* then every ``validations`` expression must be true; a false one denies the request with its
  ``message`` under the binding's ``validationActions`` ``Deny``; an error is the
  ``failurePolicy`` again.

The expressions see ``object``, ``oldObject`` and ``request`` (``userInfo.username``,
``namespace``, ``operation``). They are evaluated by cel-python (``celpy``, PyPI cel-python
0.5.0), which implements the CEL language the API server's cel-go does: ``has()``, macros such
as ``filter``, ``==`` on maps and lists, string functions. Kubernetes' own CEL libraries
(``quantity``, ``authorizer``, optional fields) are not in it; fleetc's policy uses none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import celpy

API = "admissionregistration.k8s.io/v1"


@functools.cache
def _program(expression: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The value of a CEL ``expression`` with ``variables`` (plain JSON values); raises on an
    evaluation error (a missing field read without ``has()``, a type error)."""
    try:
        result = _program(expression).evaluate({name: celpy.json_to_cel(value) for name, value in variables.items()})
    except celpy.CELEvalError as err:
        raise ValueError(f"{expression}: {err.args[0]}") from err
    if isinstance(result, celpy.CELEvalError):
        raise ValueError(f"{expression}: {result.args[0]}")
    return result


def _matches(policy: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    """``matchConstraints.resourceRules``: the request's group, version, operation and resource."""
    for rule in policy["spec"].get("matchConstraints", {}).get("resourceRules", []):
        if (request["group"] in rule.get("apiGroups", []) and request["version"] in rule.get("apiVersions", [])
                and request["operation"] in rule.get("operations", [])
                and request["resource"] in rule.get("resources", [])):
            return True
    return False


def decide(policy: Mapping[str, Any], request: Mapping[str, Any], obj: Any, old: Any) -> str | None:
    """What one policy says of a request: None when it admits it (or does not apply), else why
    it denies it."""
    if not _matches(policy, request):
        return None
    spec = policy["spec"]
    variables = {"object": obj, "oldObject": old, "request": request}
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    for condition in spec.get("matchConditions", []):
        try:
            if not evaluate(condition["expression"], variables):
                return None
        except ValueError as err:
            return f"matchCondition {condition['name']}: {err}" if fail else None
    for validation in spec.get("validations", []):
        try:
            allowed = evaluate(validation["expression"], variables)
        except ValueError as err:
            if fail:
                return f"expression error: {err}"
            continue
        if not allowed:
            return str(validation.get("message", f"failed expression: {validation['expression']}"))
    return None


def admitter(objects: list[Mapping[str, Any]]) -> Callable[[str, str, Any, Any], str | None]:
    """``admit(user, namespace, old, new)`` for a pod UPDATE on a cluster holding ``objects``:
    the policies bound with ``validationActions: [Deny]`` each decide (:func:`decide`); the
    first denial's message, or None when all admit."""
    bound = {o["spec"]["policyName"] for o in objects
             if o.get("apiVersion") == API and o["kind"] == "ValidatingAdmissionPolicyBinding"
             and "Deny" in o["spec"].get("validationActions", [])}
    policies = [o for o in objects if o.get("apiVersion") == API and o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"] in bound]

    def admit(user: str, namespace: str, old: Any, new: Any) -> str | None:
        request = {"group": "", "version": "v1", "resource": "pods", "operation": "UPDATE",
                   "namespace": namespace, "userInfo": {"username": user}}
        for policy in policies:
            denied = decide(policy, request, new, old)
            if denied is not None:
                return f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' denied request: {denied}"
        return None
    return admit
