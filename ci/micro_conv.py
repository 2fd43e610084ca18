"""Pointwise (1x1, stride 1) convolutions + bias + an activation (ReLU unless ``--act``) on ``cpu``
against onnxruntime over a grid of the shapes CNNs are made of (MobileNet/EfficientNet expansions and
projections, ResNet bottlenecks, a SegFormer-style fuse over 64x64), with an optional before/after in
one process.  ``--shapes`` replaces the grid, and may give a kernel size, stride and groups.

    python ci/micro_conv.py --threads 1 --clock cpu \\
        --before rammer.backends.cpu.lower_conv.PACK_LARGE_POINTWISE=False

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
    ap.add_argument("--shapes", default="",
                    help="C:M:SIDE[:KERNEL[:STRIDE[:GROUPS]]],... instead of the built-in grid of pointwise convs")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in t.split(":")) for t in args.shapes.split(",")] if args.shapes else SHAPES
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
