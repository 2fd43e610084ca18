"""An inference ``BatchNormalization`` after a ``Conv`` folded into the conv's weights and bias.

With constant weights and constant normalization parameters,

    BN(conv(x, W) + b) = conv(x, W * s) + (b - mean) * s + B,   s = scale / sqrt(var + epsilon)

per output channel, so the pair becomes one ``Conv`` whose new weights and bias are computed
here once (in float64, stored in the conv's dtype).  Exported models from Caffe2, Paddle and
older PyTorch keep their BNs (ResNet-50 from onnx's test data has 53 of them).  Folded, the
conv's own kernel applies what follows the BN (a residual ``Sum`` and a ``Relu``) as it stores
its tile; left as an epilogue, the BN made the kernel write the raw output and an interpreter
pass rewrite it.

Folded only when nothing else can tell the difference: the conv's output is read by the BN
alone and is not a graph output, the BN is in inference form (no ``training_mode``, no
extra outputs, ``spatial`` 1 where the opset has it), every parameter is a constant
initializer of one value per output channel, and the dtypes are float32 or float64.  The
result differs from the unfolded pair by rounding only (the products are taken in float64).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .pipeline import Pass
from .relu_concat import fresh_name

_FLOATS = ("float32", "float64")


def fold_batchnorm(graph: Graph) -> Graph:
    """``graph`` with every foldable Conv + BatchNormalization pair as one Conv (the same
    object when there is none)."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    outputs = {t.name for t in graph.outputs}
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    folds: dict[int, Node] = {}  # id(bn) -> the conv it folds into
    for bn in graph.nodes:
        conv = producers.get(bn.inputs[0]) if bn.op_type == "BatchNormalization" and bn.inputs else None
        if conv is not None and _foldable(graph, conv, bn, outputs):
            folds[id(bn)] = conv
    if not folds:
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    inits = dict(graph.initializers)
    value_info = dict(graph.value_info)
    folded_convs = {id(c) for c in folds.values()}
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in folded_convs:
            continue  # it reappears, folded, where its BN was
        conv = folds.get(id(node))
        if conv is None:
            nodes.append(node)
            continue
        w, b = _folded(graph, conv, node)
        w_name = fresh_name(f"{conv.inputs[1]}_bn", taken)
        b_name = fresh_name(f"{conv.inputs[1]}_bn_bias", taken)
        for name, arr in ((w_name, w), (b_name, b)):
            inits[name] = arr
            value_info[name] = TensorInfo(name, str(arr.dtype), tuple(arr.shape))
        nodes.append(replace(conv, inputs=(conv.inputs[0], w_name, b_name), outputs=(node.outputs[0],)))
        value_info.pop(conv.outputs[0], None)
    used = {i for n in nodes for i in n.inputs} | outputs
    for name in [k for k in inits if k not in used and k in graph.initializers]:
        del inits[name]
        value_info.pop(name, None)
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=value_info)


def _foldable(graph: Graph, conv: Node, bn: Node, outputs: set[str]) -> bool:
    if conv.op_type != "Conv" or conv.domain or bn.domain or len(conv.outputs) != 1:
        return False
    if conv.outputs[0] in outputs or len(graph.consumers.get(conv.outputs[0], ())) != 1:
        return False
    if len(bn.inputs) != 5 or len([o for o in bn.outputs if o]) != 1 or not bn.outputs[0]:
        return False
    if int(bn.attr("training_mode", 0)) != 0 or int(bn.attr("spatial", 1)) != 1:
        return False
    inits = graph.initializers
    params = [conv.inputs[1]] + ([conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else []) \
        + list(bn.inputs[1:])
    if not all(p in inits for p in params):
        return False
    w = inits[conv.inputs[1]]
    dtype = str(np.asarray(w).dtype)
    if dtype not in _FLOATS or graph.value_info[conv.outputs[0]].dtype != dtype:
        return False
    m = w.shape[0] if np.ndim(w) >= 3 else -1
    for p in params[1:]:
        a = np.asarray(inits[p])
        if str(a.dtype) != dtype or a.shape != (m,):
            return False
    return True


def _folded(graph: Graph, conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    inits = graph.initializers
    w = np.asarray(inits[conv.inputs[1]])
    dtype = w.dtype
    scale, shift, mean, var = (np.asarray(inits[name], np.float64) for name in bn.inputs[1:5])
    s = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    b = np.asarray(inits[conv.inputs[2]], np.float64) if len(conv.inputs) > 2 and conv.inputs[2] \
        else np.zeros(w.shape[0])
    w_new = (w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(dtype)
    b_new = ((b - mean) * s + shift).astype(dtype)
    return w_new, b_new


FOLD_BATCHNORM = Pass("fold-batchnorm", fold_batchnorm,
                      "fold an inference BatchNormalization into the Conv before it (weights and bias)")
