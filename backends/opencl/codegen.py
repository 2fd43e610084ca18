"""OpenCL source of a compiled program, and a check that the device's compiler builds it."""

from __future__ import annotations

from rammer.backends.gpu.compiler import GpuProgram

from .kernels import DIALECT

__all__ = ["render", "SUFFIX"]

SUFFIX = ".cl"


def render(program: GpuProgram) -> str:
    """The self-contained ``.cl`` file of ``program`` (its one persistent kernel and device functions)."""
    return program.source(DIALECT)
