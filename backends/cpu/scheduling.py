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
from dataclasses import dataclass, replace
from typing import Any

from rammer.ir import Graph
from rammer.pipeline import plugin_rkernel_families, with_plugin_kernels
from rammer.rtask import RKernel, RTaskResources
from rammer.schedule import Schedule
from rammer.schedule.simulate import simulate
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


# -- how many vEUs a program's work pays for -------------------------------------------------------

#: What one barrier row costs a vEU that really waits at it for another vEU's rTasks (us of the cost
#: model's estimates), on top of the simulated schedule's ``barrier_us``: the waiting thread spins,
#: then yields, and the vEU it waits for runs on another core whose worker may have been descheduled.
#: Fitted by ``ci/bench_small_programs.py`` (GEMM chains with 2 barriers at 8-64 rows: 7-9 us per
#: barrier at load 10 on 2 cores; docs/benchmarks.md, "Small programs on one vEU").
BARRIER_WAIT_US = 10.0
#: What starting and joining the other vEUs' workers costs one launch of a compiled segment (us of the
#: estimates).  On the grid at load 10, elementwise chains with no barrier paid on 2 vEUs from 5 us of
#: estimated work; but the join is a wait on the other worker too, and at load 15-18 a 2-vEU run of a
#: 40 us program (random-forest-rows8 through the tree rKernel, one barrier) took 30-52 ms median
#: against 0.11 ms on one vEU: a descheduled worker costs a scheduler time slice.  50 us keeps
#: programs of less than about 0.1 ms of estimated work on one vEU, at the price of at most about
#: 50 us on a quiet machine.
LAUNCH_WAKE_US = 50.0


@dataclass(frozen=True)
class VeuChoice:
    """The cost model's view of a program on ``offered`` vEUs against one vEU, and the count it
    chose: one vEU unless the schedule on ``offered`` saves more estimated time than its barriers
    and worker launches cost (``gain_us > sync_us``)."""

    offered: int
    veus: int
    #: Estimated time of every compiled op on one vEU (its one-rTask tiling), summed.
    work_us: float
    #: Simulated makespan of the ``offered``-vEU schedules, summed over segments.
    span_us: float
    #: Barrier rows the busiest vEU of each segment walks, summed over segments.
    barriers: int
    segments: int

    @property
    def gain_us(self) -> float:
        return self.work_us - self.span_us

    @property
    def sync_us(self) -> float:
        return self.barriers * BARRIER_WAIT_US + self.segments * LAUNCH_WAKE_US

    def to_dict(self) -> dict[str, Any]:
        return {"offered": self.offered, "veus": self.veus, "work_us": round(self.work_us, 2),
                "span_us": round(self.span_us, 2), "barriers": self.barriers, "segments": self.segments,
                "gain_us": round(self.gain_us, 2), "sync_us": round(self.sync_us, 2)}


def choose_veus(segments: Sequence[Sequence[CpuOp]], schedules: Sequence[Schedule], cost: CostModel) -> VeuChoice:
    """One vEU or all of ``schedules``' vEUs, from the cost model: the multi-vEU schedule pays only
    when the time it saves over running every op on one vEU (work minus simulated makespan) exceeds
    what its cross-vEU synchronisation costs (barrier rows of the busiest vEU x :data:`BARRIER_WAIT_US`
    plus one worker launch per segment).  A program of a few tens of microseconds of work (a scaler +
    linear model, a small tree ensemble over a few rows) thus runs on one vEU, and nothing waits on a
    second worker that another process may have descheduled."""
    offered = max((s.vdevice.num_veus for s in schedules), default=1)
    one = replace(cost.vdevice, num_veus=1)
    work = sum(op.task_us(1, one) for ops in segments for op in ops if not op.host)
    span = sum(simulate(s).makespan_us for s in schedules)
    barriers = 0
    for s in schedules:
        nr = s.num_rtasks
        barriers += max((sum(1 for e in prog if e >= nr) for prog in s.programs), default=0)
    busy = [s for s in schedules if s.num_rtasks]
    choice = VeuChoice(offered, offered, work, span, barriers, len(busy))
    if offered > 1 and choice.gain_us <= choice.sync_us:
        return replace(choice, veus=1)
    return choice
