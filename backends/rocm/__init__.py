"""The ``rocm`` backend: a whole model as ONE persistent HIP kernel (an AMD GPU, through CuPy).

The model compiler is shared with the other GPU backends (:mod:`rammer.backends.gpu`); this
package holds only its table (:mod:`.device`), its dialect (:mod:`.kernels`), its compiler
command (:mod:`.codegen`) and the runtime glue (:mod:`.runtime`).  Read it side by side with
``backends/cuda/``: the two differ only in these tables.
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import make_backend


@hookimpl
def rammer_register_backends(register) -> None:
    register(make_backend())
