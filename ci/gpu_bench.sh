#!/usr/bin/env bash
# The GPU benchmark in one command, on a machine with an NVIDIA GPU (or BACKEND=rocm with an AMD one):
# installs the cuda (or rocm) extra, torch and onnxruntime, then runs ci/gpu_bench.py over every zoo model at
# full size and the torch.onnx exports, appending one JSON line per model to gpu-bench.jsonl. Without a GPU it
# compiles everything and exits 2. It needs a package registry: on the lent GPU machines (none reachable) run
# `bash ci/gpu_check.sh` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND="${BACKEND:-cuda}"
python -m pip install -q -e ".[${BACKEND},test,torch]"
python -m pip install -q onnxruntime-gpu 2>/dev/null || echo "onnxruntime-gpu not installed: no onnxruntime CUDA baseline"
python ci/gpu_bench.py --backend "$BACKEND" --torch --json gpu-bench.jsonl "$@"
