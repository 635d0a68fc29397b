"""How the GitOps engines layer a cluster's folder and name what they make of it: facts the
validator checks policies against (two clusters whose Kurator Kustomizations would share a name)
and the renderer writes by, so they sit below both (docs/architecture.md, the import rule).
"""

from __future__ import annotations

#: The two layers of a cluster folder, and the user's folder.
INFRA = "infra"
WORKLOADS = "workloads"
LOCAL = "local"

#: Kurator cuts the names of the Kustomizations it makes to this length.
NAME_LIMIT = 63


def policy_name(layer: str, cluster: str) -> str:
    """The Kurator sync policy fleetc writes for ``layer`` of ``cluster``'s folder."""
    return f"{layer}-{cluster}"


def kustomization_name(policy: str, kind: str, cluster: str) -> str:
    """The Flux Kustomization Kurator makes for sync policy ``policy`` on ``cluster`` (ported
    from kurator-dev/kurator v0.6.0 ``pkg/fleet-manager/application/helper.go``
    ``generatePolicyResourceName``)."""
    return f"{policy}-{kind}-{cluster}".lower()[:NAME_LIMIT]


def kustomization_names(cluster: str, kind: str) -> dict[str, str]:
    """Layer -> the Kustomization Kurator makes for that layer's sync policy on ``cluster``."""
    return {layer: kustomization_name(policy_name(layer, cluster), kind, cluster)
            for layer in (INFRA, LOCAL, WORKLOADS)}
