"""The model-level GPU compiler shared by the cuda, rocm and opencl backends.

graph (after the backend's core passes) -> one GPU rKernel per node (:mod:`.lower`; tilings, and
plugins' rKernels a tiling runs, are candidates the core scheduler chooses among) -> the core
pipeline's middle end (:mod:`rammer.pipeline`): each node a ``NodeOp`` over arena buffers, a
:class:`rammer.schedule.Schedule` on a GPU vDevice (wavefront by default, verified) from
``schedule_operators``, then ``order_and_plan``: one float arena placed with the schedule's "done
before" relation (wave mode: memory reused across waves only) -> block programs in the core's
program form (:func:`.program.from_schedule`), race-checked -> ONE table-driven entry kernel
(:mod:`.entry`), rendered in any dialect of :mod:`rammer.codegen`.  Nothing here depends on the
dialect: the backends differ in the table they render with and the runtime that launches the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from rammer.codegen import kernel_ir as ir
from rammer.codegen.dialects import get_dialect
from rammer.codegen.render import render_module
from rammer.errors import RammerError, UnsupportedOpError
from rammer.ir import Graph, Node
from rammer.memory import ArenaBuffer
from rammer.pipeline import NodeOp, operator_predecessors, order_and_plan, schedule_operators
from rammer.rtask import RKernel, RTaskResources
from rammer.schedule import Schedule, op_waves
from rammer.vdevice import VDevice

from . import entry
from . import program as gp
from .fuse import FUSED_OP
from .guards import Guard, program_guards
from .lower import (
    BINARY,
    BLOCK_THREADS,
    CONV_IMPLICIT_GEMM,
    COPY,
    TILINGS,
    UNARY,
    Lowered,
    NoGpuKernel,
    Ref,
    lower_node,
)
from .lower_ints import arena_refusal

__all__ = ["GpuProgram", "compile_program", "MODES", "gpu_rkernels", "kernel_tiling", "unsupported", "KERNEL_NAME"]

#: The persistent kernel's name in every dialect.
KERNEL_NAME = "rammer_main"
_ALIGN = 64


def unsupported(graph: Graph) -> list[tuple[Node, str]]:
    """Nodes no GPU rKernel implements, each with the reason."""
    bad = []
    for node in graph.nodes:
        try:
            lower_node(node, graph, 1)
        except NoGpuKernel as exc:
            bad.append((node, str(exc)))
    return bad


def _mults(node: Node) -> tuple[int, ...]:
    if node.op_type == "Conv":  # direct and implicit GEMM: the scheduler picks by time x resources
        return (1, CONV_IMPLICIT_GEMM)
    return TILINGS if node.op_type in UNARY | BINARY | COPY | {FUSED_OP} else (1,)


def gpu_rkernels(node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """The candidate rKernels of ``node``: one per tiling, costed from the vDevice's figures."""
    shapes_in = tuple(tuple(graph.value_info[n].shape) if n else None for n in node.inputs)
    shapes_out = tuple(tuple(graph.value_info[n].shape) if n else None for n in node.outputs)
    out, seen = [], set()
    for mult in _mults(node):
        low = lower_node(node, graph, mult)
        if (low.kernel.name, len(low.calls)) in seen:
            continue
        seen.add((low.kernel.name, len(low.calls)))
        duration = vd.rtask_overhead_us + max(low.flops / vd.flops_per_us, low.bytes / vd.bytes_per_us)
        out.append(RKernel(family=f"gpu.{low.kernel.name}", params={"mult": mult}, num_rtasks=len(low.calls),
                           duration_us=duration, resources=RTaskResources(low.kernel.threads, low.shared_bytes),
                           flops=low.flops, bytes=low.bytes, input_shapes=shapes_in, output_shapes=shapes_out))
    return out


def kernel_tiling(node: Node, graph: Graph, kernel: RKernel) -> int | None:
    """The tiling (``mult`` of :func:`.lower.lower_node`) that runs ``kernel`` for ``node``: its own for a
    GPU rKernel; for one a plugin registered (``rammer_register_rkernels``: its figures cost the op, the
    GPU's lowering runs it), the tiling with that many rTasks; None when there is none."""
    if kernel.family.startswith("gpu.") and "mult" in kernel.params:
        return int(kernel.params["mult"])
    for mult in _mults(node):
        if len(lower_node(node, graph, mult).calls) == kernel.num_rtasks:
            return mult
    return None


