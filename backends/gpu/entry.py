"""The entry kernels of a GPU program: persistent (one launch per run) and wave (one launch per
wave).  Both are table-driven, so their size does not grow with the model.

Both take ``(arena, counters, epoch_or_wave, itab, ftab, ptab)``.  Every call of an rKernel is a
row of ``itab`` (its rtask_id and integer arguments, arena offsets included) and of ``ftab`` (its
float arguments), and the entry kernel has one loop per rKernel over a range of rows,
``for (i = lo; i < hi; i++) rkernel(itab[i, ...])``, with ``lo``/``hi`` read from ``ptab``.

Why tables and not straight-line code per block (what Rammer's own generator emits): PoCL's
kernel compiler replicates the code after every barrier that sits under a branch, so a
straight-line program of a few dozen barrier steps under ``if (block_id == b)`` did not finish
compiling in minutes (alexnet-small, 21 signals), and nvcc took over 7 minutes on nasnet-small.
The table shape keeps every barrier either directly in a loop or in an rKernel called from one,
never under a branch on a loaded value: the shape PoCL miscompiles (``../shared/notes/gpu.md``);
``tests/gpu/test_persistent_program.py`` runs it on PoCL.

**Persistent**: block ``b`` walks its *segments* ``ptab[b] .. ptab[b+1]``.  A segment is a run of
calls of one operator (so no order is needed among them), then a block barrier, then (thread 0)
an optional signal (fence, ``counters[b] += 1``) and the waits
(spin until ``counters[j] >= epoch * signals_j + count``, then fence), then a block barrier.  Cut
that way, a block's program keeps the order of :func:`.program.from_schedule`'s steps exactly, so
:func:`.program.check_races` on those steps covers it.  The epoch moves every target, so the
counters are never reset between runs.

**Wave**: ``ptab`` holds, per wave and block, a row range per rKernel; the launch boundary orders
the waves (``counters`` is unused).

**The order of the loops**: the rKernels without block barriers come first, those with barriers
last (:func:`barriers_last`).  A segment runs one rKernel's rows, so the order changes nothing
that runs; it changes what PoCL's kernel compiler makes of the one inlined kernel: with the barrier
rKernels in the middle (the order the compiler met them), PoCL's optimised work-group function of
real:ocr-det-640 (2 barrier and 16 plain rKernels) took 92.8 s of CPU; with them last, 41.9 s
(``docs/benchmarks.md``, s11-gpu).  The code after a barrier region is what PoCL's barrier handling
replicates and optimises again, so the plain rKernels are kept out of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Special, c, v
from rammer.schedule.clocks import MARK, SIGNAL, WAIT

from .program import (
    Call,
    CallColumns,
    ProgramError,
    Signal,
    Step,
    StepIndex,
    Wait,
    check_races,
    check_wave_races,
    device_function,
    index_matches,
    step_index,
    step_kinds,
)

__all__ = ["CallArgumentRangeError", "persistent_kernel", "wave_kernel", "segments", "has_barrier", "barriers_last"]


class CallArgumentRangeError(ProgramError):
    """A call's integer argument (an arena offset, a size, a stride) beyond the int32 of the call
    table; ``op`` is the calling operator's index (the compiler names its node)."""

    def __init__(self, kernel: str, op: int, value: float) -> None:
        super().__init__(f"{kernel}: an integer argument ({value:.0f}) does not fit the call table's int32")
        self.kernel, self.op, self.value = kernel, op, value

def has_barrier(kernel: ir.Kernel) -> bool:
    """Whether ``kernel``'s body holds a block barrier (at any depth of loops and branches)."""
    def within(body: object) -> bool:
        if not isinstance(body, tuple):
            return False
        parts = ("body", "then", "orelse")
        return any(isinstance(stmt, ir.Barrier) or any(within(getattr(stmt, part, ())) for part in parts)
                   for stmt in body)

    return within(tuple(kernel.body))


def barriers_last(kernels: dict[str, ir.Kernel]) -> dict[str, ir.Kernel]:
    """``kernels`` with the rKernels that hold block barriers after the others, each group in its own
    order (see the module's notes: the order of the entry kernel's loops)."""
    flags = {name: has_barrier(k) for name, k in kernels.items()}
    return {name: kernels[name] for name in sorted(kernels, key=flags.__getitem__)}


