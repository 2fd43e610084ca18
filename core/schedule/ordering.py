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
from typing import TypeVar

import numpy as np

from ..errors import ScheduleError
from .schedule import Schedule
from .walk import rtask_placement

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
        done, start = done[walk], start[walk]  # rows in walk order
        for k, i in enumerate(walk):
            order.append(group[i])
            # every op of the segment whose last rTask on each vEU is known complete when
            # each rTask of op i starts (bit k' of the segment's mask: walk position k')
            hits = np.all(done <= start[k], axis=1)
            hits[k] = False
            bits = int.from_bytes(np.packbits(hits, bitorder="little").tobytes(), "little")
            anc.append(before | (bits << base))
        before |= ((1 << len(walk)) - 1) << base
    return order, anc


def _segment_clocks(n_ops: int, sched: Schedule) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(ops in first-runnable order, done[op, vEU], start[op, vEU]) for one segment."""
    veus = len(sched.programs)
    n_rt = sched.num_rtasks
    rtask_op = np.asarray(sched.rtask_op)
    where = rtask_placement(sched)
    # Vector clock before each entry.  Entries are taken in the order of their estimated start
    # (the schedule's cost model), which is also the planner's walk: a buffer is then freed
    # and reused about when it would be at run time.
    dur = np.asarray(sched.op_durations, np.float64)
    clock_before: dict[tuple[int, int], np.ndarray] = {}
    finish: dict[tuple[int, int], float] = {}
    current = [np.zeros(veus, np.int64) for _ in range(veus)]
    time = [0.0] * veus
    pos = [0] * veus
    walk: list[int] = []
    seen: set[int] = set()
    # The entry taken next is the head (of any vEU) with the earliest estimated start, the lowest
    # vEU on a tie; a barrier head is eligible once every rTask it waits for on other vEUs has
    # finished.  Heads are kept in a heap keyed (start, vEU) and a blocked barrier is woken by the
    # last of its waits, so each entry costs O(log vEUs + waits) instead of a scan of every vEU
    # (the scan made this quadratic: 17 s of a 215-node model's GPU compile).
    ready: list[tuple[float, int]] = []
    missing = [0] * veus
    waiting_on: dict[tuple[int, int], list[int]] = {}

    def offer(v: int) -> None:
        """Put vEU ``v``'s head in the heap, or register it with the waits it is blocked on."""
        if pos[v] >= len(sched.programs[v]):
            return
        e = sched.programs[v][pos[v]]
        if e < n_rt:
            heapq.heappush(ready, (time[v], v))
            return
        waits = [where[w] for w in sched.barrier_waits[e - n_rt]]
        blocked = {(u, qw) for u, qw in waits if u != v and (u, qw) not in finish}
        if blocked:
            missing[v] = len(blocked)
            for key in blocked:
                waiting_on.setdefault(key, []).append(v)
            return
        heapq.heappush(ready, (max([time[v]] + [finish[(u, qw)] for u, qw in waits if u != v]), v))

    for v in range(veus):
        offer(v)
    while ready:
        best_t, v = heapq.heappop(ready)
        q = pos[v]
        e = sched.programs[v][q]
        clock = current[v].copy()
        clock[v] = q
        if e >= n_rt:
            for w in sched.barrier_waits[e - n_rt]:
                u, qw = where[w]
                if u != v:
                    after = clock_before[(u, qw)].copy()
                    after[u] = qw + 1
                    np.maximum(clock, after, out=clock)
            time[v] = best_t
        else:
            i = int(rtask_op[e])
            if i not in seen:
                seen.add(i)
                walk.append(i)
            time[v] = best_t + dur[i]
        finish[(v, q)] = time[v]
        clock_before[(v, q)] = clock
        current[v] = clock.copy()
        current[v][v] = q + 1
        pos[v] += 1
        offer(v)
        for u in waiting_on.pop((v, q), ()):
            missing[u] -= 1
            if missing[u] == 0:
                offer(u)
    if any(pos[v] < len(p) for v, p in enumerate(sched.programs)):
        raise ScheduleError(f"{sched.graph_name}: the barriers of the schedule deadlock; check it with "
                            "rammer.schedule.verify, which names the cycle")
    # ops without rTasks (none are expected) neither precede nor follow anything
    done = np.full((n_ops, veus), np.iinfo(np.int64).max // 2, np.int64)
    start = np.zeros((n_ops, veus), np.int64)
    has = np.zeros(n_ops, bool)
    for e, (v, q) in where.items():
        i = int(rtask_op[e])
        if not has[i]:
            done[i] = 0
            start[i] = clock_before[(v, q)]
            has[i] = True
        else:
            np.minimum(start[i], clock_before[(v, q)], out=start[i])
        done[i, v] = max(done[i, v], q + 1)
    walk += [i for i in range(n_ops) if i not in seen]
    return walk, done, start
