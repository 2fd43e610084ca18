"""The rKernels the opencl backend runs: the shared GPU rKernels, rendered in OpenCL C."""

from __future__ import annotations

from rammer.backends.gpu.lower import GPU_OPS

__all__ = ["DIALECT", "OPS"]

#: The rammer.codegen dialect table of this backend.
DIALECT = "opencl"
#: Ops with a GPU rKernel.
OPS = GPU_OPS
