"""A schedule as per-vEU programs of steps, and the race check that proves a program's vEUs are
ordered wherever they share memory.

A vEU's program is a list of steps: a :class:`Call` (an rTask, with its arguments and the memory
ranges it reads and writes), a :class:`Signal` (this vEU has finished everything before it) and a
:class:`Wait` (until vEU ``j`` has signalled ``m`` times in this launch).  :func:`check_races`
proves from the declared reads and writes of each call that every cross-vEU conflict is ordered by
a signal/wait pair (vector clocks over the signals), so a program whose barriers were removed is
refused before it runs.

Programs come from a :class:`~rammer.schedule.Schedule` (:func:`from_schedule`: a signal after each
rTask some barrier waits for) or from caller-stated waves (:func:`from_waves`); a backend that
launches once per wave cuts them into waves (:func:`split_waves`), and the race check sees each
launch boundary as an all-vEU barrier (:func:`check_wave_races`).  The GPU backends run these
programs (a vEU is a persistent thread block, ``backends/gpu/entry.py``); the cpu checks its row
programs with :func:`check_races` when the IR is verified (``RAMMER_VERIFY_IR``, on in the tests).
Ranges are in whatever unit the backend uses (floats on the GPU, bytes on the cpu).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .schedule import Schedule
from .walk import rtask_placement

__all__ = ["Call", "Signal", "Wait", "Task", "Step", "ProgramError", "from_waves", "from_schedule", "check_races",
           "split_waves", "check_wave_races", "signals_per_block"]


class ProgramError(ValueError):
    """A program that cannot be built or would race."""


@dataclass(frozen=True)
class Call:
    """Run rTask ``rtask_id`` of device function ``kernel``; ``args`` are, per parameter, an arena
    offset (pointer parameters) or a number (scalars).  ``reads``/``writes`` are arena ranges
    ``(start, length)`` in floats, used by :func:`check_races`."""

    kernel: str
    rtask_id: int
    args: tuple[int | float, ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()
    #: Calls of one operator (``op >= 0``) write disjoint parts of its outputs by construction:
    #: :func:`check_races` does not order them against each other.
    op: int = -1


@dataclass(frozen=True)
class Signal:
    """This block has finished everything before this step."""


@dataclass(frozen=True)
class Wait:
    """Wait until block ``block`` has signalled ``count`` times in this launch."""

    block: int
    count: int


Step = Union[Call, Signal, Wait]  # noqa: UP007 -- a runtime alias, kept in the typing spelling


@dataclass(frozen=True)
class Task:
    """One rTask of a wave (for :func:`from_waves`)."""

    kernel: str
    rtask_id: int
    args: tuple[int | float, ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()


def signals_per_block(programs: list[list[Step]]) -> list[int]:
    return [sum(isinstance(s, Signal) for s in p) for p in programs]


def check_wave_races(waves: list[list[list[Call]]]) -> None:
    """Raise :class:`ProgramError` when two calls of one wave that belong to different ops touch
    the same arena floats (one writing), on any blocks: a launch boundary orders the waves, and
    nothing orders the calls within a wave (the table kernel runs them per rKernel, not in
    program order).  :func:`check_races` on :func:`_wave_steps` says the same across blocks,
    with one all-block barrier per wave; this is the direct, linear form."""
    for w, per_block in enumerate(waves):
        groups: dict[object, tuple[Call, set[tuple[int, int]], set[tuple[int, int]]]] = {}
        for b, calls in enumerate(per_block):
            for i, call in enumerate(calls):
                key = ("op", call.op) if call.op >= 0 else ("call", b, i)
                g = groups.setdefault(key, (call, set(), set()))
                g[1].update(call.reads)
                g[2].update(call.writes)
        calls_of = [c0 for c0, _, _ in groups.values()]
        items = [{"call": c0, "reads": tuple(r), "writes": tuple(wr)} for c0, r, wr in groups.values()]
        for i, j in _touching_pairs(items)[:1]:
            c1, c2 = calls_of[i], calls_of[j]
            raise ProgramError(f"race: {c1.kernel} rTask {c1.rtask_id} and {c2.kernel} rTask {c2.rtask_id} "
                               f"run in wave {w} and touch the same arena memory")


def _wave_steps(waves: list[list[list[Call]]], blocks: int) -> list[list[Step]]:
    programs: list[list[Step]] = [[] for _ in range(blocks)]
    for w, per_block in enumerate(waves):
        if w:
            for p in programs:
                p.append(Signal())
            for p in programs:
                p.extend(Wait(j, w) for j in range(blocks))
        for b, calls in enumerate(per_block):
            programs[b].extend(calls)
    return programs


def split_waves(programs: list[list[Step]], wave_of_op: list[int]) -> list[list[list[Call]]]:
    """Block programs (from :func:`from_schedule`) cut into waves by their calls' ops, dropping
    signals and waits; each block's program must visit waves in order."""
    n = max(wave_of_op, default=-1) + 1
    waves: list[list[list[Call]]] = [[[] for _ in programs] for _ in range(n)]
    for b, steps in enumerate(programs):
        last = 0
        for s in steps:
            if isinstance(s, Call):
                w = wave_of_op[s.op]
                if w < last:
                    raise ProgramError(f"block {b} runs wave {w} after wave {last}; "
                                       f"wave mode needs a wave-ordered schedule")
                last = w
                waves[w][b].append(s)
    return waves


