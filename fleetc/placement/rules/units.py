"""The units every hard rule counts in: whole MiB of memory, micros of currency, the
resources capacity is counted in, and the stage types that never share a GPU."""

from __future__ import annotations

from fleetc.model import StageType

#: Stage types that never run on time-sliced GPU slots: they need whole GPUs.
EXCLUSIVE_TYPES = (StageType.TRAINING, StageType.FINETUNING)

#: Free memory is counted in whole MiB: the optimizer's float GiB then never meets a capacity a
#: few bytes below a demand, which its feasibility tolerance would let through.
MIB = 2**20

#: What a float product is allowed to miss a whole number by before it is rounded down.
ROUNDING = 1e-9

#: The resources capacity is counted in, in the order of :func:`fleetc.placement.rules.capacity.usable_capacity`.
RESOURCES = ("GPUs", "CPU millicores", "memory bytes")

#: Hourly cost is counted in whole millionths of a currency unit, so that every cap compares
#: integers: the optimizer's rows carry the same integers (:class:`fleetc.placement.problem.Problem`).
MICROS = 1_000_000
