"""Running a compiled program on an OpenCL device through pyopencl: one launch per run.

The arena (constants uploaded once), the per-block counters and the program are created at
compile time; a run copies the inputs into the arena, launches the persistent kernel once with
the next epoch (the counters are never reset between runs) and reads the outputs back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.backends.gpu.compiler import KERNEL_NAME, GpuProgram
from rammer.backends.gpu.lower_ints import ArenaFeeds, ArenaOutputs
from rammer.errors import BackendUnavailableError, RammerError

from .codegen import render
from .device import opencl_device

__all__ = ["OpenCLExecutable"]


#: Build options on PoCL's CPU device for a program with little work: its optimiser spent 20-35 s
#: on the first launch of a small fuzz program (one kernel with every rKernel of the model inlined)
#: and under 2 s with ``-cl-opt-disable``.  Other devices get their driver's defaults, and
#: ``RAMMER_OPENCL_BUILD_OPTIONS`` overrides both (``""``: the defaults everywhere).
POCL_BUILD_OPTIONS = "-cl-opt-disable"
#: PoCL's CPU device builds a program with its optimiser when one unoptimised run is estimated to
#: cost more than this fraction of the optimiser's time: the first run then costs at most about 1.5x
#: what the unoptimised build would have given, and every later run is 5-10x cheaper.  The figures,
#: CPU seconds measured at full size here (2 cores, PoCL 3.1): unoptimised, ResNet-18 224 px
#: (4.0 GFLOP, 14,313 rTasks) 34-43 s per run, BERT seq 128 (2.9 GFLOP, 33,350 rTasks) 27 s,
#: MobileViT 256 px (1.0 GFLOP, 87,916 rTasks) 22 s; optimised 3.4-4.2 s (ResNet-18) and 3.9 s (BERT).
POCL_OPTIMISE_FRACTION = 0.5
#: The unoptimised cost model those runs fit: seconds per floating-point operation and per rTask.
POCL_UNOPTIMISED_S_PER_FLOP = 1 / 1.15e8
POCL_UNOPTIMISED_S_PER_RTASK = 1.5e-4
#: PoCL's optimiser on the one kernel that inlines every rKernel: about 2.2 s of CPU per distinct rKernel
#: (ResNet-18, 7 rKernels: 15.5 s; BERT, 13 rKernels: about 25 s).
POCL_OPTIMISER_S_PER_KERNEL = 2.2


def program_flops(program: Any) -> float:
    """The floating-point work of one run of ``program``, from its schedule's rKernel costs."""
    return float(sum(op.kernel.flops * op.kernel.num_rtasks for op in getattr(program.schedule, "ops", ())))


def unoptimised_seconds(program: Any) -> float:
    """The estimated CPU seconds of one run of ``program`` built with ``-cl-opt-disable`` on PoCL."""
    rtasks = sum(op.kernel.num_rtasks for op in getattr(program.schedule, "ops", ()))
    return program_flops(program) * POCL_UNOPTIMISED_S_PER_FLOP + rtasks * POCL_UNOPTIMISED_S_PER_RTASK


def build_options(device: Any, program: Any = None) -> str:
    """The options ``program`` is built with on ``device`` (see :data:`POCL_BUILD_OPTIONS` and
    :data:`POCL_OPTIMISE_FRACTION`)."""
    chosen = os.environ.get("RAMMER_OPENCL_BUILD_OPTIONS")
    if chosen is not None:
        return chosen
    cpu = bool(device.type & 2)  # CL_DEVICE_TYPE_CPU
    if not (cpu and "Portable Computing Language" in device.platform.name):
        return ""
    if program is not None:
        optimiser = POCL_OPTIMISER_S_PER_KERNEL * max(1, len(program.report.get("kernels", ())))
        if unoptimised_seconds(program) > POCL_OPTIMISE_FRACTION * optimiser:
            return ""
    return POCL_BUILD_OPTIONS


class OpenCLExecutable:
    def __init__(self, program: GpuProgram) -> None:
        self.program = program
        self.schedule = program.schedule
        self.source = render(program)
        self.sources = {f"{program.graph_name or 'model'}.cl": self.source}
        cl, device, why = opencl_device()
        if cl is None:
            raise BackendUnavailableError(f"opencl: {why}")
        if program.blocks > device.max_compute_units:
            raise RammerError(f"opencl: the program has {program.blocks} persistent blocks but {device.name.strip()} "
                              f"has {device.max_compute_units} compute units; spinning blocks must all be resident")
        self.cl, self.device = cl, device
        self.report: dict[str, Any] = {"device": device.name.strip(), **program.report}
        self.ctx = cl.Context([device])
        self.queue = cl.CommandQueue(self.ctx)
        self.build_options = build_options(device, program)
        self.report["build_options"] = self.build_options
        self.kernel = cl.Kernel(cl.Program(self.ctx, self.source).build(options=self.build_options), KERNEL_NAME)
        wg = self.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)
        if wg < program.block_threads:
            raise RammerError(f"opencl: {device.name.strip()} runs at most {wg} work-items per group for this "
                              f"program; it needs {program.block_threads}")
        mf = cl.mem_flags
        self.arena = cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=program.constant_arena())
        self.counters = cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR,
                                  hostbuf=np.zeros(max(program.blocks, 1), np.int32))
        self.tables = [cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=t)
                       for t in program.tables.values()]
        self.max_signals = max(1, program.report.get("signals", 0))
        self.epoch = 0
        self.lock = threading.Lock()
        self.to_arena = ArenaFeeds(program)  # integer/bool feeds as exact float32 values, checked
        self.from_arena = ArenaOutputs(program)  # integer/bool outputs back in their dtype, checked

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cl, p = self.cl, self.program
        with self.lock:
            if (self.epoch + 1) * self.max_signals >= 2 ** 30:  # reset before the int counters overflow
                cl.enqueue_fill_buffer(self.queue, self.counters, np.int32(0), 0, 4 * max(p.blocks, 1))
                self.epoch = 0
            for name in p.inputs:
                off, shape = p.tensors[name]
                data = self.to_arena(name, feeds[name])
                if data.size:
                    cl.enqueue_copy(self.queue, self.arena, data, dst_offset=4 * off)
            if p.mode == "wave":  # one launch per wave; the in-order queue orders them
                for w in range(p.launches):
                    self.kernel(self.queue, (p.blocks * p.block_threads,), (p.block_threads,), self.arena,
                                self.counters, np.int32(w), *self.tables)
            else:
                self.kernel(self.queue, (p.blocks * p.block_threads,), (p.block_threads,), self.arena,
                            self.counters, np.int32(self.epoch), *self.tables)
            self.epoch += 1
            out: dict[str, np.ndarray] = {}
            for name in p.outputs:
                off, shape = p.tensors[name]
                arr = np.empty(shape, np.float32)
                if arr.size:
                    cl.enqueue_copy(self.queue, arr, self.arena, src_offset=4 * off)
                out[name] = arr
            self.queue.finish()
        return {name: self.from_arena(name, arr) for name, arr in out.items()}

