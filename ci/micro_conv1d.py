"""1-D convolutions + bias + ReLU on ``cpu`` against onnxruntime over a grid of the shapes speech front
ends and Conv1D classifiers are made of (wav2vec2's strided 512-channel stack and its 1-channel first
layer, Whisper's two convs over 3,000 frames, a CNN + BiLSTM recogniser's and a byte classifier's
convs), with an optional before/after in one process.  ``--shapes`` replaces the grid.

    python ci/micro_conv1d.py --threads 1 --clock cpu \\
        --before rammer.backends.cpu.lower_conv.LINE_PIXEL_ROWS_WEIGHT=1.15

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

#: (input channels, output channels, length, kernel, stride, pad)
SHAPES = ((80, 384, 3000, 3, 1, 1), (384, 384, 3000, 3, 2, 1), (1, 512, 16000, 10, 5, 0),
          (512, 512, 3199, 3, 2, 0), (512, 512, 799, 3, 2, 0), (512, 512, 199, 2, 2, 0),
          (512, 512, 799, 3, 1, 1), (40, 256, 500, 3, 1, 1), (64, 128, 1000, 5, 1, 2),
          (128, 128, 400, 3, 1, 1), (256, 256, 1000, 5, 1, 2), (256, 256, 100, 3, 1, 1),
          (128, 256, 2000, 3, 2, 1), (32, 64, 4000, 11, 1, 5))


def conv1d(c: int, m: int, length: int, kernel: int, stride: int, pad: int) -> tuple[onnx.ModelProto, dict]:
    """``Relu(Conv1d(x) + b)`` over ``[1, c, length]``."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((m, c, kernel)) / math.sqrt(c * kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    out = (length + 2 * pad - kernel) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel], strides=[stride],
                              pads=[pad, pad]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, length])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, out])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, c, length)).astype(np.float32)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--before", action="append", default=[], metavar="MODULE.ATTR=VALUE",
                    help="settings of a second, 'before' compile of each shape (repeatable)")
    ap.add_argument("--shapes", default="", help="C:M:LENGTH:KERNEL:STRIDE:PAD,... instead of the built-in grid")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in t.split(":")) for t in args.shapes.split(",")] if args.shapes else SHAPES
    warnings.simplefilter("ignore")
    before = [_setting(t) for t in args.before]
    print("| shape | before ms | after ms | ort ms | before/ort | after/ort | after/before | max err |" if before
          else "| shape | cpu ms | ort ms | cpu/ort | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|" if before else "|---|---:|---:|---:|---:|")
    ratios, old, gain = [], [], []
    for c, m, length, kernel, stride, pad in shapes:
        model, feeds = conv1d(c, m, length, kernel, stride, pad)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock, before)
        ratios.append(r["ratio"])
        label = f"{c} -> {m} over {length} k{kernel} s{stride} p{pad}"
        if before:
            old.append(r["before_ratio"])
            gain.append(r["cpu_ms"] / r["before_ms"])
            print(f"| {label} | {r['before_ms']:.3f} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | "
                  f"{r['before_ratio']:.2f} | {r['ratio']:.2f} | {gain[-1]:.2f} | {r['max_err']:.1e} |", flush=True)
        else:
            print(f"| {label} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | {r['max_err']:.1e} |",
                  flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    tail = f" (before {geomean(old):.2f}x; after/before {geomean(gain):.2f})" if before else ""
    print(f"\ngeomean cpu/onnxruntime {geomean(ratios):.2f}x{tail} over {len(ratios)} shapes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
