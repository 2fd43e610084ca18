"""Work estimates per node: floating-point operations and bytes moved.

Used by ``rammer inspect`` and by cost models of rKernels.  Counts a
multiply-add as 2 FLOPs.
"""

from __future__ import annotations

import math

from .ir import Graph, Node


def _size(graph: Graph, name: str) -> int:
    return graph.value_info[name].size if name in graph.value_info else 0


def node_flops(node: Node, graph: Graph) -> int:
    op = node.op_type
    out = _size(graph, node.outputs[0]) if node.outputs and node.outputs[0] else 0
    if op in ("MatMul", "Gemm", "MatMulInteger"):
        a = graph.value_info[node.inputs[0]].shape
        k = a[0] if op == "Gemm" and node.attr("transA", 0) else a[-1]
        return 2 * out * k
    if op in ("Conv", "ConvInteger"):
        w = graph.value_info[node.inputs[1]].shape  # (M, C/group, k...)
        return 2 * out * math.prod(w[1:])
    if op == "ConvTranspose":
        x = graph.value_info[node.inputs[0]].shape
        w = graph.value_info[node.inputs[1]].shape  # (C, M/group, k...)
        return 2 * math.prod(x) * math.prod(w[1:])
    if op in ("LSTM", "GRU", "RNN"):
        x = graph.value_info[node.inputs[0]].shape
        w = graph.value_info[node.inputs[1]].shape  # (dirs, gates*H, I)
        r = graph.value_info[node.inputs[2]].shape
        steps = x[0] if node.attr("layout", 0) == 0 else x[1]
        batch = x[1] if node.attr("layout", 0) == 0 else x[0]
        return 2 * steps * batch * w[0] * w[1] * (w[2] + r[2])
    if op in ("Einsum",):
        return 2 * out * max(1, max((_size(graph, i) for i in node.inputs if i), default=1) // max(out, 1))
    reads = sum(_size(graph, i) for i in node.inputs if i)
    if op.startswith("Reduce") or op in ("Softmax", "LogSoftmax", "LayerNormalization", "GlobalAveragePool",
                                         "GlobalMaxPool", "BatchNormalization", "InstanceNormalization"):
        return max(reads, out)
    if op in ("MaxPool", "AveragePool"):
        k = math.prod(node.attr("kernel_shape", [1]))
        return out * k
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size"):
        return 0
    return out


def node_bytes(node: Node, graph: Graph) -> int:
    total = 0
    for name in list(node.inputs) + list(node.outputs):
        if name and name in graph.value_info:
            total += graph.value_info[name].nbytes
    return total


def graph_flops(graph: Graph) -> int:
    return sum(node_flops(n, graph) for n in graph.nodes)
