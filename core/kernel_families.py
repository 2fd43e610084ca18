"""The core's hardware-neutral rKernel families, all of them: what a backend without rKernels of
its own (or ``rammer schedule`` with no backend of a preset's kind) offers the scheduler."""

from __future__ import annotations

from .kernels_dense import ConvFamily, MatMulFamily, PoolFamily
from .kernels_generic import CopyFamily, ElementwiseFamily, RowFamily, SplitFamily
from .rtask import RKernelFamily


def generic_families() -> list[RKernelFamily]:
    """The hardware-neutral families (without the ``whole`` fallback, which
    :func:`rammer.kernels_generic.candidates_from` adds where none applies)."""
    return [ElementwiseFamily(), CopyFamily(), SplitFamily(), RowFamily(), MatMulFamily(), ConvFamily(),
            PoolFamily()]
