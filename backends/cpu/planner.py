"""The CPU's parameters for the core arena planner (:mod:`rammer.memory`, called through
:func:`rammer.pipeline.order_and_plan`).

One arena holds everything (constants first, then inputs and intermediates,
then the per-vEU scratch), 64-byte aligned (a cache line; the AVX-512 kernels
load aligned panels).  A Concat input placed at its slice of the output is an
alias: ``op.extra["aliases"]`` holds (inner, outer, element offset), turned
into byte offsets here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rammer.lower.views import Buffer
from rammer.memory import Alias

from .ops import ARENA_DTYPES, CpuOp

#: Bytes every buffer is aligned to.
ALIGN = 64


def cpu_aliases(ops: Sequence[CpuOp], buffers: Sequence[Buffer]) -> list[Alias]:
    """The ops' aliases (inner, outer, element offset) as (inner, outer, byte offset)."""
    return [(inner, outer, off * ARENA_DTYPES[buffers[inner].dtype])
            for op in ops for inner, outer, off in op.extra.get("aliases", ())]

