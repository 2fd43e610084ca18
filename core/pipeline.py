"""The one compile pipeline: a backend supplies a pass list, a lowering, an emitter and a runner;
the core does everything in between.

::

    graph ──backend.graph_passes──▶ graph'            (rammer.passes.run_pipeline)
          ──backend.lower()───────▶ LoweredProgram     operators over buffer ids + rKernel candidates
          ──split_at_host─────────▶ segments           (runs of compiled ops between host ops)
          ──problem_from_rops─────▶ Problem            per segment, the ops' own dependencies
          ──policy────────────────▶ Schedule           (wavefront, op-by-op, a plugin's)
          ──verify────────────────▶ checked schedule   (rammer.schedule.verify)
          ──schedule_order────────▶ walk + "done before" per op (vector clocks)
          ──plan_arena────────────▶ ArenaPlan          buffers placed, reusing memory the schedule frees
          ──row_waits─────────────▶ per-vEU programs   rows, barriers as "wait until vEU u ran n rows"
          ──check_row_races───────▶ race-free          every shared byte ordered (rammer.schedule.programs)
          ──backend.emit()────────▶ the backend's program
          ──backend.executable()──▶ Executable

A backend that subclasses :class:`PipelineBackend` implements only :meth:`~PipelineBackend.lower`,
:meth:`~PipelineBackend.emit` and :meth:`~PipelineBackend.executable`; a backend with a compiler of
its own (the cpu's cache, the GPU family's launch modes) calls the middle-end stages
(:func:`schedule_segments`, :func:`order_and_plan`) from it, so every backend shares one scheduler
input, one ordering and one arena planner.  A backend whose operators are one graph node each (the GPU
family, the ipu) uses :class:`NodeOp` (:func:`node_operators` when every tensor is a buffer) and
schedules with ``graph=``, so its schedule records the graph's nodes; one that launches once per wave
passes ``waves=`` to :func:`order_and_plan`.

The lowered operators are the backend's own objects; the pipeline reads only what
:class:`PipelineOp` names (the reads and writes by buffer id, whether it runs on the host, a name and
a family for schedules and reports).  Dependencies between operators are read-after-write on buffer
ids: an op depends on the last earlier op that wrote a buffer it reads.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, Union

from .backend import Backend, Executable, check_options
from .errors import ScheduleError
from .ir import Graph, Node, outer_names
from .lower.operator import split_at_host
from .memory import Alias, ArenaPlan, MemoryOp, PlannedBuffer, plan_arena
from .plugin_host import plugin_manager
from .rtask import RKernel, RKernelFamily, ROperator, node_signature
from .schedule.ordering import schedule_order
from .schedule.policies import get_policy
from .schedule.problem import op_names, problem_from_rops
from .schedule.programs import Call, Signal, Step, Wait, check_races
from .schedule.rows import RowWait, row_waits
from .schedule.schedule import Schedule
from .schedule.verify import verify
from .vdevice import VDevice

__all__ = ["PipelineOp", "NodeOp", "node_operators", "LoweredProgram", "ScheduledProgram", "PipelineBackend",
           "operator_predecessors", "schedule_operators", "schedule_segments", "order_and_plan", "compile_graph",
           "PIPELINE_OPTIONS", "row_program_steps", "check_row_races", "plugin_rkernel_families", "with_plugin_kernels"]


class PipelineOp(MemoryOp, Protocol):
    """What the pipeline reads of a backend's lowered operator: what the arena planner reads (the
    buffer ids it reads and writes, whether it is a host op run between compiled segments), a name,
    and what kind of kernel runs it ("gemm", "ew", "conv"...: the schedule's op type)."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...


Op = TypeVar("Op", bound=PipelineOp)

#: ``candidates(op, vdevice)``: the ways to split one lowered operator into rTasks, costed for ``vdevice``.
Candidates = Callable[[Op, VDevice], Sequence[RKernel]]

#: A program's groups in run order: a segment (a list of compiled ops) or one host op.
Group = Union[list[Op], Op]  # noqa: UP007 -- a runtime alias over a TypeVar, kept in the typing spelling


def plugin_rkernel_families(backend_name: str) -> list[RKernelFamily]:
    """The rKernel families plugins register for ``backend_name`` (``rammer_register_rkernels``),
    without the generic ones: what a backend with rKernels of its own adds to its candidates."""
    found: list[RKernelFamily] = []
    plugin_manager().hook.rammer_register_rkernels(backend=backend_name, register=found.append)
    return found


def with_plugin_kernels(own: Candidates[Op], families: Sequence[RKernelFamily], graph: Graph,
                        runnable: Callable[[Op, RKernel, VDevice], bool]) -> Candidates[Op]:
    """``own`` candidates plus what ``families`` offer for an op that covers exactly one node of
    ``graph`` (``op.nodes``), kept where ``runnable(op, kernel, vdevice)`` says the backend can run that kernel
    (e.g. it has a tiling with that many rTasks)."""
    if not families:
        return own

    def candidates(op: Op, vdevice: VDevice) -> Sequence[RKernel]:
        found = list(own(op, vdevice))
        nodes: Sequence[Node] = getattr(op, "nodes", ())
        if op.host or len(nodes) != 1:
            return found
        node = nodes[0]
        for family in families:
            if family.op_types is None or node.op_type in family.op_types:
                found += [k for k in family.candidates(node, graph, vdevice) if runnable(op, k, vdevice)]
        return found
    return candidates


@dataclass(frozen=True, eq=False)
class NodeOp:
    """A lowered operator that is one graph node (the GPU family's and the ipu's): the buffers it reads
    and writes by id, never a host op.  A :class:`PipelineOp`; schedule such ops with
    ``graph=`` (:func:`schedule_operators`) to record the nodes themselves."""

    node: Node
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    host: bool = False

    @property
    def name(self) -> str:
        return self.node.name or self.node.op_type

    @property
    def family(self) -> str:
        return self.node.op_type

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.node,)


