"""One LSTM / GRU layer on ``cpu`` against onnxruntime, over a grid of shapes: hidden 64-512, sequence
16-256, batch 1 and 8, one or both directions, GRU with ``linear_before_reset`` both ways.

Protocol (that of ``ci/micro_gemm.py``): one process, rammer with ``--threads`` vEUs and onnxruntime with
as many intra-op threads; per shape ``--rounds`` alternating rounds of ``--runs`` runs after a warm-up, the
best run per side (CPU time with ``--clock cpu``).  ``--before MODULE.ATTR=VALUE`` compiles a second rammer
model with those settings, timed in the same alternation, e.g. the recurrence as rOperators per step::

    python ci/micro_rnn.py --threads 1 --clock cpu --rounds 3 --runs 5 \\
        --before rammer.backends.cpu.lower_rnn.FUSED_RECURRENCE=False

Every output (Y, Y_h and, for LSTM, Y_c) is checked against onnxruntime (max |diff| / max(1, |ort|) <= 1e-3).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from micro_gemm import _compile_with, _geomean, _setting, _time_ms  # noqa: E402


def layer(op: str, batch: int, hid: int, seq: int, dirs: int = 1, lbr: int = 0, inp: int | None = None,
          layout: int = 0, initial: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One ``op`` layer (all outputs) on ``x`` of ``inp`` features (default: hidden)."""
    rng = np.random.default_rng(hid * 7 + seq + batch)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    inp = inp or hid
    inits = {"W": (rng.standard_normal((dirs, gates * hid, inp)) / math.sqrt(inp)).astype(np.float32),
             "R": (rng.standard_normal((dirs, gates * hid, hid)) / math.sqrt(hid)).astype(np.float32),
             "B": (rng.standard_normal((dirs, 2 * gates * hid)) * 0.1).astype(np.float32)}
    attrs: dict[str, Any] = {"hidden_size": hid, "layout": layout}
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    x_shape = [seq, batch, inp] if layout == 0 else [batch, seq, inp]
    state_shape = [dirs, batch, hid] if layout == 0 else [batch, dirs, hid]
    ins = ["x", "W", "R", "B", "", "h0", "c0" if op == "LSTM" else ""] if initial else ["x", "W", "R", "B"]
    while ins and not ins[-1]:
        ins.pop()
    outs = ["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"]
    graph_ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if initial:
        for name in ins[5:]:
            graph_ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state_shape))
            feeds[name] = rng.standard_normal(state_shape).astype(np.float32) * 0.5
    y_shape = [seq, dirs, batch, hid] if layout == 0 else [batch, seq, dirs, hid]
    graph_outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)]
    graph_outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in outs[1:]]
    graph = helper.make_graph([helper.make_node(op, ins, outs, **attrs)], "micro_rnn", graph_ins, graph_outs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds


def grid() -> list[tuple[str, dict[str, Any]]]:
    """(label, layer() arguments) over the grid."""
    out = []
    for op, lbr in (("LSTM", 0), ("GRU", 0), ("GRU", 1)):
        for hid in (64, 128, 256, 512):
            # (sequence, batch, directions); the longest runs once per class
            for seq, batch, dirs in ((16, 1, 1), (64, 1, 2), (256, 1, 1), (64, 8, 1), (64, 8, 2)):
                if hid == 512 and (seq == 256 or dirs == 2):
                    continue
                name = f"{op}{' lbr' if lbr else ''} H={hid} S={seq} B={batch}{' bi' if dirs == 2 else ''}"
                out.append((name, dict(op=op, batch=batch, hid=hid, seq=seq, dirs=dirs, lbr=lbr)))
    return out


def measure(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int, rounds: int, runs: int,
            clock: str, before: list[tuple[Any, str, Any]]) -> dict[str, Any]:
    import onnxruntime as ort

    data = model.SerializeToString()
    shapes = {k: v.shape for k, v in feeds.items()}
    compiled = _compile_with(data, threads, [], shapes)
    baseline = _compile_with(data, threads, before, shapes) if before else None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, sess.run(None, feeds)))
    err = 0.0
    for runner in (compiled, baseline):
        if runner is None:
            continue
        got = runner.run(feeds)
        for name in names:
            err = max(err, float(np.max(np.abs(got[name] - want[name]) / np.maximum(1.0, np.abs(want[name])))))
    best = {"cpu": math.inf, "ort": math.inf, "before": math.inf}
    for _ in range(rounds):
        if baseline is not None:
            best["before"] = min(best["before"], _time_ms(lambda: baseline.run(feeds), runs, "min", clock))
        best["cpu"] = min(best["cpu"], _time_ms(lambda: compiled.run(feeds), runs, "min", clock))
        best["ort"] = min(best["ort"], _time_ms(lambda: sess.run(None, feeds), runs, "min", clock))
    out = {"cpu_ms": best["cpu"], "ort_ms": best["ort"], "ratio": best["cpu"] / best["ort"], "max_err": err}
    if baseline is not None:
        out.update(before_ms=best["before"], before_ratio=best["before"] / best["ort"],
                   speedup=best["before"] / best["cpu"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--before", action="append", default=[], metavar="MODULE.ATTR=VALUE")
    ap.add_argument("--shapes", default="", help="only shapes whose label contains one of these (comma-separated)")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    before = [_setting(s) for s in args.before]
    wanted = [s for s in args.shapes.split(",") if s]
    rows = []
    head = "| shape | before ms | after ms | ort ms | before / ort | after / ort | speed-up | max err |"
    print(head if before else "| shape | cpu ms | ort ms | cpu / ort | max err |")
    print("|" + "---|" * (8 if before else 5))
    for label, kwargs in grid():
        if wanted and not any(w in label for w in wanted):
            continue
        model, feeds = layer(**kwargs)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, args.clock, before)
        r["shape"] = label
        rows.append(r)
        if before:
            print(f"| {label} | {r['before_ms']:.3f} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | "
                  f"{r['before_ratio']:.2f} | {r['ratio']:.2f} | {r['speedup']:.2f} | {r['max_err']:.1e} |", flush=True)
        else:
            print(f"| {label} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | {r['max_err']:.1e} |",
                  flush=True)
    if rows:
        line = f"geomean cpu/onnxruntime {_geomean([r['ratio'] for r in rows]):.2f}x"
        if before:
            line += (f" (before {_geomean([r['before_ratio'] for r in rows]):.2f}x; speed-up "
                     f"{_geomean([r['speedup'] for r in rows]):.2f}x)")
        print(f"{line} over {len(rows)} shapes; max err {max(r['max_err'] for r in rows):.1e}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["max_err"] <= 1e-3 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
