"""How a stage's replicas are split: all placed, a gang on one cluster, a serving stage's
per-cluster minimum on each of its HA clusters, fewer while it runs degraded."""

from __future__ import annotations

from collections.abc import Sequence

from fleetc.model import FleetModel, Stage, StageType, degraded_platforms


def min_replicas_per_cluster(stage: Stage) -> int:
    """The fewest replicas a serving cluster runs: at least 1, at most the stage's replicas.

    A minimum above the replica count would make every placement impossible, so it is read as
    "all replicas on one cluster".
    """
    return max(1, min(stage.min_replicas_per_cluster, stage.replicas))


def least_on_cluster(stage: Stage) -> int:
    """The fewest replicas of ``stage`` a cluster that runs it takes, which its capacity and the
    caps must leave room for there: a gang's replicas (it runs whole on one cluster), a
    Deployment's per-cluster minimum (:func:`min_replicas_per_cluster`)."""
    return stage.replicas if stage.is_gang else min_replicas_per_cluster(stage)


def replicas_sound(stage: Stage, replicas: Sequence[int], least: int | None = None) -> list[str]:
    """What is wrong with ``replicas`` (one count per cluster that runs the stage) as the
    placement of ``stage``: all its replicas placed (at least ``least`` of them when it runs
    degraded, :func:`least_replicas`), a gang on one cluster (a Deployment's per-cluster
    minimum is :func:`below_minimum`)."""
    problems = []
    placed = sum(replicas)
    least = stage.replicas if least is None else least
    if placed > stage.replicas or placed < least:
        floor = f" (at least {least} while it runs degraded)" if placed < least < stage.replicas else ""
        problems.append(f"{placed} replicas placed, the stage has {stage.replicas}{floor}")
    if stage.is_gang and len(replicas) > 1:
        problems.append(f"gang split across {len(replicas)} clusters")
    return problems


def below_minimum(stage: Stage, replicas: int) -> bool:
    """A Deployment's cluster serving fewer than :func:`min_replicas_per_cluster` replicas."""
    return not stage.is_gang and replicas < min_replicas_per_cluster(stage)


def ha_clusters(model: FleetModel, stage: Stage) -> tuple[str, ...]:
    """The clusters a serving stage must run on, each with at least its per-cluster minimum:
    the primary and every secondary of each platform governing its pipeline (first seen first),
    but for the cordoned or drained ones: they drop out of the active-active set, which then
    runs degraded on the others (compile warns about it)."""
    if stage.type is not StageType.DEPLOYMENT:
        return ()
    names: list[str] = []
    for platform in model.platforms:
        if platform.primary_cluster and stage.pipeline in platform.pipelines:
            names += [platform.primary_cluster, *platform.secondary_clusters]
    if not names:  # no platform governs it: skip reading every cluster (20,000 stages x 1,000)
        return ()
    lost = {c.name for c in model.clusters if c.cordoned}
    return tuple(name for name in dict.fromkeys(names) if name not in lost)


def least_replicas(model: FleetModel, stage: Stage) -> int:
    """The fewest replicas ``stage`` may be placed with: all of them, but for a serving stage
    running degraded (:func:`degraded_platforms`): during the outage it serves with what fits,
    at least its per-cluster minimum on each surviving HA cluster (on one cluster when none
    survives). A placement that runs it short must leave no room for one more of its replicas
    (:func:`room_left`): the replicas that fit are placed."""
    if not degraded_platforms(model, stage):
        return stage.replicas
    return min(stage.replicas, max(1, len(ha_clusters(model, stage))) * min_replicas_per_cluster(stage))
