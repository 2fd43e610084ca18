"""The CPU backend's rOperators: what lowering produces and codegen consumes.

A :class:`CpuOp` covers one or more graph nodes (a fused group, or a GEMM
with its epilogue), reads and writes arena buffers, and offers tilings: ways
to cut it into rTasks, each with a cost.  Once the scheduler has picked a
tiling and the memory planner has placed the buffers, :meth:`CpuOp.emit`
writes one task row per rTask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from rammer.cost import rtask_duration
from rammer.ir import Node
from rammer.vdevice import VDevice, get_preset

from .program import SideTables
from .views import Buffer, View

#: Task rows: (kernel name, params).
Row = tuple[str, list[int]]


@dataclass(frozen=True)
class CostModel:
    """What CPU work costs: the figures of the ``cpu`` vDevice preset (:data:`rammer.vdevice.PRESETS`)
    through the core's one cost model (:func:`rammer.cost.rtask_duration`); BLAS-like kernels
    (GEMM, conv) run at the vEU's peak, other loops at its loop rate."""

    vdevice: VDevice = field(default_factory=lambda: get_preset("cpu"))

    def task_us(self, flops: float, nbytes: float, blas: bool = False) -> float:
        return rtask_duration(self.vdevice, flops, nbytes, contraction=blas)


@dataclass
class EmitContext:
    side: SideTables
    buffers: list[Buffer]

    def locate(self, view: View) -> int:
        """Element offset of a view's first element in the arena view of its dtype."""
        return self.buffers[view.buffer].elem_offset + view.offset


@dataclass
class CpuOp:
    name: str
    #: Kernel family, e.g. "ew", "gemm", "conv", "conv.depthwise", "copy", "host".
    family: str
    nodes: tuple[Node, ...]
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    #: Work of the whole op, for costs and reports.
    flops: float
    nbytes: float
    #: ``partition(n) -> parts``: cut the op into about ``n`` rTasks
    #: (shape-only; the number of parts returned is the real rTask count).
    partition: Callable[[int], list] | None
    #: ``emit(ctx, parts) -> rows``: one task row per part, once buffers are placed.
    emit: Callable[[EmitContext, list], list[Row]] | None
    #: Float32 scratch elements one rTask needs on its vEU.
    scratch: int = 0
    blas: bool = False
    #: Host ops (reference fallback) run between compiled segments.
    host: bool = False
    host_reason: str = ""
    index: int = -1
    extra: dict = field(default_factory=dict)

    def tilings(self, max_veus: int) -> dict[int, list]:
        """Candidate partitions by rTask count: about 1, 2, 4... up to 4x the vEUs."""
        if self.host or self.partition is None:
            return {1: [None]}
        found: dict[int, list] = {}
        wanted = {1, max_veus}
        n = 2
        while n <= 4 * max_veus:
            wanted.add(n)
            n *= 2
        for n in sorted(wanted):
            parts = self.partition(n)
            if parts and len(parts) not in found:
                found[len(parts)] = parts
        return found

    def task_us(self, n_tasks: int, vdevice: VDevice) -> float:
        """One of ``n_tasks`` equal rTasks on a vEU of ``vdevice``."""
        return rtask_duration(vdevice, self.flops / n_tasks, self.nbytes / n_tasks, contraction=self.blas)


def split_range(total: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` near-equal chunks of ``range(total)``."""
    base, extra = divmod(total, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def grid_split(rows: int, cols: int, parts: int, col_align: int = 1) -> list[tuple[int, int, int, int]]:
    """Cut a rows x cols space into ``parts`` rectangles: rows first, then columns."""
    if parts <= rows or cols <= col_align:
        parts = min(parts, max(rows, 1))
        return [split_range(rows, parts, i) + (0, cols) for i in range(parts)]
    row_parts = max(rows, 1)
    col_parts = max(1, parts // row_parts)
    col_parts = min(col_parts, max(1, cols // col_align))
    out = []
    for r in range(row_parts):
        r0, r1 = split_range(rows, row_parts, r)
        chunks = math.ceil(cols / col_align)
        for c in range(col_parts):
            c0, c1 = split_range(chunks, col_parts, c)
            out.append((r0, r1, c0 * col_align, min(cols, c1 * col_align)))
    return out
