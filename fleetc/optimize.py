"""Place every stage on the fleet with a mixed-integer linear program (cvxpy + HiGHS).

Formulation. Variables exist only for (stage, cluster) pairs the filters allow
(:func:`fleetc.scoring.score_matrix`); they form one vector ``v = [x | y | u | z]``:

- ``x[p]`` binary, one per allowed pair of a gang stage: the whole gang runs on that cluster.
- ``y[p]`` integer in [0, replicas], one per allowed pair of a Deployment: replicas served there;
  ``u[p]`` binary says the cluster serves at all, with ``min * u <= y <= replicas * u``
  (``min`` from :func:`fleetc.verify.min_replicas_per_cluster`).
- ``z[s]`` binary, one per stage: placed. ``replicas * sum(x) = replicas * z`` for gangs (at
  most one cluster), ``sum(y) = replicas * z`` for Deployments.
- Capacity, per cluster and resource (GPUs, cores, GiB; floats in natural units keep the
  matrix well conditioned): the sum of replicas x per-replica demand <= the cluster's total.
  A cluster has one GPU type, so its GPU count is its capacity for that type.

Objective: maximise ``sum value_s / replicas_s * (1 + total[s, c])`` per placed replica, where
``value_s = class_weight * max(total_gpus, 1)`` (a zero class weight counts as ``EPSILON``), so
big GPU jobs matter more and placing a stage always gains at least ``value_s``.

Every stage must be placed, so the main solve fixes ``z = 1``. When that is infeasible, a second
solve lets ``z`` go to 0 (same objective, run until it is within half the smallest stage value
of optimal, so no stage that still fits is left out) and the stages it leaves out are reported
kube-scheduler style against the capacity the placed stages leave free. ``bound`` is
the LP relaxation of the main solve (a valid upper bound on ``objective`` in the same units).
All constraints are ``scipy.sparse`` matrices times ``v``; HiGHS runs single-threaded with a
fixed seed, so identical input gives an identical placement.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections import Counter
from dataclasses import dataclass

import cvxpy as cp
import cvxpy.settings as cvxpy_status
import highspy
import numpy as np
import scipy.sparse as sp

from fleetc.errors import InternalError, PlacementError
from fleetc.model import Assignment, Cluster, FleetModel, Placement, Stage, StagePlacement
from fleetc.scoring import GIB, Scores, score_matrix
from fleetc.verify import min_replicas_per_cluster, verify

#: The value of a stage whose workload class has weight 0: it still must be placed.
EPSILON = 1e-3

_SOLVER_OPTIONS = {"threads": 1, "random_seed": 0, "output_flag": False}

_SOLUTION_STATUSES = (cvxpy_status.OPTIMAL, cvxpy_status.OPTIMAL_INACCURATE)
_INFEASIBLE_STATUSES = (
    cvxpy_status.INFEASIBLE,
    cvxpy_status.INFEASIBLE_INACCURATE,
    cvxpy_status.INFEASIBLE_OR_UNBOUNDED,
)


@dataclass(frozen=True, eq=False)
class _Program:
    """The MILP over ``v = [x | y | u | z]`` in matrix form (see the module docstring).

    ``unit_*`` describe the first ``x`` + ``y`` entries: which stage and cluster each belongs
    to and how many replicas one unit of it is (the gang's replicas for ``x``, 1 for ``y``).
    """

    unit_stage: np.ndarray
    unit_cluster: np.ndarray
    unit_replicas: np.ndarray
    objective: np.ndarray
    placement: sp.csr_matrix  # placement @ v == 0, one row per stage
    usage: sp.csr_matrix  # usage @ v <= capacity, rows resource-major: GPUs, cores, GiB
    capacity: np.ndarray
    linking: sp.csr_matrix  # linking @ v <= 0: min * u <= y <= replicas * u
    upper: np.ndarray
    stages: int
    smallest_value: float

    @property
    def size(self) -> int:
        return len(self.objective)


def place(model: FleetModel, *, time_limit: float | None = None) -> Placement:
    """Place every stage of ``model``, or raise :class:`PlacementError` saying why not.

    ``time_limit`` bounds each HiGHS solve in seconds; a time-limited solve that found a
    placement returns it (its ``gap`` shows how far from proven optimal it may be).
    """
    if not model.stages:
        return Placement(stages=(), objective=0.0, bound=0.0, method="milp")
    scores = score_matrix(model)
    program = _build_program(model, scores)
    result = _solve(program, require_all=True, integral=True, time_limit=time_limit)
    if result.infeasible:
        raise PlacementError(_diagnose(model, scores, program, time_limit))
    if result.values is None:
        raise _time_limit_error(time_limit)
    values = result.values
    objective = round(float(program.objective @ values), 6)
    bound = round(_bound(program, scores, model, time_limit), 6)
    placement = Placement(
        stages=_stage_placements(model, scores, program, values),
        objective=objective,
        bound=max(bound, objective),
        method="milp",
    )
    problems = verify(model, placement)
    if problems:
        raise InternalError(
            "the solver's placement breaks hard constraints:\n" + "\n".join(problems)
        )
    return placement


def _stage_values(model: FleetModel) -> np.ndarray:
    """Each stage's worth: its class weight (``EPSILON`` if 0) times its GPUs (at least 1)."""
    return np.array(
        [
            (model.class_weights.of(s.workload_class) or EPSILON) * max(s.total_gpus, 1)
            for s in model.stages
        ],
        dtype=float,
    )


def _demand(stages: tuple[Stage, ...]) -> np.ndarray:
    """(3, S) per-replica demand: GPUs, cores, GiB."""
    return (
        np.array([[s.gpus, s.cpu_millis / 1000, s.memory_bytes / GIB] for s in stages], dtype=float)
        .reshape(len(stages), 3)
        .T
    )


def _capacity(clusters: tuple[Cluster, ...]) -> np.ndarray:
    """(3, C) capacity: GPUs, cores, GiB."""
    return (
        np.array(
            [[c.gpus, c.cpu_millis / 1000, c.memory_bytes / GIB] for c in clusters], dtype=float
        )
        .reshape(len(clusters), 3)
        .T
    )


@dataclass(frozen=True, eq=False)
class _Columns:
    """Where each part of ``v = [x | y | u | z]`` lives; pairs are sorted by stage, then cluster."""

    x_stage: np.ndarray
    x_cluster: np.ndarray
    y_stage: np.ndarray
    y_cluster: np.ndarray
    stages: int

    @classmethod
    def of(cls, model: FleetModel, allowed: np.ndarray) -> _Columns:
        pair_stage, pair_cluster = np.nonzero(allowed)
        gang = np.array([s.is_gang for s in model.stages], dtype=bool)[pair_stage]
        return cls(
            pair_stage[gang],
            pair_cluster[gang],
            pair_stage[~gang],
            pair_cluster[~gang],
            len(model.stages),
        )

    @property
    def units(self) -> int:
        """The ``x`` and ``y`` entries: the ones that carry replicas."""
        return len(self.x_stage) + len(self.y_stage)

    @property
    def size(self) -> int:
        return self.units + len(self.y_stage) + self.stages

    @property
    def y(self) -> np.ndarray:
        return len(self.x_stage) + np.arange(len(self.y_stage))

    @property
    def u(self) -> np.ndarray:
        return self.units + np.arange(len(self.y_stage))

    @property
    def z(self) -> np.ndarray:
        return self.units + len(self.y_stage) + np.arange(self.stages)


def _build_program(model: FleetModel, scores: Scores) -> _Program:
    columns = _Columns.of(model, scores.allowed)
    replicas = np.array([s.replicas for s in model.stages], dtype=float)
    unit_stage = np.concatenate([columns.x_stage, columns.y_stage])
    unit_cluster = np.concatenate([columns.x_cluster, columns.y_cluster])
    unit_replicas = np.concatenate([replicas[columns.x_stage], np.ones(len(columns.y_stage))])
    values = _stage_values(model)

    objective = np.zeros(columns.size)
    per_replica = (
        values[unit_stage] / replicas[unit_stage] * (1.0 + scores.total[unit_stage, unit_cluster])
    )
    objective[: columns.units] = per_replica * unit_replicas

    upper = np.ones(columns.size)
    upper[columns.y] = replicas[columns.y_stage]
    return _Program(
        unit_stage=unit_stage,
        unit_cluster=unit_cluster,
        unit_replicas=unit_replicas,
        objective=objective,
        placement=_placement_rows(columns, unit_stage, unit_replicas, replicas),
        usage=_usage_rows(
            columns,
            unit_stage,
            unit_cluster,
            unit_replicas,
            _demand(model.stages),
            len(model.clusters),
        ),
        capacity=_capacity(model.clusters).ravel(),
        linking=_linking_rows(columns, model.stages, replicas),
        upper=upper,
        stages=columns.stages,
        smallest_value=float(values.min()),
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
    clusters: int,
) -> sp.csr_matrix:
    """Row ``r * C + c``: how much of resource ``r`` (GPUs, cores, GiB) cluster ``c`` runs."""
    units = np.arange(columns.units)
    return _sparse(
        [
            (demand[r, unit_stage] * unit_replicas, r * clusters + unit_cluster, units)
            for r in range(3)
        ],
        (3 * clusters, columns.size),
    )


def _linking_rows(
    columns: _Columns, stages: tuple[Stage, ...], replicas: np.ndarray
) -> sp.csr_matrix:
    """``y - replicas * u <= 0`` then ``min * u - y <= 0``, one row each per Deployment pair."""
    n_y = len(columns.y_stage)
    minimum = np.array([min_replicas_per_cluster(s) for s in stages], dtype=float)[columns.y_stage]
    rows = np.arange(n_y)
    return _sparse(
        [
            (np.ones(n_y), rows, columns.y),
            (-replicas[columns.y_stage], rows, columns.u),
            (minimum, n_y + rows, columns.u),
            (-np.ones(n_y), n_y + rows, columns.y),
        ],
        (2 * n_y, columns.size),
    )


@dataclass(frozen=True, eq=False)
class _Result:
    """What one solve produced: ``values`` of ``v`` (None when there are none) and whether they
    are proven optimal (as opposed to the best found before the time limit)."""

    values: np.ndarray | None
    optimal: bool
    infeasible: bool = False


def _solve(
    program: _Program, *, require_all: bool, integral: bool, time_limit: float | None
) -> _Result:
    """Solve the MILP (or its LP relaxation); ``require_all`` fixes every stage's ``z`` to 1.

    Integral values are rounded to the integers HiGHS found them within tolerance of.
    """
    _silence_highs_banner()
    lower = np.zeros(program.size)
    if require_all:
        lower[program.size - program.stages :] = 1.0
    v = cp.Variable(program.size, integer=integral, bounds=[lower, program.upper])
    constraints = [program.placement @ v == 0, program.usage @ v <= program.capacity]
    if program.linking.shape[0]:
        constraints.append(program.linking @ v <= 0)
    problem = cp.Problem(cp.Maximize(program.objective @ v), constraints)
    options: dict[str, float | int | bool] = dict(_SOLVER_OPTIONS)
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
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


def _time_limit_error(time_limit: float | None) -> PlacementError:
    limit = "its limits" if time_limit is None else f"the time limit of {time_limit:g}s"
    return PlacementError([f"the solver found no placement within {limit}"])


def _bound(program: _Program, scores: Scores, model: FleetModel, time_limit: float | None) -> float:
    """The LP relaxation's optimum, or the trivial bound (every stage at its best score) when
    the relaxation did not finish."""
    relaxed = _solve(program, require_all=True, integral=False, time_limit=time_limit)
    if relaxed.optimal and relaxed.values is not None:
        return float(program.objective @ relaxed.values)
    best = np.max(np.where(scores.allowed, scores.total, 0.0), axis=1)
    return float(np.sum(_stage_values(model) * (1.0 + best)))


def _stage_placements(
    model: FleetModel, scores: Scores, program: _Program, values: np.ndarray
) -> tuple[StagePlacement, ...]:
    replicas_at = np.zeros(scores.allowed.shape, dtype=int)
    units = values[: len(program.unit_stage)] * program.unit_replicas
    np.add.at(replicas_at, (program.unit_stage, program.unit_cluster), np.rint(units).astype(int))
    return tuple(
        _stage_placement(stage, model.clusters, replicas_at[s], scores.total[s])
        for s, stage in enumerate(model.stages)
    )


def _stage_placement(
    stage: Stage, clusters: tuple[Cluster, ...], replicas: np.ndarray, total: np.ndarray
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
    return StagePlacement(stage=stage.key, assignments=assignments, score=round(score, 6))


def _diagnose(
    model: FleetModel, scores: Scores, program: _Program, time_limit: float | None
) -> list[str]:
    """Why placing every stage is impossible: the stages a best partial placement leaves out."""
    partial = _solve(program, require_all=False, integral=True, time_limit=time_limit).values
    if partial is None:
        raise _time_limit_error(time_limit)
    free = (program.capacity - program.usage @ partial).reshape(3, len(model.clusters))
    placed = partial[program.size - program.stages :]
    reasons = [
        _unplaced_reason(stage, model.clusters, scores, s, free)
        for s, stage in enumerate(model.stages)
        if placed[s] < 0.5
    ]
    if not reasons:
        raise InternalError("the solver found every stage placeable after calling it infeasible")
    return reasons


def _unplaced_reason(
    stage: Stage, clusters: tuple[Cluster, ...], scores: Scores, s: int, free: np.ndarray
) -> str:
    """``0/3 clusters fit p/s: 2 have no a100, 1 has 8 of 16 free a100`` for stage index ``s``.

    ``free`` is the (3, C) capacity (GPUs, cores, GiB) the placed stages leave.
    """
    why = [
        _capacity_reason(stage, cluster, free[:, c], _capacity((cluster,))[:, 0])
        if scores.allowed[s, c]
        else scores.reasons[(s, c)]
        for c, cluster in enumerate(clusters)
    ]
    groups = sorted(Counter(why).items(), key=lambda item: (-item[1], item[0]))
    detail = ", ".join(_counted(count, reason) for reason, count in groups)
    return f"0/{len(clusters)} clusters fit {stage.key}: {detail or 'the fleet has no clusters'}"


def _counted(count: int, reason: str) -> str:
    """``2 have no a100``, ``1 is too small: ...``: the verb agrees with the count."""
    singular, plural = ("is", "are") if reason.startswith("too small") else ("has", "have")
    return f"{count} {singular if count == 1 else plural} {reason}"


def _capacity_reason(stage: Stage, cluster: Cluster, free: np.ndarray, total: np.ndarray) -> str:
    """What ``cluster`` lacks for ``stage`` given ``free`` of ``total`` (GPUs, cores, GiB).

    A gang needs all its replicas at once; a Deployment needs its per-cluster minimum here and
    is short overall when the clusters together have room for fewer replicas than it has.
    """
    need = stage.replicas if stage.is_gang else min_replicas_per_cluster(stage)
    demand = _demand((stage,))[:, 0]
    for r, (have, capacity) in enumerate(zip(free, total, strict=True)):
        if have < need * demand[r] - 1e-9:
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
