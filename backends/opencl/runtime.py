"""Running a compiled program on an OpenCL device through pyopencl: one launch per run.

The arena (constants uploaded once), the per-block counters and the program are created at
compile time; a run copies the inputs into the arena, launches the persistent kernel once with
the next epoch (the counters are never reset between runs) and reads the outputs back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rammer.backends.gpu.compiler import KERNEL_NAME, GpuProgram
from rammer.backends.gpu.entry import has_barrier
from rammer.backends.gpu.guards import check_guards
from rammer.backends.gpu.lower_ints import ArenaFeeds, ArenaOutputs
from rammer.codegen import kernel_ir as ir
from rammer.errors import BackendUnavailableError, RammerError

from .codegen import render
from .device import opencl_device

__all__ = ["OpenCLExecutable"]


#: Build options on PoCL's CPU device when the optimiser is not worth it; other devices get their
#: driver's defaults.  ``RAMMER_OPENCL_BUILD_OPTIONS`` overrides both (``""``: the defaults everywhere).
#:
#: PoCL's optimiser makes a run of a full-size program 5-10x cheaper (ResNet-18 224 px: 43 -> 4.2 s
#: of CPU per run), but its kernel compiler (the work-group function built at the first launch; most
#: of it LLVM's InstCombine) grew about 4x with every rKernel that has block barriers (about 2x since
#: s11-gpu's loop order, below), since all of them are inlined into the one persistent kernel:
#: MobileViT's gemm16, conv_igemm, layernorm_rows and
#: softmax_rows alone took 0.6-0.9 s of CPU each, two of them 1.6-3.2 s, three 11 s, four 51 s,
#: five over 100 s (PoCL 3.1, its cache off); rKernels without barriers cost about 0.2 s each and do
#: not compound.  Unoptimised, the build takes about a second whatever the program.  So a program is
#: built optimised when the optimiser's estimated cost (:func:`optimiser_seconds`) is below
#: :data:`POCL_OPTIMISE_FRACTION` of one unoptimised run's (:func:`unoptimised_seconds`): its first
#: run is then cheaper than unoptimised, and every later run 5-10x cheaper.
#:
#: Refitted in s10-gpu (AMD EPYC Zen 3, 2 cores, PoCL 3.1, load 9-14; docs/benchmarks.md): the
#: work-group function of the real CNNs with 3 barrier rKernels took 39-61 s of CPU; the register-tiled
#: conv rKernels run an unoptimised FLOP in about half the CPU of the others (resnet50: 43.8 s of CPU
#: for 9.7 GFLOP of conv rTask work and 19k rTasks; estimated 43.4 s).
#:
#: Refitted again in s11-gpu (same machine, load 5-9), after the entry kernel put the barrier
#: rKernels' loops last (:func:`rammer.backends.gpu.entry.barriers_last`, which halved PoCL's cost on
#: some programs): the optimiser's CPU grows with the size of the program text and about 2x (not 4x)
#: per barrier rKernel.  Measured (optimised work-group function, CPU s; rendered OpenCL, thousands of
#: characters; barrier rKernels): zfnet512 33.2 (21.4k, 3), conv-bilstm-asr 28.9 (22.0k, 3), resnet50
#: 43.4 (27.9k, 3), alexnet 29.6 (20.0k, 3), bert 27.6 (28.6k, 3), densenet121 9.7 (19.3k, 2),
#: ocr-det-640 41.9 (47.2k, 2; its 16 plain rKernels are what the s10 rule's 0.2 s each missed),
#: torch-yolo 6.8 (17.8k, 1).  Least squares in log space: 0.37 s per 1,000 characters x 1.9 per barrier
#: rKernel after the first (rounded to 2); within +-50% of every point above.
POCL_BUILD_OPTIONS = "-cl-opt-disable"
POCL_OPTIMISE_FRACTION = 0.75
#: The optimiser's cost model (CPU seconds, fitted to the figures above): per character of the
#: program's OpenCL text with one barrier rKernel, and the factor per further barrier rKernel (a program
#: without one: half the one-barrier rate).
POCL_OPTIMISER_S_PER_CHAR = 0.37e-3
POCL_OPTIMISER_GROWTH_PER_BARRIER_KERNEL = 2.0
#: The unoptimised run's cost model: CPU seconds per floating-point operation and per rTask, fitted
#: at full size (ResNet-18 224 px, 4.0 GFLOP, 14,313 rTasks: 34-43 s per run; BERT seq 128, 2.9 GFLOP,
#: 33,350 rTasks: 27 s; MobileViT 256 px, 1.0 GFLOP, 87,916 rTasks: 22 s) ...
POCL_UNOPTIMISED_S_PER_FLOP = 1 / 1.15e8
POCL_UNOPTIMISED_S_PER_RTASK = 1.5e-4
#: ... and the FLOPs of the register-tiled rKernel families (a loaded value feeds several
#: multiply-adds), fitted to resnet50 above (s10-gpu; conv-bilstm-asr's LSTM GEMMs keep the rate above:
#: at that rate its unoptimised run, 65.9 s of CPU, was estimated at 41.6 s) ...
POCL_UNOPTIMISED_S_PER_TILED_FLOP = 1 / 2.4e8
POCL_TILED_FAMILIES = frozenset({"gpu.conv_igemm", "gpu.conv_transpose"})
#: ... and the rTasks of families that only store (a fill: no load, no index arithmetic), which cost
#: next to nothing against the per-rTask figure above: the unoptimised runs of zfnet512 (294,912 fill
#: rTasks of 311k) and alexnet (147,456 of 154k), 38.2 and 21.7 s of CPU, were estimated at 83.4 and
#: 45.3 s with them, 39.2 and 23.2 s without (s11-gpu).
POCL_STORE_ONLY_FAMILIES = frozenset({"gpu.fill"})


def barrier_rkernels(kernels: Sequence[ir.Kernel]) -> int:
    """How many of ``kernels``' device functions (the rKernels) contain a block barrier."""
    return sum(1 for k in kernels if k.device and has_barrier(k))