@dataclass
class GpuProgram:
    """A compiled model: the persistent kernel (and its device functions), the arena layout and
    the schedule.  ``tensors[name] = (float offset, shape)``."""

    graph_name: str
    schedule: Schedule
    kernels: list[ir.Kernel]
    blocks: int
    block_threads: int
    arena_floats: int
    tensors: dict[str, tuple[int, tuple[int, ...]]]
    constants: list[tuple[int, np.ndarray]]
    inputs: list[str]
    outputs: list[str]
    report: dict[str, Any] = field(default_factory=dict)
    #: "persistent" (one launch, argument ``epoch``) or "wave" (one launch per wave, argument ``wave``).
    mode: str = "persistent"
    launches: int = 1
    #: The entry kernel's call tables (:mod:`.entry`), passed after ``(arena, counters, epoch|wave)``
    #: in this order.
    tables: dict[str, np.ndarray] = field(default_factory=dict)
    #: The branch guards (:mod:`.guards`): tensors the runner reads back with the outputs and checks.
    guards: list[Guard] = field(default_factory=list)

    def source(self, dialect: str) -> str:
        """The self-contained source file of the program in ``dialect`` (cuda, hip, opencl)."""
        return render_module(self.kernels, get_dialect(dialect), title=f"rammer persistent program of "
                             f"{self.graph_name}: {self.blocks} blocks x {self.block_threads} threads")

    def constant_arena(self) -> np.ndarray:
        """The arena with every constant in place (the rest zero)."""
        arena = np.zeros(max(self.arena_floats, 1), np.float32)
        for off, value in self.constants:
            arena[off:off + value.size] = value.ravel()
        return arena


#: Execution modes: one launch per run, blocks ordered by counters; or one launch per wave.
MODES = ("persistent", "wave")


def _distinct_args(low: Lowered) -> dict[int, tuple]:
    """The argument tuples of ``low``'s calls, one per distinct tuple object (keyed by ``id``): the
    lowerings share one tuple between the rTasks of a node that differ only in their rtask id, so a
    full-size model's 10^5 calls have a few thousand (C-level passes, no per-call Python)."""
    argss = list(map(itemgetter(1), low.calls))
    return dict(zip(map(id, argss), argss))


def _refs(distinct_args: dict[int, tuple]) -> set[tuple[str, int]]:
    """The (``"in"``/``"out"``, slot) pairs calls with these :func:`_distinct_args` touch."""
    return {(a.io, a.slot) for args in distinct_args.values() for a in args if isinstance(a, Ref)}


