"""What the cpu's per-op lowerings (``lower_*.py``) use of the lowering in progress.

:class:`.lowering.Lowerer` satisfies :class:`LowerContext`; the lowerings are typed against this
protocol, so none of them imports the module that drives them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from rammer.ir import Graph, Node
from rammer.lower.views import Buffer, View

from .ops import CpuOp
from .program import EwProgram


class LowerContext(Protocol):
    graph: Graph
    #: The default domain's opset.
    opset: int
    buffers: list[Buffer]
    views: dict[str, View]
    ops: list[CpuOp]

    def new_dense(self, dtype: str, shape: tuple[int, ...]) -> View: ...

    def const_view(self, array: np.ndarray) -> View: ...

    def view(self, name: str) -> View: ...

    def dense(self, name: str) -> View: ...

    def add_op(self, op: CpuOp) -> CpuOp: ...

    def build_program(self, members: list[Node], internal: set[str], shape: tuple[int, ...],
                      preset: dict[str, tuple[int, View]] | None = None) -> tuple[EwProgram, list[str]]: ...

    def unfuse(self, head: Node, members: list[Node], internal: set[str], target_name: str) -> None: ...
