"""Vector clocks over programs of signals and waits: the one happens-before engine of the scheduler.

A *program* per block (a vEU) is a sequence of steps of three kinds:

* a **signal**: the block has finished everything before it (its signal count goes up by one);
* a **wait group**: the block stops until, for each ``(u, c)`` of the group, block ``u`` has sent
  ``c`` signals;
* a **mark**: changes nothing (a call whose clock a caller wants to read);
* a **wait-then-signal**: a wait group, then a signal (a schedule's barrier entry, which counts as
  one entry of its vEU's program once passed).

The clock of a block at a step says, per block, how many of its signals are certainly sent
(directly or through waits, transitively).  Three readers use it:

* :func:`rammer.schedule.verify` and :func:`rammer.schedule.schedule_order`: a schedule's vEU
  programs, every entry a signal (an entry completes, and the next one starts, in program order) and
  every barrier a wait group for ``(vEU of a waited rTask, its position + 1)``;
* :func:`rammer.schedule.programs.check_races`: block programs of calls (marks), signals and waits
  (each run of consecutive waits one group).

The clocks are those of the group rows ``R[g]`` (the clock just after group ``g`` is passed):
``R[g] = max(R[previous group of the block], R[group before signal c of u] with [u] raised to c
for every (u, c) of g)``, and a step's clock is its block's last group row with the block's own
entry replaced by its signal count there.  So the work and memory grow with groups x blocks, not
with steps x blocks, and a step's clock is read only where a caller needs it.

The walk is compiled with numba when it is large (:class:`rammer.on_demand_jit.OnDemandJit`: a
Python loop over a full-size model's million barrier waits took most of a GPU compile, 4-8 s per
reader; a small one runs as Python, without importing numba); it visits the blocks round-robin, each until it
is blocked, and a blocked block is rechecked only once the signal it waits for is sent.  The
result does not depend on the visiting order; a program whose blocks all stop short is a
deadlock, reported with what each stopped block waits for.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ..errors import ScheduleError
from ..on_demand_jit import OnDemandJit
from .schedule import Schedule
from .walk import _deadlock_message, rtask_locations

__all__ = ["SIGNAL", "WAIT", "MARK", "WAIT_SIGNAL", "Clocks", "Deadlock", "program_clocks", "ScheduleClocks",
           "schedule_clocks"]

#: Step kinds.
SIGNAL, WAIT, MARK, WAIT_SIGNAL = 0, 1, 2, 3


@dataclass(frozen=True)
class Deadlock:
    """Blocks that cannot finish: per stuck block, its step index and the ``(u, c)`` it waits for
    (``c`` more than block ``u`` ever sends, or sent only after ``u`` itself is stuck)."""

    stuck: dict[int, tuple[int, int, int]]


#: Up to this many (steps x blocks), :meth:`Clocks.min_before` takes the minimum of the full matrix.
SMALL_MIN_BEFORE = 1 << 16


@dataclass(frozen=True, eq=False)
class Clocks:
    """The clocks of programs given as flat step arrays (see :func:`program_clocks`)."""

    #: Number of blocks.
    blocks: int
    #: Per group, the clock just after it is passed (groups x blocks).
    rows: np.ndarray
    #: Per step: the last group row of its block at or before it (-1: none yet) ...
    step_row: np.ndarray
    #: ... and the signals its block sent before it.
    step_sent: np.ndarray

    def before(self, steps: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """The clocks (len(steps) x blocks) at ``steps`` (flat indices), which run on ``blocks``:
        their block's last group row with its own entry set to its own signal count."""
        steps = np.asarray(steps, np.int64)
        rows = self.step_row[steps]
        out = np.zeros((steps.size, self.blocks), np.int64)
        has = rows >= 0
        out[has] = self.rows[rows[has]]
        out[np.arange(steps.size), np.asarray(blocks, np.int64)] = self.step_sent[steps]
        return out

    def before_at(self, steps: np.ndarray, own: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """``before(steps, own)[k, blocks[k]]`` for every ``k``: one entry of each clock, without
        the (steps x blocks) matrix."""
        steps = np.asarray(steps, np.int64)
        blocks = np.asarray(blocks, np.int64)
        rows = self.step_row[steps]
        out = np.zeros(steps.size, np.int64)
        has = rows >= 0
        out[has] = self.rows[rows[has], blocks[has]]
        mine = blocks == np.asarray(own, np.int64)
        out[mine] = self.step_sent[steps[mine]]
        return out

    def min_before(self, steps: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """``before(steps, blocks).min(axis=0)`` (what every one of ``steps`` knows when it starts),
        without the (steps x blocks) matrix: an operator of a batched model has 10^5 rTasks on 10^2
        vEUs, and they share a few group rows.  Per block present, the minimum over the distinct
        rows of its steps, with its own entry the least signal count there."""
        steps = np.asarray(steps, np.int64)
        blocks = np.asarray(blocks, np.int64)
        if steps.size * self.blocks <= SMALL_MIN_BEFORE:  # the matrix is cheaper than the grouping
            return self.before(steps, blocks).min(axis=0)
        rows = self.step_row[steps]
        present, block_rank = np.unique(blocks, return_inverse=True)
        pairs = np.unique(block_rank.ravel() * (self.rows.shape[0] + 1) + (rows + 1))
        pair_block, pair_row = pairs // (self.rows.shape[0] + 1), pairs % (self.rows.shape[0] + 1) - 1
        clocks = np.zeros((pairs.size, self.blocks), np.int64)
        has = pair_row >= 0
        clocks[has] = self.rows[pair_row[has]]
        per_block = np.minimum.reduceat(clocks, np.searchsorted(pair_block, np.arange(present.size)), axis=0)
        own = np.full(present.size, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(own, block_rank.ravel(), self.step_sent[steps])
        per_block[np.arange(present.size), present] = own
        return per_block.min(axis=0)


def _walk_steps(starts: np.ndarray, kinds: np.ndarray, group_of: np.ndarray, group_starts: np.ndarray,
          wait_block: np.ndarray, wait_count: np.ndarray, signal_starts: np.ndarray
          ) -> tuple[np.ndarray, ...]:
    nb = starts.size - 1
    n_groups = group_starts.size - 1
    rows = np.zeros((max(n_groups, 1), nb), np.int64)
    step_row = np.full(kinds.size, -1, np.int64)
    step_sent = np.zeros(kinds.size, np.int64)
    signal_row = np.full(max(signal_starts[nb], 1), -1, np.int64)  # the last group before each signal
    pos = starts[:nb].copy()
    sent = np.zeros(nb, np.int64)
    last = np.full(nb, -1, np.int64)
    on_block = np.full(nb, -1, np.int64)  # what a stopped block waits for
    on_count = np.zeros(nb, np.int64)
    moved = True
    while moved:
        moved = False
        for b in range(nb):
            if on_block[b] >= 0 and sent[on_block[b]] < on_count[b]:
                continue
            while pos[b] < starts[b + 1]:
                i = pos[b]
                k = kinds[i]
                if k == 1 or k == 3:
                    g = group_of[i]
                    ready = True
                    for j in range(group_starts[g], group_starts[g + 1]):
                        if sent[wait_block[j]] < wait_count[j]:
                            on_block[b] = wait_block[j]
                            on_count[b] = wait_count[j]
                            ready = False
                            break
                    if not ready:
                        break
                    on_block[b] = -1
                    row = rows[g]
                    if last[b] >= 0:
                        row[:] = rows[last[b]]
                    for j in range(group_starts[g], group_starts[g + 1]):
                        u = wait_block[j]
                        c = wait_count[j]
                        if c <= 0:
                            continue
                        r = signal_row[signal_starts[u] + c - 1]
                        if r >= 0:
                            src = rows[r]
                            for x in range(nb):
                                if src[x] > row[x]:
                                    row[x] = src[x]
                        if c > row[u]:
                            row[u] = c
                    row[b] = sent[b]
                    last[b] = g
                step_row[i] = last[b]
                step_sent[i] = sent[b]
                if k == 0 or k == 3:
                    signal_row[signal_starts[b] + sent[b]] = last[b]
                    sent[b] += 1
                pos[b] = i + 1
                moved = True
    return rows, step_row, step_sent, pos, on_block, on_count, sent


#: The walk runs as Python below this much work (steps + waits x blocks) and compiled above it.
LARGE_WALK = 200_000
_walk = OnDemandJit(_walk_steps)


def program_clocks(starts: np.ndarray, kinds: np.ndarray, group_of: np.ndarray, group_starts: np.ndarray,
                   wait_block: np.ndarray, wait_count: np.ndarray) -> Clocks | Deadlock:
    """The clocks of block programs given as flat arrays: block ``b``'s steps are
    ``starts[b] .. starts[b + 1]``, ``kinds[i]`` is :data:`SIGNAL`, :data:`WAIT`, :data:`MARK` or
    :data:`WAIT_SIGNAL`,
    a wait step's group is ``group_of[i]``, whose pairs ``(wait_block[j], wait_count[j])`` are
    ``group_starts[g] .. group_starts[g + 1]`` (every group used by exactly one step; blocks in
    range, checked by the caller).  A :class:`Deadlock` when some block cannot finish."""
    starts = np.ascontiguousarray(starts, np.int64)
    kinds = np.ascontiguousarray(kinds, np.int8)
    nb = starts.size - 1
    signals = np.zeros(nb + 1, np.int64)
    if kinds.size:
        block_of = np.repeat(np.arange(nb, dtype=np.int64), np.diff(starts))
        signalling = (kinds == SIGNAL) | (kinds == WAIT_SIGNAL)
        np.cumsum(np.bincount(block_of[signalling], minlength=nb), out=signals[1:])
    group_starts = np.ascontiguousarray(group_starts, np.int64)
    work = kinds.size + int(group_starts[-1] if group_starts.size else 0) * nb
    rows, step_row, step_sent, pos, on_block, on_count, sent = _walk(
        starts, kinds, np.ascontiguousarray(group_of, np.int64), group_starts,
        np.ascontiguousarray(wait_block, np.int64), np.ascontiguousarray(wait_count, np.int64), signals,
        large=work >= LARGE_WALK)
    stuck = {b: (int(pos[b]), int(on_block[b]), int(on_count[b])) for b in range(nb) if pos[b] < starts[b + 1]}
    if stuck:
        return Deadlock(stuck)
    return Clocks(nb, rows, step_row, step_sent)


@dataclass(frozen=True, eq=False)
class ScheduleClocks:
    """The clocks of a schedule's vEU programs: every entry counts as one signal of its vEU (it
    completes before the next one starts), every barrier is a wait group for
    ``(vEU of a waited rTask, its position + 1)``.  A clock's entry ``u`` is then how many
    entries of vEU ``u`` are certainly complete."""

    clocks: Clocks
    #: Flat index of vEU ``v``'s first entry (``starts[v] + position`` is an entry's flat index).
    starts: np.ndarray
    #: Per rTask id, its vEU and position (-1 where no vEU runs it).
    rtask_veu: np.ndarray
    rtask_pos: np.ndarray

    def before_rtasks(self, rtasks: np.ndarray) -> np.ndarray:
        """The clocks (len(rtasks) x vEUs) just before each of ``rtasks`` (all placed) starts."""
        veu = self.rtask_veu[rtasks]
        return self.clocks.before(self.starts[veu] + self.rtask_pos[rtasks], veu)

    def min_before_rtasks(self, rtasks: np.ndarray) -> np.ndarray:
        """``before_rtasks(rtasks).min(axis=0)``: what every one of ``rtasks`` knows when it starts."""
        veu = self.rtask_veu[rtasks]
        return self.clocks.min_before(self.starts[veu] + self.rtask_pos[rtasks], veu)


def schedule_clocks(schedule: Schedule) -> ScheduleClocks:
    """The clocks of ``schedule``; raises :class:`ScheduleError` on a barrier that waits for an
    rTask no vEU runs or that comes later on its own vEU, and on a cycle of barriers (naming it)."""
    n = schedule.num_rtasks
    lengths = [len(p) for p in schedule.programs]
    flat = np.fromiter(chain.from_iterable(schedule.programs), np.int64, sum(lengths))
    wait_lengths = [len(w) for w in schedule.barrier_waits]
    waits = np.fromiter(chain.from_iterable(schedule.barrier_waits), np.int64, sum(wait_lengths))
    last = _LAST_CLOCKS.get("of")
    if (last is not None and last[0]() is schedule and last[1] == n and last[2] == lengths
            and last[3] == wait_lengths and np.array_equal(last[4], flat) and np.array_equal(last[5], waits)):
        return last[6]  # the same schedule, entries and waits: the same clocks
    result = _schedule_clocks(schedule, n, lengths, flat, wait_lengths, waits)
    _LAST_CLOCKS["of"] = (weakref.ref(schedule, lambda _: _LAST_CLOCKS.clear()), n, lengths, wait_lengths, flat,
                          waits, result)
    return result


#: The last clocks :func:`schedule_clocks` computed, with the entries and waits they came from:
#: verify and the planner's ordering both ask for the clocks of one schedule, one after the other
#: (a walk of every entry and wait: 10^6 on a full-size GPU model).  Returned only for the same
#: schedule object with equal entries and waits, so a changed schedule is walked again, and kept
#: no longer than that schedule lives; callers only read the result.
_LAST_CLOCKS: dict[str, tuple] = {}


def _schedule_clocks(schedule: Schedule, n: int, lengths: list[int], flat: np.ndarray, wait_lengths: list[int],
                     waits: np.ndarray) -> ScheduleClocks:
    loc_veu, loc_pos = rtask_locations(schedule)
    nv = len(lengths)
    starts = np.zeros(nv + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    is_barrier = flat >= n
    kinds = np.where(is_barrier, WAIT_SIGNAL, SIGNAL).astype(np.int8)
    group_of = np.where(is_barrier, flat - n, -1)
    group_starts = np.zeros(len(wait_lengths) + 1, np.int64)
    np.cumsum(wait_lengths, out=group_starts[1:])
    # Where each barrier is (barriers in no program keep -1: the verifier reports them).
    barrier_veu = np.full(len(wait_lengths), -1, np.int64)
    barrier_pos = np.full(len(wait_lengths), -1, np.int64)
    at = np.nonzero(is_barrier)[0]
    veu_of_flat = np.repeat(np.arange(nv, dtype=np.int64), lengths)
    barrier_veu[flat[at] - n] = veu_of_flat[at]
    barrier_pos[flat[at] - n] = at - starts[veu_of_flat[at]]
    owner = np.repeat(barrier_veu, wait_lengths)
    placed = owner >= 0
    bad = placed & ((waits < 0) | (waits >= n))
    bad[~bad & placed] = loc_veu[waits[~bad & placed]] < 0
    if bad.any():
        j = int(np.nonzero(bad)[0][0])
        b = int(np.searchsorted(group_starts, j, side="right") - 1)
        raise ScheduleError(f"barrier {n + b} on vEU {barrier_veu[b]} waits for "
                            f"{schedule.describe_rtask(int(waits[j]))}, which no vEU runs")
    safe = np.where(placed, waits, 0)
    wait_veu = np.where(placed, loc_veu[safe], 0)
    wait_pos = np.where(placed, loc_pos[safe], 0)
    own = placed & (wait_veu == owner)
    barrier_of_wait = np.repeat(np.arange(len(wait_lengths), dtype=np.int64), wait_lengths)
    later = own & (wait_pos > barrier_pos[barrier_of_wait])
    if later.any():
        j = int(np.nonzero(later)[0][0])
        b = int(barrier_of_wait[j])
        raise ScheduleError(f"deadlock: barrier {n + b} at position {barrier_pos[b]} on vEU {barrier_veu[b]} waits "
                            f"for {schedule.describe_rtask(int(waits[j]))}, which comes later on the same vEU")
    # A wait on the barrier's own vEU is met by program order.
    counts = np.where(own | ~placed, 0, wait_pos + 1)
    result = program_clocks(starts, kinds, group_of, group_starts, wait_veu, counts)
    if isinstance(result, Deadlock):
        blocked = {v: (u, c - 1, int(flat[i])) for v, (i, u, c) in result.stuck.items()}
        raise ScheduleError(_deadlock_message(schedule, blocked, loc_veu.tolist(), loc_pos.tolist()))
    return ScheduleClocks(result, starts, loc_veu, loc_pos)
