"""The ``opencl`` backend: a whole model as ONE persistent OpenCL kernel, run through pyopencl.

The model compiler is shared with the cuda and rocm backends (:mod:`rammer.backends.gpu`); this
package holds only its table (:mod:`.device`), the dialect it renders (:mod:`.kernels`,
:mod:`.codegen`) and the pyopencl runtime (:mod:`.runtime`).  On machines without a GPU it runs
on PoCL's CPU device.
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import make_backend


@hookimpl
def rammer_register_backends(register) -> None:
    register(make_backend())
