"""Convolutional building blocks shared by the CNN builders.

Batch normalization is folded away: a "conv + BN" is one Conv with a bias, the
way an inference compiler sees the model after constant folding. Weights use
He scaling (std = gain * sqrt(2 / fan_in)) so activations stay
O(1) through the ReLU networks even without a real BN to renormalize them.
"""

from __future__ import annotations

import numpy as np

from rammer.zoo.builder import GraphBuilder

# Std of a folded-BN bias: small, so biases do not swamp the conv output.
_BIAS_STD = 0.05


def conv(
    b: GraphBuilder,
    x: str,
    in_channels: int,
    out_channels: int,
    kernel: int,
    name: str,
    *,
    stride: int = 1,
    pad: int | None = None,
    group: int = 1,
    bias: bool = True,
    gain: float = 1.0,
) -> str:
    """A square Conv (``pad`` defaults to 'same' for odd kernels at stride 1)."""
    if pad is None:
        pad = kernel // 2
    fan_in = (in_channels // group) * kernel * kernel
    w = b.weight(
        f"{name}_W", (out_channels, in_channels // group, kernel, kernel),
        std=gain * np.sqrt(2.0 / fan_in),
    )
    inputs = [x, w]
    if bias:
        inputs.append(b.weight(f"{name}_B", (out_channels,), std=_BIAS_STD))
    attrs: dict[str, object] = dict(
        kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4
    )
    if group != 1:
        attrs["group"] = group
    return b.op("Conv", inputs, name, **attrs)


def relu(b: GraphBuilder, x: str, name: str) -> str:
    return b.op("Relu", [x], name)


def max_pool(b: GraphBuilder, x: str, name: str, *, kernel: int, stride: int, pad: int) -> str:
    return b.op(
        "MaxPool", [x], name, kernel_shape=[kernel, kernel], strides=[stride, stride],
        pads=[pad] * 4,
    )


def avg_pool(b: GraphBuilder, x: str, name: str, *, kernel: int, stride: int, pad: int) -> str:
    # count_include_pad=0 (the default): border windows average only real
    # pixels, like TensorFlow's 'SAME' average pooling NASNet was trained with.
    return b.op(
        "AveragePool", [x], name, kernel_shape=[kernel, kernel], strides=[stride, stride],
        pads=[pad] * 4,
    )


def dense(
    b: GraphBuilder, x: str, in_features: int, out_features: int, name: str, *, gain: float = 1.0
) -> str:
    """Gemm with a [out, in] weight (transB=1, the layout frameworks export)."""
    w = b.weight(f"{name}_W", (out_features, in_features), std=gain * np.sqrt(2.0 / in_features))
    bias = b.weight(f"{name}_B", (out_features,), std=_BIAS_STD)
    return b.op("Gemm", [x, w, bias], name, transB=1)


def classifier(b: GraphBuilder, x: str, channels: int, classes: int) -> str:
    """GlobalAveragePool -> Flatten -> Gemm: [b, C, H, W] to [b, classes] logits."""
    pooled = b.op("GlobalAveragePool", [x], "global_pool")
    flat = b.op("Flatten", [pooled], "flatten", axis=1)
    # Gain 1/sqrt(2): logits get the input's scale rather than twice its variance.
    return dense(b, flat, channels, classes, "fc", gain=np.sqrt(0.5))