def from_schedule(schedule: Schedule, calls: dict[int, Call]) -> list[list[Step]]:
    """The block programs of a core :class:`rammer.schedule.Schedule`: vEU ``v`` is block ``v``;
    ``calls[rtask id]`` is what each rTask runs.  A barrier entry becomes one :class:`Wait` per
    other block it waits on (for the last waited rTask there), and each rTask some barrier waits
    for is followed by a :class:`Signal` on its block."""
    n = schedule.num_rtasks
    where = rtask_placement(schedule)
    waited = {r for waits in schedule.barrier_waits for r in waits}
    signal_no: dict[int, int] = {}
    for prog in schedule.programs:
        k = 0
        for e in prog:
            if e in waited:
                k += 1
                signal_no[e] = k
    programs: list[list[Step]] = []
    for veu, prog in enumerate(schedule.programs):
        steps: list[Step] = []
        for e in prog:
            if e < n:
                steps.append(calls[e])
                if e in waited:
                    steps.append(Signal())
                continue
            need: dict[int, int] = {}
            for r in schedule.barrier_waits[e - n]:
                blk = where[r][0]
                if blk != veu:
                    need[blk] = max(need.get(blk, 0), signal_no[r])
            steps.extend(Wait(blk, cnt) for blk, cnt in sorted(need.items()))
        programs.append(steps)
    return programs


def from_waves(waves: list[list[Task]], blocks: int, barriers: bool = True) -> list[list[Step]]:
    """Round-robin each wave's tasks over ``blocks`` and put an all-block barrier between waves
    (``barriers=False`` leaves them out: only for showing that :func:`check_races` catches it)."""
    programs: list[list[Step]] = [[] for _ in range(blocks)]
    for w, wave in enumerate(waves):
        if w and barriers:
            for p in programs:
                p.append(Signal())
            for p in programs:
                p.extend(Wait(j, w) for j in range(blocks))
        for i, t in enumerate(wave):
            programs[i % blocks].append(Call(t.kernel, t.rtask_id, t.args, t.reads, t.writes))
    return programs


def _clocks(programs: list[list[Step]]) -> list[list[np.ndarray | None]]:
    """Per block and step, the vector clock before the step (None for a wait): per block, how many
    of its signals are certainly sent (through waits, transitively).  Raises on a wait that can
    never be met.
    Clocks are read-only arrays shared by the steps between two changes (a wait or a signal
    makes a new one), so the work grows with the waits, not with steps x blocks."""
    nb = len(programs)
    at_signal: list[list[np.ndarray]] = [[] for _ in range(nb)]  # clock after each signal
    before: list[list[np.ndarray | None]] = [[] for _ in range(nb)]
    pos = [0] * nb
    clock = [np.zeros(nb, np.int64) for _ in range(nb)]
    # Each block runs until a wait it cannot pass yet; the signal that meets the wait wakes it
    # (rescanning every block until nothing moves cost passes x blocks).
    waiting: dict[tuple[int, int], list[int]] = {}
    runnable = list(range(nb - 1, -1, -1))
    while runnable:
        b = runnable.pop()
        steps, out, here = programs[b], before[b], clock[b]
        seen: list[np.ndarray] = []  # clocks of the waits passed since the last other step
        while pos[b] < len(steps):
            s = steps[pos[b]]
            if isinstance(s, Wait):
                if not 0 <= s.block < nb:
                    raise ProgramError(f"block {b} waits for block {s.block}, which does not exist")
                if len(at_signal[s.block]) < s.count:
                    waiting.setdefault((s.block, s.count), []).append(b)
                    break
                out.append(None)  # a wait's own clock is never read: the run of waits is merged once
                if s.count:
                    seen.append(at_signal[s.block][s.count - 1])
            else:
                if seen:
                    here = np.max(np.vstack([here, *seen]), axis=0)
                    seen = []
                out.append(here)
                if isinstance(s, Signal):
                    here = here.copy()
                    here[b] += 1
                    at_signal[b].append(here)
                    runnable.extend(waiting.pop((b, len(at_signal[b])), ()))
            pos[b] += 1
        if seen:
            here = np.max(np.vstack([here, *seen]), axis=0)
        clock[b] = here
    stuck = [b for b in range(nb) if pos[b] < len(programs[b])]
    if stuck:
        raise ProgramError(f"deadlock: block {stuck[0]} waits at step {pos[stuck[0]]} for a signal never sent")
    return before


