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

from collections.abc import Callable, Iterator
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, NamedTuple, cast

import numpy as np

from .clocks import MARK, SIGNAL, WAIT, Clocks, program_clocks
from .overlaps import conflict_pairs
from .schedule import Schedule
from .steps import Call, CallColumns, ProgramError, Signal, Step, Task, Wait
from .walk import rtask_locations

__all__ = ["Call", "Signal", "Wait", "Task", "Step", "ProgramError", "from_waves", "from_schedule", "check_races",
           "split_waves", "check_wave_races", "signals_per_block", "step_kinds", "StepIndex", "step_index",
           "BlockPrograms", "CallColumns", "index_matches"]


_KIND = {Call: MARK, Signal: SIGNAL, Wait: WAIT}


def signals_per_block(programs: list[list[Step]], index: StepIndex | None = None) -> list[int]:
    """How many signals each block sends per run; ``index``: the programs' :func:`step_index`,
    where the caller has it (counted from its kinds instead of the steps)."""
    if index is not None and len(index.kinds) == len(programs):
        return [int(np.count_nonzero(k == SIGNAL)) for k in index.kinds]
    return [list(map(type, p)).count(Signal) for p in programs]


def step_kinds(steps: list[Step], block: int = 0) -> np.ndarray:
    """Per step, its kind (:data:`rammer.schedule.clocks.MARK` for a call, ``SIGNAL``, ``WAIT``), with
    C-level passes (a full-size model's programs have a million waits); raises :class:`ProgramError`
    naming ``block`` on anything that is not a step."""
    try:
        return np.fromiter(map(_KIND.__getitem__, map(type, steps)), np.int8, len(steps))
    except KeyError:
        bad = next(s for s in steps if type(s) not in _KIND)
        raise ProgramError(f"block {block}: not a program step: {bad!r}") from None


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


