"""A persistent GPU program: rKernels as device functions, one straight-line program per block.

An rKernel (a :class:`~rammer.codegen.kernel_ir.Kernel` written with
``block_id`` as its rTask index) becomes a device function
``name(rtask_id, smem, params...)``: ``block_id`` is replaced by ``rtask_id``,
``block_dim`` by the rKernel's own thread count, and its shared arrays by
offsets into the one per-block shared buffer ``smem`` (sized to the largest
rKernel).  An rKernel with fewer threads than the block is guarded by
``thread_id < threads`` when it has no barriers; one with barriers must use
the whole block (refused otherwise, so no thread can skip a barrier).

The persistent kernel takes ``(arena, counters, epoch)``.  Block ``b`` runs
``if (block_id == b) { ... }``: its calls in order (arguments are offsets into
the float arena), and barrier steps: a *signal* (block barrier, then thread 0
fences and increments ``counters[b]``) and a *wait* (thread 0 spins until
``counters[j] >= epoch * signals_j + m``, then a block barrier).  The epoch
makes counters valid across launches without a reset.  Programs are
straight-line code selected by the group id, the shape PoCL compiles
correctly (shared/notes/gpu.md).

:func:`check_races` proves from the declared reads and writes of each call
that every cross-block conflict is ordered by a signal/wait pair, so a
program whose barriers were removed is refused before it runs.

TODO(issue 22): build programs from a core ``rammer.schedule`` Schedule and
plan the arena with ``rammer.memory``; today the caller states the waves and
arena offsets (see :func:`from_waves`).  Wave mode (one launch per wave) is
not built yet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Union

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Special, c, v

__all__ = ["Call", "Signal", "Wait", "Task", "ProgramError", "device_function", "persistent_kernel",
           "from_waves", "check_races", "signals_per_block"]


class ProgramError(ValueError):
    """A program that cannot be built or would race."""


@dataclass(frozen=True)
class Call:
    """Run rTask ``rtask_id`` of device function ``kernel``; ``args`` are, per parameter, an arena
    offset (pointer parameters) or a number (scalars).  ``reads``/``writes`` are arena ranges
    ``(start, length)`` in floats, used by :func:`check_races`."""

    kernel: str
    rtask_id: int
    args: tuple[Union[int, float], ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Signal:
    """This block has finished everything before this step."""


@dataclass(frozen=True)
class Wait:
    """Wait until block ``block`` has signalled ``count`` times in this launch."""

    block: int
    count: int


Step = Union[Call, Signal, Wait]


@dataclass(frozen=True)
class Task:
    """One rTask of a wave (for :func:`from_waves`)."""

    kernel: str
    rtask_id: int
    args: tuple[Union[int, float], ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()


def _rewrite(node, fn):
    """``node`` with ``fn`` applied bottom-up to every IR node (tuples of nodes included)."""
    if isinstance(node, tuple):
        return tuple(_rewrite(n, fn) for n in node)
    if dataclasses.is_dataclass(node):
        changes = {f.name: _rewrite(getattr(node, f.name), fn) for f in dataclasses.fields(node)}
        return fn(dataclasses.replace(node, **changes))
    return node


def _has_barrier(body) -> bool:
    found = []
    _rewrite(body, lambda n: (found.append(n) if isinstance(n, ir.Barrier) else None, n)[1])
    return bool(found)


def device_function(kernel: ir.Kernel, block_threads: int) -> tuple[ir.Kernel, int]:
    """``kernel`` as a device function for a block of ``block_threads``; returns it and the
    shared floats it needs."""
    if kernel.threads > block_threads:
        raise ProgramError(f"rKernel {kernel.name} needs {kernel.threads} threads, the block has {block_threads}")
    offsets, size = {}, 0
    for sh in kernel.shared:
        if sh.dtype != "float":
            raise ProgramError(f"rKernel {kernel.name}: shared array {sh.name} is {sh.dtype}; only float is pooled")
        offsets[sh.name] = size
        size += sh.size

    def fn(n):
        if isinstance(n, ir.Special):
            if n.what == "block_id":
                return v("rtask_id")
            if n.what == "block_dim":
                return c(kernel.threads)
            if n.what == "grid_dim":
                raise ProgramError(f"rKernel {kernel.name} reads grid_dim, which a persistent block does not know")
        if isinstance(n, ir.Load) and n.buffer in offsets:
            return ir.Load("smem", BinOp("+", c(offsets[n.buffer]), n.index))
        if isinstance(n, ir.Store) and n.buffer in offsets:
            return ir.Store("smem", BinOp("+", c(offsets[n.buffer]), n.index), n.value)
        return n

    body = _rewrite(kernel.body, fn)
    if kernel.threads < block_threads:
        if _has_barrier(body):
            raise ProgramError(f"rKernel {kernel.name} has barriers and {kernel.threads} threads; the block has "
                               f"{block_threads}, and every thread must pass every barrier")
        body = (ir.If(BinOp("<", Special("thread_id"), c(kernel.threads)), body),)
    params = (ir.Param("rtask_id", "int"), ir.Param("smem", "float", True, space="local"), *kernel.params)
    return ir.Kernel(kernel.name, params, body, threads=kernel.threads, device=True, meta=kernel.meta), size


def signals_per_block(programs: list[list[Step]]) -> list[int]:
    return [sum(isinstance(s, Signal) for s in p) for p in programs]


def persistent_kernel(name: str, kernels: dict[str, ir.Kernel], programs: list[list[Step]],
                      block_threads: int) -> list[ir.Kernel]:
    """The device functions and the persistent kernel ``name(arena, counters, epoch)``; block ``b``
    runs ``programs[b]``.  Raises :class:`ProgramError` on races (:func:`check_races`)."""
    check_races(programs)
    fns, smem = [], 1
    for k in kernels.values():
        fn, size = device_function(k, block_threads)
        fns.append(fn)
        smem = max(smem, size)
    totals = signals_per_block(programs)
    tid0 = BinOp("==", Special("thread_id"), c(0))
    blocks: list[ir.Stmt] = []
    for b, steps in enumerate(programs):
        body: list[ir.Stmt] = []
        for step in steps:
            if isinstance(step, Call):
                k = kernels.get(step.kernel)
                if k is None:
                    raise ProgramError(f"block {b} calls unknown rKernel {step.kernel!r}")
                if len(step.args) != len(k.params):
                    raise ProgramError(f"block {b}: {step.kernel} takes {len(k.params)} arguments, "
                                       f"got {len(step.args)}")
                args: list[ir.Expr] = [c(int(step.rtask_id)), v("smem")]
                for p, a in zip(k.params, step.args):
                    if p.pointer:
                        args.append(BinOp("+", v("arena"), c(int(a))))
                    else:
                        args.append(c(float(a)) if p.dtype == "float" else c(int(a)))
                body.append(ir.Invoke(step.kernel, tuple(args)))
            elif isinstance(step, Signal):
                body += [ir.Barrier(), ir.If(tid0, (ir.Fence(), ir.AtomicAdd("counters", c(b), c(1))))]
            elif isinstance(step, Wait):
                target = BinOp("+", BinOp("*", v("epoch"), c(totals[step.block])), c(step.count))
                # Every thread spins (no barrier-bearing code under a thread-dependent branch: PoCL
                # miscompiled a thread-0-only spin followed by further barrier code).
                body += [ir.Block((ir.Decl("int", "seen", c(0)),
                                   ir.While(BinOp("<", v("seen"), target),
                                            (ir.AtomicAdd("counters", c(step.block), c(0), result="seen"),)),
                                   ir.Fence())),
                         ir.Barrier()]
            else:
                raise ProgramError(f"block {b}: not a program step: {step!r}")
        blocks.append(ir.If(BinOp("==", Special("block_id"), c(b)), (ir.Comment(f"block {b}"), *body)))
    params = (ir.Param("arena", "float", True), ir.Param("counters", "int", True), ir.Param("epoch", "int"))
    main = ir.Kernel(name, params, tuple(blocks), shared=(ir.SharedArray("smem", "float", smem),),
                     threads=block_threads, meta=(("program", "persistent"), ("blocks", str(len(programs)))))
    return [*fns, main]


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


def _overlap(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    return any(s1 < s2 + n2 and s2 < s1 + n1 for s1, n1 in a for s2, n2 in b)


def check_races(programs: list[list[Step]]) -> None:
    """Raise :class:`ProgramError` unless every pair of calls on different blocks that touch the
    same arena floats (one writing) is ordered: the later one's block waited for a signal the
    earlier one's block sent after it.  Direct waits only (conservative: may refuse a program
    ordered only transitively, never accepts a racing one)."""
    n = len(programs)
    info = []  # (block, call, signals sent before it, counts waited for per block before it)
    for b, steps in enumerate(programs):
        sent, seen = 0, [0] * n
        for s in steps:
            if isinstance(s, Signal):
                sent += 1
            elif isinstance(s, Wait):
                if not 0 <= s.block < n:
                    raise ProgramError(f"block {b} waits for block {s.block}, which does not exist")
                seen[s.block] = max(seen[s.block], s.count)
            elif isinstance(s, Call):
                info.append((b, s, sent, tuple(seen)))
    for i, (b1, c1, sent1, seen1) in enumerate(info):
        for b2, c2, sent2, seen2 in info[i + 1:]:
            if b1 == b2:
                continue
            if not (_overlap(c1.writes, c2.reads + c2.writes) or _overlap(c2.writes, c1.reads)):
                continue
            if seen2[b1] >= sent1 + 1 or seen1[b2] >= sent2 + 1:
                continue
            raise ProgramError(f"race: {c1.kernel} rTask {c1.rtask_id} on block {b1} and {c2.kernel} rTask "
                               f"{c2.rtask_id} on block {b2} touch the same arena memory with no barrier "
                               f"between them")
