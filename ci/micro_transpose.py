"""Transposes whose output's last dim is short (DepthToSpace-style interleaves, NCHW -> NHWC with a
few channels, stride-2 ConvTranspose heads, which the graph passes decompose into a 1x1 conv and
such a transpose) on ``cpu`` against onnxruntime over a grid of shapes, with an optional
before/after in one process.

    python ci/micro_transpose.py --threads 1 --clock cpu \\
        --before rammer.backends.cpu.lower_views.COPY_SHORT_ROW=0

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

#: ("transpose", input shape, perm) or ("convtranspose", channels in, channels out, side): a 2x2 stride-2 one
SHAPES: tuple[tuple, ...] = (
    ("transpose", (1, 24, 2, 2, 120, 120), (0, 1, 4, 2, 5, 3)),
    ("transpose", (1, 64, 2, 2, 32, 32), (0, 1, 4, 2, 5, 3)),
    ("transpose", (1, 16, 4, 4, 28, 28), (0, 1, 4, 2, 5, 3)),
    ("transpose", (1, 3, 224, 224), (0, 2, 3, 1)),
    ("transpose", (1, 4, 112, 112), (0, 2, 3, 1)),
    ("transpose", (1, 64, 56, 56), (0, 2, 3, 1)),
    ("transpose", (1, 224, 224, 3), (0, 3, 1, 2)),
    ("convtranspose", 24, 24, 120),
    ("convtranspose", 64, 32, 32),
    ("convtranspose", 128, 64, 28),
)


def transpose(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = [shape[p] for p in perm]
    graph = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "transpose",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def conv_transpose(c: int, m: int, side: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((c, m, 2, 2)) / math.sqrt(c * 4)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    graph = helper.make_graph([node], "convtranspose",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, 2 * side, 2 * side])],
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
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    before = [_setting(t) for t in args.before]
    print("| shape | before ms | after ms | ort ms | before/ort | after/ort | max err |" if before else
          "| shape | cpu ms | ort ms | cpu/ort | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|" if before else "|---|---:|---:|---:|---:|")
    ratios, old = [], []
    for kind, *spec in SHAPES:
        if kind == "transpose":
            model, feeds = transpose(*spec)
            label = f"{'x'.join(map(str, spec[0]))} perm {''.join(map(str, spec[1]))}"
        else:
            model, feeds = conv_transpose(*spec)
            label = f"ConvTranspose 2x2 s2 {spec[0]} -> {spec[1]} at {spec[2]}x{spec[2]}"
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock, before)
        ratios.append(r["ratio"])
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