TABLE_PARAMS = (ir.Param("itab", "int", True, True), ir.Param("ftab", "float", True, True),
                ir.Param("ptab", "int", True, True))


def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("+", a, b)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return BinOp("*", a, b)


class _CallTable:
    """The rows of ``itab``/``ftab`` and the per-rKernel loop that runs a range of them."""

    def __init__(self, kernels: dict[str, ir.Kernel]) -> None:
        self.kernels = kernels
        self.names = list(kernels)
        self.index = {n: t for t, n in enumerate(self.names)}
        self.n_int = {n: 1 + sum(1 for p in k.params if p.pointer or p.dtype != "float") for n, k in kernels.items()}
        n_flt = {n: sum(1 for p in k.params if not p.pointer and p.dtype == "float") for n, k in kernels.items()}
        self.wi = max(self.n_int.values(), default=1)
        self.wf = max(max(n_flt.values(), default=1), 1)
        #: The calls in row order; their rows are made at :meth:`arrays`, an rKernel at a time
        #: (a full-size model has 10^4-10^5 calls: per-call rows cost seconds).
        self.rows: list[Call] = []
        # Per rKernel, which arguments go to itab and which to ftab.
        self._int_at = {n: [i for i, p in enumerate(k.params) if p.pointer or p.dtype != "float"]
                        for n, k in kernels.items()}
        self._flt_at = {n: [i for i, p in enumerate(k.params) if not p.pointer and p.dtype == "float"]
                        for n, k in kernels.items()}

    def add(self, call: Call) -> None:
        k = self.kernels.get(call.kernel)
        if k is None:
            raise ProgramError(f"a call of unknown rKernel {call.kernel!r}")
        if len(call.args) != len(k.params):
            raise ProgramError(f"{call.kernel} takes {len(k.params)} arguments, got {len(call.args)}")
        self.rows.append(call)

    def kernel_index(self, call: Call) -> int:
        """The row-range index of ``call``'s rKernel."""
        t = self.index.get(call.kernel)
        if t is None:
            raise ProgramError(f"a call of unknown rKernel {call.kernel!r}")
        return t

    def kernel_indices(self, calls: list[Call]) -> np.ndarray:
        """:meth:`kernel_index` of every call (C-level passes: a full-size model has 10^5 calls)."""
        try:
            return np.fromiter(map(self.index.__getitem__, map(attrgetter("kernel"), calls)), np.int64, len(calls))
        except KeyError:
            bad = next(call for call in calls if call.kernel not in self.index)
            raise ProgramError(f"a call of unknown rKernel {bad.kernel!r}") from None

    def column_kernel_indices(self, columns: CallColumns, rtasks: np.ndarray) -> np.ndarray:
        """:meth:`kernel_index` of the calls of ``rtasks`` given as columns, their arity checked (once
        per distinct rKernel and argument tuple)."""
        index = np.array([self.index.get(n, -1) for n in columns.kernels], np.int64)
        kernel_of = index[columns.kernel[rtasks]] if rtasks.size else np.zeros(0, np.int64)
        if (kernel_of < 0).any():
            bad = columns.kernels[int(columns.kernel[rtasks[int(np.argmin(kernel_of))]])]
            raise ProgramError(f"a call of unknown rKernel {bad!r}")
        params = np.array([len(self.kernels[n].params) for n in self.names], np.int64)
        pairs = np.unique(kernel_of * max(len(columns.args), 1) + columns.arg[rtasks])
        for t, a in zip(*np.divmod(pairs, max(len(columns.args), 1))):
            if len(columns.args[int(a)]) != params[t]:
                name = self.names[int(t)]
                raise ProgramError(f"{name} takes {params[t]} arguments, got {len(columns.args[int(a)])}")
        return kernel_of

    def check_arity(self, calls: list[Call], kernel_of: np.ndarray) -> None:
        """Raise :class:`ProgramError` on a call whose arguments do not match its rKernel's
        parameters (``kernel_of``: each call's :meth:`kernel_index`)."""
        params = np.array([len(self.kernels[n].params) for n in self.names], np.int64)
        got = np.fromiter(map(len, map(attrgetter("args"), calls)), np.int64, len(calls))
        bad = np.nonzero(got != params[kernel_of])[0]
        if bad.size:
            call = calls[int(bad[0])]
            raise ProgramError(f"{call.kernel} takes {len(self.kernels[call.kernel].params)} arguments, "
                               f"got {len(call.args)}")

    def ranges(self, calls: list[Call]) -> list[int]:
        """Append ``calls`` grouped by rKernel; the ``[lo, hi)`` row range of each rKernel in turn.
        The calls are bucketed once, and only the rKernels present are visited (not every rKernel
        per segment: a full-size model has 10^4 segments)."""
        by_kernel: dict[str, list[Call]] = {}
        for call in calls:
            if call.kernel not in self.index:
                raise ProgramError(f"a call of unknown rKernel {call.kernel!r}")
            by_kernel.setdefault(call.kernel, []).append(call)
        pos = len(self.rows)
        out: list[int] = []
        done = 0  # rKernels whose ranges are in out
        for t, n in sorted((self.index[n], n) for n in by_kernel):
            out += [pos] * (2 * (t - done))
            for call in by_kernel[n]:
                self.add(call)
            out += [pos, len(self.rows)]
            pos = len(self.rows)
            done = t + 1
        return out + [pos] * (2 * (len(self.names) - done))

    def loops(self, base: ir.Expr) -> list[ir.Stmt]:
        """One loop per rKernel over rows ``ptab[base + 2t] .. ptab[base + 2t + 1]``."""
        body: list[ir.Stmt] = []
        for t, n in enumerate(self.names):
            k = self.kernels[n]
            row_i, row_f = _mul(v("i"), c(self.wi)), _mul(v("i"), c(self.wf))
            args: list[ir.Expr] = [ir.Load("itab", row_i), v("smem")]
            ci, cf = 1, 0
            for p in k.params:
                if p.pointer:
                    args.append(_add(v("arena"), ir.Load("itab", _add(row_i, c(ci)))))
                    ci += 1
                elif p.dtype == "float":
                    args.append(ir.Load("ftab", _add(row_f, c(cf))))
                    cf += 1
                else:
                    args.append(ir.Load("itab", _add(row_i, c(ci))))
                    ci += 1
            body.append(ir.For("i", ir.Load("ptab", _add(base, c(2 * t))), ir.Load("ptab", _add(base, c(2 * t + 1))),
                               c(1), (ir.Invoke(n, tuple(args)),)))
        return body

    def arrays(self) -> dict[str, np.ndarray]:
        # The argument tuples are shared between the calls of a node: each distinct one is read once.
        argss = list(map(attrgetter("args"), self.rows))
        return self.column_arrays(self.kernel_indices(self.rows), np.fromiter(map(id, argss), np.int64, len(argss)),
                                  np.fromiter(map(attrgetter("rtask_id"), self.rows), np.int64, len(self.rows)),
                                  argss.__getitem__, lambda i: self.rows[i].op)

    def column_arrays(self, kernel_of: np.ndarray, arg_keys: np.ndarray, rtask_ids: np.ndarray,
                      args_of: Callable[[int], tuple], op_of: Callable[[int], int],
                      args_of_key: Callable[[int], tuple] | None = None) -> dict[str, np.ndarray]:
        """``itab``/``ftab`` of rows given as columns: per row its rKernel's index, a key equal
        between rows of one argument tuple, its rTask; ``args_of(row)`` and ``op_of(row)`` read one
        row's arguments and operator (once per distinct key, and for an error).  ``args_of_key``:
        the keys are small non-negative numbers (indices into a list of the tuples), and this reads
        the tuple of a key; the distinct keys are then found by a table, not by sorting a million."""
        rows = kernel_of.size
        itab = np.zeros((max(rows, 1), self.wi), np.int32)
        ftab = np.zeros((max(rows, 1), self.wf), np.float32)
        for t, n in enumerate(self.names):
            at = np.nonzero(kernel_of == t)[0]
            if not at.size:
                continue
            width = len(self.kernels[n].params)
            keys = arg_keys[at]
            if args_of_key is not None:
                present = np.zeros(int(keys.max()) + 1, bool)
                present[keys] = True
                which = (np.cumsum(present) - 1)[keys]
                tuples = [args_of_key(k) for k in np.flatnonzero(present).tolist()]
            else:
                _, first, which = np.unique(keys, return_index=True, return_inverse=True)
                tuples = [args_of(i) for i in at[first].tolist()]
            distinct = np.array(tuples, np.float64).reshape(len(tuples), width)
            which = which.ravel()
            # Checked and converted once per distinct tuple, then gathered per row (10^6 rows of a
            # few thousand tuples: the rows' float64 copies were most of the table's time).
            ints = distinct[:, self._int_at[n]]
            fits = (np.abs(ints) < 2 ** 31).all(axis=1)  # NaN included
            if not fits.all():
                bad = int(np.argmin(fits[which]))  # the first call that does not fit
                values = ints[which[bad]]
                raise CallArgumentRangeError(n, op_of(int(at[bad])), float(values[~(np.abs(values) < 2 ** 31)][0]))
            itab[at, 0] = rtask_ids[at]
            itab[at, 1:1 + ints.shape[1]] = ints.astype(np.int32)[which]
            ftab[at, :len(self._flt_at[n])] = distinct[:, self._flt_at[n]].astype(np.float32)[which]
        return {"itab": itab.ravel(), "ftab": ftab.ravel()}


