from __future__ import annotations

import numpy as np
import pytest
from helpers import add_relu_model, rand

import rammer
from rammer.errors import BackendUnavailableError, FeedError


@pytest.fixture(scope="module")
def model():
    return rammer.compile(add_relu_model(), backend="reference")


def test_compile_from_proto_bytes_and_path(tmp_path, model):
    proto = add_relu_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    x, y = rand((2, 3)), rand((3,), 1)
    want = np.maximum(x + y, 0)
    for source in (proto, proto.SerializeToString(), str(path), path):
        out = rammer.compile(source, backend="reference")({"x": x, "y": y})
        np.testing.assert_array_equal(out["r"], want)


def test_inputs_outputs_and_backend(model):
    assert [t.name for t in model.inputs] == ["x", "y"]
    assert model.outputs[0].shape == (2, 3)
    assert model.backend.name == "reference"


def test_call_with_keywords(model):
    out = model(x=np.ones((2, 3), np.float32), y=np.ones(3, np.float32))
    assert out["r"].tolist() == [[2.0] * 3] * 2


@pytest.mark.parametrize(
    "feeds, message",
    [
        ({"x": np.ones((2, 3), np.float32)}, "missing feed.*'y"),
        ({"x": np.ones((2, 2), np.float32), "y": np.ones(3, np.float32)}, r"'x' has shape \[2, 2\].*\[2, 3\]"),
        ({"x": np.ones((2, 3), np.float64), "y": np.ones(3, np.float32)}, "'x' is float64.*float32"),
        ({"x": np.ones((2, 3), np.float32), "y": np.ones(3, np.float32), "z": 1}, "unknown input"),
    ],
)
def test_bad_feeds_raise_clear_errors(model, feeds, message):
    with pytest.raises(FeedError, match=message):
        model.run(feeds)


def test_nan_and_inf_propagate(model):
    x = np.array([[np.nan, np.inf, -np.inf]] * 2, np.float32)
    out = model(x=x, y=np.zeros(3, np.float32))["r"]
    assert np.isnan(out[0, 0]) and np.isinf(out[0, 1]) and out[0, 2] == 0


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(BackendUnavailableError, match="unknown backend 'nope'.*reference"):
        rammer.compile(add_relu_model(), backend="nope")


def test_random_feeds_match_inputs(model):
    feeds = model.random_feeds(3)
    assert {k: v.shape for k, v in feeds.items()} == {"x": (2, 3), "y": (3,)}
    np.testing.assert_array_equal(feeds["x"], model.random_feeds(3)["x"])
