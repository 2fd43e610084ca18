"""DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear as one 8-bit ``QuantizedAdd``.

A QDQ model keeps its residual additions in float between the dequantizations of the two 8-bit
operands and the quantization of the sum (onnxruntime's ``quantize_static`` in QDQ format writes
``DQ(conv) + DQ(skip) -> Q`` in every residual block; onnxruntime runs it as its contrib QLinearAdd)::

    a_q -> DequantizeLinear(a_s, a_z) --.
                                         Add [-> Relu] -> QuantizeLinear(y_s, y_z) -> y_q
    b_q -> DequantizeLinear(b_s, b_z) --'

The chain maps bytes to a byte, element by element: ``QuantizedAdd`` (rammer domain,
:data:`rammer.ops.quant.QUANTIZED_ADD`) computes it with the same float32 steps (each dequantized
value a float32 product, their float32 sum, the float32 division by ``y_s``, rounding half to even,
saturation), so the result is the chain's bit for bit, and a backend reads two byte tensors and writes
one instead of three float passes over tensors four times the size.

Rewritten when the two DequantizeLinear and the QuantizeLinear are plain (no blocked quantization, no
``precision``, ``saturate`` 1) with constant per-tensor 8-bit parameters and float32 values, both operands
and the sum have one shape (a residual add: no broadcasting), and the sum (and the Relu's result) is read
by the next node of the chain only and is not a graph output.  A DequantizeLinear with other readers stays
for them.  Hardware-neutral; a backend with a ``QuantizedAdd`` kernel opts in by listing :data:`QDQ_ADD`
before :data:`~rammer.passes.QDQ_AS_FLOAT` (which would turn the quantization pairs around the add into
float ops).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, TensorInfo
from ..ops.control import RAMMER_DOMAIN
from ..ops.quant import QUANTIZED_ADD
from .names import fresh_name
from .pipeline import Pass
from .qdq_lookup import plain_per_tensor
from .rewrite import sole_reader

__all__ = ["QDQ_ADD", "qdq_add"]

_EIGHT_BIT = ("uint8", "int8")


def _plain_float_scale(graph: Graph, node: Node | None, op: str) -> bool:
    """``node`` is a plain ``op`` with constant per-tensor parameters (:func:`.qdq_lookup.plain_per_tensor`)
    and a float32 scale."""
    if node is None or not plain_per_tensor(graph, node, op):
        return False
    scale = graph.initializers.get(node.inputs[1])
    return scale is not None and np.asarray(scale).dtype == np.float32


def qdq_add(graph: Graph) -> Graph:
    """``graph`` with each DQ(a) + DQ(b) [-> Relu] -> Q of one shape as a ``QuantizedAdd``; the same object
    when there is none."""
    producer = graph.producer
    only_reader = sole_reader(graph)
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    replaced: dict[int, Node] = {}  # the QuantizeLinear's id -> its QuantizedAdd
    gone: set[int] = set()

    def zero_point(node: Node, dtype: str) -> str:
        if len(node.inputs) > 2 and node.inputs[2]:
            return node.inputs[2]
        name = fresh_name(f"{node.name or node.outputs[0]}.zero_point", taken)
        inits[name] = np.zeros((), dtype)
        value_info[name] = TensorInfo(name, dtype, ())
        return name

    for add in graph.nodes:
        if add.op_type != "Add" or add.domain or len(add.inputs) != 2 or len(add.outputs) != 1:
            continue
        after = only_reader(add.outputs[0])
        relu = None
        if after is not None and after.op_type == "Relu" and not after.domain:
            relu, after = after, only_reader(after.outputs[0])
        if not _plain_float_scale(graph, after, "QuantizeLinear") or after is None:
            continue
        a, b = (producer.get(name) for name in add.inputs)
        if a is None or b is None or not all(_plain_float_scale(graph, d, "DequantizeLinear") for d in (a, b)):
            continue
        deqs = (a, b)
        shape = tuple(value_info[add.outputs[0]].shape)
        y_type = value_info[after.outputs[0]].dtype
        if y_type not in _EIGHT_BIT or value_info[add.outputs[0]].dtype != "float32":
            continue
        if any(value_info[d.inputs[0]].dtype not in _EIGHT_BIT or tuple(value_info[d.inputs[0]].shape) != shape
               or value_info[d.outputs[0]].dtype != "float32" for d in deqs):
            continue
        inputs = (a.inputs[0], a.inputs[1], zero_point(a, value_info[a.inputs[0]].dtype),
                  b.inputs[0], b.inputs[1], zero_point(b, value_info[b.inputs[0]].dtype),
                  after.inputs[1], zero_point(after, y_type))
        stem = add.name or add.outputs[0]
        replaced[id(after)] = Node(QUANTIZED_ADD, inputs, (after.outputs[0],),
                                   fresh_name(f"{stem}.quantized", taken), domain=RAMMER_DOMAIN,
                                   attrs={"relu": int(relu is not None)})
        gone |= {id(add)} | ({id(relu)} if relu is not None else set())
    if not replaced:
        return graph
    kept = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
    outputs = {t.name for t in graph.outputs}
    while True:  # DequantizeLinear nodes no one reads any more go
        read = {i for n in kept for i in n.inputs} | outputs
        dead = {id(n) for n in kept if n.op_type == "DequantizeLinear" and not any(o in read for o in n.outputs)}
        if not dead:
            break
        kept = [n for n in kept if id(n) not in dead]
    produced = {o for n in kept for o in n.outputs} | {t.name for t in graph.inputs}
    read = {i for n in kept for i in n.inputs} | outputs
    for name in list(value_info):
        if name not in read and name not in produced and name not in inits:
            del value_info[name]
    return graph.replace(nodes=tuple(kept), initializers=inits, value_info=value_info)


QDQ_ADD = Pass("qdq-add", qdq_add,
               "DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear as one QuantizedAdd")
