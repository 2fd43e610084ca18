"""The CPU backend's compile pipeline: graph -> Program (+ report, + emitted files).

lower (views, fusion, CpuOps) -> cut into segments at host ops -> the core
pipeline's middle end (:mod:`rammer.pipeline`: schedule each segment with a
policy, order by the schedules, plan the arena by that order) -> task tables
-> driver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rammer import progress
from rammer.ir import Graph, outer_names
from rammer.lower.batching import DEFAULT_BATCH_ROWS
from rammer.lower.operator import split_at_host
from rammer.passes.pipeline import verify_requested
from rammer.pipeline import check_row_races, order_and_plan, schedule_segments
from rammer.schedule import Schedule
from rammer.schedule.rows import row_waits

from .codegen import Tables, build_tables, program_source
from .compiled import CompiledSegment, HostStep, Program, view_placement
from .kernels import MAY_FAIL
from .lowering import Lowered, Lowerer
from .ops import CostModel, CpuOp
from .planner import ALIGN, cpu_aliases
from .scheduling import VeuChoice, available_cores, choose_veus, cpu_candidates, cpu_vdevice, default_veus


@dataclass
class Compiled:
    program: Program
    lowered: Lowered
    schedules: list[Schedule]
    tables: Tables
    source: str


def compile_program(graph: Graph, num_veus: int | None = None, policy: str = "wavefront",
                    pin: bool = False, cost: CostModel | None = None, batch_rows: int = DEFAULT_BATCH_ROWS) -> Compiled:
    """Compile ``graph`` for ``num_veus`` vEUs; with None, for as many as the cost model finds pay
    (:func:`.scheduling.choose_veus`: one vEU when the work is too small for the barriers and the
    worker launch a second vEU costs, else one per core this process may use)."""
    t0 = time.perf_counter()
    cost = cost or CostModel()
    cores = available_cores()
    n = int(num_veus or default_veus())
    progress.stage("lowering")
    lowered = Lowerer(graph, cost, batch_rows).run()
    t_lower = time.perf_counter()

    # Segments: runs of compiled ops between host ops.
    groups: list[list[CpuOp] | CpuOp] = split_at_host(lowered.ops)

    # Schedule first: the memory planner reuses a buffer's memory once the schedule has
    # certainly finished with it (ordering.py), not only once every op graph order has.
    progress.stage("scheduling")
    vdevice = cpu_vdevice(n, cost)
    seg_ops = [g for g in groups if isinstance(g, list)]
    candidates = cpu_candidates("cpu", graph)
    schedules = schedule_segments(groups, candidates, vdevice, policy, graph.name)
    choice: VeuChoice | None = None
    if num_veus is None and n > 1:  # a count the caller gave is kept (tests of multi-vEU programs rely on it)
        choice = choose_veus(seg_ops, schedules, cost)
        if choice.veus != n:
            n = choice.veus
            schedules = schedule_segments(groups, candidates, cpu_vdevice(n, cost), policy, graph.name)
    t_sched = time.perf_counter()

    keep = {lowered.views[t.name].buffer for t in graph.outputs if t.name in lowered.views}
    progress.stage("planning memory")
    arena = order_and_plan(groups, schedules, lowered.buffers, keep, aliases=cpu_aliases(lowered.ops, lowered.buffers),
                           alignment=ALIGN).arena
    t_plan = time.perf_counter()
    progress.stage("writing task tables")
    if verify_requested():  # tests: the barriers order every reuse of the arena the planner made
        check_row_races(groups, schedules, [row_waits(s) for s in schedules], lowered.buffers)
    tables = build_tables(seg_ops, schedules, lowered.buffers, n, arena.scratch_offset)
    total = arena.scratch_offset + tables.scratch_bytes + 64
    t_tables = time.perf_counter()

    steps: list[Any] = []
    node_index = {id(nd): i for i, nd in enumerate(graph.nodes)}
    seg_iter = iter(tables.segments)
    for g in groups:
        if isinstance(g, list):
            seg = next(seg_iter)
            steps.append(CompiledSegment(seg.starts, seg.ends))
        else:
            steps.append(HostStep(node_index[id(g.nodes[0])], g.host_reason))

    const_blob = np.zeros(arena.const_bytes, dtype=np.uint8)
    for b in lowered.buffers:
        if b.kind == "const":
            data = np.ascontiguousarray(b.data).reshape(-1)
            if b.dtype == "bool":
                data = data.astype(np.uint8)
            raw = data.view(np.uint8)
            const_blob[b.byte_offset:b.byte_offset + raw.size] = raw

    # Tensors the runtime touches by name: graph inputs/outputs and host-op operands, including
    # the outer-scope tensors a host op's subgraphs capture.
    wanted = {t.name for t in graph.inputs} | {t.name for t in graph.outputs}
    for op in lowered.ops:
        if op.host:
            wanted |= {x for x in op.nodes[0].inputs if x} | {x for x in op.nodes[0].outputs if x}
            wanted |= outer_names(op.nodes[0])
    tensors = {}
    for name in wanted:
        v = lowered.views.get(name)
        if v is not None:
            tensors[name] = view_placement(v, lowered.buffers[v.buffer].byte_offset)

    report = _report(graph, lowered, schedules, tables, arena, policy, n, {
        "lower": t_lower - t0, "schedule": t_sched - t_lower, "plan": t_plan - t_sched,
        "tables": t_tables - t_plan})
    if choice is not None:
        report["veu_choice"] = choice.to_dict()
    report["trace_map"] = _trace_map(graph, lowered, seg_ops, tables)
    program = Program(
        arena_bytes=total, const_bytes=arena.const_bytes, const_blob=const_blob,
        T=tables.T, X=tables.X, R=tables.R, kernel_names=tables.kernel_names, steps=steps, tensors=tensors,
        host_tensors=sorted(lowered.host_tensors), num_veus=n,
        cores=[cores[v % len(cores)] for v in range(n)] if pin else [-1] * n, report=report)
    return Compiled(program, lowered, schedules, tables, program_source(program))


def _trace_map(graph: Graph, lowered: Lowered, seg_ops: list[list[CpuOp]], tables: Tables) -> dict[str, Any]:
    """Which op every task row runs (-1: a barrier row), and each op's name, family and
    nodes: what a run-time trace names its slices by (``CpuExecutable.trace_run``) and what a
    kernel's run-time error names (:mod:`.faults`).  An op with rows of a kernel that may fail
    (``kernels.MAY_FAIL``) also keeps its first node's op type, input names and input shapes
    ("op_type", "inputs", "input_shapes"), for that error's message."""
    index = {id(op): j for j, op in enumerate(lowered.ops)}
    row_op = [-1] * int(tables.T.shape[0])
    may_fail = {k for k, name in enumerate(tables.kernel_names) if name in MAY_FAIL}
    failing: set[int] = set()
    for seg, ops in zip(tables.segments, seg_ops):
        for row, i in seg.row_op.items():
            row_op[row] = index[id(ops[i])]
            if int(tables.T[row, 0]) in may_fail:
                failing.add(row_op[row])
    entries = []
    for j, op in enumerate(lowered.ops):
        entry: dict[str, Any] = {"name": op.name, "family": op.family, "nodes": [n.name for n in op.nodes]}
        if j in failing and op.nodes:
            node = op.nodes[0]
            infos = [graph.value_info.get(name) for name in node.inputs]
            entry.update(op_type=node.op_type, inputs=list(node.inputs),
                         input_shapes=[list(t.shape) if t is not None else None for t in infos])
        entries.append(entry)
    return {"row_op": row_op, "ops": entries}


