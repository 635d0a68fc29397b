"""Finish a solved placement: the rules the solvers relax or leave to the end, restored in place.

:func:`fleetc.placement.optimize.place` runs these after every solve, in this order:

- :func:`stay_where_moving_gains_nothing`: the churn rule (:func:`fleetc.placement.rules.unjustified_moves`):
  stages the change did not touch go back where the previous placement had them unless moving
  gains more than ``moveCost``;
- :func:`packed`: every cluster's pods pack onto its nodes (:func:`fleetc.placement.rules.unpacked`;
  the solvers count GPUs, cores and memory in total), gangs swapped to make room where needed;
- :func:`packed_exactly`: the neighbourhood of stages packing left out, solved exactly with the
  packing rows when it is small and uncoupled;
- :func:`top_up`: serving stages running degraded get the replicas that still fit.

Each counts what is placed with the one ledger (:class:`fleetc.placement.rules.Ledger`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from fleetc.model import Cluster, FleetModel, Stage
from fleetc.placement import LARGE, rules
from fleetc.placement.problem import Budget, Part, PreviousClusters, Problem, multicluster_conflicts, stage_values
from fleetc.placement.scoring import Scores
from fleetc.placement.solver import SOLVERS, Exact

#: Pairs up to which :func:`packed_exactly` solves the neighbourhood of what packing left out:
#: twice the exact path's :data:`~fleetc.placement.LARGE`. On 100 x 2,000 with 6,8,8-GPU nodes
#: (seed 6, ``bench.exactcheck``) a 2 x 8-GPU gang that packs on no 6-GPU-node cluster had a
#: neighbourhood of 4,743 pairs (17 h100 clusters) and was left out, where a full placement
#: exists; solved, every stage is placed, 0.031% under the optimum.
PACKED_PAIRS = 2 * LARGE


def stay_where_moving_gains_nothing(model: FleetModel, scores: Scores, previous: PreviousClusters,
                                     replicas_at: np.ndarray) -> float:
    """Put the stages back where ``previous`` had them (in place) that moved without gaining more
    than ``moveCost`` per replica moved although the change did not touch them (the churn rule,
    :func:`rules.unjustified_moves`), until none is left; the objective's change.

    The exact program prices moves, but stops within a relative gap of its optimum; the large
    path's rounding, repair and neighbourhood MILPs re-place stages without their previous
    clusters in mind. Each round takes every stage that breaks the rule off, puts back each
    one whose previous clusters have room (in stage order), and the others where they were; if
    one of those no longer fits (a stage put back took its room), the round instead puts back
    one stage at a time where it fits beside everything else. A stage put back never moves
    again, so the rounds end."""
    names = {c.name: i for i, c in enumerate(model.clusters)}
    stage_index = {stage.key: s for s, stage in enumerate(model.stages)}
    before = [(s, names.get(cluster, -1), n) for key, where in previous.items()
              if (s := stage_index.get(key)) is not None for cluster, n in where.items()]
    if not before:
        return 0.0
    stage_of, cluster_of, count = (np.array(column, dtype=np.int64) for column in zip(*before, strict=True))
    start: dict[int, np.ndarray] = {}

    def score(key: str, cluster: str) -> float:
        c = names.get(cluster)
        return 0.0 if c is None else float(scores.total[stage_index[key], c])

    while True:
        # Only a stage that left some of its previous clusters (or one gone) may break the rule.
        moved = stage_of[(cluster_of < 0) | (replicas_at[stage_of, np.maximum(cluster_of, 0)] < count)]
        if not len(moved):
            break
        moving = {key: previous[key] for key in (model.stages[s].key for s in np.unique(moved).tolist())}
        placed = _Placed(model, replicas_at, stage_index)
        unjustified = sorted(stage_index[key] for key in rules.unjustified_moves(model, moving, placed, score))
        if not unjustified:
            break
        for s in unjustified:
            start.setdefault(s, replicas_at[s].copy())
        whole = placed.whole()
        if not _put_back(model, previous, whole, unjustified, replicas_at, together=True) \
                and not _put_back(model, previous, whole, unjustified, replicas_at, together=False):
            break  # nothing can go back: the verifier names what breaks the rule
    if not start:
        return 0.0
    values = stage_values(model, model.stages)
    return sum(float(values[s] / model.stages[s].replicas * (replicas_at[s] - before) @ (1.0 + scores.total[s]))
               for s, before in start.items())


class _Placed(Mapping[str, Mapping[str, int]]):
    """Stage key -> cluster name -> replicas of ``replicas_at`` (S, C): a stage's row read when
    asked for, every stage's at once (:func:`_where`) when iterated. The churn rule reads the
    stages that moved, and the whole placement only when one of them could have stayed."""

    def __init__(self, model: FleetModel, replicas_at: np.ndarray, stage_index: Mapping[str, int]) -> None:
        self._model, self._replicas_at, self._stage_index = model, replicas_at, stage_index
        self._whole: dict[str, dict[str, int]] | None = None

    def __getitem__(self, key: str) -> Mapping[str, int]:
        if self._whole is not None:
            return self._whole[key]
        row = self._replicas_at[self._stage_index[key]]
        if row.min() < 0:
            return {}
        return {self._model.clusters[c].name: int(row[c]) for c in np.flatnonzero(row).tolist()}

    def __iter__(self) -> Iterator[str]:
        return iter(self.whole())

    def __len__(self) -> int:
        return len(self._stage_index)

    def whole(self) -> dict[str, dict[str, int]]:
        if self._whole is None:
            self._whole = _where(self._model, self._replicas_at)
        return self._whole


def _where(model: FleetModel, replicas_at: np.ndarray) -> dict[str, dict[str, int]]:
    """Stage key -> cluster name -> replicas of ``replicas_at``, from one pass over it; a stage
    with negative replicas somewhere has no placement ({}: the verifier names it)."""
    stage_of, cluster_of = np.nonzero(replicas_at)
    counts = replicas_at[stage_of, cluster_of]
    negative = np.zeros(len(model.stages), dtype=bool)
    negative[stage_of[counts < 0]] = True
    placed: dict[str, dict[str, int]] = {stage.key: {} for stage in model.stages}
    keys, names = [stage.key for stage in model.stages], [c.name for c in model.clusters]
    for s, c, n in zip(stage_of.tolist(), cluster_of.tolist(), counts.tolist(), strict=True):
        if not negative[s]:
            placed[keys[s]][names[c]] = n
    return placed


def _put_back(model: FleetModel, previous: PreviousClusters, placed: dict[str, dict[str, int]],
              stages: list[int], replicas_at: np.ndarray, *, together: bool) -> bool:
    """Put ``stages`` back where ``previous`` had them where they fit (in place): all taken off
    first (``together``; the others return where they were, and when one no longer fits there
    nothing changes), or one at a time beside everything else; whether any went back."""
    names = {c.name: i for i, c in enumerate(model.clusters)}
    keys = {model.stages[s].key for s in stages} if together else set()
    ledger = rules.Ledger(model, ((model.stages[s], name, n) for s, stage in enumerate(model.stages)
                                  if stage.key not in keys for name, n in placed[stage.key].items()))
    moves: dict[int, dict[str, int]] = {}
    for s in stages:
        stage = model.stages[s]
        before, after = previous[stage.key], placed[stage.key]
        if not together:
            for name, n in after.items():
                ledger.add(stage, name, -n)
        if ledger.fits_with(stage, before):
            moves[s] = dict(before)
        elif together:
            continue
        where = moves.get(s, after)
        for name, n in where.items():
            ledger.add(stage, name, n)
    for s in stages:
        if together and s not in moves:
            if not ledger.fits_with(model.stages[s], placed[model.stages[s].key]):
                return False
            for name, n in placed[model.stages[s].key].items():
                ledger.add(model.stages[s], name, n)
    for s, before in moves.items():
        replicas_at[s] = 0
        for name, n in before.items():
            replicas_at[s, names[name]] = n
    return bool(moves)


def packed(model: FleetModel, scores: Scores, replicas_at: np.ndarray, previous: PreviousClusters
            ) -> tuple[float, bool]:
    """Make every cluster's pods pack onto its nodes (in place): the solvers count a cluster's
    GPUs, cores and memory in total (a relaxation of packing, ``docs/optimizer.md``), so a
    cluster they fill may hold pods no assignment to its nodes holds (:func:`rules.unpacked`).
    From each such cluster the stages of least value are taken off (whole: every replica,
    wherever it runs; those where the ``previous`` placement had them last; stages without GPUs
    first while the GPU pods pack by themselves, :func:`_gpu_pods_pack`) until it packs;
    then each stage taken off, most valuable first, goes back where it was if that packs now,
    else to the best-scoring cluster that may run it and has room and packs (a gang whole on
    one cluster; a serving stage without ``multiCluster`` all on one), else, for a gang, where
    moving up to :data:`SWAP_MOST` gangs of that cluster to other clusters with room makes room
    (:func:`_swapped_in`; gangs of the ``previous`` placement are not moved, so the churn rule
    holds). The objective's change, and whether a stage was left out (then not proven
    unplaceable)."""
    unpacked = [c for c in np.flatnonzero(replicas_at.any(axis=0)).tolist() if rules.unpacked(
        model, model.clusters[c], [(rules.on_cluster(model.stages[s], model.clusters[c]), int(replicas_at[s, c]))
                                   for s in np.flatnonzero(replicas_at[:, c]).tolist()])]
    if not unpacked:  # the common case: no ledger of 20,000 stages to build
        return 0.0, False
    stage_of, cluster_of = np.nonzero(replicas_at)
    ledger = rules.Ledger(model, ((model.stages[s], model.clusters[c].name, int(replicas_at[s, c]))
                                  for s, c in zip(stage_of.tolist(), cluster_of.tolist(), strict=True)))
    values = stage_values(model, model.stages)
    taken: dict[int, np.ndarray] = {}
    for c in unpacked:
        cluster = model.clusters[c]
        while rules.unpacked(model, cluster, ledger.on[cluster.name].values()):
            gpus_first = _gpu_pods_pack(model, cluster, ledger.on[cluster.name].values())
            s = min(np.flatnonzero(replicas_at[:, c]).tolist(),
                    key=lambda s: (_stays(model, previous, replicas_at, s),
                                   gpus_first and model.stages[s].gpus > 0, values[s], s))
            taken[s] = replicas_at[s].copy()
            for d in np.flatnonzero(replicas_at[s]).tolist():
                ledger.add(model.stages[s], model.clusters[d].name, -int(replicas_at[s, d]))
            replicas_at[s] = 0
    start = replicas_at.copy()
    for s in sorted(taken, key=lambda s: (-values[s], s)):
        where = _packed_place(model, scores, ledger, s, taken[s])
        if where is not None:
            replicas_at[s] = where
        else:
            _swapped_in(model, scores, ledger, s, replicas_at,
                        fixed={t for t, stage in enumerate(model.stages) if stage.key in previous} | set(taken))
    start[list(taken)] = np.array([taken[s] for s in taken])
    moved = np.flatnonzero((replicas_at != start).any(axis=1)).tolist()
    change = sum(float(values[s] / model.stages[s].replicas * (replicas_at[s] - start[s]) @ (1.0 + scores.total[s]))
                 for s in moved)
    return change, not all(replicas_at[s].any() for s in taken)


def _gpu_pods_pack(model: FleetModel, cluster: Cluster, placed: Iterable[tuple[Stage, int]]) -> bool:
    """Whether the pods with GPUs of ``placed`` pack onto ``cluster``'s nodes by themselves: then
    only the cores and memory the pods without GPUs want beside them are short, and taking
    those off (they run on any cluster with room) packs the cluster without leaving a GPU stage
    out."""
    return not rules.unpacked(model, cluster, [(stage, n) for stage, n in placed if stage.gpus > 0])


def packed_exactly(model: FleetModel, scores: Scores, replicas_at: np.ndarray, budget: Budget) -> float | None:
    """Where :func:`packed` left stages out that may run somewhere, solve their neighbourhood
    exactly (in place): the clusters they may run on and every stage placed there, when those
    stages run on nothing else, no cap or failover headroom couples them to the rest, and it has
    at most :data:`PACKED_PAIRS` pairs (the exact path with its packing rows,
    :class:`fleetc.placement.solver.Exact`). Taken only when it places every stage of the
    neighbourhood and every cluster packs; the objective's change, None when not taken."""
    out = [s for s in np.flatnonzero(~replicas_at.any(axis=1)).tolist() if scores.allowed[s].any()]
    if not out or rules.caps(model) or rules.failover_groups(model):
        return None
    near = np.flatnonzero(scores.allowed[out].any(axis=0))
    stages = np.union1d(out, np.flatnonzero(replicas_at[:, near].any(axis=1)))
    elsewhere = np.setdiff1d(np.arange(len(model.clusters)), near)
    if replicas_at[np.ix_(stages, elsewhere)].any():
        return None
    problem = Problem.of(model, scores, multicluster_conflicts(model, scores), np.zeros_like(replicas_at),
                         Part(stages, near))
    if problem.pairs > PACKED_PAIRS:
        return None
    solved = SOLVERS[Exact.method].solve(problem, budget)
    if not solved.replicas_at.any(axis=1).all() or not _all_pack(model, stages, near, solved.replicas_at):
        return None
    before = problem.score_of(replicas_at[np.ix_(stages, near)])
    replicas_at[np.ix_(stages, near)] = solved.replicas_at
    return problem.score_of(solved.replicas_at) - before


