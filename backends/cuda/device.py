"""The cuda backend's table: dialect, vDevice presets, compiler, availability.

Available only when CuPy imports and sees an NVIDIA GPU; otherwise the reason names the missing
GPU, and programs are still compiled, rendered and checkable with nvcc (:mod:`.codegen`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rammer.backend import Availability
from rammer.backends.gpu.backend import DeviceTable, GpuBackend
from rammer.backends.gpu.compiler import GpuProgram
from rammer.backends.gpu.native import cupy_gpu

from .kernels import DIALECT

__all__ = ["make_backend", "TABLE", "GPU"]

#: What this backend runs on, in words (availability reasons name it).
GPU = "NVIDIA GPU"


def _availability() -> Availability:
    cupy, why = cupy_gpu()
    if cupy is None:
        return Availability(False, f"no {GPU} here: {why}; programs still compile to CUDA C source")
    return Availability(True)


def _executable(program: GpuProgram, options: Mapping[str, Any]) -> Any:
    from .runtime import make_executable

    return make_executable(program)


TABLE = DeviceTable(
    name="cuda", dialect=DIALECT, language="cuda", compiler="nvcc", presets=("a100", "v100", "h100"),
    description="CUDA via CuPy: the whole model as one persistent kernel (nvcc checks the source without a GPU)",
    availability=_availability, executable=_executable,
    extra={
        "source_compile_args": ["{compiler}", "-arch=sm_80", "-cubin", "{src}", "-o", "{out}"],
        "runtime": "cupy (extra cuda)",
    })


def make_backend() -> GpuBackend:
    return GpuBackend(TABLE)
