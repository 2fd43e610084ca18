"""Scheduling the CPU ops of one segment with rammer's policies.

The ops of a compiled segment become the nodes of a small IR graph (one
node per :class:`CpuOp`, reading and writing tensors named after arena
buffers), their tilings become :class:`~rammer.rtask.RKernel` candidates with
this machine's costs, and a registered policy (``wavefront``, ``op-by-op``...)
places the rTasks on the vEUs of the local CPU's vDevice.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from rammer.ir import Graph, Node, TensorInfo
from rammer.rtask import RKernel, RTaskResources
from rammer.schedule import Schedule, get_policy
from rammer.schedule.problem import build_problem
from rammer.vdevice import VDevice

from .ops import CostModel, CpuOp


def available_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def default_veus() -> int:
    """One vEU per core this process may use, but no more than numba's thread
    count (so ``NUMBA_NUM_THREADS`` / ``numba.set_num_threads`` limit it)."""
    import numba  # lazy: the backend's vDevice and kernel candidates load without numba

    return max(1, min(len(available_cores()), numba.get_num_threads()))


def cpu_vdevice(num_veus: int | None = None, cost: CostModel | None = None) -> VDevice:
    """The local CPU as a vDevice: the ``cpu`` preset (``cost.vdevice``) with one vEU per core
    this process may use (or ``num_veus``)."""
    cost = cost or CostModel()
    n = num_veus or default_veus()
    return replace(cost.vdevice, num_veus=n,
                   description=f"this machine's CPU: {n} vEUs, each a numba worker thread pinned to a core")


def segment_graph(ops: list[CpuOp], name: str) -> Graph:
    """The ops as an IR graph the scheduler understands (tensors = buffers)."""
    written = {b for op in ops for b in op.writes}
    value_info: dict[str, TensorInfo] = {}
    inputs: dict[str, TensorInfo] = {}
    nodes = []
    for k, op in enumerate(ops):
        reads = [f"b{b}" for b in op.reads]
        writes = [f"b{b}" for b in op.writes]
        for t in reads + writes:
            value_info.setdefault(t, TensorInfo(t, "float32", (1,)))
        for b in op.reads:
            if b not in written:
                inputs[f"b{b}"] = value_info[f"b{b}"]
        nodes.append(Node(f"Cpu_{op.family}", reads, writes, name=f"{k}:{op.name}", domain="rammer.cpu",
                          attrs={"cpu_op": k}))
    outputs = [value_info[f"b{b}"] for b in sorted(written)]
    return Graph(name, tuple(inputs.values()), tuple(outputs), tuple(nodes), {}, value_info, {"": 17})


def kernel_candidates(ops: list[CpuOp]):
    """``candidates(node, graph, vdevice)`` for :func:`build_problem`, costed for ``vdevice``."""
    def candidates(node: Node, graph: Graph, vdevice: VDevice) -> list[RKernel]:
        op = ops[int(node.attr("cpu_op"))]
        out = []
        for n, parts in op.tilings(vdevice.num_veus).items():
            out.append(RKernel(
                family=f"cpu.{op.family}", params={"tasks": n}, num_rtasks=n,
                duration_us=op.task_us(n, vdevice),
                resources=RTaskResources(1, op.scratch * 4),
                flops=op.flops / n, bytes=op.nbytes / n,
            ))
        return out
    return candidates


def schedule_segment(ops: list[CpuOp], vdevice: VDevice, policy: str, cost: CostModel | None, name: str) -> Schedule:
    """Schedule one segment's ops on ``vdevice`` with ``policy``.  The rTasks are costed by
    ``vdevice``'s figures (``cpu_vdevice(n, cost)`` carries ``cost``'s)."""
    graph = segment_graph(ops, name)
    problem = build_problem(graph, vdevice, candidates=kernel_candidates(ops))
    return get_policy(policy).schedule(problem)


def describe(schedule: Schedule) -> dict[str, Any]:
    return schedule.to_dict()
