"""Split-K: a MatMul or Gemm with a long reduction and few output tiles becomes several partial
products over slices of K, summed by an ``Add`` tree.

``Y = A @ B = sum_i A[:, K_i] @ B[K_i, :]``.  An op like AlexNet's first FC layer (M = 1, K = 9216,
N = 4096) or a classifier head has only ceil(M / t) * ceil(N / t) output tiles, each with a long K
loop: on a device with a hundred vEUs most sit idle.  Split into ``p`` products, the same op offers
``p`` times the rTasks, which the scheduler spreads over vEUs, then the sum is one more elementwise
pass over the (small) output.  The weight slices are new constants, cut once here; the activation
slices are ``Slice`` nodes (strided views or copies of an M x K_i block, small when M is).

Only a constant 2-d weight is split (``Gemm`` with transA=0; transB handled by slicing B's other
axis; the bias joins the first partial product).  Summation order changes, as in any split-K GEMM.
Hardware-neutral: the thresholds are parameters (:func:`make_split_k`); a backend whose devices have
many vEUs and a K loop per tile puts the pass in its pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .names import fresh_name
from .pipeline import Pass
from .rewrite import splice

__all__ = ["split_k", "make_split_k", "SPLIT_K"]


def _pieces(m: int, n: int, k: int, tile: int, min_tiles: int, min_slice: int, max_pieces: int) -> int:
    tiles = math.ceil(m / tile) * math.ceil(n / tile)
    if tiles == 0 or tiles >= min_tiles:  # (an empty product has nothing to split)
        return 1
    return max(1, min(max_pieces, math.ceil(min_tiles / tiles), k // min_slice))


def split_k(graph: Graph, tile: int = 16, min_tiles: int = 128, min_slice: int = 512, max_pieces: int = 16,
            pieces_for: Callable[[int, int, int], int] | None = None) -> Graph:
    """``graph`` with each qualifying MatMul/Gemm split along K (the same object when none is).
    A product qualifies when its output has fewer than ``min_tiles`` tiles of ``tile`` x ``tile``
    and K holds at least two slices of ``min_slice``; or, with ``pieces_for(m, n, k)``, when that
    gives it two pieces or more (a backend's own rule, e.g. operand blocks that fit a memory)."""
    if any(n.subgraphs() for n in graph.nodes):
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    inits = dict(graph.initializers)
    value_info = dict(graph.value_info)
    at: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.domain or node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2:
            continue
        a, b = node.inputs[0], node.inputs[1]
        if b not in graph.initializers or a in graph.initializers or a not in graph.value_info:
            continue
        w = np.asarray(graph.initializers[b])
        info = graph.value_info[a]
        if w.ndim != 2 or info.dtype != "float32" or w.dtype != np.float32 or not info.shape:
            continue
        gemm = node.op_type == "Gemm"
        if gemm and (int(node.attrs.get("transA", 0)) or len(info.shape) != 2):
            continue
        trans_b = gemm and bool(int(node.attrs.get("transB", 0)))
        k = info.shape[-1]
        m = int(np.prod(info.shape[:-1]))
        n = w.shape[0] if trans_b else w.shape[1]
        if (w.shape[1] if trans_b else w.shape[0]) != k:
            continue
        p = _pieces(m, n, k, tile, min_tiles, min_slice, max_pieces) if pieces_for is None else \
            max(1, min(k, int(pieces_for(m, n, k))))
        if p < 2:
            continue
        base = node.name or node.outputs[0]
        y = node.outputs[0]
        bounds = [round(i * k / p) for i in range(p + 1)]
        new: list[Node] = []
        partials: list[str] = []
        for i in range(p):
            lo, hi = bounds[i], bounds[i + 1]
            consts = {}
            for what, values in (("starts", [lo]), ("ends", [hi]), ("axes", [len(info.shape) - 1])):
                consts[what] = fresh_name(f"{base}_k{i}_{what}", taken)
                inits[consts[what]] = np.asarray(values, np.int64)
                value_info[consts[what]] = TensorInfo(consts[what], "int64", (1,))
            a_i = fresh_name(f"{a}_k{i}", taken)
            value_info[a_i] = TensorInfo(a_i, "float32", (*info.shape[:-1], hi - lo))
            new.append(Node("Slice", (a, consts["starts"], consts["ends"], consts["axes"]), (a_i,),
                            name=fresh_name(f"{base}_slice_k{i}", node_names)))
            b_i = fresh_name(f"{b}_k{i}", taken)
            inits[b_i] = np.ascontiguousarray(w[:, lo:hi] if trans_b else w[lo:hi, :])
            value_info[b_i] = TensorInfo(b_i, "float32", inits[b_i].shape)
            p_i = fresh_name(f"{y}_k{i}", taken)
            value_info[p_i] = TensorInfo(p_i, graph.value_info[y].dtype, graph.value_info[y].shape)
            inputs = (a_i, b_i) + (tuple(node.inputs[2:3]) if gemm and i == 0 else ())
            new.append(Node(node.op_type, inputs, (p_i,), name=fresh_name(f"{base}_k{i}", node_names),
                            attrs=dict(node.attrs)))
            partials.append(p_i)
        while len(partials) > 1:  # a balanced Add tree; the last Add writes Y
            nxt = []
            for j in range(0, len(partials) - 1, 2):
                out = y if len(partials) == 2 else fresh_name(f"{y}_ksum", taken)
                if out != y:
                    value_info[out] = TensorInfo(out, graph.value_info[y].dtype, graph.value_info[y].shape)
                new.append(Node("Add", (partials[j], partials[j + 1]), (out,),
                                name=fresh_name(f"{base}_ksum", node_names)))
                nxt.append(out)
            if len(partials) % 2:
                nxt.append(partials[-1])
            partials = nxt
        at[id(node)] = new
    if not at:
        return graph
    return splice(graph, at, inits, value_info)  # a weight now only read through its slices is dropped


def make_split_k(**thresholds: Any) -> Pass:
    """The pass with other thresholds (see :func:`split_k`)."""
    return Pass("split-k", lambda g: split_k(g, **thresholds),
                "split a MatMul/Gemm with a long K and few output tiles into partial products and a sum")


#: The pass with its default thresholds, for pipelines.
SPLIT_K = make_split_k()
