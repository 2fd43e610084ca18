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
import random
import statistics


def _load(paths: list[str]) -> dict[str, dict[str, dict[str, list[list[float]]]]]:
    """{side: {model: {"cpu": [worker's times...], "onnxruntime": [...]}}} over every file."""
    pooled: dict[str, dict[str, dict[str, list[list[float]]]]] = {"before": {}, "after": {}}
    for path in paths:
        try:
            with open(path) as f:
                runs = json.load(f)["runs"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: not a file written by ci/bench_before_after.py --json ({exc})") from None
        for side in pooled:
            for worker in runs[side]:
                for model, times in worker.items():
                    name = model.rsplit("/", 1)[-1].removesuffix(".onnx")
                    slot = pooled[side].setdefault(name, {"cpu": [], "onnxruntime": []})
                    for runtime in slot:
                        slot[runtime].append(times[runtime])
    return pooled


def _median(workers: list[list[float]]) -> float:
    return statistics.median([t for w in workers for t in w])


def table(paths: list[str], resamples: int = 1000, seed: int = 0) -> str:
    pooled = _load(paths)
    rng = random.Random(seed)
    lines = ["| model | workers per side | after / before | 95% interval | after / before of cpu/ort |",
             "|---|---:|---:|---:|---:|"]
    for model, before in pooled["before"].items():
        after = pooled["after"].get(model)
        if after is None:
            continue
        b, a = before["cpu"], after["cpu"]
        ratios = sorted(_median([rng.choice(a) for _ in a]) / _median([rng.choice(b) for _ in b])
                        for _ in range(resamples))
        lo, hi = ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]
        norm = (_median(a) / _median(after["onnxruntime"])) / (_median(b) / _median(before["onnxruntime"]))
        lines.append(f"| {model} | {min(len(a), len(b))} | {_median(a) / _median(b):.3f} | {lo:.3f}-{hi:.3f} "
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
