"""Node fit: how a stage's GPUs become pods that fit the cluster's nodes.

A Fleet cluster says how many GPUs one of its nodes carries (attribute ``gpus-per-node``;
default 8, or the largest divisor of ``gpu-count`` up to 8 when 8 does not divide it). The
optimizer counts GPUs per cluster, so two rules make every placement it accepts pack onto
nodes:

* **split**: a replica asking for more GPUs than a node holds becomes ``k`` pods of ``g / k``
  GPUs each, ``k`` the smallest number of equal pods that each fit a node (16 GPUs on 8-GPU
  nodes: 2 pods of 8). A serving replica is one server process and cannot be split: asking
  for more than a node holds is a validate-time error (:func:`fleetc.policy.validate`).
* **round**: for capacity, each pod's GPUs are rounded up to the next step of the node's
  divisor chain (:func:`divisor_chain`: 1, 2, 4, 8 for 8-GPU nodes). Pod sizes that all divide
  one another and the node size pack without waste: sorted largest first, each pod fills the
  free space of a node exactly, so ``sum(rounded) <= nodes x gpus-per-node`` is the only
  condition, and that is what the optimizer's GPU capacity rule checks. A 3-GPU pod therefore
  reserves 4 GPUs of an 8-GPU node: the fourth could hold no other 3-GPU pod anyway.

Cores and memory count per node too (:class:`Shape`, :func:`node_of`): a Fleet cluster may
state what one node offers (attributes ``cpu-per-node``, ``memory-per-node``); otherwise each
of its ``gpu-count / gpus-per-node`` nodes has an equal share of the cluster's cores and memory
(a cluster without GPUs is one node, unless it states its node's cores or memory). Two more
rules follow:

* **fit**: a pod asking for more GPUs, cores or memory than one node offers runs on no node of
  the cluster: the stage may not run there (:func:`fleetc.placement.rules.fits_no_node`).
* **crowd**: where fewer of a pod fit a node by cores or memory than by GPUs, its GPUs are
  rounded further up the divisor chain (:func:`reserved`): to the first step ``s`` at which
  ``node / s`` such pods fit the node by every resource. Each pod then takes no more of a
  node's cores and memory than its share ``s / node`` of the node's GPUs, so pods whose
  reservations fill a node's GPUs also fit its cores and memory: the GPU count still decides
  whether they pack. (Pods without GPUs are held to the fit rule and the cluster's totals
  only; where they share GPU nodes with GPU pods, their cores and memory are not rounded.)

Where a stage may run on clusters with different node sizes (no ``gpuType``, or one type with
mixed nodes), the split follows the smallest node and the reservation the largest rounding over
the clusters its pods fit, so the one demand the optimizer sees is safe on every cluster it may
choose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetc.model import Cluster

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Shape:
    """What one pod asks for, or one node offers: GPUs (time-sliced slots on a time-sliced
    node), millicores and bytes."""

    gpus: int
    millis: int
    memory: int

    def fits(self, node: Shape) -> bool:
        """Whether a pod of this shape fits an empty ``node``."""
        return self.gpus <= node.gpus and self.millis <= node.millis and self.memory <= node.memory


def nodes_of(cluster: Cluster) -> int:
    """How many nodes the cluster's totals are shared over: ``gpus / gpus-per-node`` (1 without
    GPUs)."""
    return max(1, cluster.gpus // cluster.gpus_per_node) if cluster.gpus > 0 and cluster.gpus_per_node > 0 else 1


def node_of(cluster: Cluster) -> Shape:
    """One node of ``cluster``: its GPUs per node, and the cores and memory it states per node
    or else its equal share of the cluster's (:func:`nodes_of`)."""
    count = nodes_of(cluster)
    millis = cluster.cpu_per_node if cluster.cpu_per_node is not None else cluster.cpu_millis // count
    memory = cluster.memory_per_node if cluster.memory_per_node is not None else cluster.memory_bytes // count
    return Shape(cluster.gpus_per_node if cluster.gpus > 0 else 0, millis, memory)


def reserved(pod: Shape, node: Shape) -> int:
    """The GPUs (slots) a pod that fits ``node`` reserves there for capacity: the first step of
    the node's divisor chain at least its GPUs at which ``node.gpus / step`` such pods fit the
    node's cores and memory too (0 for a pod without GPUs)."""
    if pod.gpus <= 0:
        return 0
    least = rounded(pod.gpus, node.gpus)
    return next(step for step in divisor_chain(node.gpus)
                if step >= least and (node.gpus // step) * pod.millis <= node.millis
                and (node.gpus // step) * pod.memory <= node.memory)


def default_gpus_per_node(gpu_count: int) -> int:
    """8 when it divides ``gpu_count``, else the largest divisor of ``gpu_count`` below 8."""
    if gpu_count <= 0:
        return DEFAULT_GPUS_PER_NODE
    return max(d for d in range(1, DEFAULT_GPUS_PER_NODE + 1) if gpu_count % d == 0)


def divisor_chain(node: int) -> tuple[int, ...]:
    """Divisors of ``node`` each dividing the next: 1, then times each prime factor, smallest
    first (8 -> 1, 2, 4, 8; 12 -> 1, 2, 4, 12; 6 -> 1, 2, 6)."""
    chain, left, factor = [1], node, 2
    while left > 1:
        while left % factor:
            factor += 1
        left //= factor
        chain.append(chain[-1] * factor if left > 1 else node)
    return tuple(dict.fromkeys(chain))


def rounded(pod_gpus: int, node: int) -> int:
    """The GPUs a pod of ``pod_gpus`` reserves on nodes of ``node`` GPUs (``pod_gpus <= node``)."""
    if pod_gpus <= 0:
        return 0
    return next(step for step in divisor_chain(node) if step >= pod_gpus)


def pods_per_replica(gpus: int, node: int) -> int:
    """The fewest equal pods a replica of ``gpus`` splits into so that each fits a node."""
    if gpus <= node:
        return 1
    return next(k for k in range(-(-gpus // node), gpus + 1) if gpus % k == 0)


def reserved_per_replica(replica: Shape, nodes: list[Shape], smallest: int) -> tuple[int, int]:
    """(pods per replica, GPUs reserved per replica) of a replica asking for ``replica`` that may
    run on clusters whose nodes are ``nodes`` (as its pods see them: time-sliced slots where it
    shares GPUs): split so that each pod fits a node of ``smallest`` GPUs (0: never split, a
    serving replica is one pod), each pod reserving the most :func:`reserved` gives over the
    nodes it fits. No candidate cluster, or none its pods fit: nothing rounded."""
    sizes = [node for node in nodes if node.gpus > 0]
    if replica.gpus <= 0 or not sizes:
        return 1, replica.gpus
    pods = pods_per_replica(replica.gpus, smallest) if smallest else 1
    pod = Shape(replica.gpus // pods, -(-replica.millis // pods), -(-replica.memory // pods))
    return pods, pods * max((reserved(pod, node) for node in sizes if pod.fits(node)), default=pod.gpus)