def _touching_pairs(items: list[dict]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, of groups whose arena ranges overlap with one of them writing,
    in order: a sweep over the ranges sorted by start, so only overlapping pairs are looked at
    (comparing all pairs of groups made the race check quadratic in the model's operators)."""
    spans = sorted((start, start + n, k, w) for k, g in enumerate(items)
                   for w, ranges in ((True, g["writes"]), (False, g["reads"])) for start, n in ranges if n > 0)
    pairs: set[tuple[int, int]] = set()
    active: list[tuple[int, int, bool]] = []  # (end, group, writes) of the spans begun and not yet ended
    for start, end, k, w in spans:
        active = [a for a in active if a[0] > start]
        for _, k2, w2 in active:
            if k2 != k and (w or w2):
                pairs.add((min(k, k2), max(k, k2)))
        active.append((end, k, w))
    return sorted(pairs)


def check_races(programs: list[list[Step]]) -> None:
    """Raise :class:`ProgramError` unless every two calls on different blocks that touch the same
    arena floats (one writing) are ordered: the later one's block has seen (through waits, also
    transitively) a signal the earlier one's block sent after it.  Calls of one operator
    (equal ``op >= 0``) are not ordered against each other.  Checked per group of calls (an
    operator, or a call with ``op < 0``) and only for groups whose memory overlaps, so the check
    grows with the model rather than with its square."""
    before = _clocks(programs)
    nb = len(programs)
    groups: dict[object, dict] = {}
    for b, steps in enumerate(programs):
        sent = 0
        pending: dict[int, dict] = {}  # groups with a call on b since b's last signal
        for i, s in enumerate(steps):
            if isinstance(s, Signal):
                sent += 1
                for g in pending.values():  # the first signal after a group's last call on b
                    g["need"][b] = sent
                pending.clear()
            elif isinstance(s, Call):
                key = ("op", s.op) if s.op >= 0 else ("call", b, i)
                g = groups.get(key)
                if g is None:
                    g = groups[key] = {"call": s, "reads": set(), "writes": set(), "first": {}, "last": {},
                                       "need": {}}
                g["reads"].update(s.reads)
                g["writes"].update(s.writes)
                if b not in g["first"]:
                    g["first"][b] = (i, before[b][i])
                g["last"][b] = i
                g["need"][b] = -1
                pending[id(g)] = g
    items = list(groups.values())
    for g in items:
        g["reads"], g["writes"] = tuple(sorted(g["reads"])), tuple(sorted(g["writes"]))
        g["blocks"] = np.array(list(g["last"]), np.int64)
        g["need_at"] = np.array([g["need"][b] for b in g["last"]], np.int64)
        g["signalled"] = bool((g["need_at"] >= 0).all())
        g["last_at"] = np.full(nb, -1, np.int64)
        g["last_at"][g["blocks"]] = list(g["last"].values())
        g["first_blocks"] = np.array(list(g["first"]), np.int64)
        g["first_pos"] = np.array([p for p, _ in g["first"].values()], np.int64)
        g["first_clocks"] = np.stack([c for _, c in g["first"].values()])
        g["first_min"] = g["first_clocks"].min(axis=0)

    def ordered(a: dict, z: dict) -> bool:  # every call of a before every call of z
        # the same block: program order
        last = a["last_at"][z["first_blocks"]]
        if ((last >= 0) & (last >= z["first_pos"])).any():
            return False
        # other blocks: each of z's blocks has seen a's signal after a's calls there (what the
        # earliest of z's clocks has seen, every one has)
        if a["signalled"] and (z["first_min"][a["blocks"]] >= a["need_at"]).all():
            return True
        same = z["first_blocks"][:, None] == a["blocks"][None, :]
        seen = (z["first_clocks"][:, a["blocks"]] >= a["need_at"][None, :]) & (a["need_at"] >= 0)[None, :]
        return bool((seen | same).all())

    for i, j in _touching_pairs(items):
        g1, g2 = items[i], items[j]
        if ordered(g1, g2) or ordered(g2, g1):
            continue
        c1, c2 = g1["call"], g2["call"]
        raise ProgramError(f"race: {c1.kernel} rTask {c1.rtask_id} on block {next(iter(g1['first']))} and "
                           f"{c2.kernel} rTask {c2.rtask_id} on block {next(iter(g2['first']))} touch the "
                           f"same arena memory with no barrier between them")