def node_operators(graph: Graph) -> list[NodeOp]:
    """One :class:`NodeOp` per node of ``graph``, a buffer per tensor name (numbered as first met, inputs
    in slot order):
    a node reads its inputs and the outer tensors its subgraphs capture and writes its outputs, so
    the ops' dependencies are the graph's (:func:`rammer.schedule.op_predecessors`)."""
    ids: dict[str, int] = {}

    def buffer(name: str) -> int:
        return ids.setdefault(name, len(ids))

    ops: list[NodeOp] = []
    for node in graph.nodes:
        reads = [t for t in node.inputs if t] + (sorted(outer_names(node)) if node.subgraphs() else [])
        ops.append(NodeOp(node, tuple(sorted({buffer(t) for t in reads})),
                          tuple(buffer(t) for t in node.outputs if t)))
    return ops


def operator_predecessors(ops: Sequence[PipelineOp]) -> list[tuple[int, ...]]:
    """For each op, the indices of the earlier ops that last wrote a buffer it reads."""
    last_writer: dict[int, int] = {}
    preds: list[tuple[int, ...]] = []
    for i, op in enumerate(ops):
        preds.append(tuple(sorted({last_writer[b] for b in op.reads if b in last_writer})))
        for b in op.writes:
            last_writer[b] = i
    return preds


def _operator_node(k: int, op: PipelineOp) -> Node:
    # The schedule records an op's type, attributes and tensors from a node; a lowered operator's
    # tensors are arena buffers, named b<id> (no dtype or shape: a buffer has bytes, not a shape).
    return Node(op.family, tuple(f"b{b}" for b in op.reads), tuple(f"b{b}" for b in op.writes),
                name=f"{k}:{op.name}", domain="rammer.lowered")


def _graph_records(ops: Sequence[PipelineOp], graph: Graph) -> list[tuple[Node, str]]:
    # Ops that each lower one node of ``graph``: the schedule records that node under the name
    # rammer.schedule.op_names gives it, as a schedule of the graph itself would.
    names = {id(node): name for node, name in zip(graph.nodes, op_names(graph))}
    records: list[tuple[Node, str]] = []
    for op in ops:
        nodes: Sequence[Node] = getattr(op, "nodes", ())
        if len(nodes) != 1 or id(nodes[0]) not in names:
            raise ScheduleError(f"operator {op.name} ({op.family}) does not lower exactly one node of graph "
                                f"'{graph.name}'; schedule it without graph=")
        records.append((nodes[0], names[id(nodes[0])]))
    return records


