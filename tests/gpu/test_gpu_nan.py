"""Max, Min, ReduceMax/ReduceMin and MaxPool propagate NaN on the GPU backends, as numpy's maximum
and minimum (the reference) do: C's fmax/fmin return the other operand, so a NaN made upstream (a
BatchNormalization with epsilon NaN, found by the fuzzer) vanished on opencl."""

from __future__ import annotations

import numpy as np
from gpu_helpers import check_wave, model, vi
from onnx import helper

NAN = np.float32("nan")


def _feeds() -> dict[str, np.ndarray]:
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) - 10.0
    x[0, 0, 1, 2] = NAN
    return {"x": x, "y": np.full((1, 2, 3, 4), 2.0, np.float32)}


def test_elementwise_max_and_min_propagate_nan():
    m = model([helper.make_node("Max", ["x", "y"], ["a"]), helper.make_node("Min", ["y", "x"], ["b"])],
              [vi("x", [1, 2, 3, 4]), vi("y", [1, 2, 3, 4])], [vi("a", [1, 2, 3, 4]), vi("b", [1, 2, 3, 4])])
    got = check_wave(m, _feeds()).run(_feeds())
    assert np.isnan(got["a"][0, 0, 1, 2]) and np.isnan(got["b"][0, 0, 1, 2])


def test_reductions_and_max_pool_propagate_nan():
    nodes = [helper.make_node("ReduceMax", ["x"], ["rmax"], axes=[3], keepdims=0),
             helper.make_node("ReduceMin", ["x"], ["rmin"], axes=[1, 3], keepdims=0),
             helper.make_node("MaxPool", ["x"], ["pool"], kernel_shape=[2, 2])]
    m = model(nodes, [vi("x", [1, 2, 3, 4])], [vi("rmax", [1, 2, 3]), vi("rmin", [1, 3]), vi("pool", [1, 2, 2, 3])])
    feeds = {"x": _feeds()["x"]}
    got = check_wave(m, feeds).run(feeds)
    assert np.isnan(got["rmax"][0, 0, 1]) and np.isnan(got["rmin"][0, 1]) and np.isnan(got["pool"][0, 0, 0, 2])
