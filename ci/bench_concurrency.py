"""Throughput of one compiled model called from 1, 2 and 4 threads: rammer's cpu backend vs onnxruntime.

Each runtime is measured in its own process (``--one NAME`` runs one side), the
processes alternating, so one's thread pools never share the cores with the
other's.  Every caller checks its outputs against the reference backend first.

    python ci/bench_concurrency.py --models nasnet-small,lstm-tc-small,resnext-small --seconds 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time


def _measure(runtime: str, model: str, threads_list: list[int], seconds: float) -> dict:
    import numpy as np

    import rammer
    import rammer.zoo

    graph_model = rammer.zoo.build(model)
    ref = rammer.compile(graph_model, backend="reference")
    if runtime == "cpu":
        m = rammer.compile(graph_model, backend="cpu")
        feeds = m.random_feeds(0)
        call = m.run
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        sess = ort.InferenceSession(graph_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = ref.random_feeds(0)
        names = [o.name for o in sess.get_outputs()]

        def call(f):
            return dict(zip(names, sess.run(None, f)))
    want = ref.run(feeds)
    got = call(feeds)
    for k, w in want.items():
        if not np.allclose(got[k], w, rtol=1e-3, atol=1e-4):
            raise SystemExit(f"{runtime} gives a wrong {k} on {model}")
    out = {}
    for n in threads_list:
        counts = [0] * n
        wrong = []
        stop = time.perf_counter() + seconds

        def work(i: int) -> None:
            while time.perf_counter() < stop:
                r = call(feeds)
                counts[i] += 1
                if counts[i] == 1 and not all(np.allclose(r[k], w, rtol=1e-3, atol=1e-4) for k, w in want.items()):
                    wrong.append(i)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        start = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        elapsed = time.perf_counter() - start
        out[n] = {"per_s": sum(counts) / elapsed, "wrong": len(wrong)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="nasnet-small,lstm-tc-small")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--one", nargs=2, metavar=("RUNTIME", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    if args.one:
        print(json.dumps(_measure(args.one[0], args.one[1], threads, args.seconds)))
        return 0
    results: dict = {}
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for runtime in ("cpu", "onnxruntime"):
                done = subprocess.run([sys.executable, __file__, "--one", runtime, model, "--threads", args.threads,
                                       "--seconds", str(args.seconds)], capture_output=True, text=True)
                if done.returncode:
                    print(done.stderr[-2000:], file=sys.stderr)
                    return 1
                res = json.loads(done.stdout.strip().splitlines()[-1])
                for n, r in res.items():
                    results.setdefault((model, runtime, int(n)), []).append(r["per_s"])
                    if r["wrong"]:
                        print(f"WRONG: {runtime} {model} {n} threads", file=sys.stderr)
                        return 1
    print("| model | runtime | " + " | ".join(f"{n} thread(s), inf/s" for n in threads) + " | 4 vs 1 |")
    print("|---|---|" + "---:|" * (len(threads) + 1))
    for model in args.models.split(","):
        for runtime in ("cpu", "onnxruntime"):
            best = [max(results[(model, runtime, n)]) for n in threads]
            print(f"| {model} | {runtime} | " + " | ".join(f"{b:.0f}" for b in best) + f" | {best[-1] / best[0]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
