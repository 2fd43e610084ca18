"""HIP source of a compiled program, and the hipcc command and device limits that check it
without a GPU.

``python -m rammer.backends.rocm.codegen MODEL.onnx|ZOO-NAME DIR [--mode wave] [--vdevice P]`` writes
the source file, the schedule and the report (hipcc builds per architecture, registers, shared
memory, grid and occupancy) to DIR (``rammer compile --backend rocm`` needs the GPU: the CLI
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

SUFFIX = ".hip"
KiB = 1024
#: Per CU of one MI250X GCD (CDNA2, gfx90a): 4 SIMDs of 512 VGPRs per lane (allocated 8 at a time),
#: at most 8 waves of 64 per SIMD, 64 KiB LDS.
TOOLCHAIN = Toolchain(compiler="hipcc",
                      args=("--offload-arch={arch}", "--genco", "-Rpass-analysis=kernel-resource-usage", "{src}",
                            "-o", "{out}"),
                      archs=("gfx90a", "gfx908"), env={"HIP_PLATFORM": "amd"},
                      usage=(r"remark: Function Name: (\w+)", r"remark:\s+VGPRs: (\d+)",
                             r"remark:\s+LDS Size \[bytes/block\]: (\d+)"),
                      limits={"mi250x": GpuLimits("gfx90a", 110, warp=64, max_threads=2048, max_blocks=32,
                                                  registers=512, register_unit=8, shared_bytes=64 * KiB, simds=4,
                                                  max_waves_per_simd=8)})


def render(program: GpuProgram) -> str:
    """The self-contained ``.hip`` file of ``program``."""
    return program.source(DIALECT)


def emit(model: str, folder: str, build: bool = True, **options: Any) -> dict:
    """Compile ``model`` (a path or a zoo name) for this backend without a GPU and write
    ``program.hip``, ``schedule.json`` and ``report.json`` into ``folder``."""
    from .device import make_backend

    return _emit(make_backend(), TOOLCHAIN, SUFFIX, model, folder, build, options)


if __name__ == "__main__":  # pragma: no cover - a command-line helper
    sys.exit(emit_main("rocm", emit, sys.argv[1:]))