def _all_pack(model: FleetModel, stages: np.ndarray, clusters: np.ndarray, replicas_at: np.ndarray) -> bool:
    """Whether ``replicas_at`` ((stages, clusters), of those model indices) packs on every cluster."""
    for i, c in enumerate(clusters.tolist()):
        cluster = model.clusters[c]
        placed = [(rules.on_cluster(model.stages[s], cluster), int(n))
                  for s, n in zip(stages.tolist(), replicas_at[:, i].tolist(), strict=True) if n]
        if rules.unpacked(model, cluster, placed):
            return False
    return True


def _stays(model: FleetModel, previous: PreviousClusters, replicas_at: np.ndarray, s: int) -> bool:
    """Whether stage ``s`` is where the previous placement had it (the churn rule keeps it
    there unless moving gains more than ``moveCost``)."""
    before = previous.get(model.stages[s].key)
    return before is not None and all(int(replicas_at[s, c]) == before.get(cluster.name, 0)
                                      for c, cluster in enumerate(model.clusters)
                                      if replicas_at[s, c] or cluster.name in before)


#: The most gangs :func:`_swapped_in` moves off a cluster to make room for one, and the most
#: sets of them it tries for one gang (each a few packings).
SWAP_MOST = 3
SWAP_TRIES = 400


