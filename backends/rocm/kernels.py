"""The rKernels the rocm backend runs: the shared GPU rKernels, rendered with the hip table."""

from __future__ import annotations

from rammer.backends.gpu.lower import GPU_OPS

__all__ = ["DIALECT", "OPS"]

#: The rammer.codegen dialect table of this backend.
DIALECT = "hip"
#: Ops with a GPU rKernel.
OPS = GPU_OPS
