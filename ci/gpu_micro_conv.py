"""Conv and ConvTranspose rKernels on ``opencl`` (PoCL here), one node a model, over a grid of U-Net-like shapes.

    POCL_KERNEL_CACHE=0 python ci/gpu_micro_conv.py [--src OLD_TREE] [--form 1|2]
    POCL_KERNEL_CACHE=0 python ci/gpu_micro_conv.py --kernel-ab OLD_TREE [--rounds 5]

For each shape: ``rammer.compile`` for opencl, the first run (PoCL builds its work-group function), then the
best of two more runs, as CPU seconds of this process (PoCL's threads included), GFLOP/s of the layer's
arithmetic per CPU second, the outputs checked against ``reference`` and the rKernels and build options
used.  ``--src`` imports rammer from an earlier tree's ``core/`` and ``backends/`` (a before/after);
``--form`` pins the Conv form (1 direct, 2 implicit GEMM) instead of the scheduler's choice.

``--kernel-ab OLD_TREE`` compares the implicit-GEMM rKernel (``conv_igemm``) of this tree and of
``OLD_TREE`` in ONE process, over :data:`IGEMM_CASES`: each one-Conv model is compiled for opencl twice
(the implicit-GEMM form pinned; once with each tree's ``kernels_conv.conv2d_implicit_gemm``, the rest of
the program this tree's), and the two programs are run in turn ``--rounds`` times (the minimum CPU s of
each): on a shared, loaded machine two processes a minute apart differ by up to 1.5x, runs interleaved
in one process much less.  Outputs are checked against a numpy reference.  (A kernel launched alone,
outside the persistent program, is no guide: its arguments are kernel arguments there, and what PoCL
made of it was up to 1.4x faster than the same rKernel in a program.)
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


#: name -> (n, c, h, w, oc, kernel, stride, pad, dilation, groups) for ``--kernel-ab``
IGEMM_CASES = {
    "c3x3 32->32 128px b2": (2, 32, 128, 128, 32, 3, 1, 1, 1, 1),
    "c3x3 3->32 128px b2": (2, 3, 128, 128, 32, 3, 1, 1, 1, 1),
    "c3x3 64->32 64px b8": (8, 64, 64, 64, 32, 3, 1, 1, 1, 1),
    "c3x3 128->128 32px b2": (2, 128, 32, 32, 128, 3, 1, 1, 1, 1),
    "c3x3 256->256 16px b4": (4, 256, 16, 16, 256, 3, 1, 1, 1, 1),
    "c3x3 s2 64->128 64px b2": (2, 64, 64, 64, 128, 3, 2, 1, 1, 1),
    "c1x1 64->64 64px b2": (2, 64, 64, 64, 64, 1, 1, 0, 1, 1),
    "c1x1 32->21 128px b2": (2, 32, 128, 128, 21, 1, 1, 0, 1, 1),
    "c1x1 512->512 14px b1": (1, 512, 14, 14, 512, 1, 1, 0, 1, 1),
    "c7x7 s2 3->64 224px b1": (1, 3, 224, 224, 64, 7, 2, 3, 1, 1),
    "c3x3 g4 64->64 32px b2": (2, 64, 32, 32, 64, 3, 1, 1, 1, 4),
}


def _conv_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, p: int, d: int, g: int) -> np.ndarray:
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    y = np.zeros((n, oc, oh, ow), np.float64)
    m = oc // g
    for gi in range(g):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
                y[:, gi * m:(gi + 1) * m] += np.einsum("nchw,oc->nohw", patch, w[gi * m:(gi + 1) * m, :, i, j])
    return (y + b[None, :, None, None]).astype(np.float32)


def _tree_kernels_conv(tree: str, tag: str):
    """``backends/gpu/kernels_conv.py`` of ``tree`` as a module of this rammer's GPU package (its relative
    imports are this tree's helpers)."""
    import importlib.util

    name = f"rammer.backends.gpu._kernels_conv_{tag}"
    spec = importlib.util.spec_from_file_location(name, os.path.join(tree, "backends", "gpu", "kernels_conv.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def kernel_ab(old_tree: str, rounds: int, names: list[str]) -> int:
    """``--kernel-ab``: this tree's ``conv_igemm`` against ``old_tree``'s, each in the whole opencl program of a
    one-Conv model (the implicit-GEMM form pinned), interleaved in one process."""
    import rammer
    from rammer.backends.gpu import compiler
    from rammer.backends.gpu import kernels_conv as kc

    old = _tree_kernels_conv(old_tree, "before")
    if old.conv_tile() != kc.conv_tile():  # the lowering (this tree's) sizes the rTasks by its own tile
        raise SystemExit(f"--kernel-ab: the trees' conv tiles differ ({old.conv_tile()} and {kc.conv_tile()}); "
                         "compare other tiles through --src")
    new_builder = kc.conv2d_implicit_gemm
    compiler._mults = lambda node: (2,) if node.op_type == "Conv" else (1,)  # type: ignore[assignment]
    bad = 0
    for name in names or list(IGEMM_CASES):
        n, c, h, wd, oc, k, s, p, d, g = IGEMM_CASES[name]
        oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (wd + 2 * p - d * (k - 1) - 1) // s + 1
        m = _model("Conv", [n, c, h, wd], (oc, c // g, k, k), [n, oc, oh, ow], pads=[p] * 4, strides=[s, s],
                   dilations=[d, d], group=g)
        feeds = {"x": np.random.default_rng(1).standard_normal((n, c, h, wd)).astype(np.float32)}
        want = _conv_numpy(feeds["x"], _weights(m), _bias(m), s, p, d, g)
        gflop = 2.0 * n * oc * oh * ow * (c // g) * k * k / 1e9
        runs = {}
        for label, builder in (("before", old.conv2d_implicit_gemm), ("after", new_builder)):
            kc.conv2d_implicit_gemm = builder  # the lowering reads it from the module at each compile
            t = time.process_time()
            compiled = rammer.compile(m, backend="opencl")
            ok = np.allclose(compiled.run(feeds)["y"], want, rtol=1e-3, atol=1e-3)
            bad += not ok
            runs[label] = [compiled, time.process_time() - t, ok, float("inf"), compiled.executable.build_options]
        kc.conv2d_implicit_gemm = new_builder
        for _ in range(rounds):
            for label in ("before", "after"):
                t = time.process_time()
                runs[label][0].run(feeds)
                runs[label][3] = min(runs[label][3], time.process_time() - t)
        b, a = runs["before"], runs["after"]
        print(f"{name:26s} before {b[3]:6.3f} s {gflop / b[3]:5.2f} GFLOP/s  after {a[3]:6.3f} s {gflop / a[3]:5.2f} "
              f"GFLOP/s  x{b[3] / a[3]:4.2f}  compile+first {b[1]:5.2f} / {a[1]:5.2f} s  '{b[4]}' / '{a[4]}'  "
              f"{'ok' if b[2] and a[2] else 'MISMATCH'}", flush=True)
    return 1 if bad else 0


def _weights(m) -> np.ndarray:
    from onnx import numpy_helper

    return next(numpy_helper.to_array(t) for t in m.graph.initializer if t.name == "w")


def _bias(m) -> np.ndarray:
    from onnx import numpy_helper

    return next(numpy_helper.to_array(t) for t in m.graph.initializer if t.name == "b")


def _gflop(op: str, x: list[int], w: tuple[int, ...], y: list[int]) -> float:
    if op == "Conv":  # each output: C/G x KH x KW multiply-adds
        return 2.0 * float(np.prod(y)) * w[1] * w[2] * w[3] / 1e9
    return 2.0 * float(np.prod(x)) * w[1] * w[2] * w[3] / 1e9  # each input: OC/G x KH x KW


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default="", help="an earlier tree (its core/ and backends/)")
    ap.add_argument("--form", type=int, default=0, help="pin the Conv form: 1 direct, 2 implicit GEMM")
    ap.add_argument("--cases", default="", help="comma-separated names (default: all)")
    ap.add_argument("--kernel-ab", default="", metavar="OLD_TREE", help="conv_igemm of this tree against OLD_TREE's")
    ap.add_argument("--rounds", type=int, default=5, help="--kernel-ab: runs of each, interleaved")
    args = ap.parse_args()
    if args.kernel_ab:
        return kernel_ab(args.kernel_ab, args.rounds, [n for n in args.cases.split(",") if n])
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
