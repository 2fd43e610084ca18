"""Post-training int8 quantization to the TFLite / CMSIS-NN spec, from calibration data.

* weights: int8, symmetric, one scale per output channel (``[-127, 127]``, zero point 0);
* activations: int8, asymmetric, one scale and zero point per tensor, from the min/max seen on the
  calibration data (the range always contains 0, so real 0 is exactly representable);
* bias: int32 with scale ``s_in * s_w[k]``;
* requantization: ``M = s_in * s_w[k] / s_out`` as a q31 multiplier and shift
  (:func:`rammer.backends.mcu.fixedpoint.quantize_multiplier`), applied with
  MultiplyByQuantizedMultiplier; fused ReLU/ReLU6 are the clamp bounds of the output;
* pooling and a stand-alone ReLU keep their input's scale and zero point (as TFLite requires);
* add: TFLite's int8 add (both inputs shifted left by 20, each rescaled to twice the larger input
  scale, the sum rescaled to the output).

A layer whose weights come from the weight pool (:mod:`.pool`) keeps the same format: its int8
weights are the pool's int8 vectors, its per-channel scale ``alpha[k] * pool_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rammer.errors import CompileError

from .fixedpoint import quantize_multiplier
from .layers import FloatLayer, FloatNet, run_float


@dataclass
class QTensor:
    id: int
    shape: tuple[int, int, int]
    scale: float
    zero_point: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape))


@dataclass
class QLayer:
    kind: str
    name: str
    inputs: tuple[int, ...]
    output: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: conv [K, kh, kw, C], dwconv [kh, kw, C], fc [K, C]; int8 (the pool's vectors when pooled).
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None  # int32 [K]
    mult: np.ndarray | None = None  # int32 [K]
    shift: np.ndarray | None = None  # int32 [K]
    weight_scale: np.ndarray | None = None  # float32 values [K] (what a .tflite stores)
    act_min: int = -128
    act_max: int = 127
    #: add: (mult1, shift1, mult2, shift2, mult_out, shift_out)
    add_params: tuple[int, ...] = ()
    #: Weight pool: 1-byte indices [K, kh, kw, C/8] (fc: [K, C/8]) or None (int8 path).
    indices: np.ndarray | None = None
    #: Why the layer stays int8 (empty when pooled or when it has no weights).
    reason: str = ""

    @property
    def pooled(self) -> bool:
        return self.indices is not None


@dataclass
class QModel:
    name: str
    tensors: dict[int, QTensor]
    layers: list[QLayer]
    input: int = 0
    output: int = 0
    #: The network's pool as int8 [P, 8] (None without a pool) and its real scale.
    pool: np.ndarray | None = None
    pool_scale: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def input_tensor(self) -> QTensor:
        return self.tensors[self.input]

    @property
    def output_tensor(self) -> QTensor:
        return self.tensors[self.output]


def activation_qparams(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) of an int8 tensor covering [lo, hi] (extended to contain 0)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    # Scales are float32, as stored in a .tflite: the multipliers are then exactly TFLite's.
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(-128 - np.round(lo / scale), -128, 127))
    return scale, zp


def quantize_input(x: np.ndarray, t: QTensor) -> np.ndarray:
    return np.clip(np.round(x / t.scale) + t.zero_point, -128, 127).astype(np.int8)


def dequantize(q: np.ndarray, t: QTensor) -> np.ndarray:
    return ((q.astype(np.float32) - t.zero_point) * t.scale).astype(np.float32)


def _act_bounds(act: str, t: QTensor) -> tuple[int, int]:
    if act == "relu":
        return max(-128, t.zero_point), 127
    if act == "relu6":
        # TFLite: zero_point + TfLiteRound(6.0f / scale) (float32 division, half away from zero)
        six = float(np.float32(6.0) / np.float32(t.scale))
        return max(-128, t.zero_point), min(127, t.zero_point + int(np.floor(six + 0.5)))
    return -128, 127


def _requant(s_in: float, s_w: np.ndarray, s_out: float) -> tuple[np.ndarray, np.ndarray]:
    # TFLite: (double)input_scale * (double)filter_scale / (double)output_scale, all float32 values.
    pairs = [quantize_multiplier(float(s_in * s / s_out)) for s in s_w]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.int32))


def quantize_weights(w: np.ndarray, axis0: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 (channel = axis 0, or the last axis for depthwise)."""
    wk = w.reshape(w.shape[0], -1) if axis0 else w.reshape(-1, w.shape[-1]).T
    amax = np.abs(wk).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32).astype(np.float64)
    q = np.clip(np.round(wk / scale[:, None]), -127, 127).astype(np.int8)
    q = q.reshape(w.shape) if axis0 else q.T.reshape(w.shape)
    return q, scale


@dataclass
class PooledWeights:
    """A layer's weights from the pool: indices and per-output-channel real scale ``alpha``."""

    indices: np.ndarray  # uint8, [K, kh, kw, C/8] or [K, C/8]
    alpha: np.ndarray  # float [K]


