"""DequantizeLinear -> Conv / MatMul / Gemm [-> Relu] -> QuantizeLinear as one QLinearConv / QLinearMatMul.

A QDQ model (onnxruntime's ``quantize_static`` with ``QuantFormat.QDQ``) keeps its convolutions and
GEMMs in float between a DequantizeLinear of each operand and a QuantizeLinear of the result::

    x_q -> DequantizeLinear(x_s, x_z) --.
    w_q -> DequantizeLinear(w_s, w_z) ---> Conv [-> Relu] -> QuantizeLinear(y_s, y_z) -> y_q
    b_32 -> DequantizeLinear(x_s * w_s) -'

which is what QLinearConv computes in integers: ``y_q = saturate(rint((x_q - x_z) * (w_q - w_z) * x_s * w_s
/ y_s + b_32 * x_s * w_s / y_s) + y_z)``.  A runtime that fuses the pattern (onnxruntime does, into
QLinearConv / QLinearMatMul) runs the 8-bit kernel; one that does not runs the float op on dequantized
tensors, at float speed plus the (de)quantization passes.  The fused form differs from the float one by
rounding only: the float conv sums float products, the integer one exact integer products, so the value
before the final rounding differs by a few float32 ulps and an output that lands on a rounding boundary
can move by one step (onnxruntime's own QDQ execution has the same difference).

Rewritten when the pattern is exact:

* the activation's DequantizeLinear and the QuantizeLinear have constant per-tensor scales and zero points
  (8-bit, plain: no blocked quantization, ``saturate`` 1);
* the weight is a constant 8-bit initializer dequantized per tensor or per output channel (Conv: axis 0;
  MatMul: the last axis of a 2-D B; Gemm: B's N axis, B transposed to (K, N) here when ``transB``);
* the bias (Conv only) is absent, a constant int32 dequantized with zero point 0 (kept as is when its scale
  is ``x_s * w_s``, else re-expressed in that scale), or a float constant (quantized to int32 at scale
  ``x_s * w_s``, rounding half to even, as onnxruntime's quantizer does); a Gemm with a bias stays float
  (QLinearMatMul has no bias input);
* the float result is read only by the QuantizeLinear, or only by a Relu read only by it, and is not a graph
  output; a Relu folds only when the output zero point is the type's minimum (then the saturation is the
  Relu: ``Q(relu(v)) = max(Q(v), y_z)``);
* Gemm: ``alpha`` 1, ``transA`` 0, a 2-D A.

DequantizeLinear nodes left with no reader go.  Hardware-neutral; a backend opts in by listing
:data:`QDQ_TO_QLINEAR` (or :func:`qdq_to_qlinear_pass` with the convs its QLinearConv kernel runs well)
before :data:`~rammer.passes.QDQ_AS_FLOAT`, which then turns the remaining pairs into float ops.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .names import fresh_name
from .pipeline import Pass
from .rewrite import sole_reader

__all__ = ["QDQ_TO_QLINEAR", "qdq_to_qlinear", "qdq_to_qlinear_pass"]

_EIGHT_BIT = ("uint8", "int8")
_TYPE_MIN = {"uint8": 0, "int8": -128}


@dataclass(frozen=True)
class _Quant:
    """A constant per-tensor or per-axis (de)quantization: its 8-bit tensor and the names (or values)
    of its scale and zero point."""

    tensor: str
    scale: str
    zero_point: str  # "" when the node has none (zero of the tensor's type)
    scale_value: np.ndarray
    zero_value: np.ndarray


def _plain(node: Node) -> bool:
    return (node.domain == "" and not int(node.attrs.get("block_size", 0)) and not int(node.attrs.get("precision", 0))
            and int(node.attrs.get("saturate", 1)) == 1)


def _quant(graph: Graph, node: Node | None, op: str, per_axis: tuple[int, int] | None = None) -> _Quant | None:
    """``node`` as a constant (de)quantization of type ``op``: per tensor, or when ``per_axis`` is
    ``(rank, axis)`` also one scale per index of that axis of a rank-``rank`` tensor."""
    if node is None or node.op_type != op or not _plain(node) or len(node.inputs) < 2:
        return None
    scale = graph.initializers.get(node.inputs[1])
    zp_name = node.inputs[2] if len(node.inputs) > 2 else ""
    zp = graph.initializers.get(zp_name) if zp_name else np.zeros((), np.uint8)
    if scale is None or zp is None or np.asarray(scale).dtype != np.float32:
        return None
    scale, zp = np.asarray(scale), np.asarray(zp)
    if scale.size != 1 or zp.size != 1:
        if per_axis is None or scale.ndim != 1 or zp.shape not in (scale.shape, ()):
            return None
        rank, axis = per_axis
        stated = int(node.attrs.get("axis", 1))
        if (stated + rank if stated < 0 else stated) != axis:
            return None
    return _Quant(node.inputs[0], node.inputs[1], zp_name, scale.reshape(-1), zp.reshape(-1))


def _depthwise_wanted(depthwise: bool | Collection[tuple[int, int]], conv: Node, w_shape: tuple[int, ...]) -> bool:
    """Whether a depthwise conv is rewritten: ``depthwise`` True or False for all of them, or the (kernel,
    stride) pairs of the square, undilated windows to rewrite."""
    if isinstance(depthwise, bool):
        return depthwise
    kernel = set(w_shape[2:])
    strides = set(conv.attrs.get("strides", [1] * (len(w_shape) - 2)))
    if len(kernel) != 1 or len(strides) != 1 or any(int(d) != 1 for d in conv.attrs.get("dilations", [])):
        return False
    return (kernel.pop(), int(strides.pop())) in depthwise


def qdq_to_qlinear(graph: Graph, conv_ranks: Collection[int] | None = None,
                   depthwise: bool | Collection[tuple[int, int]] = True) -> Graph:
    """``graph`` with its exact DQ -> Conv / MatMul / Gemm [-> Relu] -> Q patterns as QLinearConv /
    QLinearMatMul (the same object when there is none); ``conv_ranks``: the spatial ranks of the convs
    to rewrite (None: all); ``depthwise``: rewrite depthwise convs (one input channel per group) too, or
    only those with a square, undilated window whose (kernel, stride) is in the collection."""
    if int(graph.opset.get("", 1)) < 10:  # QLinearConv / QLinearMatMul are ops from opset 10
        return graph
    producer = graph.producer
    only_reader = sole_reader(graph)
    outputs = {t.name for t in graph.outputs}
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    replaced: dict[int, Node] = {}  # the float op's id -> its QLinear node
    gone: set[int] = set()  # the Relu and QuantizeLinear each rewrite absorbs

    def const(stem: str, value: np.ndarray) -> str:
        name = fresh_name(stem, taken)
        inits[name] = value
        value_info[name] = TensorInfo(name, str(value.dtype), tuple(value.shape))
        return name

    for node in graph.nodes:
        if node.op_type not in ("Conv", "MatMul", "Gemm") or node.domain or len(node.outputs) != 1:
            continue
        # The float result, through an optional Relu, into one QuantizeLinear.
        after = only_reader(node.outputs[0])
        relu = None
        if after is not None and after.op_type == "Relu":
            relu, after = after, only_reader(after.outputs[0])
        out = _quant(graph, after, "QuantizeLinear")
        if out is None or after is None:
            continue
        y_type = value_info[after.outputs[0]].dtype
        if y_type not in _EIGHT_BIT or (relu is not None and int(out.zero_value[0]) != _TYPE_MIN[y_type]):
            continue
        x = _quant(graph, producer.get(node.inputs[0]), "DequantizeLinear")
        if x is None or value_info[x.tensor].dtype not in _EIGHT_BIT:
            continue
        w_shape = value_info[node.inputs[1]].shape
        if node.op_type == "Conv":
            if conv_ranks is not None and len(w_shape) - 2 not in conv_ranks:
                continue
            if w_shape[1] == 1 and int(node.attrs.get("group", 1)) > 1 and not _depthwise_wanted(depthwise, node,
                                                                                              w_shape):
                continue
            channel_axis = 0
        elif node.op_type == "MatMul":
            channel_axis = 1
        else:
            if (float(node.attrs.get("alpha", 1.0)) != 1.0 or int(node.attrs.get("transA", 0))
                    or len(node.inputs) > 2 and node.inputs[2]):
                continue
            channel_axis = 0 if int(node.attrs.get("transB", 0)) else 1
        if len(w_shape) < 3 if node.op_type == "Conv" else len(w_shape) != 2:
            continue
        if x.scale_value.size != 1 or x.zero_value.size != 1:
            continue
        stem = node.name or node.outputs[0]
        w = _quant(graph, producer.get(node.inputs[1]), "DequantizeLinear", (len(w_shape), channel_axis))
        if w is not None and (w.tensor not in graph.initializers
                              or np.asarray(graph.initializers[w.tensor]).dtype.name not in _EIGHT_BIT):
            continue
        if w is None:  # the frontend folded DequantizeLinear(w): the float weights, if on an 8-bit grid
            found = _on_int8_grid(graph.initializers.get(node.inputs[1]), channel_axis)
            if found is None:
                continue
            w_int8, w_scale = found
            w = _Quant(const(f"{stem}.w_int8", w_int8), const(f"{stem}.w_scale", w_scale), "", w_scale,
                       np.zeros(1, np.int8))
        x_zp = x.zero_point or const(f"{stem}.x_zero_point", np.zeros((), value_info[x.tensor].dtype))
        w_zp = w.zero_point or const(f"{stem}.w_zero_point", np.zeros((), np.asarray(inits[w.tensor]).dtype))
        y_zp = out.zero_point or const(f"{stem}.y_zero_point", np.zeros((), y_type))
        if node.op_type == "Conv":
            bias = _int32_bias(graph, producer, node, x, w, lambda v: const(f"{stem}.bias_int32", v))
            if bias is None:
                continue
            inputs = [x.tensor, x.scale, x_zp, w.tensor, w.scale, w_zp, out.scale, y_zp] + ([bias] if bias else [])
            fused = Node("QLinearConv", tuple(inputs), (after.outputs[0],), fresh_name(f"{stem}.qlinear", taken),
                         attrs=dict(node.attrs))
        else:
            b = w.tensor
            if node.op_type == "Gemm" and int(node.attrs.get("transB", 0)):
                b = const(f"{w.tensor}.transposed", np.ascontiguousarray(np.asarray(inits[w.tensor]).T))
            inputs = [x.tensor, x.scale, x_zp, b, w.scale, w_zp, out.scale, y_zp]
            fused = Node("QLinearMatMul", tuple(inputs), (after.outputs[0],), fresh_name(f"{stem}.qlinear", taken))
        replaced[id(node)] = fused
        gone |= {id(after)} | ({id(relu)} if relu is not None else set())
    if not replaced:
        return graph
    kept = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
    # DequantizeLinear (and float results) nobody reads any more go, with their value infos.
    while True:
        read = {i for n in kept for i in n.inputs} | outputs
        dead = {id(n) for n in kept if n.op_type == "DequantizeLinear" and not any(o in read for o in n.outputs)}
        if not dead:
            break
        kept = [n for n in kept if id(n) not in dead]
    read = {i for n in kept for i in n.inputs} | outputs
    produced = {o for n in kept for o in n.outputs}
    for name in list(value_info):
        if name not in read and name not in produced and name not in inits:
            del value_info[name]
    # So do the constants only the rewritten ops read (the float weights the frontend folded, new ones
    # of a pattern that was then refused).
    kept_ids = {id(n) for n in kept}
    dropped = {i for n in graph.nodes if id(n) not in kept_ids for i in n.inputs}
    inputs = {t.name for t in graph.inputs}
    for name in [k for k in inits
                 if k not in read and k not in inputs and (k in dropped or k not in graph.initializers)]:
        del inits[name]
        value_info.pop(name, None)
    return graph.replace(nodes=tuple(kept), initializers=inits, value_info=value_info)


def _int32_bias(graph: Graph, producer: Mapping[str, Node], conv: Node, x: _Quant, w: _Quant,
                new_const: Callable[[np.ndarray], str]) -> str | None:
    """The conv's bias as an int32 tensor at scale ``x_s * w_s``: "" when it has none, the name of the
    int32 constant (the dequantized one as is, or a new one), None when it is not a constant."""
    if len(conv.inputs) < 3 or not conv.inputs[2]:
        return ""
    name = conv.inputs[2]
    channels = int(np.prod(graph.value_info[name].shape))
    if w.scale_value.size not in (1, channels):
        return None
    wanted = np.broadcast_to(x.scale_value.astype(np.float32) * w.scale_value.astype(np.float32), (channels,))
    if name in graph.initializers:
        value = np.asarray(graph.initializers[name])
        if value.dtype.kind != "f":
            return None
        floats = np.broadcast_to(value.astype(np.float64).reshape(-1), (channels,))
    else:
        deq = _quant(graph, producer.get(name), "DequantizeLinear", (1, 0))
        if deq is None or deq.tensor not in graph.initializers or np.any(deq.zero_value != 0):
            return None
        ints = np.asarray(graph.initializers[deq.tensor])
        if ints.dtype != np.int32:
            return None
        if deq.scale_value.size in (1, channels) and np.array_equal(
                np.broadcast_to(deq.scale_value, wanted.shape), wanted) and ints.shape == (channels,):
            return deq.tensor
        floats = ints.astype(np.float64).reshape(-1) * deq.scale_value.astype(np.float64)
    quantized = np.rint(floats / wanted.astype(np.float64))
    info = np.iinfo(np.int32)
    return new_const(np.clip(quantized, info.min, info.max).astype(np.int32).reshape(-1))


def _on_int8_grid(weights: np.ndarray | None, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Float32 weights as int8 ``q`` and one float32 scale ``s`` per index of ``axis`` with
    ``float32(q * s) == weights`` bit for bit (what DequantizeLinear of symmetric int8 weights gives), or
    None when some slice is not on such a grid.  The scale of a slice is ``max |w| / t`` of the slice (t from
    127 down) or of the whole tensor, up to a few ulps, each candidate checked exactly."""
    if weights is None or weights.dtype != np.float32 or weights.ndim < 2:
        return None
    rows = np.moveaxis(np.asarray(weights), axis, 0).reshape(weights.shape[axis], -1)
    peak = np.abs(rows).max(axis=1)
    if not np.all(np.isfinite(peak)) or not np.any(peak > 0):
        return None
    scale = np.zeros(len(rows), np.float32)
    pending = peak > 0  # an all-zero slice (a pruned channel) is on every grid
    # Candidates, in order: per-channel scales whose peak is +-127 / -128 (onnxruntime's symmetric
    # quantization), one scale for the whole tensor (per-tensor quantization: slices need not reach the
    # peak), then per-channel peaks of 126 down to 1 (quantizers that do not stretch to the full range);
    # each a few ulps either way.  The first that fits a slice is the finest grid it lies on.
    whole = np.full_like(peak, peak.max())
    bases = [(peak, 127), (peak, 128), (whole, 127), (whole, 128)] + [(peak, top) for top in range(126, 0, -1)]
    sample = min(rows.shape[1], 16)  # a cheap first check; the full one only for slices that pass it
    for top_peak, top in bases:
        base = (top_peak / np.float32(top)).astype(np.float32)
        for ulps in (0, 1, -1, 2, -2):
            if not pending.any():
                break
            todo = np.flatnonzero(pending)  # only the slices no earlier candidate matched
            cand = base[todo]
            for _ in range(abs(ulps)):
                cand = np.nextafter(cand, np.float32(np.inf if ulps > 0 else 0)).astype(np.float32)
            for cols in (slice(0, sample), slice(None)):
                part = rows[todo, cols]
                q = np.rint(part / cand[:, None])
                fits = np.all((q >= -128) & (q <= 127) & ((q.astype(np.float32) * cand[:, None]) == part), axis=1)
                todo, cand = todo[fits], cand[fits]
            scale[todo] = cand
            pending[todo] = False
    if pending.any():
        return None
    # its scale matters only for a bias re-expressed at x_s * w_s: the largest found keeps that exact enough
    scale[peak == 0] = scale.max()
    q = np.rint(rows / scale[:, None]).astype(np.int8).reshape(np.moveaxis(weights, axis, 0).shape)
    return np.ascontiguousarray(np.moveaxis(q, 0, axis)), scale


def qdq_to_qlinear_pass(conv_ranks: Collection[int] | None = None,
                        depthwise: bool | Collection[tuple[int, int]] = True) -> Pass:
    """The pass over the convs a backend's QLinearConv kernel runs well: these spatial ranks only, and
    depthwise ones only when ``depthwise`` (or only the (kernel, stride) windows it lists)."""
    ranks = None if conv_ranks is None else frozenset(conv_ranks)
    if not isinstance(depthwise, bool):
        depthwise = frozenset((int(k), int(s)) for k, s in depthwise)
    return Pass("qdq-to-qlinear", lambda graph: qdq_to_qlinear(graph, ranks, depthwise),
                "DQ -> Conv/MatMul/Gemm [-> Relu] -> Q as QLinearConv / QLinearMatMul (the 8-bit kernels)")


QDQ_TO_QLINEAR = qdq_to_qlinear_pass()
