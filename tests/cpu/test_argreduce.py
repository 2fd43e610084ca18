"""ArgMax / ArgMin compiled on cpu (``k_argreduce``) against the reference (numpy's argmax / argmin):
every axis, keepdims either way, select_last_index, ties, NaN (which numpy takes as the extremum) and
infinities; no node left to numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer


def _model(op: str, shape: tuple[int, ...], axis: int, keepdims: int, last: int):
    rank = len(shape)
    out = list(shape)
    if keepdims:
        out[axis % rank] = 1
    else:
        del out[axis % rank]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.INT64, out)
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # few distinct values, so rows have ties; some NaN and infinities
    levels = np.array([-1.0, 0.0, 0.5, 2.0, np.inf, -np.inf], np.float32)
    x = rng.choice(levels, size=shape, p=[.3, .2, .2, .2, .05, .05])
    x[rng.random(shape) < 0.04] = np.nan
    return x.astype(np.float32)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((5, 9), 1), ((5, 9), 0), ((3, 4, 6), 1), ((2, 3, 4, 5), -1),
                                        ((2, 3, 4, 5), -3), ((1000, 4), 1), ((64, 1), 1)])
@pytest.mark.parametrize("keepdims,last", [(1, 0), (0, 0), (0, 1)])
def test_matches_the_reference(op, shape, axis, keepdims, last):
    model = _model(op, shape, axis, keepdims, last)
    feeds = {"x": _values(np.random.default_rng(sum(shape) + axis), shape)}
    compiled = rammer.compile(model, backend="cpu", veus=1, cache=False)
    assert not compiled.executable.report["fallbacks"]
    assert "k_argreduce" in compiled.executable.report["kernels"]
    got = compiled.run(feeds)["y"]
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    assert got.dtype == np.int64 and got.shape == want.shape
    assert np.array_equal(got, want)


def test_two_veus_split_the_lines():
    model = _model("ArgMax", (300, 40), 1, 0, 0)
    feeds = {"x": _values(np.random.default_rng(0), (300, 40))}
    got = rammer.compile(model, backend="cpu", veus=2, policy="op-by-op", cache=False).run(feeds)["y"]
    assert np.array_equal(got, rammer.compile(model, backend="reference").run(feeds)["y"])


def test_integer_input_stays_on_the_reference_with_a_reason():
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [4])
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    compiled = rammer.compile(model, backend="cpu", veus=1, cache=False)
    reasons = [f["reason"] for f in compiled.executable.report["fallbacks"]]
    assert reasons == ["ArgMax of int64 (the cpu kernel compares float32)"]
    feeds = {"x": np.arange(12, dtype=np.int64).reshape(4, 3) % 5}
    assert compiled.run(feeds)["y"].tolist() == np.argmax(feeds["x"], axis=1).tolist()
