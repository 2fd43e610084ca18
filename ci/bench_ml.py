"""Tree ensembles on CPU: rammer (each strategy) vs onnxruntime vs scikit-learn's own predict.

    python ci/bench_ml.py [--batches 1,1000,100000] [--repeat 20] [--json out.json] [--export DIR]

Models (trained here, on synthetic data): a random forest of 100 trees of depth 8 on
28 features (Hummingbird's HIGGS-sized case) and a deeper one (100 trees, depth 12).
For each batch size it times ``predict_proba`` of scikit-learn (n_jobs=1), onnxruntime's
run of the skl2onnx model (zipmap off; default threads and one intra-op thread) and
rammer's cpu backend for every strategy (the tree rKernel, `tree_kernel`, included) and for the one it picks
("auto"), compiled for the whole batch; above 1,024 rows also ``predict_proba`` of a
default ``rammer.ml.convert`` model, which runs 1,024 rows at a time.  Compile times are
reported.
Numbers are medians of ``--repeat`` runs (fewer at 100,000 rows); every rammer result is
checked against scikit-learn before it is timed.  Not a test: timings vary with load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np

os.environ.setdefault("NUMBA_NUM_THREADS", str(os.cpu_count() or 1))

import rammer.ml as rml  # noqa: E402
from rammer.bench.quiet import wait_until_idle  # noqa: E402
from rammer.ml.estimators import RUN_ROWS  # noqa: E402

STRATEGIES = ["auto", "tree_kernel", "gemm", "tree_traversal", "perfect_tree_traversal"]
#: Batches above this also run as convert() runs them by default: in runs of this many rows.
CHUNK = RUN_ROWS
#: GEMM's middle product is trees x leaves x nodes x rows multiply-adds; past this, skip it.
GEMM_LIMIT_FLOP = 2e11


def median_seconds(fn, repeat: int) -> float:
    """Median of ``repeat`` timed calls, each started on idle cores (thread pools of the
    previous runner, onnxruntime's especially, spin for a while after a run)."""
    fn()
    times = []
    for _ in range(repeat):
        wait_until_idle()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(depth: int, n_trees: int = 100, features: int = 28, rows: int = 20000):
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    x, y = make_classification(rows, features, n_informative=20, random_state=0)
    x = x.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = RandomForestClassifier(n_trees, max_depth=depth, random_state=0, n_jobs=1).fit(x, y)
    return est, x


def bench(est, x_pool: np.ndarray, batch: int, repeat: int, strategies: list[str]) -> dict:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    x = x_pool[rng.integers(0, len(x_pool), batch)]
    reps = max(3, repeat if batch < 10000 else repeat // 4)
    row: dict = {"batch": batch}
    row["sklearn_ms"] = 1e3 * median_seconds(lambda: est.predict_proba(x), reps)
    onx = rml.to_onnx(est, x.shape[1])
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    row["onnxruntime_ms"] = 1e3 * median_seconds(lambda: sess.run(None, {name: x}), reps)
    del sess
    # One intra-op thread too: on a loaded machine onnxruntime's spinning pool can lose to itself.
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess1 = ort.InferenceSession(onx.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    row["onnxruntime_1t_ms"] = 1e3 * median_seconds(lambda: sess1.run(None, {name: x}), reps)
    del sess1
    want = est.predict_proba(x)
    depth = max(t.get_depth() for t in est.estimators_)
    leaves = 2 ** depth
    for s in strategies:
        flop = 2.0 * len(est.estimators_) * leaves * (leaves - 1) * batch
        if s == "gemm" and flop > GEMM_LIMIT_FLOP:
            row[f"{s}_ms"] = None
            row[f"{s}_note"] = f"skipped ({flop / 1e9:.0f} GFLOP per run)"
            continue
        t0 = time.perf_counter()
        model = rml.convert(est, backend="cpu", batch=batch, tree_strategy=None if s == "auto" else s, cache=False,
                            max_run_rows=None)
        row[f"{s}_compile_s"] = time.perf_counter() - t0
        if s == "auto":
            row["auto_strategy"] = ",".join(sorted({u for v in model.strategies.values() for u in v}))
        got = model.predict_proba(x)
        if np.abs(got - want).max() > 1e-5:
            raise SystemExit(f"rammer {s} at batch {batch} differs from scikit-learn by {np.abs(got - want).max()}")
        feeds = {model.compiled.inputs[0].name: x}
        run = model.compiled.run
        row[f"{s}_ms"] = 1e3 * median_seconds(lambda: run(feeds), reps)
    if batch > CHUNK:
        # convert's default: a model compiled for CHUNK rows, which predict runs chunk by chunk.
        t0 = time.perf_counter()
        model = rml.convert(est, backend="cpu", batch=batch, cache=False)
        row["chunked_compile_s"] = time.perf_counter() - t0
        row["chunked_strategy"] = ",".join(sorted({u for v in model.strategies.values() for u in v}))
        if np.abs(model.predict_proba(x) - want).max() > 1e-5:
            raise SystemExit(f"rammer chunked at batch {batch} differs from scikit-learn")
        row["chunked_ms"] = 1e3 * median_seconds(lambda: model.predict_proba(x), reps)
    return row


def markdown(results: list[dict], strategies: list[str]) -> str:
    head = ["model", "batch", "sklearn ms", "onnxruntime ms", "onnxruntime 1 thread ms"] + [f"rammer {s} ms" for s in strategies] + \
        [f"rammer auto, {CHUNK:,}-row runs ms", "auto picks", "compile s (auto)", "best rammer vs best ort",
         "best rammer vs sklearn"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        timed = [r[k] for k in r if k.endswith("_ms") and not k.startswith(("sklearn", "onnxruntime")) and r[k]]
        best = min(timed) if timed else None
        cells = [r["model"], f"{r['batch']:,}", f"{r['sklearn_ms']:.3f}", f"{r['onnxruntime_ms']:.3f}",
                 f"{r['onnxruntime_1t_ms']:.3f}"]
        for s in strategies:
            v = r.get(f"{s}_ms")
            cells.append("-" if v is None else f"{v:.3f}")
        cells.append(f"{r['chunked_ms']:.3f}" if r.get("chunked_ms") else "-")
        cells.append(r.get("auto_strategy", ""))
        cells.append(f"{r.get('auto_compile_s', float('nan')):.2f}")
        ort_best = min(r["onnxruntime_ms"], r["onnxruntime_1t_ms"])
        cells.append("-" if best is None else f"{ort_best / best:.2f}x")
        cells.append("-" if best is None else f"{r['sklearn_ms'] / best:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,1000,100000")
    p.add_argument("--depths", default="8,12")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--export", metavar="DIR", help="also write the forests as ONNX files (rf_depth8.onnx...) "
                                                   "for `rammer bench --models DIR/rf_depth8.onnx`")
    args = p.parse_args(argv)
    strategies = args.strategies.split(",")
    results = []
    for depth in (int(d) for d in args.depths.split(",")):
        est, x = build(depth)
        if args.export:
            os.makedirs(args.export, exist_ok=True)
            with open(os.path.join(args.export, f"rf_depth{depth}.onnx"), "wb") as f:
                f.write(rml.to_onnx(est, x.shape[1]).SerializeToString())
        for batch in (int(b) for b in args.batches.split(",")):
            row = bench(est, x, batch, args.repeat, strategies)
            row["model"] = f"RF 100 trees depth {depth}, 28 features"
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(markdown(results, strategies))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
