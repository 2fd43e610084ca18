"""`rammer run` against `rammer bench` on one model: the same protocol, alone and alternated.

    python ci/run_vs_bench.py [--model alexnet-small] [--backend cpu] [--others reference,onnxruntime]
                              [--repeat 200] [--trials 3]

Each trial runs, each in its own process and in turn: ``rammer run -b B --json``,
``rammer bench --backends B`` (B alone) and ``rammer bench --backends B,OTHERS`` (B
alternated run by run with the others), each without and with ``--settle``, and prints
B's p50 and min per command, the medians over trials, and each as a ratio to
``rammer run``'s p50 in the same trial.  Not a test: timings vary with load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RAMMER = [sys.executable, "-m", "rammer.cli"]


def run_p50(model: str, backend: str, repeat: int, settle: bool) -> tuple[float, float]:
    cmd = RAMMER + ["run", "--zoo", model, "-b", backend, "--repeat", str(repeat), "--json"] + \
        (["--settle"] if settle else [])
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return doc["timing"]["p50_s"], doc["timing"]["min_s"]


def bench_p50(model: str, backends: list[str], repeat: int, settle: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        cmd = RAMMER + ["bench", "--models", model, "--backends", ",".join(backends), "--repeat", str(repeat),
                        "--out", out, "--no-charts", "--settle" if settle else "--no-settle"]
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        cells = json.loads((Path(out) / "results.json").read_text())["cells"]
    cell = next(c for c in cells if c["backend"] == backends[0])
    return cell["p50_s"], cell["min_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="alexnet-small")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--others", default="reference,onnxruntime")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    others = [b for b in args.others.split(",") if b]
    commands = {}
    for settle in (False, True):
        flag = " --settle" if settle else ""
        commands[f"rammer run -b {args.backend}{flag}"] = lambda s=settle: run_p50(args.model, args.backend,
                                                                                   args.repeat, s)
        commands[f"rammer bench --backends {args.backend}{flag}"] = \
            lambda s=settle: bench_p50(args.model, [args.backend], args.repeat, s)
        commands[f"rammer bench --backends {','.join([args.backend] + others)}{flag}"] = \
            lambda s=settle: bench_p50(args.model, [args.backend] + others, args.repeat, s)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    for _ in range(args.trials):
        for name, fn in commands.items():
            results[name].append(fn())
    base = [p50 for p50, _ in results[f"rammer run -b {args.backend}"]]
    print(f"{args.model}, {args.backend} backend's p50 and min over {args.repeat} timed runs, "
          f"medians of {args.trials} trials (ratio: to `rammer run` p50 of the same trial)")
    for name, rows in results.items():
        p50 = statistics.median(r[0] for r in rows)
        low = statistics.median(r[1] for r in rows)
        ratio = statistics.median(r[0] / b for r, b in zip(rows, base))
        print(f"  {name:<58} p50 {p50 * 1e6:9.1f} us  min {low * 1e6:9.1f} us  {ratio:6.2f}x")


if __name__ == "__main__":
    main()
