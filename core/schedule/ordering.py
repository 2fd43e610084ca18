"""What a compiled schedule guarantees to run before what, for the memory planner.

Hardware-neutral: a program is a list of *groups*, each either a segment (a
``list`` of ops, scheduled by the next :class:`~rammer.schedule.Schedule`,
whose op ``i`` is the segment's op ``i``) or a single op run on its own
between segments (a host op).  The ops themselves are opaque here; the
planner (:func:`rammer.memory.plan_arena`) reads their reads and writes.

The planner may give a new buffer the memory of a dead one only when every
op that touched the dead buffer is certain to be done before the new one's
writers start.  Without a schedule that means "an ancestor in the op graph",
which is safe for any schedule but, on a model with many parallel branches,
reuses little: NASNet's intermediates took a 40 MB arena for a live set of
about 3.3 MB, so every op wrote fresh memory and read it back from L3/DRAM.

With the static schedule fixed first, "done before" is known exactly: an
rTask precedes everything after it on its vEU, and a barrier entry knows
everything its waited rTasks knew.  :func:`schedule_order` turns that into
vector clocks (per vEU, how many entries are known complete), then per op:
``done[a]`` (entries of each vEU up to a's last rTask there) and ``start[b]``
(what every rTask of b knows when it starts); a is done before b iff
``done[a] <= start[b]`` on every vEU.  Ops of an earlier segment (or a host
op) are done before every later op.  The barriers the code generator emits
wait for at least what the clocks assume, so reuse needs no extra barrier.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import chain
from typing import TypeVar

import numpy as np

from ..errors import ScheduleError
from ..on_demand_jit import OnDemandJit
from .clocks import schedule_clocks
from .schedule import Schedule

Op = TypeVar("Op")


def schedule_order(groups: Sequence[list[Op] | Op], schedules: Sequence[Schedule]) -> tuple[list[Op], list[int]]:
    """A walk order of every op (host ops and segments in program order; within a segment the
    order the schedule can first run them) and, per op in that order, the bitmask of the ops
    (positions in the order) certainly done before it starts."""
    order: list[Op] = []
    anc: list[int] = []
    before = 0  # everything of the earlier groups
    sched_iter = iter(schedules)
    for group in groups:
        if not isinstance(group, list):
            order.append(group)
            anc.append(before)
            before |= 1 << (len(order) - 1)
            continue
        sched = next(sched_iter)
        walk, done, start = _segment_clocks(len(group), sched)
        base = len(order)
        order.extend(group[i] for i in walk)
        anc.extend(before | (bits << base) for bits in _done_before_masks(done[walk], start[walk]))
        before |= ((1 << len(walk)) - 1) << base
    return order, anc


#: Ops per block of :func:`_done_before_masks` (a block's bounds are tested against every op at once).
_MASK_BLOCK = 128


def _done_before_masks(done: np.ndarray, start: np.ndarray) -> list[int]:
    """Per op ``k`` (rows in walk order), the bitmask of the ops ``j`` with ``done[j] <= start[k]`` on
    every vEU (bit ``j``; never ``k`` itself).

    Only the entries of ``done`` above 0 can fail (clocks are not negative), and on an unrolled
    RNN an op runs on a few vEUs, so the test is over those entries.  Comparing each op with each
    entry was quadratic (4 of 12 s of CPU compiling conv-bilstm-asr for cuda: 8,081 ops, 60,292
    entries); instead a block of ops is bounded by the elementwise maximum and minimum of its
    ``start`` rows: an op with an entry above the maximum is done before none of the block, one with
    every entry at or below the minimum before all of it, and only the rest (ops running about when
    the block starts) are compared entry by entry."""
    n = done.shape[0]
    rows, cols = np.nonzero(done > 0)  # row-major: each op's entries together
    values = done[rows, cols]
    firsts = np.searchsorted(rows, np.arange(n + 1))
    has_entries = firsts[1:] > firsts[:-1]
    if not has_entries.all():  # an op done nowhere (a vEU-less op is done "everywhere" instead)
        raise ScheduleError("an op of the segment runs on no vEU")
    masks: list[int] = []
    for lo in range(0, n, _MASK_BLOCK):
        block = start[lo:lo + _MASK_BLOCK]
        fails_all = np.logical_or.reduceat(values > block.max(axis=0)[cols], firsts[:-1])
        holds_all = np.logical_and.reduceat(values <= block.min(axis=0)[cols], firsts[:-1])
        hits = np.zeros((block.shape[0], n), bool)
        hits[:, holds_all] = True
        mixed = np.flatnonzero(~fails_all & ~holds_all)
        if mixed.size:
            counts = firsts[mixed + 1] - firsts[mixed]
            ends = np.cumsum(counts)
            entries = np.repeat(firsts[mixed] - ends + counts, counts) + np.arange(int(ends[-1]))
            late = values[entries] > block[:, cols[entries]]
            hits[:, mixed] = ~np.logical_or.reduceat(late, ends - counts, axis=1)
        own = np.arange(block.shape[0])
        hits[own, lo + own] = False
        packed = np.packbits(hits, axis=1, bitorder="little")
        width = packed.shape[1]
        text = packed.tobytes()
        masks.extend(int.from_bytes(text[r * width:(r + 1) * width], "little") for r in own.tolist())
    return masks


def _estimated_walk_steps(starts: np.ndarray, flat: np.ndarray, n_rt: int, rtask_op: np.ndarray, dur: np.ndarray,
                    wait_starts: np.ndarray, waits: np.ndarray, rtask_veu: np.ndarray, n_ops: int
                    ) -> tuple[np.ndarray, int, bool]:
    """The ops in the order the schedule's cost model first starts them, and whether every entry ran.

    The entry taken next is the head (of any vEU) with the earliest estimated start, the lowest vEU
    on a tie; a barrier head is eligible once every rTask it waits for on other vEUs has finished.
    Heads are kept in a heap keyed (start, vEU), and a blocked barrier is woken by the last of its
    waits (registered per waited rTask in linked lists), so each entry costs O(log vEUs + waits)."""
    nv = starts.size - 1
    time = np.zeros(nv)
    pos = starts[:nv].copy()
    finish = np.zeros(max(n_rt, 1))
    finished = np.zeros(max(n_rt, 1), np.bool_)
    missing = np.zeros(nv, np.int64)
    head = np.full(max(n_rt, 1), -1, np.int64)  # per rTask: its first registration
    nxt = np.empty(max(waits.size, 1), np.int64)
    who = np.empty(max(waits.size, 1), np.int64)
    n_reg = 0
    seen = np.zeros(max(n_ops, 1), np.bool_)
    walk = np.empty(max(n_ops, 1), np.int64)
    n_walk = 0
    heap = [(0.0, 0)]
    heap.pop()
    offers = [0]
    offers.pop()
    for v in range(nv):
        offers.append(v)
    while True:
        while offers:  # put each offered vEU's head in the heap, or register it with its waits
            v = offers.pop()
            if pos[v] >= starts[v + 1]:
                continue
            e = flat[pos[v]]
            if e < n_rt:
                heapq.heappush(heap, (time[v], v))
                continue
            b = e - n_rt
            count = 0
            for j in range(wait_starts[b], wait_starts[b + 1]):
                w = waits[j]
                if rtask_veu[w] != v and not finished[w]:
                    nxt[n_reg] = head[w]
                    who[n_reg] = v
                    head[w] = n_reg
                    n_reg += 1
                    count += 1
            if count:
                missing[v] = count
                continue
            t = time[v]
            for j in range(wait_starts[b], wait_starts[b + 1]):
                w = waits[j]
                if rtask_veu[w] != v and finish[w] > t:
                    t = finish[w]
            heapq.heappush(heap, (t, v))
        if not heap:
            break
        best_t, v = heapq.heappop(heap)
        e = flat[pos[v]]
        if e >= n_rt:
            time[v] = best_t
        else:
            i = rtask_op[e]
            if not seen[i]:
                seen[i] = True
                walk[n_walk] = i
                n_walk += 1
            time[v] = best_t + dur[i]
            finish[e] = time[v]
            finished[e] = True
        pos[v] += 1
        offers.append(v)
        if e < n_rt:
            r = head[e]
            while r >= 0:
                u = who[r]
                missing[u] -= 1
                if missing[u] == 0:
                    offers.append(u)
                r = nxt[r]
    done = True
    for v in range(nv):
        if pos[v] < starts[v + 1]:
            done = False
    return walk, n_walk, done


#: The estimated walk runs as Python below this many entries + waits, compiled above.
LARGE_ESTIMATED_WALK = 100_000
_estimated_walk = OnDemandJit(_estimated_walk_steps)


def _segment_clocks(n_ops: int, sched: Schedule) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(ops in first-runnable order, done[op, vEU], start[op, vEU]) for one segment."""
    veus = len(sched.programs)
    n_rt = sched.num_rtasks
    rtask_op = np.asarray(sched.rtask_op, np.int64)
    try:
        sc = schedule_clocks(sched)
    except ScheduleError as exc:
        raise ScheduleError(f"{sched.graph_name}: the barriers of the schedule deadlock ({exc}); check it with "
                            "rammer.schedule.verify") from None
    # Ops are walked in the order of their estimated start (the schedule's cost model), which is
    # also the planner's walk: a buffer is then freed and reused about when it would be at run time.
    lengths = [len(w) for w in sched.barrier_waits]
    wait_starts = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=wait_starts[1:])
    waits = np.fromiter(chain.from_iterable(sched.barrier_waits), np.int64, int(wait_starts[-1]))
    flat = np.fromiter(chain.from_iterable(sched.programs), np.int64, int(sc.starts[-1]))
    durations = np.asarray(sched.op_durations, np.float64)
    order, n_walk, finished = _estimated_walk(sc.starts, flat, n_rt, rtask_op, durations, wait_starts, waits,
                                              sc.rtask_veu, n_ops, large=flat.size + waits.size >= LARGE_ESTIMATED_WALK)
    if not finished:  # cannot happen once the clocks found no cycle
        raise ScheduleError(f"{sched.graph_name}: the barriers of the schedule deadlock; check it with "
                            "rammer.schedule.verify, which names the cycle")
    walk = order[:n_walk].tolist()
    # ops without rTasks (none are expected) neither precede nor follow anything
    done = np.full((n_ops, veus), np.iinfo(np.int64).max // 2, np.int64)
    start = np.zeros((n_ops, veus), np.int64)
    placed = np.nonzero(sc.rtask_veu >= 0)[0]
    ops_of = rtask_op[placed]
    has = np.zeros(n_ops, bool)
    has[ops_of] = True
    done[has] = 0
    np.maximum.at(done, (ops_of, sc.rtask_veu[placed]), sc.rtask_pos[placed] + 1)
    # start[op]: what every rTask of op knows when it starts (elementwise minimum of their clocks),
    # an op at a time so that memory stays one op's rTasks x vEUs
    bounds = np.searchsorted(ops_of, np.arange(n_ops + 1))
    for i in np.nonzero(has)[0].tolist():
        start[i] = sc.min_before_rtasks(placed[bounds[i]:bounds[i + 1]])
    seen = set(walk)
    walk += [i for i in range(n_ops) if i not in seen]
    return walk, done, start
