"""The room a placement of the large path leaves on each cluster, under the failover headroom
and the caps (:class:`_Room`), as the rounding, the repair and the neighbourhood MILPs count it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleetc.placement.colgen.columns import _Relaxed
from fleetc.placement.colgen.large import _Caps, _Headroom, _Large
from fleetc.placement.problem import Problem, free_room, taken_per_cluster
from fleetc.placement.rules import time_sliced_gpus


@dataclass(frozen=True, eq=False)
class _Rounding:
    """What every rounding step reads: the component's problem, in the column generation's
    terms, and its LP solution."""

    problem: Problem
    large: _Large
    relaxed: _Relaxed
    deadline: float | None


def _room(large: _Large, replicas_at: np.ndarray) -> _Room:
    """The room ``replicas_at`` leaves, as the greedy repair counts it."""
    return _Room(large.capacity, _taken(large, replicas_at), large.slots, large.unit, large.headroom,
                 large.coefficients / large.replicas, replicas_at, large.caps)


def _take_plan(room: _Room, s: int, plan: dict[int, int]) -> bool:
    """Take ``plan`` (cluster -> replicas of stage ``s``) from ``room`` if all of it fits, one
    cluster after the other (failover headroom and caps couple them); whether it did."""
    taken: list[tuple[int, int]] = []
    for c, count in plan.items():
        if room.fits(c, s) < count:
            for d, back in taken:
                room.take(d, s, -back)
            return False
        room.take(c, s, count)
        taken.append((c, count))
    return True


def _free(large: _Large, taken: np.ndarray) -> np.ndarray:
    """(4, C) room left per cluster in the master's rows (exclusive GPUs, cores, GiB, shared
    slots), counting shared slots against GPUs as the MILP does when they take whole GPUs
    (:func:`~fleetc.placement.problem.free_room`)."""
    return free_room(large.capacity, large.slots, large.unit, taken)


def _fixed_need(r: _Rounding, replicas_at: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """What the serving stages placed in ``replicas_at`` need back per (group, lost cluster)."""
    large = r.large
    return large.headroom.fixed_need(replicas_at, large.coefficients / large.replicas, large.slots)


def _taken(large: _Large, replicas_at: np.ndarray) -> np.ndarray:
    """(4, C) what ``replicas_at`` uses per cluster: exclusive GPUs, cores, GiB, shared slots."""
    stage, cluster = np.nonzero(replicas_at)
    count = replicas_at[stage, cluster]
    per_replica = large.coefficients / large.replicas
    return taken_per_cluster(cluster, per_replica[:, stage], count, large.clusters)


class _Room:
    """Residual capacity per cluster, and failover headroom left per headroom row, while the
    greedy repair places stages (``per_replica`` (4, S): exclusive GPUs, cores, GiB, slots).

    The GPU rows of the headroom are counted as the rule is (:func:`rules.failover_shortfalls`),
    in slots and whole time-sliced units: what the serving stages need back for the lost cluster
    (``lost_slots``), against the GPUs the other clusters leave free, their time-sliced slots
    taking whole units (:func:`rules.time_sliced_gpus`). Counted as fractions of a GPU there,
    the repair could place replicas the verifier refuses."""

    def __init__(self, capacity: np.ndarray, taken: np.ndarray, slots: np.ndarray, unit: np.ndarray,
                 headroom: _Headroom, per_replica: np.ndarray, replicas_at: np.ndarray, caps: _Caps) -> None:
        self.capacity = capacity
        self.taken = taken.copy()
        self.slots = slots  # (C,) slots per GPU: 1 where the device plugin is not configured
        self.unit = unit  # GPUs turned time-sliced at once: slots come in whole nodes where configured
        self.headroom = headroom
        self.per_replica = per_replica
        stage, cluster = np.nonzero(replicas_at)
        count = replicas_at[stage, cluster]
        self.used = np.array([self._headroom_of(row, stage, cluster) @ count for row in range(len(headroom.bound))])
        self.caps = caps
        self.capped: list[float] = caps.used(replicas_at).tolist()
        self.lost_slots = np.array([self._lost_slots_of(row, stage, cluster) @ count
                                    for row in range(len(headroom.bound))])
        # The numbers fits() reads, as Python numbers: a repair asks tens of thousands of pairs,
        # and numpy's reads of one element at a time were most of its time.
        self._demand: list[list[float]] = per_replica.T.tolist()  # per stage
        self._capacity: list[list[float]] = capacity.T.tolist()  # per cluster
        self._per_gpu: list[int] = [int(x) for x in slots.tolist()]
        self._unit: list[int] = [int(x) for x in unit.tolist()]
        self._cap_bound: list[float] = caps.bound.tolist()
        self._cap_use: dict[int, list[tuple[int, float]]] = {}

    def _lost_slots_of(self, row: int, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """Slots per replica a serving stage on row ``row``'s lost cluster needs back (GPU rows)."""
        if self.headroom.resource[row] != 0:
            return np.zeros(len(stage))
        on_lost = self.headroom.serving[row, stage] & (cluster == self.headroom.lost[row])
        scale = int(max(self.slots.max(initial=1), 1))  # the rule's slots per GPU; 1 where not time-sliced
        per_slot = scale // np.maximum(self.slots[cluster], 1)
        need: np.ndarray = np.where(on_lost, self.per_replica[0, stage] * scale + self.per_replica[3, stage] * per_slot,
                                    0.0)
        return need

    def _headroom_of(self, row: int, stage: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        return self.headroom.coefficients(row, stage, cluster, self.per_replica, self.slots, shared_on_others=True)

    def saved(self) -> tuple[np.ndarray, np.ndarray, list[float], np.ndarray]:
        return self.taken.copy(), self.used.copy(), list(self.capped), self.lost_slots.copy()

    def restore(self, saved: tuple[np.ndarray, np.ndarray, list[float], np.ndarray]) -> None:
        self.taken, self.used, self.capped, self.lost_slots = saved

    def fits(self, c: int, s: int) -> int:
        """Replicas of stage ``s`` that fit ``c``: its capacity, the failover headroom and the caps.
        The caps first: where one leaves no room (4 of 5 asks in a repair under tight quotas),
        nothing else needs counting."""
        fitting = self._caps_fit(c, s)
        if fitting <= 0:
            return 0
        fitting = min(fitting, self.capacity_fits(c, self._demand[s]))
        gpu_rows = []
        for row in range(len(self.headroom.bound)):
            coefficient = float(self._headroom_of(row, np.array([s]), np.array([c]))[0])
            if coefficient <= 0:
                continue
            if self.headroom.resource[row] == 0:
                gpu_rows.append(row)
            else:
                fitting = min(fitting, math.floor((self.headroom.bound[row] - self.used[row]) / coefficient + 1e-9))
        fitting = max(0, fitting)
        for row in gpu_rows:
            while fitting > 0 and not self._gpu_headroom_holds(row, c, s, fitting):
                fitting -= 1
        return fitting

    def _caps_fit(self, c: int, s: int) -> int:
        """Replicas of stage ``s`` the caps leave room for on ``c`` (``1 << 30`` when none counts
        them there)."""
        fitting = 1 << 30
        for row, use in self._caps_of(s, c):  # whole numbers: integer division is exact
            fitting = min(fitting, int((self._cap_bound[row] - self.capped[row]) // use))
        return fitting

    def _caps_of(self, s: int, c: int) -> list[tuple[int, float]]:
        """The cap rows a replica of stage ``s`` on ``c`` counts against, with what it counts
        there (more than 0: the rows it does not count against change nothing), remembered:
        the repair asks for the same pairs thousands of times."""
        key = s * len(self._capacity) + c
        known = self._cap_use.get(key)
        if known is None:
            known = self._cap_use[key] = [(row, use) for row in self.caps.rows_of[s]
                                          if (use := self.caps.per_replica(row, s, c)) > 0]
        return known

    def _gpu_headroom_holds(self, row: int, c: int, s: int, replicas: int) -> bool:
        """Whether GPU headroom row ``row`` holds with ``replicas`` more of stage ``s`` on ``c``:
        the serving stages' slots on the lost cluster fit in the slots of the GPUs the others
        leave free, time-sliced ones taking whole units (the rule, in whole numbers)."""
        headroom, scale = self.headroom, int(max(self.slots.max(initial=1), 1))
        need = float(self.lost_slots[row]) + replicas * float(self._lost_slots_of(row, np.array([s]), np.array([c]))[0])
        free = 0
        for o in np.flatnonzero(headroom.others[row]).tolist():
            exclusive, shared = self.taken[0, o], self.taken[3, o]
            if o == c:
                exclusive += replicas * self.per_replica[0, s]
                shared += replicas * self.per_replica[3, s]
            busy = round(exclusive) + time_sliced_gpus(round(shared), int(self.slots[o]), int(self.unit[o]))
            free += (round(self.capacity[0, o]) - busy) * scale
        return need <= free + 1e-9

    def capacity_fits(self, c: int, demand: Sequence[float]) -> int:
        """Replicas of per-replica ``demand`` (exclusive GPUs, cores, GiB, slots) ``c`` has room for."""
        excl, cores, gib, slots = self.taken[:, c].tolist()
        capacity = self._capacity[c]
        limits = []
        unit, per_gpu = self._unit[c], self._per_gpu[c]
        if demand[0] > 0:
            free = capacity[0] - excl - time_sliced_gpus(round(slots), per_gpu, unit)
            limits.append(math.floor(free / demand[0] + 1e-9))
        if demand[3] > 0:
            free_slots = (capacity[0] - excl) // unit * unit * per_gpu - slots
            limits.append(math.floor(free_slots / demand[3] + 1e-9))
        for r, used in ((1, cores), (2, gib)):
            if demand[r] > 0:
                limits.append(math.floor((capacity[r] - used) / demand[r] + 1e-9))
        return max(0, min(limits, default=1 << 30))

    def take(self, c: int, s: int, count: int) -> None:
        self.taken[:, c] += self.per_replica[:, s] * count
        for row in range(len(self.headroom.bound)):
            self.used[row] += float(self._headroom_of(row, np.array([s]), np.array([c]))[0]) * count
            self.lost_slots[row] += float(self._lost_slots_of(row, np.array([s]), np.array([c]))[0]) * count
        for row, use in self._caps_of(s, c):
            self.capped[row] += use * count

    def capped_everywhere(self, s: int, clusters: np.ndarray) -> bool:
        """Whether a cap of stage ``s`` leaves no room for one replica on each of ``clusters``."""
        return all(any(use > self._cap_bound[row] - self.capped[row] for row, use in self._caps_of(s, c))
                   for c in clusters.tolist())
