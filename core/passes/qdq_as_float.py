"""QuantizeLinear -> DequantizeLinear pairs (the QDQ format's fake quantization) as float elementwise ops.

A QDQ model quantizes an activation and dequantizes it straight back before the next float op.  The
pair is a function of the float input alone::

    y = (saturate(rint(x / s1) + z1) - z2) * s2

which float32 arithmetic computes exactly as the integer ops do: ``x / s1`` is the same float32
division, ``Round`` rounds half to even like the spec's rounding, and every intermediate value is
an integer below 2**24.  So the pair becomes ``Div -> Round -> Clip -> Mul`` (one zero point on both
sides, per tensor; ``Max -> Min`` for per-axis bounds; ``Add -> Max -> Min -> Sub`` around the clip when
the two zero points differ) with constant operands, which a backend with elementwise fusion folds into the epilogue of
the op that
produced ``x`` (the cpu: a conv's or GEMM's epilogue), instead of two passes over the tensor and an
8-bit tensor in memory.  The results are bit for bit those of the two ops.

Rewritten: a DequantizeLinear whose input comes from a QuantizeLinear, both float32 <-> 8-bit with
constant scales and zero points, per tensor or per axis (blocked quantization, the ``precision``
attribute and ``saturate=0`` are left alone).  The QuantizeLinear goes when no other node reads its
output and it is not a graph output.  Hardware-neutral; a backend opts in by listing
:data:`QDQ_AS_FLOAT`.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .pipeline import Pass
from .relu_concat import fresh_name

__all__ = ["QDQ_AS_FLOAT", "qdq_as_float"]

_RANGES = {"uint8": (0.0, 255.0), "int8": (-128.0, 127.0)}


def _param(graph: Graph, node: Node, slot: int, rank: int) -> np.ndarray | None:
    """Scale or zero point ``slot`` of a (de)quantization as float32 shaped to broadcast over an input of
    ``rank`` axes; a missing zero point is 0; None when it is not a constant or not per tensor / per axis."""
    name = node.inputs[slot] if slot < len(node.inputs) else ""
    if not name:
        return np.zeros((), np.float32) if slot == 2 else None
    value = graph.initializers.get(name)
    if value is None:
        return None
    value = np.asarray(value)
    if value.size == 1 and value.ndim <= 1:
        return value.astype(np.float32).reshape(())
    if value.ndim != 1 or rank == 0:
        return None
    axis = int(node.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    return value.astype(np.float32).reshape([-1 if a == axis else 1 for a in range(rank)])


def _plain(node: Node) -> bool:
    return (node.domain == "" and not int(node.attrs.get("block_size", 0)) and not int(node.attrs.get("precision", 0))
            and int(node.attrs.get("saturate", 1)) == 1)


def qdq_as_float(graph: Graph) -> Graph:
    """``graph`` with its QuantizeLinear -> DequantizeLinear pairs as float ops (the same object when none is)."""
    if int(graph.opset.get("", 1)) < 11:  # Round is an op from opset 11
        return graph
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    replaced: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear" or not _plain(node) or not node.inputs[0]:
            continue
        quant = producer.get(node.inputs[0])
        if quant is None or quant.op_type != "QuantizeLinear" or not _plain(quant):
            continue
        x, q, y = (value_info[t] for t in (quant.inputs[0], node.inputs[0], node.outputs[0]))
        if x.dtype != "float32" or y.dtype != "float32" or q.dtype not in _RANGES or x.shape != y.shape:
            continue
        rank = len(x.shape)
        params = [_param(graph, quant, 1, rank), _param(graph, quant, 2, rank), _param(graph, node, 1, rank),
                  _param(graph, node, 2, rank)]
        s1, z1, s2, z2 = params
        if s1 is None or z1 is None or s2 is None or z2 is None:
            continue
        lo, hi = _RANGES[q.dtype]
        stem = node.name or node.outputs[0]

        def const(label: str, value: np.ndarray) -> str:
            name = fresh_name(f"{stem}.{label}", taken)
            inits[name] = np.asarray(value, np.float32)
            value_info[name] = TensorInfo(name, "float32", tuple(np.shape(value)))
            return name

        chain: list[tuple[str, str, str | tuple[str, ...] | None]] = [
            ("Div", "scaled", const("scale_in", s1)), ("Round", "rounded", None)]
        if np.shape(z1) == np.shape(z2) and np.array_equal(z1, z2):
            # The usual pair (one zero point): clip(r + z, lo, hi) - z == clip(r, lo - z, hi - z), exactly
            # (integers), one op instead of three; a Clip when the bounds are scalars.
            low, high = np.float32(lo) - z1, np.float32(hi) - z1
            if np.ndim(low) == 0:
                chain.append(("Clip", "saturated", (const("low", low), const("high", high))))
            else:
                chain += [("Max", "above", const("low", low)), ("Min", "saturated", const("high", high))]
        else:
            chain += [("Add", "shifted", const("zero_point_in", z1)), ("Max", "above", const("low", np.float32(lo))),
                      ("Min", "saturated", const("high", np.float32(hi))),
                      ("Sub", "centred", const("zero_point_out", z2))]
        chain.append(("Mul", "", const("scale_out", s2)))
        nodes: list[Node] = []
        last = quant.inputs[0]
        for op, label, operand in chain:
            if label:
                out = fresh_name(f"{stem}.{label}", taken)
                value_info[out] = TensorInfo(out, "float32", tuple(x.shape))
            else:
                out = node.outputs[0]
            inputs = (last,) if operand is None else (last, operand) if isinstance(operand, str) else (last, *operand)
            nodes.append(Node(op, inputs, (out,), fresh_name(f"{stem}.{op.lower()}", taken)))
            last = out
        replaced[id(node)] = nodes
    if not replaced:
        return graph
    # A QuantizeLinear whose every reader was rewritten (and whose output is not the graph's) goes too.
    outputs = {t.name for t in graph.outputs}
    readers: dict[str, int] = {}
    for n in graph.nodes:
        if id(n) not in replaced:
            for i in n.inputs:
                readers[i] = readers.get(i, 0) + 1
    dead = {id(n) for n in graph.nodes if n.op_type == "QuantizeLinear" and n.outputs[0] not in outputs
            and not readers.get(n.outputs[0]) and any(n.outputs[0] == m.inputs[0] for m in graph.nodes
                                                       if id(m) in replaced)}
    nodes_out: list[Node] = []
    for n in graph.nodes:
        if id(n) in dead:
            value_info.pop(n.outputs[0], None)
            continue
        nodes_out.extend(replaced.get(id(n), [n]))
    return graph.replace(nodes=tuple(nodes_out), initializers=inits, value_info=value_info)


QDQ_AS_FLOAT = Pass("qdq-as-float", qdq_as_float,
                    "QuantizeLinear -> DequantizeLinear pairs as exact float elementwise ops (fused into epilogues)")
