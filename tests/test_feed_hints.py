"""Wrong-shape feeds get hints that are right (issue 38, point 5).

A dim the model fixes is never suggested for change; ``input_shapes`` is
suggested only for the model's dynamic dims, with the model's rank, its sizes for
the fixed dims and the fed sizes for the dynamic ones, and following the hint
works; a wrong rank names the expected rank and shape.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from helpers import make_model
from onnx import TensorProto, helper

import rammer
from rammer.cli import main
from rammer.errors import FeedError


def relu_model(dims: list) -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [("x", TensorProto.FLOAT, dims)], [("y", TensorProto.FLOAT, dims)])


def feed_error(model, shape) -> str:
    with pytest.raises(FeedError) as info:
        model({"x": np.zeros(shape, np.float32)})
    return str(info.value)


def suggested_shapes(message: str) -> dict:
    found = re.search(r"input_shapes=(\{.*?\})", message)
    assert found, message
    return eval(found.group(1))  # a dict literal of tuples, as the hint prints it


def test_a_fixed_dim_is_never_suggested_for_input_shapes():
    model = rammer.compile(relu_model([1, 6, 32]), backend="reference")
    message = feed_error(model, (1, 6, 33))
    assert message == ("input 'x' has shape [1, 6, 33] but the model was compiled for [1, 6, 32]: "
                       "the model fixes dim 2 to 32 (feed that size)")
    assert "input_shapes" not in feed_error(model, (4, 6, 32))
    assert "the model fixes dim 0 to 1 and dim 2 to 32" in feed_error(model, (4, 6, 33))


def test_a_dynamic_dim_is_suggested_and_the_suggestion_compiles():
    proto = relu_model(["batch", 6, 32])
    model = rammer.compile(proto, backend="reference", input_shapes={"x": (1, 6, 32)})
    message = feed_error(model, (4, 6, 32))
    assert message == ("input 'x' has shape [4, 6, 32] but the model was compiled for [1, 6, 32]: dim 0 ('batch') "
                       "is dynamic in the model: for that size recompile with input_shapes={'x': (4, 6, 32)} "
                       "(CLI: --shape x=4,6,32)")
    again = rammer.compile(proto, backend="reference", input_shapes=suggested_shapes(message))
    assert again({"x": np.ones((4, 6, 32), np.float32)})["y"].shape == (4, 6, 32)


def test_fixed_and_dynamic_dims_wrong_together_suggest_the_models_sizes_for_the_fixed_ones():
    proto = relu_model(["batch", 6, 32])
    model = rammer.compile(proto, backend="reference", input_shapes={"x": (1, 6, 32)})
    message = feed_error(model, (4, 6, 33))
    assert "the model fixes dim 2 to 32 (feed that size)" in message
    assert suggested_shapes(message) == {"x": (4, 6, 32)}  # not 33: the model fixes it
    rammer.compile(proto, backend="reference", input_shapes=suggested_shapes(message))


def test_a_wrong_rank_names_the_expected_rank_and_shape():
    static = rammer.compile(relu_model([1, 6, 32]), backend="reference")
    assert feed_error(static, (6, 32)) == ("input 'x' has shape [6, 32] (rank 2) but the model expects rank 3: "
                                           "shape [1, 6, 32]; reshape it to (1, 6, 32)")
    dynamic = rammer.compile(relu_model(["batch", 6, 32]), backend="reference", input_shapes={"x": (1, 6, 32)})
    message = feed_error(dynamic, (2, 1, 6, 32))
    assert message == ("input 'x' has shape [2, 1, 6, 32] (rank 4) but the model expects rank 3: shape [1, 6, 32] "
                       "(the model declares ['batch', 6, 32])")
    assert "input_shapes" not in message


def test_an_ir_graph_gets_no_input_shapes_hint():
    # input_shapes does not apply to a graph given as IR: every dim counts as fixed.
    graph = rammer.load(relu_model(["batch", 6, 32]), {"x": (1, 6, 32)})
    model = rammer.compile(graph, backend="reference")
    assert "input_shapes" not in feed_error(model, (4, 6, 32))


def test_a_saved_model_file_is_read_for_its_declared_dims(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(relu_model(["batch", 6, 32]), str(path))
    model = rammer.compile(str(path), backend="reference", input_shapes={"x": (2, 6, 32)})
    assert suggested_shapes(feed_error(model, (3, 6, 32))) == {"x": (3, 6, 32)}


def test_session_messages():
    # a session compiling per feed shape: the declared dims, the fixed one named
    session = rammer.InferenceSession(relu_model(["batch", 6, 32]).SerializeToString(), backend="reference")
    with pytest.raises(FeedError, match=re.escape("but the model declares ['batch', 6, 32]: the model fixes dim 2 "
                                                  "to 32 (feed that size)")):
        session.run(None, {"x": np.zeros((4, 6, 33), np.float32)})
    with pytest.raises(FeedError, match=re.escape("(rank 2) but the model expects rank 3: shape ['batch', 6, 32]")):
        session.run(None, {"x": np.zeros((6, 32), np.float32)})
    # a static session: no input_shapes for its fixed dims
    static = rammer.InferenceSession(relu_model([1, 6, 32]).SerializeToString(), backend="reference")
    with pytest.raises(FeedError) as info:
        static.run(None, {"x": np.zeros((1, 6, 33), np.float32)})
    assert "input_shapes" not in str(info.value) and "fixes dim 2 to 32" in str(info.value)


def test_cli_run_input_of_a_fixed_wrong_dim(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(relu_model([1, 6, 32]), str(path))
    np.save(tmp_path / "x.npy", np.zeros((1, 6, 33), np.float32))
    assert main(["run", str(path), "-b", "reference", "--input", f"x={tmp_path / 'x.npy'}"]) != 0
    err = capsys.readouterr().err
    assert "the model fixes dim 2 to 32" in err and "input_shapes" not in err and "--shape" not in err


def test_a_saved_compiled_model_keeps_the_declared_dims(tmp_path):
    model = rammer.compile(relu_model(["batch", 6, 32]), backend="cpu", cache=False, input_shapes={"x": (1, 6, 32)})
    model.save(str(tmp_path / "m.rammer"))
    loaded = rammer.load_compiled(str(tmp_path / "m.rammer"))
    assert suggested_shapes(feed_error(loaded, (4, 6, 32))) == {"x": (4, 6, 32)}
    assert "input_shapes" not in feed_error(loaded, (1, 6, 33))
