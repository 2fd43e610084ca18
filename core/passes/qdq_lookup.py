"""DequantizeLinear -> per-element float ops -> QuantizeLinear as one 256-entry byte table.

Quantized models keep activations that have no 8-bit operator in float between a DequantizeLinear and a
QuantizeLinear (onnxruntime's QOperator MobileNets: ``QLinearConv -> DequantizeLinear -> Clip(0, 6) ->
QuantizeLinear`` with a different scale on each side; QDQ models: the same around Relu, Sigmoid,
HardSwish...).  When both (de)quantizations are per tensor with constant scales and zero points and every
op between them maps each element on its own (unary activations, or a binary op with a one-element
constant), the output byte is a function of the input byte alone: 256 values, computed here by running
the chain itself (the registry's reference ops) on every byte value, so the table gives the chain's result
bit for bit, rounding and saturation included.  The chain becomes ``ByteTable(x, table)`` (rammer domain):
one byte load per element instead of three passes over a float tensor four times the size.  A chain of
one Relu or Clip also leaves its parameters on the node (attribute ``requantize``), so that a backend
can compute the table's function in vector arithmetic rather than look it up byte by byte.

Rewritten when the float values between are read by the next op of the chain only and are not graph
outputs; a DequantizeLinear with other readers stays for them.  Hardware-neutral; a backend with a
``ByteTable`` kernel opts in by listing :data:`QDQ_LOOKUP` before the passes that rewrite the remaining
pairs into float ops.
"""

from __future__ import annotations

import numpy as np

from ..interpreter import run_graph
from ..ir import Graph, Node, TensorInfo
from ..ops.control import RAMMER_DOMAIN
from ..ops.quant import BYTE_TABLE
from .names import fresh_name
from .pipeline import Pass
from .rewrite import sole_reader

__all__ = ["QDQ_LOOKUP", "qdq_lookup"]

_EIGHT_BIT = ("uint8", "int8")
#: Ops that map each float element on its own (their other inputs, if any, constants of one element).
_PER_ELEMENT = frozenset({
    "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu", "Softplus",
    "Softsign", "ThresholdedRelu", "Mish", "Gelu", "Erf", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal",
    "Floor", "Ceil", "Round", "Sign", "Identity", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
})


def plain_per_tensor(graph: Graph, node: Node | None, op: str) -> bool:
    """``node`` is a plain ``op`` (DequantizeLinear / QuantizeLinear) with constant per-tensor parameters."""
    if node is None or node.op_type != op or node.domain or len(node.inputs) < 2:
        return False
    if int(node.attrs.get("block_size", 0)) or int(node.attrs.get("precision", 0)):
        return False
    if int(node.attrs.get("saturate", 1)) != 1 or int(node.attrs.get("output_dtype", 0)):
        return False
    params = [name for name in node.inputs[1:3] if name]
    return all(name in graph.initializers and np.asarray(graph.initializers[name]).size == 1 for name in params)


def _per_element(graph: Graph, node: Node, shape: tuple[int, ...]) -> bool:
    """``node`` maps each element of its first input on its own, keeping ``shape`` and float32."""
    if node.domain or node.op_type not in _PER_ELEMENT or len(node.outputs) != 1 or not node.inputs:
        return False
    out = graph.value_info.get(node.outputs[0])
    if out is None or out.dtype != "float32" or tuple(out.shape) != tuple(shape):
        return False
    return all(not name or (name in graph.initializers and np.asarray(graph.initializers[name]).size == 1)
               for name in node.inputs[1:])


def _table(graph: Graph, chain: list[Node]) -> np.ndarray:
    """The chain (DequantizeLinear first, QuantizeLinear last) run on the 256 byte values, in index order
    (an int8 input's entry ``i`` is the byte ``i`` read signed)."""
    x = chain[0].inputs[0]
    x_type = graph.value_info[x].dtype
    values = np.arange(256, dtype=np.uint8).view(np.dtype(x_type))
    consts = {name: graph.initializers[name] for n in chain for name in n.inputs[1:] if name}
    infos = {name: TensorInfo(name, str(np.asarray(v).dtype), tuple(np.asarray(v).shape)) for name, v in consts.items()}
    infos[x] = TensorInfo(x, x_type, (256,))
    for n in chain:
        infos[n.outputs[0]] = TensorInfo(n.outputs[0], graph.value_info[n.outputs[0]].dtype, (256,))
    probe = Graph("byte-table", (infos[x],), (infos[chain[-1].outputs[0]],), tuple(chain),
                  consts, infos, graph.opset)
    return np.asarray(run_graph(probe, {x: values}, check=False)[0]).reshape(256)


