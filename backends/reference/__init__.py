"""The ``reference`` backend: the IR interpreted op by op in numpy.

It is rammer's executable specification (every other backend is checked
against it) and the "two-layer", op-by-op baseline in benchmarks.
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import ReferenceBackend


@hookimpl
def rammer_register_backends(register) -> None:
    register(ReferenceBackend())
