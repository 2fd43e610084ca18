"""``ci/gpu_coverage.py --first-run --split`` launches the compiled kernel once with an all-zero
segment table, so PoCL's work-group function is built (and timed) apart from the run: that launch
must do no work (arena and counters untouched) and leave the next runs correct."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gpu_helpers import model, need_opencl, vi
from onnx import helper

import rammer

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "ci") not in sys.path:
    sys.path.insert(0, str(ROOT / "ci"))

import gpu_coverage  # noqa: E402


def test_the_empty_launch_does_no_work_and_the_runs_stay_correct():
    need_opencl()
    # A softmax (an rKernel with block barriers) after an elementwise op: two operators, a signal between blocks.
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
              [vi("x", [64, 96])], [vi("y", [64, 96])])
    feeds = {"x": np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)}
    compiled = rammer.compile(m, backend="opencl", mode="persistent")  # the counters checked below
    ex = compiled.executable
    cl = ex.cl
    marker = np.full(ex.program.constant_arena().size, 7.0, np.float32)  # any change to the arena shows
    cl.enqueue_copy(ex.queue, ex.arena, marker)
    gpu_coverage._empty_launch(ex)
    arena, counters = np.empty_like(marker), np.empty(max(ex.program.blocks, 1), np.int32)
    cl.enqueue_copy(ex.queue, arena, ex.arena)
    cl.enqueue_copy(ex.queue, counters, ex.counters)
    ex.queue.finish()
    assert np.array_equal(arena, marker) and not counters.any()
    cl.enqueue_copy(ex.queue, ex.arena, ex.program.constant_arena())
    want = rammer.compile(m, backend="reference").run(feeds)
    for _ in range(2):
        np.testing.assert_allclose(compiled.run(feeds)["y"], want["y"], rtol=1e-4, atol=1e-6)
