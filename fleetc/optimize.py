"""Place every stage on the fleet with a mixed-integer linear program (cvxpy + HiGHS).

The formulation, the policy fields it reads and the large-instance path are documented in
``docs/optimizer.md``; in short, variables exist only for (stage, cluster) pairs the filters
allow (:func:`fleetc.scoring.score_matrix`) and form one vector ``v = [x | y | u | z | w | k]``:

- ``x[p]`` binary per allowed pair of a gang stage: the whole gang runs on that cluster.
- ``y[p]`` integer in [0, replicas] per allowed pair of a Deployment: replicas served there;
  ``u[p]`` binary says the cluster serves at all, with ``min * u <= y <= replicas * u``.
- ``z[s]`` binary per stage: placed (``sum(replicas placed) = replicas * z``).
- ``w[c]`` integer per cluster, only when GPUs are time-sliced: GPUs given over to shared slots.
- ``k[q]`` integer per Deployment pair that held replicas in the previous placement: replicas
  kept there (``k <= y``, ``k <= previous``), rewarded by the move cost.

Constraints (all ``scipy.sparse`` matrices times ``v``): per cluster, exclusive GPUs + ``w`` <=
usable GPUs (:func:`fleetc.verify.usable_capacity`: utilisation and defragmentation headroom),
shared slots <= ``slots_per_gpu * w``, cores and GiB <= usable; ``multiCluster`` forces
``u >= z`` on every HA cluster of a serving stage.

Objective: maximise ``sum value_s / replicas_s * (1 + total[s, c])`` per placed replica plus
``move_cost * value_s / replicas_s`` per replica left where the previous placement had it, where
``value_s = class_weight * max(total_gpus, 1)`` (a zero class weight counts as ``EPSILON``).
The reported ``objective`` and ``bound`` leave the move-cost terms out: they measure where the
stages are, not where they were, so the report never depends on the previous placement.

The stage-cluster graph of allowed pairs is split into connected components that are solved
separately and merged in stage order. Every stage must be placed, so each solve fixes ``z = 1``;
when that is infeasible, a second solve lets ``z`` go to 0 (run until within half the smallest
stage value of optimal, so no stage that still fits is left out) and the stages it leaves out
are reported, or returned unplaced with ``allow_unplaced``. Components with more than
:data:`LARGE` binary pairs take the LP-rounding path (method ``lp-round-milp``). ``bound`` is
the LP relaxation (without move costs), a valid upper bound on ``objective``. HiGHS runs single-threaded with a
fixed seed, so identical input gives an identical placement.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

import cvxpy as cp
import cvxpy.settings as cvxpy_status
import highspy
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from fleetc.errors import InternalError, PlacementError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.scoring import GIB, Scores, score_matrix
from fleetc.verify import (
    ha_clusters,
    min_replicas_per_cluster,
    slots_per_gpu,
    usable_capacity,
    uses_shared_slots,
    verify,
)

#: A previous placement: stage key -> cluster name -> replicas (see :mod:`fleetc.previous`).
Previous = Mapping[str, Mapping[str, int]]

#: The value of a stage whose workload class has weight 0: it still must be placed.
EPSILON = 1e-3

#: Binary pairs in one component above which the exact MILP gives way to LP rounding.
LARGE = 2000

#: Seconds the rounded MILP may use on a large component (less when the time limit leaves less).
ROUNDED_MILP_SECONDS = 60.0

_SOLVER_OPTIONS = {"threads": 1, "random_seed": 0, "output_flag": False}

_SOLUTION_STATUSES = (cvxpy_status.OPTIMAL, cvxpy_status.OPTIMAL_INACCURATE)
_INFEASIBLE_STATUSES = (
    cvxpy_status.INFEASIBLE,
    cvxpy_status.INFEASIBLE_INACCURATE,
    cvxpy_status.INFEASIBLE_OR_UNBOUNDED,
)
_WHOLE = 1e-6


@dataclass(frozen=True, eq=False)
class _Part:
    """One independent subproblem: stage and cluster indices into the full model."""

    stages: np.ndarray
    clusters: np.ndarray


def place(
    model: FleetModel,
    *,
    time_limit: float | None = None,
    previous: Previous | None = None,
    allow_unplaced: bool = False,
) -> Placement:
    """Place every stage of ``model``, or raise :class:`PlacementError` saying why not.

    ``time_limit`` bounds the solving in seconds; a time-limited solve that found a placement
    returns it (its ``gap`` shows how far from proven optimal it may be). ``previous`` makes
    moving a stage away from where it was cost ``model.move_cost``. With ``allow_unplaced`` the
    stages that do not fit come back with no assignments and a ``reason``.
    """
    if not model.stages:
        return Placement(stages=(), objective=0.0, bound=0.0, method="milp")
    canonical = _canonical(model)
    if canonical != model:
        solved = place(canonical, time_limit=time_limit, previous=previous, allow_unplaced=allow_unplaced)
        return replace(solved, stages=tuple(solved.of(stage.key) for stage in model.stages))
    deadline = None if time_limit is None else time.monotonic() + time_limit
    scores = score_matrix(model)
    blocked = _blocked(model, scores)
    kept = _previous_matrix(model, previous or {})
    replicas_at = np.zeros(scores.allowed.shape, dtype=int)
    objective = bound = 0.0
    methods = set()
    for part in _parts(scores.allowed):
        try:
            solved = _solve_part(model, scores, blocked, kept, part, deadline)
        except _OutOfTime:
            raise _time_limit_error(time_limit) from None
        replicas_at[np.ix_(part.stages, part.clusters)] = solved.replicas_at
        objective += solved.objective
        bound += solved.bound
        methods.add(solved.method)
    unplaced = _unplaced(model, scores, blocked, replicas_at)
    if unplaced and not allow_unplaced:
        raise PlacementError(list(unplaced.values()))
    placement = Placement(
        stages=tuple(
            _stage_placement(stage, model.clusters, replicas_at[s], scores.total[s], unplaced.get(s, ""))
            for s, stage in enumerate(model.stages)
        ),
        objective=round(objective, 6),
        bound=round(max(bound, objective), 6),
        method="lp-round-milp" if "lp-round-milp" in methods else "milp",
    )
    problems = verify(model, placement, allow_unplaced=allow_unplaced)
    if problems:
        raise InternalError(
            "the solver's placement breaks hard constraints:\n" + "\n".join(problems)
        )
    return placement


def _canonical(model: FleetModel) -> FleetModel:
    """The model with clusters sorted by name and stages by key, so the order the policies
    list them in never changes the placement (ties included)."""
    return replace(
        model,
        clusters=tuple(sorted(model.clusters, key=lambda c: c.name)),
        stages=tuple(sorted(model.stages, key=lambda s: s.key)),
    )


def _parts(allowed: np.ndarray) -> list[_Part]:
    """Connected components of the bipartite stage-cluster graph, ordered by first stage.

    Capacity only couples stages that share an allowed cluster, so each component is an
    independent problem; clusters no stage may use are left out.
    """
    n_stages, n_clusters = allowed.shape
    pair_stage, pair_cluster = np.nonzero(allowed)
    graph = sp.coo_matrix(
        (np.ones(len(pair_stage)), (pair_stage, n_stages + pair_cluster)),
        shape=(n_stages + n_clusters, n_stages + n_clusters),
    )
    _, labels = connected_components(graph, directed=False)
    parts = []
    for label in dict.fromkeys(labels[:n_stages].tolist()):
        members = np.flatnonzero(labels == label)
        parts.append(_Part(members[members < n_stages], members[members >= n_stages] - n_stages))
    return parts


def _blocked(model: FleetModel, scores: Scores) -> dict[int, str]:
    """Serving stages ``multiCluster`` makes unplaceable whatever the capacity, and why."""
    names = {c.name: i for i, c in enumerate(model.clusters)}
    blocked = {}
    for s, stage in enumerate(model.stages):
        ha = ha_clusters(model, stage)
        minimum = min_replicas_per_cluster(stage)
        filtered = [
            f"{name} is not in the fleet" if names.get(name) is None
            else f"{name} is filtered out ({scores.reasons[(s, names[name])]})"
            for name in ha
            if names.get(name) is None or not scores.allowed[s, names[name]]
        ]
        if filtered:
            blocked[s] = f"{stage.key}: multiCluster runs it on {', '.join(ha)}, but {'; '.join(filtered)}"
        elif len(ha) * minimum > stage.replicas:
            blocked[s] = (
                f"{stage.key}: multiCluster runs it on {len(ha)} clusters ({', '.join(ha)}) "
                f"with at least {minimum} replicas each, the stage has {stage.replicas}"
            )
    return blocked


def _previous_matrix(model: FleetModel, previous: Previous) -> np.ndarray:
    """(S, C) replicas each stage had on each cluster (capped at its replicas); unknown stages
    and clusters are ignored."""
    kept = np.zeros((len(model.stages), len(model.clusters)), dtype=int)
    names = {c.name: i for i, c in enumerate(model.clusters)}
    for s, stage in enumerate(model.stages):
        for name, replicas in previous.get(stage.key, {}).items():
            if name in names and replicas > 0:
                kept[s, names[name]] = min(int(replicas), stage.replicas)
    return kept


@dataclass(frozen=True, eq=False)
class _Solved:
    replicas_at: np.ndarray  # (stages, clusters) of the part
    objective: float
    bound: float
    method: str


def _solve_part(
    model: FleetModel,
    scores: Scores,
    blocked: dict[int, str],
    kept: np.ndarray,
    part: _Part,
    deadline: float | None,
) -> _Solved:
    """Solve one component: all stages placed if possible, else the best partial placement."""
    program = _build_program(model, scores, blocked, kept, part)
    method = "milp"
    result = _Result(values=None, optimal=False, infeasible=bool(program.blocked.any()))
    if not result.infeasible and program.binaries > LARGE:
        result, method = _solve_large(program, deadline), "lp-round-milp"
    if result.values is None and not result.infeasible:
        method = "milp"
        result = _solve(program, require_all=True, integral=True, deadline=deadline)
    require_all = not result.infeasible
    if result.infeasible:
        result = _solve(program, require_all=False, integral=True, deadline=deadline)
    if result.values is None:
        raise _OutOfTime
    scored = replace(program, objective=program.score)
    relaxed = _solve(scored, require_all=require_all, integral=False, deadline=deadline)
    objective = float(program.score @ result.values)
    if relaxed.optimal and relaxed.values is not None:
        bound = float(program.score @ relaxed.values)
    else:
        bound = float(np.sum(np.maximum(program.score, 0.0) * program.upper))
    return _Solved(_replicas_at(program, result.values), objective, max(bound, objective), method)


def _solve_large(program: _Program, deadline: float | None) -> _Result:
    """LP relaxation, then fix every gang the LP places whole and solve the rest as a MILP
    under a time limit; None values when that finds nothing (the caller falls back)."""
    relaxed = _solve(program, require_all=True, integral=False, deadline=deadline)
    if relaxed.values is None:
        return relaxed
    lower = program.lower.copy()
    whole = np.flatnonzero(relaxed.values[: program.gangs] >= 1.0 - _WHOLE)
    lower[whole] = 1.0
    budget = ROUNDED_MILP_SECONDS
    if deadline is not None:
        budget = min(budget, max(0.0, deadline - time.monotonic()))
    fixed = replace(program, lower=lower)
    result = _solve(fixed, require_all=True, integral=True, deadline=time.monotonic() + budget)
    return result if result.values is not None else _Result(values=None, optimal=False)


@dataclass(frozen=True, eq=False)
class _Columns:
    """Where each part of ``v = [x | y | u | z | w | k]`` lives; pairs sorted by stage, cluster."""

    x_stage: np.ndarray
    x_cluster: np.ndarray
    y_stage: np.ndarray
    y_cluster: np.ndarray
    stages: int
    shared: int  # w entries: one per cluster when GPUs are time-sliced, else none
    keep: np.ndarray  # y pairs (indices) that held replicas in the previous placement

    @classmethod
    def of(cls, stages: tuple[Stage, ...], allowed: np.ndarray, shared: int, kept: np.ndarray) -> _Columns:
        pair_stage, pair_cluster = np.nonzero(allowed)
        gang = np.array([s.is_gang for s in stages], dtype=bool)[pair_stage]
        y_stage, y_cluster = pair_stage[~gang], pair_cluster[~gang]
        keep = np.flatnonzero(kept[y_stage, y_cluster] > 0)
        return cls(pair_stage[gang], pair_cluster[gang], y_stage, y_cluster, len(stages), shared, keep)

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
    def size(self) -> int:
        return self.units + len(self.y_stage) + self.stages + self.shared + len(self.keep)


@dataclass(frozen=True, eq=False)
class _Program:
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


def _stage_values(model: FleetModel, stages: tuple[Stage, ...]) -> np.ndarray:
    """Each stage's worth: its class weight (``EPSILON`` if 0) times its GPUs (at least 1)."""
    return np.array(
        [(model.class_weights.of(s.workload_class) or EPSILON) * max(s.total_gpus, 1) for s in stages],
        dtype=float,
    )


