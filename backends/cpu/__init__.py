"""The ``cpu`` backend: the CPU as a vDevice of persistent numba workers.

Registered through the ``rammer.backends`` entry point like every backend.
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import CpuBackend, CpuOpByOpBackend


@hookimpl
def rammer_register_backends(register) -> None:
    register(CpuBackend())
    # The same backend with the two-layer, op-by-op policy: the baseline that
    # shows what holistic scheduling gains (rammer bench --backends cpu,cpu-op-by-op).
    register(CpuOpByOpBackend())
