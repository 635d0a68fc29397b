"""Churn: the moves a placement makes against the previous one, and which of them the
change justifies (:func:`unjustified_moves`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fleetc.model import FleetModel, Stage
from fleetc.placement.rules.filters import excluded
from fleetc.placement.rules.ledger import Ledger
from fleetc.placement.rules.replicas import below_minimum, ha_clusters, min_replicas_per_cluster, replicas_sound
from fleetc.placement.rules.units import ROUNDING


def moved_replicas(before: Mapping[str, int], after: Mapping[str, int]) -> int:
    """The replicas that left the clusters ``before`` had them on (cluster -> replicas each):
    a stage moved when this is more than 0 (one that only grew where it was did not)."""
    return sum(max(0, replicas - after.get(cluster, 0)) for cluster, replicas in before.items())


def move_gain(before: Mapping[str, int], after: Mapping[str, int], total: Mapping[str, float]) -> float:
    """What a move from ``before`` to ``after`` gains per replica moved (:func:`moved_replicas`),
    in score units: the stage's objective term ``sum(replicas * (1 + score))`` over its clusters
    (``total``: cluster -> score; a cluster without one scores 0), after less before, divided by
    the replicas moved. Moving is worth it to the objective exactly when this is more than the
    Fleet's ``moveCost``, which each replica kept where it was earns."""
    def term(placed: Mapping[str, int]) -> float:
        return sum(replicas * (1.0 + total.get(cluster, 0.0)) for cluster, replicas in placed.items())

    return (term(after) - term(before)) / max(1, moved_replicas(before, after))


def may_stay(model: FleetModel, stage: Stage, before: Mapping[str, int]) -> bool:
    """Whether ``before`` (cluster -> replicas) is still a placement of ``stage`` but for room:
    all its replicas (no fewer, as it had them), on clusters of the fleet that may run it
    (:func:`exclusions`), at least its per-cluster minimum on each and on every cluster
    ``multiCluster`` runs it on."""
    clusters = {c.name: c for c in model.clusters}
    if any(name not in clusters for name in before) or sum(before.values()) != stage.replicas:
        return False
    if replicas_sound(stage, list(before.values())) or any(
            below_minimum(stage, n) or excluded(stage, clusters[name]) for name, n in before.items()):
        return False
    minimum = min_replicas_per_cluster(stage)
    return all(before.get(name, 0) >= minimum for name in ha_clusters(model, stage))


def untouched_moves(model: FleetModel, previous: Mapping[str, Mapping[str, int]],
                    placed: Mapping[str, Mapping[str, int]], total: Callable[[str, str], float]
                    ) -> dict[str, float]:
    """The stages the change did not touch that moved from where the ``previous`` placement had
    them to where they are ``placed`` (stage key -> cluster -> replicas; :func:`moved_replicas`;
    a stage left out did not move: its reason says why it is out),
    each with its gain per replica moved (:func:`move_gain`, ``total(stage key, cluster)`` its
    score). The churn rule (:func:`unjustified_moves`): each of them gains more than ``moveCost``.

    A stage is touched when it cannot be put back as it was: its own policy changed what it
    needs or where it may run, or its cluster was cordoned or drained (:func:`may_stay`); or
    the room it had is taken by stages that stay (displaced): stages that did not move, new
    ones, touched ones, ones whose move gains more than ``moveCost``, and, in turn, the stages
    they displaced. Stages that only swap room among themselves are not touched: each could go
    back beside the others (:meth:`Ledger.fits_with`). The stages displaced are found as a
    closure, the same whatever the order."""
    stages = {s.key: s for s in model.stages}
    gains = _move_gains(model, stages, previous, placed, total)
    if not gains:
        return {}
    suspects = {key for key, gain in gains.items() if gain <= model.move_cost + ROUNDING}
    ledger = Ledger(model, ((stages[key], name, n) for key, where in placed.items()
                            if key in stages and key not in suspects for name, n in where.items()))
    _drop_displaced(ledger, stages, previous, placed, suspects)
    untouched = {key: gains[key] for key in suspects}
    for key in sorted(set(gains) - set(untouched)):
        if gains[key] > model.move_cost + ROUNDING and _fits_back(ledger, stages[key], previous[key],
                                                                  placed.get(key, {})):
            untouched[key] = gains[key]
    return dict(sorted(untouched.items()))


def _move_gains(model: FleetModel, stages: Mapping[str, Stage], previous: Mapping[str, Mapping[str, int]],
                placed: Mapping[str, Mapping[str, int]], total: Callable[[str, str], float]
                ) -> dict[str, float]:
    """The gain per replica moved (:func:`move_gain`) of each stage that moved from where the
    ``previous`` placement had it and could stay there (:func:`may_stay`)."""
    gains: dict[str, float] = {}
    for key, before in previous.items():
        stage, after = stages.get(key), placed.get(key, {})
        if stage is not None and after and moved_replicas(before, after) and may_stay(model, stage, before):
            gains[key] = move_gain(before, after, {name: total(key, name) for name in {*before, *after}})
    return gains


def _drop_displaced(ledger: Ledger, stages: Mapping[str, Stage], previous: Mapping[str, Mapping[str, int]],
                    placed: Mapping[str, Mapping[str, int]], suspects: set[str]) -> None:
    """Drop from ``suspects`` (in place) every stage whose previous room is taken by the stages
    in the ``ledger``, adding it there where it is ``placed``, until none is displaced: the
    closure, the same whatever the order."""
    displaced = True
    while displaced:
        displaced = False
        for key in sorted(suspects):
            if not ledger.fits_with(stages[key], previous[key]):
                suspects.discard(key)
                for name, n in placed.get(key, {}).items():
                    ledger.add(stages[key], name, n)
                displaced = True


def _fits_back(ledger: Ledger, stage: Stage, before: Mapping[str, int], after: Mapping[str, int]) -> bool:
    """Whether ``stage``, counted in the ``ledger`` where it is now (``after``), would fit back
    where it was (``before``) beside the others. The ledger is left as it was."""
    for name, n in after.items():
        ledger.add(stage, name, -n)
    fits = ledger.fits_with(stage, before)
    for name, n in after.items():
        ledger.add(stage, name, n)
    return fits


def unjustified_moves(model: FleetModel, previous: Mapping[str, Mapping[str, int]],
                      placed: Mapping[str, Mapping[str, int]], total: Callable[[str, str], float]
                      ) -> dict[str, float]:
    """The churn rule: every stage the change did not touch that moved (:func:`untouched_moves`)
    gains more than ``moveCost`` per replica moved. The stages that break it, with their gain."""
    return {key: gain for key, gain in untouched_moves(model, previous, placed, total).items()
            if gain <= model.move_cost + ROUNDING}
