"""A strong greedy scheduler: the baseline fleetc's optimizer has to beat, not a straw man.

The Karmada-style baselines in :mod:`bench.greedy` take stages by priority and leave 5-10% out
at 90% load, because untyped GPU stages grab the cheap GPUs the typed ones needed. This one:

1. **Best fit by GPU demand**: stages by GPUs asked for, biggest first (then by value per GPU);
   a gang goes to the cluster it fills tightest (ties to the best-scoring); a Deployment's
   replicas go to its ``multiCluster`` clusters (the minimum each), then fill its best-scoring
   clusters, each taking at least the minimum per cluster.
2. **Repair**: a stage that fits nowhere gets room on one of its clusters by moving one or two
   of the gangs there (those with the most clusters to go to first) to other clusters with room.
3. **Relocate and swap**: each gang takes the best of moving to a better-scoring cluster with
   room and swapping clusters with a gang on one of its :data:`SWAP_CLUSTERS` best-scoring
   clusters, while that raises the objective (at most :data:`PASSES` passes).

Same filters, scores, capacity rules, team quotas and cost caps (:class:`bench.caps.CapRoom`)
and objective as fleetc (:mod:`bench.greedy`); its placements pass
:func:`fleetc.placement.verify.verify`. Rooms, deficits and swap gains are
computed over numpy arrays of clusters or residents at once, so 1,000 x 20,000 takes seconds.
"""

from __future__ import annotations

import numpy as np

from bench.caps import CapRoom
from bench.greedy import _demand_and_capacity, _stage_placement, objective, stage_value
from fleetc.model import FleetModel, Placement
from fleetc.placement.rules import ha_clusters, min_replicas_per_cluster
from fleetc.placement.scoring import Scores, score_matrix

#: Passes of the relocate/swap search over every gang.
PASSES = 4
#: Residents of a cluster the repair may move (those with the most clusters to go to first).
MOVABLE = 12
#: Better-scoring clusters (best first) on which a gang looks for a resident to swap with.
SWAP_CLUSTERS = 8
#: Groups of residents the repair tries to move for one stage before it gives up on it.
ATTEMPTS = 400
#: Capacity is whole GPU slots, millicores and bytes: any shortfall is at least 1.
TOLERANCE = 1e-6


