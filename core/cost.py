"""Work estimates per node (floating-point operations and bytes moved) and the
one analytic cost model of an rTask.

Used by ``rammer inspect``, by the rKernel families of the core and by every
backend that costs its own rKernels.  Counts a multiply-add as 2 FLOPs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .ir import Graph, Node

if TYPE_CHECKING:  # pragma: no cover
    from .vdevice import VDevice


def rtask_duration(vd: VDevice, flops: float, nbytes: float, efficiency: float = 1.0,
                   contraction: bool = True) -> float:
    """Microseconds one rTask takes on one vEU of ``vd``: the fixed overhead, then compute or
    memory, whichever is slower.  A ``contraction`` (a GEMM or conv tile) runs at
    ``efficiency`` x the vEU's peak; other code at its loop rate (``VDevice.loop_gflops``)."""
    rate = vd.flops_per_us if contraction else vd.loop_flops_per_us
    return vd.rtask_overhead_us + max(flops / (rate * max(efficiency, 1e-3)), nbytes / vd.bytes_per_us)


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
