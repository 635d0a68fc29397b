"""Node fit: how a stage's GPUs become pods, and whether pods pack onto a cluster's nodes.

A Fleet cluster says how many GPUs one of its nodes carries (attribute ``gpus-per-node``;
default 8, or the largest divisor of ``gpu-count`` up to 8 when 8 does not divide it), and may
state what one node offers of cores and memory (attributes ``cpu-per-node``,
``memory-per-node``); otherwise each of its ``gpu-count / gpus-per-node`` nodes has an equal
share of the cluster's cores and memory (a cluster without GPUs is one node, unless it states
its node's cores or memory). Everything here reads one cluster's nodes at a time: what a
stage takes on a cluster never depends on another cluster's nodes.

* **split** (:func:`pods_per_replica`): a gang replica asking for more GPUs than a node of the
  cluster holds becomes ``k`` pods of ``g / k`` GPUs each, ``k`` the smallest number of equal
  pods that each fit a node of *that* cluster (16 GPUs: 2 pods of 8 on 8-GPU nodes, 4 pods of
  4 on 6-GPU nodes). A serving replica is one server process and is never split: it runs only
  on clusters with a node large enough (validation refuses one no node of the fleet holds).
* **fit**: a pod asking for more GPUs, cores or memory than one node offers runs on no node of
  the cluster: the stage may not run there (:func:`fleetc.placement.rules.fits_no_node`).
* **pack** (:func:`pack`): what is placed on a cluster must pack onto its nodes: an
  assignment of every pod to a node such that no node gives out more GPUs, cores or memory
  than it has. Nothing is rounded: a 6-GPU pod takes 6 GPUs, and a 2-GPU pod may take the
  other 2 of its node. The optimizer counts each cluster's GPUs, cores and memory in total (a
  relaxation of packing, ``docs/optimizer.md``); the placement it returns is packed cluster by
  cluster (:func:`fleetc.placement.rules.unpacked`) and repaired where it does not pack, and
  the verifier checks the packing again. Pods without GPUs pack too: onto the cores and
  memory the GPU pods leave on each of the cluster's nodes (:func:`nodes_of`; a CPU-only
  cluster that states its node's cores or memory has several).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetc.model import Cluster

DEFAULT_GPUS_PER_NODE = 8

#: The most steps (pods placed) :func:`pack`'s search takes before the packing MILP
#: (:func:`_exact`) decides instead. Pods of one shape are placed in node order and nodes left
#: alike are tried once, so a cluster's few dozen pods are mostly decided in far fewer steps.
#: Where they are not, the search is no proof: at 2,000 steps it answered "no packing" for the
#: GPU and CPU pods of ``bench.generate --clusters 100 --stages 2000 --load 0.9 --diverse``
#: (seed 1) on clusters they pack onto, and at 50,000 it took 0.34-0.46 s to give up on two
#: clusters they do not (the search to 2,000 steps and then the MILP: 45-213 ms and 41-43 ms;
#: bench/RESULTS.md).
SEARCH_LIMIT = 2_000


#: Branch-and-bound nodes the packing MILP (:func:`_exact`) may explore: a count, not seconds,
#: so that every machine answers alike. One that ends without a packing answers "no packing" (the
#: optimizer then leaves a stage out and says it did not prove that none fits: an unpacked node
#: is never rendered). The packings measured were found at the root, or proven impossible there.
PACKING_NODES = 1_000


#: The most pods :func:`_search` takes on: it recurses once per pod placed, and Python stops a
#: recursion about a thousand deep (a cluster's 1,200 pods raised ``RecursionError`` there);
#: more pods go to the MILP (:func:`_exact`) at once.
SEARCH_PODS = 500


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
    """How many nodes the cluster's totals are shared over: ``gpus / gpus-per-node``; without
    GPUs, as many nodes as its stated cores or memory per node make of its totals (the fewer),
    else 1."""
    if cluster.gpus > 0 and cluster.gpus_per_node > 0:
        return max(1, cluster.gpus // cluster.gpus_per_node)
    counts = [total // per_node for total, per_node in ((cluster.cpu_millis, cluster.cpu_per_node),
                                                        (cluster.memory_bytes, cluster.memory_per_node))
              if per_node]
    return max(1, min(counts, default=1))


def node_of(cluster: Cluster) -> Shape:
    """One node of ``cluster``: its GPUs per node, and the cores and memory it states per node
    or else its equal share of the cluster's (:func:`nodes_of`)."""
    count = nodes_of(cluster)
    millis = cluster.cpu_per_node if cluster.cpu_per_node is not None else cluster.cpu_millis // count
    memory = cluster.memory_per_node if cluster.memory_per_node is not None else cluster.memory_bytes // count
    return Shape(cluster.gpus_per_node if cluster.gpus > 0 else 0, millis, memory)