def from_schedule(schedule: Schedule, calls: dict[int, Call] | CallColumns) -> BlockPrograms:
    """The block programs of a core :class:`rammer.schedule.Schedule`: vEU ``v`` is block ``v``;
    ``calls[rtask id]`` is what each rTask runs.  A barrier entry becomes one :class:`Wait` per
    other block it waits on (for the last waited rTask there), and each rTask some barrier waits
    for is followed by a :class:`Signal` on its block.  The result carries its :class:`StepIndex`.
    ``calls`` as :class:`CallColumns`: the result also carries them and its calls' rTask ids
    (``call_rtasks``), and makes its steps only when they are read (:class:`BlockPrograms`): the
    race check and the GPU entry read the columns instead."""
    n = schedule.num_rtasks
    loc_veu, loc_pos = rtask_locations(schedule)
    nv = len(schedule.programs)
    lengths = [len(w) for w in schedule.barrier_waits]
    flat_waits = np.fromiter(chain.from_iterable(schedule.barrier_waits), np.int64, sum(lengths))
    # Each waited rTask's signal number on its vEU: its rank among the waited rTasks there, in
    # program order (arrays: a full-size model's barriers wait for a million rTasks).
    waited = np.zeros(n, bool)
    waited[flat_waits] = True
    signal_no = np.zeros(n, np.int64)
    for prog in schedule.programs:
        ids = np.asarray(prog, np.int64)
        ids = ids[ids < n]
        ids = ids[waited[ids]]
        signal_no[ids] = np.arange(1, ids.size + 1)
    # Per barrier and other vEU, the largest signal number it waits for, in vEU order.
    barrier_veu = np.full(len(lengths), -1, np.int64)
    for v, prog in enumerate(schedule.programs):
        ids = np.asarray(prog, np.int64)
        barrier_veu[ids[ids >= n] - n] = v
    barrier_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    blk = loc_veu[flat_waits]
    if (blk < 0).any():
        raise ProgramError(f"a barrier waits for rTask {int(flat_waits[blk < 0][0])}, which no block runs")
    keep = blk != barrier_veu[barrier_of]
    key = barrier_of[keep] * nv + blk[keep]
    cnt = signal_no[flat_waits[keep]]
    # Sorted by (key, count) as one number (one sort of a million values, not a lexsort of two).
    width = int(cnt.max(initial=0)) + 1
    packed = np.sort(key * width + cnt)
    key, cnt = packed // width, packed % width
    last = np.ones(key.size, bool)
    last[:-1] = key[1:] != key[:-1]
    key, cnt = key[last], cnt[last]
    # One Wait object per distinct (block, count), shared by every barrier that waits for it: a
    # million new objects cost seconds (most of it the garbage collector's passes over them).  The
    # distinct pairs numbered through a table over all (block, count), a few times the signals,
    # instead of a sort of every wait.
    pair = (key % nv) * width + cnt
    present = np.zeros(nv * width, bool)
    present[pair] = True
    distinct = np.nonzero(present)[0]
    which = (np.cumsum(present) - 1)[pair]
    shared = list(map(tuple.__new__, repeat(Wait), zip((distinct // width).tolist(), (distinct % width).tolist())))
    bounds = np.searchsorted(key // nv, np.arange(len(lengths) + 1))
    # The steps of every program as indices into the step objects: the j-th rTask entry (in program
    # order) has its call at 2j and a signal at 2j + 1 (taken when a barrier waits for it), and the
    # shared waits follow.  Laid out first as if each barrier's waits were contiguous (barrier k's at
    # 2 * (rTask entries) + bounds[k] ... bounds[k + 1]), then each wait mapped to its shared object.
    # Array passes, not a loop per entry.
    prog_lengths = [len(p) for p in schedule.programs]
    entries = np.fromiter(chain.from_iterable(schedule.programs), np.int64, sum(prog_lengths))
    is_rtask = entries < n
    rtasks = entries[is_rtask]
    barriers = entries[~is_rtask] - n
    first = np.empty(entries.size, np.int64)
    count = np.empty(entries.size, np.int64)
    first[is_rtask] = 2 * np.arange(rtasks.size)
    count[is_rtask] = 1 + waited[rtasks]
    first[~is_rtask] = 2 * rtasks.size + bounds[barriers]
    count[~is_rtask] = bounds[barriers + 1] - bounds[barriers]
    step_at = np.zeros(entries.size + 1, np.int64)
    np.cumsum(count, out=step_at[1:])
    index = np.repeat(first - step_at[:-1], count) + np.arange(int(step_at[-1]))
    is_wait = index >= 2 * rtasks.size
    index[is_wait] = 2 * rtasks.size + which[index[is_wait] - 2 * rtasks.size]
    cuts = step_at[np.concatenate([[0], np.cumsum(prog_lengths)])].tolist()
    # The step index (kinds, wait pairs) from the same arrays, so the readers need not walk the steps.
    kinds = np.where(is_wait, WAIT, np.where(index % 2 == 0, MARK, SIGNAL)).astype(np.int8)
    shared_pairs = np.column_stack([distinct // width, distinct % width])
    pairs = shared_pairs[index[is_wait] - 2 * rtasks.size].reshape(-1, 2)

    def steps() -> list[list[Step]]:
        objects: list[Step] = [Signal()] * (2 * rtasks.size)
        objects[0::2] = calls.calls(rtasks) if isinstance(calls, CallColumns) else list(map(calls.__getitem__,
                                                                                             rtasks.tolist()))
        objects += shared
        return [list(map(objects.__getitem__, index[a:z].tolist())) for a, z in zip(cuts[:-1], cuts[1:])]

    steps_index = StepIndex([kinds[a:z] for a, z in zip(cuts[:-1], cuts[1:])], pairs.astype(np.int64))
    if isinstance(calls, CallColumns):
        return BlockPrograms.lazy(steps, steps_index, calls, rtasks)
    programs = BlockPrograms(steps())
    programs.steps_index = steps_index
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


class BlockPrograms(list):  # list[list[Step]]
    """The block programs :func:`from_schedule` returns, with their :class:`StepIndex` (``steps_index``)
    made from the arrays it built them from; a reader that has the programs right after
    :func:`from_schedule` passes it on instead of reading every step again.

    Made from :class:`CallColumns` (:meth:`lazy`), it also carries them (``columns``) and the rTask id
    of every call, blocks in turn, in program order (``call_rtasks``), and makes its steps at the
    first read of an element: :func:`check_races` and the GPU entry read the columns, and a million
    :class:`Call` objects are never made.  Its length is the number of blocks either way."""

    steps_index: StepIndex | None = None
    columns: CallColumns | None = None
    call_rtasks: np.ndarray | None = None
    _make_steps: Callable[[], list[list[Step]]] | None = None

    @classmethod
    def lazy(cls, make_steps: Callable[[], list[list[Step]]], index: StepIndex, columns: CallColumns,
             call_rtasks: np.ndarray) -> BlockPrograms:
        """Programs whose steps ``make_steps()`` makes when first read."""
        programs = cls()
        programs._make_steps, programs.steps_index = make_steps, index
        programs.columns, programs.call_rtasks = columns, call_rtasks
        return programs

    def _steps(self) -> None:
        if self._make_steps is not None:
            make, self._make_steps = self._make_steps, None
            list.extend(self, make())

    def __len__(self) -> int:
        if self._make_steps is not None and self.steps_index is not None:
            return len(self.steps_index.kinds)
        return list.__len__(self)

    def __iter__(self) -> Iterator[list[Step]]:
        self._steps()
        return list.__iter__(self)

    def __getitem__(self, item: Any) -> Any:
        self._steps()
        return list.__getitem__(self, item)

    def __eq__(self, other: object) -> bool:
        self._steps()
        return list.__eq__(self, other)

    __hash__ = None

    def __repr__(self) -> str:
        self._steps()
        return list.__repr__(self)


class StepIndex(NamedTuple):
    """What the readers of block programs need of every step, read once (:func:`step_index`):
    each block's :func:`step_kinds`, and every wait's ``(block, count)`` in program order (blocks
    in turn) as an array of shape ``(waits, 2)``."""

    kinds: list[np.ndarray]
    wait_pairs: np.ndarray


def step_index(programs: list[list[Step]]) -> StepIndex:
    """The :class:`StepIndex` of ``programs``, with C-level passes over the steps (``map``,
    ``fromiter``): a full-size model's programs have a million waits.  The race check, the GPU
    entry's segments, its signal totals and its wait table all read it, so it is built once."""
    kinds_per = [step_kinds(steps, b) for b, steps in enumerate(programs)]
    pairs: list[Step] = []
    for steps, kinds in zip(programs, kinds_per):
        pairs += map(steps.__getitem__, np.nonzero(kinds == WAIT)[0].tolist())  # the waits, by kind
    flat_pairs = np.fromiter(chain.from_iterable(cast("list[Wait]", pairs)), np.int64, 2 * len(pairs)).reshape(-1, 2)
    return StepIndex(kinds_per, flat_pairs)


def _step_arrays(programs: list[list[Step]], index: StepIndex | None = None
                 ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The programs as the flat arrays of :func:`rammer.schedule.clocks.program_clocks`
    ``(starts, kinds, group_of, group_starts, wait_block, wait_count)`` (each run of consecutive
    waits one group, held by its first wait; the others are marks), and the flat indices of the
    calls.  ``index``: the programs' :func:`step_index`, where the caller has it already."""
    nb = len(programs)
    if index is None:
        index = step_index(programs)
    elif not index_matches(programs, index):
        raise ProgramError("a step index of other programs than those checked")
    kinds_per = index.kinds
    starts = np.zeros(nb + 1, np.int64)
    np.cumsum([k.size for k in kinds_per], out=starts[1:])
    kinds = np.concatenate(kinds_per) if kinds_per else np.zeros(0, np.int8)
    wait_block, wait_count = index.wait_pairs[:, 0], index.wait_pairs[:, 1]
    out_of_range = (wait_block < 0) | (wait_block >= nb)
    if out_of_range.any():
        k = int(np.nonzero(out_of_range)[0][0])
        b = int(np.searchsorted(starts, np.nonzero(kinds == WAIT)[0][k], side="right") - 1)
        raise ProgramError(f"block {b} waits for block {wait_block[k]}, which does not exist")
    is_wait = kinds == WAIT
    first = is_wait.copy()  # the first wait of each run; a run ends where its block does
    first[1:] &= ~is_wait[:-1]
    inner = starts[1:-1][starts[1:-1] < kinds.size]
    first[inner] = is_wait[inner]
    group_of = np.cumsum(first) - 1
    wait_at = np.nonzero(is_wait)[0]
    group_starts = np.append(np.searchsorted(wait_at, np.nonzero(first)[0]), wait_at.size)
    calls = np.nonzero(kinds == MARK)[0]
    kinds[is_wait & ~first] = MARK
    return (starts, kinds, group_of, group_starts, wait_block, wait_count), calls


def index_matches(programs: list[list[Step]], index: StepIndex) -> bool:
    """Whether ``index`` may be the :class:`StepIndex` of ``programs``: as many kinds as steps per
    block, or, for programs made from call columns (whose steps are made only when read), their own."""
    if _columns_of(programs) is not None:
        return index is cast("BlockPrograms", programs).steps_index
    return len(index.kinds) == len(programs) and all(k.size == len(p) for k, p in zip(index.kinds, programs))


def _columns_of(programs: list[list[Step]]) -> CallColumns | None:
    """The :class:`CallColumns` ``programs`` were made from (:meth:`BlockPrograms.lazy`), if any."""
    if isinstance(programs, BlockPrograms) and programs.call_rtasks is not None:
        return programs.columns
    return None


def _call_groups(programs: list[list[Step]], call_at: np.ndarray, starts: np.ndarray) -> list[dict]:
    """The calls (at flat step indices ``call_at``, in order) grouped: one group per operator
    (``op >= 0``), one per call otherwise, in order of first appearance.  Each group: its first
    ``call``, the union of its ``reads`` and ``writes`` (sets), and per block (ascending) the flat
    index of its ``first`` and ``last`` call there.  From arrays: a full-size model has 10^5 calls
    and a few hundred operators, whose calls share their range tuples, so each distinct range
    tuple of a group is read once.  Programs made from :class:`CallColumns` are read from them
    (no step is made)."""
    nc = call_at.size
    columns = _columns_of(programs)
    range_keys: list[np.ndarray] = []
    ranges_of: list[Callable[[int], tuple[tuple[int, int], ...]]] = []
    call_of: Callable[[int], Call]
    if columns is not None:
        rtasks = cast("BlockPrograms", programs).call_rtasks
        assert rtasks is not None and rtasks.size == nc
        ops = columns.op[rtasks].astype(np.int64)
        access = columns.access[rtasks]
        accesses = columns.accesses

        def reads_at(i: int) -> tuple[tuple[int, int], ...]:
            return accesses[int(access[i])][0]

        def writes_at(i: int) -> tuple[tuple[int, int], ...]:
            return accesses[int(access[i])][1]

        # one key for reads and writes: each distinct (reads, writes) of a group is read once
        range_keys += [access, access]
        ranges_of += [reads_at, writes_at]

        def call_of(i: int) -> Call:
            return columns.call(int(rtasks[i]))
    else:
        flat = list(chain.from_iterable(programs))
        calls = cast("list[Call]", list(map(flat.__getitem__, call_at.tolist())))
        ops = np.fromiter(map(attrgetter("op"), calls), np.int64, nc)
        for field in ("reads", "writes"):
            ranges = list(map(attrgetter(field), calls))
            range_keys.append(np.fromiter(map(id, ranges), np.int64, nc))
            ranges_of.append(ranges.__getitem__)
        call_of = calls.__getitem__
    block = np.searchsorted(starts, call_at, side="right") - 1
    # A group key per call (an operator, or the call alone), numbered by first appearance.
    key = np.where(ops >= 0, ops, int(ops.max(initial=0)) + 1 + np.arange(nc))
    _, first_of_key, key_rank = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first_of_key, kind="stable")
    group = np.empty(order.size, np.int64)
    group[order] = np.arange(order.size)
    group = group[key_rank.ravel()]
    items: list[dict] = [{"call": call_of(int(i)), "reads": set(), "writes": set(), "first": {}, "last": {}}
                         for i in first_of_key[order].tolist()]
    for field, keys, ranges_at in zip(("reads", "writes"), range_keys, ranges_of):
        id_rank = np.unique(keys, return_inverse=True)[1].ravel()  # one 1-d key: unique over rows is slow
        _, at = np.unique(group * max(nc, 1) + id_rank, return_index=True)
        for i in at.tolist():
            items[int(group[i])][field].update(ranges_at(i))
    # Per (group, block): the first and last call there (flat order is block by block, ascending).
    pair = group * max(len(programs), 1) + block
    pairs, first_at = np.unique(pair, return_index=True)
    last_at = pair.size - 1 - np.unique(pair[::-1], return_index=True)[1]
    for p, f, z in zip(pairs.tolist(), call_at[first_at].tolist(), call_at[last_at].tolist()):
        g, b = divmod(p, max(len(programs), 1))
        items[g]["first"][b] = f
        items[g]["last"][b] = z
    return items


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


def _surely_ordered(items: list[dict], first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """Per pair of groups ``(first[i], then[i])``, whether every call of the first is before every
    call of the second by the fast test of ``ordered`` in :func:`check_races` (each of the
    second's blocks has seen, before its first call there, the signal after the first group's last
    call on every block), in array passes over all pairs; False where it cannot tell (the caller
    then asks ``ordered``) and where the second group starts on a block before the first ends
    there."""
    nb = items[0]["last_at"].size
    never = np.iinfo(np.int64).max
    last_at = np.stack([g["last_at"] for g in items])
    need = np.zeros((len(items), nb), np.int64)
    first_pos = np.full((len(items), nb), never, np.int64)
    first_min = np.stack([g["first_min"] for g in items])
    for k, g in enumerate(items):
        need[k, g["blocks"]] = np.where(g["need_at"] >= 0, g["need_at"], never)
        first_pos[k, g["first_blocks"]] = g["first_pos"]
    out = np.zeros(first.size, bool)
    step = max(1, (1 << 20) // max(nb, 1))  # pairs x blocks per pass, bounded
    for lo in range(0, first.size, step):
        a, z = first[lo:lo + step], then[lo:lo + step]
        interleaved = ((last_at[a] >= 0) & (last_at[a] >= first_pos[z])).any(axis=1)
        seen = (first_min[z] >= need[a]).all(axis=1)
        out[lo:lo + step] = seen & ~interleaved
    return out


#: Clock entries (first calls x blocks) made per pass of :func:`_group_arrays`, bounded.
_CLOCKS_PER_PASS = 1 << 22


def _group_arrays(items: list[dict], clocks: Clocks, starts: np.ndarray, total_signals: np.ndarray,
                  nb: int) -> None:
    """Per group of :func:`_call_groups`, what :func:`check_races` compares, from arrays over every
    group at once (an unrolled RNN has thousands of operators): its ``blocks`` and per block the
    first signal after its last call there (``need_at``, -1: none follows; ``signalled`` when every
    block has one), ``last_at`` (per block, its last call's position, -1: none), its
    ``first_blocks``, the positions and clocks of its first calls there (``first_pos``,
    ``first_clocks``) and their elementwise minimum (``first_min``)."""
    def flat(field: str, keys: bool) -> tuple[np.ndarray, np.ndarray]:
        counts = np.fromiter((len(g[field]) for g in items), np.int64, len(items))
        values = chain.from_iterable(g[field] if keys else g[field].values() for g in items)
        return np.fromiter(values, np.int64, int(counts.sum())), counts

    blocks, last_counts = flat("last", True)
    last_flat, _ = flat("last", False)
    need = clocks.step_sent[last_flat] + 1
    need_at = np.where(need <= total_signals[blocks], need, -1)
    unsignalled = np.bincount(np.repeat(np.arange(len(items)), last_counts)[need_at < 0], minlength=len(items))
    last_cuts = np.cumsum(last_counts)[:-1]
    first_blocks, first_counts = flat("first", True)
    first_flat, _ = flat("first", False)
    first_pos = first_flat - starts[first_blocks]
    first_cuts = np.cumsum(first_counts)[:-1]
    first_at = np.concatenate([[0], np.cumsum(first_counts)])
    for g, b, na, la, lf, fb, fp in zip(items, np.split(blocks, last_cuts), np.split(need_at, last_cuts),
                                        unsignalled.tolist(), np.split(last_flat, last_cuts),
                                        np.split(first_blocks, first_cuts), np.split(first_pos, first_cuts)):
        g["blocks"], g["need_at"], g["signalled"] = b, na, la == 0
        g["last_at"] = np.full(nb, -1, np.int64)
        g["last_at"][b] = lf - starts[b]
        g["first_blocks"], g["first_pos"] = fb, fp
    k = 0
    while k < len(items):  # the first calls' clocks, a bounded number of groups at a time
        z = k + 1
        while z < len(items) and (first_at[z + 1] - first_at[k]) * nb <= _CLOCKS_PER_PASS:
            z += 1
        lo, hi = int(first_at[k]), int(first_at[z])
        rows = clocks.before(first_flat[lo:hi], first_blocks[lo:hi])
        mins = np.minimum.reduceat(rows, first_at[k:z] - lo, axis=0)
        for j in range(k, z):
            items[j]["first_clocks"] = rows[first_at[j] - lo:first_at[j + 1] - lo]
            items[j]["first_min"] = mins[j - k]
        k = z


def check_races(programs: list[list[Step]], index: StepIndex | None = None) -> None:
    """Raise :class:`ProgramError` unless every two calls on different blocks that touch the same
    arena floats (one writing) are ordered: the later one's block has seen (through waits, also
    transitively) a signal the earlier one's block sent after it.  Calls of one operator
    (equal ``op >= 0``) are not ordered against each other.  Checked per group of calls (an
    operator, or a call with ``op < 0``), and only for the pairs of groups :func:`.overlaps.conflict_pairs`
    leaves (per elementary interval of the arena, each writer against the previous writer and the
    readers since, each reader against the previous writer; the other pairs follow by transitivity),
    so the check grows with the accesses rather than with their square where the arena reuses one
    region for many tensors.  ``index``: the programs' :func:`step_index`,
    where the caller has it already (the GPU entry reads it for its tables too)."""
    nb = len(programs)
    arrays, call_at = _step_arrays(programs, index)
    clocks = program_clocks(*arrays)
    starts, kinds = arrays[0], arrays[1]
    if not isinstance(clocks, Clocks):
        b, (i, _, _) = next(iter(clocks.stuck.items()))
        raise ProgramError(f"deadlock: block {b} waits at step {i - starts[b]} for a signal never sent")
    total_signals = np.bincount(np.repeat(np.arange(nb), np.diff(starts))[kinds == SIGNAL], minlength=nb)
    items = _call_groups(programs, call_at, starts)
    if not items:
        return
    _group_arrays(items, clocks, starts, total_signals, nb)

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

    # Groups in a total order that extends happens-before: by the smallest, over a group's first
    # call on each of its blocks, of (the sum of the call's clock, its position, its block).  A call
    # that happens before another on some other block has a smaller clock sum (the later one has
    # seen a signal sent after it), and one on the same block has a smaller position; so when every
    # call of a group is before every call of another, the first group's key is the smaller.
    sums = np.concatenate([g["first_clocks"].sum(axis=1) for g in items])
    positions = np.concatenate([g["first_pos"] for g in items])
    blocks_of = np.concatenate([g["first_blocks"] for g in items])
    owner = np.repeat(np.arange(len(items)), [g["first_blocks"].size for g in items])
    entry_rank = np.empty(owner.size, np.int64)
    entry_rank[np.lexsort((blocks_of, positions, sums))] = np.arange(owner.size)
    rank = np.full(len(items), owner.size, np.int64)
    np.minimum.at(rank, owner, entry_rank)
    spans = [(start, n, k, w) for k, g in enumerate(items)
             for w, ranges in ((True, g["writes"]), (False, g["reads"])) for start, n in ranges]
    span_array = np.array(spans, np.int64).reshape(-1, 4)
    first, then = conflict_pairs(span_array[:, 0], span_array[:, 1], span_array[:, 2], span_array[:, 3] != 0, rank)
    # The race reported is the one whose later group comes first in the order.
    by_order = np.lexsort((rank[first], rank[then]))
    first, then = first[by_order], then[by_order]
    unsure = np.nonzero(~_surely_ordered(items, first, then))[0]
    for i in unsure.tolist():
        g1, g2 = items[int(first[i])], items[int(then[i])]
        if ordered(g1, g2):
            continue
        c1, c2 = g1["call"], g2["call"]
        raise ProgramError(f"race: {c1.kernel} rTask {c1.rtask_id} on block {next(iter(g1['first']))} and "
                           f"{c2.kernel} rTask {c2.rtask_id} on block {next(iter(g2['first']))} touch the "
                           f"same arena memory with no barrier between them")
