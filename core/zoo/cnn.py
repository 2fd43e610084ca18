"""Plain CNN benchmarks: AlexNet and ResNeXt-29 for CIFAR."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from rammer.zoo.builder import GraphBuilder
from rammer.zoo.layers import classifier, conv, dense, max_pool, relu


@dataclass(frozen=True)
class AlexNetConfig:
    image: int = 227
    # (out channels, kernel, stride, pad, max-pool after?) per conv layer.
    convs: tuple[tuple[int, int, int, int, bool], ...] = (
        (96, 11, 4, 0, True),
        (256, 5, 1, 2, True),
        (384, 3, 1, 1, False),
        (384, 3, 1, 1, False),
        (256, 3, 1, 1, True),
    )
    fc: tuple[int, ...] = (4096, 4096)
    classes: int = 1000


def build_alexnet(cfg: AlexNetConfig, *, name: str, seed: int, batch: int) -> onnx.ModelProto:
    """AlexNet without LRN or grouping (the single-tower form), dropout removed."""
    b = GraphBuilder(name, seed)
    x = b.input("image", (batch, 3, cfg.image, cfg.image))
    channels, size = 3, cfg.image
    # A 3x3 max-pool over ReLU outputs roughly doubles their RMS (it keeps
    # the largest of nine); the layer after a pool halves its gain to undo it.
    gain = 1.0
    for k, (out_c, kernel, stride, pad, pool) in enumerate(cfg.convs, start=1):
        x = conv(b, x, channels, out_c, kernel, f"conv{k}", stride=stride, pad=pad, gain=gain)
        x = relu(b, x, f"conv{k}_relu")
        channels, size = out_c, (size + 2 * pad - kernel) // stride + 1
        gain = 1.0
        if pool:
            x = max_pool(b, x, f"pool{k}", kernel=3, stride=2, pad=0)
            size = (size - 3) // 2 + 1
            gain = 0.5
    if size < 1:
        raise ValueError(f"image {cfg.image} is too small for this AlexNet configuration")
    x = b.op("Flatten", [x], "flatten", axis=1)
    features = channels * size * size
    for k, width in enumerate(cfg.fc, start=6):
        x = relu(b, dense(b, x, features, width, f"fc{k}", gain=gain), f"fc{k}_relu")
        features, gain = width, 1.0
    x = dense(b, x, features, cfg.classes, f"fc{6 + len(cfg.fc)}", gain=np.sqrt(0.5))
    b.output(x, (batch, cfg.classes))
    return b.model(f"AlexNet: {len(cfg.convs)} conv + {len(cfg.fc) + 1} FC, {cfg.image}px input")


@dataclass(frozen=True)
class ResNeXtConfig:
    image: int = 32
    stem: int = 64
    # Output channels of each stage; stages after the first halve the resolution.
    stage_channels: tuple[int, ...] = (256, 512, 1024)
    blocks_per_stage: int = 3
    cardinality: int = 16
    width: int = 64  # channels per group in the first stage; doubles per stage
    classes: int = 10


def _bottleneck(
    b: GraphBuilder, x: str, in_c: int, out_c: int, inner: int, groups: int, stride: int,
    name: str, branch_gain: float,
) -> str:
    """relu(x + 1x1 -> grouped 3x3 (stride) -> 1x1), projecting x when shapes differ."""
    y = relu(b, conv(b, x, in_c, inner, 1, f"{name}_reduce"), f"{name}_reduce_relu")
    y = conv(b, y, inner, inner, 3, f"{name}_grouped", stride=stride, group=groups)
    y = relu(b, y, f"{name}_grouped_relu")
    y = conv(b, y, inner, out_c, 1, f"{name}_expand", gain=branch_gain)
    if stride != 1 or in_c != out_c:
        x = conv(b, x, in_c, out_c, 1, f"{name}_shortcut", stride=stride, pad=0)
    return relu(b, b.op("Add", [x, y], f"{name}_add"), f"{name}_relu")


def build_resnext(cfg: ResNeXtConfig, *, name: str, seed: int, batch: int) -> onnx.ModelProto:
    """ResNeXt-29 (cardinality x width d) for CIFAR, batch norm folded."""
    b = GraphBuilder(name, seed)
    x = b.input("image", (batch, 3, cfg.image, cfg.image))
    x = relu(b, conv(b, x, 3, cfg.stem, 3, "stem"), "stem_relu")
    total_blocks = len(cfg.stage_channels) * cfg.blocks_per_stage
    # Without a real BN each residual branch adds its own variance; damping
    # the branch's last conv keeps the 9-block stack's activations O(1).
    branch_gain = 1.0 / np.sqrt(total_blocks)
    channels = cfg.stem
    for s, out_c in enumerate(cfg.stage_channels):
        inner = cfg.cardinality * cfg.width * 2**s
        for k in range(cfg.blocks_per_stage):
            stride = 2 if (s > 0 and k == 0) else 1
            x = _bottleneck(
                b, x, channels, out_c, inner, cfg.cardinality, stride, f"s{s + 1}_b{k + 1}",
                branch_gain,
            )
            channels = out_c
    x = classifier(b, x, channels, cfg.classes)
    b.output(x, (batch, cfg.classes))
    depth = 3 * total_blocks + 2  # three convs per block, plus stem and classifier
    return b.model(
        f"ResNeXt-{depth} ({cfg.cardinality}x{cfg.width}d), {cfg.image}px input, "
        f"{cfg.classes} classes"
    )
