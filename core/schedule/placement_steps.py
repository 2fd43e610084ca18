"""The wavefront placer's per-op arithmetic in numba's subset, for large problems.

:class:`rammer.schedule.wavefront._Placer` places an op in a few dozen numpy calls over (vEUs x
required vEUs) matrices; on an unrolled RNN of 8,000 ops on 108 vEUs those calls, and the per-rTask
Python of the small-op paths, were most of the placement.  These two functions compute the same
thing in loops (compiled by numba once a problem is large: :class:`rammer.on_demand_jit.OnDemandJit`),
so the placer makes two calls per op plus the schedule builder's own.

The results are exactly those of the numpy path (``tests/schedule/test_placement_steps.py`` compares
them on random states): the same comparisons, the same ``max`` and ``+`` in the same order, and the
rTasks taken in (time, vEU) order as the numpy path's heap and its array merge both do.  The choice
of candidate vEUs (``np.argpartition``, whose order among ties is numpy's own) stays with the caller.
"""

from __future__ import annotations

import numpy as np

from ..on_demand_jit import OnDemandJit

__all__ = ["requirement_state", "place_rtasks", "LARGE_PLACEMENT"]

#: Ops x vEUs from which a schedule's placement runs compiled (below it, importing numba and loading
#: its cache would cost more than the numpy path's calls).
LARGE_PLACEMENT = 400_000


def _requirement_state(avail: np.ndarray, known: np.ndarray, cols: np.ndarray, req_pos: np.ndarray,
                       req_fin: np.ndarray, barrier_us: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``missing[v, p]``: vEU ``v`` has not waited for the required rTask ``p`` (on vEU ``cols[p]``,
    program position ``req_pos[p]``; never for its own vEU); ``need[v]``: it misses one; ``est[v]``:
    when the op's rTask could start on ``v`` (after a barrier waiting for the latest it misses)."""
    num_veus = avail.shape[0]
    m = cols.shape[0]
    missing = np.zeros((num_veus, m), dtype=np.bool_)
    need = np.zeros(num_veus, dtype=np.bool_)
    est = avail.copy()
    for v in range(num_veus):
        ready = -np.inf
        for p in range(m):
            u = cols[p]
            if u != v and known[v, u] < req_pos[p]:
                missing[v, p] = True
                need[v] = True
                if req_fin[p] > ready:
                    ready = req_fin[p]
        if need[v]:
            est[v] = max(avail[v], ready) + barrier_us
    return missing, need, est


def _place_rtasks(est: np.ndarray, cand: np.ndarray, n: int, duration: float, need: np.ndarray,
                  missing: np.ndarray, known: np.ndarray, cols: np.ndarray, req_pos: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``n`` rTasks one after another on the candidate vEU that can start each earliest (the
    least (time, vEU)), then per vEU used (in the order of its first rTask): its last rTask, and the
    positions its barrier leaves out of the op's wait group (``skip[skip_lo[i]:skip_hi[i]]``; ``skip_lo[i]``
    is -1 when it needs no barrier).  ``known`` records the new barriers."""
    k = cand.shape[0]
    # A binary heap of (time, vEU), least first: its pops are those of heapq on (time, vEU) tuples
    # (the keys are distinct, so any heap pops them in the same order).  Built by insertion.
    ht = np.empty(k, dtype=np.float64)
    hv = np.empty(k, dtype=np.int64)
    for size in range(k):
        t, v = est[cand[size]], cand[size]
        i = size
        while i > 0:
            parent = (i - 1) // 2
            if not (t < ht[parent] or (t == ht[parent] and v < hv[parent])):
                break
            ht[i], hv[i] = ht[parent], hv[parent]
            i = parent
        ht[i], hv[i] = t, v
    veu_of = np.empty(n, dtype=np.int64)
    starts = np.empty(n, dtype=np.float64)
    for r in range(n):
        veu_of[r] = hv[0]
        starts[r] = ht[0]
        t, v = ht[0] + duration, hv[0]  # the root again, later by one rTask: sifted down
        i = 0
        while True:
            child = 2 * i + 1
            if child >= k:
                break
            if child + 1 < k and (ht[child + 1] < ht[child] or
                                  (ht[child + 1] == ht[child] and hv[child + 1] < hv[child])):
                child += 1
            if not (ht[child] < t or (ht[child] == t and hv[child] < v)):
                break
            ht[i], hv[i] = ht[child], hv[child]
            i = child
        ht[i], hv[i] = t, v
    num_veus = est.shape[0]
    last_of = np.full(num_veus, -1, dtype=np.int64)
    used = np.empty(min(n, k), dtype=np.int64)
    count = 0
    for r in range(n):
        v = veu_of[r]
        if last_of[v] < 0:
            used[count] = v
            count += 1
        last_of[v] = r
    used = used[:count]
    last_r = np.empty(count, dtype=np.int64)
    m = cols.shape[0]
    skip_lo = np.full(count, -1, dtype=np.int64)
    skip_hi = np.full(count, -1, dtype=np.int64)
    skip = np.empty(count * m, dtype=np.int64)
    fill = 0
    for i in range(count):
        v = used[i]
        last_r[i] = last_of[v]
        if need[v]:
            skip_lo[i] = fill
            for p in range(m):
                if missing[v, p]:
                    known[v, cols[p]] = req_pos[p]
                else:
                    skip[fill] = p
                    fill += 1
            skip_hi[i] = fill
    # A copy of the filled part: the schedule keeps slices of it, which would keep all of count x m alive.
    return veu_of, starts, used, last_r, skip[:fill].copy(), skip_lo, skip_hi


requirement_state = OnDemandJit(_requirement_state)
place_rtasks = OnDemandJit(_place_rtasks)