def optimiser_seconds(kernels: Sequence[ir.Kernel], source_chars: int) -> float:
    """The estimated CPU seconds PoCL's optimiser spends on the program of ``kernels`` whose OpenCL
    text is ``source_chars`` characters long."""
    growth = POCL_OPTIMISER_GROWTH_PER_BARRIER_KERNEL ** (barrier_rkernels(kernels) - 1)
    return POCL_OPTIMISER_S_PER_CHAR * source_chars * growth


def unoptimised_seconds(program: GpuProgram) -> float:
    """The estimated CPU seconds of one run of ``program`` built with ``-cl-opt-disable`` on PoCL."""
    ops = getattr(program.schedule, "ops", ())
    tiled = float(sum(op.kernel.flops * op.kernel.num_rtasks for op in ops
                      if getattr(op.kernel, "family", "") in POCL_TILED_FAMILIES))
    flops = float(sum(op.kernel.flops * op.kernel.num_rtasks for op in ops)) - tiled
    rtasks = sum(op.kernel.num_rtasks for op in ops
                 if getattr(op.kernel, "family", "") not in POCL_STORE_ONLY_FAMILIES)
    return (flops * POCL_UNOPTIMISED_S_PER_FLOP + tiled * POCL_UNOPTIMISED_S_PER_TILED_FLOP
            + rtasks * POCL_UNOPTIMISED_S_PER_RTASK)


def build_options(device: Any, program: GpuProgram | None = None, source: str | None = None) -> str:
    """The options ``program`` (its OpenCL text ``source``, rendered when not given) is built with on
    ``device`` (see :data:`POCL_BUILD_OPTIONS`); without a program, PoCL's CPU device builds unoptimised."""
    chosen = os.environ.get("RAMMER_OPENCL_BUILD_OPTIONS")
    if chosen is not None:
        return chosen
    cpu = bool(device.type & 2)  # CL_DEVICE_TYPE_CPU
    if not (cpu and "Portable Computing Language" in device.platform.name):
        return ""
    if program is None:
        return POCL_BUILD_OPTIONS
    chars = len(source if source is not None else render(program))
    if optimiser_seconds(program.kernels, chars) < POCL_OPTIMISE_FRACTION * unoptimised_seconds(program):
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
        self.build_options = build_options(device, program, self.source)
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
            for name in [*p.outputs, *(g.tensor for g in p.guards)]:
                off, shape = p.tensors[name]
                arr = np.empty(shape, np.float32)
                if arr.size:
                    cl.enqueue_copy(self.queue, arr, self.arena, src_offset=4 * off)
                out[name] = arr
            self.queue.finish()
        check_guards(p.guards, out)  # an If's unreachable branch selected at run time is its error
        return {name: self.from_arena(name, out[name]) for name in p.outputs}

