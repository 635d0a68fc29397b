"""Place every stage on the fleet with a mixed-integer linear program (HiGHS).

This module is the front door: it splits the fleet into independent components, solves each
(the matrices in :mod:`fleetc.placement.program`, the large-instance path in :mod:`fleetc.placement.colgen`),
merges them, re-checks the result with :mod:`fleetc.placement.verify` and explains what cannot be placed
(:mod:`fleetc.placement.reasons`).

The formulation, the policy fields it reads and the large-instance path are documented in
``docs/optimizer.md``; in short, variables exist only for (stage, cluster) pairs the filters
allow (:func:`fleetc.placement.scoring.score_matrix`) and form one vector ``v = [x | y | u | z | w | k | d]``:

- ``x[p]`` binary per allowed pair of a gang stage: the whole gang runs on that cluster.
- ``y[p]`` integer in [0, replicas] per allowed pair of a Deployment: replicas served there;
  ``u[p]`` binary says the cluster serves at all, with ``min * u <= y <= replicas * u``.
- ``z[s]`` binary per stage: placed (``sum(replicas placed) = replicas * z``).
- ``w[c]`` integer per cluster, only when GPUs are time-sliced: GPUs given over to shared slots.
- ``k[q]`` integer per Deployment pair that held replicas in the previous placement: replicas
  kept there (``k <= y``, ``k <= previous``), rewarded by the move cost.
- ``d[s]`` integer per serving stage running degraded: replicas it goes short of (at most
  ``replicas - least_replicas``), penalised above anything the rest can gain.

Constraints (all ``scipy.sparse`` matrices times ``v``): per cluster, exclusive GPUs + ``w`` <=
usable GPUs (:func:`fleetc.placement.rules.usable_capacity`: utilisation and defragmentation headroom),
shared slots <= ``slots_per_gpu * w``, cores and GiB <= usable; ``multiCluster`` forces
``u >= z`` on every HA cluster of a serving stage; ``sum(replicas placed) + d = replicas * z``.

Objective: maximise ``sum value_s / replicas_s * (1 + total[s, c])`` per placed replica plus
``move_cost * value_s / replicas_s`` per replica left where the previous placement had it, where
``value_s = class_weight * max(total_gpus, 1)`` (a zero class weight counts as ``EPSILON``).
The reported ``objective`` and ``bound`` leave the move-cost terms out: they measure where the
stages are, not where they were, so the report never depends on the previous placement.

The stage-cluster graph of allowed pairs is split into connected components that are solved
separately and merged in stage order. Every stage must be placed, so each solve fixes ``z = 1``;
when that is infeasible, a second solve lets ``z`` go to 0 (run until within half the smallest
stage value of optimal, so no stage that still fits is left out) and the stages it leaves out
are reported, or returned unplaced with ``allow_unplaced``. ``bound`` is the LP relaxation
(without move costs), a valid upper bound on ``objective``.

Components with more than :data:`LARGE` allowed pairs take the large path (method
``colgen-lp-round``, :func:`fleetc.placement.colgen.solve_large`): column generation solves the LP over every pair
while the master holds only a few per stage (HiGHS directly through :mod:`fleetc.placement.highs`,
warm-started), the stages it places in whole units keep that, a MILP under a deadline places
the rest (growing once into the fixed stages around it when it cannot), a greedy repair with
one-level eviction places what is still out, and what fits nowhere is diagnosed as above. Its
stages are left out only when that repair fails, not by an exact second solve.

HiGHS runs single-threaded with a fixed seed, so identical input gives an identical placement;
only a solve that hits its time limit may end differently from run to run.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

import numpy as np

from fleetc.errors import InternalError, PlacementError, SearchLimitError, TimeLimitError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Recompile, Stage, StagePlacement
from fleetc.placement import LARGE, reasons, rules
from fleetc.placement.incremental import INCREMENTAL, recompile
from fleetc.placement.previous import Recorded
from fleetc.placement.problem import (
    Budget,
    Part,
    PreviousClusters,
    Problem,
    multicluster_conflicts,
    problems,
    stage_values,
)
from fleetc.placement.program import OutOfTime, Solved
from fleetc.placement.scoring import Scores, score_matrix
from fleetc.placement.solver import SOLVERS, Exact, solver_for
from fleetc.placement.solvers import DEFAULT_SOLVER
from fleetc.placement.verify import verify


def place(
    model: FleetModel,
    *,
    time_limit: float | None = None,
    previous: PreviousClusters | None = None,
    allow_unplaced: bool = False,
    on_gap: Callable[[float], None] = lambda gap: None,
    on_placed: Callable[[int, int], None] = lambda done, total: None,
    large: int | None = None,
    solver: str = DEFAULT_SOLVER,
    recorded: Mapping[str, Recorded] | None = None,
    incremental: int | None = None,
) -> Placement:
    """Place every stage of ``model``, or raise :class:`PlacementError` saying why not.

    Components with more than ``large`` allowed pairs (None: :data:`LARGE`) take the large path.

    ``time_limit`` bounds the solving in seconds; a time-limited solve that found a placement
    returns it (its ``gap`` shows how far from proven optimal it may be, its ``time_limit`` that
    the limit ran out). ``previous`` makes
    moving a stage away from where it was cost ``model.move_cost``. With ``allow_unplaced`` the
    stages that do not fit come back with no assignments and a ``reason``. ``on_gap`` hears the
    LP's gap to its bound after each round of the large path's column generation, ``on_placed``
    how many stages are solved after each independent part (progress).
    ``solver`` is the MILP solver cvxpy runs the exact path on (:mod:`fleetc.placement.cvx`).

    With ``previous``, a fleet of more than ``incremental`` allowed pairs (None:
    :data:`~fleetc.placement.incremental.INCREMENTAL`) is recompiled incrementally where it can
    be (:func:`fleetc.placement.incremental.recompile`): the stages the change did not touch stay,
    the rest is solved exactly; ``recorded`` is what the previous report says of each stage
    (:class:`~fleetc.placement.previous.Recorded`), which tells the stages whose figures changed.
    """
    if not model.stages:
        return Placement(stages=(), objective=0.0, bound=0.0, method="milp")
    canonical = _canonical(model)
    if canonical != model:
        placed = place(canonical, time_limit=time_limit, previous=previous, allow_unplaced=allow_unplaced,
                       on_gap=on_gap, on_placed=on_placed, large=large, solver=solver, recorded=recorded,
                       incremental=incremental)
        by_key = {p.stage: p for p in placed.stages}
        return replace(placed, stages=tuple(by_key[stage.key] for stage in model.stages))
    deadline = None if time_limit is None else time.monotonic() + time_limit
    budget = Budget(deadline, solver, on_gap, on_placed)
    scores = score_matrix(model)
    recompiled = None
    if previous and int(scores.allowed.sum()) > (INCREMENTAL if incremental is None else incremental):
        blocked = multicluster_conflicts(model, scores)
        recompiled = recompile(model, scores, blocked, previous, recorded, budget, allow_unplaced=allow_unplaced)
    if recompiled is not None:
        solved = recompiled.solved
        replicas_at, objective, bound = solved.replicas_at, solved.objective, solved.bound
        methods, proven = {solved.method}, solved.proven
    else:
        replicas_at, objective, bound, methods, proven, blocked = _solve_all(model, scores, previous, budget, large,
                                                                             time_limit, deadline)
    objective += _stay_where_moving_gains_nothing(model, scores, previous or {}, replicas_at)
    repacked, left_out = _packed(model, scores, replicas_at, previous or {})
    objective += repacked
    if repacked or left_out:  # a stage taken off for packing may have left the room a moved stage had
        objective += _stay_where_moving_gains_nothing(model, scores, previous or {}, replicas_at)
    if left_out and not previous:
        resolved = _packed_exactly(model, scores, replicas_at, budget)
        objective += resolved or 0.0
        left_out = resolved is None
    proven = proven and not left_out
    _top_up(model, scores, replicas_at)
    unplaced = reasons.unplaced(model, scores, blocked, replicas_at)
    # A solve the deadline cut short ends past it; one that ends past it may just have finished
    # late, and is then only solved again by a later compile without that limit.
    ran_out = time_limit if time_limit is not None and _ran_out(deadline) else None  # the limit that ran out
    if unplaced and not allow_unplaced:
        if ran_out is not None:  # then nothing is proven
            error: PlacementError = TimeLimitError(
                ran_out, list(unplaced.values()),
                hint="raise --time-limit, or pass --allow-unplaced to render what was placed")
        else:
            error = SearchLimitError(list(unplaced.values())) if not proven else PlacementError(list(unplaced.values()))
        error.refused, error.stages = len(unplaced), len(model.stages)
        error.placed = {stage.key: {model.clusters[c].name: int(replicas_at[s, c])
                                    for c in np.flatnonzero(replicas_at[s])}
                        for s, stage in enumerate(model.stages) if replicas_at[s].any()}
        raise error
    placement = Placement(
        stages=_stage_placements(model, replicas_at, scores.total, unplaced),
        objective=round(objective, 6),
        bound=round(max(bound, objective), 6),
        method=next((m for m in ("incremental", "colgen-lp-round") if m in methods), "milp"),
        time_limit=ran_out,
        optimal=methods == {"milp"} and proven and ran_out is None and not unplaced,
        recompiled=None if recompiled is None else Recompile(recompiled.touched, recompiled.candidates),
    )
    broken = verify(model, placement, allow_unplaced=allow_unplaced, previous=previous, total=scores.total)
    if broken:
        raise InternalError(
            "the solver's placement breaks hard constraints:\n" + "\n".join(broken)
        )
    return placement


def _solve_all(model: FleetModel, scores: Scores, previous: PreviousClusters | None, budget: Budget, large: int | None,
               time_limit: float | None, deadline: float | None
               ) -> tuple[np.ndarray, float, float, set[str], bool, dict[int, str]]:
    """Solve every component: the placement, its objective and bound, the methods used, whether
    what it leaves out is proven out, and the stages ``multiCluster`` blocks."""
    components, blocked = problems(model, scores, previous or {})
    replicas_at = np.zeros(scores.allowed.shape, dtype=np.int32)
    objective = bound = 0.0
    methods = set()
    proven = True
    done = len(model.stages) - sum(len(problem.part.stages) for problem in components)  # no cluster allowed
    for problem in components:
        try:
            solved = _solve(problem, budget, LARGE if large is None else large)
        except OutOfTime:
            raise _no_placement(time_limit, deadline) from None
        replicas_at[np.ix_(problem.part.stages, problem.part.clusters)] = solved.replicas_at
        objective += solved.objective
        bound += solved.bound
        methods.add(solved.method)
        proven = proven and solved.proven
        done += len(problem.part.stages)
        budget.on_placed(done, len(model.stages))
    return replicas_at, objective, bound, methods, proven, blocked


def _stay_where_moving_gains_nothing(model: FleetModel, scores: Scores, previous: PreviousClusters,
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


def _packed(model: FleetModel, scores: Scores, replicas_at: np.ndarray, previous: PreviousClusters
            ) -> tuple[float, bool]:
    """Make every cluster's pods pack onto its nodes (in place): the solvers count a cluster's
    GPUs, cores and memory in total (a relaxation of packing, ``docs/optimizer.md``), so a
    cluster they fill may hold pods no assignment to its nodes holds (:func:`rules.unpacked`).
    From each such cluster the stages of least value are taken off (whole: every replica,
    wherever it runs; those where the ``previous`` placement had them last) until it packs;
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
            s = min(np.flatnonzero(replicas_at[:, c]).tolist(),
                    key=lambda s: (_stays(model, previous, replicas_at, s), values[s], s))
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


