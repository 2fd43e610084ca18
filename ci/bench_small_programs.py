"""Where a second vEU starts paying: small elementwise and GEMM chains on 1 vs 2 vEUs.

    python ci/bench_small_programs.py [--kinds ew,gemm] [--rows 8,64,512,4096,32768] [--rounds 5] [--runs 20]
                                      [--json out.json]

The shape class: programs of a few ops whose work is tiny to moderate (tens of microseconds to a
few milliseconds), the size of traditional-ML pipelines and small recurrent steps:

* ``ew``: a chain of 6 elementwise ops (Add, Mul, Tanh, Sub, Sigmoid, Mul) over [rows, 64] with
  per-column constants (fused by the cpu backend into one or two elementwise programs);
* ``gemm``: a chain of 3 MatMul + Add + Relu layers [rows, 64] x [64, 64] (GEMMs with epilogues).

Per cell the same model is compiled three times: ``veus=1``, ``veus=2`` and without a count (the
cost model's choice, :func:`rammer.backends.cpu.scheduling.choose_veus`), and the three run
alternately, ``--rounds`` rounds of ``--runs`` timed runs each (after warm-up); the median of each
is reported with the cost model's figures for the 2-vEU schedule (estimated one-vEU work, simulated
2-vEU makespan, barrier rows of the busiest vEU).  ``2 / 1`` below 1 means the second vEU pays.
The fitted "barrier cost" column is what one barrier row would have to cost for the measured 2-vEU
time: (t2 - t1 + estimated gain) / barriers, the figure ``BARRIER_WAIT_US`` stands for.
Not a test: timings vary with load; run it quiet and loaded and compare ratios taken in one run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

import numpy as np


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def build(kind: str, rows: int, cols: int = 64) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(rows * 7 + len(kind))
    inits = []
    nodes = []

    def const(name: str, shape: tuple[int, ...]) -> str:
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, shape).astype(np.float32), name))
        return name

    x = "x"
    if kind == "ew":
        steps = [("Add", True), ("Mul", True), ("Tanh", False), ("Sub", True), ("Sigmoid", False), ("Mul", True)]
        for i, (op, binary) in enumerate(steps):
            out = f"t{i}"
            ins = [x, const(f"c{i}", (cols,))] if binary else [x]
            nodes.append(helper.make_node(op, ins, [out]))
            x = out
    elif kind == "gemm":
        for i in range(3):
            nodes.append(helper.make_node("MatMul", [x, const(f"w{i}", (cols, cols))], [f"m{i}"]))
            nodes.append(helper.make_node("Add", [f"m{i}", const(f"b{i}", (cols,))], [f"a{i}"]))
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
            x = f"r{i}"
    else:
        raise SystemExit(f"unknown kind '{kind}': use ew or gemm")
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(nodes, f"small-{kind}-{rows}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def _timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def cell(kind: str, rows: int, args: argparse.Namespace) -> dict:
    import rammer
    from rammer.backends.cpu.scheduling import BARRIER_WAIT_US

    data = build(kind, rows)
    x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
    feeds = {"x": x}
    variants = {"1": {"veus": 1}, "2": {"veus": 2}, "auto": {}}
    models = {k: rammer.compile(data, backend="cpu", cache=False, **o) for k, o in variants.items()}
    want = models["1"].run(feeds)["y"]
    for k, m in models.items():
        np.testing.assert_allclose(m.run(feeds)["y"], want, rtol=1e-5, atol=1e-6, err_msg=f"{kind} rows={rows} {k}")
    auto_report = models["auto"].executable.program.report
    choice = auto_report.get("veu_choice") or {}
    times: dict[str, list[float]] = {k: [] for k in models}
    for m in models.values():
        _timed(lambda m=m: m.run(feeds), 5)
    keys = list(models)
    for r in range(args.rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            times[k] += _timed(lambda k=k: models[k].run(feeds), args.runs)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    gain = choice.get("gain_us", float("nan"))
    barriers = choice.get("barriers", 0)
    fitted = (med["2"] - med["1"] + gain) / barriers if barriers else float("nan")
    return {"kind": kind, "rows": rows, "t1_us": med["1"], "t2_us": med["2"], "auto_us": med["auto"],
            "ratio_2_1": med["2"] / med["1"], "auto_veus": auto_report["veus"], "work_us": choice.get("work_us"),
            "span_us": choice.get("span_us"), "barriers": barriers, "gain_us": gain,
            "sync_us": choice.get("sync_us"), "fitted_barrier_us": fitted, "barrier_wait_us": BARRIER_WAIT_US}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="ew,gemm")
    ap.add_argument("--rows", default="8,64,512,4096,32768")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    logging.getLogger("rammer").setLevel(logging.ERROR)
    import rammer

    print(f"rammer from {os.path.dirname(rammer.__file__)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    print("| kind | rows | est. work us | est. 2-vEU span us | barriers | 1 vEU us | 2 vEUs us | 2 / 1 | "
          "auto picks | auto us | fitted barrier us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    out = []
    for kind in args.kinds.split(","):
        for rows in _ints(args.rows):
            r = cell(kind, rows, args)
            out.append(r)
            print(f"| {kind} | {rows} | {r['work_us']:.1f} | {r['span_us']:.1f} | {r['barriers']} | "
                  f"{r['t1_us']:.1f} | {r['t2_us']:.1f} | {r['ratio_2_1']:.2f} | {r['auto_veus']} | "
                  f"{r['auto_us']:.1f} | {r['fitted_barrier_us']:.1f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
