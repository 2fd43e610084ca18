"""The elementwise program IR: one fused group of pointwise ops over one output shape.

:class:`EwProgram` builds a program: loads of views (broadcast to the program's shape) into
values, instructions ``dst = op(a, b, c; imms)`` from the opcode table (:mod:`.ewops`), and stores
of values into views.  Views stay symbolic (buffer + strides) until a memory planner places the
buffers; a backend then encodes the program for its kernel (the cpu backend: descriptor words in
its side table).  :meth:`EwProgram.registers` gives a linear-scan register assignment.

Every value has a register type (:data:`.ewops.SIGNATURE`): a load's follows its view's dtype, an
instruction's its opcode, and operands and stores are checked against them, so an int64 tensor can
never be computed through a float register by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ewops
from .views import View, broadcast_view


@dataclass(frozen=True)
class Instr:
    op: str
    dst: int
    args: tuple[int, ...]
    imms: tuple[float, ...]


@dataclass
class EwProgram:
    """A fused elementwise program over one output shape (``shape``, the logical iteration shape)."""

    shape: tuple[int, ...]
    inputs: list[tuple[View, str]] = field(default_factory=list)  # (view broadcast to shape, dtype)
    instrs: list[Instr] = field(default_factory=list)
    outputs: list[tuple[int, View]] = field(default_factory=list)
    n_values: int = 0
    #: Value id of each input, in load order (inputs get registers 0..n_in-1).
    input_values: list[int] = field(default_factory=list)
    _input_index: dict[tuple, int] = field(default_factory=dict)
    #: Register type of every value ("f" or "i", see :mod:`.ewops`), by value id.
    types: list[str] = field(default_factory=list)

    def load(self, view: View) -> int:
        """A register holding ``view`` broadcast to the program's shape."""
        v = broadcast_view(view, self.shape)
        key = (v.buffer, v.offset, v.strides, v.dtype)
        if key in self._input_index:
            return self._input_index[key]
        value = self.n_values
        self.n_values += 1
        self.types.append(ewops.value_type(v.dtype))
        self.inputs.append((v, v.dtype))
        self.input_values.append(value)
        self._input_index[key] = value
        return value

    def op(self, name: str, *args: int, imms: tuple[float, ...] = ()) -> int:
        if ewops.ARITY[name] != len(args):
            raise ValueError(f"{name} takes {ewops.ARITY[name]} operands")
        if ewops.N_IMM[name] != len(imms):
            raise ValueError(f"{name} takes {ewops.N_IMM[name]} immediates")
        wants, result = ewops.SIGNATURE[name]
        got = "".join(self.types[a] for a in args)
        if got != wants:
            raise ValueError(f"{name} reads {wants!r} registers, not {got!r}")
        dst = self.n_values
        self.n_values += 1
        self.types.append(result)
        self.instrs.append(Instr(name, dst, tuple(args), tuple(imms)))
        return dst

    def store(self, value: int, view: View) -> None:
        if view.shape != self.shape:
            raise ValueError(f"output view {view.shape} does not match program shape {self.shape}")
        if self.types[value] != ewops.value_type(view.dtype):
            raise ValueError(f"a {view.dtype} output cannot be stored from a {self.types[value]!r} register")
        self.outputs.append((value, view))

    def uses_ints(self) -> bool:
        """Whether any value lives in an integer register."""
        return "i" in self.types

    def n_registers(self) -> int:
        """Registers the program needs (see :meth:`registers`)."""
        return max(self.registers().values(), default=-1) + 1

    def registers(self) -> dict[int, int]:
        """Value -> register, by linear scan: a register frees after its value's last read.

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
