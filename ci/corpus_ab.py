"""Two installations of rammer timed on corpus models, before against after, in alternating processes.

For a change that is not a switch in one process (a kernel generator, a new kernel module), compare two
checkouts, each installed in its own virtualenv: every round runs one child process per side, the order
alternating from round to round; each child builds the models (ci/corpus), compiles them on ``cpu``
with one vEU and no compile cache, and times each model's runs in the process's CPU seconds (best of
five windows of about 0.2 s).  The best time per side over the rounds is reported, with after/before
and a checksum of each side's outputs (sums of absolute values: they agree when the outputs do).

    python ci/corpus_ab.py --before /path/to/venv-main/bin/python --models bert,vit,resnet50 --rounds 3

CPU time at one thread counts only this process's work, so it ranks two sides on a loaded machine,
but cache and core sharing with other processes still move it by several percent: read ratios within
0.97-1.03 as no change.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

_CHILD = r'''
import sys, time, json
sys.path.insert(0, sys.argv[2])
import numpy as np, onnx, rammer, corpus
out = {}
for name in sys.argv[1].split(","):
    entry = corpus.select(models=name)[0]
    built = corpus.build(entry, "full")
    shapes = {k: v.shape for k, v in built.feeds.items()}
    model = rammer.compile(onnx.load_from_string(built.onnx), backend="cpu", cache=False, veus=1, input_shapes=shapes)
    res = model(built.feeds)
    one = time.process_time(); model(built.feeds); one = time.process_time() - one
    reps = max(1, int(0.2 / max(one, 1e-4)))
    best = 1e9
    for _ in range(5):
        start = time.process_time()
        for _ in range(reps):
            model(built.feeds)
        best = min(best, (time.process_time() - start) / reps)
    total = float(sum(float(np.abs(v.astype(np.float64)).sum()) for v in res.values()))
    out[name] = [best * 1e3, total]
print(json.dumps(out))
'''


def _side(python: str, models: str) -> dict[str, list[float]]:
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([python, "-c", _CHILD, models, os.path.dirname(os.path.abspath(__file__))],
                          env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{python}: child failed\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the python executable of the 'before' installation")
    ap.add_argument("--after", default=sys.executable, help="the python executable of the 'after' installation")
    ap.add_argument("--models", required=True, help="comma-separated corpus entries (ci/corpus_bench.py --list)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    best: list[dict[str, list[float]]] = [{}, {}]
    for r in range(args.rounds):
        for side in (0, 1) if r % 2 == 0 else (1, 0):
            for name, (ms, total) in _side((args.before, args.after)[side], args.models).items():
                if name not in best[side] or ms < best[side][name][0]:
                    best[side][name] = [ms, total]
            print(f"round {r + 1}/{args.rounds}: {('before', 'after')[side]} done", file=sys.stderr, flush=True)
    print("| model | before ms | after ms | after / before | output sums (before, after) |")
    print("|---|---:|---:|---:|---|")
    logs = []
    for name in args.models.split(","):
        (b, sb), (a, sa) = best[0][name], best[1][name]
        logs.append(math.log(a / b))
        print(f"| {name} | {b:.2f} | {a:.2f} | {a / b:.3f} | {sb:.6g}, {sa:.6g} |")
    print(f"\ngeomean after / before {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} models "
          f"(CPU time, 1 vEU, {args.rounds} alternating rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