def _packed_exactly(model: FleetModel, scores: Scores, replicas_at: np.ndarray, budget: Budget) -> float | None:
    """Where :func:`_packed` left stages out that may run somewhere, solve their neighbourhood
    exactly (in place): the clusters they may run on and every stage placed there, when those
    stages run on nothing else, no cap or failover headroom couples them to the rest, and it has
    at most :data:`~fleetc.placement.LARGE` pairs (the exact path with its packing rows,
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
    if problem.pairs > LARGE:
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
    """Where stage ``s``, taken off by :func:`_packed`, goes (added to ``ledger``): as it was
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


def _top_up(model: FleetModel, scores: Scores, replicas_at: np.ndarray) -> None:
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


def _canonical(model: FleetModel) -> FleetModel:
    """The model with clusters sorted by name and stages by key, so the order the policies
    list them in never changes the placement (ties included)."""
    return replace(
        model,
        clusters=tuple(sorted(model.clusters, key=lambda c: c.name)),
        stages=tuple(sorted(model.stages, key=lambda s: s.key)),
    )


def _solve(problem: Problem, budget: Budget, large: int) -> Solved:
    """Solve one component with its solver (:func:`fleetc.placement.solver.solver_for`): all
    stages placed if possible, else the best partial placement; exactly up to ``large`` allowed
    pairs, else by column generation."""
    return solver_for(problem, large).solve(problem, budget)