def compile_program(graph: Graph, backend: Any, vdevice: VDevice, policy: str = "wavefront",
                    mode: str = "persistent") -> GpuProgram:
    """``graph`` (already through the backend's passes) as one GPU program: one persistent kernel
    launched once per run, or (``mode="wave"``) one kernel launched once per wave.  The middle end is
    the core pipeline's (:mod:`rammer.pipeline`): every node one :class:`~rammer.pipeline.NodeOp`
    whose candidates are ``backend.rkernels``, scheduled by :func:`~rammer.pipeline.schedule_operators`,
    ordered and placed by :func:`~rammer.pipeline.order_and_plan` (in wave mode, memory is reused
    across waves only)."""
    if mode not in MODES:
        raise RammerError(f"unknown GPU execution mode '{mode}'; choose one of {', '.join(MODES)}")
    # Every node lowered once at one rTask per tile (what the buffers it touches are, and whether an
    # rKernel implements it at all); the schedule picks the tiling, lowered again below when it differs.
    first: list[Lowered] = []
    bad: list[tuple[Node, str]] = []
    for node in graph.nodes:
        try:
            first.append(lower_node(node, graph, 1))
        except NoGpuKernel as exc:
            bad.append((node, str(exc)))
    if bad:
        raise UnsupportedOpError("; ".join(why for _, why in bad[:5]) + (" ..." if len(bad) > 5 else ""),
                                 [(n.op_type, n.domain, n.name) for n, _ in bad])

    # Buffers: every tensor a kernel touches, the inputs and the outputs, in one float arena.
    names: list[str] = []
    index: dict[str, int] = {}

    def buf(name: str) -> int:
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    inputs = [t.name for t in graph.inputs]
    outputs = [t.name for t in graph.outputs]
    guards = program_guards(graph)
    kept = outputs + [g.tensor for g in guards if g.tensor not in outputs]  # alive until the run ends
    for n in inputs:
        buf(n)
    # Each lowering's distinct argument tuples, read once (a pass over its calls: 10^6 on a full-size
    # model); keyed by id, the lowerings being alive in first/lowered until the end.
    distinct_of: dict[int, dict[int, tuple]] = {}

    def distinct(low: Lowered) -> dict[int, tuple]:
        got = distinct_of.get(id(low))
        if got is None:
            got = distinct_of[id(low)] = _distinct_args(low)
        return got

    ops: list[NodeOp] = []
    touched: list[set[tuple[str, int]]] = []
    for node, low in zip(graph.nodes, first):
        refs = _refs(distinct(low))
        touched.append(refs)
        # Buffer ids in slot order, not set order: the arena layout must not depend on the hash seed.
        reads = tuple(sorted({buf(node.inputs[s]) for io, s in sorted(refs) if io == "in"}))
        writes = tuple(sorted({buf(node.outputs[s]) for io, s in sorted(refs) if io == "out"}))
        ops.append(NodeOp(node, reads, writes))
    for n in kept:
        buf(n)
    buffers = []
    for i, n in enumerate(names):
        info = graph.value_info[n]
        why = arena_refusal(graph, n, n in outputs)  # float32, or integers/bools as exact float32 values
        if why:
            raise UnsupportedOpError(why, [])
        kind = "const" if n in graph.initializers else "input" if n in inputs else "temp"
        buffers.append(ArenaBuffer(i, kind, 4 * int(np.prod(info.shape)), name=n))

    def candidates(op: NodeOp, vd: VDevice) -> list[RKernel]:
        return list(backend.rkernels(op.node, graph, vd))

    schedule = schedule_operators(ops, candidates, vdevice, policy, graph.name, check=True, graph=graph)
    lowered: list[Lowered] = []
    for i, (node, low) in enumerate(zip(graph.nodes, first)):
        mult = kernel_tiling(node, graph, schedule.ops[i].kernel) or 1
        if mult != 1:
            low = lower_node(node, graph, mult)
        # Cannot happen: lowering is deterministic, and a tiling changes how many calls, not what they touch.
        if len(low.calls) != schedule.ops[i].kernel.num_rtasks:
            raise gp.ProgramError(f"{node.label}: {len(low.calls)} calls for {schedule.ops[i].kernel.num_rtasks} rTasks")
        if mult != 1 and _refs(distinct(low)) != touched[i]:
            raise gp.ProgramError(f"{node.label}: tiling {mult} touches other tensors than tiling 1")
        lowered.append(low)

    waves = op_waves(operator_predecessors(ops))
    plan = order_and_plan([ops], [schedule], buffers, {index[n] for n in kept}, alignment=_ALIGN,
                          waves=waves if mode == "wave" else None).arena
    offset = {b.name: b.byte_offset // 4 for b in buffers}
    tensors = {b.name: (offset[b.name], tuple(graph.value_info[b.name].shape)) for b in buffers}

    # What each rTask runs, as columns by rTask id (a full-size model has 10^6 rTasks: one Call object
    # each cost seconds to make and to read back), with arena offsets and the ranges they read and write.
    n = schedule.num_rtasks
    kernel_col = np.zeros(n, np.int32)
    rtask_col = np.zeros(n, np.int64)
    arg_col = np.zeros(n, np.int64)
    op_col = np.zeros(n, np.int32)
    distinct_args: list[tuple] = []
    accesses: list[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]] = []
    templates: dict[str, ir.Kernel] = {}
    kernel_names: dict[str, int] = {}
    for i, (node, low) in enumerate(zip(graph.nodes, lowered)):
        templates.setdefault(low.kernel.name, low.kernel)
        first = schedule.ops[i].first_rtask
        # A tensor with no elements touches no memory: the planner may put it where another lives.
        reads = tuple(r for r in ((offset[node.inputs[s]], buffers[index[node.inputs[s]]].nbytes // 4)
                                  for s in sorted(s for io, s in touched[i] if io == "in")) if r[1])
        writes = tuple(r for r in ((offset[node.outputs[s]], buffers[index[node.outputs[s]]].nbytes // 4)
                                   for s in sorted(s for io, s in touched[i] if io == "out")) if r[1])
        accesses.append((reads, writes))
        # Resolved once per distinct argument tuple (shared by the rTasks of a node), numbered, then
        # looked up per call by the tuple's id (C-level passes over the node's calls).
        number = {}
        for key, args in distinct(low).items():
            number[key] = len(distinct_args)
            distinct_args.append(tuple(offset[(node.inputs if a.io == "in" else node.outputs)[a.slot]] + a.offset
                                       if isinstance(a, Ref) else a for a in args))
        size = len(low.calls)
        span = slice(first, first + size)
        kernel_col[span] = kernel_names.setdefault(low.kernel.name, len(kernel_names))
        rtask_col[span] = np.fromiter(map(itemgetter(0), low.calls), np.int64, size)
        arg_col[span] = np.fromiter(map(number.__getitem__, map(id, map(itemgetter(1), low.calls))), np.int64, size)
        op_col[span] = i
    calls = gp.CallColumns(list(kernel_names), kernel_col, rtask_col, distinct_args, arg_col, accesses,
                           op_col.copy(), op_col)
    programs = gp.from_schedule(schedule, calls)
    # The step index from_schedule made from its arrays, passed on (a patched from_schedule in the
    # tests returns plain lists: then the entry reads the steps).
    step_index: gp.StepIndex | None = getattr(programs, "steps_index", None)
    # An operator whose outputs all have no elements computes nothing; its rKernel would still run
    # rTask 0 (grids are at least one rTask) and could write where the planner put a live tensor.
    idle = {i for i, node in enumerate(graph.nodes)
            if all(buffers[index[o]].nbytes == 0 for o in node.outputs if o in index)}
    if idle:
        programs = [[s for s in p if not (isinstance(s, gp.Call) and s.op in idle)] for p in programs]
        step_index = None
    try:
        if mode == "wave":
            wave_programs = gp.split_waves(programs, waves)
            kernels, tables = entry.wave_kernel(KERNEL_NAME, templates, wave_programs, BLOCK_THREADS)
            launches = len(wave_programs)
        else:
            kernels, tables = entry.persistent_kernel(KERNEL_NAME, templates, programs, BLOCK_THREADS,
                                                      index=step_index)
            launches = 1
    except entry.CallArgumentRangeError as exc:
        where = graph.nodes[exc.op].label if 0 <= exc.op < len(graph.nodes) else f"operator {exc.op}"
        raise gp.ProgramError(
            f"{where}: its rKernel {exc.kernel} would get the integer argument {exc.value:.0f}, beyond the 32-bit "
            "call table of the GPU backends (a tensor, offset or attribute too large for them); run the model on "
            "the cpu backend, or make the tensor smaller") from None
    schedule.place({n: o * 4 for n, o in offset.items()})
    constants = [(offset[n], np.asarray(graph.initializers[n], np.float32)) for n in names if n in graph.initializers]
    arena_floats = plan.total_bytes // 4
    report = {"blocks": len(programs), "block_threads": BLOCK_THREADS, "rtasks": schedule.num_rtasks,
              "barriers": schedule.num_barriers, "signals": sum(gp.signals_per_block(programs, step_index)),
              "arena_bytes": plan.total_bytes, "kernels": sorted(templates), "vdevice": vdevice.name,
              "policy": policy, "mode": mode, "launches_per_run": launches, "waves": max(waves, default=-1) + 1,
              "shared_bytes": max((sum(s.size for s in k.shared) * 4 for k in templates.values()), default=0)}
    return GpuProgram(graph.name, schedule, kernels, len(programs), BLOCK_THREADS, arena_floats, tensors,
                      constants, inputs, outputs, report, mode, launches, tables, guards)
