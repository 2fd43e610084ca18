"""Transformer-shaped GEMMs on ``cpu`` against onnxruntime, over a grid of shapes.

    python ci/micro_gemm.py                              # the whole grid, 2 vEUs / 2 threads
    python ci/micro_gemm.py --family linear --threads 1  # one family
    python ci/micro_gemm.py --json micro.json            # also write the rows
    python ci/micro_gemm.py --before rammer.backends.cpu.lower_linalg.PREPACK_WEIGHTS=0   # before/after
    python ci/micro_gemm.py --models lstm-lm,lstm-lm-b8 --threads 1 --clock cpu \
        --before rammer.backends.cpu.lower_rnn.PACK_WEIGHTS=False      # whole corpus models before/after

Families (each a single op or a small block, the shape classes transformers are made of):

* ``linear``: ``x[M, K] @ W[K, N] + b`` with a constant weight, M (tokens) from 1 to 256 rows:
  the skinny-M projections of encoders and decoders.
* ``lm-head``: the same without bias at a vocabulary's width (N = 16,000-32,000): a decoder's
  output projection, the largest single GEMM of small decoders.
* ``linear-gelu``: the same followed by erf-GELU (``0.5 x (1 + erf(x / sqrt 2))``, BERT's and ViT's
  MLP), to see whether the activation rides on the GEMM's stores.
* ``linear-gelu-tanh``: the same with the tanh approximation (``0.5 x (1 + tanh(sqrt(2/pi) (x +
  0.044715 x**3)))``, GPT-2's, ALBERT's and T5 v1.1's MLP) as Hugging Face's ``gelu_new`` exports it
  (``--before rammer.passes.fuse_gelu.MATCH_TANH=False`` leaves it as eight nodes).
* ``narrow``: the same with many rows (196-4096) and few columns (19-320): channels-last
  projections (ConvNeXt's MLP back to C channels), pointwise layers written as MatMuls, class heads.
* ``scores``: ``Q[1, H, S, D] @ transpose(K)[1, H, D, S]``, the attention scores over heads
  (a 4-D batched MatMul whose right operand is a transposed view).
* ``context``: ``P[1, H, S, S] @ V[1, H, S, D]``, the weighted sum over heads.
* ``attention``: ``softmax(Q K^T * scale + mask) @ V`` with an additive [1, 1, 1, S] mask: the block.
* ``rnn``: one LSTM or GRU layer (sequence 32, input = hidden) at batch 1-16 and hidden 128-512: a
  recurrent GEMM of ``batch`` rows per time step against a constant weight, with the input projection
  of the whole sequence before it (``--before rammer.backends.cpu.lower_rnn.PACK_WEIGHTS=False``); and
  bidirectional layers at batch 1 and 4, hidden 128-384 (two independent chains of steps: on one vEU
  ``--before rammer.schedule.wavefront.DEPTH_FIRST_ON_ONE_VEU=False`` interleaves them).

Protocol: one process, both runtimes with the same thread count (rammer ``veus`` = onnxruntime
``intra_op_num_threads``, ``inter_op_num_threads`` = 1); per shape, ``--rounds`` alternating rounds,
each side timing ``--runs`` runs after a warm-up; the best run of all rounds per side is reported
(``--stat median``: the best round's median instead), ratio = cpu / onnxruntime.  The best run is the
default because on a loaded machine (load average 10 on 2 cores) a run of a millisecond or more is
preempted more often than not, and the medians then measure the OS scheduler rather than the kernels.
``--clock cpu`` times the process's CPU time instead of wall time (``time.process_time``: all its
threads, spinning included, preemption excluded): with ``--threads 1`` on a loaded machine that is the
kernels' own cost; with more threads it is total CPU, not latency.  Outputs are checked against onnxruntime
(max |diff| / max(1, |ort|) <= 1e-3).  This is a micro-benchmark (same process, noisy shared
machines): read ratios, not absolute times, and compare before/after in the same run.

``--before MODULE.ATTR=VALUE`` (repeatable) compiles a second rammer model of each shape with those
module settings (the switches a change keeps for this purpose, e.g. ``lower_linalg.PREPACK_WEIGHTS``)
and times it in the same alternation: columns ``before ms`` and ``after/before``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("linear", "lm-head", "linear-gelu", "linear-gelu-tanh", "narrow", "scores", "context", "attention", "rnn")


def _model(nodes: list, inputs: list, output: tuple[str, list[int]], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])
    graph = helper.make_graph(nodes, "micro", ins, [out], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def linear(m: int, k: int, n: int, gelu: bool | str = False, bias: bool = True
           ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``x @ w (+ b)``, then ``gelu``: True (or "erf") the exact GELU as torch exports it, "tanh" the
    tanh approximation as Hugging Face's gelu_new exports it (GPT-2, ALBERT, T5 v1.1)."""
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(n).astype(np.float32) * 0.1
        nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
                 helper.make_node("Add", ["xw", "b"], ["h" if gelu else "y"])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h" if gelu else "y"])]
    if gelu == "tanh":
        inits.update(three=np.array(3.0, np.float32), kappa=np.array(0.044715, np.float32),
                     beta=np.array(math.sqrt(2.0 / math.pi), np.float32), one=np.array(1.0, np.float32),
                     half=np.array(0.5, np.float32))
        nodes += [helper.make_node("Mul", ["h", "half"], ["hh"]), helper.make_node("Pow", ["h", "three"], ["c"]),
                  helper.make_node("Mul", ["c", "kappa"], ["kc"]), helper.make_node("Add", ["h", "kc"], ["i"]),
                  helper.make_node("Mul", ["i", "beta"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
                  helper.make_node("Add", ["t", "one"], ["t1"]), helper.make_node("Mul", ["hh", "t1"], ["y"])]
    elif gelu:
        inits.update(sqrt2=np.array(math.sqrt(2.0), np.float32), one=np.array(1.0, np.float32),
                     half=np.array(0.5, np.float32))
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["hs"]), helper.make_node("Erf", ["hs"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["he"]),
                  helper.make_node("Mul", ["he", "half"], ["y"])]
    feeds = {"x": rng.standard_normal((1, m, k)).astype(np.float32)}
    return _model(nodes, [("x", [1, m, k])], ("y", [1, m, n]), inits), feeds


def scores(h: int, s: int, d: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["y"])]
    feeds = {n: rng.standard_normal((1, h, s, d)).astype(np.float32) for n in ("q", "k")}
    return _model(nodes, [("q", [1, h, s, d]), ("k", [1, h, s, d])], ("y", [1, h, s, s]), {}), feeds


