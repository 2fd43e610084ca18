"""Scaler + linear-model pipelines on ``cpu`` against onnxruntime, over a grid of shapes.

    python ci/bench_ml_linear.py [--rows 8,1000,10000] [--features 20,100] [--classes 2,4,16]
                                 [--threads 2] [--rounds 5] [--runs 20] [--json out.json]

The shape class: scikit-learn's ``StandardScaler`` + ``LogisticRegression`` (multinomial, SOFTMAX
post-transform; binary for 2 classes) exported by skl2onnx (``Scaler``, ``LinearClassifier``,
``Normalizer``; zipmap off) and loaded through ``rammer.compile`` at a fixed row count, as an
onnxruntime user loads it: [rows, features] in, a GEMM to [rows, classes], then per-row softmax,
argmax label and L1 normalization over a few columns.  Those row-wise tails over few columns with
per-column constants are what the whole-rows elementwise mode (``kernels_ew._row_tile``) and the
Scaler fold (``rammer.ml.lower``) serve.

Protocol: one process; per cell, rammer (``veus = --threads``) and onnxruntime
(``intra_op_num_threads = --threads``, ``inter_op_num_threads = 1``) alternate ``--rounds`` times,
``--runs`` timed runs each (after warm-up runs); the median of all of a side's runs is reported, and
the ratio rammer / onnxruntime.  Outputs are checked against onnxruntime first.  Not a test: timings
vary with load; compare ratios taken in the same run.  To time another checkout of rammer with the
same script, put it first on the import path (the editable install's finder maps ``rammer``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import warnings

import numpy as np


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def build(features: int, classes: int) -> bytes:
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(features * 100 + classes)
    x = (rng.standard_normal((2000, features)) * rng.uniform(0.5, 3, features) + rng.normal(size=features))
    x = x.astype(np.float32)
    y = np.argmax(x[:, :min(features, classes)] + 0.3 * rng.standard_normal((2000, min(features, classes))), 1)
    est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(x, y)
        proto = to_onnx(est, x[:1], options={id(est.steps[-1][1]): {"zipmap": False}},
                        target_opset={"": 17, "ai.onnx.ml": 3})
    return proto.SerializeToString()


def _timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def cell(rows: int, features: int, classes: int, args: argparse.Namespace) -> dict:
    import onnxruntime as ort

    import rammer

    data = build(features, classes)
    x = np.random.default_rng(rows).standard_normal((rows, features)).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    feeds = {name: x}
    start = time.perf_counter()
    model = rammer.compile(data, backend="cpu", input_shapes={name: x.shape}, veus=args.threads)
    compile_s = time.perf_counter() - start
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = model.run(feeds)
    labels_differ = float(np.mean(got["label"] != want["label"]))
    prob_err = float(np.max(np.abs(got["probabilities"] - want["probabilities"])))
    if labels_differ > 0.005 or prob_err > 1e-4:
        raise SystemExit(f"rows={rows} features={features} classes={classes}: rammer differs from onnxruntime "
                         f"({labels_differ:.2%} labels, {prob_err:.2e} max probability error)")
    sides = {"rammer": lambda: model.run(feeds), "ort": lambda: sess.run(None, feeds)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for fn in sides.values():
        _timed(fn, 3)
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for k in order:
            times[k] += _timed(sides[k], args.runs)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"rows": rows, "features": features, "classes": classes, "rammer_ms": med["rammer"],
            "ort_ms": med["ort"], "ratio": med["rammer"] / med["ort"], "compile_s": compile_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="8,1000,10000")
    ap.add_argument("--features", default="20,100")
    ap.add_argument("--classes", default="2,4,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    logging.getLogger("rammer").setLevel(logging.ERROR)
    import rammer

    print(f"rammer from {os.path.dirname(rammer.__file__)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    print("| rows | features | classes | rammer ms | ort ms | rammer / ort | compile s |")
    print("|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    out = []
    for rows in _ints(args.rows):
        for features in _ints(args.features):
            for classes in _ints(args.classes):
                r = cell(rows, features, classes, args)
                out.append(r)
                print(f"| {rows} | {features} | {classes} | {r['rammer_ms']:.3f} | {r['ort_ms']:.3f} | "
                      f"{r['ratio']:.2f} | {r['compile_s']:.1f} |", flush=True)
    ratios = [r["ratio"] for r in out]
    print(f"geomean rammer / ort {float(np.exp(np.mean(np.log(ratios)))):.2f}x over {len(out)} cells; "
          f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