def _requantize_params(graph: Graph, deq: Node, steps: list[Node], quant: Node) -> list[float] | None:
    """[x scale, x zero point, low, high, y scale, y zero point] when the chain is DequantizeLinear ->
    one Relu or Clip (constant bounds) -> QuantizeLinear: the table is then also
    ``saturate(rint(clip(float32(x - zx) * sx, low, high) / sy) + zy)``, which a backend may compute
    instead of looking it up (it checks the formula against the table); None for other chains."""
    if len(steps) != 1 or steps[0].op_type not in ("Relu", "Clip"):
        return None
    lo, hi = -np.inf, np.inf
    if steps[0].op_type == "Relu":
        lo = 0.0
    else:
        bounds = list(steps[0].inputs[1:3]) + [""] * (3 - len(steps[0].inputs))
        if any(b and (b not in graph.initializers or np.asarray(graph.initializers[b]).size != 1) for b in bounds):
            return None
        if bounds[0]:
            lo = float(np.asarray(graph.initializers[bounds[0]]).reshape(()))
        if bounds[1]:
            hi = float(np.asarray(graph.initializers[bounds[1]]).reshape(()))
        if "min" in steps[0].attrs or "max" in steps[0].attrs:  # Clip before opset 11
            lo = float(steps[0].attrs.get("min", lo))
            hi = float(steps[0].attrs.get("max", hi))

    def const(name: str) -> float:
        return float(np.asarray(graph.initializers[name]).reshape(())) if name else 0.0

    zx = deq.inputs[2] if len(deq.inputs) > 2 else ""
    zy = quant.inputs[2] if len(quant.inputs) > 2 else ""
    return [const(deq.inputs[1]), const(zx), lo, hi, const(quant.inputs[1]), const(zy)]


def qdq_lookup(graph: Graph) -> Graph:
    """``graph`` with each DequantizeLinear -> per-element ops -> QuantizeLinear chain (constant per-tensor
    8-bit parameters) as one ``ByteTable``; the same object when there is none."""
    producer = graph.producer
    only_reader = sole_reader(graph)
    outputs = {t.name for t in graph.outputs}
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    replaced: dict[int, Node] = {}  # the QuantizeLinear's id -> its ByteTable
    gone: set[int] = set()

    for quant in graph.nodes:
        if not plain_per_tensor(graph, quant, "QuantizeLinear"):
            continue
        if value_info[quant.outputs[0]].dtype not in _EIGHT_BIT:
            continue
        # Walk back from the QuantizeLinear through per-element ops to a DequantizeLinear.
        steps: list[Node] = []
        at = producer.get(quant.inputs[0])
        shape = tuple(value_info[quant.inputs[0]].shape)
        while at is not None and at.op_type != "DequantizeLinear" and _per_element(graph, at, shape) \
                and only_reader(at.outputs[0]) is (steps[0] if steps else quant):
            steps.insert(0, at)
            at = producer.get(at.inputs[0])
        deq = at
        if not steps or deq is None or not plain_per_tensor(graph, deq, "DequantizeLinear"):
            continue
        if value_info[deq.inputs[0]].dtype not in _EIGHT_BIT or tuple(value_info[deq.outputs[0]].shape) != shape:
            continue
        if value_info[deq.outputs[0]].dtype != "float32" or steps[0].inputs[0] != deq.outputs[0]:
            continue
        table = _table(graph, [deq, *steps, quant])
        stem = quant.name or quant.outputs[0]
        table_name = fresh_name(f"{stem}.byte_table", taken)
        inits[table_name] = table
        value_info[table_name] = TensorInfo(table_name, str(table.dtype), (256,))
        params = _requantize_params(graph, deq, steps, quant)
        replaced[id(quant)] = Node(BYTE_TABLE, (deq.inputs[0], table_name), (quant.outputs[0],),
                                   fresh_name(f"{stem}.table", taken), RAMMER_DOMAIN,
                                   {"requantize": params} if params is not None else {})
        gone |= {id(n) for n in steps}
    if not replaced:
        return graph
    kept = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
    read = {i for n in kept for i in n.inputs} | outputs
    kept = [n for n in kept if n.op_type != "DequantizeLinear" or any(o in read for o in n.outputs)]
    read = {i for n in kept for i in n.inputs} | outputs
    produced = {o for n in kept for o in n.outputs} | {t.name for t in graph.inputs}
    for name in list(value_info):
        if name not in read and name not in produced and name not in inits:
            del value_info[name]
    for name in [k for k in inits if k not in read and k in graph.initializers and k not in produced]:
        del inits[name]
        value_info.pop(name, None)
    return graph.replace(nodes=tuple(kept), initializers=inits, value_info=value_info)


QDQ_LOOKUP = Pass("qdq-lookup", qdq_lookup,
                  "DequantizeLinear -> per-element float ops -> QuantizeLinear as one 256-entry ByteTable")
