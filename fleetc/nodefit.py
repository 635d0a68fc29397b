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

Where a stage may run on clusters with different node sizes (no ``gpuType``, or one type with
mixed nodes), the split follows the smallest node and the reservation the largest rounding, so
the one demand the optimizer sees is safe on every cluster it may choose.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_GPUS_PER_NODE = 8


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


def reserved_per_replica(gpus: int, nodes: Iterable[int]) -> tuple[int, int]:
    """(pods per replica, GPUs reserved per replica) of a replica of ``gpus`` that may run on
    clusters whose nodes hold ``nodes`` GPUs (the split by the smallest, the rounding the
    largest over them). No candidate cluster: one pod, nothing rounded."""
    sizes = sorted(set(nodes))
    if gpus <= 0 or not sizes:
        return 1, gpus
    pods = pods_per_replica(gpus, sizes[0])
    per_pod = gpus // pods
    return pods, pods * max(rounded(per_pod, node) for node in sizes)
