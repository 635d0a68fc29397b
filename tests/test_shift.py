"""The large path's shift MILP (:func:`fleetc.placement.colgen.shift._shift`): where a GPU type
is full, a stage left out of it is placed by moving a stage that may run on another type off
it, when the reach neighbourhood grew too large (``bench.generate --clusters 1000 --stages
20000 --load 0.9 --diverse`` left 5 serving stages out before it)."""

from __future__ import annotations

import numpy as np
from support.builders import make_cluster, make_fleet, make_stage

from fleetc.model import Assignment, FleetModel, Placement, StagePlacement, StageType
from fleetc.placement import colgen
from fleetc.placement.colgen.room import _Rounding
from fleetc.placement.colgen.shift import _shift
from fleetc.placement.problem import Problem, problems
from fleetc.placement.scoring import score_matrix
from fleetc.placement.verify import verify


def full_t4_fleet() -> FleetModel:
    """One t4 and one a100 cluster of 8 GPUs; a sweep that may run on either, a t4-only
    serving Deployment, and a100 training that leaves the a100 cluster 4 GPUs."""
    clusters = (make_cluster("t", gpus=8, gpu_type="t4"), make_cluster("a", gpus=8, gpu_type="a100"))
    stages = (make_stage("sweep", gpus=4, gpu_types=("t4", "a100")),
              make_stage("train", gpus=4, gpu_type="a100"),
              make_stage("serve", type=StageType.DEPLOYMENT, gpus=1, gpu_type="t4", replicas=6,
                         min_replicas_per_cluster=2))
    return make_fleet(clusters, stages)


def only_problem(model: FleetModel) -> Problem:
    (problem,), _ = problems(model, score_matrix(model), {})
    return problem


def replicas(problem: Problem, where: dict[str, tuple[str, int]]) -> np.ndarray:
    """(S, C) replicas placing each stage named in ``where`` on one cluster."""
    stage = {s.name: i for i, s in enumerate(problem.stages)}
    cluster = {c.name: i for i, c in enumerate(problem.clusters)}
    replicas_at = np.zeros((len(problem.stages), len(problem.clusters)), dtype=np.int32)
    for name, (on, count) in where.items():
        replicas_at[stage[name], cluster[on]] = count
    return replicas_at


def placement_of(problem: Problem, replicas_at: np.ndarray) -> Placement:
    return Placement(tuple(StagePlacement(stage.key, tuple(Assignment(problem.clusters[c].name, int(replicas_at[s, c]),
                                                                      stage.gpus * int(replicas_at[s, c]))
                                                           for c in np.flatnonzero(replicas_at[s])), 0.5)
                           for s, stage in enumerate(problem.stages) if replicas_at[s].any()), 1.0, 1.0, "milp")


def test_a_stage_left_out_of_a_full_gpu_type_is_placed_by_shifting_one_that_may_run_elsewhere() -> None:
    model = full_t4_fleet()
    problem = only_problem(model)
    # the sweep on t4 leaves 4 t4 GPUs, too few for the 6 serving replicas
    replicas_at = replicas(problem, {"sweep": ("t", 1), "train": ("a", 1)})
    rounding = _Rounding(problem, colgen.large._large(problem), None, None)  # type: ignore[arg-type]
    assert _shift(rounding, replicas_at, problem.blocked)
    placed = {(problem.stages[s].name, problem.clusters[c].name): int(replicas_at[s, c])
              for s, c in zip(*np.nonzero(replicas_at), strict=True)}
    assert placed == {("sweep", "a"): 1, ("train", "a"): 1, ("serve", "t"): 6}
    assert verify(model, placement_of(problem, replicas_at)) == []


def test_a_shift_that_cannot_place_them_all_changes_nothing() -> None:
    # a second a100 stage fills the a100 cluster: the sweep has nowhere to shift to
    model = full_t4_fleet()
    blocked = make_fleet(model.clusters, (*model.stages, make_stage("tune", gpus=4, gpu_type="a100")))
    problem = only_problem(blocked)
    replicas_at = replicas(problem, {"sweep": ("t", 1), "train": ("a", 1), "tune": ("a", 1)})
    before = replicas_at.copy()
    rounding = _Rounding(problem, colgen.large._large(problem), None, None)  # type: ignore[arg-type]
    assert not _shift(rounding, replicas_at, problem.blocked)
    assert (replicas_at == before).all()

