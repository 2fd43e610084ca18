"""Lowering ONNX sequence ops to tensor ops at import.

The IR carries tensors only.  Exporters use sequences for fixed-size splits
(torch's dynamo exporter writes ``tensor.split`` as ``SplitToSequence`` +
``SequenceAt``), so the frontend tracks each sequence value as the list of
its element tensors and rewrites the ops: ``SplitToSequence`` becomes
``Split`` (+ ``Squeeze``), ``SequenceAt`` an alias of an element,
``ConcatFromSequence`` a ``Concat``, ``SequenceLength`` a constant.  This
needs positions and split sizes to be constants, which they are in models
exported at fixed shapes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ShapeError
from ..ir import Node
from .builder import GraphBuilder

#: Ops of the ai.onnx domain the frontend lowers instead of the op registry.
LOWERED_OPS = frozenset({
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "SplitToSequence", "ConcatFromSequence",
})


def _sequence(b: GraphBuilder, node: Node, i: int = 0) -> list[str]:
    name = node.inputs[i] if i < len(node.inputs) else ""
    seq = b.scope.sequence(name) if name else None
    if seq is None:
        raise ShapeError(f"{node.label}: input '{name}' is not a sequence built earlier in the graph")
    return seq


def _const_int(b: GraphBuilder, node: Node, i: int, what: str) -> int | None:
    """Optional scalar int input ``i``: its value, None when omitted."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    value = b.scope.const(node.inputs[i])
    if value is None:
        raise ShapeError(
            f"{node.label}: the {what} '{node.inputs[i]}' is computed at run time; rammer lowers sequences "
            f"only with constant positions (export the model with fixed shapes)"
        )
    return int(np.asarray(value).reshape(-1)[0])


def _position(node: Node, pos: int, length: int, inclusive_end: bool) -> int:
    hi = length if inclusive_end else length - 1
    if not -length <= pos <= hi:
        raise ShapeError(f"{node.label}: position {pos} is out of range for a sequence of {length} tensors")
    return pos + length if pos < 0 else pos


def _construct(b: GraphBuilder, node: Node) -> None:
    b.scope.sequences[node.outputs[0]] = [b.scope.resolve(n) for n in node.inputs]


def _empty(b: GraphBuilder, node: Node) -> None:
    b.scope.sequences[node.outputs[0]] = []


def _insert(b: GraphBuilder, node: Node) -> None:
    seq = list(_sequence(b, node))
    pos = _const_int(b, node, 2, "position")
    at = len(seq) if pos is None else _position(node, pos, len(seq), inclusive_end=True)
    seq.insert(at, b.scope.resolve(node.inputs[1]))
    b.scope.sequences[node.outputs[0]] = seq


def _erase(b: GraphBuilder, node: Node) -> None:
    seq = list(_sequence(b, node))
    pos = _const_int(b, node, 1, "position")
    del seq[len(seq) - 1 if pos is None else _position(node, pos, len(seq), inclusive_end=False)]
    b.scope.sequences[node.outputs[0]] = seq


def _at(b: GraphBuilder, node: Node) -> None:
    seq = _sequence(b, node)
    pos = _const_int(b, node, 1, "position")
    if pos is None:
        raise ShapeError(f"{node.label}: SequenceAt needs a position input")
    b.alias(node.outputs[0], seq[_position(node, pos, len(seq), inclusive_end=False)], node.label)


def _length(b: GraphBuilder, node: Node) -> None:
    b.add_constant(node.outputs[0], np.array(len(_sequence(b, node)), dtype=np.int64))


def _axes_node(b: GraphBuilder, op: str, x: str, axis: int, out: str, name: str) -> Node:
    """Squeeze/Unsqueeze of one axis, in the form the model's opset uses."""
    if b.opset >= 13:
        axes = b.fresh(f"{name}_axes")
        b.add_constant(axes, np.array([axis], dtype=np.int64))
        return Node(op, (x, axes), (out,), name, "")
    return Node(op, (x,), (out,), name, "", {"axes": [axis]})


