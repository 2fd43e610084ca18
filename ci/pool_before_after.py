"""Pool the worker processes of several ``ci/bench_before_after.py --json`` runs into one table.

One run's sub-millisecond figures move by 10% from run to run on a shared 2-core host: each worker process
lands in its own machine phase.  Every run alternates its sides, so the runs' workers can be pooled: the
table gives, per model, after / before of the medians over every timed run of every worker, a 95% interval
from resampling whole workers (a worker is the unit that shares a phase), and the same ratio against each
side's own onnxruntime runs.

    python ci/pool_before_after.py run1.json run2.json ...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_before_after import medians  # noqa: E402


def _load(paths: list[str]) -> dict[str, list[dict]]:
    """Every file's worker results, by side, as ``bench_before_after`` keeps them; a model is named by
    its file's base name (each run exports the torch models to its own temporary folder)."""
    pooled: dict[str, list[dict]] = {"before": [], "after": []}
    for path in paths:
        try:
            with open(path) as f:
                runs = json.load(f)["runs"]
            for side, workers in pooled.items():
                workers.extend({m.rsplit("/", 1)[-1].removesuffix(".onnx"): t for m, t in w.items()}
                               for w in runs[side])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"{path}: not a file written by ci/bench_before_after.py --json ({exc})") from None
    return pooled


def table(paths: list[str], resamples: int = 1000, seed: int = 0) -> str:
    runs = _load(paths)
    rng = random.Random(seed)
    lines = ["| model | workers per side | after / before | 95% interval | after / before of cpu/ort |",
             "|---|---:|---:|---:|---:|"]
    models = dict.fromkeys(m for w in runs["before"] for m in w)
    for model in models:
        b = [w for w in runs["before"] if model in w]
        a = [w for w in runs["after"] if model in w]
        if not a:
            continue
        mb, ma = medians(b, model), medians(a, model)
        ratios = sorted(medians([rng.choice(a) for _ in a], model)["cpu"] / medians([rng.choice(b) for _ in b], model)["cpu"]
                        for _ in range(resamples))
        lo, hi = ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]
        norm = (ma["cpu"] / ma["onnxruntime"]) / (mb["cpu"] / mb["onnxruntime"])
        lines.append(f"| {model} | {min(len(a), len(b))} | {ma['cpu'] / mb['cpu']:.3f} | {lo:.3f}-{hi:.3f} "
                     f"| {norm:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="files written by bench_before_after.py --json")
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    print(table(args.runs, args.resamples))


if __name__ == "__main__":
    main()
