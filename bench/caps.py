"""The team quotas and cost caps (:func:`fleetc.placement.rules.caps`) for the greedy baselines.

What fleetc's rules count, as a ledger a greedy asks while it places stages: how many replicas
of a stage each cluster may still take within the caps over its pipeline (:meth:`CapRoom.room`),
whether a whole plan does (:meth:`CapRoom.fits`), and the room a plan takes or gives back
(:meth:`CapRoom.add`). Quotas count time-sliced slots (:func:`rules.quota_slots`) by the GPU
type of the cluster, costs whole millionths (:func:`rules.replica_cost_micros`), so a greedy
that asks it passes :func:`fleetc.placement.verify.verify`'s cap check exactly.
"""

from __future__ import annotations

import numpy as np

from fleetc.model import FleetModel
from fleetc.placement import rules

#: Replicas a cluster may take when no cap covers the stage.
UNCAPPED = 1 << 40


class CapRoom:
    """What is left of each cap row (per cap: one row per GPU type it caps, then its cost)."""

    def __init__(self, model: FleetModel) -> None:
        caps = rules.caps(model)
        self.types = np.array([c.gpu_type or "" for c in model.clusters], dtype=object)
        self.row_type: list[str | None] = []  # None: a cost row
        left: list[int] = []
        rows_of: list[list[int]] = [[] for _ in model.stages]
        for cap in caps:
            mine = [s for s, stage in enumerate(model.stages) if stage.pipeline in cap.pipelines]
            rows = []
            for gpu_type, quota in cap.gpu_quota:
                rows.append(len(left))
                self.row_type.append(gpu_type)
                left.append(quota * rules.slots_per_gpu(model))
            if cap.max_cost_micros is not None:
                rows.append(len(left))
                self.row_type.append(None)
                left.append(cap.max_cost_micros)
            for s in mine:
                rows_of[s] += rows
        self.left = np.array(left, dtype=np.int64)
        self.rows_of = rows_of
        # per (stage, cluster): a time-sliced replica takes whole GPUs where the device plugin
        # does not time-slice (rules.slots_on), and a throughput stage its count on each type
        self.unit = np.zeros((len(model.stages), len(model.clusters)), dtype=np.int64)
        self.cost = np.zeros((len(model.stages), len(model.clusters)), dtype=np.int64)
        for s, rows in enumerate(rows_of):
            stage = model.stages[s]
            if any(self.row_type[r] is not None for r in rows):
                self.unit[s] = [rules.quota_slots(model, rules.on_cluster(stage, c), c, 1) for c in model.clusters]
            if any(self.row_type[r] is None for r in rows):
                self.cost[s] = [rules.replica_cost_micros(model, stage, c) for c in model.clusters]

    @property
    def any(self) -> bool:
        return bool(len(self.left))

    def _per_replica(self, row: int, s: int, clusters: np.ndarray) -> np.ndarray:
        gpu_type = self.row_type[row]
        if gpu_type is None:
            cost: np.ndarray = self.cost[s, clusters]
            return cost
        return np.where(self.types[clusters] == gpu_type, self.unit[s, clusters], 0)

    def room(self, s: int, clusters: np.ndarray) -> np.ndarray:
        """Replicas of stage ``s`` each of ``clusters`` may take within the caps left."""
        room = np.full(len(clusters), UNCAPPED, dtype=np.int64)
        for row in self.rows_of[s]:
            per_replica = self._per_replica(row, s, clusters)
            room = np.minimum(room, np.where(per_replica > 0, self.left[row] // np.maximum(per_replica, 1), UNCAPPED))
        return np.maximum(room, 0)

    def need(self, s: int, share: dict[int, int]) -> dict[int, int]:
        """Row -> what ``share`` (cluster -> replicas) of stage ``s`` takes of it."""
        clusters = np.array(list(share), dtype=np.int64)
        counts = np.array(list(share.values()), dtype=np.int64)
        return {row: int(self._per_replica(row, s, clusters) @ counts) for row in self.rows_of[s]}

    def fits(self, s: int, share: dict[int, int]) -> bool:
        return all(n <= self.left[row] for row, n in self.need(s, share).items())

    def add(self, s: int, share: dict[int, int], sign: int = 1) -> None:
        """Take (``sign`` 1) or give back (-1) what ``share`` of stage ``s`` takes."""
        for row, n in self.need(s, share).items():
            self.left[row] -= sign * n