def _swapped_in(model: FleetModel, scores: Scores, ledger: rules.Ledger, s: int, replicas_at: np.ndarray,
                fixed: set[int]) -> bool:
    """Place gang ``s`` (in place, and in ``ledger``) on the best-scoring cluster where moving up
    to :data:`SWAP_MOST` of its gangs (none of ``fixed``; of alike gangs one set is tried, fewest
    GPUs first, at most :data:`SWAP_TRIES` sets in all) to other clusters with room
    (best-scoring first) lets it fit and pack; whether it went."""
    stage = model.stages[s]
    if not stage.is_gang:
        return False
    tries = SWAP_TRIES
    for d in sorted(np.flatnonzero(scores.allowed[s]).tolist(), key=lambda c: (-scores.total[s, c], c)):
        alike: dict[tuple[int, ...], list[int]] = {}  # gangs of a kind (GPUs, replicas, cores, memory)
        for t in np.flatnonzero(replicas_at[:, d]).tolist():
            gang = model.stages[t]
            if gang.is_gang and t not in fixed:
                alike.setdefault((gang.gpus, gang.replicas, gang.cpu_millis, gang.memory_bytes), []).append(t)
        kinds = [kind for kind, gangs in sorted(alike.items()) for _ in gangs[:SWAP_MOST]]
        picked = {tuple(sorted(combo)) for n in range(1, SWAP_MOST + 1) for combo in itertools.combinations(kinds, n)}
        sets = sorted(([alike[kind][i] for kind in set(combo) for i in range(combo.count(kind))] for combo in picked),
                      key=lambda gangs: (sum(model.stages[t].total_gpus for t in gangs), sorted(gangs)))
        for combo in sets[:tries]:
            moves = _moves_for(model, scores, ledger, s, d, combo)
            if moves is not None:
                for t, e in moves:
                    replicas_at[t] = 0
                    replicas_at[t, e] = model.stages[t].replicas
                replicas_at[s, d] = stage.replicas
                return True
        tries -= min(tries, len(sets))
        if not tries:
            break
    return False


