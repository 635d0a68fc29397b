"""The shift MILP of the large path (:func:`_shift`): the stages still left out on any cluster
they may use, beside the stages that could make room for them by moving off those clusters."""

from __future__ import annotations

import numpy as np

from fleetc.placement.colgen.reach import REACH_NODES, REACH_PAIRS
from fleetc.placement.colgen.room import _fixed_need, _free, _Rounding, _taken
from fleetc.placement.problem import Budget
from fleetc.placement.program import HighsDirect, replicas_of, solve_neighbourhood

#: Clusters outside the left-out stages' reach to which each movable stage may shift: its best
#: by gain among those with room for all of it.
SHIFT_CLUSTERS = 4


def _shift(r: _Rounding, replicas_at: np.ndarray, is_blocked: np.ndarray) -> bool:
    """Place every stage still left out (in place) by one exact MILP, when the neighbourhoods of
    :func:`~fleetc.placement.colgen.reach._reach` grew too large: the left-out stages on any
    cluster they may use, and each stage placed on those clusters that may also run elsewhere,
    free to stay where it is or to shift whole to one of its :data:`SHIFT_CLUSTERS` best
    clusters outside them with room. Whether it placed them all (nothing changes otherwise).

    A GPU type can be full fleet-wide while stages that could run on another type hold its
    GPUs: ``bench.generate --clusters 1000 --stages 20000 --load 0.9 --diverse`` left 5 t4
    and l4 serving stages out, every t4 and l4 GPU taken; its reach neighbourhood (every stage
    on those 349 clusters, with all of their clusters) was over :data:`REACH_PAIRS`, this one
    holds 9,226 pairs and places all 20,000 at a higher objective."""
    left = np.flatnonzero(~replicas_at.any(axis=1) & ~is_blocked)
    if not len(left):
        return True
    large = r.large
    starts = large.pair_range
    reach = np.zeros(large.clusters, dtype=bool)
    reach[large.pair_cluster[np.concatenate([np.arange(starts[s], starts[s + 1]) for s in left.tolist()])]] = True
    movable = [s for s in np.flatnonzero(replicas_at[:, reach].any(axis=1)).tolist()
               if not is_blocked[s] and not reach[large.pair_cluster[starts[s]:starts[s + 1]]].all()]
    stages = np.union1d(left, np.array(movable, dtype=left.dtype))
    before = replicas_at[stages].copy()
    replicas_at[stages] = 0
    taken = _taken(large, replicas_at)
    allowed = _shift_pairs(r, stages, before, reach, _free(large, taken))
    if int(allowed.sum()) > REACH_PAIRS:
        replicas_at[stages] = before
        return False
    columns = np.union1d(np.flatnonzero(allowed.any(axis=0)), large.headroom.members)
    program, result = solve_neighbourhood(
        r.problem.restrict(stages, columns), allowed[:, columns], taken[:, columns],
        Budget(r.deadline), HighsDirect(REACH_NODES), fixed_need=_fixed_need(r, replicas_at),
        cap_taken=large.caps.used(replicas_at))
    if result.values is None:
        replicas_at[stages] = before
        return False
    replicas_at[np.ix_(stages, columns)] = replicas_of(program, result.values)
    return True


def _shift_pairs(r: _Rounding, stages: np.ndarray, before: np.ndarray, reach: np.ndarray, free: np.ndarray
                 ) -> np.ndarray:
    """(len(stages), C) where each of :func:`_shift`'s stages may go: a stage left out
    (nothing in ``before``) anywhere it may; a placed one where it is, or on its best clusters
    outside ``reach`` with ``free`` room for all of it."""
    large = r.large
    starts = large.pair_range
    allowed = np.zeros((len(stages), large.clusters), dtype=bool)
    for i, s in enumerate(stages.tolist()):
        pairs = np.arange(starts[s], starts[s + 1])
        clusters = large.pair_cluster[pairs]
        if not before[i].any():
            allowed[i, clusters] = True
            continue
        allowed[i, np.flatnonzero(before[i])] = True
        roomy = pairs[~reach[clusters] & np.all(free[:, clusters] >= large.coefficients[:, s, None] - 1e-9, axis=0)]
        allowed[i, large.pair_cluster[roomy[np.argsort(-large.gain[roomy], kind="stable")[:SHIFT_CLUSTERS]]]] = True
    return allowed
