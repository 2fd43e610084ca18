"""What every GPU lowering shares (:mod:`.lower` and the modules it dispatches to): the
:class:`Lowered` rKernel with its per-rTask calls, the :class:`Ref` pointer argument, the refusal
:class:`NoGpuKernel`, the block and tiling constants, and the shape helpers."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import numpy as np

from rammer.codegen import kernel_ir as ir
from rammer.errors import RammerError
from rammer.ir import Graph, Node
from rammer.ops.registry import OpContext, get_op

from . import kernels_model as km

__all__ = ["BLOCK_THREADS", "TILINGS", "CONV_IMPLICIT_GEMM", "BIG", "NoGpuKernel", "Ref", "Arg", "Lowered", "fail",
           "shape_of", "row_major_strides", "pad6", "chunks", "broadcast_strides", "reference_outputs", "template"]

#: Threads of a persistent block: kernels with barriers use exactly this many.
BLOCK_THREADS = 256
#: Elements per rTask, in units of the kernel's threads, for the chunked kernels.
TILINGS = (1, 4)
#: The ``mult`` that picks a Conv's implicit-GEMM form (1: direct).
CONV_IMPLICIT_GEMM = 2
#: An extent no tensor reaches: a view's "no bound" (always valid).
BIG = 1 << 30


class NoGpuKernel(RammerError):
    """No GPU rKernel implements this node (the message names node, op and why)."""


@dataclass(frozen=True)
class Ref:
    """A pointer argument: input (``io="in"``) or output ``slot`` of the node, plus ``offset`` floats."""

    io: str
    slot: int
    offset: int = 0


Arg = Union[Ref, int, float]  # noqa: UP007 -- a runtime alias, kept in the typing spelling


@dataclass(frozen=True)
class Lowered:
    kernel: ir.Kernel
    #: One per rTask: (the device function's rtask_id, arguments per kernel parameter).
    calls: tuple[tuple[int, tuple[Arg, ...]], ...]
    flops: float
    bytes: float

    @property
    def shared_bytes(self) -> int:
        return sum(s.size * 4 for s in self.kernel.shared)


def fail(node: Node, why: str) -> NoGpuKernel:
    return NoGpuKernel(f"{node.label}: no GPU rKernel for {node.op_type}: {why}")


def shape_of(graph: Graph, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.value_info[name].shape)


def row_major_strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def pad6(values: list[int], fill: int) -> list[int]:
    if len(values) > km.MAX_RANK:
        raise ValueError("rank")
    return [fill] * (km.MAX_RANK - len(values)) + list(values)


def chunks(total: int, chunk: int) -> int:
    return max(1, math.ceil(total / chunk))


def broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    st = row_major_strides(shape)
    return pad6([0 if d == 1 else s for d, s in zip(shape, st)], 0)


def reference_outputs(node: Node, graph: Graph, arrays: dict[int, np.ndarray]) -> list[np.ndarray]:
    values = [arrays.get(i, graph.initializers.get(n)) if n else None for i, n in enumerate(node.inputs)]
    infos = [graph.value_info.get(n) if n else None for n in node.inputs]
    ctx = OpContext(node, graph.opset.get(node.domain, 1), infos, values)
    out = get_op(node).compute(ctx, *values)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


@functools.cache
def template(build: Callable[..., ir.Kernel], *args: object) -> ir.Kernel:
    """``build(*args)``, built once per process: a kernel template depends only on its builder's
    arguments (names, ops, tiles), and an unrolled RNN lowers thousands of copies and GEMMs with
    the same few (building the kernel IR of each took about 1 ms).  The templates are frozen, so
    the nodes share them."""
    return build(*args)
