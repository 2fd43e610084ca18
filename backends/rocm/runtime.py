"""The rocm executable: the rendered source, its hipcc build check, and CuPy when a GPU is present."""

from __future__ import annotations

from rammer.backends.gpu.compiler import GpuProgram
from rammer.backends.gpu.native import NativeExecutable, cupy_gpu

from .codegen import SUFFIX, TOOLCHAIN
from .device import GPU
from .kernels import DIALECT

__all__ = ["make_executable"]


def make_executable(program: GpuProgram) -> NativeExecutable:
    return NativeExecutable(program, DIALECT, SUFFIX, TOOLCHAIN, cupy_gpu, GPU)
