"""A whole backend in one file: lowering, emitting and running; every other stage is the core's.

``ToyBackend`` subclasses :class:`rammer.pipeline.PipelineBackend`, so ``rammer.compile(model,
backend="toy")`` runs the core pipeline: the backend's passes, :meth:`ToyBackend.lower`, segments cut
at host ops, one schedule per segment by a registered policy with the rKernels registered for "toy"
(``rammer_register_rkernels``) and the generic families, the schedule's verifier, the vector-clock
order, the arena planner (buffer reuse included) and the per-vEU row programs; then
:meth:`ToyBackend.emit` and :meth:`ToyBackend.executable`.

Its "device" is numpy: one byte arena, each vEU a row program walked in turn (one entry per vEU per
round, a barrier row passing only once the awaited vEU has run that many rows), each rTask running the
op's reference implementation on its slice of the output (elementwise ops of one shape) or, for any
other op, the whole op in rTask 0.  Ops outside :data:`TOY_OPS` are host ops between segments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rammer.backend import Capabilities
from rammer.ir import Graph, Node
from rammer.lower.operator import split_range
from rammer.memory import ArenaBuffer
from rammer.ops.registry import OpContext, get_op
from rammer.pipeline import LoweredProgram, PipelineBackend, ScheduledProgram
from rammer.schedule.rows import RowWait

#: Ops the toy device runs itself; elementwise ones of one shape are split into slices.
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"})
TOY_OPS = ELEMENTWISE | {"MatMul", "Gemm", "Softmax", "Transpose", "Reshape", "Concat"}


@dataclass(frozen=True)
class ToyOp:
    """One graph node as a lowered operator over buffer ids (what :class:`rammer.pipeline.PipelineOp` reads)."""

    name: str
    family: str
    nodes: tuple[Node, ...]
    graph: Graph = field(repr=False)
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    host: bool = False


@dataclass
class ToyProgram:
    """What ``emit`` writes: the arena layout and, per group, a host node or per-vEU rows."""

    arena_bytes: int
    constants: list[tuple[int, np.ndarray]]
    tensors: dict[str, tuple[int, str, tuple[int, ...]]]  # name -> (byte offset, dtype, shape)
    inputs: list[str]
    outputs: list[str]
    #: ("host", node) or ("segment", programs): per vEU, rows ("task", node, rtask, of) or ("wait", RowWait).
    steps: list[tuple[str, Any]]
    #: Per segment, per op, the rKernel family the schedule chose (for tests and reports).
    chosen: list[list[str]]


class ToyBackend(PipelineBackend):
    name = "toy"
    description = "one-file example backend: numpy rTasks walked per vEU over one planned arena"
    capabilities = Capabilities(ops=TOY_OPS, reference_fallback=True, device="cpu", schedules=True,
                                vdevice_presets=("cpu",), options=frozenset({"policy", "vdevice"}))

    # -- lowering: one op per node, one buffer per tensor ------------------------------------------
    def lower(self, graph: Graph, options: Mapping[str, Any]) -> LoweredProgram[ToyOp]:
        index: dict[str, int] = {}
        buffers: list[ArenaBuffer] = []
        inputs = {t.name for t in graph.inputs}

        def buf(name: str) -> int:
            if name not in index:
                info = graph.value_info[name]
                kind = "const" if name in graph.initializers else "input" if name in inputs else "temp"
                nbytes = int(np.prod(info.shape, dtype=np.int64)) * np.dtype(info.dtype).itemsize
                index[name] = len(buffers)
                buffers.append(ArenaBuffer(len(buffers), kind, nbytes, name=name))
            return index[name]

        for t in graph.inputs:
            buf(t.name)
        ops = [ToyOp(node.name or f"{node.op_type}_{i}", node.op_type, (node,), graph,
                     tuple(buf(x) for x in node.inputs if x), tuple(buf(y) for y in node.outputs if y),
                     host=node.op_type not in TOY_OPS)
               for i, node in enumerate(graph.nodes)]
        keep = {buf(t.name) for t in graph.outputs}
        return LoweredProgram(ops, buffers, keep, dict(index), alignment=16)

    # -- emit: the placed buffers and the row programs as plain data -------------------------------
    def emit(self, program: ScheduledProgram[ToyOp], options: Mapping[str, Any]) -> ToyProgram:
        graph, lowered = program.graph, program.lowered
        tensors = {b.name: (b.byte_offset, graph.value_info[b.name].dtype, tuple(graph.value_info[b.name].shape))
                   for b in lowered.buffers}
        constants = [(tensors[n][0], np.asarray(v)) for n, v in graph.initializers.items() if n in tensors]
        steps: list[tuple[str, Any]] = []
        chosen: list[list[str]] = []
        segments = iter(zip(program.schedules, program.rows))
        for group in program.groups:
            if not isinstance(group, list):
                steps.append(("host", group.nodes[0]))
                continue
            schedule, rows = next(segments)
            chosen.append([op.kernel.family for op in schedule.ops])
            veu_rows: list[list[tuple[Any, ...]]] = []
            for prog, waits in zip(schedule.programs, rows):
                out: list[tuple[Any, ...]] = []
                for entry, entry_waits in zip(prog, waits):
                    if entry < schedule.num_rtasks:
                        op_index = int(schedule.rtask_op[entry])
                        first = schedule.ops[op_index].first_rtask
                        out.append(("task", group[op_index].nodes[0], entry - first,
                                    schedule.ops[op_index].kernel.num_rtasks))
                    else:
                        out.extend(("wait", w) for w in entry_waits)
                veu_rows.append(out)
            steps.append(("segment", veu_rows))
        return ToyProgram(program.arena.total_bytes, constants, tensors, [t.name for t in graph.inputs],
                          [t.name for t in graph.outputs], steps, chosen)

    def executable(self, emitted: ToyProgram, options: Mapping[str, Any]) -> ToyExecutable:
        return ToyExecutable(emitted)


class ToyExecutable:
    def __init__(self, program: ToyProgram):
        self.program = program

    def _view(self, arena: np.ndarray, name: str) -> np.ndarray:
        offset, dtype, shape = self.program.tensors[name]
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return arena[offset:offset + size].view(dtype).reshape(shape)

    def _run_node(self, arena: np.ndarray, node: Node, rtask: int = 0, of: int = 1) -> None:
        values: list[np.ndarray | None] = [self._view(arena, x) if x else None for x in node.inputs]
        sliced = node.op_type in ELEMENTWISE and all(
            v is not None and v.shape == self._view(arena, node.outputs[0]).shape for v in values)
        if not sliced and rtask:
            return  # rTask 0 runs a whole op that is not split
        ctx = OpContext(node, 17, [None] * len(values), list(values))
        if sliced:
            out = self._view(arena, node.outputs[0]).reshape(-1)
            lo, hi = split_range(out.size, of, rtask)
            parts = [v.reshape(-1)[lo:hi] for v in values if v is not None]
            out[lo:hi] = get_op(node).compute(ctx, *parts)
            return
        result = get_op(node).compute(ctx, *values)
        for name, value in zip(node.outputs, result if isinstance(result, (list, tuple)) else [result]):
            if name:
                self._view(arena, name)[...] = value

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        arena = np.zeros(max(self.program.arena_bytes, 1), np.uint8)
        for offset, value in self.program.constants:
            raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
            arena[offset:offset + raw.size] = raw
        for name in self.program.inputs:
            self._view(arena, name)[...] = feeds[name]
        for kind, what in self.program.steps:
            if kind == "host":
                self._run_node(arena, what)
            else:
                self._run_segment(arena, what)
        return {name: self._view(arena, name).copy() for name in self.program.outputs}

    def _run_segment(self, arena: np.ndarray, programs: Sequence[list[tuple[Any, ...]]]) -> None:
        done = [0] * len(programs)  # rows each vEU has finished
        while any(done[v] < len(p) for v, p in enumerate(programs)):
            moved = False
            for v, prog in enumerate(programs):  # one row per vEU per round: vEUs interleave
                if done[v] == len(prog):
                    continue
                row = prog[done[v]]
                if row[0] == "wait":
                    wait: RowWait = row[1]
                    if done[wait.veu] < wait.rows:
                        continue
                else:
                    self._run_node(arena, row[1], row[2], row[3])
                done[v] += 1
                moved = True
            if not moved:
                raise RuntimeError("the row programs deadlock")