def _demand(stages: tuple[Stage, ...]) -> np.ndarray:
    """(3, S) per-replica demand: GPUs, cores, GiB."""
    return (
        np.array([[s.gpus, s.cpu_millis / 1000, s.memory_bytes / GIB] for s in stages], dtype=float)
        .reshape(len(stages), 3)
        .T
    )


def _capacity(model: FleetModel, clusters: tuple[Cluster, ...]) -> np.ndarray:
    """(3, C) usable capacity: GPUs, cores, GiB."""
    usable = [usable_capacity(model, c) for c in clusters]
    return (
        np.array([[g, millis / 1000, memory / GIB] for g, millis, memory in usable], dtype=float)
        .reshape(len(clusters), 3)
        .T
    )


def _build_program(
    model: FleetModel, scores: Scores, blocked: dict[int, str], kept: np.ndarray, part: _Part
) -> _Program:
    stages = tuple(model.stages[s] for s in part.stages)
    clusters = tuple(model.clusters[c] for c in part.clusters)
    allowed = scores.allowed[np.ix_(part.stages, part.clusters)]
    total = scores.total[np.ix_(part.stages, part.clusters)]
    part_kept = kept[np.ix_(part.stages, part.clusters)]
    slots = slots_per_gpu(model)
    shared_stage = np.array([uses_shared_slots(model, s) for s in stages], dtype=bool)
    columns = _Columns.of(stages, allowed, len(clusters) if shared_stage.any() else 0, part_kept)
    replicas = np.array([s.replicas for s in stages], dtype=float)
    unit_stage = np.concatenate([columns.x_stage, columns.y_stage])
    unit_cluster = np.concatenate([columns.x_cluster, columns.y_cluster])
    unit_replicas = np.concatenate([replicas[columns.x_stage], np.ones(len(columns.y_stage))])
    values = _stage_values(model, stages)
    capacity = _capacity(model, clusters)

    score = np.zeros(columns.size)
    per_replica = values[unit_stage] / replicas[unit_stage]
    score[: columns.units] = per_replica * (1.0 + total[unit_stage, unit_cluster]) * unit_replicas
    objective = score.copy()
    gang_kept = part_kept[columns.x_stage, columns.x_cluster] / replicas[columns.x_stage]
    objective[: len(columns.x_stage)] += model.move_cost * values[columns.x_stage] * gang_kept
    objective[columns.k] = model.move_cost * per_replica[len(columns.x_stage) + columns.keep]

    lower = np.zeros(columns.size)
    upper = np.ones(columns.size)
    upper[columns.y] = replicas[columns.y_stage]
    is_blocked = np.array([int(s) in blocked for s in part.stages], dtype=bool)
    upper[columns.z[is_blocked]] = 0.0
    if columns.shared:
        upper[columns.w] = capacity[0]
    upper[columns.k] = part_kept[columns.y_stage[columns.keep], columns.y_cluster[columns.keep]]
    usage, usable = _usage_rows(columns, unit_stage, unit_cluster, unit_replicas, _demand(stages),
                                shared_stage, capacity, slots)
    return _Program(
        unit_stage=unit_stage,
        unit_cluster=unit_cluster,
        unit_replicas=unit_replicas,
        objective=objective,
        placement=_placement_rows(columns, unit_stage, unit_replicas, replicas),
        usage=usage,
        capacity=usable,
        linking=_linking_rows(model, columns, stages, clusters, replicas),
        lower=lower,
        upper=upper,
        z=columns.z,
        blocked=is_blocked,
        clusters=len(clusters),
        gangs=len(columns.x_stage),
        smallest_value=float(values.min()),
        score=score,
    )


