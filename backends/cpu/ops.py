"""The CPU backend's rOperators: what lowering produces and codegen consumes.

A :class:`CpuOp` is the core's lowered operator (:mod:`rammer.lower.operator`: nodes covered,
buffers read and written, cost, tilings).  Once the scheduler has picked a tiling and the memory
planner has placed the buffers, its ``emit`` writes one task row per rTask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rammer.cost import rtask_duration
from rammer.lower.operator import LoweredOp, grid_split, split_range
from rammer.lower.views import Buffer, View
from rammer.vdevice import VDevice, get_preset

from .program import SideTables

__all__ = ["ARENA_DTYPES", "CostModel", "CpuOp", "EmitContext", "Row", "grid_split", "split_range"]

#: Dtypes the cpu kernels keep in the arena, with their byte sizes; anything else runs on the host.
#: 8-bit integers (quantized models) share the byte view with bool.
ARENA_DTYPES: dict[str, int] = {"float32": 4, "int64": 8, "int32": 4, "bool": 1, "uint8": 1, "int8": 1}

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
class CpuOp(LoweredOp):
    """A core lowered operator (:class:`rammer.lower.operator.LoweredOp`) whose ``emit(ctx, parts)``
    writes one cpu task row (:data:`Row`) per part through an :class:`EmitContext`."""
