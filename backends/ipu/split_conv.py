"""split-conv-channels: a Conv whose smallest rTask does not fit its room on a tile becomes partial
convolutions over slices of its input channels, summed by an ``Add`` tree.

``Conv(X, W) = sum_i Conv(X[:, C_i], W[:, C_i])`` for an ungrouped convolution: each output element
is a sum over the input channels of its window.  The conv family's rTasks read every input channel
of their input rows (core ``conv.tile``), so the smallest one it offers (one output row, 8 output
channels) reads ``window rows x width x C_in`` of input and ``8 x C_in x kernel`` of weight: for a
28 x 28 x 512 layer of VGG-19 168 KiB and 144 KiB, while the model's weights already take 381 KiB
of every 624 KiB tile on average for the whole program.  Over a slice of ``C_in / p`` channels both
blocks shrink ``p`` times.  This is split-k (:func:`rammer.passes.split_k.split_k`) for the conv's
reduction axis: the input slices are ``Slice`` nodes (exact views on the ipu: each rTask reads the
box it needs), the weight slices new constants, the bias joins the first partial, and the partial
sums are added by a balanced ``Add`` tree whose reads of the partials are exchanges like any other.
Summation order changes, as in any split reduction.

How many slices: :func:`rammer.backends.ipu.passes.conv_pieces`, the rule split-k uses for a
MatMul, given the conv's operand blocks per input channel, and under memory pressure at least
:func:`rammer.backends.ipu.conv_plan.pressure_pieces` (:func:`rammer.backends.ipu.passes.split_large_convs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rammer.ir import Graph, Node, TensorInfo
from rammer.passes.names import fresh_name
from rammer.passes.rewrite import splice

#: ``pieces_for(node, x_shape, w_shape, graph) -> p``: the slices of input channels for one conv.
PiecesRule = Callable[[Node, tuple[int, ...], tuple[int, ...], Graph], int]


def _splittable(node: Node, graph: Graph) -> tuple[tuple[int, ...], np.ndarray] | None:
    """(input shape, weight) of an ungrouped float32 Conv with a constant weight, else None."""
    if node.domain or node.op_type != "Conv" or len(node.inputs) < 2:
        return None
    x, w_name = node.inputs[0], node.inputs[1]
    if w_name not in graph.initializers or x in graph.initializers or x not in graph.value_info:
        return None
    info = graph.value_info[x]
    w = np.asarray(graph.initializers[w_name])
    if (int(node.attr("group", 1)) != 1 or info.shape is None or len(info.shape) < 3
            or info.dtype != "float32" or w.dtype != np.float32 or w.ndim != len(info.shape)
            or w.shape[1] != info.shape[1]):
        return None
    if len(node.inputs) > 2 and node.inputs[2] and node.inputs[2] not in graph.initializers:
        return None  # a computed bias: left alone (it would have to join one partial as a tensor)
    return tuple(info.shape), w


def split_conv_channels(graph: Graph, pieces_for: PiecesRule) -> Graph:
    """``graph`` with each qualifying Conv split over ``pieces_for(...)`` slices of its input
    channels (the same object when none is split)."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    inits = dict(graph.initializers)
    value_info = dict(graph.value_info)
    at: dict[int, list[Node]] = {}
    for node in graph.nodes:
        found = _splittable(node, graph)
        if found is None:
            continue
        x_shape, w = found
        channels = x_shape[1]
        p = max(1, min(channels, int(pieces_for(node, x_shape, tuple(w.shape), graph))))
        if p < 2:
            continue
        x, y = node.inputs[0], node.outputs[0]
        base = node.name or y
        y_info = graph.value_info[y]
        bounds = [round(i * channels / p) for i in range(p + 1)]
        new: list[Node] = []
        partials: list[str] = []
        for i in range(p):
            lo, hi = bounds[i], bounds[i + 1]
            consts = {}
            for what, values in (("starts", [lo]), ("ends", [hi]), ("axes", [1])):
                consts[what] = fresh_name(f"{base}_c{i}_{what}", taken)
                inits[consts[what]] = np.asarray(values, np.int64)
                value_info[consts[what]] = TensorInfo(consts[what], "int64", (1,))
            x_i = fresh_name(f"{x}_c{i}", taken)
            value_info[x_i] = TensorInfo(x_i, "float32", (x_shape[0], hi - lo, *x_shape[2:]))
            new.append(Node("Slice", (x, consts["starts"], consts["ends"], consts["axes"]), (x_i,),
                            name=fresh_name(f"{base}_slice_c{i}", node_names)))
            w_i = fresh_name(f"{node.inputs[1]}_c{i}", taken)
            inits[w_i] = np.ascontiguousarray(w[:, lo:hi])
            value_info[w_i] = TensorInfo(w_i, "float32", inits[w_i].shape)
            p_i = fresh_name(f"{y}_c{i}", taken)
            value_info[p_i] = TensorInfo(p_i, y_info.dtype, y_info.shape)
            bias = tuple(node.inputs[2:3]) if i == 0 else ()
            new.append(Node("Conv", (x_i, w_i, *bias), (p_i,), name=fresh_name(f"{base}_c{i}", node_names),
                            attrs=dict(node.attrs)))
            partials.append(p_i)
        new += _add_tree(partials, y, y_info, base, taken, node_names, value_info)
        at[id(node)] = new
    if not at:
        return graph
    return splice(graph, at, inits, value_info)  # a weight now only read through its slices is dropped


def _add_tree(partials: list[str], y: str, y_info: TensorInfo, base: str, taken: set[str],
              node_names: set[str], value_info: dict[str, TensorInfo]) -> list[Node]:
    """A balanced tree of Adds over ``partials`` whose last Add writes ``y`` (log2(p) levels: the
    reduction supersteps)."""
    adds: list[Node] = []
    while len(partials) > 1:
        nxt = []
        for j in range(0, len(partials) - 1, 2):
            out = y if len(partials) == 2 else fresh_name(f"{y}_csum", taken)
            if out != y:
                value_info[out] = TensorInfo(out, y_info.dtype, y_info.shape)
            adds.append(Node("Add", (partials[j], partials[j + 1]), (out,),
                             name=fresh_name(f"{base}_csum", node_names)))
            nxt.append(out)
        if len(partials) % 2:
            nxt.append(partials[-1])
        partials = nxt
    return adds


def conv_window_elements(node: Node, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> int:
    """Input elements per channel that one output row of ``node`` reads (its window rows, clipped
    to the input, times everything after the rows): the conv family's smallest rTask."""
    dilation = int(node.attr("dilations", [1] * (len(x_shape) - 2))[0])
    rows = min(x_shape[2], (w_shape[2] - 1) * dilation + 1)
    return rows * math.prod(x_shape[3:])
