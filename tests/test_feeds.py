"""Run-time feeds: what numpy can read is converted (byte order, masked arrays, str arrays);
what is wrong is a FeedError naming the input and what to do."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import add_relu_model, make_model
from onnx import TensorProto, helper

import rammer
from rammer.api import random_feeds
from rammer.errors import FeedError
from rammer.ir import TensorInfo
from rammer.onnx_backend import prepare

BACKENDS = ["reference", "cpu"]


@pytest.fixture(scope="module", params=BACKENDS)
def model(request):
    if request.param not in rammer.plugins.backends():
        pytest.skip(f"backend {request.param} is not installed")
    return rammer.compile(add_relu_model((8, 8)), backend=request.param)


def _feeds():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)


def _expected(x, y):
    return np.maximum(x + y, 0)


def test_big_endian_arrays_are_converted(model):
    x, y = _feeds()
    out = model({"x": x.astype(">f4"), "y": y.astype(">f4")})["r"]
    np.testing.assert_allclose(out, _expected(x, y), rtol=1e-6)


def test_masked_array_without_masked_elements_is_its_data(model):
    x, y = _feeds()
    masked = np.ma.masked_array(x, mask=np.zeros_like(x, dtype=bool))
    np.testing.assert_allclose(model({"x": masked, "y": y})["r"], _expected(x, y), rtol=1e-6)
    assert type(model.check_feeds({"x": masked, "y": y})["x"]) is np.ndarray


def test_masked_array_with_masked_elements_is_refused(model):
    x, y = _feeds()
    masked = np.ma.masked_array(x, mask=np.eye(8, dtype=bool))
    with pytest.raises(FeedError, match="input 'x' is a masked array with 8 masked element"):
        model({"x": masked, "y": y})


@pytest.mark.parametrize("feeds", [lambda x, y: [x, y], lambda x, y: (x, y), lambda x, y: x])
def test_feeds_that_are_not_a_dict_name_the_inputs(model, feeds):
    with pytest.raises(FeedError, match=r"feeds must be a dict .* inputs are \['x', 'y'\]: call it as "
                                        r"model\(\{'x': x, 'y': y\}\)"):
        model(feeds(*_feeds()))
    with pytest.raises(FeedError, match="feeds must be a dict"):
        model.run(feeds(*_feeds()))


def test_ragged_nested_lists_are_a_feed_error(model):
    _, y = _feeds()
    with pytest.raises(FeedError, match="input 'x'"):
        model({"x": [[1.0, 2.0], [3.0]], "y": y})


def test_wrong_dtype_still_says_how_to_convert(model):
    x, y = _feeds()
    with pytest.raises(FeedError, match=r"input 'x' is float64 but the model expects float32 .*astype"):
        model({"x": x.astype(np.float64), "y": y})


def test_str_arrays_feed_string_inputs():
    m = make_model([helper.make_node("Identity", ["s"], ["t"])], [("s", TensorProto.STRING, [2])],
                   [("t", TensorProto.STRING, [2])])
    compiled = rammer.compile(m, backend="reference")
    out = compiled({"s": np.array(["a", "bc"])})["t"]
    assert out.dtype == object and list(out) == ["a", "bc"]


def test_random_feeds_out_of_memory_is_a_feed_error(monkeypatch):
    import rammer.api as api

    def boom(inputs, seed, *bounds):
        raise MemoryError

    monkeypatch.setattr(api, "_random_feeds", boom)
    with pytest.raises(FeedError, match=r"not enough memory for random inputs .*\(x\[4, 4\]\)"):
        random_feeds([TensorInfo("x", "float32", (4, 4))])


def test_onnx_backend_missing_bound_input_and_extra_inputs():
    m = make_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                   [("x", TensorProto.FLOAT, [2, 3]), ("s", TensorProto.INT64, [2])],
                   [("y", TensorProto.FLOAT, [3, 2])])
    rep = prepare(m)
    x = np.ones((2, 3), np.float32)
    assert rep.run({"x": x, "s": np.array([3, 2])})[0].shape == (3, 2)
    with pytest.raises(FeedError, match=r"missing feed\(s\) \['s'\]"):
        rep.run({"x": x})
    with pytest.raises(FeedError, match="3 inputs given, but the model takes 2"):
        rep.run([x, np.array([3, 2]), x])


def test_onnx_backend_run_node_returns_the_outputs():
    from rammer.onnx_backend import RammerBackend

    node = helper.make_node("Relu", ["x"], ["y"])
    out = RammerBackend.run_node(node, [np.array([-1.0, 2.0], np.float32)])
    assert isinstance(out, tuple) and out[0].tolist() == [0.0, 2.0]
