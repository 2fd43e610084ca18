"""GatherElements on ``cpu`` against onnxruntime over a grid of shapes (DeBERTa's relative-attention
gathers and plain ones along an inner and an outer axis).

    python ci/micro_index.py --threads 1 --clock cpu      # run once per checkout to compare before/after

Every row is one GatherElements node with float32 data and int64 indices in range; the timing protocol
is :func:`micro_gemm.measure`'s (both runtimes in this process, rounds alternating).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_gemm import measure  # noqa: E402  (a sibling script, not a package)


def gather_elements(data_shape: tuple[int, ...], idx_shape: tuple[int, ...], axis: int) -> tuple[onnx.ModelProto,
                                                                                                dict[str, np.ndarray]]:
    rng = np.random.default_rng(6)
    bound = data_shape[axis]
    feeds = {"x": rng.standard_normal(data_shape).astype(np.float32),
             "i": rng.integers(0, bound, size=idx_shape).astype(np.int64)}
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    graph = helper.make_graph([node], "gather_elements",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data_shape)),
                               helper.make_tensor_value_info("i", TensorProto.INT64, list(idx_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(idx_shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def grid() -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
    rows = []
    for h, s in ((12, 128), (12, 256), (4, 64)):
        rows.append((f"c2p H={h} S={s}", (1, h, s, 2 * s), (1, h, s, s), 3))   # along the last axis
        rows.append((f"p2c H={h} S={s}", (1, h, 2 * s, s), (1, h, s, s), 2))   # along an inner axis
    for c, n in ((64, 4096), (512, 256)):
        rows.append((f"outer C={c} N={n}", (8, c, n), (8, c, n), 0))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print("| shape | cpu ms | ort ms | cpu/ort | max err |")
    print("|---|---:|---:|---:|---:|")
    ratios = []
    for label, data_shape, idx_shape, axis in grid():
        model, feeds = gather_elements(data_shape, idx_shape, axis)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock)
        ratios.append(r["ratio"])
        print(f"| {label} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | {r['max_err']:.1e} |",
              flush=True)
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"\ngeomean cpu/onnxruntime {geomean:.2f}x over {len(ratios)} shapes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
