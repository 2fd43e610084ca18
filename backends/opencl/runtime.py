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


#: Build options on PoCL's CPU device: its optimiser spent 20-35 s on the first launch of a
#: small fuzz program (one kernel with every rKernel of the model inlined) and under 2 s with
#: ``-cl-opt-disable``; other devices get their driver's defaults.  ``RAMMER_OPENCL_BUILD_OPTIONS``
#: overrides both (``""``: the defaults everywhere).
#:
#: Not chosen by the program's size: PoCL's optimiser made a run of a full-size program 5-10x cheaper
#: (ResNet-18 224 px: 43 -> 4.2 s of CPU per run; BERT seq 128: 27 -> 3.9 s) and its first run cheaper
#: (53 -> 21 s), but on MobileViT 256 px it spent 336 s of CPU building the program (12 rKernels;
#: ResNet-18's 7 took about 15 s), so its cost cannot be told from the program's size; a first run
#: must stay under a minute (docs/gpu.md, "Third round").
POCL_BUILD_OPTIONS = "-cl-opt-disable"


def build_options(device: Any) -> str:
    """The options the program is built with on ``device`` (see :data:`POCL_BUILD_OPTIONS`)."""
    chosen = os.environ.get("RAMMER_OPENCL_BUILD_OPTIONS")
    if chosen is not None:
        return chosen
    cpu = bool(device.type & 2)  # CL_DEVICE_TYPE_CPU
    return POCL_BUILD_OPTIONS if cpu and "Portable Computing Language" in device.platform.name else ""


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
        self.build_options = build_options(device)
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

