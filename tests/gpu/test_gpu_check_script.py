"""ci/gpu_check.sh end to end here: without a GPU it says so and exits 3 within a minute; with the CUDA
emulator standing in for the GPU (RAMMER_GPU_CHECK_EMULATED=1) its steps run in subprocesses and append
their results as JSON lines (a dry run of the plumbing, not a GPU figure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from emu_helpers import need_gxx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _lines(folder) -> list[dict]:
    with open(os.path.join(folder, "gpu-check.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_gpu_check_without_a_gpu_says_so_and_exits_3(tmp_path):
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here: the no-GPU path is not what this machine takes")
    except ImportError:
        pass
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    t = time.perf_counter()
    proc = subprocess.run(["bash", os.path.join(ROOT, "ci", "gpu_check.sh")], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert time.perf_counter() - t < 60
    assert "no GPU present" in proc.stdout
    rows = _lines(tmp_path)
    assert rows[0]["step"] == "start" and rows[1]["step"] == "probe" and rows[1]["gpu"] is False


@pytest.mark.slow
def test_gpu_check_steps_on_the_emulator_append_json_lines(tmp_path):
    need_gxx()
    env = {**os.environ, "RAMMER_GPU_CHECK_EMULATED": "1"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "gpu_check.py"), "--out", str(tmp_path),
                           "--small", "alexnet-small", "--full", "", "--no-torch", "--baseline", "reference",
                           "--repeat", "2"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["step"], r.get("model")): r for r in _lines(tmp_path)}
    row = rows[("correct", "alexnet-small")]
    assert row["ok"] and row["persistent_launches_per_inference"] == 1
    assert row["wave_launches_per_inference"] > 1 and row["persistent_max_rel_err"] < 1e-5
    assert all(row[f"{m}_kernel_ms"] > 0 and row[f"{m}_ms"] > 0 for m in ("persistent", "wave"))
    assert rows[("end", None)]["failed"] == 0