def _device_functions(kernels: dict[str, ir.Kernel], block_threads: int) -> tuple[list[ir.Kernel], int]:
    fns, smem = [], 1
    for k in kernels.values():
        fn, size = device_function(k, block_threads)
        fns.append(fn)
        smem = max(smem, size)
    return fns, smem


@dataclass
class Segment:
    """Calls of one operator, then (optionally) a signal, then waits: one iteration of a
    persistent block's loop."""

    calls: list[Call] = field(default_factory=list)
    signal: bool = False
    waits: list[Wait] = field(default_factory=list)

    def takes(self, step: Step) -> bool:
        if isinstance(step, Call):
            if self.signal or self.waits:
                return False
            return not self.calls or (step.op >= 0 and step.op == self.calls[-1].op)
        if isinstance(step, Signal):
            return not self.signal and not self.waits
        return True


def _segment_starts(kinds: np.ndarray, call_ops: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
    """Per step of the programs laid end to end (``kinds``; ``call_ops``: the op of each call, in
    order; ``block_starts``: where each block's steps begin), whether a segment starts there: at a
    block's first step, at a call that does not continue the previous step's operator, and at a
    signal after a signal or a wait (see :func:`segments`)."""
    is_call = kinds == MARK
    ops = np.full(kinds.size, -2, np.int64)
    ops[is_call] = call_ops
    start = np.zeros(kinds.size, bool)
    start[block_starts[block_starts < kinds.size]] = True
    prev_call = is_call[:-1]
    start[1:] |= is_call[1:] & (~prev_call | (ops[1:] < 0) | (ops[1:] != ops[:-1]))
    start[1:] |= (kinds[1:] == SIGNAL) & ~prev_call
    return start


def segments(steps: list[Step], kinds: np.ndarray | None = None) -> list[Segment]:
    """``steps`` cut into segments, in order: the steps of the segments, read in order, are
    ``steps`` again.  The cuts are found on the steps' kinds as arrays (a full-size model's
    programs have a million waits): a segment starts at the first step, at a call that does not
    continue the previous step's operator, and at a signal after a signal or a wait.  ``kinds``:
    :func:`step_kinds` of ``steps``, where the caller has them already."""
    if kinds is None:
        kinds = step_kinds(steps)
    elif kinds.size != len(steps):
        raise ProgramError(f"{kinds.size} step kinds for {len(steps)} steps")
    if not kinds.size:
        return []
    is_call = kinds == MARK
    call_at = np.nonzero(is_call)[0]
    start = _segment_starts(kinds, np.fromiter(map(attrgetter("op"), map(steps.__getitem__, call_at.tolist())),
                                               np.int64, call_at.size), np.zeros(1, np.int64))
    cuts = np.append(np.nonzero(start)[0], kinds.size)
    calls_before = np.concatenate([[0], np.cumsum(is_call)])
    signals_before = np.concatenate([[0], np.cumsum(kinds == SIGNAL)])
    out: list[Segment] = []
    for a, z in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        c = a + int(calls_before[z] - calls_before[a])
        signal = bool(signals_before[z] - signals_before[a])
        out.append(Segment(steps[a:c], signal, steps[c + signal:z]))
    return out


def persistent_kernel(name: str, kernels: dict[str, ir.Kernel], programs: list[list[Step]], block_threads: int,
                      check: bool = True, index: StepIndex | None = None
                      ) -> tuple[list[ir.Kernel], dict[str, np.ndarray]]:
    """The device functions and the persistent kernel ``name(arena, counters, epoch, itab, ftab,
    ptab)``; block ``b`` runs ``programs[b]``.  Raises :class:`ProgramError` on races.  Returns
    the kernels and the tables (``itab``, ``ftab``, ``ptab``).  ``index``: the programs'
    :func:`.program.step_index` where the caller has it (:func:`.program.from_schedule` makes it)."""
    # Each block's step kinds and waits once, for the race check, the signal totals and the tables.
    if index is None:
        index = step_index(programs)
    elif not index_matches(programs, index):
        raise ProgramError("a step index of other programs than these")
    if check:
        check_races(programs, index)
    kernels = barriers_last(kernels)
    fns, smem = _device_functions(kernels, block_threads)
    table = _CallTable(kernels)
    blocks = len(programs)
    sizes = [k.size for k in index.kinds]
    block_starts = np.zeros(blocks + 1, np.int64)
    np.cumsum(sizes, out=block_starts[1:])
    kinds = np.concatenate(index.kinds) if blocks else np.zeros(0, np.int8)
    block_of = np.repeat(np.arange(blocks), sizes)
    totals = np.bincount(block_of[kinds == SIGNAL], minlength=blocks)
    # The segments (see :func:`segments`) and their records from arrays, with no per-segment or
    # per-call Python: a full-size model has 10^4 segments and 10^5 calls.  Programs made from call
    # columns (:meth:`.program.BlockPrograms.lazy`) are read from them, their steps never made.
    columns: CallColumns | None = getattr(programs, "columns", None)
    call_rtasks: np.ndarray | None = getattr(programs, "call_rtasks", None)
    calls: list[Call] = []
    if columns is not None and call_rtasks is not None:
        call_ops = columns.op[call_rtasks].astype(np.int64)
    else:
        for steps, k in zip(programs, index.kinds):
            calls += map(steps.__getitem__, np.nonzero(k == MARK)[0].tolist())
        call_ops = np.fromiter(map(attrgetter("op"), calls), np.int64, len(calls))
    start = _segment_starts(kinds, call_ops, block_starts)
    seg_of = np.cumsum(start) - 1
    nseg = int(start.sum())
    rec = 2 * len(table.names) + 3  # per segment: [lo, hi) per rKernel, signal, first wait, end of waits
    seg0 = blocks + 1
    wait0 = seg0 + nseg * rec
    starts = np.zeros(blocks + 1, np.int64)
    np.cumsum(np.bincount(block_of[start], minlength=blocks), out=starts[1:])
    if columns is not None and call_rtasks is not None:
        kernel_of = table.column_kernel_indices(columns, call_rtasks)
    else:
        kernel_of = table.kernel_indices(calls)
        table.check_arity(calls, kernel_of)
    nk = len(table.names)
    row_key = seg_of[kinds == MARK] * nk + kernel_of
    per_range = np.bincount(row_key, minlength=nseg * nk)
    lo = np.cumsum(per_range) - per_range  # rows are in segment order, by rKernel within a segment
    row_order = np.argsort(row_key, kind="stable")
    if columns is not None and call_rtasks is not None:
        row_rtasks = call_rtasks[row_order]
        arg_of_row = columns.arg[row_rtasks]
        call_tables = table.column_arrays(kernel_of[row_order], arg_of_row, columns.rtask_id[row_rtasks],
                                          lambda i: columns.args[int(arg_of_row[i])],
                                          lambda i: int(columns.op[row_rtasks[i]]), columns.args.__getitem__)
    else:
        table.rows = list(map(calls.__getitem__, row_order.tolist()))
        call_tables = table.arrays()
    records = np.zeros((nseg, rec), np.int64)
    records[:, 0:2 * nk:2] = lo.reshape(nseg, nk)
    records[:, 1:2 * nk:2] = (lo + per_range).reshape(nseg, nk)
    records[:, 2 * nk] = np.bincount(seg_of[kinds == SIGNAL], minlength=nseg) > 0
    waits_per = np.bincount(seg_of[kinds == WAIT], minlength=nseg)
    records[:, 2 * nk + 2] = np.cumsum(waits_per)
    records[:, 2 * nk + 1] = records[:, 2 * nk + 2] - waits_per
    # The waits as (block, count, that block's signals per run) rows.
    pairs = index.wait_pairs
    bad = (pairs[:, 0] < 0) | (pairs[:, 0] >= blocks)
    if bad.any():
        k = int(np.nonzero(bad)[0][0])
        raise ProgramError(f"block {block_of[kinds == WAIT][k]} waits for block {pairs[k, 0]}, which does not exist")
    waits = np.column_stack([pairs, totals[pairs[:, 0]]]).ravel()
    ptab = np.concatenate([starts, records.ravel(), waits]).astype(np.int32)

    bid, tid0 = Special("block_id"), BinOp("==", Special("thread_id"), c(0))
    base = _add(c(seg0), _mul(v("s"), c(rec)))
    k = 2 * len(table.names)
    wrow = _add(c(wait0), _mul(v("w"), c(3)))
    target = _add(_mul(v("epoch"), ir.Load("ptab", _add(wrow, c(2)))), ir.Load("ptab", _add(wrow, c(1))))
    spin = ir.For("w", ir.Load("ptab", _add(base, c(k + 1))), ir.Load("ptab", _add(base, c(k + 2))), c(1), (
        ir.Decl("int", "seen", c(0)),
        ir.While(BinOp("<", v("seen"), target),
                 (ir.AtomicAdd("counters", ir.Load("ptab", wrow), c(0), result="seen"),)),
    ))
    sync = ir.If(tid0, (
        ir.If(BinOp("!=", ir.Load("ptab", _add(base, c(k))), c(0)),
              (ir.Fence(), ir.AtomicAdd("counters", bid, c(1)))),
        spin,
        ir.Fence(),
    ))
    loop = ir.For("s", ir.Load("ptab", bid), ir.Load("ptab", _add(bid, c(1))), c(1),
                  (*table.loops(base), ir.Barrier(), sync, ir.Barrier()))
    params = (ir.Param("arena", "float", True), ir.Param("counters", "int", True), ir.Param("epoch", "int"),
              *TABLE_PARAMS)
    main = ir.Kernel(name, params, (loop,), shared=(ir.SharedArray("smem", "float", smem),), threads=block_threads,
                     meta=(("program", "persistent"), ("blocks", str(blocks)), ("segments", str(nseg))))
    return [*fns, main], {**call_tables, "ptab": ptab}


def wave_kernel(name: str, kernels: dict[str, ir.Kernel], waves: list[list[list[Call]]],
                block_threads: int, check: bool = True) -> tuple[list[ir.Kernel], dict[str, np.ndarray]]:
    """Wave mode: ``name(arena, counters, wave, itab, ftab, ptab)``, launched once per wave
    (``waves[w][b]``: block ``b``'s calls in wave ``w``; the launch boundary orders the waves, so
    there are no barriers between blocks; ``counters`` is unused).  Calls of one wave and block
    need no order among themselves: a wave's ops are independent and memory is reused across
    waves only (:func:`.program.check_wave_races`).  Returns the kernels and the tables."""
    blocks = max((len(w) for w in waves), default=1)
    if check:
        check_wave_races(waves)
    kernels = barriers_last(kernels)
    fns, smem = _device_functions(kernels, block_threads)
    table = _CallTable(kernels)
    ranges: list[int] = []
    for per_block in waves:
        for b in range(blocks):
            ranges += table.ranges(per_block[b] if b < len(per_block) else [])
    base = _mul(_add(_mul(v("wave"), c(blocks)), Special("block_id")), c(2 * len(table.names)))
    params = (ir.Param("arena", "float", True), ir.Param("counters", "int", True), ir.Param("wave", "int"),
              *TABLE_PARAMS)
    main = ir.Kernel(name, params, tuple(table.loops(base)), shared=(ir.SharedArray("smem", "float", smem),),
                     threads=block_threads, meta=(("program", "wave"), ("waves", str(len(waves)))))
    return [*fns, main], {**table.arrays(), "ptab": np.asarray(ranges or [0, 0], np.int32)}
