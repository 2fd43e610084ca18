"""Conv and ConvTranspose rKernels on ``opencl`` (PoCL here), one node a model, over a grid of U-Net-like shapes.

    POCL_KERNEL_CACHE=0 python ci/gpu_micro_conv.py [--src OLD_TREE] [--form 1|2]

For each shape: ``rammer.compile`` for opencl, the first run (PoCL builds its work-group function), then the
best of two more runs, as CPU seconds of this process (PoCL's threads included), GFLOP/s of the layer's
arithmetic per CPU second, the outputs checked against ``reference`` and the rKernels and build options
used.  ``--src`` imports rammer from an earlier tree's ``core/`` and ``backends/`` (a before/after);
``--form`` pins the Conv form (1 direct, 2 implicit GEMM) instead of the scheduler's choice.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _model(op: str, x: list[int], w: tuple[int, ...], y: list[int], **attrs: object):
    rng = np.random.default_rng(5)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, list(w), rng.standard_normal(w).astype(np.float32).ravel()),
             helper.make_tensor("b", TensorProto.FLOAT, [y[1]], rng.standard_normal(y[1]).astype(np.float32))]
    g = helper.make_graph([helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


#: name -> (op, x shape, w shape, y shape, attributes)
CASES = {
    "c3x3 32->32 128px b2": ("Conv", [2, 32, 128, 128], (32, 32, 3, 3), [2, 32, 128, 128], {"pads": [1] * 4}),
    "c3x3 3->32 128px b2": ("Conv", [2, 3, 128, 128], (32, 3, 3, 3), [2, 32, 128, 128], {"pads": [1] * 4}),
    "c3x3 128->128 32px b2": ("Conv", [2, 128, 32, 32], (128, 128, 3, 3), [2, 128, 32, 32], {"pads": [1] * 4}),
    "c3x3 256->256 16px b4": ("Conv", [4, 256, 16, 16], (256, 256, 3, 3), [4, 256, 16, 16], {"pads": [1] * 4}),
    "c1x1 32->21 128px b2": ("Conv", [2, 32, 128, 128], (21, 32, 1, 1), [2, 21, 128, 128], {}),
    "ct2x2s2 64->32 64px b2": ("ConvTranspose", [2, 64, 64, 64], (64, 32, 2, 2), [2, 32, 128, 128],
                               {"strides": [2, 2]}),
}


def _gflop(op: str, x: list[int], w: tuple[int, ...], y: list[int]) -> float:
    if op == "Conv":  # each output: C/G x KH x KW multiply-adds
        return 2.0 * float(np.prod(y)) * w[1] * w[2] * w[3] / 1e9
    return 2.0 * float(np.prod(x)) * w[1] * w[2] * w[3] / 1e9  # each input: OC/G x KH x KW


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="", help="an earlier tree (its core/ and backends/)")
    ap.add_argument("--form", type=int, default=0, help="pin the Conv form: 1 direct, 2 implicit GEMM")
    ap.add_argument("--cases", default="", help="comma-separated names (default: all)")
    args = ap.parse_args()
    from session_creation import _use_source  # type: ignore

    _use_source(args.src or None)
    import rammer
    from rammer.backends.gpu import compiler

    if args.form:
        compiler._mults = lambda node: (args.form,) if node.op_type == "Conv" else (1,)  # type: ignore[assignment]
    for name in [n for n in args.cases.split(",") if n] or list(CASES):
        op, x, w, y, attrs = CASES[name]
        m = _model(op, x, w, y, **attrs)
        feeds = {"x": np.random.default_rng(1).standard_normal(x).astype(np.float32)}
        c0 = time.process_time()
        compiled = rammer.compile(m, backend="opencl")
        c1 = time.process_time()
        got = compiled.run(feeds)["y"]
        c2 = time.process_time()
        runs = []
        for _ in range(2):
            t = time.process_time()
            compiled.run(feeds)
            runs.append(time.process_time() - t)
        want = rammer.compile(m, backend="reference").run(feeds)["y"]
        ok = np.allclose(got, want, rtol=1e-3, atol=1e-3)
        ex = compiled.executable
        kernels = [k.name for k in ex.program.kernels if k.device]
        print(f"{name:24s} compile {c1 - c0:5.2f}  first run {c2 - c1:5.2f}  run {min(runs):6.3f} s cpu  "
              f"{_gflop(op, x, w, y) / min(runs):5.2f} GFLOP/s  {'ok' if ok else 'MISMATCH'}  {kernels} "
              f"'{ex.build_options}'", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