def context(h: int, s: int, d: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    p = rng.random((1, h, s, s)).astype(np.float32)
    feeds = {"p": p / p.sum(-1, keepdims=True), "v": rng.standard_normal((1, h, s, d)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, [("p", [1, h, s, s]), ("v", [1, h, s, d])], ("y", [1, h, s, d]), {}), feeds


def attention(h: int, s: int, d: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    inits = {"scale": np.array(1.0 / math.sqrt(d), np.float32)}
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "scale"], ["qks"]),
             helper.make_node("Add", ["qks", "mask"], ["qkm"]), helper.make_node("Softmax", ["qkm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    feeds = {n: rng.standard_normal((1, h, s, d)).astype(np.float32) for n in ("q", "k", "v")}
    mask = np.zeros((1, 1, 1, s), np.float32)
    mask[..., s - s // 8:] = -1e4  # padded tail tokens, as a BERT attention mask makes them
    feeds["mask"] = mask
    ins = [("q", [1, h, s, d]), ("k", [1, h, s, d]), ("v", [1, h, s, d]), ("mask", [1, 1, 1, s])]
    return _model(nodes, ins, ("y", [1, h, s, d]), inits), feeds


def recurrent(op: str, batch: int, hid: int, seq: int = 32, dirs: int = 1) -> tuple[onnx.ModelProto,
                                                                                  dict[str, np.ndarray]]:
    rng = np.random.default_rng(4)
    gates = {"LSTM": 4, "GRU": 3}[op]
    inits = {"W": (rng.standard_normal((dirs, gates * hid, hid)) / math.sqrt(hid)).astype(np.float32),
             "R": (rng.standard_normal((dirs, gates * hid, hid)) / math.sqrt(hid)).astype(np.float32),
             "B": (rng.standard_normal((dirs, 2 * gates * hid)) * 0.1).astype(np.float32)}
    attrs = {"direction": "bidirectional"} if dirs == 2 else {}
    nodes = [helper.make_node(op, ["x", "W", "R", "B"], ["y"], hidden_size=hid, **attrs)]
    feeds = {"x": rng.standard_normal((seq, batch, hid)).astype(np.float32)}
    return _model(nodes, [("x", [seq, batch, hid])], ("y", [seq, dirs, batch, hid]), inits), feeds


def _corpus_model(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    from corpus import ENTRIES, build  # ci/corpus: torch, transformers and skl2onnx

    built = build(ENTRIES[name], "full")
    return built.onnx, dict(built.feeds)


def grid(families: tuple[str, ...]) -> list[tuple[str, str, Callable[[], tuple[onnx.ModelProto, dict]]]]:
    """(family, shape label, builder) over the grid."""
    out = []
    if "linear" in families:
        for k, n in ((768, 768), (768, 3072), (3072, 768), (384, 1536)):
            for m in (1, 8, 32, 128, 256, 1024):
                out.append(("linear", f"M={m} K={k} N={n}", lambda m=m, k=k, n=n: linear(m, k, n)))
    if "lm-head" in families:
        for k, n in ((384, 16000), (768, 32000), (512, 16000)):
            for m in (1, 8, 128, 1024):  # 1024: a batch of 8 sequences of 128 tokens
                out.append(("lm-head", f"M={m} K={k} N={n}", lambda m=m, k=k, n=n: linear(m, k, n, bias=False)))
    if "narrow" in families:
        # many rows into few columns: channels-last projections (ConvNeXt's 4C -> C at 56x56...),
        # MobileViT/hybrid pointwise layers as MatMuls, a segmentation head's classes
        for m, k, n in ((3136, 320, 80), (3136, 64, 64), (3136, 256, 64), (784, 640, 160), (784, 512, 128),
                        (784, 96, 96), (196, 1280, 320), (196, 384, 48), (4096, 256, 19), (3136, 96, 24)):
            out.append(("narrow", f"M={m} K={k} N={n}", lambda m=m, k=k, n=n: linear(m, k, n)))
    if "linear-gelu" in families:
        for k, n in ((768, 3072), (384, 1536)):
            for m in (8, 64, 197):
                out.append(("linear-gelu", f"M={m} K={k} N={n}", lambda m=m, k=k, n=n: linear(m, k, n, True)))
    if "linear-gelu-tanh" in families:
        for k, n in ((768, 3072), (384, 1536), (512, 2048)):
            for m in (8, 64, 128, 256):
                out.append(("linear-gelu-tanh", f"M={m} K={k} N={n}",
                            lambda m=m, k=k, n=n: linear(m, k, n, "tanh")))
    for fam, build in (("scores", scores), ("context", context), ("attention", attention)):
        if fam in families:
            for h, d in ((12, 64), (4, 32)):
                for s in (32, 64, 128, 256):
                    out.append((fam, f"H={h} S={s} D={d}", lambda h=h, s=s, d=d, b=build: b(h, s, d)))
    if "rnn" in families:
        for op in ("LSTM", "GRU"):
            for hid in (128, 256, 512):
                for batch in (1, 4, 8, 16):
                    out.append(("rnn", f"{op} B={batch} H={hid}", lambda op=op, b=batch, h=hid: recurrent(op, b, h)))
        for op in ("LSTM", "GRU"):  # both directions: two independent chains of steps
            for hid in (128, 256, 384):
                for batch in (1, 4):
                    out.append(("rnn", f"bi{op} B={batch} H={hid}",
                                lambda op=op, b=batch, h=hid: recurrent(op, b, h, dirs=2)))
    return out


def _time_ms(fn: Callable[[], Any], runs: int, stat: str, clock: str = "wall") -> float:
    now = time.perf_counter if clock == "wall" else time.process_time
    fn()
    times = []
    for _ in range(runs):
        t = now()
        fn()
        times.append(now() - t)
    return (min(times) if stat == "min" else statistics.median(times)) * 1e3


def _setting(text: str) -> tuple[Any, str, Any]:
    """``pkg.module.ATTR=VALUE`` as (module, attribute, value); VALUE is a Python literal."""
    import ast
    import importlib

    target, _, value = text.partition("=")
    module_name, _, attr = target.strip().rpartition(".")
    module = importlib.import_module(module_name)
    if not hasattr(module, attr):
        raise SystemExit(f"--before {text!r}: {module_name} has no attribute {attr!r}")
    return module, attr, ast.literal_eval(value.strip())


def _compile_with(data: bytes, threads: int, settings: list[tuple[Any, str, Any]],
                  shapes: dict[str, tuple[int, ...]] | None = None) -> Any:
    import rammer

    saved = [(m, a, getattr(m, a)) for m, a, _ in settings]
    try:
        for m, a, v in settings:
            setattr(m, a, v)
        return rammer.compile(data, backend="cpu", veus=threads, cache=False, input_shapes=shapes)
    finally:
        for m, a, v in saved:
            setattr(m, a, v)


def measure(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], threads: int, rounds: int,
            runs: int, stat: str = "min", clock: str = "wall",
            before: list[tuple[Any, str, Any]] | None = None) -> dict[str, Any]:
    import onnxruntime as ort

    import rammer

    data = model if isinstance(model, bytes) else model.SerializeToString()
    shapes = {k: v.shape for k, v in feeds.items()}
    compiled = rammer.compile(data, backend="cpu", veus=threads, cache=False, input_shapes=shapes)
    baseline = _compile_with(data, threads, before, shapes) if before else None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    got = next(iter(compiled.run(feeds).values()))
    err = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    if baseline is not None:
        old = next(iter(baseline.run(feeds).values()))
        err = max(err, float(np.max(np.abs(old - want) / np.maximum(1.0, np.abs(want)))))
    best = {"cpu": math.inf, "ort": math.inf, "before": math.inf}
    for _ in range(rounds):
        if baseline is not None:
            best["before"] = min(best["before"], _time_ms(lambda: baseline.run(feeds), runs, stat, clock))
        best["cpu"] = min(best["cpu"], _time_ms(lambda: compiled.run(feeds), runs, stat, clock))
        best["ort"] = min(best["ort"], _time_ms(lambda: sess.run(None, feeds), runs, stat, clock))
    out = {"cpu_ms": best["cpu"], "ort_ms": best["ort"], "ratio": best["cpu"] / best["ort"], "max_err": err,
           "ok": err <= 1e-3}
    if baseline is not None:
        out.update(before_ms=best["before"], before_ratio=best["before"] / best["ort"],
                   speedup=best["before"] / best["cpu"])
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default=",".join(FAMILIES), help=f"comma-separated: {', '.join(FAMILIES)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--stat", choices=("min", "median"), default="min",
                    help="per side: best run, or best round's median")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall time, or the process's CPU time")
    ap.add_argument("--before", action="append", default=[], metavar="MODULE.ATTR=VALUE",
                    help="settings of a second, 'before' compile of each shape (repeatable)")
    ap.add_argument("--shapes", default="",
                    help="only shapes whose label contains one of these comma-separated strings")
    ap.add_argument("--models", default="",
                    help="instead of the grid: these corpus models (ci/corpus, full size; comma-separated), as rows "
                         "of family 'corpus' (with --before: the whole models before/after in this process)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import logging
    logging.getLogger("rammer").setLevel(logging.ERROR)
    families = tuple(f.strip() for f in args.family.split(",") if f.strip())
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    before = [_setting(t) for t in args.before]
    rows = []
    if before:
        print("| family | shape | before ms | after ms | ort ms | before/ort | after/ort | speed-up | max err |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    else:
        print("| family | shape | cpu ms | ort ms | cpu/ort | max err |")
        print("|---|---|---:|---:|---:|---:|")
    wanted = [w.strip() for w in args.shapes.split(",") if w.strip()]
    cases = grid(families)
    if args.models:
        families = ("corpus",)
        names = [name.strip() for name in args.models.split(",") if name.strip()]
        cases = [("corpus", name, lambda name=name: _corpus_model(name)) for name in names]
    for fam, label, build in cases:
        if wanted and not any(w in label for w in wanted):
            continue
        model, feeds = build()
        r = measure(model, feeds, args.threads, args.rounds, args.runs, args.stat, args.clock, before)
        r.update(family=fam, shape=label)
        rows.append(r)
        flag = "" if r["ok"] else " MISMATCH"
        if before:
            print(f"| {fam} | {label} | {r['before_ms']:.3f} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | "
                  f"{r['before_ratio']:.2f} | {r['ratio']:.2f} | {r['speedup']:.2f} | {r['max_err']:.1e}{flag} |",
                  flush=True)
        else:
            print(f"| {fam} | {label} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | {r['ratio']:.2f} | "
                  f"{r['max_err']:.1e}{flag} |", flush=True)
    print()
    for fam in families:
        ratios = [r["ratio"] for r in rows if r["family"] == fam]
        if ratios:
            line = f"{fam}: geomean cpu/onnxruntime {_geomean(ratios):.2f}x"
            if before:
                line += f" (before {_geomean([r['before_ratio'] for r in rows if r['family'] == fam]):.2f}x)"
            print(line + f" over {len(ratios)} shapes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
