"""The hard rules of placement, stated once, as plain functions in whole units.

One module per rule: :mod:`~fleetc.placement.rules.filters` (where a stage may run),
:mod:`~fleetc.placement.rules.replicas` (how its replicas split), :mod:`~fleetc.placement.rules.capacity`
(what fits a cluster, node packing, failover headroom), :mod:`~fleetc.placement.rules.quotas` (team
quotas and cost caps, and the one cap check), :mod:`~fleetc.placement.rules.ledger` (what a placement
takes of all of it, counted once) and :mod:`~fleetc.placement.rules.churn` (moves); their units in
:mod:`~fleetc.placement.rules.units`. This package re-exports them: ``rules.overuse``.

A placement is sound when every stage is placed once, whole (:func:`replicas_sound`; a
serving stage running degraded with the replicas that fit, :func:`least_replicas`,
:func:`room_left`), on
clusters that may run it (:func:`exclusions`: cordons, data sovereignty, GPUs and their type,
pods that fit no node, taints), on every cluster ``multiCluster`` runs it on with at least its per-cluster minimum
(:func:`ha_clusters`, :func:`min_replicas_per_cluster`), and when what is placed on each
cluster (:func:`usage`) fits its usable capacity (:func:`usable_capacity`, :func:`overuse`) and
the failover headroom its platform asks for (:func:`failover_groups`, :func:`failover_shortfalls`).
Against a previous placement, one more rule bounds churn (:func:`unjustified_moves`): a stage
the change did not touch moves only when the move gains more than ``moveCost``.

Everything here counts integers: GPUs (per replica as asked, ``Stage.gpus``, split into pods
per cluster by node fit, :func:`on_cluster`), time-sliced GPU slots, millicores and bytes.
What is placed on a cluster must also pack onto its nodes (:func:`unpacked`, an actual
assignment of pods to nodes, :mod:`fleetc.nodefit`). The verifier
(:mod:`fleetc.placement.verify`) reads these functions and nothing of the solvers; the solvers
vectorise the same rules in floats (:mod:`fleetc.placement.program`, :mod:`fleetc.placement.colgen`,
the filters in :mod:`fleetc.placement.scoring`), and ``tests/test_rules.py`` holds the two against
each other on generated fleets.
"""

from __future__ import annotations

from fleetc.placement.rules.capacity import (
    Packing,
    Usage,
    failover_groups,
    failover_shortfalls,
    gpus_as,
    overuse,
    packing,
    replica_usage,
    slots_on,
    slots_per_gpu,
    taken,
    time_sliced_gpus,
    time_sliced_unit,
    unpacked,
    usable_capacity,
    usage,
    uses_shared_slots,
)
from fleetc.placement.rules.churn import (
    may_stay,
    move_gain,
    moved_replicas,
    unjustified_moves,
    untouched_moves,
)
from fleetc.placement.rules.filters import (
    excluded,
    exclusions,
    fits_no_node,
    gpu_types_named,
    lacks_gpu_type,
    lacks_gpus,
    on_cluster,
    option_of,
    outside_jurisdiction,
    pod_of,
    preferred_off,
    rendered_on,
    repelling_taints,
    shape_words,
)
from fleetc.placement.rules.ledger import (
    FleetUsage,
    GPUTally,
    Ledger,
    room_left,
)
from fleetc.placement.rules.quotas import (
    Cap,
    CapRoom,
    CapShortfall,
    CapUsage,
    as_gpus,
    cap_overuse,
    cap_room,
    cap_shortfalls,
    cap_usage,
    caps,
    caps_used,
    money,
    quota_slots,
    replica_cost_micros,
)
from fleetc.placement.rules.replicas import (
    below_minimum,
    ha_clusters,
    least_on_cluster,
    least_replicas,
    min_replicas_per_cluster,
    replicas_sound,
)
from fleetc.placement.rules.units import (
    EXCLUSIVE_TYPES,
    MIB,
    MICROS,
    RESOURCES,
    ROUNDING,
)

__all__ = [
    "Cap",
    "CapRoom",
    "CapShortfall",
    "CapUsage",
    "EXCLUSIVE_TYPES",
    "FleetUsage",
    "GPUTally",
    "Ledger",
    "MIB",
    "MICROS",
    "Packing",
    "RESOURCES",
    "ROUNDING",
    "Usage",
    "as_gpus",
    "below_minimum",
    "cap_overuse",
    "cap_room",
    "cap_shortfalls",
    "cap_usage",
    "caps",
    "caps_used",
    "excluded",
    "exclusions",
    "failover_groups",
    "failover_shortfalls",
    "fits_no_node",
    "gpu_types_named",
    "gpus_as",
    "ha_clusters",
    "lacks_gpu_type",
    "lacks_gpus",
    "least_on_cluster",
    "least_replicas",
    "may_stay",
    "min_replicas_per_cluster",
    "money",
    "move_gain",
    "moved_replicas",
    "on_cluster",
    "option_of",
    "outside_jurisdiction",
    "overuse",
    "packing",
    "pod_of",
    "preferred_off",
    "quota_slots",
    "rendered_on",
    "repelling_taints",
    "replica_cost_micros",
    "replica_usage",
    "replicas_sound",
    "room_left",
    "shape_words",
    "slots_on",
    "slots_per_gpu",
    "taken",
    "time_sliced_gpus",
    "time_sliced_unit",
    "unjustified_moves",
    "unpacked",
    "untouched_moves",
    "usable_capacity",
    "usage",
    "uses_shared_slots",
]
