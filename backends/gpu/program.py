"""rKernels as device functions of a persistent block, over the core's program form.

An rKernel (a :class:`~rammer.codegen.kernel_ir.Kernel` written with
``block_id`` as its rTask index) becomes a device function
``name(rtask_id, smem, params...)``: ``block_id`` is replaced by ``rtask_id``,
``block_dim`` by the rKernel's own thread count, and its shared arrays by
offsets into the one per-block shared buffer ``smem`` (sized to the largest
rKernel).  An rKernel with fewer threads than the block is guarded by
``thread_id < threads`` when it has no barriers; one with barriers must use
the whole block (refused otherwise, so no thread can skip a barrier).

A block's program is the core's (:mod:`rammer.schedule.programs`, re-exported here): calls,
signals and waits, from a schedule (vEU ``v`` is block ``v``) or from waves, and the race check.
"""

from __future__ import annotations

import dataclasses

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Special, c, v
from rammer.schedule.programs import (
    BlockPrograms,
    Call,
    CallColumns,
    ProgramError,
    Signal,
    Step,
    StepIndex,
    Task,
    Wait,
    check_races,
    check_wave_races,
    from_schedule,
    from_waves,
    index_matches,
    signals_per_block,
    split_waves,
    step_index,
    step_kinds,
)

__all__ = ["Call", "CallColumns", "BlockPrograms", "Signal", "Wait", "Task", "Step", "ProgramError",
           "device_function", "from_waves",
           "from_schedule", "check_races", "split_waves", "check_wave_races", "signals_per_block", "step_kinds",
           "step_index", "StepIndex", "index_matches"]


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


