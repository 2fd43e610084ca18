"""Walking a schedule in an order its barriers allow.

:func:`walk` yields every entry ``(veu, position, entry_id)`` such that when
a barrier is yielded, every rTask it waits for has been yielded before: the
simulator's order.  The verifier and the memory planner's ordering read the
vector clocks of :mod:`.clocks` instead (compiled, one row per barrier), which
report a deadlock (a cycle of barriers waiting on each other) with this
module's message.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

import numpy as np

from ..errors import ScheduleError
from .schedule import Schedule


def rtask_locations(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """(vEU, position) of every rTask id; -1 where an id is in no program.
    Raises on ids out of range (duplicates are left to the verifier)."""
    n = schedule.num_rtasks
    veu = np.full(n, -1, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    limit = n + schedule.num_barriers
    for v, prog in enumerate(schedule.programs):
        ids = np.asarray(prog, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= limit):
            bad = int(ids[(ids < 0) | (ids >= limit)][0])
            raise ScheduleError(f"vEU {v} runs entry {bad}, which is neither an rTask nor a barrier of the schedule")
        is_task = ids < n
        veu[ids[is_task]] = v
        pos[ids[is_task]] = np.nonzero(is_task)[0]
    return veu, pos


def rtask_placement(schedule: Schedule) -> dict[int, tuple[int, int]]:
    """rTask id -> (vEU, position in its program), for the rTasks some vEU runs: the one
    placement map the ordering, the row programs and the backends' program builders read."""
    veu, pos = rtask_locations(schedule)
    return {e: (v, p) for e, (v, p) in enumerate(zip(veu.tolist(), pos.tolist())) if v >= 0}


def walk(schedule: Schedule, locations: tuple[np.ndarray, np.ndarray] | None = None
         ) -> Iterator[tuple[int, int, int]]:
    """Yield ``(veu, position, entry)`` in a barrier-respecting order; raise a
    :class:`ScheduleError` describing the cycle on a deadlock."""
    n = schedule.num_rtasks
    loc_veu, loc_pos = locations or rtask_locations(schedule)
    loc_veu_l, loc_pos_l = loc_veu.tolist(), loc_pos.tolist()
    programs = schedule.programs
    waits = schedule.barrier_waits
    cursors = [0] * len(programs)
    waiting: dict[int, list[tuple[int, int]]] = {}  # vEU u -> heap of (position on u, blocked vEU)
    blocked: dict[int, tuple[int, int, int]] = {}   # blocked vEU -> (u, q, barrier)
    ready = deque(range(len(programs)))
    while ready:
        v = ready.popleft()
        blocked.pop(v, None)
        prog = programs[v]
        p = cursors[v]
        while p < len(prog):
            e = prog[p]
            if e >= n:
                hold = None
                for w in waits[e - n]:
                    if not 0 <= w < n or loc_veu_l[w] < 0:
                        raise ScheduleError(
                            f"barrier {e} on vEU {v} waits for {schedule.describe_rtask(w)}, which no vEU runs")
                    u, q = loc_veu_l[w], loc_pos_l[w]
                    if u == v:
                        if q > p:
                            raise ScheduleError(
                                f"deadlock: barrier {e} at position {p} on vEU {v} waits for "
                                f"{schedule.describe_rtask(w)}, which comes later on the same vEU")
                        continue
                    if cursors[u] <= q:
                        hold = (u, q)
                        break
                if hold is not None:
                    heapq.heappush(waiting.setdefault(hold[0], []), (hold[1], v))
                    blocked[v] = (hold[0], hold[1], e)
                    break
            yield v, p, e
            p += 1
            cursors[v] = p
            heap = waiting.get(v)
            while heap and heap[0][0] < p:
                ready.append(heapq.heappop(heap)[1])
    if blocked:
        raise ScheduleError(_deadlock_message(schedule, blocked, loc_veu_l, loc_pos_l))


def _deadlock_message(schedule: Schedule, blocked: dict[int, tuple[int, int, int]],
                      loc_veu: list[int], loc_pos: list[int]) -> str:
    # Every unfinished vEU is blocked on another vEU, so following the
    # "waits for" edges from any of them must close a cycle.
    v = next(iter(blocked))
    seen: list[int] = []
    while v not in seen:
        seen.append(v)
        v = blocked[v][0]
    cycle = seen[seen.index(v):]
    parts = []
    for x in cycle:
        u, q, barrier = blocked[x]
        target = schedule.programs[u][q]
        parts.append(f"vEU {x} (barrier {barrier}) waits for {schedule.describe_rtask(target)} "
                     f"at position {q} on vEU {u}")
    return "deadlock: a cycle of barriers: " + "; ".join(parts)