def default_gpus_per_node(gpu_count: int) -> int:
    """8 when it divides ``gpu_count``, else the largest divisor of ``gpu_count`` below 8."""
    if gpu_count <= 0:
        return DEFAULT_GPUS_PER_NODE
    return max(d for d in range(1, DEFAULT_GPUS_PER_NODE + 1) if gpu_count % d == 0)


@lru_cache(maxsize=4096)
def pods_per_replica(gpus: int, node: int) -> int:
    """The fewest equal pods a gang replica of ``gpus`` splits into so that each fits a node of
    ``node`` GPUs (1 when it fits one already, or when the cluster has no GPU nodes)."""
    if gpus <= node or node <= 0:
        return 1
    return next(k for k in range(-(-gpus // node), gpus + 1) if gpus % k == 0)


def pack(pods: Sequence[Shape], nodes: Sequence[Shape]) -> tuple[int, ...] | None:
    """A packing of ``pods`` onto ``nodes``: the index of the node each pod runs on (in the
    order of ``pods``), no node giving out more GPUs, cores or memory than it offers; None when
    there is none (or the MILP passed :data:`PACKING_NODES` without finding one).

    First fit decreasing first (largest pods first, each on the first node with room), which
    packs what the optimizer places almost always; where it fails, an exact depth-first search
    over the pods, largest first, that tries a node only when no node tried before for that
    pod is left alike, places pods of one shape in node order, and stops a branch whose pods
    left need more of a resource than the nodes have free; where that runs past
    :data:`SEARCH_LIMIT` steps, a MILP of how many pods of each shape each node runs
    (:func:`_exact`)."""
    order = sorted(range(len(pods)), key=lambda i: (pods[i].gpus, pods[i].millis, pods[i].memory), reverse=True)
    found = _sorted_packing(tuple(pods[i] for i in order), tuple(nodes))
    if found is None:
        return None
    where = [0] * len(pods)
    for i, node in zip(order, found, strict=True):
        where[i] = node
    return tuple(where)


@lru_cache(maxsize=2048)
def _sorted_packing(pods: tuple[Shape, ...], nodes: tuple[Shape, ...]) -> tuple[int, ...] | None:
    """:func:`pack` of ``pods`` sorted largest first (remembered: the repair and the ledger ask
    about the same pods again)."""
    found = _first_fit(pods, nodes)
    if found is None:
        found = _searched(pods, nodes)
    return None if found is None else tuple(found)


def _searched(pods: tuple[Shape, ...], nodes: tuple[Shape, ...]) -> list[int] | None:
    """The search's answer (:func:`_search`) where it settles one, else the MILP's
    (:func:`_exact`): past :data:`SEARCH_LIMIT` steps, or for more than :data:`SEARCH_PODS`
    pods."""
    if len(pods) <= SEARCH_PODS:
        try:
            return _search(pods, nodes)
        except _RanOut:
            pass
    return _exact(pods, nodes)


def _first_fit(pods: Sequence[Shape], nodes: Sequence[Shape]) -> list[int] | None:
    free = [[n.gpus, n.millis, n.memory] for n in nodes]
    found = []
    for pod in pods:
        node = next((j for j, f in enumerate(free)
                     if pod.gpus <= f[0] and pod.millis <= f[1] and pod.memory <= f[2]), None)
        if node is None:
            return None
        free[node][0] -= pod.gpus
        free[node][1] -= pod.millis
        free[node][2] -= pod.memory
        found.append(node)
    return found


def _search(pods: Sequence[Shape], nodes: Sequence[Shape]) -> list[int] | None:
    """The exact search of :func:`pack` over ``pods`` sorted largest first; :class:`_RanOut`
    past :data:`SEARCH_LIMIT` steps."""
    free = [[n.gpus, n.millis, n.memory] for n in nodes]
    left = [[0, 0, 0] for _ in range(len(pods) + 1)]  # what pods i.. ask for together
    for i in range(len(pods) - 1, -1, -1):
        left[i] = [left[i + 1][0] + pods[i].gpus, left[i + 1][1] + pods[i].millis, left[i + 1][2] + pods[i].memory]
    total = [sum(f[r] for f in free) for r in range(3)]
    smallest = [[0, 0, 0] for _ in range(len(pods) + 1)]  # the least any of pods i.. asks for
    for i in range(len(pods) - 1, -1, -1):
        later = smallest[i + 1] if i + 1 < len(pods) else [pods[i].gpus, pods[i].millis, pods[i].memory]
        smallest[i] = [min(later[0], pods[i].gpus), min(later[1], pods[i].millis), min(later[2], pods[i].memory)]
    usable = _Usable(pods)
    where = [0] * len(pods)
    steps = _Steps()

    def room_for(i: int) -> bool:
        """Whether the nodes' free resources could hold pods i.. by their totals, by count (a
        node holds at most ``free // smallest`` of them in each resource they all ask for: 36
        pods of 16 cores have 576 cores on 8 nodes of 72 free, but 4 a node), and by what each
        node can use of each resource (:class:`_Usable`), checked when the pods' shape changes."""
        if any(left[i][r] > total[r] for r in range(3)):
            return False
        return (all(sum(f[r] // least for f in free) >= len(pods) - i
                    for r, least in enumerate(smallest[i]) if least > 0)
                and ((i > 0 and pods[i] == pods[i - 1]) or usable.holds(i, free, left[i])))

    def place(i: int) -> bool:
        if i == len(pods):
            return True
        steps.take()
        if not room_for(i):
            return False
        pod = pods[i]
        start = where[i - 1] if i and pods[i - 1] == pod else 0
        tried: set[tuple[int, ...]] = set()
        for j in range(start, len(free)):
            f = free[j]
            state = tuple(f)
            if state in tried or pod.gpus > f[0] or pod.millis > f[1] or pod.memory > f[2]:
                continue
            tried.add(state)
            f[0] -= pod.gpus
            f[1] -= pod.millis
            f[2] -= pod.memory
            for r, need in enumerate((pod.gpus, pod.millis, pod.memory)):
                total[r] -= need
            where[i] = j
            if place(i + 1):
                return True
            f[0] += pod.gpus
            f[1] += pod.millis
            f[2] += pod.memory
            for r, need in enumerate((pod.gpus, pod.millis, pod.memory)):
                total[r] += need
        return False

    return where if place(0) else None


class _RanOut(Exception):
    """:func:`_search` passed :data:`SEARCH_LIMIT` steps: its answer would be no proof."""


class _Steps:
    """The steps :func:`_search` has taken; :meth:`take` raises :class:`_RanOut` past
    :data:`SEARCH_LIMIT`."""

    def __init__(self) -> None:
        self.taken = 0

    def take(self) -> None:
        self.taken += 1
        if self.taken > SEARCH_LIMIT:
            raise _RanOut


def _exact(pods: Sequence[Shape], nodes: Sequence[Shape]) -> list[int] | None:
    """:func:`pack` as a MILP (HiGHS through ``scipy.optimize.milp``, within
    :data:`PACKING_NODES` nodes): an integer count of each shape of ``pods`` (sorted largest
    first) on each node, every pod placed, no node over its GPUs, cores or memory; the pods then
    go to the nodes in order. Each resource is counted in the greatest common divisor of what
    the pods ask of it, the nodes' room rounded down to it (the same packings, in numbers HiGHS
    holds exactly). scipy's HiGHS, not :mod:`fleetc.placement.highs`: node fit sits below the
    placement, which it may not import (``tests/test_layers.py``)."""
    import numpy as np  # only where the search ran out: validation never packs
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    index = {shape: k for k, shape in enumerate(dict.fromkeys(pods))}  # shapes, largest first
    wanted = np.bincount([index[pod] for pod in pods], minlength=len(index))
    asks = np.array([[shape.gpus, shape.millis, shape.memory] for shape in index], dtype=np.int64)
    room = np.array([[node.gpus, node.millis, node.memory] for node in nodes], dtype=np.int64)
    each_placed = sp.hstack([sp.identity(len(index), format="csr")] * len(nodes), format="csr")  # x[node, shape]
    rows = [LinearConstraint(each_placed, wanted, wanted)]
    most = np.broadcast_to(wanted, (len(nodes), len(index))).copy()
    for r in range(3):
        unit = math.gcd(*asks[:, r].tolist())
        if unit:
            per_node = sp.block_diag([sp.csr_matrix(asks[None, :, r] // unit)] * len(nodes), format="csr")
            rows.append(LinearConstraint(per_node, -np.inf, room[:, r] // unit))
            asking = asks[:, r] > 0
            most[:, asking] = np.minimum(most[:, asking], room[:, r, None] // asks[None, asking, r])
    found = milp(np.zeros(most.size), constraints=rows, integrality=np.ones(most.size, dtype=np.int64),
                 bounds=Bounds(0, most.ravel()), options={"node_limit": PACKING_NODES, "disp": False})
    if found.x is None:
        return None
    counts = np.rint(found.x).astype(np.int64).reshape(most.shape)
    if (counts < 0).any() or (counts.sum(axis=0) != wanted).any() or (counts @ asks > room).any():
        return None  # not a packing in integers (never seen: HiGHS's tolerances are far below a unit)
    where = []
    for shape in pods:
        k = index[shape]
        j = int(np.flatnonzero(counts[:, k])[0])
        counts[j, k] -= 1
        where.append(j)
    return where


class _Usable:
    """How much of each resource a node's free room can give pods i.. (sorted largest first),
    at most: no more than it has free, than its free room in another resource allows at the
    most any of them asks per unit of that one (a node with 1 GPU free gives pods of 4 cores a
    GPU at most 4 cores, whatever its cores), rounded down to the greatest common divisor of
    what they ask (pods of 4, 8 and 16 cores use 28 of a node's 30). A relaxation: when the
    nodes can give less than the pods ask in some resource, no packing of them exists. It proves
    at once what the search would take its whole budget to fail (107 pods of 4, 2 and 1 GPUs at
    4 cores a GPU onto 17 nodes of 8 GPUs and 30 cores and one of 1 GPU: the 8 GPUs of a node
    hold 7 at most)."""

    def __init__(self, pods: Sequence[Shape]) -> None:
        count = len(pods)
        self.gcd = [[0, 0, 0] for _ in range(count + 1)]
        #: [i][r][s]: the most pods i.. ask of resource r per unit of s, as (numerator,
        #: denominator); None where one asks r but none of s (no bound from s).
        self.ratio: list[list[list[tuple[int, int] | None]]] = [
            [[(0, 1)] * 3 for _ in range(3)] for _ in range(count + 1)]
        for i in range(count - 1, -1, -1):
            ask = (pods[i].gpus, pods[i].millis, pods[i].memory)
            self.gcd[i] = [math.gcd(self.gcd[i + 1][r], ask[r]) for r in range(3)]
            for r in range(3):
                for s in range(3):
                    self.ratio[i][r][s] = _most(self.ratio[i + 1][r][s], ask[r], ask[s])

    def holds(self, i: int, free: Sequence[Sequence[int]], need: Sequence[int]) -> bool:
        """Whether ``free`` nodes can give pods i.. what they ``need`` of each resource."""
        return all(sum(self._of(i, f, r) for f in free) >= need[r] for r in range(3) if need[r] > 0)

    def _of(self, i: int, f: Sequence[int], r: int) -> int:
        most = f[r]
        for s in range(3):
            ratio = self.ratio[i][r][s]
            if s != r and ratio is not None:
                most = min(most, f[s] * ratio[0] // ratio[1])
        step = self.gcd[i][r]
        return most - most % step if step else most


def _most(ratio: tuple[int, int] | None, asked: int, per: int) -> tuple[int, int] | None:
    """The larger of ``ratio`` and ``asked / per`` (None: unbounded, where ``per`` is 0 and
    ``asked`` is not)."""
    if ratio is None or (per == 0 and asked > 0):
        return None
    if per == 0 or asked * ratio[1] <= ratio[0] * per:
        return ratio
    return (asked, per)


#: The largest node (in GPUs, or time-sliced slots) whose patterns :func:`pattern_weights`
#: enumerates: a node of 16 has at most a few hundred.
PATTERN_NODE_LIMIT = 16


def patterns(node: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every maximal multiset of ``sizes`` (distinct, positive) that fits a node of ``node``
    GPUs, as a count per size in the order of ``sizes``: no size fits beside it."""
    found: list[tuple[int, ...]] = []
    smallest = min(sizes)

    def extend(i: int, left: int, counts: list[int]) -> None:
        if i == len(sizes):
            if left < smallest:
                found.append(tuple(counts))
            return
        for n in range(left // sizes[i], -1, -1):
            counts.append(n)
            extend(i + 1, left - n * sizes[i], counts)
            counts.pop()

    extend(0, node, [])
    return found


def pattern_weights(node: int, counts: dict[int, int]) -> tuple[float, dict[int, float]]:
    """The fewest nodes of ``node`` GPUs that pods of these GPU counts (size -> pods) need by
    the pattern LP (Gilmore and Gomory's relaxation of bin packing: fractions of maximal
    patterns that cover every pod), and its dual: a weight per size such that no pattern's
    pods weigh more than 1 together. Every packing onto ``k`` nodes therefore weighs at most
    ``k``: where the pods placed weigh more than the nodes there are, no packing exists, and
    ``sum(weight of each pod) <= nodes`` is a valid linear row for the optimizer.
    (0.0, {}) for a node above :data:`PATTERN_NODE_LIMIT` or no pods with GPUs."""
    from scipy.optimize import linprog

    sizes = sorted((g for g, n in counts.items() if 0 < g <= node and n > 0), reverse=True)
    if not sizes or node > PATTERN_NODE_LIMIT:
        return 0.0, {}
    found = patterns(node, sizes)
    # min sum(x) s.t. sum_p x_p * a_pg >= counts_g, x >= 0; as <= rows for linprog
    coverage = [[-float(p[i]) for p in found] for i in range(len(sizes))]
    result = linprog([1.0] * len(found), A_ub=coverage, b_ub=[-float(counts[g]) for g in sizes],
                     bounds=(0, None), method="highs")
    if result.status != 0 or result.fun is None:
        return 0.0, {}
    duals = [max(0.0, -float(m)) for m in result.ineqlin.marginals]
    return float(result.fun), dict(zip(sizes, duals, strict=True))


def weight_of(pod_gpus: int, weights: dict[int, float]) -> float:
    """A pod's weight under :func:`pattern_weights`' dual, for any GPU count: that of the
    largest size weighed that is no larger (a larger pod takes the smaller one's place in any
    pattern it fits), 0 below them all."""
    return max((w for g, w in weights.items() if g <= pod_gpus), default=0.0)
