"""The int8 corpus models next to their fp32 counterparts on ``cpu`` and onnxruntime, in one process.

    python ci/int8_vs_fp32.py            # 1 vEU / 1 thread, CPU-time bests

Pairs (``ci/corpus``, full size): bert-int8-dynamic / bert, bert-int8-dynamic-b8 / bert-b8 (the same
float model at batch 8, quantized), mobilenet-v2-int8-qop / mobilenet-v2, resnet18-int8-qdq / resnet18;
``--models`` keeps the pairs whose int8 model it names. All four runners of a pair (rammer and
onnxruntime, int8 and fp32) alternate for ``--rounds`` rounds of ``--runs`` runs after a warm-up; the
best run per runner is kept, timed as the process's CPU time (``time.process_time``; with one thread on a
loaded 2-core machine that excludes the preemptions that wall time measures). Prints each side's ratio to
onnxruntime and the int8 speed-up over fp32 (fp32 time / int8 time) for both runtimes.
``ci/corpus_bench.py`` is the protocol for the corpus tables (one process per runtime, wall time); this
is the same-process view of issue 36's "int8 speed-up over fp32 for both runtimes".
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (ci/corpus, beside this script)

PAIRS = [("bert-int8-dynamic", "bert"), ("bert-int8-dynamic-b8", "bert-b8"), ("mobilenet-v2-int8-qop", "mobilenet-v2"),
         ("resnet18-int8-qdq", "resnet18")]


def _best(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models", default="", help="comma-separated int8 models (default: every pair)")
    args = ap.parse_args()
    pairs = [p for p in PAIRS if not args.models or p[0] in args.models.split(",")]
    warnings.simplefilter("ignore")
    logging.getLogger("rammer").setLevel(logging.ERROR)
    import onnxruntime as ort

    import rammer

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    print("| int8 model | cpu ms | ort ms | cpu / ort | fp32 model | cpu ms | ort ms | cpu / ort "
          "| int8 speed-up cpu | int8 speed-up ort |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for pair in pairs:
        runners: dict[tuple[str, str], Callable[[], object]] = {}
        for name in pair:
            built = corpus.build(corpus.ENTRIES[name], "full")
            shapes = {k: v.shape for k, v in built.feeds.items()}
            model = rammer.compile(built.onnx, backend="cpu", input_shapes=shapes, veus=args.threads)
            sess = ort.InferenceSession(built.onnx, so, providers=["CPUExecutionProvider"])
            runners[(name, "cpu")] = lambda m=model, b=built: m.run(b.feeds)
            runners[(name, "ort")] = lambda s=sess, b=built: s.run(None, b.feeds)
        for fn in runners.values():
            fn()
        ms = {k: float("inf") for k in runners}
        for _ in range(args.rounds):
            for k, fn in runners.items():
                ms[k] = min(ms[k], _best(fn, args.runs))
        q, f = pair
        print(f"| {q} | {ms[(q, 'cpu')]:.1f} | {ms[(q, 'ort')]:.1f} | {ms[(q, 'cpu')] / ms[(q, 'ort')]:.2f} "
              f"| {f} | {ms[(f, 'cpu')]:.1f} | {ms[(f, 'ort')]:.1f} | {ms[(f, 'cpu')] / ms[(f, 'ort')]:.2f} "
              f"| {ms[(f, 'cpu')] / ms[(q, 'cpu')]:.2f}x | {ms[(f, 'ort')] / ms[(q, 'ort')]:.2f}x |", flush=True)
    print(f"# threads {args.threads}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