def _packed_place(model: FleetModel, scores: Scores, ledger: rules.Ledger, s: int, before: np.ndarray
                  ) -> np.ndarray | None:
    """Where stage ``s``, taken off by :func:`packed`, goes (added to ``ledger``): as it was
    (``before``) when that fits and packs now, else whole on the best-scoring cluster that may
    run it with room (a serving stage that ``multiCluster`` spreads only as it was); None:
    nowhere."""
    stage, names = model.stages[s], [c.name for c in model.clusters]
    candidates = [{names[c]: int(before[c]) for c in np.flatnonzero(before).tolist()}]
    if stage.is_gang or not rules.ha_clusters(model, stage):
        allowed = np.flatnonzero(scores.allowed[s]).tolist()
        candidates += [{names[c]: stage.replicas} for c in sorted(allowed, key=lambda c: (-scores.total[s, c], c))]
    for where in candidates:
        if ledger.fits_with(stage, where):
            for name, n in where.items():
                ledger.add(stage, name, n)
            row = np.zeros_like(before)
            for name, n in where.items():
                row[names.index(name)] = n
            return row
    return None


def _moves_for(model: FleetModel, scores: Scores, ledger: rules.Ledger, s: int, d: int, movable: list[int]
               ) -> list[tuple[int, int]] | None:
    """Each gang of ``movable`` (on cluster ``d``) with the cluster it moves to, where moving them
    all lets gang ``s`` onto ``d`` (all applied to ``ledger``); None, and ``ledger`` as it was,
    when they do not or one of them has nowhere to go."""
    names, stage = [c.name for c in model.clusters], model.stages[s]
    for t in movable:
        ledger.add(model.stages[t], names[d], -model.stages[t].replicas)
    if not ledger.room_for(stage, names[d], stage.replicas):
        for t in movable:
            ledger.add(model.stages[t], names[d], model.stages[t].replicas)
        return None
    ledger.add(stage, names[d], stage.replicas)
    moves: list[tuple[int, int]] = []
    for t in sorted(movable, key=lambda t: (-model.stages[t].total_gpus, t)):
        gang = model.stages[t]
        e = next((e for e in sorted(np.flatnonzero(scores.allowed[t]).tolist(), key=lambda c: (-scores.total[t, c], c))
                  if e != d and ledger.room_for(gang, names[e], gang.replicas)), None)
        if e is None:
            for u, where in moves:
                ledger.add(model.stages[u], names[where], -model.stages[u].replicas)
            ledger.add(stage, names[d], -stage.replicas)
            for u in movable:
                ledger.add(model.stages[u], names[d], model.stages[u].replicas)
            return None
        ledger.add(gang, names[e], gang.replicas)
        moves.append((t, e))
    return moves


