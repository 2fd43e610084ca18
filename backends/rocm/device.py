"""The rocm backend's table: dialect, vDevice presets, compiler, availability.

Available only when CuPy imports and sees an AMD GPU; otherwise the reason names the missing
GPU, and programs are still compiled, rendered and checkable with hipcc (:mod:`.codegen`).
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
GPU = "AMD GPU"


def _availability() -> Availability:
    cupy, why = cupy_gpu()
    if cupy is None:
        return Availability(False, f"no {GPU} here: {why}; programs still compile to HIP source")
    return Availability(True)


def _executable(program: GpuProgram, options: Mapping[str, Any]) -> Any:
    from .runtime import make_executable

    return make_executable(program)


TABLE = DeviceTable(
    name="rocm", dialect=DIALECT, language="hip", compiler="hipcc", presets=("mi250x",),
    description="ROCm/HIP via CuPy: the whole model as one persistent kernel (hipcc checks the source when installed)",
    availability=_availability, executable=_executable,
    extra={
        "source_compile_args": ["env", "HIP_PLATFORM=amd", "{compiler}", "--offload-arch=gfx90a", "--genco",
                                "{src}", "-o", "{out}"],
        "runtime": "cupy on ROCm (extra rocm)",
        "env": {"HIP_PLATFORM": "amd"},
    })


def make_backend() -> GpuBackend:
    return GpuBackend(TABLE)