class _State:
    """Placements and free capacity (GPU slots, millicores, bytes) while the greedy works."""

    def __init__(self, model: FleetModel, scores: Scores) -> None:
        self.model, self.total = model, scores.total
        self.demand, self.free = _demand_and_capacity(model)  # (S, 3) per replica, (3, C)
        self.replicas = np.array([s.replicas for s in model.stages], dtype=np.int64)
        self.whole = self.demand * self.replicas[:, np.newaxis]  # (S, 3): all replicas
        self.gang = np.array([s.is_gang for s in model.stages], dtype=bool)
        self.value = np.array([stage_value(model, s) / s.replicas for s in model.stages])
        self.allowed = scores.allowed
        self.choices = scores.allowed.sum(axis=1)  # how many clusters each stage may go to
        self.by_score = [_best_first(scores, s) for s in range(len(model.stages))]
        names = {c.name: i for i, c in enumerate(model.clusters)}
        self.required = [[names[n] for n in ha_clusters(model, s) if n in names]
                         for s in model.stages]
        self.at: dict[int, dict[int, int]] = {}
        self.on: list[set[int]] = [set() for _ in model.clusters]
        self.caps = CapRoom(model)

    def rooms(self, s: int, clusters: np.ndarray) -> np.ndarray:
        """How many replicas of ``s`` each of ``clusters`` has room for now (within the caps)."""
        need = self.demand[s]
        used = need > 0
        within = self.caps.room(s, clusters)
        if not used.any():
            return np.minimum(within, 1 << 30)
        ratio = self.free[:, clusters][used] / need[used, np.newaxis]
        return np.minimum(np.floor(np.min(ratio, axis=0) + 1e-9).astype(np.int64), within)

    def put(self, s: int, share: dict[int, int]) -> None:
        for c, n in share.items():
            self.free[:, c] -= self.demand[s] * n
            self.on[c].add(s)
        self.caps.add(s, share)
        self.at[s] = share

    def take(self, s: int) -> dict[int, int]:
        share = self.at.pop(s)
        for c, n in share.items():
            self.free[:, c] += self.demand[s] * n
            self.on[c].discard(s)
        self.caps.add(s, share, -1)
        return share

    def swap_keeps_caps(self, s: int, here: int, there: int, r: int) -> bool:
        """Whether gang ``s`` on ``here`` and gang ``r`` on ``there`` may trade clusters within
        the caps."""
        if not self.caps.any:
            return True
        mine, theirs = self.take(s), self.take(r)
        fits = self.caps.fits(s, {there: int(self.replicas[s])})
        if fits:
            self.caps.add(s, {there: int(self.replicas[s])})
            fits = self.caps.fits(r, {here: next(iter(theirs.values()))})
            self.caps.add(s, {there: int(self.replicas[s])}, -1)
        self.put(r, theirs)
        self.put(s, mine)
        return fits

    def plan(self, s: int, avoid: int = -1) -> dict[int, int]:
        """Where stage ``s`` fits now ({} when nowhere), not on cluster ``avoid``."""
        clusters = self.by_score[s]
        room = self.rooms(s, clusters)
        if self.gang[s]:
            fits = (room >= self.replicas[s]) & (clusters != avoid)
            if not fits.any():
                return {}
            candidates, tight = clusters[fits], room[fits]
            best = np.lexsort((candidates, -self.total[s, candidates], tight))[0]
            return {int(candidates[best]): int(self.replicas[s])}
        minimum = min_replicas_per_cluster(self.model.stages[s])
        share = dict.fromkeys(self.required[s], minimum)
        room_of = dict(zip(clusters.tolist(), room.tolist(), strict=True))
        if (avoid in share or len(share) * minimum > self.replicas[s]
                or any(room_of.get(c, 0) < minimum for c in share)):
            return {}
        left = int(self.replicas[s]) - len(share) * minimum
        for c, n in room_of.items():
            if not left:
                break
            extra = min(n - share.get(c, 0), left) if c != avoid else 0
            if extra > 0 and (c in share or extra >= minimum):
                share[c] = share.get(c, 0) + extra
                left -= extra
        return {} if left or not self.caps.fits(s, share) else share


def _best_first(scores: Scores, s: int) -> np.ndarray:
    allowed = np.flatnonzero(scores.allowed[s])
    return allowed[np.argsort(-scores.total[s, allowed], kind="stable")]


def place_strong(model: FleetModel, scores: Scores | None = None) -> Placement:
    """Best fit by GPU demand, repair by moving one or two residents, relocate/swap search."""
    scores = scores if scores is not None else score_matrix(model)
    state = _State(model, scores)
    order = sorted(range(len(model.stages)), key=lambda s: (
        -state.whole[s, 0], state.choices[s], -state.value[s] / max(state.demand[s, 0], 1), s))
    left = []
    for s in order:
        share = state.plan(s)
        if share:
            state.put(s, share)
        else:
            left.append(s)
    for s in left:
        _repair(state, s)
    for _ in range(PASSES):
        if not _improve(state):
            break
    stages = tuple(_stage_placement(model, s, state.at.get(s, {}), scores.total[s])
                   for s in range(len(model.stages)))
    placement = Placement(stages=stages, objective=0.0, bound=0.0, method="greedy-strong")
    value = objective(model, placement, scores)
    return Placement(stages=stages, objective=value, bound=value, method="greedy-strong")


def _repair(state: _State, s: int) -> None:
    """Place ``s`` by moving one or two gangs off one of its clusters to clusters with room.

    For a gang, only groups that free enough on the cluster are tried, and ``s`` goes there;
    a Deployment is planned again after the group leaves.
    """
    attempts = 0
    for c in state.by_score[s].tolist():
        residents = sorted((r for r in state.on[c] if state.gang[r]),
                           key=lambda r: (-state.choices[r], state.demand[r, 0], r))
        residents = residents[:MOVABLE]
        if not residents:
            continue
        for group in _groups(state, s, c, residents):
            if attempts >= ATTEMPTS:
                return
            attempts += 1
            if _try_group(state, s, c, group):
                return


