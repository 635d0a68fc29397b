"""The placement MILP in matrix form, and its solve with HiGHS (:mod:`fleetc.placement.highs`).

One vector ``v = [x | y | u | z | w | k | d]`` over the allowed (stage, cluster) pairs of one
problem (:class:`fleetc.placement.problem.Problem`; see :mod:`fleetc.placement.optimize` and
``docs/optimizer.md`` for what each part means); every constraint is a ``scipy.sparse`` matrix
times ``v``. The exact path solves it through cvxpy (:func:`fleetc.placement.cvx.solve`);
:mod:`fleetc.placement.colgen` solves the programs of restricted problems (with what the
stages it keeps fixed take) with :func:`solve_program`, HiGHS direct, for its rounding and
neighbourhood MILPs; both take the program and the :class:`~fleetc.placement.problem.Budget`
(:class:`ProgramSolver`). Every exact solve takes the same two steps: every stage placed, else
the most valuable placement (:func:`every_stage_else_most`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from fleetc import nodefit
from fleetc.placement import highs, rules
from fleetc.placement.problem import Budget, Problem


@dataclass(frozen=True, eq=False)
class Solved:
    replicas_at: np.ndarray  # (stages, clusters) of the part
    objective: float
    bound: float
    method: str
    #: No placement of the part places every stage it leaves out (an exact solve proved it, or
    #: it leaves none out): when False, a longer search might still place them.
    proven: bool = True



class OutOfTime(Exception):
    """A solve ended at its limits without a placement."""



def replicas_of(program: Program, values: np.ndarray) -> np.ndarray:
    replicas_at = np.zeros((len(program.blocked), program.clusters), dtype=int)
    units = values[: len(program.unit_stage)] * program.unit_replicas
    np.add.at(replicas_at, (program.unit_stage, program.unit_cluster), np.rint(units).astype(int))
    return replicas_at


def values_of(program: Program, replicas_at: np.ndarray) -> np.ndarray | None:
    """The point ``v`` of ``program`` that places its stages as ``replicas_at`` (stages x
    clusters of the program) does, the inverse of :func:`replicas_of`: ``x`` and ``y`` from the
    replicas, ``u`` and ``z`` where any are placed, ``w`` the fewest time-sliced units the slots
    need, ``k`` the replicas kept, ``d`` what a degraded stage goes short of; None when that
    point breaks a row of the program (a placement it does not allow)."""
    values = np.zeros(program.size)
    units = len(program.unit_stage)
    deployments = np.arange(program.gangs, units)
    values[:units] = replicas_at[program.unit_stage, program.unit_cluster] / program.unit_replicas
    values[units + np.arange(len(deployments))] = values[deployments] > 0
    values[program.z] = replicas_at.any(axis=1)
    values[program.k] = np.minimum(values[program.k_of], program.upper[program.k])
    if len(program.w):  # the slot rows, one per cluster: slots used - slots per unit x w <= capacity
        rows = 3 * program.clusters + np.arange(program.clusters)
        slot_rows = program.usage[rows]
        per_unit = -slot_rows[:, program.w].diagonal()
        over = slot_rows @ values - program.capacity[rows]
        values[program.w] = np.ceil(np.maximum(over, 0.0) / np.where(per_unit > 0, per_unit, 1.0) - 1e-9)
    values[program.d] = -(program.placement @ values)[program.d_of]
    whole = bool(np.all(values == np.rint(values)))  # a gang split across clusters is no point of it
    return values if whole and is_feasible(program, values, program.lower) else None



@dataclass(frozen=True, eq=False)
class _Columns:
    """Where each part of ``v = [x | y | u | z | w | k | d]`` lives; pairs sorted by stage, cluster."""

    x_stage: np.ndarray
    x_cluster: np.ndarray
    y_stage: np.ndarray
    y_cluster: np.ndarray
    stages: int
    shared: int  # w entries: one per cluster when GPUs are time-sliced, else none
    keep: np.ndarray  # y pairs (indices) that held replicas in the previous placement
    short: np.ndarray  # stages (indices) that may run short: one d entry each

    @classmethod
    def of(cls, problem: Problem, allowed: np.ndarray, shared: int) -> _Columns:
        pair_stage, pair_cluster = np.nonzero(allowed)
        gang = problem.gang[pair_stage]
        y_stage, y_cluster = pair_stage[~gang], pair_cluster[~gang]
        keep = np.flatnonzero(problem.previous_at(y_stage, y_cluster) > 0)
        short = np.flatnonzero(problem.least < problem.replicas)
        return cls(pair_stage[gang], pair_cluster[gang], y_stage, y_cluster, len(problem.stages), shared, keep,
                   short)

    @property
    def units(self) -> int:
        """The ``x`` and ``y`` entries: the ones that carry replicas."""
        return len(self.x_stage) + len(self.y_stage)

    @property
    def y(self) -> np.ndarray:
        return len(self.x_stage) + np.arange(len(self.y_stage))

    @property
    def u(self) -> np.ndarray:
        return self.units + np.arange(len(self.y_stage))

    @property
    def z(self) -> np.ndarray:
        return self.units + len(self.y_stage) + np.arange(self.stages)

    @property
    def w(self) -> np.ndarray:
        return self.units + len(self.y_stage) + self.stages + np.arange(self.shared)

    @property
    def k(self) -> np.ndarray:
        return self.units + len(self.y_stage) + self.stages + self.shared + np.arange(len(self.keep))

    @property
    def d(self) -> np.ndarray:
        return self.units + len(self.y_stage) + self.stages + self.shared + len(self.keep) + np.arange(len(self.short))

    @property
    def size(self) -> int:
        return self.units + len(self.y_stage) + self.stages + self.shared + len(self.keep) + len(self.short)


@dataclass(frozen=True, eq=False)
class Program:
    """The MILP of one part in matrix form (see the module docstring).

    ``unit_*`` describe the first ``x`` + ``y`` entries: which stage and cluster (indices in the
    part) each belongs to and how many replicas one unit of it is (the gang's replicas for
    ``x``, 1 for ``y``).
    """

    unit_stage: np.ndarray
    unit_cluster: np.ndarray
    unit_replicas: np.ndarray
    objective: np.ndarray
    placement: sp.csr_matrix  # placement @ v == 0, one row per stage
    usage: sp.csr_matrix  # usage @ v <= capacity
    capacity: np.ndarray
    linking: sp.csr_matrix  # linking @ v <= 0
    lower: np.ndarray
    upper: np.ndarray
    z: np.ndarray  # the z columns
    w: np.ndarray  # the w columns (one per cluster with time-slicing, else none)
    k: np.ndarray  # the k columns
    k_of: np.ndarray  # the y column each k column keeps replicas of
    d: np.ndarray  # the d columns: replicas a stage running degraded goes short of
    d_of: np.ndarray  # the stage (index in the part) each d column belongs to
    blocked: np.ndarray  # per stage of the part: multiCluster makes it unplaceable
    clusters: int
    gangs: int  # the x columns come first
    smallest_value: float
    #: ``objective`` without the move-cost terms: what the placement reports, so the report
    #: depends on where stages are, never on where they were.
    score: np.ndarray

    @property
    def size(self) -> int:
        return len(self.objective)

    @property
    def binaries(self) -> int:
        """Binary pairs: one ``x`` per gang pair, one ``u`` per Deployment pair."""
        return len(self.unit_stage)


def build_program(problem: Problem, allowed: np.ndarray | None = None, taken: np.ndarray | None = None,
                  fixed_need: Mapping[tuple[int, int], np.ndarray] | None = None,
                  cap_taken: np.ndarray | None = None) -> Program:
    """The program of ``problem``; ``allowed`` narrows its pairs (the large path's candidates)
    and ``taken`` (4, C) is what fixed stages already use of each cluster: GPUs, cores, GiB, and
    shared slots; ``fixed_need`` what the fixed serving stages of a platform with failover
    headroom need back per (its index in ``problem.failover``, lost cluster's index in the
    model): GPUs, cores, GiB (the problem then holds every cluster of that platform's set);
    ``cap_taken`` what stages outside the program already take of each cap row
    (:func:`cap_rows`' order)."""
    if allowed is None:
        allowed = problem.allowed
    replicas = problem.replicas
    taken = np.zeros((4, len(problem.clusters))) if taken is None else taken
    any_shared = bool(problem.shared.any() or taken[3].any())
    columns = _Columns.of(problem, allowed, len(problem.clusters) if any_shared else 0)
    unit_stage = np.concatenate([columns.x_stage, columns.y_stage])
    unit_cluster = np.concatenate([columns.x_cluster, columns.y_cluster])
    unit_replicas = np.concatenate([replicas[columns.x_stage], np.ones(len(columns.y_stage))])
    values = problem.values
    capacity = problem.capacity - taken[:3]

    score = np.zeros(columns.size)
    per_replica = values[unit_stage] / replicas[unit_stage]
    score[: columns.units] = per_replica * (1.0 + problem.total_at(unit_stage, unit_cluster)) * unit_replicas
    objective = score.copy()
    gang_kept = problem.previous_at(columns.x_stage, columns.x_cluster) / replicas[columns.x_stage]
    objective[: len(columns.x_stage)] += problem.move_cost * values[columns.x_stage] * gang_kept
    objective[columns.k] = problem.move_cost * per_replica[len(columns.x_stage) + columns.keep]
    # A replica a degraded stage goes short of costs more than any placement of the rest can
    # gain: it is placed whenever the capacity left by the other stages holds it.
    objective[columns.d] = -(1.0 + float(np.abs(objective) @ _upper_of(columns, replicas, capacity)))

    lower = np.zeros(columns.size)
    upper = np.ones(columns.size)
    upper[columns.y] = replicas[columns.y_stage]
    upper[columns.z[problem.blocked]] = 0.0
    if columns.shared:
        upper[columns.w] = np.floor(np.maximum(capacity[0], 0.0) / problem.unit)
    upper[columns.k] = problem.previous_at(columns.y_stage[columns.keep], columns.y_cluster[columns.keep])
    upper[columns.d] = (replicas - problem.least)[columns.short]
    usage, usable = _usage_rows(columns, unit_cluster, unit_replicas, problem.use_at(unit_stage, unit_cluster),
                                capacity, problem.slots * problem.unit, taken[3], problem.unit)
    usage, usable = _headroom_rows(problem, usage, usable, (unit_stage, unit_cluster, unit_replicas),
                                   fixed_need or {})
    if problem.caps:
        rows, limits = cap_rows(problem, unit_stage, unit_cluster, unit_replicas, columns.size)
        usage = sp.vstack([usage, rows], format="csr")
        usable = np.concatenate([usable, limits - (0.0 if cap_taken is None else cap_taken)])
    return Program(
        unit_stage=unit_stage,
        unit_cluster=unit_cluster,
        unit_replicas=unit_replicas,
        objective=objective,
        placement=_placement_rows(columns, unit_stage, unit_replicas, replicas),
        usage=usage,
        capacity=usable,
        linking=_linking_rows(problem, columns),
        lower=lower,
        upper=upper,
        z=columns.z,
        w=columns.w,
        k=columns.k,
        k_of=columns.y[columns.keep],
        d=columns.d,
        d_of=columns.short,
        blocked=problem.blocked,
        clusters=len(problem.clusters),
        gangs=len(columns.x_stage),
        smallest_value=float(values.min()),
        score=score,
    )


def packing_rows(problem: Problem, program: Program, values: np.ndarray) -> Program | None:
    """``program`` with packing rows added where the placement ``values`` leaves a cluster
    whose pods pack onto no assignment to its nodes (:func:`rules.unpacked`); None when every
    cluster packs or no row separates it.

    The capacity rows count GPUs in total, a relaxation of packing. For such a cluster the pattern
    LP of its node size (:func:`fleetc.nodefit.pattern_weights`) gives each pod a weight such
    that no node's pods weigh more than 1; where the pods placed weigh more than the cluster's
    nodes (its usable GPUs in nodes, a node's part counting as one), the row ``sum(pods x
    weight) <= nodes`` is added for every cluster of that node size: it holds for every
    placement that packs, so the optimum and its bound stay those of the packing rule, and a
    program it makes infeasible proves that no placement packs. Exclusive pods only: a
    time-sliced pod packs onto time-sliced nodes (:func:`rules.packing`), weighed 0 here.

    Where the pattern LP does not separate the cluster (bin packing's LP is not always exact)
    and only gangs run there, the row ``sum(x) <= n - 1`` over its ``n`` gangs says that not all
    of them run there together: they do not pack, nor do they with more beside them."""
    placed = replicas_of(program, values)
    cuts: dict[int, dict[int, float]] = {}
    apart: list[np.ndarray] = []
    for c in np.flatnonzero(placed.any(axis=0)).tolist():
        cluster = problem.clusters[c]
        on = [(rules.on_cluster(problem.stages[s], cluster), int(placed[s, c]), bool(problem.shared[s]))
              for s in np.flatnonzero(placed[:, c]).tolist()]
        if cluster.gpus_per_node in cuts or not rules.unpacked(problem.model, cluster, [(st, n) for st, n, _ in on]):
            continue
        whole = rules.slots_on(problem.model, cluster) == 1
        counts: dict[int, int] = {}
        for stage, n, shared in on:
            if stage.gpus and (whole or not shared):
                counts[stage.pod_gpus] = counts.get(stage.pod_gpus, 0) + n * stage.pods_per_replica
        need, weights = nodefit.pattern_weights(cluster.gpus_per_node, counts)
        if need > _nodes(problem, c) + 1e-6:
            cuts[cluster.gpus_per_node] = weights
        elif all(problem.gang[s] for s in np.flatnonzero(placed[:, c]).tolist()):
            gangs = np.flatnonzero((program.unit_cluster[:program.gangs] == c) & (values[:program.gangs] > 0.5))
            apart.append(gangs)
    if not cuts and not apart:
        return None
    program = _with_rows(problem, program, cuts)
    if not apart:
        return program
    rows = sp.csr_matrix((np.ones(sum(len(a) for a in apart)),
                          (np.repeat(np.arange(len(apart)), [len(a) for a in apart]), np.concatenate(apart))),
                         shape=(len(apart), program.size))
    return replace(program, usage=sp.vstack([program.usage, rows], format="csr"),
                   capacity=np.concatenate([program.capacity, [len(a) - 1.0 for a in apart]]))


def _nodes(problem: Problem, c: int) -> int:
    """The nodes of cluster ``c`` fleetc may use: its usable GPUs in nodes, a part counting one."""
    cluster = problem.clusters[c]
    return -(-int(problem.capacity[0, c]) // max(cluster.gpus_per_node, 1))


def _with_rows(problem: Problem, program: Program, cuts: Mapping[int, Mapping[int, float]]) -> Program:
    """``program`` with the row of :func:`packing_rows` for each cluster whose node size has
    weights in ``cuts`` (node size -> pod GPUs -> weight)."""
    if not cuts:
        return program
    units = np.arange(len(program.unit_stage))
    data: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    bounds: list[float] = []
    for c, cluster in enumerate(problem.clusters):
        weights = cuts.get(cluster.gpus_per_node)
        if weights is None or cluster.gpus <= 0:
            continue
        whole = rules.slots_on(problem.model, cluster) == 1
        for u in units[program.unit_cluster == c].tolist():
            s = int(program.unit_stage[u])
            if problem.shared[s] and not whole:
                continue
            stage = rules.on_cluster(problem.stages[s], cluster)
            weight = nodefit.weight_of(stage.pod_gpus, dict(weights)) if stage.gpus else 0.0
            if weight:
                data.append(weight * stage.pods_per_replica * float(program.unit_replicas[u]))
                rows.append(len(bounds))
                cols.append(u)
        bounds.append(float(_nodes(problem, c)))
    rows_matrix = sp.csr_matrix((data, (rows, cols)), shape=(len(bounds), program.size))
    return replace(program, usage=sp.vstack([program.usage, rows_matrix], format="csr"),
                   capacity=np.concatenate([program.capacity, bounds]))


def _upper_of(columns: _Columns, replicas: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Upper bounds of ``v`` before the move-cost and shortfall bounds are known (those columns
    carry no score): what the shortfall penalty must outweigh."""
    upper = np.ones(columns.size)
    upper[columns.y] = replicas[columns.y_stage]
    if columns.shared:
        upper[columns.w] = np.maximum(capacity[0], 0.0)
    upper[columns.k] = replicas[columns.y_stage[columns.keep]]
    return upper


def _sparse(
    entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]], shape: tuple[int, int]
) -> sp.csr_matrix:
    """A CSR matrix from (values, rows, columns) triplets."""
    data, rows, cols = (np.concatenate(part) for part in zip(*entries, strict=True))
    return sp.csr_matrix((data, (rows, cols)), shape=shape)


def _placement_rows(
    columns: _Columns, unit_stage: np.ndarray, unit_replicas: np.ndarray, replicas: np.ndarray
) -> sp.csr_matrix:
    """One row per stage: replicas placed + replicas short (``d``, degraded stages only) -
    replicas * z == 0."""
    stages = np.arange(columns.stages)
    return _sparse(
        [(unit_replicas, unit_stage, np.arange(columns.units)), (-replicas, stages, columns.z),
         (np.ones(len(columns.short)), columns.short, columns.d)],
        (columns.stages, columns.size),
    )


def _usage_rows(
    columns: _Columns,
    unit_cluster: np.ndarray,
    unit_replicas: np.ndarray,
    use: np.ndarray,  # (4, units): per replica of each unit's pair, as the ledger counts it
    capacity: np.ndarray,
    unit_slots: np.ndarray,
    taken_slots: np.ndarray,
    unit: np.ndarray,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``r * C + c`` for resource ``r`` (GPUs, cores, GiB) of cluster ``c``, then (with
    time-slicing) one slot row per cluster: ``slots used - unit_slots * w <= 0``, ``w`` the
    cluster's time-sliced units of ``unit`` GPUs (whole nodes where the device plugin is
    configured, :func:`fleetc.placement.rules.time_sliced_unit`; ``unit_slots`` = slots per
    GPU x ``unit``), and the GPU row counts ``unit * w`` besides the whole GPUs. What each unit
    takes is the ledger's (``use``: whole GPUs, cores, GiB, time-sliced slots per replica,
    :meth:`~fleetc.placement.problem.Problem.use_at`), times the replicas it carries."""
    clusters = capacity.shape[1]
    units = np.arange(columns.units)
    taken = use * unit_replicas
    entries = [(taken[r], r * clusters + unit_cluster, units) for r in range(3)]
    rows = 3 * clusters
    usable = capacity.ravel()
    if columns.shared:
        cluster_ids = np.arange(clusters)
        entries += [
            (unit, cluster_ids, columns.w),
            (taken[3], rows + unit_cluster, units),
            (-unit_slots, rows + cluster_ids, columns.w),
        ]
        rows += clusters
        usable = np.concatenate([usable, -taken_slots])
    return _sparse(entries, (rows, columns.size)), usable


def _headroom_rows(
    problem: Problem, usage: sp.csr_matrix, usable: np.ndarray, units: tuple[np.ndarray, np.ndarray, np.ndarray],
    fixed_need: Mapping[tuple[int, int], np.ndarray],
) -> tuple[sp.csr_matrix, np.ndarray]:
    """``usage`` and ``usable`` with the failover headroom rows of
    :func:`~fleetc.placement.rules.failover_groups` added: per platform, lost cluster ``h`` and
    resource ``r``, what the other clusters of its set use plus what its serving stages use on
    ``h`` (time-sliced GPUs as ``1 / slots`` each) <= what the others may use, less what its
    serving stages outside the program (``fixed_need``) need back for ``h``."""
    if not problem.failover:
        return usage, usable
    unit_stage, unit_cluster, unit_replicas = units
    n_clusters = len(problem.clusters)
    coefficients = problem.demand[:, unit_stage] * unit_replicas
    coefficients[0] = problem.gpus_at(unit_stage, unit_cluster) * unit_replicas
    coefficients[0] = np.where(problem.shared[unit_stage], coefficients[0] / problem.slots[unit_cluster],
                               coefficients[0])
    rows, bounds = [], []
    for group, (ha, serving) in enumerate(problem.failover):
        is_serving = serving[unit_stage]
        for h in ha if len(ha) > 1 else []:
            others = [o for o in ha if o != h]
            on_h = np.flatnonzero(is_serving & (unit_cluster == h))
            for r in range(3):
                need = sp.csr_matrix((coefficients[r, on_h], (np.zeros(len(on_h), dtype=int), on_h)),
                                     shape=(1, usage.shape[1]))
                picked = [r * n_clusters + o for o in others]
                rows.append(sp.csr_matrix(usage[picked].sum(axis=0)) + need)
                bounds.append(float(usable[picked].sum())
                              - float(fixed_need.get((group, int(problem.part.clusters[h])), np.zeros(3))[r]))
    if not rows:
        return usage, usable
    return sp.vstack([usage, *rows], format="csr"), np.concatenate([usable, bounds])


def cap_rows(problem: Problem, unit_stage: np.ndarray, unit_cluster: np.ndarray, unit_replicas: np.ndarray,
             size: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """The rows of the caps (:class:`~fleetc.placement.problem.CapRows`, the rule
    :func:`~fleetc.placement.rules.cap_overuse`) over the first ``len(unit_stage)`` columns of a
    ``size``-column program, and their limits, in whole integers as the rule counts: per cap,
    one row per GPU type it caps (quota slots of its stages on clusters of that type), then one
    for its cost (micros), if it has one."""
    entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    limits: list[float] = []
    units = np.arange(len(unit_stage))
    cost: np.ndarray | None = None
    for cap in problem.caps:
        mine = cap.members[unit_stage]
        for _gpu_type, on, quota in cap.quotas:
            hit = np.flatnonzero(mine & on[unit_cluster])
            entries.append((problem.quota_at(unit_stage[hit], unit_cluster[hit]) * unit_replicas[hit],
                            np.full(len(hit), len(limits)),
                            units[hit]))
            limits.append(float(quota))
        if cap.cost is not None:
            if cost is None:
                cost = problem.cost_at(unit_stage, unit_cluster) * unit_replicas
            hit = np.flatnonzero(mine)
            entries.append((cost[hit], np.full(len(hit), len(limits)), units[hit]))
            limits.append(float(cap.cost))
    if not entries:
        return sp.csr_matrix((0, size)), np.zeros(0)
    return _sparse(entries, (len(limits), size)), np.array(limits)


def _linking_rows(problem: Problem, columns: _Columns) -> sp.csr_matrix:
    """Rows ``<= 0``: ``y - replicas * u`` and ``min * u - y`` per Deployment pair, ``z - u`` per
    pair on a ``multiCluster`` cluster, ``k - y`` per kept pair."""
    n_y = len(columns.y_stage)
    minimum = problem.minimum[columns.y_stage]
    rows = np.arange(n_y)
    ha_of = [set(ha) for ha in problem.ha]
    ha = np.array([c in ha_of[s] for s, c in zip(columns.y_stage.tolist(), columns.y_cluster.tolist(), strict=True)],
                  dtype=bool)
    ha_pairs = np.flatnonzero(ha)
    ha_rows = 2 * n_y + np.arange(len(ha_pairs))
    keep_rows = 2 * n_y + len(ha_pairs) + np.arange(len(columns.keep))
    return _sparse(
        [
            (np.ones(n_y), rows, columns.y),
            (-problem.replicas[columns.y_stage], rows, columns.u),
            (minimum, n_y + rows, columns.u),
            (-np.ones(n_y), n_y + rows, columns.y),
            (np.ones(len(ha_pairs)), ha_rows, columns.z[columns.y_stage[ha_pairs]]),
            (-np.ones(len(ha_pairs)), ha_rows, columns.u[ha_pairs]),
            (np.ones(len(columns.keep)), keep_rows, columns.k),
            (-np.ones(len(columns.keep)), keep_rows, columns.y[columns.keep]),
        ],
        (2 * n_y + len(ha_pairs) + len(columns.keep), columns.size),
    )


@dataclass(frozen=True, eq=False)
class Result:
    """What one solve produced: ``values`` of ``v`` (None when there are none) and whether they
    are proven optimal (as opposed to the best found before the time limit)."""

    values: np.ndarray | None
    optimal: bool
    infeasible: bool = False


def solve_program(
    program: Program, budget: Budget, *, require_all: bool, integral: bool,
    absolute_gap: float | None = None, nodes: int | None = None, relaxation_first: bool = False,
    options: Mapping[str, highs.OptionValue] | None = None,
) -> Result:
    """Solve the MILP (or its LP relaxation) with HiGHS direct within ``budget.deadline``;
    ``require_all`` fixes every stage's ``z`` to 1. ``budget.solver`` is not read: it names the
    solver of the exact path (:func:`fleetc.placement.cvx.solve_program`, the same call through
    cvxpy); the large path's MILPs stay on HiGHS.

    A MILP stops within a relative 1e-4 of optimal, or within ``absolute_gap``, or after
    ``nodes`` branch-and-bound nodes (None: no limit). With ``relaxation_first``, a MILP whose LP
    relaxation is infeasible is infeasible without being solved (the relaxation's proof holds
    for it; at 100 x 2,000 ``--sovereignty`` the LP proves it in a fifth of the MILP's time).
    ``options``: more HiGHS options for the MILP (:func:`fleetc.placement.highs.solve`).
    Integral values are rounded to the integers HiGHS found them within tolerance of.
    """
    deadline = budget.deadline
    lower = program.lower.copy()
    if require_all:
        if program.blocked.any():
            return Result(values=None, optimal=False, infeasible=True)
        lower[program.z] = 1.0
    matrix = sp.vstack([program.placement, program.usage, program.linking], format="csc")
    rows = (program.placement.shape[0], program.usage.shape[0], program.linking.shape[0])
    row_lower = np.concatenate([np.zeros(rows[0]), np.full(rows[1] + rows[2], -highs.INF)])
    row_upper = np.concatenate([np.zeros(rows[0]), program.capacity, np.zeros(rows[2])])
    if integral and relaxation_first and highs.solve(
            -program.objective, lower, program.upper, matrix, row_lower, row_upper, np.zeros(program.size, dtype=bool),
            None if deadline is None else deadline - time.monotonic()).infeasible:
        return Result(values=None, optimal=False, infeasible=True)
    solution = highs.solve(
        -program.objective, lower, program.upper, matrix, row_lower, row_upper,
        np.full(program.size, integral), None if deadline is None else deadline - time.monotonic(),
        absolute_gap=absolute_gap if integral else None, nodes=nodes if integral else None,
        options=options if integral else None,
    )
    if solution.infeasible:
        return Result(values=None, optimal=False, infeasible=True)
    if solution.values is None or not is_feasible(program, solution.values, lower):
        return Result(values=None, optimal=False)
    return Result(values=solution.values, optimal=solution.optimal)


def is_feasible(
    program: Program, values: np.ndarray, lower: np.ndarray, tolerance: float = 1e-6
) -> bool:
    return bool(
        np.all(values >= lower - tolerance)
        and np.all(values <= program.upper + tolerance)
        and np.all(np.abs(program.placement @ values) <= tolerance)
        and np.all(program.usage @ values <= program.capacity + tolerance)
        and np.all(program.linking @ values <= tolerance)
    )




# --- who solves a program, and the two steps of an exact solve ---------------------------------


class ProgramSolver(Protocol):
    """How a program is solved: its LP relaxation unless ``integral``; ``require_all`` fixes
    every stage's ``z`` to 1; a MILP stops within a relative 1e-4 of optimal, or within
    ``absolute_gap``. :class:`HighsDirect` (the large path, the incremental one) and
    :class:`fleetc.placement.cvx.CvxpyProgram` (the exact path, on any MILP solver) are the
    implementations; ``tests/test_cvx.py`` holds them to the same results."""

    def __call__(self, program: Program, budget: Budget, *, require_all: bool, integral: bool,
                 absolute_gap: float | None = None) -> Result: ...


@dataclass(frozen=True)
class HighsDirect:
    """:func:`solve_program`: HiGHS direct, each MILP within ``nodes`` branch-and-bound nodes
    (None: no limit; a count, never seconds, so that every machine places the same); infeasible
    without a MILP where its LP relaxation is (``relaxation_first``)."""

    nodes: int | None = None
    relaxation_first: bool = False

    def __call__(self, program: Program, budget: Budget, *, require_all: bool, integral: bool,
                 absolute_gap: float | None = None) -> Result:
        return solve_program(program, budget, require_all=require_all, integral=integral,
                             absolute_gap=absolute_gap, nodes=self.nodes, relaxation_first=self.relaxation_first)


def every_stage(program: Program, budget: Budget, solve: ProgramSolver) -> Result:
    """The first step of every exact solve: the MILP of ``program`` with every stage placed
    (``infeasible`` when they cannot all be)."""
    return solve(program, budget, require_all=True, integral=True)


def most_valuable(program: Program, budget: Budget, solve: ProgramSolver) -> Result:
    """The second step, once every stage cannot be placed: the most valuable placement. It stops
    only within half the smallest stage value of the optimum: then no stage that still fits the
    capacity left over is left out, and the diagnosis names real misfits."""
    return solve(program, budget, require_all=False, integral=True, absolute_gap=0.5 * program.smallest_value)


def column_stages(program: Program) -> np.ndarray:
    """The stage (index in the part) each column of ``program`` belongs to: ``x``, ``y``, ``u``,
    ``z``, ``k`` and ``d`` each a stage's; -1 for ``w`` (a cluster's time-sliced units)."""
    stage = np.full(program.size, -1)
    units = len(program.unit_stage)
    stage[:units] = program.unit_stage
    stage[units: 2 * units - program.gangs] = program.unit_stage[program.gangs:]  # u: one per y
    stage[program.z] = np.arange(len(program.z))
    stage[program.k] = program.unit_stage[program.k_of]
    stage[program.d] = program.d_of
    return stage


def every_stage_else_most(program: Program, budget: Budget, solve: ProgramSolver) -> tuple[Result, bool]:
    """:func:`every_stage`, else (proven impossible) :func:`most_valuable`: the result, and
    whether it is the first step's (every stage placed)."""
    result = every_stage(program, budget, solve)
    if not result.infeasible:
        return result, True
    return most_valuable(program, budget, solve), False


def solve_neighbourhood(sub: Problem, allowed: np.ndarray, taken: np.ndarray, budget: Budget, solve: ProgramSolver,
                        *, fixed_need: Mapping[tuple[int, int], np.ndarray] | None = None,
                        cap_taken: np.ndarray | None = None) -> tuple[Program, Result]:
    """The neighbourhood MILP (the large path's :func:`fleetc.placement.colgen.reach._reach`, the
    incremental path's :func:`fleetc.placement.incremental.recompile`): the stages of ``sub`` (a
    restricted problem), each free to go to any of its clusters ``allowed`` lets it, in the room
    the stages kept fixed leave (``taken``, ``fixed_need``, ``cap_taken``: :func:`build_program`),
    every one of them placed (:func:`every_stage`). The program, for the second step
    (:func:`most_valuable`) where its caller takes one, and the result."""
    program = build_program(sub, allowed=allowed, taken=taken, fixed_need=fixed_need, cap_taken=cap_taken)
    return program, every_stage(program, budget, solve)
