"""The models of the mcu experiment, built in code (nothing downloaded).

* :func:`digits_cnn`: a small CNN trained with torch (seeded, a few seconds) on scikit-learn's bundled
  ``load_digits`` (8x8 grey images, 10 classes), returned as an ONNX model;
* :func:`resnet32`: a small ResNet for 32x32x3 inputs with seeded random weights (He scaling), for
  the memory-budget check.
"""

from __future__ import annotations

import numpy as np
import onnx

from rammer.zoo.builder import GraphBuilder
from rammer.zoo.layers import conv, relu

#: (name, in, out) of the digits CNN's convs; the fc layers follow.
DIGITS_CONVS = (("conv1", 1, 16), ("conv2", 16, 32), ("conv3", 32, 64))
DIGITS_HIDDEN = 64


def digits_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): NCHW float32 in [0, 1], a seeded 75/25 split."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    cut = len(x) * 3 // 4
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def _torch_digits():
    import torch.nn as nn

    (_, _, c1), (_, _, c2), (_, _, c3) = [(n, i, o) for n, i, o in DIGITS_CONVS]
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c2, c3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c3 * 4, DIGITS_HIDDEN), nn.ReLU(), nn.Linear(DIGITS_HIDDEN, 10))


def train_digits_cnn(seed: int = 0, epochs: int = 30) -> onnx.ModelProto:
    """Train the digits CNN with torch (seeded, single-threaded for repeatability) and export it."""
    import torch

    x, y, _, _ = digits_data(seed)
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        net = _torch_digits()
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        xt, yt = torch.tensor(x), torch.tensor(y)
        g = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            perm = torch.randperm(len(xt), generator=g)
            for i in range(0, len(xt), 64):
                sel = perm[i:i + 64]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(xt[sel]), yt[sel]).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    params = [p.detach().numpy().astype(np.float32) for p in net.parameters()]
    return digits_onnx(params)


def digits_onnx(params: list[np.ndarray]) -> onnx.ModelProto:
    """The digits CNN as ONNX from its parameters (weight, bias of conv1..3, fc1, fc2)."""
    b = GraphBuilder("digits_cnn", seed=0)
    x = b.input("image", [1, 1, 8, 8])
    it = iter(params)
    for k, (name, _, _) in enumerate(DIGITS_CONVS):
        w, bias = b.const(f"{name}_W", next(it)), b.const(f"{name}_B", next(it))
        x = b.op("Conv", [x, w, bias], name, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = relu(b, x, f"{name}_relu")
        if k:
            x = b.op("MaxPool", [x], f"pool{k}", kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x], "flatten", axis=1)
    w, bias = b.const("fc1_W", next(it)), b.const("fc1_B", next(it))
    x = relu(b, b.op("Gemm", [x, w, bias], "fc1", transB=1), "fc1_relu")
    w, bias = b.const("fc2_W", next(it)), b.const("fc2_B", next(it))
    x = b.op("Gemm", [x, w, bias], "fc2", transB=1)
    b.output(x, [1, 10])
    return b.model("digits CNN (sklearn load_digits), trained in code")


def resnet32(width: int = 16, blocks: tuple[int, ...] = (2, 2, 2), seed: int = 0) -> onnx.ModelProto:
    """A small ResNet for [1, 3, 32, 32]: a 3x3 stem, stages of basic blocks (widths width, 2*width,
    4*width; stride 2 and a 1x1 strided shortcut at each stage change), global average pool, fc 10."""
    b = GraphBuilder(f"resnet32_w{width}", seed)
    x = b.input("image", [1, 3, 32, 32])
    x = relu(b, conv(b, x, 3, width, 3, "stem"), "stem_relu")
    c = width
    for s, n in enumerate(blocks):
        out = width * 2 ** s
        for i in range(n):
            stride = 2 if (s and i == 0) else 1
            name = f"s{s}b{i}"
            y = relu(b, conv(b, x, c, out, 3, f"{name}_conv1", stride=stride), f"{name}_relu1")
            y = conv(b, y, out, out, 3, f"{name}_conv2", gain=0.5)
            sc = x if (stride == 1 and c == out) else conv(b, x, c, out, 1, f"{name}_down", stride=stride, pad=0)
            x = relu(b, b.op("Add", [y, sc], f"{name}_add"), f"{name}_relu2")
            c = out
    x = b.op("GlobalAveragePool", [x], "global_pool")
    x = b.op("Flatten", [x], "flatten", axis=1)
    w = b.weight("fc_W", (10, c), std=np.sqrt(1.0 / c))
    bias = b.weight("fc_B", (10,), std=0.05)
    x = b.op("Gemm", [x, w, bias], "fc", transB=1)
    b.output(x, [1, 10])
    return b.model("small ResNet for 32x32 inputs, random weights")


def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    """A [1, 3, 8, 8] CNN with random weights touching every kernel kind (conv, pooled conv, depthwise,
    add, max/avg pool, fc): the backend's sample model for contract checks."""
    b = GraphBuilder("mcu_tiny_cnn", seed)
    x = b.input("image", [1, 3, 8, 8])
    x = relu(b, conv(b, x, 3, 16, 3, "conv1"), "relu1")
    y = relu(b, conv(b, x, 16, 16, 3, "conv2"), "relu2")
    y = relu(b, conv(b, y, 16, 16, 3, "dw", group=16), "relu3")
    x = relu(b, b.op("Add", [x, y], "add"), "relu4")
    x = b.op("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = relu(b, conv(b, x, 16, 16, 1, "conv3"), "relu5")
    x = b.op("GlobalAveragePool", [x], "gap")
    x = b.op("Flatten", [x], "flatten", axis=1)
    w = b.weight("fc_W", (10, 16), std=0.25)
    x = b.op("Gemm", [x, w, b.weight("fc_B", (10,), std=0.05)], "fc", transB=1)
    b.output(x, [1, 10])
    return b.model("mcu backend sample model, random weights")
