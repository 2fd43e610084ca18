"""InstanceNormalization and GroupNormalization as a LayerNormalization over rows and a per-channel affine.

Both normalise ``x[N, C, ...]`` over groups of channels and every spatial position (instance norm:
one channel per group), then scale and shift per channel.  Seen as ``[N, G, C/G * spatial]`` that
is a LayerNormalization over the last axis with unit scale, so a backend with a row-normalising
kernel and fused elementwise maps runs both without kernels of their own::

    Reshape(x, [N, G, -1]) -> LayerNormalization(axis=-1, scale=1) -> Reshape(x.shape)
        -> Mul(scale as [C, 1, ...]) -> Add(bias as [C, 1, ...])

The statistics are the same (mean, then the biased variance of the centred values, ``epsilon``
inside the square root).  GroupNormalization's scale and bias are per channel (opset 21).  Nodes the
pass cannot rewrite (a per-group scale, rank below 3, a model below opset 13) are left as they were.
Hardware-neutral; the ``cpu`` and gpu backends list it.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .pipeline import Pass
from .relu_concat import fresh_name

__all__ = ["NORM_AS_LAYERNORM", "norm_as_layernorm"]


def _rewrite(node: Node, graph: Graph, taken: set[str], inits: dict, value_info: dict) -> list[Node] | None:
    if node.domain != "" or node.op_type not in ("InstanceNormalization", "GroupNormalization"):
        return None
    if len([o for o in node.outputs if o]) != 1 or len(node.inputs) < 3 or not all(node.inputs[:3]):
        return None
    x = value_info[node.inputs[0]]
    if x.dtype != "float32" or len(x.shape) < 3:
        return None
    n, c = int(x.shape[0]), int(x.shape[1])
    groups = c if node.op_type == "InstanceNormalization" else int(node.attrs.get("num_groups", 0))
    if groups <= 0 or c % groups or int(node.attrs.get("stash_type", 1)) != 1:
        return None
    row = (c // groups) * math.prod(int(d) for d in x.shape[2:])
    stem = node.name or node.outputs[0]
    channel_shape = (c,) + (1,) * (len(x.shape) - 2)

    def const(label: str, value: np.ndarray) -> str:
        name = fresh_name(f"{stem}.{label}", taken)
        inits[name] = value
        value_info[name] = TensorInfo(name, str(value.dtype), tuple(value.shape))
        return name

    def tensor(label: str, shape: tuple[int, ...]) -> str:
        name = fresh_name(f"{stem}.{label}", taken)
        value_info[name] = TensorInfo(name, "float32", shape)
        return name

    nodes: list[Node] = []
    per_channel = []
    for slot, label in ((1, "scale"), (2, "bias")):
        name = node.inputs[slot]
        info = value_info[name]
        size = math.prod(int(d) for d in info.shape)
        if info.dtype != "float32":
            return None
        if size != c:  # GroupNormalization-18's per-group scale (deprecated; onnx's checker rejects it)
            return None
        out = tensor(f"{label}_per_channel", channel_shape)
        nodes.append(Node("Reshape", (name, const(f"{label}_shape", np.array(channel_shape, np.int64))), (out,),
                          fresh_name(f"{stem}.{label}_reshape", taken)))
        per_channel.append(out)
    rows = tensor("rows", (n, groups, row))
    normed = tensor("normalized_rows", (n, groups, row))
    back = tensor("normalized", tuple(x.shape))
    scaled = tensor("scaled", tuple(x.shape))
    eps = float(node.attrs.get("epsilon", 1e-5))
    nodes += [
        Node("Reshape", (node.inputs[0], const("rows_shape", np.array([n, groups, row], np.int64))), (rows,),
             fresh_name(f"{stem}.to_rows", taken)),
        Node("LayerNormalization", (rows, const("unit_scale", np.ones(row, np.float32))), (normed,),
             fresh_name(f"{stem}.layernorm", taken), attrs={"axis": -1, "epsilon": eps}),
        Node("Reshape", (normed, const("x_shape", np.array(x.shape, np.int64))), (back,),
             fresh_name(f"{stem}.from_rows", taken)),
        Node("Mul", (back, per_channel[0]), (scaled,), fresh_name(f"{stem}.scale", taken)),
        Node("Add", (scaled, per_channel[1]), (node.outputs[0],), fresh_name(f"{stem}.shift", taken)),
    ]
    return nodes


def norm_as_layernorm(graph: Graph) -> Graph:
    """``graph`` with its instance and group normalisations rewritten (the same object when none is)."""
    if not any(n.op_type in ("InstanceNormalization", "GroupNormalization") for n in graph.nodes):
        return graph
    if int(graph.opset.get("", 1)) < 13:  # Reshape's shape is an input from opset 5, Mul/Add broadcast from 7
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        new = _rewrite(node, graph, taken, inits, value_info)
        nodes.extend(new if new is not None else [node])
        changed |= new is not None
    if not changed:
        return graph
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=value_info)


NORM_AS_LAYERNORM = Pass("norm-as-layernorm", norm_as_layernorm,
                         "InstanceNormalization/GroupNormalization as a LayerNormalization over rows and a "
                         "per-channel affine")
