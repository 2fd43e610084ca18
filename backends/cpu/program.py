"""Building the data the compiled kernels read: side tables and ew programs.

:class:`SideTables` accumulates the int64 and float32 side arrays that task
rows point into (GEMM descriptors, elementwise programs, shape tables).
:class:`EwProgram` is the builder of one fused elementwise program; views are
symbolic (buffer + strides) until the memory planner has placed buffers, then
:meth:`EwProgram.emit` writes concrete element offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import ewops
from .views import View, broadcast_view, to_rank4


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


@dataclass
class _Instr:
    op: str
    dst: int
    args: tuple[int, ...]
    imms: tuple[float, ...]


@dataclass
class EwProgram:
    """A fused elementwise program over one output shape.

    ``shape`` is the logical iteration shape; :meth:`canonical` maps it to
    the 4-D space the kernel walks (see there for the GEMM and convolution
    epilogue spaces, which keep the tile's rows and columns apart).
    """

    shape: tuple[int, ...]
    inputs: list[tuple[View, str]] = field(default_factory=list)  # (view broadcast to shape, dtype)
    instrs: list[_Instr] = field(default_factory=list)
    outputs: list[tuple[int, View]] = field(default_factory=list)
    n_values: int = 0
    #: Value id of each input, in load order (inputs get registers 0..n_in-1).
    input_values: list[int] = field(default_factory=list)
    _input_index: dict[tuple, int] = field(default_factory=dict)

    def load(self, view: View) -> int:
        """A register holding ``view`` broadcast to the program's shape."""
        v = broadcast_view(view, self.shape)
        key = (v.buffer, v.offset, v.strides, v.dtype)
        if key in self._input_index:
            return self._input_index[key]
        value = self.n_values
        self.n_values += 1
        self.inputs.append((v, v.dtype))
        self.input_values.append(value)
        self._input_index[key] = value
        return value

    def op(self, name: str, *args: int, imms: tuple[float, ...] = ()) -> int:
        if ewops.ARITY[name] != len(args):
            raise ValueError(f"{name} takes {ewops.ARITY[name]} operands")
        if ewops.N_IMM[name] != len(imms):
            raise ValueError(f"{name} takes {ewops.N_IMM[name]} immediates")
        dst = self.n_values
        self.n_values += 1
        self.instrs.append(_Instr(name, dst, tuple(args), tuple(imms)))
        return dst

    def store(self, value: int, view: View) -> None:
        if view.shape != self.shape:
            raise ValueError(f"output view {view.shape} does not match program shape {self.shape}")
        self.outputs.append((value, view))

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
        regs = self._allocate_registers()
        words: list[int] = [len(self.inputs), len(self.outputs), len(self.instrs), max(regs.values(), default=-1) + 1]
        words += list(shape)
        for (view, dtype), st in zip(self.inputs, strides):
            words += [ewops.DTYPE_CODE[dtype], locate(view)] + list(st)
        for ins in self.instrs:
            a = [regs[x] for x in ins.args] + [0] * (3 - len(ins.args))
            imm = side.add_floats(list(ins.imms)) if ins.imms else -1
            words += [ewops.OPCODE[ins.op], regs[ins.dst]] + a + [imm]
        for (value, view), st in zip(self.outputs, strides[len(self.inputs):]):
            words += [regs[value], ewops.DTYPE_CODE[view.dtype], locate(view)] + list(st)
        return side.add_ints(words)

    def n_registers(self) -> int:
        return max(self._allocate_registers().values(), default=-1) + 1

    def _allocate_registers(self) -> dict[int, int]:
        """Linear-scan register reuse: a register frees after its value's last read.

        Inputs start in registers 0..n_in-1 (the kernel loads them there at
        the start of every block), after which those registers may be reused too.
        """
        last_use: dict[int, int] = {}
        for i, ins in enumerate(self.instrs):
            for a in ins.args:
                last_use[a] = i
        stored = {v for v, _ in self.outputs}
        regs = {value: k for k, value in enumerate(self.input_values)}
        free: list[int] = []
        next_reg = len(self.inputs)
        for i, ins in enumerate(self.instrs):
            # The destination never shares a register with an operand of the
            # same instruction: distinct registers let LLVM vectorize the
            # kernel's loops without falling back on a possible overlap.
            if free:
                regs[ins.dst] = free.pop()
            else:
                regs[ins.dst] = next_reg
                next_reg += 1
            for a in set(ins.args):
                if last_use.get(a) == i and a not in stored:
                    free.append(regs[a])
        return regs


def epilogue_io(prog: EwProgram | None) -> tuple[set[int], set[int], int]:
    """What a fused elementwise program (or None) adds to the op that runs it: the buffers it
    reads, the buffers it writes, and how many inputs it reads per output element."""
    if prog is None:
        return set(), set(), 0
    return {v.buffer for v, _ in prog.inputs}, {v.buffer for _, v in prog.outputs}, len(prog.inputs)