def _report(graph: Graph, lowered: Lowered, schedules: list[Schedule], tables: Tables, arena, policy: str,
            num_veus: int, times: dict[str, float]) -> dict[str, Any]:
    families: dict[str, int] = {}
    for op in lowered.ops:
        families[op.family] = families.get(op.family, 0) + 1
    compiled_nodes = sum(len(op.nodes) for op in lowered.ops if not op.host)
    return {
        "model": graph.name,
        "inputs": [t.name for t in graph.inputs],
        "outputs": [t.name for t in graph.outputs],
        "nodes": len(graph.nodes),
        "policy": policy,
        "veus": num_veus,
        "cpu_ops": len(lowered.ops),
        "ops_by_family": dict(sorted(families.items())),
        "fused_groups": lowered.fused_groups,
        "compiled_nodes": compiled_nodes,
        "view_nodes": len(graph.nodes) - compiled_nodes - len(lowered.fallbacks) - len(lowered.control),
        "fallbacks": [{"node": n.name, "op": n.op_type, "reason": r} for n, r in lowered.fallbacks],
        # host steps by design (an If's branch chosen at run time), not ops the backend lacks
        "control_flow": [{"node": n.name, "op": n.op_type, "reason": r} for n, r in lowered.control],
        "segments": len(schedules),
        "rtasks": sum(s.num_rtasks for s in schedules),
        "barrier_rows": sum(seg.barrier_rows for seg in tables.segments),
        "task_rows": int(tables.stats["rows"]),
        "kernels": tables.kernel_names[1:],
        "arena": {"constant_bytes": arena.const_bytes, "peak_intermediate_bytes": arena.dynamic_bytes,
                  "without_reuse_bytes": arena.unshared_bytes, "scratch_bytes": tables.scratch_bytes},
        "compile_seconds": {k: round(v, 4) for k, v in times.items()},
    }
