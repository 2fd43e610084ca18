"""Elementwise groups that read permuted or sliced views (the rotary embeddings of LLaMA/GPT-NeoX-style
attention, a Neg of a half-row slice, an attention-layout transpose with a per-head bias, a channel
shuffle followed by an activation, an activation over a transposed [channels, pixels] plane as in
SegFormer's and MobileViT's token mixers) and 2-D transposes that a reshape makes dense copies, on
``cpu`` against onnxruntime over a grid of shapes.

    python ci/micro_ew_views.py --threads 1 --clock cpu

The rows of such a group are short (a head dimension of 32-128 columns) and its operands do not lie
row after row, so each row is its own block unless the interpreter gathers rows into one.  The timing
protocol is :func:`micro_gemm.measure`'s (both runtimes in this process, rounds alternating); to
compare two checkouts, run it under each one's Python.  End to end, a group this small is timed
with its run's input and output copies (rammer copies the feeds into its arena; onnxruntime reads
them in place), so ``--kernels`` also times the groups' kernels alone: rammer's rOperators through
``backends/cpu/profile.profile_ops`` (best of ``--rounds``) and onnxruntime's nodes through its
session profiler (``ci/profile_corpus.ort_profile``), each summed.
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
from micro_gemm import measure  # noqa: E402  (a sibling script, not a package)
from profile_corpus import ort_profile  # noqa: E402

#: (kind, dims): "rope" (batch, seq, heads, head dim), "neg" (batch, heads, seq, head dim),
#: "bias" (batch, seq, heads, head dim), "shuffle" (channels, side), "gelu-t" / "relu-t" (channels,
#: pixels: the op over the [pixels, channels] view), "transpose" (rows, columns: a copy to [columns, rows])
SHAPES: tuple[tuple, ...] = (
    ("rope", (1, 128, 8, 64)),
    ("rope", (8, 128, 8, 64)),
    ("rope", (1, 256, 12, 64)),
    ("rope", (1, 64, 16, 128)),
    ("rope", (1, 128, 32, 32)),
    ("neg", (1, 8, 128, 64)),
    ("neg", (8, 8, 128, 64)),
    ("neg", (1, 32, 256, 128)),
    ("neg", (1, 8, 128, 256)),
    ("neg", (1, 8, 64, 512)),
    ("neg", (1, 4, 32, 1024)),
    ("bias", (1, 128, 12, 64)),
    ("bias", (4, 64, 8, 32)),
    ("shuffle", (116, 28)),
    ("shuffle", (232, 14)),
    ("gelu-t", (128, 4096)),
    ("gelu-t", (256, 1024)),
    ("relu-t", (64, 3136)),
    ("relu-t", (768, 197)),
    ("transpose", (128, 4096)),
    ("transpose", (4096, 128)),
    ("transpose", (256, 1024)),
    ("transpose", (64, 3136)),
    ("transpose", (3136, 64)),
    ("transpose", (768, 197)),
    ("transpose", (32, 16384)),
    ("transpose", (512, 512)),
)


def _model(nodes: list, inputs: dict[str, tuple[int, ...]], output: tuple[int, ...],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "ew_views",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output))],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(kind: str, dims: tuple[int, ...]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)

    def const(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if kind == "rope":
        b, s, h, d = dims
        half = np.array([d // 2], np.int64)
        inits = {"cos": const(s, d), "sin": const(s, d), "h": half, "z": np.array([0], np.int64),
                 "e": np.array([d], np.int64), "ax": np.array([3], np.int64)}
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                 helper.make_node("Slice", ["t", "z", "h", "ax"], ["x1"]),
                 helper.make_node("Slice", ["t", "h", "e", "ax"], ["x2"]),
                 helper.make_node("Neg", ["x2"], ["n2"]),
                 helper.make_node("Concat", ["n2", "x1"], ["rot"], axis=3),
                 helper.make_node("Mul", ["t", "cos"], ["a"]),
                 helper.make_node("Mul", ["rot", "sin"], ["c"]),
                 helper.make_node("Add", ["a", "c"], ["y"])]
        return _model(nodes, {"x": dims}, (b, h, s, d), inits), {"x": const(*dims)}
    if kind == "neg":
        b, h, s, d = dims
        inits = {"h": np.array([d // 2], np.int64), "e": np.array([d], np.int64), "ax": np.array([3], np.int64)}
        nodes = [helper.make_node("Slice", ["x", "h", "e", "ax"], ["x2"]), helper.make_node("Neg", ["x2"], ["y"])]
        return _model(nodes, {"x": dims}, (b, h, s, d // 2), inits), {"x": const(*dims)}
    if kind == "bias":
        b, s, h, d = dims
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                 helper.make_node("Add", ["t", "bias"], ["u"]), helper.make_node("Sigmoid", ["u"], ["g"]),
                 helper.make_node("Mul", ["u", "g"], ["y"])]
        return _model(nodes, {"x": dims}, (b, h, s, d), {"bias": const(h, 1, d)}), {"x": const(*dims)}
    if kind in ("gelu-t", "relu-t"):
        c, n = dims
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                 helper.make_node("Gelu" if kind == "gelu-t" else "Relu", ["t"], ["y"])]
        model = _model(nodes, {"x": (1, c, n)}, (1, n, c), {})
        model.opset_import[0].version = 20  # Gelu
        return model, {"x": const(1, c, n)}
    if kind == "transpose":
        a, b = dims
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                 helper.make_node("Reshape", ["t", "s"], ["y"])]
        return _model(nodes, {"x": (1, a, b)}, (1, a * b), {"s": np.array([1, a * b], np.int64)}), {"x": const(1, a, b)}
    c, side = dims
    shape = (1, 2, c // 2, side, side)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Mul", ["t", "scale"], ["u"]), helper.make_node("Relu", ["u"], ["y"])]
    return (_model(nodes, {"x": shape}, (1, c // 2, 2, side, side), {"scale": const(c // 2, 2, 1, 1)}),
            {"x": const(*shape)})


def kernel_ms(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rounds: int) -> tuple[float, float]:
    """(rammer's rOperators, onnxruntime's nodes) in ms per run, kernels alone, one thread each."""
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.graph_passes import prepare
    from rammer.backends.cpu.profile import profile_ops
    from rammer.backends.cpu.runtime import CpuExecutable
    from rammer.frontend import load

    prepared = prepare(load(model, input_shapes={k: v.shape for k, v in feeds.items()}))
    compiled = compile_program(prepared, num_veus=1)
    rows = profile_ops(CpuExecutable(prepared, compiled.program), compiled, feeds, repeat=max(rounds, 5))
    ort_us = sum(ort_profile(model.SerializeToString(), feeds, 20).values())
    return sum(r["us"] for r in rows) / 1e3, ort_us / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--kernels", action="store_true", help="also time the kernels alone (1 thread)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    extra = " cpu kernels ms | ort kernels ms | kernels cpu/ort |" if args.kernels else ""
    print("| group | shape | cpu ms | ort ms | cpu/ort | max err |" + extra)
    print("|---|---|---:|---:|---:|---:|" + "---:|---:|---:|" * args.kernels)
    ratios, kernel_ratios = [], []
    for kind, dims in SHAPES:
        model, feeds = build(kind, dims)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, "min", args.clock, [])
        ratios.append(r["ratio"])
        line = (f"| {kind} | {'x'.join(map(str, dims))} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | "
                f"{r['max_err']:.1e} |")
        if args.kernels:
            cpu_k, ort_k = kernel_ms(model, feeds, args.rounds)
            kernel_ratios.append(cpu_k / ort_k)
            line += f" {cpu_k:.3f} | {ort_k:.3f} | {cpu_k / ort_k:.2f} |"
        print(line, flush=True)

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values))

    tail = f"; kernels alone {geomean(kernel_ratios):.2f}x" if args.kernels else ""
    print(f"\ngeomean cpu/onnxruntime {geomean(ratios):.2f}x end to end{tail} over {len(ratios)} shapes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
