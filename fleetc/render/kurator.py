"""The Kurator entry point: ``kurator/``, one Kurator ``Application`` (``apps.kurator.dev/v1alpha1``)
that delivers every cluster folder through Kurator's fleet manager, beside Argo CD and Flux
(:mod:`.gitops`). Rendered when the Fleet's ``spec.gitops.entryPoints`` names ``kurator``.

What Kurator makes of it (kurator-dev/kurator v0.6.0, ``pkg/fleet-manager/application/``
``controller.go`` and ``helper.go``): from ``spec.source.gitRepository`` a Flux GitRepository
named after the Application, in its namespace; for every sync policy and every cluster of the
Fleet its destination selects, a Flux Kustomization (``kustomize.toolkit.fluxcd.io/v1beta2``),
in the Application's namespace on the host cluster, named ``<policy>-<cluster kind>-<cluster>``
(lower case, cut to 63 characters: ``generatePolicyResourceName``), that applies the policy's
``path`` to that member through its kubeconfig Secret. The Kustomization takes the sync
policy's ``dependsOn``, ``interval``, ``retryInterval``, ``path``, ``prune`` and ``timeout`` as
they are (``syncKustomizationForCluster``).

So fleetc writes three sync policies per cluster, each selecting exactly that cluster, in the
layers and order of the Flux entry point: ``infra-<cluster>``, ``local-<cluster>`` (the
user's folder, after infra) and ``workloads-<cluster>`` (after both), the later ones naming the
Kustomizations Kurator makes for the earlier ones in ``dependsOn``; Flux then applies a
Kustomization only once those it depends on are Ready.

* Selecting a cluster: a destination's ``clusterSelector.matchLabels`` matches the labels of the
  ``AttachedCluster`` or ``Cluster`` object the Fleet lists, every key with an equal value
  (``doLabelsMatchSelector``); Kurator itself labels them only with
  ``fleet.kurator.dev/fleet-name`` (``pkg/fleet-manager/clusters.go``), which every member
  shares. Each policy selects :data:`CLUSTER_LABEL` ``: <cluster>``, which the user puts on each
  cluster object (README, Kurator).
* The Application lives in the Fleet's namespace (Kurator looks its Fleet up there,
  ``generateFleetKey``); its GitRepository reads ``spec.gitops`` (``secretName``: a Secret in
  that namespace).
* What Kurator cannot say: its Kustomization has no ``wait``, ``healthChecks`` or
  ``deletionPolicy``. The infra layer is Ready once applied, not once its objects are Ready
  (Flux's ``wait: true``): workloads still come only after every infra object was applied,
  which is what Volcano's and Kueue's admission need. Kurator never deletes the Kustomization
  of a sync policy that left the Application, so a cluster removed from the Fleet keeps its
  objects as under Flux; but the Kustomizations are owned by the Application, so deleting the
  Application deletes them and Flux prunes what they applied, on every cluster.
"""

from __future__ import annotations

from fleetc.delivery import INFRA, LOCAL, WORKLOADS, kustomization_names, policy_name
from fleetc.model import Delivery, GitOps, Source
from fleetc.render.common import Obj, folder_files, metadata
from fleetc.render.gitops import (
    APPLY_INTERVAL,
    NAME,
    RETRY_INTERVAL,
    in_repository,
    repository_spec,
)

#: The label each cluster object (AttachedCluster or Cluster) must carry, with the cluster's
#: name, for the Application's sync policies to select it.
CLUSTER_LABEL = "fleetc.dev/cluster"


def _sync_policy(gitops: GitOps, fleet: str, cluster: str, layer: str, path: str,
                 depends_on: tuple[str, ...]) -> Obj:
    kustomization: Obj = {}
    if depends_on:
        kustomization["dependsOn"] = [{"name": name} for name in depends_on]
    kustomization |= {"interval": APPLY_INTERVAL, "retryInterval": RETRY_INTERVAL,
                      "path": f"./{in_repository(gitops, path)}", "prune": True}
    return {
        "name": policy_name(layer, cluster),
        "destination": {"fleet": fleet, "clusterSelector": {"matchLabels": {CLUSTER_LABEL: cluster}}},
        "kustomization": kustomization,
    }


def sync_policies(gitops: GitOps, fleet: str, cluster: str, kind: str) -> list[Obj]:
    """One cluster's three sync policies: infra, then the user's folder, then workloads."""
    names = kustomization_names(cluster, kind)
    return [
        _sync_policy(gitops, fleet, cluster, INFRA, f"clusters/{cluster}/{INFRA}", ()),
        _sync_policy(gitops, fleet, cluster, LOCAL, f"{LOCAL}/{cluster}", (names[INFRA],)),
        _sync_policy(gitops, fleet, cluster, WORKLOADS, f"clusters/{cluster}/{WORKLOADS}",
                     (names[INFRA], names[LOCAL])),
    ]


def application(gitops: GitOps, source: Source, fleet: str, namespace: str, clusters: list[str],
                delivery: Delivery) -> Obj:
    """The Kurator Application over ``clusters``, every cluster of the Fleet (``fleet`` in
    ``namespace``)."""
    return {
        "apiVersion": "apps.kurator.dev/v1alpha1",
        "kind": "Application",
        "metadata": metadata(NAME, namespace, source),
        "spec": {
            "source": {"gitRepository": repository_spec(gitops)},
            "destination": {"fleet": fleet},
            "syncPolicies": [policy for cluster in clusters
                             for policy in sync_policies(gitops, fleet, cluster, delivery.kurator_kind(cluster))],
        },
    }


def kurator_files(gitops: GitOps, source: Source, fleet: str, namespace: str, clusters: list[str],
                  delivery: Delivery) -> dict[str, str]:
    """``kurator/``: the Application and a kustomization listing it."""
    return folder_files("kurator", [application(gitops, source, fleet, namespace, clusters, delivery)])