def quantize_net(net: FloatNet, calibration: np.ndarray, pooled: dict[str, PooledWeights] | None = None,
                 pool: np.ndarray | None = None, reasons: dict[str, str] | None = None) -> QModel:
    """``net`` as int8 layers, activation ranges from ``calibration`` [N, H, W, C] (float)."""
    if calibration.ndim != 4 or calibration.shape[1:] != net.input_shape:
        raise CompileError(f"calibration data for '{net.name}' must be [N, {', '.join(map(str, net.input_shape))}] "
                           f"(NHWC), got {list(calibration.shape)}")
    pooled = pooled or {}
    reasons = reasons or {}
    pool_q, pool_scale = None, 0.0
    if pool is not None:
        amax = float(np.abs(pool).max()) or 1.0
        pool_scale = amax / 127.0
        pool_q = np.clip(np.round(pool / pool_scale), -127, 127).astype(np.int8)
    fnet = _with_pooled_float(net, pooled, pool) if pooled else net
    vals = run_float(fnet, calibration, keep_all=True)
    tensors: dict[int, QTensor] = {}
    same_as_input = {"maxpool", "avgpool", "relu"}
    tensors[0] = QTensor(0, net.input_shape, *activation_qparams(vals[0].min(), vals[0].max()))
    layers: list[QLayer] = []
    for fl in fnet.layers:
        v = vals[fl.output]
        shape = tuple(v.shape[1:])
        if fl.kind in same_as_input:
            src = tensors[fl.inputs[0]]
            tensors[fl.output] = QTensor(fl.output, shape, src.scale, src.zero_point)
        else:
            tensors[fl.output] = QTensor(fl.output, shape, *activation_qparams(v.min(), v.max()))
        layers.append(_quantize_layer(fl, tensors, pooled.get(fl.name), pool_q, pool_scale,
                                      reasons.get(fl.name, "")))
    return QModel(net.name, tensors, layers, 0, net.output, pool_q, pool_scale)


def _with_pooled_float(net: FloatNet, pooled: dict[str, PooledWeights], pool: np.ndarray) -> FloatNet:
    """The float network with each pooled layer's weights replaced by alpha * pool vectors
    (calibration must see the weights that will run)."""
    from .pool import pooled_float_weight

    layers = []
    for fl in net.layers:
        pw = pooled.get(fl.name)
        if pw is not None:
            fl = FloatLayer(**{**fl.__dict__, "weight": pooled_float_weight(pw, pool, fl.weight.shape)})
        layers.append(fl)
    return FloatNet(net.name, net.input_shape, layers, net.shapes, net.output)


def _quantize_layer(fl: FloatLayer, tensors: dict[int, QTensor], pw: PooledWeights | None,
                    pool_q: np.ndarray | None, pool_scale: float, reason: str) -> QLayer:
    tin, tout = tensors[fl.inputs[0]], tensors[fl.output]
    ql = QLayer(fl.kind, fl.name, fl.inputs, fl.output, fl.kernel, fl.stride, fl.pad)
    amin, amax = _act_bounds(fl.act, tout)
    ql.act_min, ql.act_max = amin, amax
    if fl.kind in ("conv", "fc", "dwconv"):
        if pw is not None:
            w_q = pool_q[pw.indices.astype(np.int64)].reshape(fl.weight.shape)
            s_w = (pw.alpha * pool_scale).astype(np.float32).astype(np.float64)
            ql.indices = pw.indices.astype(np.uint8)
            if tin.zero_point != -128:
                raise CompileError(f"layer '{fl.name}' is pooled but its input (tensor {tin.id}) can be negative "
                                   f"(zero point {tin.zero_point}); bit-serial needs a ReLU before it")
        else:
            w_q, s_w = quantize_weights(fl.weight, axis0=fl.kind != "dwconv") if fl.kind != "dwconv" else \
                _dw_weights(fl.weight)
            ql.reason = reason
        ql.weight = w_q
        ql.weight_scale = np.asarray(s_w, np.float64)
        ql.bias = np.clip(np.round(fl.bias / (tin.scale * s_w)), -(1 << 31), (1 << 31) - 1).astype(np.int32)
        ql.mult, ql.shift = _requant(tin.scale, s_w, tout.scale)
    elif fl.kind == "add":
        t2 = tensors[fl.inputs[1]]
        twice = 2.0 * max(tin.scale, t2.scale)
        m1, s1 = quantize_multiplier(tin.scale / twice)
        m2, s2 = quantize_multiplier(t2.scale / twice)
        mo, so = quantize_multiplier(twice / ((1 << 20) * tout.scale))
        ql.add_params = (m1, s1, m2, s2, mo, so)
    elif fl.kind == "relu":
        ql.act_min, ql.act_max = _act_bounds(fl.act, tin)
    elif fl.kind in ("maxpool", "avgpool"):
        pass
    else:
        raise CompileError(f"layer '{fl.name}': no int8 kernel for '{fl.kind}'")
    return ql


def _dw_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise [C, kh, kw] float -> int8 [kh, kw, C] with per-channel scales."""
    q, scale = quantize_weights(w, axis0=True)
    return np.ascontiguousarray(np.transpose(q, (1, 2, 0))), scale
