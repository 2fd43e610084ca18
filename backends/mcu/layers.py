"""The backend's own layer list: a float network in NHWC, and its float evaluation.

Lowering (:mod:`.lower`) turns an ONNX graph into :class:`FloatLayer` objects;
quantization (:mod:`.quantize`) turns those into int8 layers.  Tensors are
numbered; tensor 0 is the network input.  Every activation is NHWC without the
batch axis (the layout of CMSIS-NN and TFLite Micro).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Layer kinds and what they compute (activations fused into conv/dwconv/fc/add).
KINDS = ("conv", "dwconv", "fc", "maxpool", "avgpool", "add", "relu")
ACTS = ("none", "relu", "relu6")


@dataclass
class FloatLayer:
    kind: str
    name: str
    inputs: tuple[int, ...]
    output: int
    #: conv: [K, kh, kw, C]; dwconv: [C, kh, kw]; fc: [K, C] (C in NHWC flatten order).
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    #: (top, left, bottom, right)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    act: str = "none"


@dataclass
class FloatNet:
    name: str
    input_shape: tuple[int, int, int]  # H, W, C
    layers: list[FloatLayer]
    #: Shape (H, W, C) of every tensor, by id.
    shapes: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    output: int = 0


def out_hw(h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int],
           pad: tuple[int, int, int, int]) -> tuple[int, int]:
    return ((h + pad[0] + pad[2] - kernel[0]) // stride[0] + 1,
            (w + pad[1] + pad[3] - kernel[1]) // stride[1] + 1)


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
           pad: tuple[int, int, int, int], fill) -> np.ndarray:
    """x [N, H, W, C] -> [N, OH, OW, kh, kw, C] windows (padding = ``fill``)."""
    n, h, w, c = x.shape
    kh, kw = kernel
    xp = np.full((n, h + pad[0] + pad[2], w + pad[1] + pad[3], c), fill, dtype=x.dtype)
    xp[:, pad[0]:pad[0] + h, pad[1]:pad[1] + w] = x
    oh, ow = out_hw(h, w, kernel, stride, pad)
    sh, sw = stride
    cols = np.empty((n, oh, ow, kh, kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, i, j] = xp[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
    return cols


def _act(y: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(y, 0)
    if act == "relu6":
        return np.clip(y, 0, 6)
    return y


def run_float_layer(layer: FloatLayer, xs: list[np.ndarray]) -> np.ndarray:
    """One layer on a batch [N, H, W, C] in float32."""
    x = xs[0]
    k = layer.kind
    if k == "conv":
        cols = im2col(x, layer.kernel, layer.stride, layer.pad, 0.0)
        n, oh, ow = cols.shape[:3]
        y = cols.reshape(n * oh * ow, -1) @ layer.weight.reshape(layer.weight.shape[0], -1).T + layer.bias
        return _act(y.reshape(n, oh, ow, -1), layer.act).astype(np.float32)
    if k == "dwconv":
        cols = im2col(x, layer.kernel, layer.stride, layer.pad, 0.0)
        w = np.transpose(layer.weight, (1, 2, 0))  # kh, kw, C
        y = np.einsum("nhwijc,ijc->nhwc", cols, w) + layer.bias
        return _act(y, layer.act).astype(np.float32)
    if k == "fc":
        y = x.reshape(x.shape[0], -1) @ layer.weight.T + layer.bias
        return _act(y.reshape(x.shape[0], 1, 1, -1), layer.act).astype(np.float32)
    if k == "maxpool":
        cols = im2col(x, layer.kernel, layer.stride, layer.pad, -np.inf)
        return cols.max(axis=(3, 4)).astype(np.float32)
    if k == "avgpool":
        if layer.pad != (0, 0, 0, 0):
            raise ValueError("padded average pooling is not lowered")
        cols = im2col(x, layer.kernel, layer.stride, layer.pad, 0.0)
        return cols.mean(axis=(3, 4)).astype(np.float32)
    if k == "add":
        return _act(xs[0] + xs[1], layer.act).astype(np.float32)
    if k == "relu":
        return _act(x, layer.act).astype(np.float32)
    raise ValueError(f"unknown layer kind {k}")


def run_float(net: FloatNet, x: np.ndarray, keep_all: bool = False):
    """The network on x [N, H, W, C]; every tensor when ``keep_all``."""
    vals: dict[int, np.ndarray] = {0: np.asarray(x, np.float32)}
    for layer in net.layers:
        vals[layer.output] = run_float_layer(layer, [vals[i] for i in layer.inputs])
    return vals if keep_all else vals[net.output]


def infer_shapes(net: FloatNet) -> None:
    """Fill ``net.shapes`` by running one zero sample."""
    vals = run_float(net, np.zeros((1,) + net.input_shape, np.float32), keep_all=True)
    net.shapes = {t: tuple(v.shape[1:]) for t, v in vals.items()}
