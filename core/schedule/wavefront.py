"""The ``wavefront`` policy (Rammer, OSDI'20, section 4).

1. The ops whose predecessors are all scheduled form a *wave*.
2. Kernels: if the wave's ops, each with its fastest kernel, have no more
   rTasks than the device has vEUs, each op gets its fastest kernel.
   Otherwise each op starts from the kernel with the least time x vEUs used;
   then, while the op with the longest latency is the wave's bottleneck (its
   latency exceeds the wave's work spread over all vEUs), it moves to its
   next faster kernel (the least work among the faster ones), unless that
   would push the wave's work over all vEUs beyond the latency it removes.
3. The wave's ops are taken by decreasing b-level (longest path to the end
   of the graph), and each rTask goes to the vEU where it can start
   earliest given its dependencies: an rTask of op ``C`` on vEU ``v`` starts
   when ``v`` is free and, if some rTask ``C`` depends on ran on another vEU
   and is not already known complete there, after a barrier rTask waiting
   for those rTasks (one per other vEU: the last there).
4. The ops the wave released form the next wave.

On a vDevice of one vEU the waves are not formed: every op still gets a kernel as a wave of one op
would, but the ops are taken depth first (the ops an op releases next), because there a wave's ops run
one after another anyway and taking them wave by wave interleaves independent chains, evicting each
chain's weights from the cache between its steps (``DEPTH_FIRST_ON_ONE_VEU``).

Placement is O(rTasks x log vEUs) with an O(vEUs x vEUs-of-predecessors)
numpy step per op, so 14,000-op graphs schedule in seconds.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..rtask import RKernel
from .placement_steps import LARGE_PLACEMENT, place_rtasks, requirement_state
from .problem import Problem
from .schedule import Schedule, ScheduleBuilder
from .waits import NO_SKIP, narrow_skips

#: Widest vDevice on which a large problem is placed by the compiled steps (:mod:`.placement_steps`).
#: They pay for numba's runtime in the process (about 120 MB resident: numba and LLVM, measured on
#: the ipu's compiles) where the numpy path's per-op calls dominate, many ops on few vEUs (an unrolled
#: RNN of 8,000 ops on 108 vEUs).  On an IPU's 1,472 tiles the numpy path is 2-3x slower on the
#: placement (9-13 CPU seconds against 3-5 on the published models, in compiles of 25-80) but keeps
#: that memory out of the process, which issue 39 bounds (3 x the model + 300 MB).  Same schedule
#: either way.
COMPILED_PLACEMENT_MAX_VEUS = 1024

#: On a vDevice of one vEU, follow each chain of ops to its end (depth first) instead of taking the
#: graph wave by wave: with one vEU a wave's ops run one after another anyway, and interleaving two
#: independent chains (the directions of a bidirectional RNN, a model's parallel branches) makes each
#: op read its weights and inputs after the other chain's op has evicted them from the cache.
DEPTH_FIRST_ON_ONE_VEU = True


def blevels(problem: Problem) -> list[float]:
    """Longest path (fastest-kernel latencies) from each op to a graph exit."""
    num_veus = problem.vdevice.num_veus
    level = [0.0] * len(problem.rops)
    for i in range(len(problem.rops) - 1, -1, -1):
        tail = max((level[s] for s in problem.succs[i]), default=0.0)
        level[i] = problem.rops[i].fastest(num_veus).latency_us(num_veus) + tail
    return level


def select_kernels(problem: Problem, wave: list[int], fastest_only: bool = False) -> dict[int, RKernel]:
    """Kernels for the ops of a wave (step 2 of the module docstring)."""
    num_veus = problem.vdevice.num_veus
    fast = {i: problem.rops[i].fastest(num_veus) for i in wave}
    if fastest_only or sum(k.num_rtasks for k in fast.values()) <= num_veus:
        return fast
    choice = {i: problem.rops[i].most_efficient(num_veus) for i in wave}
    work = sum(k.work_us(num_veus) for k in choice.values())
    # Ops that can still move to a faster kernel, longest latency first.
    heap = [(-k.latency_us(num_veus), i) for i, k in choice.items() if k is not fast[i]]
    heapq.heapify(heap)
    longest_fixed = max((k.latency_us(num_veus) for i, k in choice.items() if k is fast[i]), default=0.0)
    while heap:
        latency = -heap[0][0]
        if latency <= max(work / num_veus, longest_fixed):
            break  # the wave is bound by its total work (or an op that cannot go faster)
        i = heapq.heappop(heap)[1]
        faster = [k for k in problem.rops[i].kernels if k.latency_us(num_veus) < latency]
        if not faster:  # tied with its fastest kernel: it cannot go faster
            longest_fixed = max(longest_fixed, latency)
            continue
        step = min(faster, key=lambda k: (k.work_us(num_veus), k.latency_us(num_veus)))
        new_work = work - choice[i].work_us(num_veus) + step.work_us(num_veus)
        if new_work / num_veus > latency:
            break  # going faster would cost more vEU time than it saves
        choice[i], work = step, new_work
        if step is fast[i]:
            longest_fixed = max(longest_fixed, step.latency_us(num_veus))
        else:
            heapq.heappush(heap, (-step.latency_us(num_veus), i))
    return choice


def _latest_missed(missing: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Per vEU (row of ``missing``), the latest ``finish`` among the required rTasks (columns) it
    has not waited for, -inf where none: a masked max over the (vEUs x required vEUs) matrix,
    computed only for the rows that do not miss the latest-finishing rTask of all (few)."""
    latest = int(np.argmax(finish))
    ready = np.full(missing.shape[0], finish[latest], dtype=np.float64)
    others = np.flatnonzero(~missing[:, latest])
    if others.size:
        ready[others] = np.where(missing[others], finish, -np.inf).max(axis=1)
    return ready


