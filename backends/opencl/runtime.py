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
#: of it LLVM's InstCombine) grows about 4x with every rKernel that has block barriers, since all of
#: them are inlined into the one persistent kernel: MobileViT's gemm16, conv_igemm, layernorm_rows and
#: softmax_rows alone took 0.6-0.9 s of CPU each, two of them 1.6-3.2 s, three 11 s, four 51 s,
#: five over 100 s (PoCL 3.1, its cache off); rKernels without barriers cost about 0.2 s each and do
#: not compound.  Unoptimised, the build takes about a second whatever the program.  So a program is
#: built optimised when the optimiser's estimated cost (:func:`optimiser_seconds`) is below
#: :data:`POCL_OPTIMISE_FRACTION` of one unoptimised run's (:func:`unoptimised_seconds`): its first
#: run is then cheaper than unoptimised, and every later run 5-10x cheaper.
#:
#: Refitted in s10-gpu (AMD EPYC Zen 3, 2 cores, PoCL 3.1, load 9-14; docs/benchmarks.md): the
#: work-group function of the real CNNs with 3 barrier rKernels (conv_igemm, gemm16, softmax_rows and
#: 6-7 plain ones) took 39-61 s of CPU (alexnet 39, inception 40-43, zfnet512 56, resnet50 57-61), with
#: 2 (densenet121) about 19 s, with 1 (the U-Nets) 3-5 s: a first barrier rKernel of about 3 s, still
#: about 4x per further one (the 0.8 s fitted earlier gave 13 s for three).  The register-tiled conv
#: rKernels run an unoptimised FLOP in about half the CPU of the others (resnet50: 43.8 s of CPU for
#: 9.7 GFLOP of conv rTask work and 19k rTasks; estimated 43.4 s), so resnet50's first run is 44.8 s
#: unoptimised against 59.9 s optimised (alexnet 22.3 against 42.5 s), and the rule picks unoptimised.
POCL_BUILD_OPTIONS = "-cl-opt-disable"
POCL_OPTIMISE_FRACTION = 0.75
#: The optimiser's cost model (CPU seconds, fitted to the figures above).
POCL_OPTIMISER_S_FIRST_BARRIER_KERNEL = 3.0
POCL_OPTIMISER_GROWTH_PER_BARRIER_KERNEL = 4.0
POCL_OPTIMISER_S_PER_PLAIN_KERNEL = 0.2
#: The unoptimised run's cost model: CPU seconds per floating-point operation and per rTask, fitted
#: at full size (ResNet-18 224 px, 4.0 GFLOP, 14,313 rTasks: 34-43 s per run; BERT seq 128, 2.9 GFLOP,
#: 33,350 rTasks: 27 s; MobileViT 256 px, 1.0 GFLOP, 87,916 rTasks: 22 s) ...
POCL_UNOPTIMISED_S_PER_FLOP = 1 / 1.15e8
POCL_UNOPTIMISED_S_PER_RTASK = 1.5e-4
#: ... and the FLOPs of the register-tiled rKernel families (a loaded value feeds several
#: multiply-adds), fitted to resnet50 above (s10-gpu; conv-bilstm-asr's LSTM GEMMs keep the rate above:
#: at that rate its unoptimised run, 65.9 s of CPU, was estimated at 41.6 s).
POCL_UNOPTIMISED_S_PER_TILED_FLOP = 1 / 2.4e8
POCL_TILED_FAMILIES = frozenset({"gpu.conv_igemm", "gpu.conv_transpose"})


def barrier_rkernels(kernels: Sequence[ir.Kernel]) -> int:
    """How many of ``kernels``' device functions (the rKernels) contain a block barrier."""
    return sum(1 for k in kernels if k.device and has_barrier(k))


def optimiser_seconds(kernels: Sequence[ir.Kernel]) -> float:
    """The estimated CPU seconds PoCL's optimiser spends on the program of ``kernels``."""
    with_barriers = barrier_rkernels(kernels)
    plain = sum(1 for k in kernels if k.device) - with_barriers
    compounding = (POCL_OPTIMISER_S_FIRST_BARRIER_KERNEL
                   * POCL_OPTIMISER_GROWTH_PER_BARRIER_KERNEL ** (with_barriers - 1) if with_barriers else 0.0)
    return compounding + POCL_OPTIMISER_S_PER_PLAIN_KERNEL * plain


def unoptimised_seconds(program: GpuProgram) -> float:
    """The estimated CPU seconds of one run of ``program`` built with ``-cl-opt-disable`` on PoCL."""
    ops = getattr(program.schedule, "ops", ())
    tiled = float(sum(op.kernel.flops * op.kernel.num_rtasks for op in ops
                      if getattr(op.kernel, "family", "") in POCL_TILED_FAMILIES))
    flops = float(sum(op.kernel.flops * op.kernel.num_rtasks for op in ops)) - tiled
    rtasks = sum(op.kernel.num_rtasks for op in ops)
    return (flops * POCL_UNOPTIMISED_S_PER_FLOP + tiled * POCL_UNOPTIMISED_S_PER_TILED_FLOP
            + rtasks * POCL_UNOPTIMISED_S_PER_RTASK)


def build_options(device: Any, program: GpuProgram | None = None) -> str:
    """The options ``program`` is built with on ``device`` (see :data:`POCL_BUILD_OPTIONS`);
    without a program, PoCL's CPU device builds unoptimised."""
    chosen = os.environ.get("RAMMER_OPENCL_BUILD_OPTIONS")
    if chosen is not None:
        return chosen
    cpu = bool(device.type & 2)  # CL_DEVICE_TYPE_CPU
    if not (cpu and "Portable Computing Language" in device.platform.name):
        return ""
    if program is not None and \
            optimiser_seconds(program.kernels) < POCL_OPTIMISE_FRACTION * unoptimised_seconds(program):
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
            for name in [*p.outputs, *(g.tensor for g in p.guards)]:
                off, shape = p.tensors[name]
                arr = np.empty(shape, np.float32)
                if arr.size:
                    cl.enqueue_copy(self.queue, arr, self.arena, src_offset=4 * off)
                out[name] = arr
            self.queue.finish()
        check_guards(p.guards, out)  # an If's unreachable branch selected at run time is its error
        return {name: self.from_arena(name, out[name]) for name in p.outputs}