def schedule_operators(ops: Sequence[Op], candidates: Candidates[Op], vdevice: VDevice, policy: str,
                       name: str, check: bool = False, graph: Graph | None = None) -> Schedule:
    """Schedule one segment's ops on ``vdevice`` with the registered ``policy``: their rKernel
    candidates (those that fit a vEU) and read-after-write dependencies become a
    :class:`~rammer.schedule.Problem` directly (:func:`~rammer.schedule.problem.problem_from_rops`).
    ``check`` verifies the schedule (:func:`rammer.schedule.verify`).

    ``graph``: every op lowers exactly one node of ``graph`` (``op.nodes == (node,)``, as the GPU
    family's do): the schedule records those nodes, named and typed as in the graph, with the graph's
    tensors, and ops of nodes with equal signatures (:func:`rammer.rtask.node_signature`) ask
    ``candidates`` once.  Without it, an op is recorded as its family over buffers ``b<id>``."""
    records = _graph_records(ops, graph) if graph is not None else None
    cache: dict[tuple[Any, ...], tuple[RKernel, ...]] = {}
    rops: list[ROperator] = []
    names: list[str] = []
    for k, op in enumerate(ops):
        if records is not None and graph is not None:
            node, op_name = records[k]
            key: tuple[Any, ...] | None = node_signature(node, graph)
            label = node.label
        else:
            node = _operator_node(k, op)
            op_name, key, label = node.name, None, f"operator {op.name} ({op.family})"
        kernels = cache.get(key) if key is not None else None
        if kernels is None:
            found = list(candidates(op, vdevice))
            kernels = tuple(kern for kern in found if kern.resources.fits(vdevice.veu))
            if not kernels:
                why = (f"{len(found)} candidate(s) need more than a vEU offers ({vdevice.veu.threads} threads, "
                       f"{vdevice.veu.local_mem_bytes} bytes)" if found else "no rKernel implements it")
                raise ScheduleError(f"{label}: no rKernel can run it on vDevice '{vdevice.name}': {why}; "
                                    "choose another vDevice or add an rKernel for it")
            if key is not None:
                cache[key] = kernels
        rops.append(ROperator(k, node, kernels))
        names.append(op_name)
    preds = operator_predecessors(ops)
    if graph is not None:
        problem = problem_from_rops(name, rops, names, preds, vdevice, graph.value_info, graph.initializers)
    else:
        problem = problem_from_rops(name, rops, names, preds, vdevice)
    schedule: Schedule = get_policy(policy).schedule(problem)
    if check:
        verify(schedule)
    return schedule


def schedule_segments(groups: Sequence[Group[Op]], candidates: Candidates[Op], vdevice: VDevice, policy: str,
                      name: str, check: bool = False, graph: Graph | None = None) -> list[Schedule]:
    """One schedule per segment of ``groups`` (from :func:`rammer.lower.operator.split_at_host`),
    named ``{name}/segment{k}``; ``graph`` as for :func:`schedule_operators`."""
    segments = [g for g in groups if isinstance(g, list)]
    return [schedule_operators(ops, candidates, vdevice, policy, f"{name}/segment{k}", check, graph)
            for k, ops in enumerate(segments)]


@dataclass
class Ordered(Generic[Op]):
    """The ops in the walk order the schedules allow, and what each is certainly done after."""

    walk: list[Op]
    #: Per op of ``walk``: the bitmask of the ops (walk positions) certainly done before it starts.
    done_before: list[int]
    arena: ArenaPlan


def order_and_plan(groups: Sequence[Group[Op]], schedules: Sequence[Schedule], buffers: Sequence[PlannedBuffer],
                   keep: set[int], *, scratch_bytes: int = 0, aliases: Sequence[Alias] = (),
                   alignment: int | Mapping[str, int] = 64,
                   space_of: Callable[[PlannedBuffer], str] | None = None,
                   capacity: Mapping[str, int] | None = None, waves: Sequence[int] | None = None) -> Ordered[Op]:
    """Order every op by the schedules (vector clocks, :func:`rammer.schedule.schedule_order`) and
    place every buffer by that order (:func:`rammer.memory.plan_arena`): a dead buffer's memory is
    reused only once the schedule has certainly finished with it.

    ``waves``: per op of ``groups`` (in their order), the launch it runs in, for a backend that
    launches once per wave and orders nothing else (no barriers between a wave's blocks): an op is
    then certainly done before another only when its wave is earlier, so memory is reused across
    waves only."""
    walk, done_before = schedule_order(groups, schedules)
    if waves is not None:
        done_before = _done_in_earlier_waves(groups, walk, waves)
    arena = plan_arena(buffers, walk, keep, scratch_bytes, done_before, aliases=aliases, alignment=alignment,
                       space_of=space_of, capacity=capacity)
    return Ordered(walk, done_before, arena)


