"""Linear and cubic Resize on ``cpu`` against onnxruntime over a grid of the shapes decoders and
feature pyramids resize (SegFormer-style x2/x4/x8 bilinear upsampling to a common scale, FPN x2,
align-corners and downsampling, bicubic), with an optional before/after in one process.

    python ci/micro_resize.py --threads 1 --clock cpu \\
        --before rammer.backends.cpu.lower_nn.RESIZE_MAX_SCRATCH_FLOATS=0

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

#: (mode, coordinate transformation, channels, input side, output side)
SHAPES = (("linear", "half_pixel", 256, 8, 64), ("linear", "half_pixel", 256, 16, 64),
          ("linear", "half_pixel", 256, 32, 64), ("linear", "half_pixel", 128, 20, 40),
          ("linear", "half_pixel", 64, 56, 112), ("linear", "align_corners", 64, 32, 128),
          ("linear", "half_pixel", 64, 128, 64), ("linear", "half_pixel", 19, 64, 256),
          ("cubic", "half_pixel", 64, 32, 64), ("cubic", "align_corners", 32, 48, 96))


def resize(mode: str, ctm: str, c: int, side: int, out: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    sizes = np.array([1, c, out, out], np.int64)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, coordinate_transformation_mode=ctm)
    graph = helper.make_graph([node], "resize",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, out, out])],
                              [numpy_helper.from_array(sizes, "sizes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
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
    for mode, ctm, c, side, out in SHAPES:
        model, feeds = resize(mode, ctm, c, side, out)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock, before)
        ratios.append(r["ratio"])
        label = f"{mode} {ctm} {c} x {side}^2 -> {out}^2"
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