def top_up(model: FleetModel, scores: Scores, replicas_at: np.ndarray) -> None:
    """Give each serving stage that runs degraded and short the replicas that still fit (in
    place), best-scoring cluster first, until no cluster has room for one more
    (:func:`~fleetc.placement.rules.room_left`, the rule the verifier checks): a solve that
    stopped within its gap, or the large path's rounding, may leave a few out."""
    placed = replicas_at.sum(axis=1)
    short = [s for s in np.flatnonzero((placed > 0) & (placed < [stage.replicas for stage in model.stages])).tolist()
             if rules.least_replicas(model, model.stages[s]) < model.stages[s].replicas]
    if not short:
        return
    names = {c.name: i for i, c in enumerate(model.clusters)}
    stage_of, cluster_of = np.nonzero(replicas_at)
    ledger = rules.Ledger(model, ((model.stages[s], model.clusters[c].name, int(replicas_at[s, c]))
                                  for s, c in zip(stage_of.tolist(), cluster_of.tolist(), strict=True)))
    for s in short:
        stage = model.stages[s]
        while room := rules.room_left(model, stage, {model.clusters[c].name: int(replicas_at[s, c])
                                                     for c in np.flatnonzero(replicas_at[s])}, ledger):
            name, more = max(room, key=lambda option: (scores.total[s, names[option[0]]], -names[option[0]]))
            replicas_at[s, names[name]] += more
            ledger.add(stage, name, more)
