"""Why a stage left out fits no cluster (:mod:`fleetc.placement.reasons`), counted in the rules'
integers (:func:`fleetc.placement.rules.overuse`): at the boundary (exactly fits, one short),
with time-sliced GPUs that come in whole nodes, and where floats of cores would drift."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.builders import make_cluster, make_fleet, make_gpu_policy, make_serving, make_stage

from fleetc.errors import PlacementError
from fleetc.model import FleetModel, Source, StageType, Team
from fleetc.placement import reasons
from fleetc.placement.optimize import place
from fleetc.placement.scoring import score_matrix


def sliced_fleet(minimum: int) -> FleetModel:
    """One node of 8 a100, its device plugin configured, 4 slots to a GPU: ``web/chat`` (24
    slots, no team) takes the node's 32 slots but 8; ``llm/embed`` asks for 4 slots a replica,
    ``minimum`` replicas per cluster, under team research's quota of 1 a100 (4 slots)."""
    cluster = make_cluster("c1", gpus=8, gpus_per_node=8, cores=256, memory_gib=2048)
    chat = make_serving("chat", pipeline="web", gpus=1, replicas=24, shared_gpu=True, cores=1, memory_gib=1)
    embed = make_serving("embed", gpus=4, replicas=3, min_replicas_per_cluster=minimum, shared_gpu=True,
                         cores=1, memory_gib=1)
    team = Team("research", "platform", ("llm",), (("a100", 1),), (), None, Source("platform.yaml", "spec.teams[0]"))
    return make_fleet((cluster,), (chat, embed), gpu_policy=make_gpu_policy(time_slicing=4), teams=(team,))


@pytest.mark.parametrize(("minimum", "reason"), [
    # 2 replicas of 4 slots fit the 8 slots left open on the time-sliced node exactly: the quota
    # binds. Counting free GPUs in whole nodes (0 of 8) said the node was full.
    (2, "1 is over team research's a100 quota (1 of 1 left)"),
    # 3 replicas need 12 slots, 4 more than are open: a whole node more, and none is free.
    (3, "1 has 0 of 8 free a100 (whole nodes of 8, as time-sliced)"),
])
def test_time_sliced_replicas_fit_the_slots_a_node_has_open(minimum: int, reason: str) -> None:
    with pytest.raises(PlacementError) as raised:
        place(sliced_fleet(minimum))
    assert raised.value.reasons == (f"0/1 clusters fit llm/embed: {reason}",)


def test_room_counts_the_open_slots_of_a_time_sliced_node() -> None:
    model = sliced_fleet(2)
    model = dataclasses.replace(model, teams=())
    replicas_at = np.array([[24], [0]])  # chat placed, embed left out
    assert reasons.unplaced(model, score_matrix(model), {}, replicas_at) == {
        1: "0/1 clusters fit llm/embed: 1 has room for 2 of 3 replicas"}


#: 2**24 cores and 3 millicores: beyond 2**23 cores a float of cores is coarser than the 1e-9
#: the old float comparison allowed, so "free cores" drifted below what an exact fit needs.
HUGE_MILLIS = 2**24 * 1000 + 3


@pytest.mark.parametrize(("filled", "reason"), [
    (HUGE_MILLIS - 5000, "1 has room for 5 of 5 replicas"),  # 5 cores free: the gang fits exactly
    (HUGE_MILLIS - 4999, "1 has 4.999 of 1.67772e+07 free cores"),  # one millicore short
])
def test_cores_at_the_boundary_are_counted_in_millicores(filled: int, reason: str) -> None:
    cluster = dataclasses.replace(make_cluster("c1", gpu_type=None, gpus=0, cores=1, memory_gib=4096),
                                  cpu_millis=HUGE_MILLIS)
    fill = dataclasses.replace(make_stage("fill", gpus=0, memory_gib=1), cpu_millis=filled)
    batch = make_stage("batch", type=StageType.DATAPROC, gpus=0, cores=1, memory_gib=1, replicas=5)
    model = make_fleet((cluster,), (fill, batch))
    replicas_at = np.array([[1], [0]])
    assert reasons.unplaced(model, score_matrix(model), {}, replicas_at) == {1: f"0/1 clusters fit llm/batch: {reason}"}
