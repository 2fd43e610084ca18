"""rammer.InferenceSession against onnxruntime's InferenceSession on the same models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import add_relu_model, make_model, rand
from onnx import TensorProto, helper

import rammer
from rammer.errors import BackendUnavailableError, FeedError

ort = pytest.importorskip("onnxruntime")


def _dynamic_model() -> onnx.ModelProto:
    """y = softmax(x @ W) with a symbolic batch and an anonymous (unnamed) sequence dim."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], rand((4, 3), 1).ravel().tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Softmax", ["m"], ["y"], axis=-1, name="sm")],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None, 3])],
        initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    helper.set_model_props(model, {"author": "tests"})
    return model


def test_same_script_as_onnxruntime():
    model = add_relu_model((2, 3))
    feeds = {"x": rand((2, 3), 2), "y": rand((3,), 3)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = rammer.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"],
                                  backend="reference")
    assert [(a.name, a.type, a.shape) for a in got.get_inputs()] == \
        [(a.name, a.type, a.shape) for a in want.get_inputs()]
    assert [(a.name, a.type, a.shape) for a in got.get_outputs()] == \
        [(a.name, a.type, a.shape) for a in want.get_outputs()]
    (r_ort,) = want.run(None, feeds)
    (r_ram,) = got.run(None, feeds)
    np.testing.assert_allclose(r_ram, r_ort, rtol=1e-6)
    assert got.run(["r"], feeds)[0].shape == (2, 3)
    with pytest.raises(FeedError, match="unknown output"):
        got.run(["nope"], feeds)
    with pytest.raises(FeedError, match="dict"):
        got.run(None, [feeds["x"], feeds["y"]])


def test_provider_chooses_a_cpu_backend_by_capability():
    sess = rammer.InferenceSession(add_relu_model(), providers=["CPUExecutionProvider"])
    (backend,) = sess.get_providers()
    assert rammer.plugins.backends()[backend].capabilities.device == "cpu"


def test_unavailable_providers_say_so():
    with pytest.raises(BackendUnavailableError, match="NoSuchExecutionProvider"):
        rammer.InferenceSession(add_relu_model(), providers=["NoSuchExecutionProvider"])


def test_dynamic_dims_compile_per_feed_shape_and_report_symbols():
    model = _dynamic_model()
    sess = rammer.InferenceSession(model, backend="reference")
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape == ref.get_inputs()[0].shape[:1] + [None, 4] or \
        sess.get_inputs()[0].shape[0] == "batch"
    assert sess.get_inputs()[0].type == "tensor(float)"
    for shape in [(1, 5, 4), (3, 2, 4), (1, 5, 4)]:
        x = rand(shape, sum(shape))
        (got,) = sess.run(None, {"x": x})
        (want,) = ref.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(sess._variants) == 2  # the third feed reused the first compile
    with pytest.raises(FeedError, match="declares"):
        sess.run(None, {"x": rand((1, 5, 5))})


def test_static_input_shapes_compile_once():
    sess = rammer.InferenceSession(_dynamic_model(), backend="reference", input_shapes={"x": (2, 3, 4)})
    assert sess.get_inputs()[0].shape == [2, 3, 4]
    assert sess.compiled is not None
    assert sess.run(None, {"x": rand((2, 3, 4))})[0].shape == (2, 3, 3)


def test_modelmeta():
    meta = rammer.InferenceSession(_dynamic_model(), backend="reference").get_modelmeta()
    assert meta.producer_name == "tests" and meta.graph_name == "dyn"
    assert meta.custom_metadata_map == {"author": "tests"}


def test_session_options_threads_become_veus():
    opts = rammer.SessionOptions(intra_op_num_threads=1, extra={"policy": "op-by-op"})
    sess = rammer.InferenceSession(add_relu_model(), sess_options=opts, backend="cpu")
    assert sess.get_provider_options()["cpu"] == {"veus": 1, "policy": "op-by-op"}
    x, y = rand((2, 3), 1), rand((3,), 2)
    np.testing.assert_allclose(sess.run(None, {"x": x, "y": y})[0], np.maximum(x + y, 0), rtol=1e-5)
    # The reference backend has no vEUs: the thread count is dropped, not an error.
    ref = rammer.InferenceSession(add_relu_model(), sess_options=rammer.SessionOptions(intra_op_num_threads=2),
                                  backend="reference")
    assert ref.get_provider_options()["reference"] == {}


