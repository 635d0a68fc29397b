"""Local improvement after the repair (:func:`_improve`): gangs moved or swapped to clusters
that score higher, where room allows."""

from __future__ import annotations

import itertools

import numpy as np

from fleetc.placement.colgen.large import _Large, _past
from fleetc.placement.colgen.room import _free, _room
from fleetc.placement.problem import Problem

#: Passes of the relocate/swap search over the placed gangs (:func:`_improve`).
IMPROVE_PASSES = 2


#: Better clusters (best first) on which a gang looks for a gang to swap with.
SWAP_CLUSTERS = 8


def _improve(problem: Problem, large: _Large, replicas_at: np.ndarray, deadline: float | None) -> None:
    """Raise the LP's objective by moving placed gangs (in place), the moves of
    ``bench/strong.py``: each gang takes the best of moving whole to a better cluster with room
    and swapping clusters with a gang on one of its :data:`SWAP_CLUSTERS` best better
    clusters, if that gains. At most :data:`IMPROVE_PASSES` passes; after the first, a pass
    visits only the gangs whose cluster or better clusters changed since their last visit.
    Every move keeps the placement sound, so the user's ``deadline`` stops it between gangs."""
    gangs = _Gangs(problem, large, replicas_at)
    for _ in range(IMPROVE_PASSES):
        if not gangs.improve_all(deadline):
            return


