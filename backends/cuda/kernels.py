"""The rKernels the cuda backend runs: the shared GPU rKernels, rendered with the cuda table."""

from __future__ import annotations

from rammer.backends.gpu.lower import GPU_OPS

__all__ = ["DIALECT", "OPS"]

#: The rammer.codegen dialect table of this backend.
DIALECT = "cuda"
#: Ops with a GPU rKernel.
OPS = GPU_OPS