def test_unknown_backend_option_is_a_clear_error():
    with pytest.raises(rammer.errors.CompileError, match="unknown option.*'bogus'.*accepts: check"):
        rammer.compile(add_relu_model(), backend="reference", bogus=1)


def test_iobinding_writes_into_caller_arrays():
    sess = rammer.InferenceSession(add_relu_model((2, 3)), backend="reference")
    binding = sess.io_binding()
    x, y = rand((2, 3), 5), rand((3,), 6)
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("y", y)
    out = np.empty((2, 3), np.float32)
    binding.bind_output("r", out)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out, np.maximum(x + y, 0), rtol=1e-6)
    assert binding.get_outputs()[0] is out
    wrong = sess.io_binding()
    wrong.bind_cpu_input("x", x)
    wrong.bind_cpu_input("y", y)
    wrong.bind_output("r", np.empty((3, 2), np.float32))
    with pytest.raises(FeedError, match="bound to"):
        sess.run_with_iobinding(wrong)


def test_int_outputs_keep_ort_type_names():
    model = make_model([helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0, name="am")],
                       [("x", TensorProto.FLOAT, [2, 5])], [("i", TensorProto.INT64, [2])])
    sess = rammer.InferenceSession(model, backend="reference")
    assert sess.get_outputs()[0].type == "tensor(int64)"


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_bound_outputs_are_written_in_place(backend):
    model = rammer.compile(add_relu_model((4, 8)), backend=backend)
    x, y = rand((4, 8), 7), rand((8,), 8)
    out = np.full((4, 8), np.nan, np.float32)
    got = model.run({"x": x, "y": y}, outputs={"r": out})
    assert got["r"] is out
    np.testing.assert_allclose(out, np.maximum(x + y, 0), rtol=1e-5)
    with pytest.raises(FeedError, match="writeable"):
        ro = np.empty((4, 8), np.float32)
        ro.flags.writeable = False
        model.run({"x": x, "y": y}, outputs={"r": ro})


def test_python_lists_are_read_as_the_declared_type_as_onnxruntime_does():
    model = add_relu_model((2, 3)).SerializeToString()
    feeds = {"x": [[1, 2, 3], [4, 5, 6]], "y": [1.5, -10, 0]}
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = rammer.InferenceSession(model, backend="reference")
    (got,) = sess.run(None, feeds)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want)
    (from_tuple,) = sess.run(None, {"x": ((1, 2, 3), (4, 5, 6)), "y": (1.5, -10, 0)})
    np.testing.assert_allclose(from_tuple, want)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", feeds["x"])
    binding.bind_cpu_input("y", feeds["y"])
    binding.bind_output("r")
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], want)


def test_python_scalars_and_dynamic_models_take_the_declared_type():
    sess = rammer.InferenceSession(_dynamic_model(), backend="reference")
    (y,) = sess.run(None, {"x": [[[1.0, 0.0, 0.0, 0.0]]]})
    assert y.dtype == np.float32 and y.shape == (1, 1, 3)
    scalar = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu")],
                        [("x", TensorProto.FLOAT, [])], [("r", TensorProto.FLOAT, [])])
    (r,) = rammer.InferenceSession(scalar, backend="reference").run(None, {"x": -2})
    assert r.dtype == np.float32 and r.shape == () and r == 0


def test_bad_python_lists_name_the_input():
    sess = rammer.InferenceSession(add_relu_model((2, 3)), backend="reference")
    with pytest.raises(FeedError, match="input 'x' is a ragged list"):
        sess.run(None, {"x": [[1, 2, 3], [4, 5]], "y": [1, 2, 3]})
    with pytest.raises(FeedError, match="input 'y' cannot be read as float32"):
        sess.run(None, {"x": [[1, 2, 3], [4, 5, 6]], "y": ["a", "b", "c"]})
    with pytest.raises(FeedError, match="input 'y' has shape \\[2\\]"):
        sess.run(None, {"x": [[1, 2, 3], [4, 5, 6]], "y": [1, 2]})
    ints = make_model([helper.make_node("Identity", ["i"], ["o"], name="id")],
                      [("i", TensorProto.INT64, [2])], [("o", TensorProto.INT64, [2])])
    with pytest.raises(FeedError, match="input 'i' holds non-integer values .*int64"):
        rammer.InferenceSession(ints, backend="reference").run(None, {"i": [1.5, 2]})
    (o,) = rammer.InferenceSession(ints, backend="reference").run(None, {"i": [1.0, 2]})
    assert o.dtype == np.int64 and o.tolist() == [1, 2]
