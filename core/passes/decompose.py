"""Rewrites of ops seen in real published models into simpler ops (views, Conv, elementwise, Concat)
that backends compile; hardware-neutral, so any backend may put :data:`DECOMPOSE` in its pipeline.

Each rewrite is exact (same values as the ONNX definition) and applies only to
the forms it names; anything else is left for the reference fallback:

* ``ConstantOfShape`` of a constant shape (Caffe2 exports fill their dummy weights
  with it; the frontend folds only up to 16M elements) becomes an initializer.
* ``Dropout`` (inference) whose mask output nobody reads loses that output, so it
  is a view.
* ``Resize`` / nearest with integer scale factors (``asymmetric`` + ``floor``, or
  ``half_pixel`` / ``pytorch_half_pixel`` + ``round_prefer_*``, which pick the same
  pixels at an integer factor) becomes Reshape -> Expand -> Reshape: a broadcast
  view copied once.
* ``ConvTranspose`` whose kernel equals its stride (no pads, dilations or groups;
  the DB detectors' 2x upsampling) becomes a 1x1 Conv to ``M*kh*kw`` channels and a
  depth-to-space Reshape -> Transpose -> Reshape: every output pixel takes exactly one tap.
* ``LRN`` becomes ``x / (bias + alpha / size * window_sum(x*x)) ** beta``, the channel
  window summed from ``size`` shifted views of the zero-padded squares in one fused pass.
* ``Pad`` in ``reflect`` mode with constant pads becomes Concats of reversed Slices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .names import fresh_name
from .pipeline import Pass


class _Builder:
    """New nodes, tensors and constants for one graph, with fresh names."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
        self.node_names = {n.name for n in graph.nodes}
        self.value_info: dict[str, TensorInfo] = dict(graph.value_info)
        self.initializers: dict[str, np.ndarray] = dict(graph.initializers)
        self.nodes: list[Node] = []
        self.changed = False

    def const(self, base: str, value: np.ndarray) -> str:
        name = fresh_name(base, self.taken)
        self.initializers[name] = value
        self.value_info[name] = TensorInfo(name, value.dtype.name, value.shape)
        return name

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], base: str, dtype: str = "float32",
            output: str | None = None, **attrs) -> str:
        out = output or fresh_name(base, self.taken)
        if output is None:
            self.value_info[out] = TensorInfo(out, dtype, shape)
        self.nodes.append(Node(op, tuple(inputs), (out,), name=fresh_name(base, self.node_names), attrs=attrs))
        return out

    def reshape(self, x: str, shape: tuple[int, ...], base: str, output: str | None = None) -> str:
        return self.add("Reshape", [x, self.const(f"{base}_shape", np.array(shape, dtype=np.int64))], shape, base,
                        output=output)


def _const(graph: Graph, name: str) -> np.ndarray | None:
    return graph.initializers.get(name) if name else None


def _constant_of_shape(b: _Builder, node: Node) -> bool:
    shape = _const(b.graph, node.inputs[0])
    if shape is None:
        return False
    value = node.attrs.get("value")
    fill = np.asarray(value).ravel()[0] if value is not None else np.float32(0)
    out = node.outputs[0]
    info = b.graph.value_info[out]
    b.initializers[out] = np.full(info.shape, fill, dtype=info.np_dtype)
    return True


def _dropout(b: _Builder, node: Node, readers: Mapping[str, tuple[Node, ...]], outputs: set[str]) -> bool:
    extra = [o for o in node.outputs[1:] if o]
    if not extra or any(o in outputs or readers.get(o) for o in extra):
        return False
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    if training:
        flag = _const(b.graph, training)
        if flag is None or bool(np.asarray(flag).ravel()[0]):
            return False
    b.nodes.append(replace(node, outputs=node.outputs[:1]))
    for o in extra:
        b.value_info.pop(o, None)
    return True


