from __future__ import annotations

import numpy as np
import pytest
from helpers import add_relu_model, make_model
from onnx import TensorProto, helper

import rammer
from rammer.errors import ShapeError
from rammer.onnx_backend import RammerBackend


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


# -- module-level functions, as onnxruntime.backend has them ----------------------------------------
def test_module_level_prepare_run_accept_proto_bytes_and_path(tmp_path):
    import onnx as _onnx
    from onnx import TensorProto as _TP
    from onnx import helper as _h

    from rammer import onnx_backend as ob

    graph = _h.make_graph([_h.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [_h.make_tensor_value_info("x", _TP.FLOAT, [3])],
                          [_h.make_tensor_value_info("y", _TP.FLOAT, [3])])
    model = _h.make_model(graph, opset_imports=[_h.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    _onnx.save(model, str(path))
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    for source in (model, model.SerializeToString(), str(path)):
        (y,) = ob.run(source, [x])
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    rep = ob.prepare(model, "CPU", backend="reference", check=False)
    assert rep.options == {"check": False}
    np.testing.assert_array_equal(rep.run({"x": x})[0], np.maximum(x, 0))
    assert ob.supports_device("CPU")
    assert ob.is_compatible(model)


def test_supports_device_follows_capabilities():
    from rammer import onnx_backend as ob
    from rammer import plugins

    kinds = {b.capabilities.device for b in plugins.backends().values() if b.availability().ok}
    assert ob.supports_device("CUDA") == ("gpu" in kinds)
    assert not ob.supports_device("NO_SUCH_DEVICE")
    with pytest.raises(rammer.errors.BackendUnavailableError, match="NO_SUCH_DEVICE"):
        ob.prepare(b"", "NO_SUCH_DEVICE")


def test_run_node_returns_outputs():
    from onnx import helper as _h

    from rammer import onnx_backend as ob

    node = _h.make_node("ArgMax", ["a"], ["i"], axis=1, keepdims=0)
    (i,) = ob.run_node(node, [np.array([[1, 5, 2], [7, 0, 1]], np.float32)])
    np.testing.assert_array_equal(i, [1, 0])
    with pytest.raises(rammer.errors.FeedError, match="1 input"):
        ob.run_node(node, [np.zeros(2, np.float32), np.zeros(2, np.float32)])
