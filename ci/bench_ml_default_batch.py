"""``rammer.ml.convert``'s default batch against explicit batches, on scikit-learn's digits.

    python ci/bench_ml_default_batch.py [--repeat 7] [--estimator forest|logistic]

Converts one fitted estimator (a random forest of 100 trees of depth 8, or a logistic
regression) with ``convert()``'s defaults, with ``batch=1`` and with ``batch=1024``
(each on the cpu backend, compile cache off so compile times are real, after one untimed
warm-up conversion), checks each
model's ``predict`` against scikit-learn's on all 1,797 rows, and prints the median wall
time of ``predict`` on those rows (runs start on idle cores) and each compile time, with
ratios to ``batch=1024`` measured in the same run.  Not a test: timings vary with load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_ml import median_seconds  # the one timing loop of ci/'s ML benchmarks (run from ci/)

import rammer.ml as rml


def main() -> None:
    from sklearn.datasets import load_digits
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--estimator", choices=["forest", "logistic"], default="forest")
    args = ap.parse_args()
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    est = (RandomForestClassifier(100, max_depth=8, random_state=0) if args.estimator == "forest"
           else LogisticRegression(max_iter=2000)).fit(x, y)
    want = est.predict(x)
    # One untimed conversion first: the process's one-time start-up (imports, the runtime's own JIT)
    # would otherwise land in the first row's compile time.
    rml.convert(est, backend="cpu", cache=False, batch=8).predict(x[:8])
    rows = []
    for label, kwargs in [("default", {}), ("batch=1", {"batch": 1}), ("batch=1024", {"batch": 1024})]:
        t0 = time.perf_counter()
        model = rml.convert(est, backend="cpu", cache=False, **kwargs)
        compile_s = time.perf_counter() - t0
        np.testing.assert_array_equal(model.predict(x), want)
        rows.append((label, compile_s, median_seconds(lambda: model.predict(x), args.repeat), model.run_sizes))
    base = {r[0]: r[2] for r in rows}["batch=1024"]
    print(f"{args.estimator} on digits ({len(x)} rows x {x.shape[1]} features), cpu backend, "
          f"median of {args.repeat} predict() calls")
    print(f"{'convert()':<12} {'compile s':>10} {'predict ms':>11} {'vs batch=1024':>14}  run sizes compiled")
    for label, compile_s, t, sizes in rows:
        print(f"{label:<12} {compile_s:>10.2f} {t * 1e3:>11.2f} {t / base:>13.2f}x  {sizes}")


if __name__ == "__main__":
    main()
