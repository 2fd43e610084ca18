#!/usr/bin/env bash
# CI smoke run of the benchmark matrix: every -small zoo model, one timed run
# each, on the backends of ci/bench-matrix.toml's "smoke" matrix.  --strict
# fails the run when a cell is wrong, failed to compile or run, or could not
# be checked; unavailable backends (n/a) are fine.
#   bash ci/bench_smoke.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${TMPDIR:-/tmp}/rammer-bench-smoke}"
python -m rammer bench --config ci/bench-matrix.toml --matrix smoke --strict --out "$out"
for f in results.json results.csv results.md latency.png speedup.png; do
    test -s "$out/$f" || { echo "bench smoke: $out/$f is missing or empty" >&2; exit 1; }
done
echo "bench smoke: ok ($out)"