def _split(b: GraphBuilder, node: Node) -> None:
    x = b.scope.info(node.inputs[0])
    if x is None:
        raise ShapeError(f"{node.label}: input '{node.inputs[0]}' is not defined before it")
    rank = len(x.shape)
    axis = int(node.attr("axis", 0))
    if not -rank <= axis < rank:
        raise ShapeError(f"{node.label}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    dim = x.shape[axis]
    has_split = len(node.inputs) > 1 and bool(node.inputs[1])
    squeeze = not has_split and int(node.attr("keepdims", 1)) == 0
    if has_split:
        split = b.scope.const(node.inputs[1])
        if split is None:
            raise ShapeError(f"{node.label}: the split sizes '{node.inputs[1]}' are computed at run time; "
                             f"rammer needs them constant")
        split = np.asarray(split).astype(np.int64)
        if split.ndim == 0:  # one chunk size; the last chunk takes the remainder
            chunk = int(split)
            if chunk <= 0:
                raise ShapeError(f"{node.label}: split size {chunk} must be positive")
            sizes = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
        else:
            sizes = [int(s) for s in split]
    else:
        sizes = [1] * dim
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ShapeError(f"{node.label}: split sizes {sizes} do not add up to dim {axis} of size {dim}")
    if not sizes:
        b.scope.sequences[node.outputs[0]] = []
        return
    base = node.outputs[0]
    parts = [b.fresh(f"{base}_part") for _ in sizes]
    if b.opset >= 13:
        split_name = b.fresh(f"{base}_sizes")
        b.add_constant(split_name, np.array(sizes, dtype=np.int64))
        b.add(Node("Split", (node.inputs[0], split_name), tuple(parts), node.name, "", {"axis": axis}))
    else:
        b.add(Node("Split", (node.inputs[0],), tuple(parts), node.name, "", {"axis": axis, "split": sizes}))
    if squeeze:
        squeezed = [b.fresh(f"{base}_item") for _ in parts]
        for i, (p, s) in enumerate(zip(parts, squeezed)):
            b.add(_axes_node(b, "Squeeze", p, axis, s, f"{node.name}/squeeze{i}"))
        parts = squeezed
    b.scope.sequences[base] = parts


def _concat(b: GraphBuilder, node: Node) -> None:
    seq = _sequence(b, node)
    if not seq:
        raise ShapeError(f"{node.label}: cannot concatenate an empty sequence")
    axis = int(node.attr("axis", 0))
    items = list(seq)
    if int(node.attr("new_axis", 0)):
        rank = len(b.scope.info(items[0]).shape) + 1  # type: ignore[union-attr]
        if not -rank <= axis < rank:
            raise ShapeError(f"{node.label}: axis {axis} is out of range for new rank {rank}")
        axis %= rank
        expanded = [b.fresh(f"{node.outputs[0]}_item") for _ in items]
        for i, (t, e) in enumerate(zip(items, expanded)):
            b.add(_axes_node(b, "Unsqueeze", t, axis, e, f"{node.name}/unsqueeze{i}"))
        items = expanded
    b.add(Node("Concat", tuple(items), node.outputs, node.name, "", {"axis": axis}))


_LOWERINGS: dict[str, Callable[[GraphBuilder, Node], None]] = {
    "SequenceConstruct": _construct,
    "SequenceEmpty": _empty,
    "SequenceInsert": _insert,
    "SequenceErase": _erase,
    "SequenceAt": _at,
    "SequenceLength": _length,
    "SplitToSequence": _split,
    "ConcatFromSequence": _concat,
}


def lower(b: GraphBuilder, node: Node) -> None:
    """Lower the sequence op ``node`` into ``b``."""
    _LOWERINGS[node.op_type](b, node)
