"""An inference ``BatchNormalization`` (or a per-channel ``Mul``/``Add``) after a ``Conv`` folded into
the conv's weights and bias.

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

The same holds for an affine per output channel written out as ops, as Paddle exports its
``affine_channel`` (a ``Mul`` by a (1, M, 1, 1) constant, then an ``Add``): a ``Mul``, ``Div``,
``Add`` or ``Sub`` of the conv's output (the first operand of ``Div``/``Sub``) by a constant
initializer that varies along the channel axis only (or not at all) folds the same way, one op
after another.  (In PP-OCRv4's recogniser 28 convs are followed by such a pair, which the
elementwise epilogue otherwise computed at more than the conv's own cost.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .names import fresh_name
from .pipeline import Pass

_FLOATS = ("float32", "float64")


_AFFINE_OPS = ("Mul", "Div", "Add", "Sub")


def fold_batchnorm(graph: Graph) -> Graph:
    """``graph`` with every foldable Conv + BatchNormalization (or per-channel Mul/Div/Add/Sub)
    pair as one Conv, repeatedly (a Mul then an Add fold one after the other); the same object
    when there is none."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    while True:
        folded = _fold_once(graph)
        if folded is graph:
            return graph
        graph = folded


def _fold_once(graph: Graph) -> Graph:
    outputs = {t.name for t in graph.outputs}
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    folds: dict[int, Node] = {}  # id(bn or affine op) -> the conv it folds into
    taken: set[int] = set()
    for op in graph.nodes:
        if op.op_type not in ("BatchNormalization",) + _AFFINE_OPS or not op.inputs:
            continue
        # Mul and Add commute: the conv may be their second operand
        sides = op.inputs[:2] if op.op_type in ("Mul", "Add") else op.inputs[:1]
        convs = [producers.get(name) for name in sides]
        conv = next((c for c in convs if c is not None and c.op_type == "Conv"), None)
        if conv is None or id(conv) in taken:
            continue
        ok = _foldable(graph, conv, op, outputs) if op.op_type == "BatchNormalization" \
            else _affine_foldable(graph, conv, op, outputs)
        if ok:
            folds[id(op)] = conv
            taken.add(id(conv))
    if not folds:
        return graph
    names_taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
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
        w_name = fresh_name(f"{conv.inputs[1]}_bn", names_taken)
        b_name = fresh_name(f"{conv.inputs[1]}_bn_bias", names_taken)
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


def _conv_weights(graph: Graph, conv: Node, outputs: set[str]) -> np.ndarray | None:
    """The conv's weights when its output (read by one op alone, not a graph output) can take a
    per-channel fold: constant float weights and bias of the output's dtype; else None."""
    if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1:
        return None
    if conv.outputs[0] in outputs or len(graph.consumers.get(conv.outputs[0], ())) != 1:
        return None
    inits = graph.initializers
    if conv.inputs[1] not in inits or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in inits):
        return None
    w = np.asarray(inits[conv.inputs[1]])
    if str(w.dtype) not in _FLOATS or w.ndim < 3 or graph.value_info[conv.outputs[0]].dtype != str(w.dtype):
        return None
    if len(conv.inputs) > 2 and conv.inputs[2]:
        b = np.asarray(inits[conv.inputs[2]])
        if b.dtype != w.dtype or b.shape != (w.shape[0],):
            return None
    return w


def _foldable(graph: Graph, conv: Node, bn: Node, outputs: set[str]) -> bool:
    w = _conv_weights(graph, conv, outputs)
    if w is None or bn.domain or len(bn.inputs) != 5 or len([o for o in bn.outputs if o]) != 1 \
            or not bn.outputs[0]:
        return False
    if int(bn.attr("training_mode", 0)) != 0 or int(bn.attr("spatial", 1)) != 1:
        return False
    params = [graph.initializers.get(name) for name in bn.inputs[1:]]
    return all(p is not None and np.asarray(p).dtype == w.dtype and np.shape(p) == (w.shape[0],) for p in params)


def _affine_foldable(graph: Graph, conv: Node, op: Node, outputs: set[str]) -> bool:
    if op.domain or len(op.inputs) != 2 or len(op.outputs) != 1 or op.inputs[0] == op.inputs[1]:
        return False
    w = _conv_weights(graph, conv, outputs)
    if w is None:
        return False
    y = conv.outputs[0]
    if op.op_type in ("Div", "Sub") and op.inputs[0] != y:
        return False
    other = op.inputs[1] if op.inputs[0] == y else op.inputs[0]
    c = graph.initializers.get(other)
    if c is None or str(np.asarray(c).dtype) != str(w.dtype) or not np.isfinite(c).all():
        return False
    if op.op_type == "Div" and (np.asarray(c) == 0).any():
        return False  # x / 0 is inf or NaN by x's sign; folded weights would not say which
    return _per_channel(np.asarray(c), w.shape[0], len(graph.value_info[y].shape)) is not None \
        and graph.value_info[op.outputs[0]].shape == graph.value_info[y].shape


def _per_channel(c: np.ndarray, m: int, rank: int) -> np.ndarray | None:
    """``c`` as one value per output channel (shape (m,)) when, broadcast against a conv output of
    rank ``rank`` (N, M, spatial...), it varies along the channel axis only; else None."""
    if c.ndim > rank:
        return None
    full = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(full) if i != 1) or full[1] not in (1, m):
        return None
    return np.broadcast_to(c.reshape(-1), (m,))  # (one value, or one per channel)


def _scale_shift(graph: Graph, conv: Node, op: Node) -> tuple[np.ndarray, np.ndarray]:
    """The op after the conv as ``y -> y * scale + shift`` per output channel, in float64."""
    inits = graph.initializers
    m = inits[conv.inputs[1]].shape[0]
    if op.op_type == "BatchNormalization":
        gamma, beta, mean, var = (np.asarray(inits[name], np.float64) for name in op.inputs[1:5])
        scale = gamma / np.sqrt(var + float(op.attr("epsilon", 1e-5)))
        return scale, beta - mean * scale
    y = conv.outputs[0]
    other = op.inputs[1] if op.inputs[0] == y else op.inputs[0]
    per_channel = _per_channel(np.asarray(inits[other]), m, len(graph.value_info[y].shape))
    assert per_channel is not None  # _affine_foldable accepted the pair only if it is
    c = per_channel.astype(np.float64)
    ones, zeros = np.ones(m), np.zeros(m)
    return {"Mul": (c, zeros), "Div": (1.0 / c, zeros), "Add": (ones, c), "Sub": (ones, -c)}[op.op_type]


def _folded(graph: Graph, conv: Node, op: Node) -> tuple[np.ndarray, np.ndarray]:
    """The conv's new weights and bias: ``W * scale`` and ``b * scale + shift`` per output channel
    (computed in float64, stored in the weights' dtype)."""
    inits = graph.initializers
    w = np.asarray(inits[conv.inputs[1]])
    scale, shift = _scale_shift(graph, conv, op)
    b = np.asarray(inits[conv.inputs[2]], np.float64) if len(conv.inputs) > 2 and conv.inputs[2] \
        else np.zeros(w.shape[0])
    w_new = w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    return w_new.astype(w.dtype), (b * scale + shift).astype(w.dtype)


FOLD_BATCHNORM = Pass("fold-batchnorm", fold_batchnorm,
                      "fold an inference BatchNormalization, or a per-channel Mul/Div/Add/Sub by a constant, "
                      "into the Conv before it (weights and bias)")
