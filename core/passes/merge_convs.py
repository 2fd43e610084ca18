"""Sibling convolutions that read the same input become one wider convolution.

Two ``Conv`` nodes with the same input, the same attributes and constant
weights compute the output channels of one convolution whose weights (and
biases) are theirs stacked; a ``Split`` on the channel axis then gives each
its own tensor.  For one image that split is a pair of channel ranges of one
buffer, so the lowering makes it views and nothing is copied.

The win is in the input: the implicit GEMM reads it (or gathers its windows)
once for both instead of once each, and its panels of output channels are
filled twice as far.  NASNet projects every cell's output with two 1x1
convolutions (the next cell's "current" input and the one after's
"previous" input); at 8x8 with 768 input channels each pass read its 192 KiB
input back from L3.

Only ungrouped convs with initializer weights (and biases) merge, and only for
a batch of one image (with more, the channel ranges of the merged output are
not contiguous).  A conv whose only reader is an op the backend runs in the
conv's own epilogue (``absorbable``: for the CPU, elementwise ops and
BatchNormalization, e.g. ResNeXt's first 1x1 conv and its BN + ReLU, a shortcut
conv and its residual Add) stays alone, since a split in between would stop
that fusion.
Readers of a merged conv's parts run as ops of their own (for NASNet, ReLUs of
a few KiB each that the other vEU often takes; writing the ReLU of the whole
merged output from the conv's epilogue instead measured 6% slower on 2 vEUs).
Graph outputs are left alone.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .cse import plain_attrs
from .names import fresh_name
from .pipeline import Pass


def merge_convs_pass(absorbable: AbstractSet[str] = frozenset(), name: str = "merge-convs") -> Pass:
    """The pass, for a backend that runs the ops in ``absorbable`` inside a conv's epilogue when
    they are its only reader (such a conv is not merged)."""
    absorbable = frozenset(absorbable)
    return Pass(name, lambda graph: merge_sibling_convs(graph, absorbable),
                "merge sibling convs that read one input into one wider conv and a Split")


def merge_sibling_convs(graph: Graph, absorbable: AbstractSet[str] = frozenset()) -> Graph:
    """``graph`` with each set of mergeable sibling convs merged (the same object when none is).
    A conv whose only reader is an op of ``absorbable`` (default domain) is left alone."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    outputs = {t.name for t in graph.outputs}
    inits = graph.initializers
    groups: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        key = _merge_key(graph, node, outputs, absorbable)
        if key is not None:
            groups.setdefault(key, []).append(node)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if not groups:
        return graph
    taken = set(graph.value_info) | set(inits) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    new_inits = dict(inits)
    value_info: dict[str, TensorInfo] = dict(graph.value_info)
    at: dict[int, list[Node]] = {}
    dropped: set[int] = set()
    for convs in groups.values():
        first = convs[0]
        ws = [np.asarray(inits[c.inputs[1]]) for c in convs]
        bs = [np.asarray(inits[c.inputs[2]]) if len(c.inputs) > 2 and c.inputs[2]
              else np.zeros(w.shape[0], w.dtype) for c, w in zip(convs, ws)]
        w_name = fresh_name(f"{first.inputs[1]}_merged", taken)
        b_name = fresh_name(f"{first.inputs[1]}_merged_bias", taken)
        new_inits[w_name] = np.concatenate(ws, axis=0)
        new_inits[b_name] = np.concatenate(bs, axis=0)
        value_info[w_name] = TensorInfo(w_name, str(new_inits[w_name].dtype), new_inits[w_name].shape)
        value_info[b_name] = TensorInfo(b_name, str(new_inits[b_name].dtype), new_inits[b_name].shape)
        out0 = graph.value_info[first.outputs[0]]
        widths = [int(w.shape[0]) for w in ws]
        y_name = fresh_name(f"{first.outputs[0]}_merged", taken)
        value_info[y_name] = TensorInfo(y_name, out0.dtype, (out0.shape[0], sum(widths), *out0.shape[2:]))
        label = "+".join(c.name or c.outputs[0] for c in convs)
        merged = replace(first, inputs=(first.inputs[0], w_name, b_name), outputs=(y_name,),
                         name=fresh_name(f"merged({label})", node_names))
        if int(graph.opset.get("", 1)) >= 13:  # the sizes are an input from opset 13 on
            s_name = fresh_name(f"{y_name}_split", taken)
            value_info[s_name] = TensorInfo(s_name, "int64", (len(widths),))
            new_inits[s_name] = np.asarray(widths, np.int64)
            split_in, split_attrs = (y_name, s_name), {"axis": 1}
        else:
            split_in, split_attrs = (y_name,), {"axis": 1, "split": widths}
        split = Node("Split", split_in, tuple(c.outputs[0] for c in convs),
                     name=fresh_name(f"{merged.name}_split", node_names), attrs=split_attrs)
        at[id(first)] = [merged, split]
        dropped.update(id(c) for c in convs[1:])
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in at:
            nodes.extend(at[id(node)])
        elif id(node) not in dropped:
            nodes.append(node)
    used = {i for n in nodes for i in n.inputs} | outputs
    for name in [k for k in new_inits if k not in used and k in inits]:
        del new_inits[name]
        value_info.pop(name, None)
    return graph.replace(nodes=tuple(nodes), initializers=new_inits, value_info=value_info)


def _merge_key(graph: Graph, node: Node, outputs: set[str], absorbable: AbstractSet[str]) -> tuple | None:
    """What two convs must share to merge, or None when this one cannot."""
    if node.op_type != "Conv" or node.domain or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    if int(node.attr("group", 1)) != 1 or node.outputs[0] in outputs:
        return None
    readers = graph.consumers.get(node.outputs[0], ())
    if len(readers) == 1 and readers[0].op_type in absorbable and not readers[0].domain:
        return None  # its epilogue (BN, ReLU, residual Add...) runs in the conv kernel; the split would stop it
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) > 2 else ""
    if w not in graph.initializers or (b and b not in graph.initializers):
        return None
    info = graph.value_info.get(x)
    if info is None or len(info.shape) < 3 or info.shape[0] != 1:
        return None
    attrs = plain_attrs(node)
    if attrs is None:
        return None
    wa = graph.initializers[w]
    return x, attrs, tuple(wa.shape[1:]), str(wa.dtype)
