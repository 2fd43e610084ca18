from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from rammer.errors import ShapeError
from rammer.onnx_backend import RammerBackend

from helpers import add_relu_model, make_model


def _reshape_model():
    return make_model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                      [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])],
                      [("y", TensorProto.FLOAT, [3, 4])])


def test_static_model_compiles_at_prepare():
    rep = RammerBackend.prepare(add_relu_model())
    assert rep.compiled is not None and rep.bound_names == []
    (out,) = rep.run([np.ones((2, 3), np.float32), -np.ones(3, np.float32)])
    assert out.shape == (2, 3) and not out.any()


def test_shape_deciding_input_is_specialised_per_value():
    rep = RammerBackend.prepare(_reshape_model())
    assert rep.compiled is None and rep.bound_names == ["shape"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (a,) = rep.run([x, np.array([3, 4])])
    (b,) = rep.run([x, np.array([4, 3])])
    (c,) = rep.run([x, np.array([3, 4])])
    assert a.shape == (3, 4) and b.shape == (4, 3)
    np.testing.assert_array_equal(a, x.reshape(3, 4))
    np.testing.assert_array_equal(c, a)
    assert len(rep._specialised) == 2  # the third run reused the first compilation


def test_non_input_shape_problems_still_raise():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["N", 2])],
                       [("y", TensorProto.FLOAT, ["N", 2])])
    with pytest.raises(ShapeError, match="'x' dim 0"):
        RammerBackend.prepare(model)


def test_for_backend_selects_the_rammer_backend():
    assert RammerBackend.for_backend("reference").backend_name == "reference"
    assert RammerBackend.supports_device("CPU") and not RammerBackend.supports_device("CUDA")
