"""Scheduling the CPU ops of one segment with rammer's policies.

The ops of a compiled segment go to the core's scheduler as they are
(:func:`rammer.pipeline.schedule_segments` with :func:`op_candidates`): their tilings become
:class:`~rammer.rtask.RKernel` candidates with this machine's costs, and a
registered policy (``wavefront``, ``op-by-op``...) places the rTasks on the
vEUs of the local CPU's vDevice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rammer.ir import Graph
from rammer.pipeline import plugin_rkernel_families, with_plugin_kernels
from rammer.rtask import RKernel, RTaskResources
from rammer.schedule import Schedule
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


def op_candidates(op: CpuOp, vdevice: VDevice) -> list[RKernel]:
    """The rKernels of one op for :func:`rammer.pipeline.schedule_operators`: one per tiling, costed
    for ``vdevice``."""
    return [RKernel(family=f"cpu.{op.family}", params={"tasks": n}, num_rtasks=n,
                    duration_us=op.task_us(n, vdevice), resources=RTaskResources(1, op.scratch * 4),
                    flops=op.flops / n, bytes=op.nbytes / n)
            for n in op.tilings(vdevice.num_veus)]


def cpu_candidates(backend_name: str, graph: Graph) -> Callable[[CpuOp, VDevice], Sequence[RKernel]]:
    """:func:`op_candidates` plus the rKernels plugins register for the cpu (``rammer_register_rkernels``)
    for an op of one node of ``graph``, where the op has a tiling into that many rTasks: the cpu runs
    that tiling, and the plugin's figures cost it (a profiled duration, say)."""
    families = plugin_rkernel_families(backend_name)

    def runnable(op: CpuOp, kernel: RKernel, vdevice: VDevice) -> bool:
        return kernel.num_rtasks in op.tilings(vdevice.num_veus)  # the tilings codegen picks from

    return with_plugin_kernels(op_candidates, families, graph, runnable)


def describe(schedule: Schedule) -> dict[str, Any]:
    return schedule.to_dict()