def _sparse(
    entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]], shape: tuple[int, int]
) -> sp.csr_matrix:
    """A CSR matrix from (values, rows, columns) triplets."""
    data, rows, cols = (np.concatenate(part) for part in zip(*entries, strict=True))
    return sp.csr_matrix((data, (rows, cols)), shape=shape)


def _placement_rows(
    columns: _Columns, unit_stage: np.ndarray, unit_replicas: np.ndarray, replicas: np.ndarray
) -> sp.csr_matrix:
    """One row per stage: replicas placed - replicas * z == 0."""
    stages = np.arange(columns.stages)
    return _sparse(
        [(unit_replicas, unit_stage, np.arange(columns.units)), (-replicas, stages, columns.z)],
        (columns.stages, columns.size),
    )


def _usage_rows(
    columns: _Columns,
    unit_stage: np.ndarray,
    unit_cluster: np.ndarray,
    unit_replicas: np.ndarray,
    demand: np.ndarray,
    shared_stage: np.ndarray,
    capacity: np.ndarray,
    slots: int,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``r * C + c`` for resource ``r`` (GPUs, cores, GiB) of cluster ``c``, then (with
    time-slicing) one slot row per cluster: ``slots used - slots_per_gpu * w <= 0``. A shared
    stage's GPUs count as slots, and the GPU row counts ``w`` instead."""
    clusters = capacity.shape[1]
    units = np.arange(columns.units)
    shared_unit = shared_stage[unit_stage]
    gpus = demand[0, unit_stage] * unit_replicas
    entries = [
        (np.where(shared_unit, 0.0, gpus), unit_cluster, units),
        *((demand[r, unit_stage] * unit_replicas, r * clusters + unit_cluster, units) for r in (1, 2)),
    ]
    rows = 3 * clusters
    usable = capacity.ravel()
    if columns.shared:
        cluster_ids = np.arange(clusters)
        entries += [
            (np.ones(clusters), cluster_ids, columns.w),
            (np.where(shared_unit, gpus, 0.0), rows + unit_cluster, units),
            (np.full(clusters, -float(slots)), rows + cluster_ids, columns.w),
        ]
        rows += clusters
        usable = np.concatenate([usable, np.zeros(clusters)])
    return _sparse(entries, (rows, columns.size)), usable


def _linking_rows(
    model: FleetModel,
    columns: _Columns,
    stages: tuple[Stage, ...],
    clusters: tuple[Cluster, ...],
    replicas: np.ndarray,
) -> sp.csr_matrix:
    """Rows ``<= 0``: ``y - replicas * u`` and ``min * u - y`` per Deployment pair, ``z - u`` per
    pair on a ``multiCluster`` cluster, ``k - y`` per kept pair."""
    n_y = len(columns.y_stage)
    minimum = np.array([min_replicas_per_cluster(s) for s in stages], dtype=float)[columns.y_stage]
    rows = np.arange(n_y)
    ha_of = [set(ha_clusters(model, stage)) for stage in stages]
    ha = np.array(
        [clusters[c].name in ha_of[s] for s, c in zip(columns.y_stage, columns.y_cluster, strict=True)],
        dtype=bool,
    )
    ha_pairs = np.flatnonzero(ha)
    ha_rows = 2 * n_y + np.arange(len(ha_pairs))
    keep_rows = 2 * n_y + len(ha_pairs) + np.arange(len(columns.keep))
    return _sparse(
        [
            (np.ones(n_y), rows, columns.y),
            (-replicas[columns.y_stage], rows, columns.u),
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
class _Result:
    """What one solve produced: ``values`` of ``v`` (None when there are none) and whether they
    are proven optimal (as opposed to the best found before the time limit)."""

    values: np.ndarray | None
    optimal: bool
    infeasible: bool = False


def _solve(
    program: _Program, *, require_all: bool, integral: bool, deadline: float | None
) -> _Result:
    """Solve the MILP (or its LP relaxation); ``require_all`` fixes every stage's ``z`` to 1.

    Integral values are rounded to the integers HiGHS found them within tolerance of.
    """
    _silence_highs_banner()
    lower = program.lower.copy()
    if require_all:
        if program.blocked.any():
            return _Result(values=None, optimal=False, infeasible=True)
        lower[program.z] = 1.0
    v = cp.Variable(program.size, integer=integral, bounds=[lower, program.upper])
    constraints = [program.placement @ v == 0, program.usage @ v <= program.capacity]
    if program.linking.shape[0]:
        constraints.append(program.linking @ v <= 0)
    problem = cp.Problem(cp.Maximize(program.objective @ v), constraints)
    options: dict[str, float | int | bool] = dict(_SOLVER_OPTIONS)
    if deadline is not None:
        options["time_limit"] = max(0.01, deadline - time.monotonic())
    if not require_all:
        # Stop only within half the smallest stage value of the optimum: then no stage that
        # still fits the capacity left over is left out, and the diagnosis names real misfits.
        options["mip_rel_gap"] = 0.0
        options["mip_abs_gap"] = 0.5 * program.smallest_value
    try:
        with warnings.catch_warnings():  # the status is handled below, not by a warning
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=cp.HIGHS, **options)
    except cp.error.SolverError as err:
        raise InternalError(f"the HiGHS solver failed: {err}") from err
    return _result(program, problem.status, v.value, lower, integral)


@functools.cache
def _silence_highs_banner() -> None:
    """Create the process's first HiGHS object with file descriptor 1 on /dev/null.

    HiGHS prints a banner straight to the process's stdout the first time a solver object is
    created (cvxpy creates one per solve), and fleetc's output must hold only fleetc's text.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _result(
    program: _Program, status: str, value: np.ndarray | None, lower: np.ndarray, integral: bool
) -> _Result:
    if status in _INFEASIBLE_STATUSES:
        return _Result(values=None, optimal=False, infeasible=True)
    if value is None:
        if status == cvxpy_status.USER_LIMIT:
            return _Result(values=None, optimal=False)
        raise InternalError(f"the HiGHS solver ended with status '{status}' and no placement")
    values = np.rint(value) if integral else np.asarray(value, dtype=float)
    if status in _SOLUTION_STATUSES:
        return _Result(values=values, optimal=True)
    if status == cvxpy_status.USER_LIMIT:  # HiGHS reports its last iterate, feasible or not
        return _Result(values=values if _feasible(program, values, lower) else None, optimal=False)
    raise InternalError(f"the HiGHS solver ended with status '{status}'")


def _feasible(
    program: _Program, values: np.ndarray, lower: np.ndarray, tolerance: float = 1e-6
) -> bool:
    return bool(
        np.all(values >= lower - tolerance)
        and np.all(values <= program.upper + tolerance)
        and np.all(np.abs(program.placement @ values) <= tolerance)
        and np.all(program.usage @ values <= program.capacity + tolerance)
        and np.all(program.linking @ values <= tolerance)
    )


class _OutOfTime(Exception):
    """A solve ended at its limits without a placement."""


def _time_limit_error(time_limit: float | None) -> PlacementError:
    limit = "its limits" if time_limit is None else f"the time limit of {time_limit:g}s"
    return PlacementError([f"the solver found no placement within {limit}"])


def _replicas_at(program: _Program, values: np.ndarray) -> np.ndarray:
    replicas_at = np.zeros((len(program.blocked), program.clusters), dtype=int)
    units = values[: len(program.unit_stage)] * program.unit_replicas
    np.add.at(replicas_at, (program.unit_stage, program.unit_cluster), np.rint(units).astype(int))
    return replicas_at


def _stage_placement(
    stage: Stage, clusters: tuple[Cluster, ...], replicas: np.ndarray, total: np.ndarray, reason: str
) -> StagePlacement:
    assignments = tuple(
        sorted(
            (
                Assignment(clusters[c].name, int(replicas[c]), int(replicas[c]) * stage.gpus)
                for c in np.flatnonzero(replicas)
            ),
            key=lambda a: a.cluster,
        )
    )
    placed = int(replicas.sum())
    score = float(replicas @ total) / placed if placed else 0.0
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(score, 6), reason=reason)


def _unplaced(
    model: FleetModel, scores: Scores, blocked: dict[int, str], replicas_at: np.ndarray
) -> dict[int, str]:
    """Each stage ``replicas_at`` leaves out, and why: its ``multiCluster`` conflict, else
    kube-scheduler style against the capacity the placed stages leave free."""
    left_out = [s for s in range(len(model.stages)) if not replicas_at[s].any()]
    if not left_out:
        return {}
    total = _capacity(model, model.clusters)
    free = total - _used(model, replicas_at)
    return {s: blocked.get(s) or _unplaced_reason(model, scores, s, free, total) for s in left_out}


def _used(model: FleetModel, replicas_at: np.ndarray) -> np.ndarray:
    """(3, C) capacity (GPUs, cores, GiB) ``replicas_at`` uses; shared slots count as whole
    GPUs per ``slots_per_gpu`` started."""
    demand = _demand(model.stages)
    shared = np.array([uses_shared_slots(model, s) for s in model.stages], dtype=bool)
    used = np.einsum("rs,sc->rc", demand, replicas_at)
    slots = (demand[0] * shared) @ replicas_at
    used[0] = (demand[0] * ~shared) @ replicas_at + np.ceil(slots / slots_per_gpu(model) - 1e-9)
    return used


def _unplaced_reason(
    model: FleetModel, scores: Scores, s: int, free: np.ndarray, total: np.ndarray
) -> str:
    """``0/3 clusters fit p/s: 2 have no a100, 1 has 8 of 16 free a100`` for stage index ``s``,
    against the (3, C) capacity ``free`` the placed stages leave of ``total`` (a
    ``multiCluster`` conflict is reported by :func:`_blocked` instead)."""
    stage = model.stages[s]
    why = [
        _capacity_reason(model, stage, cluster, free[:, c], total[:, c])
        if scores.allowed[s, c]
        else scores.reasons[(s, c)]
        for c, cluster in enumerate(model.clusters)
    ]
    groups = sorted(Counter(why).items(), key=lambda item: (-item[1], item[0]))
    detail = ", ".join(_counted(count, reason) for reason, count in groups)
    return f"0/{len(model.clusters)} clusters fit {stage.key}: {detail or 'the fleet has no clusters'}"


def _counted(count: int, reason: str) -> str:
    """``2 have no a100``, ``1 is too small: ...``: the verb agrees with the count."""
    is_state = reason.startswith(("too small", "cordoned", "in "))
    singular, plural = ("is", "are") if is_state else ("has", "have")
    return f"{count} {singular if count == 1 else plural} {reason}"


def _capacity_reason(
    model: FleetModel, stage: Stage, cluster: Cluster, free: np.ndarray, total: np.ndarray
) -> str:
    """What ``cluster`` lacks for ``stage`` given ``free`` of ``total`` (GPUs, cores, GiB).

    A gang needs all its replicas at once; a Deployment needs its per-cluster minimum here and
    is short overall when the clusters together have room for fewer replicas than it has.
    Time-sliced GPUs count ``1 / slots_per_gpu`` of a GPU per requested GPU.
    """
    need = stage.replicas if stage.is_gang else min_replicas_per_cluster(stage)
    demand = _demand((stage,))[:, 0]
    if uses_shared_slots(model, stage):
        demand[0] /= slots_per_gpu(model)
    for r, (have, capacity) in enumerate(zip(free, total, strict=True)):
        required = need * demand[r]
        if have < (math.ceil(required - 1e-9) if r == 0 else required) - 1e-9:
            return _free_of(r, have, capacity, cluster)
    return f"room for {_fitting_replicas(stage, demand, free)} of {stage.replicas} replicas"


def _free_of(resource: int, free: float, total: float, cluster: Cluster) -> str:
    if resource == 0:
        return f"{free:g} of {total:g} free {cluster.gpu_type}"
    if resource == 1:
        return f"{round(free, 3):g} of {round(total, 3):g} free cores"
    return f"{round(free, 2):g}Gi of {round(total, 2):g}Gi free memory"


def _fitting_replicas(stage: Stage, demand: np.ndarray, free: np.ndarray) -> int:
    needed = demand > 0
    per_resource = np.floor(free[needed] / demand[needed] + 1e-9)
    return int(min(stage.replicas, *per_resource)) if needed.any() else stage.replicas