def _groups(state: _State, s: int, c: int, residents: list[int]) -> list[list[int]]:
    """The single residents, then the pairs, whose leaving ``c`` could make room for ``s``."""
    pairs = [[a, b] for i, a in enumerate(residents) for b in residents[i + 1:]]
    groups = [[r] for r in residents] + pairs
    least = state.replicas[s] if state.gang[s] else min_replicas_per_cluster(state.model.stages[s])
    deficit = state.demand[s] * least - state.free[:, c]
    return [g for g in groups
            if np.all(state.whole[g].sum(axis=0) >= deficit - TOLERANCE)]


def _try_group(state: _State, s: int, c: int, group: list[int]) -> bool:
    """Move ``group`` off ``c`` and place ``s``; undo everything unless all of it fits."""
    old = {r: state.take(r) for r in group}
    if state.gang[s]:
        fits = state.rooms(s, np.array([c]))[0] >= state.replicas[s]
        share = {c: int(state.replicas[s])} if fits else {}
    else:
        share = state.plan(s)
    if share:
        state.put(s, share)
        moved = []
        for r in group:
            new = state.plan(r, avoid=c)
            if not new:
                break
            state.put(r, new)
            moved.append(r)
        if len(moved) == len(group):
            return True
        for r in moved:
            state.take(r)
        state.take(s)
    for r, back in old.items():
        state.put(r, back)
    return False


def _improve(state: _State) -> bool:
    """One pass of the best relocation or swap per gang, where it raises the objective."""
    improved = False
    for s in sorted(state.at):
        if not state.gang[s] or s not in state.at:
            continue
        (here,) = state.at[s]
        clusters = state.by_score[s]
        better = clusters[state.total[s, clusters] > state.total[s, here] + 1e-12]
        if not len(better):
            continue
        per_unit = state.value[s] * state.replicas[s]
        move_gain, move_to = 0.0, -1
        fits = better[state.rooms(s, better) >= state.replicas[s]]
        if len(fits):
            move_to = int(fits[0])
            move_gain = per_unit * (state.total[s, move_to] - state.total[s, here])
        swap_gain, swap_with, swap_to = 0.0, -1, -1
        for there in better[:SWAP_CLUSTERS].tolist():
            gain, r = _best_swap(state, s, here, there)
            if gain > swap_gain:
                swap_gain, swap_with, swap_to = gain, r, there
        if max(move_gain, swap_gain) <= 1e-9:
            continue
        improved = True
        state.take(s)
        if swap_gain > move_gain:
            other = state.take(swap_with)
            state.put(swap_with, {here: next(iter(other.values()))})
            state.put(s, {swap_to: int(state.replicas[s])})
        else:
            state.put(s, {move_to: int(state.replicas[s])})
    return improved


def _best_swap(state: _State, s: int, here: int, there: int) -> tuple[float, int]:
    """The gang on ``there`` whose swap with ``s`` (on ``here``) fits and gains most: (gain, it)."""
    residents = np.array(sorted(r for r in state.on[there] if state.gang[r]), dtype=np.int64)
    if not len(residents):
        return 0.0, -1
    residents = residents[state.allowed[residents, here]]
    if not len(residents):
        return 0.0, -1
    mine, theirs = state.whole[s], state.whole[residents]  # (3,), (k, 3)
    fits_there = np.all(state.free[:, there] + theirs - mine >= -TOLERANCE, axis=1)
    fits_here = np.all(state.free[:, here] + mine - theirs >= -TOLERANCE, axis=1)
    gain = (state.value[s] * state.replicas[s] * (state.total[s, there] - state.total[s, here])
            + state.value[residents] * state.replicas[residents]
            * (state.total[residents, here] - state.total[residents, there]))
    gain = np.where(fits_there & fits_here, gain, 0.0)
    for best in np.argsort(-gain, kind="stable").tolist():  # the best swap within the caps
        if gain[best] <= 0:
            break
        if state.swap_keeps_caps(s, here, there, int(residents[best])):
            return float(gain[best]), int(residents[best])
    return 0.0, -1
