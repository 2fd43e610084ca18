"""8-bit GEMMs and convolutions on ``cpu`` against onnxruntime, before and after the VNNI micro-kernel.

    python ci/micro_int8.py                               # the whole grid, 1 vEU / 1 thread
    python ci/micro_int8.py --family matmul --threads 2   # one family, 2 vEUs / 2 threads
    python ci/micro_int8.py --no-before --json int8.json  # without the old kernels, rows to a file
    python ci/micro_int8.py --family depthwise --clock cpu # depthwise QLinearConv, CPU time
    python ci/micro_int8.py --family conv --before gathered --clock cpu   # NHWC form vs gathered windows
    python ci/micro_int8.py --family conv --before pointwise --clock cpu  # 1x1 GEMM form vs what ran before

Families:

* ``matmul``: ``MatMulInteger(A[M, K] uint8, W[K, N] int8 constant)`` with scalar zero points, the
  GEMM of onnxruntime's ``quantize_dynamic`` (BERT's projections), M 1-256, K 64-4096, N 64-4096; W in
  -127..127 as a symmetric quantizer writes it (``--weights-min -128``: the full int8 range);
* ``conv``: ``QLinearConv`` (uint8 activations, per-channel int8 weights, int32 bias) at the layer
  shapes of resnet18 (7x7 stem, 3x3, 1x1 stride-2 shortcut) and mobilenet-v2 (stem, 1x1 expand /
  project, depthwise 3x3) and a grid of 1x1 stride-1 convs (IC / OC 16-576, planes 7-112);
  ``--before pointwise`` compares the 1x1 GEMM form (``lower_quant_conv.POINTWISE_CONV``) with the
  NHWC or gathered form those convs ran before; ``--before gathered`` compares the NHWC form of symmetric-weight convs
  (``lower_quant_conv``) with the gathered-window form it replaces where it pays;
* ``depthwise``: depthwise ``QLinearConv`` over a grid of MobileNet / EfficientNet layers (3x3, 5x5 and
  7x7 windows, stride 1 and 2, planes 7-112, 32-960 channels); ``before`` runs the int32 plane kernel
  (``k_qlinearconv``), ``cpu`` the float window sweep over widened planes (``k_qdwconv``);
* ``add``: the residual add of QDQ models, ``DequantizeLinear(a) + DequantizeLinear(b) -> QuantizeLinear``
  (uint8, per-tensor scales; onnxruntime runs it as its QLinearAdd) at the residual shapes of resnet /
  mobilenet-v2 / efficientnet blocks and a batch of 8; ``before`` is the cpu pipeline without ``qdq-add``
  (float elementwise rTasks), ``cpu`` with it (``QuantizedAdd`` on bytes, ``k_qadd``);
* ``qdq``: the same convs in QDQ form (DequantizeLinear -> Conv -> QuantizeLinear, as ``quantize_static``
  writes them); ``before`` is the cpu pipeline without ``qdq-to-qlinear`` (the float conv between exact
  float (de)quantizations), ``cpu`` with it (``QLinearConv``).

Protocol: one process, both runtimes with the same thread count (rammer ``veus`` = onnxruntime
``intra_op_num_threads``, ``inter_op_num_threads`` = 1).  Per shape three runners alternate for
``--rounds`` rounds of ``--runs`` runs each after a warm-up: rammer as it is now (``cpu``), rammer
with ``lower_quant.PACK_INT8_WEIGHTS = 0`` (``before``: the row / plane kernels that read the weights
in place, what the quantized ops ran on before the micro-kernel) and onnxruntime; the best run per side
is reported (on a loaded 2-core machine the medians measure the scheduler; ``--clock cpu`` times the
process's CPU time instead, which with one thread excludes the preemptions that make a run of several
milliseconds lose to a 1 ms one on wall time).  Outputs are checked
against onnxruntime: MatMulInteger exactly, QLinearConv within one quantization step.  A
micro-benchmark in one process on a shared machine: read the ratios, not the times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MATMUL_SHAPES = [  # (M, K, N)
    (1, 768, 768), (1, 4096, 4096), (8, 768, 3072), (16, 1024, 1024), (64, 64, 4096), (128, 768, 768),
    (128, 768, 3072), (128, 3072, 768), (256, 64, 64), (256, 4096, 64), (256, 1024, 1024),
]
CONV_SHAPES = [  # (name, C, H, OC, k, stride, group)
    ("resnet18 3x3 64@56", 64, 56, 64, 3, 1, 1),
    ("resnet18 3x3 128@28", 128, 28, 128, 3, 1, 1),
    ("resnet18 3x3 256@14", 256, 14, 256, 3, 1, 1),
    ("resnet18 3x3 512@7", 512, 7, 512, 3, 1, 1),
    ("resnet18 3x3 s2 64->128@56", 64, 56, 128, 3, 2, 1),
    ("resnet18 stem 7x7 3->64 s2@224", 3, 224, 64, 7, 2, 1),
    ("resnet18 1x1 s2 64->128@56", 64, 56, 128, 1, 2, 1),
    ("mobilenet stem 3->32 s2@224", 3, 224, 32, 3, 2, 1),
    ("mobilenet 1x1 16->96@112", 16, 112, 96, 1, 1, 1),
    ("mobilenet 1x1 144->24@56", 144, 56, 24, 1, 1, 1),
    ("mobilenet 1x1 320->1280@7", 320, 7, 1280, 1, 1, 1),
    ("mobilenet dw3x3 96 s2@112", 96, 112, 96, 3, 2, 96),
    ("mobilenet dw3x3 144@56", 144, 56, 144, 3, 1, 144),
    # 1x1 stride 1 (pointwise) over IC / OC 16-320 and planes 7-112, odd channel counts included
    ("1x1 32->16@112", 32, 112, 16, 1, 1, 1),
    ("1x1 24->144@56", 24, 56, 144, 1, 1, 1),
    ("1x1 144->24@56 (as above, at 28)", 144, 28, 24, 1, 1, 1),
    ("1x1 32->192@28", 32, 28, 192, 1, 1, 1),
    ("1x1 192->64@28", 192, 28, 64, 1, 1, 1),
    ("1x1 64->384@14", 64, 14, 384, 1, 1, 1),
    ("1x1 96->576@14", 96, 14, 576, 1, 1, 1),
    ("1x1 576->160@7", 576, 7, 160, 1, 1, 1),
    ("1x1 160->320@7", 160, 7, 320, 1, 1, 1),
    ("1x1 40->120@28 (C, OC not multiples of 16)", 40, 28, 120, 1, 1, 1),
    ("1x1 18->50@30 (C not a multiple of 4)", 18, 30, 50, 1, 1, 1),
    ("1x1 256->256@20", 256, 20, 256, 1, 1, 1),
]

DEPTHWISE_SHAPES = [  # (name, C, H, OC, k, stride, group): MobileNet v2/v3, EfficientNet, MnasNet layers
    ("dw3x3 32@112", 32, 112, 32, 3, 1, 32),
    ("dw3x3 96 s2@112", 96, 112, 96, 3, 2, 96),
    ("dw3x3 144@56", 144, 56, 144, 3, 1, 144),
    ("dw3x3 192@28", 192, 28, 192, 3, 1, 192),
    ("dw3x3 384@14", 384, 14, 384, 3, 1, 384),
    ("dw3x3 576 s2@14", 576, 14, 576, 3, 2, 576),
    ("dw3x3 960@7", 960, 7, 960, 3, 1, 960),
    ("dw5x5 72 s2@56", 72, 56, 72, 5, 2, 72),
    ("dw5x5 240@28", 240, 28, 240, 5, 1, 240),
    ("dw5x5 672@14", 672, 14, 672, 5, 1, 672),
    ("dw7x7 96@56", 96, 56, 96, 7, 1, 96),
]


ADD_SHAPES = [  # (name, shape): residual adds of resnet18/50, mobilenet-v2, efficientnet; a batch of 8
    ("resnet 64@56", (1, 64, 56, 56)),
    ("resnet 128@28", (1, 128, 28, 28)),
    ("resnet 256@14", (1, 256, 14, 14)),
    ("resnet 512@7", (1, 512, 7, 7)),
    ("resnet50 256@56", (1, 256, 56, 56)),
    ("mobilenet 24@56", (1, 24, 56, 56)),
    ("mobilenet 32@28", (1, 32, 28, 28)),
    ("mobilenet 96@14", (1, 96, 14, 14)),
    ("efficientnet 40@28 (odd count)", (1, 40, 27, 27)),
    ("batch 8 64@56", (8, 64, 56, 56)),
]


def _finish(nodes: list, inputs: list, consts: dict[str, np.ndarray], out: str, out_type: int) -> bytes:
    g = helper.make_graph(nodes, "micro", inputs, [helper.make_tensor_value_info(out, out_type, None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(m).SerializeToString()


#: The weights' lowest value: -127, the range of onnxruntime's symmetric int8 quantizer (``quantize_dynamic``'s
#: default weights, and every QLinearConv case here); ``--weights-min -128`` gives the full int8 range, where
#: the AVX2 form's calls whose panel holds a -128 take its portable dot step.
WEIGHTS_MIN = -127


def matmul_case(m: int, k: int, n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(m * 7 + k + n)
    consts = {"w": rng.integers(WEIGHTS_MIN, 128, (k, n)).astype(np.int8), "za": np.array(131, np.uint8),
              "zw": np.array(0, np.int8)}
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    model = _finish([helper.make_node("MatMulInteger", ["a", "w", "za", "zw"], ["y"])],
                    [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)], consts, "y", TensorProto.INT32)
    return model, {"a": a}


def conv_case(c: int, h: int, oc: int, k: int, stride: int, group: int) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(c + h + oc)
    consts = {
        "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
        "w": rng.integers(-127, 128, (oc, c // group, k, k)).astype(np.int8),
        "ws": (rng.random(oc) * 0.004 + 0.001).astype(np.float32), "wz": np.zeros(oc, np.int8),
        "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8),
        "b": rng.integers(-2000, 2000, oc).astype(np.int32),
    }
    x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[k // 2] * 4, strides=[stride, stride], group=group)
    model = _finish([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)], consts, "y",
                    TensorProto.UINT8)
    return model, {"x": x}


def qdq_conv_case(c: int, h: int, oc: int, k: int, stride: int, group: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """The conv of :func:`conv_case` in QDQ form (``quantize_static``'s): DequantizeLinear of the uint8
    input, of the per-channel int8 weights and of the int32 bias, a float Conv, QuantizeLinear."""
    rng = np.random.default_rng(c + h + oc)
    ws = (rng.random(oc) * 0.004 + 0.001).astype(np.float32)
    consts = {
        "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
        "w": rng.integers(-127, 128, (oc, c // group, k, k)).astype(np.int8), "ws": ws,
        "b": rng.integers(-2000, 2000, oc).astype(np.int32), "bs": (np.float32(0.02) * ws).astype(np.float32),
        "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8),
    }
    x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[k // 2] * 4, strides=[stride, stride],
                              group=group),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    model = _finish(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)], consts, "y",
                    TensorProto.UINT8)
    return model, {"x": x}


def qdq_add_case(shape: tuple[int, ...]) -> tuple[bytes, dict[str, np.ndarray]]:
    """The residual add of a QDQ model (``quantize_static``'s): DequantizeLinear of each uint8 operand, a
    float Add, QuantizeLinear of the sum (zero point 0: the Relu after it folded into the saturation)."""
    rng = np.random.default_rng(int(np.prod(shape)) % 1000)
    consts = {"as": np.array(0.0072, np.float32), "az": np.array(112, np.uint8),
              "bs": np.array(0.0139, np.float32), "bz": np.array(0, np.uint8),
              "ys": np.array(0.0121, np.float32), "yz": np.array(0, np.uint8)}
    feeds = {n: rng.integers(0, 256, shape).astype(np.uint8) for n in ("a", "b")}
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"])]
    model = _finish(nodes, [helper.make_tensor_value_info(n, TensorProto.UINT8, shape) for n in feeds], consts, "y",
                    TensorProto.UINT8)
    return model, feeds


def _best(fn: Callable[[], object], runs: int, clock: Callable[[], float] = time.perf_counter) -> float:
    best = float("inf")
    for _ in range(runs):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="matmul,conv")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-before", action="store_true", help="skip the old kernels (slow at the large shapes)")
    ap.add_argument("--before", choices=("plane", "gathered", "pointwise"), default="plane",
                    help="the 'before' of the conv and qdq families: plane = the row / plane kernels "
                         "(PACK_INT8_WEIGHTS off); gathered = the micro-kernel over gathered pixel windows "
                         "(lower_quant_conv.NHWC_CONV off: what symmetric-weight convs ran before the NHWC form); "
                         "pointwise = lower_quant_conv.POINTWISE_CONV off (1x1 convs on the NHWC or gathered form)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the process's CPU time (time.process_time), preemption excluded; with --threads 1 "
                         "on a loaded machine, the kernels' own cost")
    ap.add_argument("--weights-min", type=int, choices=(-128, -127), default=-127,
                    help="the MatMulInteger weights' lowest value (-127: a symmetric quantizer's range)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    global WEIGHTS_MIN
    WEIGHTS_MIN = args.weights_min
    warnings.simplefilter("ignore")
    import onnxruntime as ort

    import rammer
    from rammer.backends.cpu import graph_passes, lower_quant, lower_quant_conv, ukernel_int8

    # Whether onnxruntime's uint8 x int8 kernels give the spec's sums on this CPU: without VNNI they add
    # pairs of products in saturating int16, so the results are checked against the reference instead.
    ORT_U8S8_EXACT = bool(ukernel_int8.HOST_FEATURES & {"avx512vnni", "avxvnni"})  # noqa: N806

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    cases: list[tuple[str, str, bytes, dict[str, np.ndarray]]] = []
    families = args.family.split(",")
    if "matmul" in families:
        cases += [("matmul", f"M={m} K={k} N={n}", *matmul_case(m, k, n)) for m, k, n in MATMUL_SHAPES]
    if "conv" in families:
        cases += [("conv", name, *conv_case(*shape)) for name, *shape in CONV_SHAPES]
    if "depthwise" in families:
        cases += [("depthwise", name, *conv_case(*shape)) for name, *shape in DEPTHWISE_SHAPES]
    if "qdq" in families:
        cases += [("qdq", name, *qdq_conv_case(*shape)) for name, *shape in CONV_SHAPES]
    if "add" in families:
        cases += [("add", name, *qdq_add_case(shape)) for name, shape in ADD_SHAPES]
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    print(f"# micro_int8: {args.threads} thread(s), {args.clock} clock, micro-kernel form {ukernel_int8.FORM}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print("| family | shape | cpu ms | before ms | ort ms | cpu / ort | before / ort | before / cpu |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for family, name, model, feeds in cases:
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)[0]
        # onnxruntime's own sums saturate here (its QLinearAdd rounds once, the QDQ chain twice): check against
        # the reference (the spec)
        if not ORT_U8S8_EXACT or family == "add":
            want = rammer.compile(model, backend="reference")(feeds)["y"]
        runners = {"cpu": rammer.compile(model, backend="cpu", veus=args.threads, cache=False)}
        if not args.no_before and args.before == "pointwise":
            lower_quant_conv.POINTWISE_CONV = False
            try:
                runners["before"] = rammer.compile(model, backend="cpu", veus=args.threads, cache=False)
            finally:
                lower_quant_conv.POINTWISE_CONV = True
        elif not args.no_before and args.before == "gathered":
            lower_quant_conv.NHWC_CONV = False
            try:
                runners["before"] = rammer.compile(model, backend="cpu", veus=args.threads, cache=False)
            finally:
                lower_quant_conv.NHWC_CONV = True
        elif not args.no_before and family in ("qdq", "add"):  # before: the QDQ pattern as float ops (qdq_as_float)
            pipeline = graph_passes.PIPELINE
            dropped = "qdq-to-qlinear" if family == "qdq" else "qdq-add"
            graph_passes.PIPELINE = tuple(p for p in pipeline if p.name != dropped)
            try:
                runners["before"] = rammer.compile(model, backend="cpu", veus=args.threads, cache=False)
            finally:
                graph_passes.PIPELINE = pipeline
        elif not args.no_before:
            lower_quant.PACK_INT8_WEIGHTS = False
            try:
                runners["before"] = rammer.compile(model, backend="cpu", veus=args.threads, cache=False)
            finally:
                lower_quant.PACK_INT8_WEIGHTS = True
        for label, compiled in runners.items():
            got = compiled(feeds)["y"]
            diff = int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max())
            if diff > (0 if family in ("matmul", "add") else 1):
                ref = 'onnxruntime' if ORT_U8S8_EXACT else 'the reference'
                sys.exit(f"{name}: {label} differs from {ref} by {diff}")
        calls = {k: (lambda c=c: c(feeds)) for k, c in runners.items()}
        calls["ort"] = lambda: sess.run(None, feeds)
        best = {k: float("inf") for k in calls}
        for _ in range(args.rounds):
            for k, fn in calls.items():
                fn()
                best[k] = min(best[k], _best(fn, args.runs, clock))
        ms = {k: v * 1e3 for k, v in best.items()}
        row = {"family": family, "shape": name, **{f"{k}_ms": v for k, v in ms.items()}}
        rows.append(row)
        before = ms.get("before")
        b_ms, b_ort, b_cpu = (("-", "-", "-") if before is None else
                              (f"{before:.3f}", f"{before / ms['ort']:.2f}", f"{before / ms['cpu']:.1f}"))
        print(f"| {family} | {name} | {ms['cpu']:.3f} | {b_ms} | {ms['ort']:.3f} | {ms['cpu'] / ms['ort']:.2f} | "
              f"{b_ort} | {b_cpu} |", flush=True)
    for family in families:
        sel = [r for r in rows if r["family"] == family]
        if sel:
            geo = float(np.exp(np.mean([np.log(r["cpu_ms"] / r["ort_ms"]) for r in sel])))
            line = f"{family}: geomean cpu / ort {geo:.2f}"
            if not args.no_before:
                geo_b = float(np.exp(np.mean([np.log(r["before_ms"] / r["ort_ms"]) for r in sel])))
                line += f", before / ort {geo_b:.2f}"
            print(line)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
