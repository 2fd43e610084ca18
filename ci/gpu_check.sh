#!/usr/bin/env bash
# The GPU check for a lent machine, in one command (at most 8 minutes, nothing downloaded):
#   bash ci/gpu_check.sh            # results appended to $OUT/gpu-check.jsonl as each step ends
# It installs this checkout with what the machine already has (no extras, no registry), then runs
# ci/gpu_check.py: correctness of every zoo model (small and full size) and of the torch.onnx exports
# against the cpu backend, launches per inference, compute-sanitizer racecheck on one small model, and
# rammer (persistent, wave) against PyTorch eager and CUDA-graph replay, timed with CUDA events.
# Exit status: 0 all passed; 1 a step failed or timed out; 3 no GPU present (nothing run or installed; said on
# stdout).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
# No GPU device at all (no NVIDIA device node or nvidia-smi GPU, no ROCm /dev/kfd): say so before
# installing anything, so that running this on a development machine never touches its Python.
if [ -z "${RAMMER_GPU_CHECK_EMULATED:-}" ] && ! ls /dev/nvidia[0-9]* /dev/kfd >/dev/null 2>&1 \
        && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; }; then
    why="no NVIDIA or AMD GPU device on this machine (no /dev/nvidia0, nvidia-smi GPU or /dev/kfd)"
    printf '{"step": "start", "time": "%s"}\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" >>"$OUT/gpu-check.jsonl"
    printf '{"step": "probe", "model": "-", "gpu": false, "reason": "%s", "status": "done"}\n' "$why" \
        >>"$OUT/gpu-check.jsonl"
    echo "no GPU present: $why; nothing to check (exit 3); results in $OUT/gpu-check.jsonl"
    exit 3
fi
if ! "$PY" -c "import rammer, os, sys; sys.exit(0 if os.path.realpath(rammer.__file__).startswith(os.path.realpath('core')) else 1)" 2>/dev/null; then
    "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip-install.log" 2>&1 \
        || { echo "pip install -e . failed (see $OUT/pip-install.log)"; exit 1; }
fi
# The budget leaves the wrapper's own margin inside 8 minutes; `timeout` is the last guard against a hang.
timeout --kill-after=10 475 "$PY" ci/gpu_check.py --out "$OUT" --budget "${GPU_CHECK_BUDGET:-440}" "$@"
rc=$?
[ $rc -eq 124 ] && echo "gpu_check: stopped at the 8-minute limit; results so far in $OUT/gpu-check.jsonl"
exit $rc
