"""The ``ipu`` backend: Graphcore IPU tiles as vEUs, bulk-synchronous supersteps.

The static rTask schedule is lowered to a BSP program (:mod:`.codegen`): each
tile runs its rTasks, then all tiles sync, then tensor slices move between
tiles.  Graphcore's software is not on the package registries, so programs run
on a numpy simulator of that program (:mod:`.simulator`) with a cost model
(:mod:`.kernels`); when ``poptorch`` is importable the model can run through
``poptorch.inferenceModel`` (:mod:`.poptorch_path`, untested here).
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import IpuBackend


@hookimpl
def rammer_register_backends(register) -> None:
    register(IpuBackend())
