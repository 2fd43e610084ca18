"""CUDA C source of a compiled program, and the nvcc command and device limits that check it
without a GPU.

``python -m rammer.backends.cuda.codegen MODEL.onnx|ZOO-NAME DIR [--mode wave] [--vdevice P]`` writes
the source file, the schedule and the report (nvcc builds per architecture, registers, shared
memory, grid and occupancy) to DIR (``rammer compile --backend cuda`` needs the GPU: the CLI
compiles only for available backends).
"""

from __future__ import annotations

import sys
from typing import Any

from rammer.backends.gpu.compiler import GpuProgram
from rammer.backends.gpu.native import Toolchain, emit_main
from rammer.backends.gpu.native import emit as _emit
from rammer.backends.gpu.occupancy import GpuLimits

from .kernels import DIALECT

__all__ = ["render", "SUFFIX", "TOOLCHAIN", "emit"]

SUFFIX = ".cu"
KiB = 1024
#: Per SM, from NVIDIA's tuning guides: 64 K registers allocated 256 per warp, 2048 threads,
#: 32 blocks; shared memory 96 / 164 / 228 KiB (1 KiB reserved per block from sm_80 on).  nvcc 13
#: dropped sm_70, so a V100 program's registers are read from an sm_75 build.
_SM = dict(warp=32, max_threads=2048, max_blocks=32, registers=65536, register_unit=256)
TOOLCHAIN = Toolchain(compiler="nvcc",
                      args=("-arch={arch}", "-cubin", "--ptxas-options=-v", "{src}", "-o", "{out}"),
                      archs=("sm_80", "sm_90"), env={},
                      usage=(r"Compiling entry function '(\w+)'", r"Used (\d+) registers", r"(\d+) bytes smem"),
                      limits={"v100": GpuLimits("sm_70", 80, shared_bytes=96 * KiB, build_arch="sm_75", **_SM),
                              "a100": GpuLimits("sm_80", 108, shared_bytes=164 * KiB, shared_reserved=KiB, **_SM),
                              "h100": GpuLimits("sm_90", 132, shared_bytes=228 * KiB, shared_reserved=KiB, **_SM)})


def render(program: GpuProgram) -> str:
    """The self-contained ``.cu`` file of ``program``."""
    return program.source(DIALECT)


def emit(model: str, folder: str, build: bool = True, **options: Any) -> dict:
    """Compile ``model`` (a path or a zoo name) for this backend without a GPU and write
    ``program.cu``, ``schedule.json`` and ``report.json`` into ``folder``."""
    from .device import make_backend

    return _emit(make_backend(), TOOLCHAIN, SUFFIX, model, folder, build, options)


if __name__ == "__main__":  # pragma: no cover - a command-line helper
    sys.exit(emit_main("cuda", emit, sys.argv[1:]))
