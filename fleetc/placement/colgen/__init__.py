"""The large-instance path of :func:`fleetc.placement.optimize.place` (method ``colgen-lp-round``).

One module per algorithm, in the order they run: :mod:`.solve` (the front door,
:func:`solve_large`), :mod:`.large` (the component in the LP's terms and the master's rows),
:mod:`.columns` (column generation), :mod:`.rounding` (the LP rounded), :mod:`.room` (the room a
placement leaves, as the repair counts it), :mod:`.repair` (greedy, with eviction),
:mod:`.reach` (the neighbourhood MILP) and :mod:`.improve` (gangs moved where they score higher).

The LP is solved whole over kinds of alike stages when they are few (:func:`_alike`), else by
column generation over every allowed pair while the HiGHS master holds only a few per stage
(:mod:`fleetc.placement.highs`, warm-started between rounds); the stages the LP places in whole
units keep that, a MILP rounds the rest (growing once into the fixed stages around it when it
cannot), and a greedy repair with one-level eviction places what is still out.
``docs/optimizer.md`` describes the algorithm, its budgets and its measured gaps.

Every budget here counts work (pairs priced, branch-and-bound nodes, groups of stages tried,
neighbourhood pairs), never seconds, so the same input gives the same placement on any
machine. The one clock is the user's ``--time-limit`` (``Budget.deadline``), a safety net:
when it cuts a step short the placement depends on the machine's speed, and the placement
says so (``timeLimitReached``).
"""

from __future__ import annotations

from fleetc.placement.colgen.solve import solve_large

__all__ = ["solve_large"]