class _Gangs:
    """The placed gangs of ``replicas_at`` while :func:`_improve` moves them (in place).
    Whether a move fits is the repair's :class:`_Room` (capacity, time-slicing, failover
    headroom, caps); the arrays here only skip what cannot fit."""

    def __init__(self, problem: Problem, large: _Large, replicas_at: np.ndarray) -> None:
        self.large, self.replicas_at = large, replicas_at
        self.objective = large.gain + large.move
        by_cluster = np.argsort(large.pair_cluster, kind="stable").astype(np.int32)  # stages in order
        self.by_cluster, self.stage_by_cluster = by_cluster, large.pair_stage[by_cluster]
        self.cluster_range = np.searchsorted(large.pair_cluster[by_cluster], np.arange(large.clusters + 1))
        self.room = _room(large, replicas_at)
        self.stages = np.flatnonzero(problem.gang & replicas_at.any(axis=1))
        self.where = np.full(large.stages, -1)
        self.where[self.stages] = np.argmax(replicas_at[self.stages], axis=1)
        self.value = np.zeros(large.stages)  # the objective of each gang where it is
        key = large.pair_stage.astype(np.int64) * large.clusters + large.pair_cluster
        self.value[self.stages] = self.objective[np.searchsorted(key, self.stages * large.clusters
                                                                 + self.where[self.stages])]
        self.on: list[set[int]] = [set() for _ in range(large.clusters)]
        for s in self.stages.tolist():
            self.on[int(self.where[s])].add(s)
        self.whole = large.coefficients  # a gang's exclusive GPUs, cores, GiB, shared slots
        self.changed = np.zeros(large.clusters, dtype=np.int64)  # when each cluster last changed
        self.visited = np.full(large.stages, -1, dtype=np.int64)  # when each gang was last weighed
        self.clock = 0

    def _values_at(self, stages: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``stages`` may run on cluster ``c``, and the objective of each there (0
        where not)."""
        start, stop = self.cluster_range[c], self.cluster_range[c + 1]
        found = start + np.searchsorted(self.stage_by_cluster[start:stop], stages)
        found = np.minimum(found, stop - 1)
        allowed = (found >= start) & (self.stage_by_cluster[np.maximum(found, 0)] == stages)
        values: np.ndarray = np.where(allowed, self.objective[self.by_cluster[np.maximum(found, 0)]], 0.0)
        return allowed, values

    def _put(self, s: int, c: int, sign: int) -> None:
        n = int(self.large.replicas[s])
        self.room.take(c, s, sign * n)
        self.replicas_at[s, c] = n if sign > 0 else 0
        if sign > 0:
            self.where[s] = c
            self.on[c].add(s)
        else:
            self.on[c].discard(s)

    def _fits(self, s: int, c: int) -> bool:
        return self.room.fits(c, s) >= int(self.large.replicas[s])

    def improve_all(self, deadline: float | None) -> bool:
        """One pass, unless ``deadline`` passes; whether any gang moved."""
        improved = False
        for s in self.stages.tolist():
            if _past(deadline):
                return False
            improved = self._improve(s) or improved
        return improved

    def _improve(self, s: int) -> bool:
        """Move gang ``s`` or swap it, whichever gains more (if anything); whether it did."""
        large, objective = self.large, self.objective
        here = int(self.where[s])
        pairs = np.arange(large.pair_range[s], large.pair_range[s + 1])
        better = pairs[objective[pairs] > self.value[s] + 1e-12]
        clusters = large.pair_cluster[better]
        last, self.visited[s] = self.visited[s], self.clock
        if not len(better) or (last >= 0 and self.changed[here] <= last and self.changed[clusters].max() <= last):
            return False  # nothing better, or nothing changed since it was last weighed
        order = np.argsort(-objective[better], kind="stable")
        better, clusters = better[order], clusters[order]
        gains = objective[better] - self.value[s]
        self._put(s, here, -1)  # off while its moves are weighed
        free = self._free()
        roomy = np.flatnonzero(np.all(free[:, clusters] >= self.whole[:, s, None] - 1e-9, axis=0))
        swap_gain, residents, swap_to = self._swaps(s, here, clusters[:SWAP_CLUSTERS], gains[:SWAP_CLUSTERS], free)
        gain_of = np.concatenate([gains[roomy], swap_gain])
        partner_of = np.concatenate([np.full(len(roomy), -1), residents])
        target_of = np.concatenate([clusters[roomy], swap_to])
        for best in np.argsort(-gain_of, kind="stable").tolist():  # the best move that fits
            if gain_of[best] <= 1e-9:
                break
            if self._moved(s, here, int(target_of[best]), int(partner_of[best])):
                return True
        self._put(s, here, 1)
        return False

    def _free(self) -> np.ndarray:
        """(4, C) room left (:func:`_free`): what a move must fit in, but for the failover
        headroom and the caps, and time-sliced GPUs taking whole units."""
        return _free(self.large, self.room.taken)

    def _swaps(self, s: int, here: int, theirs: np.ndarray, gain_of_s: np.ndarray, free: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With ``s`` off ``here`` and ``free`` room left: what swapping it with each gang on
        ``theirs`` (clusters where ``s`` gains ``gain_of_s``) that may fit gains, those gangs
        and their clusters."""
        on = [sorted(self.on[there]) for there in theirs.tolist()]
        residents = np.fromiter(itertools.chain.from_iterable(on), dtype=np.int64)
        counts = [len(r) for r in on]
        there, gain = np.repeat(theirs, counts), np.repeat(gain_of_s, counts)
        allowed, value_here = self._values_at(residents, here)
        whole = self.whole
        may_fit = (allowed
                   & np.all(free[:, there] + whole[:, residents] - whole[:, s, None] >= -1e-9, axis=0)
                   & np.all(free[:, here, None] - whole[:, residents] >= -1e-9, axis=0))
        swap_gain: np.ndarray = gain[may_fit] + value_here[may_fit] - self.value[residents[may_fit]]
        return swap_gain, residents[may_fit], there[may_fit]

    def _moved(self, s: int, here: int, there: int, r: int) -> bool:
        """Put ``s`` (off ``here``) on ``there``, and gang ``r`` from ``there`` on ``here``
        (no gang when -1), if that fits; whether it did."""
        if r >= 0:
            self._put(r, there, -1)
        if not self._fits(s, there):
            if r >= 0:
                self._put(r, there, 1)
            return False
        self._put(s, there, 1)
        if r >= 0 and not self._fits(r, here):
            self._put(s, there, -1)
            self._put(r, there, 1)
            return False
        self.clock += 1
        self.changed[[here, there]] = self.clock
        self.value[s] = self._values_at(np.array([s]), there)[1][0]
        if r >= 0:
            self._put(r, here, 1)
            self.value[r] = self._values_at(np.array([r]), here)[1][0]
        return True