def _integer_factors(graph: Graph, node: Node) -> list[int] | None:
    x = graph.value_info[node.inputs[0]]
    y = graph.value_info[node.outputs[0]]
    if len(x.shape) != len(y.shape) or any(d == 0 for d in x.shape):
        return None
    factors = []
    for a, b in zip(x.shape, y.shape):
        if b % a:
            return None
        factors.append(b // a)
    scales = _const(graph, node.inputs[2]) if len(node.inputs) > 2 else None
    if scales is not None and scales.size:
        # the coordinate mapping uses the given scales: they must be the integer factors
        if [float(s) for s in scales.ravel()] != [float(f) for f in factors]:
            return None
    elif len(node.inputs) > 2 and node.inputs[2] and scales is None:
        return None
    if len(node.inputs) > 3 and node.inputs[3] and _const(graph, node.inputs[3]) is None:
        return None
    return factors


def _resize(b: _Builder, node: Node) -> bool:
    g = b.graph
    if int(g.opset.get("", 1)) < 11 or node.attrs.get("mode", "nearest") != "nearest":
        return False
    if node.attrs.get("antialias", 0) or node.attrs.get("axes") is not None:
        return False
    ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    nm = node.attrs.get("nearest_mode", "round_prefer_floor")
    if not ((ctm == "asymmetric" and nm == "floor") or
            (ctm in ("half_pixel", "pytorch_half_pixel") and nm in ("round_prefer_floor", "round_prefer_ceil"))):
        return False
    if g.value_info[node.inputs[0]].dtype != "float32":
        return False
    factors = _integer_factors(g, node)
    if factors is None:
        return False
    x = g.value_info[node.inputs[0]].shape
    if ctm == "pytorch_half_pixel" and any(f > 1 and d * f == 1 for d, f in zip(x, factors)):
        return False
    base = node.name or "resize"
    split = tuple(v for d in x for v in (d, 1))
    wide = tuple(v for d, f in zip(x, factors) for v in (d, f))
    t = b.reshape(node.inputs[0], split, f"{base}_split")
    t = b.add("Expand", [t, b.const(f"{base}_wide_shape", np.array(wide, dtype=np.int64))], wide, f"{base}_wide")
    b.reshape(t, g.value_info[node.outputs[0]].shape, f"{base}_merge", output=node.outputs[0])
    return True


def _conv_transpose(b: _Builder, node: Node) -> bool:
    g = b.graph
    w = _const(g, node.inputs[1])
    x = g.value_info[node.inputs[0]]
    if w is None or w.ndim != 4 or len(x.shape) != 4 or x.dtype != "float32":
        return False
    c, m, kh, kw = w.shape
    a = node.attrs
    if list(a.get("strides", [1, 1])) != [kh, kw] or any(a.get("pads", [0, 0, 0, 0])) or \
            any(d != 1 for d in a.get("dilations", [1, 1])) or int(a.get("group", 1)) != 1 or \
            any(a.get("output_padding", [0, 0])) or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    n, _, h, wd = x.shape
    y = g.value_info[node.outputs[0]]
    if y.shape != (n, m, h * kh, wd * kw):
        return False
    bias = _const(g, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(node.inputs) > 2 and node.inputs[2] and bias is None:
        return False
    base = node.name or "convtranspose"
    # 1x1 conv weights [m*kh*kw, c]: output channel (o, i, j) = sum_c x[c] * w[c, o, i, j]
    w1 = np.ascontiguousarray(np.asarray(w, dtype=np.float32).transpose(1, 2, 3, 0).reshape(m * kh * kw, c, 1, 1))
    ins = [node.inputs[0], b.const(f"{base}_w1x1", w1)]
    if bias is not None:
        ins.append(b.const(f"{base}_b1x1", np.repeat(np.asarray(bias, dtype=np.float32), kh * kw)))
    t = b.add("Conv", ins, (n, m * kh * kw, h, wd), f"{base}_taps", kernel_shape=[1, 1])
    t = b.reshape(t, (n, m, kh, kw, h, wd), f"{base}_split")
    t = b.add("Transpose", [t], (n, m, h, kh, wd, kw), f"{base}_interleave", perm=[0, 1, 4, 2, 5, 3])
    b.reshape(t, y.shape, f"{base}_merge", output=node.outputs[0])
    return True


def _lrn(b: _Builder, node: Node) -> bool:
    g = b.graph
    x = g.value_info[node.inputs[0]]
    if x.dtype != "float32" or len(x.shape) < 3:
        return False
    opset = int(g.opset.get("", 1))
    size = int(node.attrs["size"])
    alpha = float(node.attrs.get("alpha", 1e-4))
    beta = float(node.attrs.get("beta", 0.75))
    bias = float(node.attrs.get("bias", 1.0))
    rank, c = len(x.shape), x.shape[1]
    base = node.name or "lrn"
    i64, f32 = np.int64, np.float32
    sq = b.add("Mul", [node.inputs[0], node.inputs[0]], x.shape, f"{base}_square")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [0] * (2 * rank)
    pads[1], pads[1 + rank] = lo, hi
    padded_shape = (x.shape[0], c + lo + hi) + x.shape[2:]
    if opset >= 11:
        padded = b.add("Pad", [sq, b.const(f"{base}_pads", np.array(pads, dtype=i64))], padded_shape,
                       f"{base}_padded")
    else:
        padded = b.add("Pad", [sq], padded_shape, f"{base}_padded", pads=pads)
    # the channel window as `size` shifted views of the padded squares, summed by one fused pass
    total = ""
    for k in range(size):
        if opset >= 10:
            part = b.add("Slice", [padded, b.const(f"{base}_start", np.array([k], dtype=i64)),
                                   b.const(f"{base}_end", np.array([k + c], dtype=i64)),
                                   b.const(f"{base}_axis", np.array([1], dtype=i64))], x.shape, f"{base}_tap{k}")
        else:
            part = b.add("Slice", [padded], x.shape, f"{base}_tap{k}", starts=[k], ends=[k + c], axes=[1])
        total = part if not total else b.add("Add", [total, part], x.shape, f"{base}_sum{k}")
    t = b.add("Mul", [total, b.const(f"{base}_alpha", np.array(alpha / size, dtype=f32))], x.shape, f"{base}_scaled")
    t = b.add("Add", [t, b.const(f"{base}_bias", np.array(bias, dtype=f32))], x.shape, f"{base}_biased")
    t = b.add("Pow", [t, b.const(f"{base}_beta", np.array(beta, dtype=f32))], x.shape, f"{base}_denominator")
    b.add("Div", [node.inputs[0], t], x.shape, base, output=node.outputs[0])
    return True


def _reflect_pad(b: _Builder, node: Node) -> bool:
    g = b.graph
    if int(g.opset.get("", 1)) < 11 or node.attrs.get("mode") != "reflect":
        return False
    if len(node.inputs) > 3 and node.inputs[3]:
        return False  # axes: rare, left to the fallback
    pads = _const(g, node.inputs[1])
    if pads is None:
        return False
    x = g.value_info[node.inputs[0]]
    rank = len(x.shape)
    pads = [int(p) for p in np.asarray(pads).ravel()]
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        return False
    if any((pads[a] or pads[a + rank]) and x.shape[a] <= max(pads[a], pads[a + rank]) for a in range(rank)):
        return False  # reflecting more than the axis holds
    base = node.name or "pad"
    cur, shape = node.inputs[0], list(x.shape)
    axes = [a for a in range(rank) if pads[a] or pads[a + rank]]
    for k, a in enumerate(axes):
        before, after = pads[a], pads[a + rank]
        parts = []
        i64 = np.int64

        def rev(start: int, end: int, count: int, tag: str) -> str:
            s = [b.const(f"{base}_{tag}_{v}", np.array([val], dtype=i64))
                 for v, val in (("start", start), ("end", end), ("axis", a), ("step", -1))]
            out_shape = tuple(count if i == a else d for i, d in enumerate(shape))
            return b.add("Slice", [cur] + s, out_shape, f"{base}_{tag}", dtype=x.dtype)

        if before:
            parts.append(rev(before, 0, before, f"before{a}"))  # x[before], ..., x[1]
        parts.append(cur)
        if after:
            parts.append(rev(-2, -2 - after, after, f"after{a}"))  # x[-2], ..., x[-1-after]
        shape[a] += before + after
        last = k == len(axes) - 1
        cur = b.add("Concat", parts, tuple(shape), f"{base}_axis{a}", dtype=x.dtype, axis=a,
                    output=node.outputs[0] if last else None)
    return True


def decompose_model_ops(graph: Graph) -> Graph:
    """``graph`` with the rewrites above applied (the same object when none applies)."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    b = _Builder(graph)
    readers = graph.consumers
    outputs = {t.name for t in graph.outputs}
    for node in graph.nodes:
        done = False
        if not node.domain:
            op = node.op_type
            if op == "ConstantOfShape":
                done = _constant_of_shape(b, node)
            elif op == "Dropout":
                done = _dropout(b, node, readers, outputs)
            elif op == "Resize":
                done = _resize(b, node)
            elif op == "ConvTranspose":
                done = _conv_transpose(b, node)
            elif op == "LRN":
                done = _lrn(b, node)
            elif op == "Pad":
                done = _reflect_pad(b, node)
        if done:
            b.changed = True
        else:
            b.nodes.append(node)
    if not b.changed:
        return graph
    return graph.replace(nodes=tuple(b.nodes), initializers=b.initializers, value_info=b.value_info)


#: The pass (the cpu pipeline runs it first).
DECOMPOSE = Pass("decompose", decompose_model_ops,
                       "ConstantOfShape, Dropout masks, nearest Resize, stride-sized ConvTranspose, LRN and "
                       "reflect Pad as simpler ops")
