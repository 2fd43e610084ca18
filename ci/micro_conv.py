"""Pointwise (1x1, stride 1) convolutions + bias + an activation (ReLU unless ``--act``) on ``cpu``
against onnxruntime over a grid of the shapes CNNs are made of (MobileNet/EfficientNet expansions and
projections, ResNet bottlenecks, a SegFormer-style fuse over 64x64), with an optional before/after in
one process.  ``--grid few-channels`` takes convs with at most 8 output channels per group instead
(:data:`FEW_CHANNEL_SHAPES`), ``--grid small-planes`` pointwise convs on 7x7 planes
(:data:`SMALL_PLANE_SHAPES`); ``--shapes`` replaces the grid, and may give a kernel size, stride and groups.

    python ci/micro_conv.py --threads 1 --clock cpu \\
        --before rammer.backends.cpu.lower_conv.PACK_LARGE_POINTWISE=False
    python ci/micro_conv.py --grid small-planes --rounds 7 --runs 20 \\
        --before rammer.backends.cpu.lower_conv.POINTWISE_ROWS_FILL_WEIGHT=0
    python ci/micro_conv.py --grid few-channels --rounds 5 \\
        --before rammer.backends.cpu.lower_conv.PLANES_MAX_CHANNELS=0

The timing protocol is :func:`micro_gemm.measure`'s (both runtimes in this process, rounds alternating).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_gemm import _setting, measure  # noqa: E402  (a sibling script, not a package)

#: (input channels, output channels, plane side)
SHAPES = ((16, 96, 112), (32, 16, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (64, 256, 56),
          (256, 64, 56), (32, 192, 28), (192, 32, 28), (128, 512, 28), (512, 128, 28), (64, 384, 14),
          (384, 64, 14), (1024, 256, 14), (960, 160, 7), (256, 256, 64), (1024, 256, 64))
#: ``--grid few-channels``: convs of several taps with at most 8 output channels per group (the plane
#: form's class): RegNetY-400MF's groups of 8 at every stage and stride, ResNeXt 32x4d's groups of 4 and
#: 8, a stem and segmentation or detection heads of 2-8 channels; then groups of 16 (not the class: they
#: keep the pixel-row form) as a check that nothing else moved.
FEW_CHANNEL_SHAPES = ((48, 48, 112, 3, 2, 6), (104, 104, 56, 3, 2, 13), (104, 104, 28, 3, 1, 13),
                      (208, 208, 28, 3, 2, 26), (208, 208, 14, 3, 1, 26), (440, 440, 14, 3, 2, 55),
                      (440, 440, 7, 3, 1, 55), (128, 128, 56, 3, 1, 32), (256, 256, 28, 3, 1, 32),
                      (256, 256, 14, 3, 2, 32), (64, 64, 7, 3, 1, 8), (3, 8, 224, 3, 2, 1), (16, 8, 56, 3, 1, 1),
                      (64, 4, 64, 3, 1, 1), (32, 2, 128, 3, 1, 1), (8, 8, 112, 3, 1, 1), (24, 6, 20, 5, 1, 1),
                      (512, 512, 14, 3, 1, 32), (96, 96, 56, 3, 1, 6), (192, 192, 28, 3, 1, 12))
#: ``--grid small-planes``: stride-1 1x1 convs on 7x7 planes (the last stage of every ImageNet CNN in the
#: corpus: MobileNetV2/V3's, EfficientNet-B0's, RegNetY's, Inception's), weights of 369 KiB to 860 KiB, where
#: ``lower_conv.POINTWISE_ROWS_FILL_MIN_WEIGHTS`` gives the pixel-row form its chance; then 256 -> 256,
#: 232 -> 232 (ShuffleNetV2) and 576 -> 160, below that weight (controls: their form does not change).
SMALL_PLANE_SHAPES = ((160, 960, 7), (960, 160, 7), (672, 160, 7), (672, 192, 7), (192, 1152, 7), (1152, 192, 7),
                      (440, 440, 7), (512, 256, 7), (256, 256, 7), (232, 232, 7), (576, 160, 7))
GRIDS = {"pointwise": SHAPES, "few-channels": FEW_CHANNEL_SHAPES, "small-planes": SMALL_PLANE_SHAPES}


#: The activation after the conv, as exporters write it.
ACTIVATIONS = ("relu", "silu", "hardswish", "none")


def _activation(act: str) -> list[onnx.NodeProto]:
    """Nodes from the conv's output ``c`` to ``y``."""
    if act == "relu":
        return [helper.make_node("Relu", ["c"], ["y"])]
    if act == "silu":
        return [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    if act == "hardswish":
        return [helper.make_node("HardSwish", ["c"], ["y"])]
    return [helper.make_node("Identity", ["c"], ["y"])]


def pointwise(c: int, m: int, side: int, act: str = "relu", kernel: int = 1, stride: int = 1,
              groups: int = 1) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A conv (1x1 stride 1 unless ``kernel``, ``stride``: padded to keep side / stride) + bias + ``act``."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((m, c // groups, kernel, kernel)) / math.sqrt(c // groups * kernel * kernel))
    w = w.astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    pad = kernel // 2
    out = (side + 2 * pad - kernel) // stride + 1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                            pads=[pad] * 4, group=groups)
    nodes = [conv, *_activation(act)]
    graph = helper.make_graph(nodes, "pointwise",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, out, out])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, side, side)).astype(np.float32)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--before", action="append", default=[], metavar="MODULE.ATTR=VALUE",
                    help="settings of a second, 'before' compile of each shape (repeatable)")
    ap.add_argument("--act", choices=ACTIVATIONS, default="relu", help="the activation after each conv")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="pointwise", help="the built-in grid of shapes")
    ap.add_argument("--shapes", default="",
                    help="C:M:SIDE[:KERNEL[:STRIDE[:GROUPS]]],... instead of a built-in grid")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in t.split(":")) for t in args.shapes.split(",")] if args.shapes else GRIDS[args.grid]
    warnings.simplefilter("ignore")
    before = [_setting(t) for t in args.before]
    print("| shape | before ms | after ms | ort ms | before/ort | after/ort | max err |" if before else
          "| shape | cpu ms | ort ms | cpu/ort | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|" if before else "|---|---:|---:|---:|---:|")
    ratios, old = [], []
    for c, m, side, *window in shapes:
        model, feeds = pointwise(c, m, side, args.act, *window)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock, before)
        ratios.append(r["ratio"])
        label = f"{c} -> {m} at {side}x{side}"
        if window:
            label += " " + " ".join(f"{k}{v}" for k, v in zip(("k", "s", "g"), window))
        if before:
            old.append(r["before_ratio"])
            print(f"| {label} | {r['before_ms']:.3f} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | "
                  f"{r['before_ratio']:.2f} | {r['ratio']:.2f} | {r['max_err']:.1e} |", flush=True)
        else:
            print(f"| {label} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | {r['max_err']:.1e} |",
                  flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    tail = f" (before {geomean(old):.2f}x)" if before else ""
    print(f"\ngeomean cpu/onnxruntime {geomean(ratios):.2f}x{tail} over {len(ratios)} shapes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
