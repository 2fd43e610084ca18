"""A schedule as straight-line programs of rows, one program per vEU, for code generators.

Every rTask becomes one row of its vEU's program.  A barrier becomes one :class:`RowWait` row per
other vEU it waits on: "wait until vEU ``veu`` has finished ``rows`` rows of its program" (its
last awaited rTask's row and every row before it, waits included).  A runtime implements that with
one progress counter per vEU, bumped after every row; no barrier needs a global rendezvous.

Per-vEU scratch: each vEU gets one region as large as the largest need of the rTasks it runs,
laid out one after the other (:func:`veu_scratch`, :func:`place_scratch`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .schedule import Schedule
from .walk import rtask_placement


@dataclass(frozen=True)
class RowWait:
    """Wait until vEU ``veu`` has finished the first ``rows`` rows of its program."""

    veu: int
    rows: int


def row_waits(schedule: Schedule) -> list[list[tuple[RowWait, ...]]]:
    """Per vEU, per entry of its program: ``()`` for an rTask (one row), the waits of a barrier
    (one row each; waits on the barrier's own vEU are dropped, program order covers them)."""
    n_rt = schedule.num_rtasks
    loc = rtask_placement(schedule)
    # Which (vEU, position) each barrier waits for last, and the rows each program has done
    # after each of its entries.
    targets: list[list[list[tuple[int, int]]]] = []
    done_after: list[list[int]] = []
    for v, prog in enumerate(schedule.programs):
        per_entry: list[list[tuple[int, int]]] = []
        counts: list[int] = []
        total = 0
        for e in prog:
            if e < n_rt:
                per_entry.append([])
                total += 1
            else:
                last: dict[int, int] = {}
                for w in schedule.barrier_waits[e - n_rt]:
                    u, q = loc[w]
                    if u != v:
                        last[u] = max(last.get(u, -1), q)
                per_entry.append(sorted(last.items()))
                total += len(last)
            counts.append(total)
        targets.append(per_entry)
        done_after.append(counts)
    return [[tuple(RowWait(u, done_after[u][q]) for u, q in entry) for entry in per_entry]
            for per_entry in targets]


def veu_scratch(schedules: Sequence[Schedule], need: Callable[[int, int], int], num_veus: int) -> list[int]:
    """Per vEU, the largest ``need(k, op)`` (scratch of op ``op`` of schedule ``k``) over the rTasks
    it runs in any of ``schedules``."""
    out = [0] * num_veus
    for k, sched in enumerate(schedules):
        ops = sched.rtask_op
        for v, prog in enumerate(sched.programs):
            for e in prog:
                if e < sched.num_rtasks:
                    out[v] = max(out[v], need(k, int(ops[e])))
    return out


def place_scratch(need: Sequence[int], base: int, align: int = 1) -> tuple[list[int], int]:
    """Each vEU's scratch region from ``base`` on, one after the other, each size rounded up to
    ``align`` (all in the caller's unit); returns the regions' starts and the end."""
    starts: list[int] = []
    pos = base
    for n in need:
        starts.append(pos)
        pos += (n + align - 1) // align * align
    return starts, pos
