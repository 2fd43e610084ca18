"""Building the data the compiled kernels read: side tables and ew programs.

:class:`SideTables` accumulates the int64 and float32 side arrays that task
rows point into (GEMM descriptors, elementwise programs, shape tables).
:class:`EwProgram` is the core's fused elementwise program (:mod:`rammer.lower.ewprogram`)
with the cpu kernel's encoding: views are symbolic (buffer + strides) until the
memory planner has placed buffers, then :meth:`EwProgram.emit` writes concrete
element offsets.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rammer.lower.ewprogram import EwProgram as _EwProgram
from rammer.lower.ewprogram import epilogue_io
from rammer.lower.views import View, to_rank4

from . import ewops

__all__ = ["EwProgram", "Locate", "SideTables", "epilogue_io"]


class SideTables:
    """The int64 array ``X`` and float32 array ``R`` shared by all task rows."""

    def __init__(self) -> None:
        self.ints: list[int] = []
        self.floats: list[float] = [0.0, 0.0]
        self._float_index: dict[tuple[float, ...], int] = {}

    def add_ints(self, values: list[int]) -> int:
        off = len(self.ints)
        self.ints.extend(int(v) for v in values)
        return off

    def add_floats(self, values: list[float]) -> int:
        key = tuple(float(np.float32(v)) for v in values)
        found = self._float_index.get(key)
        if found is not None:
            return found
        off = len(self.floats)
        self.floats.extend(key)
        self._float_index[key] = off
        return off

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        # Padding: kernels read imm+1 and may read one element past a table.
        ints = np.array(self.ints + [0, 0], dtype=np.int64)
        floats = np.array(self.floats + [0.0, 0.0], dtype=np.float32)
        return ints, floats


#: Resolves a view to its element offset in the arena's view of its dtype.
Locate = Callable[[View], int]


class EwProgram(_EwProgram):
    """A core elementwise program (:class:`rammer.lower.ewprogram.EwProgram`) with the cpu kernel's
    encoding: :meth:`canonical` maps its shape to the 4-D space the kernel walks (see there for the
    GEMM and convolution epilogue spaces, which keep the tile's rows and columns apart) and
    :meth:`emit` writes it as descriptor words.
    """

    # -- emission ------------------------------------------------------------
    def canonical(self, space: tuple = ("flat",)) -> tuple[tuple[int, ...], list[tuple[int, ...]]] | None:
        """The 4-D space the kernel walks and the operands' strides in it
        (inputs then outputs), or None if the operands do not fit it.

        ``space`` is ``("flat",)`` (collapse freely), ``("matrix",)`` (a GEMM
        epilogue: the last two dims stay d2 = M and d3 = N, the batch dims
        collapse into d0, d1) or ``("conv", G)`` (a convolution epilogue over
        [N, M, H, W]: d0 = N, d1 = G groups, d2 = M / G, d3 = H * W).
        """
        strides = [v.strides for v, _ in self.inputs] + [v.strides for _, v in self.outputs]
        if space[0] == "flat":
            return to_rank4(self.shape, strides)
        if space[0] == "matrix":
            lead = len(self.shape) - 2
            if lead < 0:
                return None
            got = to_rank4(self.shape[:lead], [s[:lead] for s in strides])
            if got is None or any(d != 1 for d in got[0][:2]):
                return None
            shape_lead, strides_lead = got
            shape = shape_lead[2:] + self.shape[lead:]
            return tuple(shape), [sl[2:] + s[lead:] for sl, s in zip(strides_lead, strides)]
        if space[0] == "conv":
            groups = space[1]
            if len(self.shape) != 4 or self.shape[1] % groups:
                return None
            n, m, h, w = self.shape
            mg = m // groups
            out = []
            for s_n, s_m, s_h, s_w in strides:
                if h > 1 and w > 1 and s_h != s_w * w:
                    return None
                s_hw = s_w if w > 1 else s_h
                out.append((s_n, mg * s_m, s_m, s_hw))
            return (n, groups, mg, h * w), out
        raise ValueError(f"unknown program space {space}")

    def supported(self, space: tuple = ("flat",)) -> bool:
        return self.canonical(space) is not None

    def emit(self, side: SideTables, locate: Locate, space: tuple = ("flat",)) -> int:
        """Write the program into ``side``; returns its offset."""
        got = self.canonical(space)
        if got is None:
            raise ValueError(f"elementwise program over {self.shape} does not fit the {space[0]} space")
        shape, strides = got
        regs = self.registers()
        words: list[int] = [len(self.inputs), len(self.outputs), len(self.instrs), max(regs.values(), default=-1) + 1]
        words += list(shape) + [int(self.uses_ints())]
        for (view, dtype), st in zip(self.inputs, strides):
            words += [ewops.DTYPE_CODE[dtype], locate(view)] + list(st)
        for ins in self.instrs:
            a = [regs[x] for x in ins.args] + [0] * (3 - len(ins.args))
            imm = side.add_floats(list(ins.imms)) if ins.imms else -1
            words += [ewops.OPCODE[ins.op], regs[ins.dst]] + a + [imm]
        for (value, view), st in zip(self.outputs, strides[len(self.inputs):]):
            words += [regs[value], ewops.DTYPE_CODE[view.dtype], locate(view)] + list(st)
        return side.add_ints(words)