def _done_in_earlier_waves(groups: Sequence[Group[Op]], walk: Sequence[Op], waves: Sequence[int]) -> list[int]:
    # Per op of the walk, the bitmask (walk positions) of the ops in earlier waves.
    ops = [op for g in groups for op in (g if isinstance(g, list) else [g])]
    if len(waves) != len(ops):
        raise ScheduleError(f"{len(waves)} waves given for {len(ops)} operators")
    position = {id(op): k for k, op in enumerate(walk)}
    wave_of: dict[int, int] = {}
    by_wave: dict[int, int] = {}
    for op, wave in zip(ops, waves):
        wave_of[id(op)] = wave
        by_wave[wave] = by_wave.get(wave, 0) | (1 << position[id(op)])
    return [sum(mask for w, mask in by_wave.items() if w < wave_of[id(op)]) for op in walk]


def _written_bytes(writes: Sequence[tuple[int, int]], reads: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The byte ranges an op writes: its written buffers less the parts that are its own inputs placed in
    place inside them (an in-place Concat copies only the parts not already there, so the aliased parts
    are read by their producers' readers concurrently without a race).  Only a read range strictly
    inside a written one is taken out: an op reading and writing the same range (in place) keeps it."""
    out: list[tuple[int, int]] = []
    for start, size in writes:
        holes = sorted((ro, rn) for ro, rn in reads
                       if start <= ro and ro + rn <= start + size and (ro, rn) != (start, size) and rn > 0)
        at = start
        for ro, rn in holes:
            if ro > at:
                out.append((at, ro - at))
            at = max(at, ro + rn)
        if at < start + size:
            out.append((at, start + size - at))
    return tuple(out)


def row_program_steps(ops: Sequence[PipelineOp], schedule: Schedule, rows: Sequence[Sequence[tuple[RowWait, ...]]],
                      buffers: Sequence[PlannedBuffer]) -> list[list[Step]]:
    """The row programs of one segment (:func:`rammer.schedule.rows.row_waits`) in the core's program form
    (:mod:`rammer.schedule.programs`): every row, an rTask's or a wait's, is followed by a signal (a row
    counter bumped), a wait row waits for that many signals, and each rTask's call reads and writes the
    byte ranges of its op's placed buffers."""
    def span(b: int) -> tuple[int, int]:
        return (buffers[b].byte_offset, buffers[b].nbytes)

    ranges = [(tuple(span(b) for b in op.reads), _written_bytes([span(b) for b in op.writes],
                                                                 [span(b) for b in op.reads]))
              for op in ops]
    programs: list[list[Step]] = []
    for prog, waits in zip(schedule.programs, rows):
        steps: list[Step] = []
        for entry, entry_waits in zip(prog, waits):
            if entry < schedule.num_rtasks:
                i = int(schedule.rtask_op[entry])
                steps += [Call(ops[i].name, entry - schedule.ops[i].first_rtask, (), ranges[i][0], ranges[i][1], op=i),
                          Signal()]
            for w in entry_waits:
                steps += [Wait(w.veu, w.rows), Signal()]
        programs.append(steps)
    return programs


def check_row_races(groups: Sequence[Group[Op]], schedules: Sequence[Schedule],
                    rows: Sequence[Sequence[Sequence[tuple[RowWait, ...]]]], buffers: Sequence[PlannedBuffer]) -> None:
    """Raise :class:`rammer.schedule.programs.ProgramError` unless, in every segment, the row programs
    order every two rTasks of different ops on different vEUs that touch the same placed bytes (one
    writing): the schedule's barriers and the arena's reuse agree (:func:`check_races`).  Segments are
    separate launches, so nothing is checked across them."""
    segments = [g for g in groups if isinstance(g, list)]
    for ops, schedule, segment_rows in zip(segments, schedules, rows):
        check_races(row_program_steps(ops, schedule, segment_rows, buffers))


@dataclass
class LoweredProgram(Generic[Op]):
    """What :meth:`PipelineBackend.lower` returns."""

    #: The lowered operators in a valid run order (host ops included).
    ops: list[Op]
    #: Every buffer the ops name by id (``buffers[i].id == i``); the planner sets their offsets.
    buffers: list[Any]
    #: Buffers live to the end (the graph's outputs).
    keep: set[int]
    #: Tensor name -> buffer id, for the graph's inputs and outputs.
    tensors: dict[str, int] = field(default_factory=dict)
    #: Bytes every buffer is aligned to.
    alignment: int = 64
    #: Whatever else the backend's emitter needs.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScheduledProgram(Generic[Op]):
    """What :meth:`PipelineBackend.emit` is given: everything the core stages produced."""

    graph: Graph
    lowered: LoweredProgram[Op]
    vdevice: VDevice
    #: Segments and host ops in run order.
    groups: list[Group[Op]]
    #: One schedule per segment.
    schedules: list[Schedule]
    ordered: Ordered[Op]
    #: Per segment, per vEU, per program entry: ``()`` for an rTask, the row waits of a barrier.
    rows: list[list[list[tuple[RowWait, ...]]]]

    @property
    def arena(self) -> ArenaPlan:
        return self.ordered.arena

    def segments(self) -> list[list[Op]]:
        return [g for g in self.groups if isinstance(g, list)]


#: The keyword options :func:`compile_graph` itself reads.
PIPELINE_OPTIONS = frozenset({"policy", "vdevice"})


def compile_graph(backend: PipelineBackend, graph: Graph, options: Mapping[str, Any]) -> Executable:
    """Run the whole pipeline for ``backend`` (see the module docstring)."""
    check_options(backend.name, options, PIPELINE_OPTIONS | backend.extra_options)
    prepared = backend.prepare_graph(graph).graph
    lowered = backend.lower(prepared, options)
    vdevice = backend.vdevice(options.get("vdevice"))
    policy = str(options.get("policy") or "wavefront")
    groups: list[Group[Any]] = split_at_host(lowered.ops)
    schedules = schedule_segments(groups, backend.candidates, vdevice, policy, prepared.name, check=True)
    ordered: Ordered[Any] = order_and_plan(groups, schedules, lowered.buffers, lowered.keep,
                                           alignment=lowered.alignment)
    rows = [row_waits(s) for s in schedules]
    check_row_races(groups, schedules, rows, lowered.buffers)
    program = ScheduledProgram(prepared, lowered, vdevice, groups, schedules, ordered, rows)
    return backend.executable(backend.emit(program, options), options)


class PipelineBackend(Backend):
    """A backend that is only lowering, emitting and running: :meth:`compile` is
    :func:`compile_graph`.  Its rKernels come from the families plugins register for it
    (``rammer_register_rkernels``) unless :meth:`candidates` is overridden."""

    #: Keyword options the backend reads beyond :data:`PIPELINE_OPTIONS`.
    extra_options: frozenset[str] = frozenset()

    def compile(self, graph: Graph, options: Mapping[str, Any]) -> Executable:
        return compile_graph(self, graph, options)

    @abstractmethod
    def lower(self, graph: Graph, options: Mapping[str, Any]) -> LoweredProgram[Any]:
        """The graph as operators over buffers (host ops for what the backend cannot compile)."""

    def candidates(self, op: Any, vdevice: VDevice) -> Sequence[RKernel]:
        """rKernel candidates of one lowered operator: by default, every registered family's offer for
        the first node the operator covers (``op.nodes[0]``, in ``op.graph``)."""
        node: Node = op.nodes[0]
        return self.rkernels(node, op.graph, vdevice)

    @abstractmethod
    def emit(self, program: ScheduledProgram[Any], options: Mapping[str, Any]) -> Any:
        """The backend's program (source, tables...) from the scheduled, placed operators."""

    @abstractmethod
    def executable(self, emitted: Any, options: Mapping[str, Any]) -> Executable:
        """What runs ``emit``'s program."""
