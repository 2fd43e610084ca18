"""The ONNX frontend: error paths, input shape binding, opset upgrade and folding."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import rammer
from rammer.errors import ModelLoadError, ShapeError, UnsupportedOpError
from rammer.frontend import load, load_proto

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset=17, ir_version=8, functions=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], functions=list(functions))
    model.ir_version = ir_version
    return model


def _vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def _run_both(model, feeds, input_shapes=None):
    """rammer's reference run and onnxruntime's on the same feeds."""
    compiled = rammer.compile(model, backend="reference", input_shapes=input_shapes)
    got = compiled(feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return compiled, [got[o.name] for o in compiled.outputs], ref


def _relu_model():
    return _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])])


# -- reading ---------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ModelLoadError, match="nope.onnx' does not exist"):
        load(tmp_path / "nope.onnx")


def test_folder_is_not_a_model(tmp_path):
    with pytest.raises(ModelLoadError, match="is a folder"):
        load(tmp_path)


@pytest.mark.parametrize("data", [b"\x08\x07\x12\xff\xff\xff garbage", b""])
def test_malformed_protobuf_is_rejected(tmp_path, data):
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError, match="not a valid ONNX model"):
        load(path)


def test_wrong_source_type():
    with pytest.raises(ModelLoadError, match="pass a path, bytes or an onnx.ModelProto"):
        load(12345)  # type: ignore[arg-type]


def test_path_bytes_and_proto_load_alike_and_proto_is_not_modified(tmp_path):
    model = _relu_model()
    before = model.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graphs = [load(str(path)), load(path), load(before), load(model)]
    assert all(g.op_counts() == {"Relu": 1} for g in graphs)
    assert model.SerializeToString() == before


def test_checker_errors_are_model_load_errors():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    model.graph.node[0].input[0] = "undefined"  # reads a tensor nobody writes
    with pytest.raises(ModelLoadError, match="checker rejected"):
        load(model)


# -- unsupported ops -----------------------------------------------------------------


def test_unsupported_ops_are_all_listed_with_nodes_and_opset():
    nodes = [
        h.make_node("Foo", ["x"], ["a"], name="foo_1", domain="com.example"),
        h.make_node("Relu", ["a"], ["b"], name="relu"),
        h.make_node("Foo", ["b"], ["c"], name="foo_2", domain="com.example"),
        h.make_node("Bar", ["c"], ["y"], name="bar_1", domain="org.other"),
    ]
    model = h.make_model(
        h.make_graph(nodes, "g", [_vi("x", [2])], [_vi("y", [2])]),
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.example", 3), h.make_opsetid("org.other", 1)],
    )
    with pytest.raises(UnsupportedOpError) as info:
        load(model)
    message = str(info.value)
    assert "2 unsupported op type(s)" in message
    assert "com.example::Foo (opset 3) at nodes foo_1, foo_2" in message
    assert "org.other::Bar (opset 1) at nodes bar_1" in message
    assert sorted(info.value.ops) == [("Bar", "org.other", "bar_1"), ("Foo", "com.example", "foo_1"),
                                      ("Foo", "com.example", "foo_2")]


# -- dynamic dims ------------------------------------------------------------------------


def _dynamic_model():
    # y = x + m, with x: [batch, seq, 4] and m: [batch, seq, 4] sharing the symbols.
    return _model([h.make_node("Add", ["x", "m"], ["y"])],
                  [_vi("x", ["batch", "seq", 4]), _vi("m", ["batch", "seq", 4])], [_vi("y", ["batch", "seq", 4])])


def test_dynamic_dims_are_rejected_naming_input_and_dim():
    with pytest.raises(ShapeError) as info:
        load(_dynamic_model())
    message = str(info.value)
    for part in ("'x' dim 0 (batch)", "'x' dim 1 (seq)", "'m' dim 0 (batch)", "input_shapes="):
        assert part in message


def test_unknown_dim_without_a_name_is_rejected():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", [None, 3])], [_vi("y", [None, 3])])
    with pytest.raises(ShapeError, match=r"'x' dim 0 \(unknown\)"):
        load(model)


def test_dynamic_dims_bound_from_input_shapes_and_shared_symbols():
    graph = load(_dynamic_model(), {"x": (2, 5, 4)})  # 'm' follows from the shared symbols
    assert [t.shape for t in graph.inputs] == [(2, 5, 4), (2, 5, 4)]
    assert graph.outputs[0].shape == (2, 5, 4)


@pytest.mark.parametrize("shapes, message", [
    ({"x": (2, 5, 4), "m": (2, 6, 4)}, "binds the model's dim 'seq' to 5 in 'x' but to 6 in 'm'"),
    ({"x": (2, 5)}, "rank 2"),
    ({"x": (2, 5, 3)}, "dim 2 = 3 but the model fixes it to 4"),
    ({"z": (1,)}, r"input_shapes names \['z'\], which are not inputs"),
    ({"x": (2, -5, 4)}, "negative dim"),
])
def test_bad_input_shapes_are_rejected(shapes, message):
    with pytest.raises(ShapeError, match=message):
        load(_dynamic_model(), shapes)


def test_shape_arithmetic_on_bound_dims_folds_to_a_static_reshape():
    # Reshape(x, Concat(Shape(x)[0:1], [-1])): the flatten torch exports write.
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        h.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        h.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        h.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = _model(nodes, [_vi("x", ["n", 3, 4])], [_vi("y", ["n", 12])], inits)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    compiled, got, ref = _run_both(model, {"x": x}, {"x": (2, 3, 4)})
    assert compiled.graph.op_counts() == {"Reshape": 1}
    assert compiled.outputs[0].shape == (2, 12)
    np.testing.assert_array_equal(got[0], ref[0])


# -- external data -------------------------------------------------------------------


def _external_model(tmp_path, location):
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = _model([h.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                   [numpy_helper.from_array(weight, "w")])
    tensor = model.graph.initializer[0]
    raw = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    return model, raw


def test_external_data_inside_the_model_folder_loads(tmp_path):
    model, raw = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(raw)
    onnx.save(model, tmp_path / "m.onnx")
    compiled = rammer.compile(tmp_path / "m.onnx", backend="reference")
    out = compiled({"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], np.arange(6, dtype=np.float32).reshape(2, 3) + 1)


@pytest.mark.parametrize("escape", ["absolute", "dotdot"])
def test_external_data_outside_the_model_folder_is_rejected(tmp_path, escape):
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    location = str(secret) if escape == "absolute" else os.path.join("..", "secret.bin")
    model, raw = _external_model(folder, location)
    secret.write_bytes(raw)
    onnx.save(model, folder / "m.onnx")
    with pytest.raises(ModelLoadError, match="outside the model's folder"):
        load(folder / "m.onnx")


def test_missing_external_data_file(tmp_path):
    model, _ = _external_model(tmp_path, "gone.bin")
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelLoadError, match="'gone.bin' of tensor 'w' is missing"):
        load(tmp_path / "m.onnx")


# -- opsets and old IR -------------------------------------------------------------


def test_opset_below_11_is_upgraded_by_the_version_converter():
    # Opset 9 ops that changed later: Upsample (now Resize), attribute-form Slice, 2-D coerced Softmax.
    nodes = [h.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest"),
             h.make_node("Slice", ["u"], ["s"], axes=[3], starts=[1], ends=[7]),
             h.make_node("Softmax", ["s"], ["y"], axis=1)]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    model = _model(nodes, [_vi("x", [1, 2, 3, 4])], [_vi("y", [1, 2, 6, 6])], [scales], opset=9, ir_version=4)
    assert load_proto(model).opset_import[0].version >= 11
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    compiled, got, ref = _run_both(model, {"x": x})
    assert compiled.graph.opset[""] >= 11
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)


def test_initializers_listed_as_inputs_are_constants():
    # IR version 3 models list every initializer among the graph inputs too.
    w = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
    model = _model([h.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [1, 2]), _vi("w", [2, 2])],
                   [_vi("y", [1, 2])], [numpy_helper.from_array(w, "w")], opset=9, ir_version=3)
    graph = load(model)
    assert [t.name for t in graph.inputs] == ["x"]
    out = rammer.compile(graph, backend="reference")({"x": np.array([[1.0, 1.0]], np.float32)})
    np.testing.assert_allclose(out["y"], [[4.0, -1.5]])


def test_model_local_functions_are_inlined():
    fn = h.make_function("local", "AddRelu", ["a", "b"], ["c"],
                         [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Relu", ["s"], ["c"])],
                         opset_imports=[h.make_opsetid("", 17)])
    model = h.make_model(
        h.make_graph([h.make_node("AddRelu", ["x", "x"], ["y"], domain="local")], "g",
                     [_vi("x", [3])], [_vi("y", [3])]),
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)], functions=[fn])
    graph = load(model)
    assert graph.op_counts() == {"Add": 1, "Relu": 1}


# -- lowering and folding --------------------------------------------------------------


def test_sequences_are_lowered_to_tensor_ops():
    # What torch's dynamo exporter writes for q, k, v = t.split(d, -1), plus the other sequence ops.
    nodes = [
        h.make_node("SplitToSequence", ["x", "three"], ["seq"], axis=1),
        h.make_node("SequenceAt", ["seq", "one"], ["k"]),
        h.make_node("SequenceLength", ["seq"], ["n"]),
        h.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        h.make_node("SequenceInsert", ["rows", "row0"], ["rows2"]),
        h.make_node("SequenceErase", ["rows2", "zero"], ["rows3"]),
        h.make_node("ConcatFromSequence", ["rows3"], ["stacked"], axis=0, new_axis=1),
    ]
    x = np.random.default_rng(1).standard_normal((2, 9)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.zeros(9, np.float32), "row0")]
    model = _model(nodes, [_vi("x", [2, 9])],
                   [_vi("k", [2, 3]), _vi("n", [], T.INT64), _vi("stacked", [2, 9])], inits)
    compiled, got, ref = _run_both(model, {"x": x})
    ops = compiled.graph.op_counts()
    assert not any(op.startswith("Sequence") or "ToSequence" in op or "FromSequence" in op for op in ops)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def test_if_with_constant_condition_is_inlined_without_importing_the_other_branch():
    then = h.make_graph([h.make_node("Relu", ["x"], ["t"])], "then", [], [_vi("t", [2, 3])])
    # The untaken branch reshapes to an impossible shape: importing it would fail.
    bad = numpy_helper.from_array(np.array([7, 7], np.int64), "bad_shape")
    other = h.make_graph([h.make_node("Reshape", ["x", "bad_shape"], ["e"])], "else", [], [_vi("e", [7, 7])],
                         [bad])
    nodes = [h.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True), "c")),
             h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    compiled, got, ref = _run_both(model, {"x": x})
    assert compiled.graph.op_counts() == {"Relu": 1}
    np.testing.assert_array_equal(got[0], ref[0])


def test_identity_nodes_become_aliases_except_for_outputs():
    nodes = [h.make_node("Identity", ["x"], ["a"]), h.make_node("Identity", ["a"], ["b"]),
             h.make_node("Relu", ["b"], ["r"]), h.make_node("Identity", ["r"], ["y"])]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])])
    graph = load(model)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Identity"]
    assert graph.nodes[0].inputs == ("x",)
    assert graph.outputs[0].name == "y"


def test_folding_keeps_onnx_dtypes():
    # Shape -> Cast -> Div of constants: the folded values keep ONNX's dtypes (no numpy promotion).
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT),
             h.make_node("Div", ["sf", "two"], ["half"]),
             h.make_node("Add", ["x", "half"], ["y"])]
    model = _model(nodes, [_vi("x", [4])], [_vi("y", [4])],
                   [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    compiled, got, ref = _run_both(model, {"x": np.zeros(4, np.float32)})
    assert compiled.graph.op_counts() == {"Add": 1}
    assert got[0].dtype == np.float32
    np.testing.assert_array_equal(got[0], ref[0])


def test_subgraphs_read_aliased_outer_tensors():
    # 'a' is an Identity of 'x' (dropped at import); both branches of a run-time If read it.
    then = h.make_graph([h.make_node("Add", ["a", "a"], ["t"])], "then", [], [_vi("t", [3])])
    other = h.make_graph([h.make_node("Identity", ["a"], ["e"])], "else", [], [_vi("e", [3])])
    nodes = [h.make_node("Identity", ["x"], ["a"]),
             h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["cond"]),
             h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    model = _model(nodes, [_vi("x", [3])], [_vi("y", [3])],
                   [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    for x in (np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32)):
        compiled, got, ref = _run_both(model, {"x": x})
        assert "Identity" not in [n.op_type for n in compiled.graph.nodes]
        np.testing.assert_array_equal(got[0], ref[0])


def test_anonymous_dim_params_are_not_one_symbol():
    """Height and width both "?" (common in exported detectors) may differ; "batch" twice may not."""
    import numpy as _np
    import onnx as _onnx
    from onnx import TensorProto as _TP
    from onnx import helper as _h

    import rammer as _rammer
    from rammer.frontend.inputs import is_anonymous_dim

    for name in ("?", "??", "-1", "unknown", "Unk", " ", "None"):
        assert is_anonymous_dim(name), name
    for name in ("batch", "N", "height", "unk__12", "seq_len"):
        assert not is_anonymous_dim(name), name
    graph = _h.make_graph(
        [_h.make_node("Relu", ["x"], ["y"], name="r")], "anon",
        [_h.make_tensor_value_info("x", _TP.FLOAT, ["batch", 3, "?", "?"])],
        [_h.make_tensor_value_info("y", _TP.FLOAT, ["batch", 3, "?", "?"])])
    model = _h.make_model(graph, opset_imports=[_h.make_opsetid("", 17)])
    g = _rammer.load(model, input_shapes={"x": (1, 3, 32, 48)})
    assert g.inputs[0].shape == (1, 3, 32, 48)
    y = _rammer.compile(model, backend="reference", input_shapes={"x": (1, 3, 32, 48)})(
        {"x": _np.ones((1, 3, 32, 48), _np.float32)})["y"]
    assert y.shape == (1, 3, 32, 48)
    two = _h.make_graph(
        [_h.make_node("Add", ["a", "b"], ["c"], name="add")], "named",
        [_h.make_tensor_value_info("a", _TP.FLOAT, ["batch", 4]),
         _h.make_tensor_value_info("b", _TP.FLOAT, ["batch", 4])],
        [_h.make_tensor_value_info("c", _TP.FLOAT, ["batch", 4])])
    named = _h.make_model(two, opset_imports=[_h.make_opsetid("", 17)])
    with pytest.raises(_rammer.errors.ShapeError, match="'batch'"):
        _rammer.load(named, input_shapes={"a": (2, 4), "b": (3, 4)})
    del _onnx


# -- validation at import (issue 20) ------------------------------------------------------


def test_future_opset_is_refused_instead_of_read_with_todays_semantics():
    model = _relu_model()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 2
    with pytest.raises(ModelLoadError, match=r"imports ai.onnx opset \d+, newer than the newest"):
        load(model)


def test_compile_passes_limits_to_the_frontend():
    model = _relu_model()
    with pytest.raises(ShapeError, match=r"tensor 'x' of shape \[2, 3\] is too large"):
        rammer.compile(model, backend="reference", limits={"max_tensor_elements": 5})
    compiled = rammer.compile(model, backend="reference", limits={"max_tensor_elements": 6})
    assert compiled.graph.op_counts() == {"Relu": 1}


def test_mixed_dtype_add_is_refused_at_import():
    model = _model([h.make_node("Add", ["x", "c"], ["y"], name="add")], [_vi("x", [2])], [_vi("y", [2])],
                   [numpy_helper.from_array(np.array([1, 2], np.int32), "c")])
    with pytest.raises(ShapeError, match=r"node 'add' \(Add\): inputs 'x' \(float32\) and 'c' \(int32\)"):
        load(model)