def _no_placement(time_limit: float | None, deadline: float | None) -> PlacementError:
    """The error of a solve that ended without a placement: the user's time limit ran out, or the
    solver stopped at its own limits (or gave values that break the constraints)."""
    if time_limit is not None and _ran_out(deadline):
        return TimeLimitError(time_limit, ["no placement found yet"], hint="raise --time-limit")
    return PlacementError(["the solver found no placement within its limits"])


def _ran_out(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _stage_placements(model: FleetModel, replicas_at: np.ndarray, total: np.ndarray, unplaced: Mapping[int, str]
                      ) -> tuple[StagePlacement, ...]:
    """Each stage's placement (:func:`_stage_placement`) from one pass over ``replicas_at``:
    a stage on one cluster (most of them) is read from that pair alone, with the same
    arithmetic as the whole row's."""
    stage_of, cluster_of = np.nonzero(replicas_at)
    starts = np.searchsorted(stage_of, np.arange(len(model.stages) + 1)).tolist()
    clusters, counts = cluster_of.tolist(), replicas_at[stage_of, cluster_of].tolist()
    scores = total[stage_of, cluster_of].tolist()
    placements = []
    for s, stage in enumerate(model.stages):
        first, end = starts[s], starts[s + 1]
        if end - first == 1 and counts[first] > 0:
            c, n = clusters[first], counts[first]
            cluster = model.clusters[c]
            placements.append(StagePlacement(
                stage=stage.key, assignments=(Assignment(cluster.name, n, n * rules.on_cluster(stage, cluster).gpus),),
                score=round(n * scores[first] / n, 6), reason=unplaced.get(s, "")))
        else:
            placements.append(_stage_placement(stage, model.clusters, replicas_at[s], total[s], unplaced.get(s, "")))
    return tuple(placements)


def _stage_placement(
    stage: Stage, clusters: tuple[Cluster, ...], replicas: np.ndarray, total: np.ndarray, reason: str
) -> StagePlacement:
    assignments = tuple(
        sorted(
            (
                Assignment(clusters[c].name, int(replicas[c]),
                           int(replicas[c]) * rules.on_cluster(stage, clusters[c]).gpus)
                for c in np.flatnonzero(replicas)
            ),
            key=lambda a: a.cluster,
        )
    )
    placed = int(replicas.sum())
    score = float(replicas @ total) / placed if placed else 0.0
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(score, 6), reason=reason)
