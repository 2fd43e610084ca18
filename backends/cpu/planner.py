"""The CPU's parameters for the core arena planner (:mod:`rammer.memory`).

One arena holds everything (constants first, then inputs and intermediates,
then the per-vEU scratch), 64-byte aligned (a cache line; the AVX-512 kernels
load aligned panels).  A Concat input placed at its slice of the output is an
alias: ``op.extra["aliases"]`` holds (inner, outer, element offset), turned
into byte offsets here.
"""

from __future__ import annotations

from typing import Sequence

from rammer.lower.views import Buffer
from rammer.memory import Alias, ArenaPlan, plan_arena

from .ops import ARENA_DTYPES
from .ops import CpuOp

#: Bytes every buffer is aligned to.
ALIGN = 64


def cpu_aliases(ops: Sequence[CpuOp], buffers: Sequence[Buffer]) -> list[Alias]:
    """The ops' aliases (inner, outer, element offset) as (inner, outer, byte offset)."""
    return [(inner, outer, off * ARENA_DTYPES[buffers[inner].dtype])
            for op in ops for inner, outer, off in op.extra.get("aliases", ())]


def plan(buffers: list[Buffer], ops: list[CpuOp], keep: set[int], scratch_bytes: int,
         ancestors: list[int] | None = None) -> ArenaPlan:
    """Place every buffer in the one arena, walking ``ops`` in order (see :func:`rammer.memory.plan_arena`)."""
    return plan_arena(buffers, ops, keep, scratch_bytes, ancestors, aliases=cpu_aliases(ops, buffers),
                      alignment=ALIGN)
