"""The operator registry: for each ONNX op, shape/dtype inference and a numpy
reference implementation.

This is the executable specification of rammer.  The ``reference`` backend
runs it op by op, the frontend uses it to fold constants and infer shapes, and
every other backend is checked against it.

An op is registered with :func:`register_op`::

    @register_op("Relu", infer=same_as_input)
    def relu(ctx: OpContext, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0).astype(x.dtype)

* ``infer(ctx) -> list[(dtype, shape)]`` gets an :class:`OpContext` whose
  ``inputs`` are :class:`~rammer.ir.TensorInfo` (``None`` for an omitted
  optional input) and whose ``values`` hold the inputs' values where they are
  constants (``ctx.const(i)`` fetches one or raises a clear error).
* ``compute(ctx, *arrays) -> ndarray | tuple[ndarray, ...]`` gets the input
  arrays positionally (``None`` for omitted optional inputs; trailing omitted
  inputs are passed as ``None`` too, up to the node's input count).

Both read attributes through ``ctx.attr(name, default)`` and the opset version
of the node's domain through ``ctx.opset`` (ops changed their signature across
versions, e.g. ``axes`` moved from an attribute to an input).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir import Graph, Node, TensorInfo, dtype_name

OutSpec = tuple[str, tuple[int, ...]]
InferFn = Callable[["OpContext"], Sequence[OutSpec]]
ComputeFn = Callable[..., Any]


@dataclass
class OpContext:
    """What an op's ``infer`` and ``compute`` functions see of the node."""

    node: Node
    opset: int
    inputs: list[TensorInfo | None]
    values: list[np.ndarray | None]
    #: Runs a subgraph (for If/Loop/Scan): ``run_graph(graph, feeds) -> list``.
    run_graph: Callable[[Graph, dict[str, np.ndarray]], list[np.ndarray]] | None = None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.node.attrs.get(key, default)

    def input(self, i: int) -> TensorInfo:
        """The type and shape of input ``i``, one the op requires (``inputs[i]`` is None for an absent one)."""
        info = self.inputs[i] if i < len(self.inputs) else None
        if info is None:
            raise self.fail(f"input {i} is missing; {self.node.op_type} requires it")
        return info

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def const(self, i: int, what: str | None = None) -> np.ndarray:
        """The constant value of input ``i``; a clear error if it is not constant."""
        value = self.values[i] if i < len(self.values) else None
        if value is None:
            name = self.node.inputs[i] if i < len(self.node.inputs) else f"#{i}"
            raise ShapeError(
                f"{self.node.label}: input {i} '{name}'{' (' + what + ')' if what else ''} must be a "
                f"constant for rammer to know the output shape statically; it is computed at run time. "
                f"Fix the input shapes (rammer.load(..., input_shapes=...)) or export with constant shapes.",
                needs_constant=name,
            )
        return value

    def fail(self, message: str) -> ShapeError:
        """An error naming this node, for ``raise ctx.fail("...")``."""
        return ShapeError(f"{self.node.label}: {message}")


@dataclass(frozen=True)
class OpDef:
    op_type: str
    domain: str
    infer: InferFn
    compute: ComputeFn
    #: False for ops whose output must not be constant-folded (random ops).
    foldable: bool = True


_REGISTRY: dict[tuple[str, str], OpDef] = {}


def register_op(
    op_type: str | Iterable[str],
    *,
    infer: InferFn,
    domain: str = "",
    foldable: bool = True,
) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator registering ``compute`` (and ``infer``) for one or more op types."""
    names = [op_type] if isinstance(op_type, str) else list(op_type)

    def deco(compute: ComputeFn) -> ComputeFn:
        for name in names:
            key = (domain, name)
            old = _REGISTRY.get(key)
            # The same definition again is a module imported a second time (a test harness that restores
            # sys.modules, such as pytester, drops an op module but not this registry): it replaces the old
            # entry.  Two different definitions of one op are a bug.
            if old is not None and (old.compute.__module__, old.compute.__qualname__) != (
                    compute.__module__, compute.__qualname__):
                raise RuntimeError(f"op {domain or 'ai.onnx'}::{name} registered twice")
            _REGISTRY[key] = OpDef(name, domain, infer, compute, foldable)
        return compute

    return deco


def _ensure_loaded() -> None:
    # Importing the package registers every built-in op.
    from . import _load_all  # noqa: F401


def lookup(op_type: str, domain: str = "") -> OpDef | None:
    _ensure_loaded()
    return _REGISTRY.get(("" if domain == "ai.onnx" else domain, op_type))


def get_op(node: Node) -> OpDef:
    op = lookup(node.op_type, node.domain)
    if op is None:
        raise UnsupportedOpError(
            f"{node.label}: op {node.domain or 'ai.onnx'}::{node.op_type} is not supported by rammer",
            [(node.op_type, node.domain, node.name)],
        )
    return op


def registered_ops() -> list[tuple[str, str]]:
    """(domain, op_type) of every registered op, sorted."""
    _ensure_loaded()
    return sorted(_REGISTRY)


# -- helpers shared by op modules -------------------------------------------


def same_as_input(ctx: OpContext) -> list[OutSpec]:
    """Infer: one output with the first input's dtype and shape."""
    x = ctx.inputs[0]
    assert x is not None
    return [(x.dtype, x.shape)]


def broadcast_shapes(ctx: OpContext, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.fail(f"input shapes {[list(s) for s in shapes]} do not broadcast") from None


def broadcast_infer(ctx: OpContext) -> list[OutSpec]:
    """Infer for n-ary elementwise ops: broadcast shape, first input's dtype."""
    present = [t for t in ctx.inputs if t is not None]
    return [(present[0].dtype, broadcast_shapes(ctx, [t.shape for t in present]))]


def broadcast_bool_infer(ctx: OpContext) -> list[OutSpec]:
    """Infer for comparisons and logical ops: broadcast shape, bool dtype."""
    present = [t for t in ctx.inputs if t is not None]
    return [("bool", broadcast_shapes(ctx, [t.shape for t in present]))]


def normalize_axis(ctx: OpContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def as_dtype(dtype: Any) -> str:
    return dtype_name(dtype)