#: Ops with at most this many rTasks are ordered by a heap in Python; more, with arrays.
SMALL_RUN = 256


def run_order(est: np.ndarray, veus: np.ndarray, n: int, duration: float) -> tuple[np.ndarray, np.ndarray]:
    """The vEU and start time of each of ``n`` rTasks of ``duration`` placed one after another on the
    vEU (of ``veus``, free from ``est``) that can start it earliest, the lower (est, vEU) on a tie.

    That is the merge of each vEU's times ``est, est + d, est + d + d, ...`` (added one at a time, as a
    heap of (time, vEU) gives them) in (time, vEU) order.  For many rTasks it is built with arrays
    (a million rTasks one heap step at a time took seconds): each vEU's times by a cumulative sum, as
    many as the time of the ``n``-th rTask suggests plus one, then the first ``n`` of all of them, with
    more times for any vEU whose last time is among those ``n`` until none is."""
    if n <= SMALL_RUN or not duration > 0:
        # Python floats and ints from tolist (iterating the arrays made a numpy scalar per element)
        heap = list(zip(np.asarray(est, np.float64).tolist(), np.asarray(veus, np.int64).tolist()))
        if n == 1:  # the one rTask goes where the heap would pop first: the least (time, vEU)
            t, v = min(heap)
            return np.array([v], dtype=np.int64), np.array([t], dtype=np.float64)
        heapq.heapify(heap)
        veu_of, starts = [], []
        for _ in range(n):
            t, v = heapq.heappop(heap)
            veu_of.append(v)
            starts.append(t)
            heapq.heappush(heap, (t + duration, v))
        return np.array(veu_of, dtype=np.int64), np.array(starts, dtype=np.float64)
    est = np.asarray(est, dtype=np.float64)
    veus = np.asarray(veus, dtype=np.int64)

    def runs_by(t: float) -> np.ndarray:  # about how many rTasks each vEU starts by time t
        return np.clip(np.floor((t - est) / duration) + 1, 0, n)

    lo, hi = float(est.min()), float(est.max()) + -(-n // est.size) * duration
    for _ in range(64):  # the earliest time by which about n rTasks have started
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if runs_by(mid).sum() >= n else (mid, hi)
    counts = np.minimum(runs_by(hi).astype(np.int64) + 1, n)
    while True:
        flat_times = np.concatenate([np.cumsum(np.concatenate(([t], np.full(c - 1, duration))))
                                     for t, c in zip(est.tolist(), counts.tolist())])
        owners = np.repeat(veus, counts)
        taken = np.lexsort((owners, flat_times))[:n]  # stable: a vEU's own ties stay in order
        in_first = np.zeros(owners.size, dtype=bool)
        in_first[taken] = True
        short = in_first[np.cumsum(counts) - 1] & (counts < n)
        if not short.any():
            return owners[taken], flat_times[taken]
        counts[short] = np.minimum(2 * counts[short], n)


def _first_and_last(values: np.ndarray) -> tuple[list[int], list[int]]:
    """The distinct values in the order they first occur, and the index of each one's last occurrence."""
    if values.size <= SMALL_RUN:  # an unrolled RNN's thousands of small ops: no array passes
        last = {v: r for r, v in enumerate(values.tolist())}  # keys in order of first occurrence
        return list(last), list(last.values())
    distinct, first = np.unique(values, return_index=True)
    last_at = values.size - 1 - np.unique(values[::-1], return_index=True)[1]
    order = np.argsort(first)
    return distinct[order].tolist(), last_at[order].tolist()


_NO_INTS = np.zeros(0, dtype=np.int64)
_NO_MISSING = np.zeros((0, 0), dtype=bool)


def _no_need(num_veus: int) -> np.ndarray:
    return np.zeros(num_veus, dtype=bool)


class _Placer:
    """Earliest-start placement with barrier insertion (step 3)."""

    def __init__(self, problem: Problem, builder: ScheduleBuilder) -> None:
        vd = problem.vdevice
        self.problem = problem
        self.builder = builder
        self.num_veus = vd.num_veus
        self.barrier_us = vd.barrier_us
        self.avail = np.zeros(vd.num_veus)
        # known[v, u]: last position on vEU u that a barrier on v waited for.
        self.known = np.full((vd.num_veus, vd.num_veus), -1, dtype=np.int64)
        # Per placed op: (vEUs, last position, last handle, finish of that rTask) arrays.
        self.placed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None] = [None] * len(problem.rops)
        # A large problem places each op in two compiled steps (:mod:`.placement_steps`), same result,
        # unless the vDevice is too wide for them to pay for numba's runtime (COMPILED_PLACEMENT_MAX_VEUS).
        self.compiled = (len(problem.rops) * vd.num_veus >= LARGE_PLACEMENT
                         and vd.num_veus <= COMPILED_PLACEMENT_MAX_VEUS)
        # Where the waits are not read (VDevice.exact_waits), what a barrier may skip is not worked out.
        self.exact_waits = vd.exact_waits

    def _requirements(self, op: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        parts = [self.placed[p] for p in self.problem.preds[op]]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        veus, pos, handles, fin = (np.concatenate(x) for x in zip(*parts))
        order = np.lexsort((pos, veus))
        veus, pos, handles, fin = veus[order], pos[order], handles[order], fin[order]
        last = np.ones(veus.size, dtype=bool)
        last[:-1] = veus[1:] != veus[:-1]
        return veus[last], pos[last], handles[last], fin[last]

    def place(self, op: int, kernel: RKernel) -> None:
        if self.compiled:
            self._place_compiled(op, kernel)
            return
        builder, num_veus = self.builder, self.num_veus
        builder.choose(op, kernel)
        req = self._requirements(op)
        est = self.avail.copy()
        n = kernel.num_rtasks
        k = min(n, num_veus)
        missing: np.ndarray | None = None
        need: np.ndarray | None = None
        column_group: np.ndarray | None = None
        if req is not None:
            cols, req_pos, req_handles, req_fin = req
            if cols.size == num_veus:
                # Every vEU is required: the columns stay in vEU order (gathering known's columns in
                # cols's order would copy a vEUs x vEUs matrix per op); column_group[u] is the
                # position of vEU u's rTask in cols, the op's wait group.
                column_group = np.empty(num_veus, dtype=np.int64)
                column_group[cols] = np.arange(num_veus)
                pos, fin = req_pos[column_group], req_fin[column_group]
                missing = self.known < pos  # (vEU, required vEU) not yet waited for
                np.fill_diagonal(missing, False)  # program order covers a vEU's own rTasks
            else:
                pos, fin = req_pos, req_fin
                missing = self.known[:, cols] < req_pos
                missing[cols, np.arange(cols.size)] = False
            need = np.asarray(missing.any(axis=1))
            if need.any():
                ready = _latest_missed(missing, fin)
                est[need] = np.maximum(self.avail[need], ready[need]) + self.barrier_us
            else:
                need = None
        cand = np.argpartition(est, k - 1)[:k] if k < num_veus else np.arange(num_veus)
        need_index = [-1] * num_veus  # vEU -> its row of skip_bounds while it still needs a barrier
        skip_cols, skip_bounds = NO_SKIP, [0] * (num_veus + 1)
        if need is not None:
            assert missing is not None
            rows = cand[need[cand]]
            if self.exact_waits:
                # What each barrier would leave out of the op's wait group (its own vEU, the vEUs it
                # already waited for), for the candidate vEUs at once.
                skip_rows, skip_cols = np.nonzero(~missing[rows])
                if column_group is not None:
                    skip_cols = column_group[skip_cols]
                    order = np.lexsort((skip_cols, skip_rows))
                    skip_rows, skip_cols = skip_rows[order], skip_cols[order]
                skip_cols = narrow_skips(skip_cols, cols.size)  # (positions in the op's wait group)
                skip_bounds = np.searchsorted(skip_rows, np.arange(rows.size + 1)).tolist()
            for i, v in enumerate(rows.tolist()):
                need_index[v] = i
        veu_of, starts = run_order(est[cand], cand, n, kernel.duration_us)
        used, last_r = _first_and_last(veu_of)  # the vEUs in the order their first rTask is placed
        programs = builder.programs
        group = -1
        waited: list[int] = []
        for v in used:
            i = need_index[v]
            if i >= 0:
                assert req is not None  # need is set only from req
                # The op's barriers share one list (the producers' last rTask per vEU) and each
                # leaves out the few a vEU need not wait for: kept once, not once per vEU.
                if group < 0:
                    group = builder.add_wait_group(req_handles)
                builder.wait_group(group, v, skip_cols[skip_bounds[i]:skip_bounds[i + 1]])
                waited.append(v)
        first_handle = builder.append_rtasks(op, veu_of)
        last_finish = (starts[last_r] + kernel.duration_us).tolist()
        last = {v: (len(programs[v]) - 1, first_handle + r, f) for v, r, f in zip(used, last_r, last_finish)}
        if waited:  # what the new barriers waited for, all at once (nothing above reads known)
            assert missing is not None and req is not None
            done = np.asarray(waited, dtype=np.int64)
            if column_group is not None and done.size == num_veus:  # every vEU waited: in place
                # (a vEU's own column may rise too: it is never read, program order covers it)
                np.maximum(self.known, pos, out=self.known)
            elif column_group is not None:  # whole rows: no (rows x cols) fancy indexing, 5x slower
                self.known[done] = np.where(missing[done], pos, self.known[done])
            else:
                block = np.ix_(done, cols)
                self.known[block] = np.where(missing[done], req_pos, self.known[block])
        veus = np.fromiter(last, dtype=np.int64, count=len(last))
        vals = list(last.values())
        placed = (veus, np.array([x[0] for x in vals], dtype=np.int64),
                  np.array([x[1] for x in vals], dtype=np.int64), np.array([x[2] for x in vals]))
        self.placed[op] = placed
        self.avail[veus] = placed[3]

    def _place_compiled(self, op: int, kernel: RKernel) -> None:
        """:meth:`place` in two compiled steps: the same barriers, vEUs and times."""
        builder, num_veus = self.builder, self.num_veus
        builder.choose(op, kernel)
        req = self._requirements(op)
        n = kernel.num_rtasks
        k = min(n, num_veus)
        if req is None:
            cols = req_pos = _NO_INTS
            req_handles = None
            missing, need, est = _NO_MISSING, _no_need(num_veus), self.avail.copy()
        else:
            cols, req_pos, req_handles, req_fin = req
            missing, need, est = requirement_state(self.avail, self.known, cols, req_pos,
                                                   np.asarray(req_fin, dtype=np.float64), self.barrier_us,
                                                   large=True)
        # The candidates as the numpy path takes them (argpartition's order among ties is numpy's).
        cand = np.argpartition(est, k - 1)[:k] if k < num_veus else np.arange(num_veus)
        veu_of, starts, used, last_r, skip, skip_lo, skip_hi = place_rtasks(
            est, cand, n, float(kernel.duration_us), need, missing, self.known, cols, req_pos, large=True)
        used_list = used.tolist()
        lo_list = skip_lo.tolist()
        if req_handles is not None and max(lo_list, default=-1) >= 0:
            skip = narrow_skips(skip, cols.size)  # (positions in the op's wait group)
            group = builder.add_wait_group(req_handles)
            for v, lo, hi in zip(used_list, lo_list, skip_hi.tolist()):
                if lo >= 0:
                    builder.wait_group(group, v, skip[lo:hi])
        first_handle = builder.append_rtasks(op, veu_of)
        programs = builder.programs
        finish = starts[last_r] + kernel.duration_us
        placed = (used, np.array([len(programs[v]) - 1 for v in used_list], dtype=np.int64),
                  last_r + first_handle, finish)
        self.placed[op] = placed
        self.avail[used] = finish


class WavefrontPolicy:
    """Rammer's wavefront policy; ``fastest_only`` always picks each op's
    fastest kernel (the ablation of the paper's kernel selection)."""

    def __init__(self, fastest_only: bool = False) -> None:
        self.fastest_only = fastest_only
        self.name = "wavefront-fastest" if fastest_only else "wavefront"
        self.description = ("wavefront, always each op's fastest kernel" if fastest_only else
                            "Rammer's wavefront: waves of ready ops, kernels by time x vEUs when a wave "
                            "does not fit, earliest-start placement, barriers only across vEUs")

    def schedule(self, problem: Problem) -> Schedule:
        builder = ScheduleBuilder(problem, self.name, problem.vdevice.barrier_us,
                                  {"kernel_choice": "fastest" if self.fastest_only else "rammer"})
        placer = _Placer(problem, builder)
        level = blevels(problem)
        remaining = [len(p) for p in problem.preds]
        if DEPTH_FIRST_ON_ONE_VEU and problem.vdevice.num_veus == 1:
            return self._depth_first(problem, builder, placer, level, remaining)
        wave = [i for i, r in enumerate(remaining) if r == 0]
        waves = 0
        while wave:
            waves += 1
            kernels = select_kernels(problem, wave, self.fastest_only)
            released: list[int] = []
            for i in sorted(wave, key=lambda i: (-level[i], i)):
                placer.place(i, kernels[i])
                for s in problem.succs[i]:
                    remaining[s] -= 1
                    if remaining[s] == 0:
                        released.append(s)
            wave = released
        builder.options["waves"] = waves
        return builder.finish()

    def _depth_first(self, problem: Problem, builder: ScheduleBuilder, placer: _Placer, level: list[float],
                     remaining: list[int]) -> Schedule:
        """One vEU: each op as soon as it is ready, the ops an op releases next (its chain goes on
        while it can), the others by decreasing b-level.  Kernels as for a wave of one op."""
        def by_level(ops: list[int]) -> list[int]:  # the stack's top (last) is the highest b-level
            return sorted(ops, key=lambda i: (level[i], -i))

        stack = by_level([i for i, r in enumerate(remaining) if r == 0])
        while stack:
            i = stack.pop()
            placer.place(i, select_kernels(problem, [i], self.fastest_only)[i])
            released = []
            for s in problem.succs[i]:
                remaining[s] -= 1
                if remaining[s] == 0:
                    released.append(s)
            stack.extend(by_level(released))
        builder.options["waves"] = len(problem.rops)
        return builder.finish()
