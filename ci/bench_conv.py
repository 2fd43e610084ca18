"""Single convolutions on the CPU backend against onnxruntime, one vEU against one thread.

    python ci/bench_conv.py "(1024,1024,32,32,3,1,1,16)" "(4096,1024,8,8,1,1,0)"

Each shape is ``(C, M, H, W, k, stride, pad[, groups])`` for a batch-1 Conv of
``C`` input and ``M`` output channels with a k x k kernel.  Prints hot medians
and GFLOP/s for both (the shapes of docs/benchmarks.md's "what limits" notes).
"""

from __future__ import annotations

import argparse
import ast
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.cpu import lower_conv
from rammer.backends.cpu.kernels_conv import FORM_DIRECT, FORM_PIXEL_ROWS, FORM_TRANSPOSED, FORM_WINOGRAD

FORMS = {"direct": FORM_DIRECT, "transposed": FORM_TRANSPOSED, "pixel-rows": FORM_PIXEL_ROWS, "winograd": FORM_WINOGRAD}


def conv_model(c: int, m: int, h: int, w: int, k: int, stride: int, pad: int, groups: int = 1) -> onnx.ModelProto:
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, oh, ow])
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((m, c // groups, k, k)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, strides=[stride] * 2, pads=[pad] * 4)
    model = helper.make_model(helper.make_graph([node], "conv", [x], [y], [weight]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def hot_us(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e6 * float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="(C, M, H, W, k, stride, pad[, groups])")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--form", choices=sorted(FORMS), help="force one implicit-GEMM form (default: the lowering's choice)")
    args = ap.parse_args()
    if args.form:
        lower_conv.FORCE_FORM = FORMS[args.form]
    import onnxruntime as ort

    warnings.simplefilter("ignore")
    print("| shape | MFLOP | cpu us | cpu GFLOP/s | onnxruntime us | ort GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for text in args.shapes:
        shape = tuple(ast.literal_eval(text))
        model = conv_model(*shape)
        c, m = shape[0], shape[1]
        k, groups = shape[4], (shape[7] if len(shape) > 7 else 1)
        out = model.graph.output[0].type.tensor_type.shape.dim
        flops = 2.0 * m * (c // groups) * k * k * out[2].dim_value * out[3].dim_value
        feeds = {"x": np.random.default_rng(1).standard_normal((1, c, shape[2], shape[3])).astype(np.float32)}
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        compiled = rammer.compile(model, backend="cpu", veus=1, cache=False)
        np.testing.assert_allclose(compiled(feeds)["y"], session.run(None, feeds)[0], rtol=1e-3, atol=1e-2)
        ours = hot_us(lambda: compiled(feeds), args.runs)
        theirs = hot_us(lambda: session.run(None, feeds), args.runs)
        print(f"| {shape} | {flops / 1e6:.0f} | {ours:.0f} | {flops / ours / 1e3:.0f} | {theirs:.0f} | "
              f"{flops / theirs / 1e3:.0f} |")


if __name__ == "__main__":
    main()
