"""MatMulInteger -> Cast(float32) -> Mul(scale) [-> Add(bias)] as one ``MatMulIntegerToFloat`` (rammer domain).

onnxruntime's ``quantize_dynamic`` writes this chain after every MatMulInteger it makes of a float MatMul
(the scale the product of the run-time activation scale and the weight scale, the bias the float
MatMul's Add): three passes over a float tensor the size of the GEMM's output.  As one op, a backend
dequantizes (and adds the bias) in the GEMM's store.  The op keeps the chain's float32 rounding (after
the product, then after the sum), so its result is the chain's bit for bit.

Rewritten when each intermediate is read by the next op of the chain only and is not a graph output;
the scale has one element or one per column (the last axis), the bias is a constant with one value per
column.  Hardware-neutral; a backend with a kernel for the op opts in by listing :data:`QDQ_MATMUL_FLOAT`.
"""

from __future__ import annotations

import math

from ..ir import Graph, Node
from ..ops.control import RAMMER_DOMAIN
from ..ops.quant import MATMUL_INTEGER_FLOAT
from .names import fresh_name
from .pipeline import Pass
from .rewrite import sole_reader

__all__ = ["QDQ_MATMUL_FLOAT", "qdq_matmul_float"]


def _size(graph: Graph, name: str) -> int:
    return math.prod(graph.value_info[name].shape)


def _other(node: Node, name: str) -> str | None:
    """The input of a binary ``node`` that is not ``name`` (None if ``name`` is both or neither)."""
    if len(node.inputs) != 2 or (node.inputs[0] == name) == (node.inputs[1] == name):
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def qdq_matmul_float(graph: Graph) -> Graph:
    """``graph`` with each MatMulInteger -> Cast -> Mul [-> Add] chain as one ``MatMulIntegerToFloat``;
    the same object when there is none."""
    only_reader = sole_reader(graph)
    outputs = {t.name for t in graph.outputs}
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    replaced: dict[int, Node] = {}  # the chain's last node -> the fused op
    gone: set[int] = set()
    for mm in graph.nodes:
        if mm.op_type != "MatMulInteger" or mm.domain or mm.outputs[0] in outputs:
            continue
        n_cols = graph.value_info[mm.outputs[0]].shape[-1] if graph.value_info[mm.outputs[0]].shape else 0
        cast = only_reader(mm.outputs[0])
        if cast is None or cast.op_type != "Cast" or cast.domain or int(cast.attrs.get("to", 0)) != 1:
            continue
        mul = only_reader(cast.outputs[0]) if cast.outputs[0] not in outputs else None
        if mul is None or mul.op_type != "Mul" or mul.domain:
            continue
        scale = _other(mul, cast.outputs[0])
        if scale is None or graph.value_info[scale].dtype != "float32" or _size(graph, scale) not in (1, n_cols) \
                or len(graph.value_info[scale].shape) > 1:
            continue
        last, bias = mul, ""
        add = only_reader(mul.outputs[0]) if mul.outputs[0] not in outputs else None
        if add is not None and add.op_type == "Add" and not add.domain:
            other = _other(add, mul.outputs[0])
            if other is not None and other in graph.initializers and graph.value_info[other].dtype == "float32" \
                    and tuple(graph.value_info[other].shape) == (n_cols,):
                last, bias = add, other
        if tuple(graph.value_info[last.outputs[0]].shape) != tuple(graph.value_info[mm.outputs[0]].shape):
            continue
        inputs = (*mm.inputs[:2], *(mm.inputs[2:4] + ("",) * (4 - len(mm.inputs))), scale, bias)
        stem = mm.name or mm.outputs[0]
        replaced[id(last)] = Node(MATMUL_INTEGER_FLOAT, tuple(inputs), (last.outputs[0],),
                                  fresh_name(f"{stem}.float", taken), RAMMER_DOMAIN)
        gone |= {id(mm), id(cast)} | ({id(mul)} if last is not mul else set())
    if not replaced:
        return graph
    kept = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
    read = {i for n in kept for i in n.inputs} | outputs
    produced = {o for n in kept for o in n.outputs} | {t.name for t in graph.inputs}
    value_info = {k: v for k, v in graph.value_info.items() if k in read or k in produced or k in graph.initializers}
    return graph.replace(nodes=tuple(kept), value_info=value_info)


QDQ_MATMUL_FLOAT = Pass("qdq-matmul-float", qdq_matmul_float,
                        "MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)] as one MatMulIntegerToFloat")
