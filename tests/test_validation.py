"""Import-time validation: malformed models end in a RammerError that names the node, op and
tensor, raised when the model loads, never a raw TypeError/IndexError/KeyError at run time."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import rammer
from rammer.errors import ModelLoadError, RammerError, ShapeError
from rammer.frontend import load
from rammer.frontend.limits import Limits, resolve_limits
from rammer.frontend.validate import ENUM_ATTRS, check_node_types
from rammer.ir import Node, TensorInfo


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name, shape, elem=T.FLOAT):
    vi = h.make_tensor_value_info(name, elem, shape)
    if shape is None:  # (the checker wants a shape field; rammer infers the outputs' shapes itself)
        vi.type.tensor_type.shape.SetInParent()
    return vi


def _f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _init(name, array):
    return nh.from_array(np.asarray(array), name)


def _conv_model(bias_len=8, **attrs):
    return _model([h.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", **attrs)], [_vi("x", [1, 3, 8, 8])],
                  [_vi("y", None)], [_init("W", _f32(8, 3, 3, 3)), _init("B", _f32(bias_len))])


# -- operand dtypes against the schema's type constraints -----------------------------


def test_string_constant_fed_to_relu_names_node_tensor_and_allowed_types():
    model = _model([h.make_node("Relu", ["c"], ["y"], name="act")], [], [_vi("y", [2], T.STRING)],
                   [h.make_tensor("c", T.STRING, [2], [b"a", b"b"])])
    with pytest.raises(ShapeError, match=r"node 'act' \(Relu\): input 0 \('X'\) is tensor 'c' of type string.*"
                                         r"accepts only .*float32"):
        load(model)


def test_mixed_element_types_of_one_type_parameter_are_refused():
    model = _model([h.make_node("Add", ["x", "i"], ["y"], name="add")], [_vi("x", [2])], [_vi("y", [2])],
                   [_init("i", np.array([1, 2], np.int64))])
    with pytest.raises(ShapeError, match=r"'x' \(float32\) and 'i' \(int64\) must have one element type"):
        load(model)


def test_bool_into_batch_normalization_is_refused_at_import():
    model = _model([h.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"], name="bn")],
                   [_vi("x", [1, 2, 3], T.BOOL)], [_vi("y", None, T.BOOL)], [_init("s", np.ones(2, bool))])
    with pytest.raises(ShapeError, match="node 'bn'.*type bool"):
        load(model)


def test_type_check_skips_ops_without_an_onnx_schema():
    node = Node("Custom", ("x",), ("y",), "n", "com.example")
    check_node_types(node, 1, [TensorInfo("x", "object", (1,))])  # no schema: the op's infer decides


def test_missing_required_input_is_named():
    node = Node("Gemm", ("a", "", "c"), ("y",), "g", "")
    with pytest.raises(ShapeError, match=r"required input 1 \('B'\) is missing"):
        check_node_types(node, 17, [TensorInfo("a", "float32", (2, 2)), None, TensorInfo("c", "float32", (2,))])


def test_too_few_inputs_for_a_variadic_op():
    node = Node("Max", (), ("y",), "m", "")
    with pytest.raises(ShapeError, match=r"has 0 input\(s\), but Max \(opset 17\) takes at least 1"):
        check_node_types(node, 17, [])


# -- secondary inputs ----------------------------------------------------------------


def test_conv_bias_of_the_wrong_length_is_refused_before_any_backend_reads_past_it():
    with pytest.raises(ShapeError, match=r"node 'conv' \(Conv\): bias B 'B' has shape \[5\].* must be \[8\]"):
        rammer.compile(_conv_model(bias_len=5), backend="reference")


@pytest.mark.parametrize("index, what", [(1, "scale"), (2, "bias B"), (3, "input_mean"), (4, "input_var")])
def test_batch_norm_parameters_must_be_per_channel(index, what):
    inits = [_init(n, np.ones(8 if i + 1 != index else 11, np.float32)) for i, n in enumerate("sbmv")]
    model = _model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")],
                   [_vi("x", [1, 8, 4, 4])], [_vi("y", None)], inits)
    with pytest.raises(ShapeError, match=rf"{what} '.' has shape \[11\].*8 channels"):
        load(model)


def test_layer_norm_scale_must_broadcast_to_the_input():
    model = _model([h.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")], [_vi("x", [2, 4])],
                   [_vi("y", None)], [_init("s", _f32(3))])
    with pytest.raises(ShapeError, match=r"Scale 's' of shape \[3\] does not broadcast to \[2, 4\]"):
        load(model)


def test_gemm_c_that_does_not_broadcast_is_refused():
    model = _model([h.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm")], [_vi("a", [2, 3])],
                   [_vi("y", None)], [_init("b", _f32(3, 4)), _init("c", _f32(3))])
    with pytest.raises(ShapeError, match="node 'gemm'.*do not broadcast"):
        load(model)


@pytest.mark.parametrize("op, gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_bias_and_initial_state_shapes(op, gates):
    hidden = 4
    inits = [_init("W", _f32(1, gates * hidden, 3)), _init("R", _f32(1, gates * hidden, hidden)),
             _init("B", _f32(1, 2 * gates * hidden - 1))]
    model = _model([h.make_node(op, ["x", "W", "R", "B"], ["y"], hidden_size=hidden, name="rnn")],
                   [_vi("x", [5, 2, 3])], [_vi("y", None)], inits)
    with pytest.raises(ShapeError, match=rf"bias B 'B' has shape \[1, {2 * gates * hidden - 1}\]"):
        load(model)
    inits[2] = _init("B", _f32(1, 2 * gates * hidden))
    inits.append(_init("h0", _f32(1, 3, hidden)))
    model = _model([h.make_node(op, ["x", "W", "R", "B", "", "h0"], ["y"], hidden_size=hidden, name="rnn")],
                   [_vi("x", [5, 2, 3])], [_vi("y", None)], inits)
    with pytest.raises(ShapeError, match=r"initial_h 'h0' has shape \[1, 3, 4\].*\[1, 2, 4\]"):
        load(model)


def test_clip_bounds_must_be_scalars():
    model = _model([h.make_node("Clip", ["x", "lo"], ["y"], name="clip")], [_vi("x", [4])], [_vi("y", None)],
                   [_init("lo", np.zeros(4, np.float32))])
    with pytest.raises(ShapeError, match=r"input 1 \(min\) 'lo' has shape \[4\]"):
        load(model)


# -- attribute values -----------------------------------------------------------------


@pytest.mark.parametrize("attrs, message", [
    ({"strides": [0, 1]}, r"'strides' = \[0, 1\]: every value must be at least 1"),
    ({"dilations": [1, -1]}, r"'dilations' = \[1, -1\]"),
    ({"pads": [-1, 0, 0, 0]}, r"'pads' = \[-1, 0, 0, 0\] has a negative value"),
    ({"auto_pad": "SAME_MIDDLE"}, r"unknown auto_pad|auto_pad='SAME_MIDDLE' is not one of"),
])
def test_conv_attribute_values(attrs, message):
    with pytest.raises(ShapeError, match=message):
        load(_conv_model(**attrs))


def test_kernel_larger_than_the_padded_input():
    model = _model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], name="pool")],
                   [_vi("x", [1, 1, 3, 3])], [_vi("y", None)])
    with pytest.raises(ShapeError, match="node 'pool'.*does not fit"):
        load(model)


def test_mode_attributes_are_checked_at_import():
    model = _model([h.make_node("Pad", ["x", "p"], ["y"], mode="mirror", name="pad")], [_vi("x", [4])],
                   [_vi("y", None)], [_init("p", np.array([1, 1], np.int64))])
    with pytest.raises(ShapeError, match=r"node 'pad' \(Pad\): attribute mode='mirror' is not one of constant"):
        load(model)
    assert "coordinate_transformation_mode" in ENUM_ATTRS["Resize"]


def test_lp_pool_order_must_be_positive():
    model = _model([h.make_node("LpPool", ["x"], ["y"], kernel_shape=[2], p=0, name="lp")],
                   [_vi("x", [1, 1, 4])], [_vi("y", None)])
    with pytest.raises(ShapeError, match="attribute p = 0"):
        load(model)


def test_argmax_over_an_empty_axis_fails_at_import_not_at_run_time():
    model = _model([h.make_node("ArgMax", ["x"], ["y"], axis=0, name="am")], [_vi("x", ["n", 5])],
                   [_vi("y", None, T.INT64)])
    with pytest.raises(ShapeError, match=r"node 'am' \(ArgMax\): axis 0 of the input \[0, 5\] is empty"):
        load(model, {"x": (0, 5)})


def test_scan_body_declared_for_other_shapes_is_refused():
    body = h.make_graph([h.make_node("Add", ["s", "e"], ["s2"]), h.make_node("Identity", ["s2"], ["o"])], "body",
                        [_vi("s", [2]), _vi("e", [2])], [_vi("s2", [2]), _vi("o", [2])])
    model = _model([h.make_node("Scan", ["init", "xs"], ["fin", "ys"], num_scan_inputs=1, body=body, name="scan")],
                   [_vi("init", [2]), _vi("xs", [3, 6])], [_vi("fin", None), _vi("ys", None)])
    with pytest.raises(ShapeError, match=r"node 'scan' \(Scan\): state/scan input 1 is float32\[6\] but the body's "
                                         r"input 'e' declares float32\[2\]"):
        load(model)


def test_initializer_whose_data_does_not_match_its_dims():
    bad = onnx.TensorProto(name="W", data_type=T.FLOAT, dims=[8, 3, 3, 3], float_data=[0.0] * 10)
    model = _model([h.make_node("Conv", ["x", "W"], ["y"])], [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], [bad])
    with pytest.raises(RammerError, match=r"tensor name: W\) float_data size \(10\) is too small"):
        load(model)


def test_valid_models_still_load_and_run():
    compiled = rammer.compile(_conv_model(), backend="reference")
    out = compiled({"x": _f32(1, 3, 8, 8)})
    assert out["y"].shape == (1, 8, 6, 6)


# -- absurd sizes ----------------------------------------------------------------------


def test_rnn_of_length_2_pow_40_is_refused_naming_the_tensor():
    model = _model([h.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=1, name="lstm")],
                   [_vi("x", [2 ** 40, 1, 1])], [_vi("y", None)],
                   [_init("W", _f32(1, 4, 1)), _init("R", _f32(1, 4, 1))])
    with pytest.raises(ShapeError, match=r"tensor 'x' of shape \[1099511627776, 1, 1\] is too large"):
        load(model)


def test_unroll_bound_catches_long_sequences_that_fit_in_memory():
    model = _model([h.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=1, name="gru")],
                   [_vi("x", [1000, 1, 1])], [_vi("y", None)],
                   [_init("W", _f32(1, 3, 1)), _init("R", _f32(1, 3, 1))])
    with pytest.raises(ShapeError, match=r"node 'gru' \(GRU\): 1,000 time steps .*max_unroll = 100"):
        load(model, limits={"max_unroll": 100})
    assert load(model).op_counts() == {"GRU": 1}  # the default bound is far above 1,000


def test_four_gib_dimension_names_the_input_and_the_bound():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", [1 << 32])], [_vi("y", None)])
    with pytest.raises(ShapeError, match="tensor 'x' .* too large .*max_tensor_elements"):
        rammer.compile(model, backend="reference")


def test_inferred_outputs_are_bounded_too():
    model = _model([h.make_node("Expand", ["x", "s"], ["y"], name="expand")], [_vi("x", [1])], [_vi("y", None)],
                   [_init("s", np.array([1 << 20, 1 << 20], np.int64))])
    with pytest.raises(ShapeError, match=r"node 'expand' \(Expand\) output: tensor 'y' .* too large"):
        load(model)


def test_limits_are_overridable_per_call_and_from_the_environment(monkeypatch):
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_vi("x", [1000])], [_vi("y", None)])
    with pytest.raises(ShapeError, match="max_tensor_bytes"):
        load(model, limits={"max_tensor_bytes": 1000})
    with pytest.raises(ShapeError, match="max_tensor_bytes"):
        load(model, limits=Limits(max_tensor_bytes=1000))
    monkeypatch.setenv("RAMMER_MAX_TENSOR_ELEMENTS", "10")
    assert resolve_limits(None).max_tensor_elements == 10
    with pytest.raises(ShapeError, match="max_tensor_elements"):
        load(model)
    monkeypatch.setenv("RAMMER_MAX_TENSOR_ELEMENTS", "many")
    with pytest.raises(ShapeError, match="RAMMER_MAX_TENSOR_ELEMENTS='many' is not a positive integer"):
        load(model)


@pytest.mark.parametrize("limits, message", [({"max_bytes": 1}, "unknown limit"),
                                             ({"max_unroll": 0}, "positive integer"), ([1], "Limits or a dict")])
def test_bad_limits_are_refused(limits, message):
    with pytest.raises(ShapeError, match=message):
        resolve_limits(limits)


# -- a small mutation campaign: every mutant ends in a RammerError at load or runs ------------


def _mutants():
    base = _model(
        [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
         h.make_node("Relu", ["n"], ["r"], name="relu"),
         h.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
         h.make_node("Flatten", ["p"], ["f"], name="flat"),
         h.make_node("Gemm", ["f", "GW", "GC"], ["y"], transB=1, name="gemm")],
        [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 10])],
        [_init("W", _f32(8, 3, 3, 3)), _init("B", _f32(8)), _init("s", _f32(8)), _init("b", _f32(8)),
         _init("m", _f32(8)), _init("v", np.ones(8, np.float32)), _init("GW", _f32(10, 8)), _init("GC", _f32(10))])
    rng = np.random.default_rng(7)
    names = ["W", "B", "s", "b", "m", "v", "GW", "GC"]
    for name in names:  # wrong initializer sizes and dtypes
        for change in ("short", "long", "int64", "bool"):
            m = onnx.ModelProto()
            m.CopyFrom(base)
            t = next(t for t in m.graph.initializer if t.name == name)
            a = nh.to_array(t)
            if change == "short":
                a = a.reshape(-1)[:-1]
            elif change == "long":
                a = np.concatenate([a.reshape(-1), a.reshape(-1)[:3]])
            else:
                a = a.astype(np.int64 if change == "int64" else bool)
            t.CopyFrom(nh.from_array(a, name))
            yield f"{name}-{change}", m
    for node_index in range(6):  # swapped inputs
        m = onnx.ModelProto()
        m.CopyFrom(base)
        node = m.graph.node[node_index]
        if len(node.input) > 1:
            i, j = rng.choice(len(node.input), 2, replace=False)
            a, b = node.input[i], node.input[j]
            node.input[i], node.input[j] = b, a
            yield f"swap-{node.name}", m


@pytest.mark.parametrize("name, model", list(_mutants()), ids=lambda v: v if isinstance(v, str) else "")
def test_mutated_model_fails_at_load_with_a_rammer_error_or_runs(name, model):
    try:
        compiled = rammer.compile(model, backend="reference")
    except RammerError as exc:
        text = str(exc)
        assert "node '" in text or "tensor '" in text or "checker" in text, text
        for relay in ("TypeError", "IndexError", "KeyError", "ZeroDivisionError", "ValueError:"):
            assert relay not in text, text
        return
    compiled(compiled.random_feeds())  # what loads must run


def test_required_attribute_is_checked_even_without_the_onnx_checker():
    from rammer.frontend import import_model

    model = _model([h.make_node("Cast", ["x"], ["y"], name="cast")], [_vi("x", [2])], [_vi("y", [2], T.INT64)])
    with pytest.raises(ShapeError, match=r"node 'cast' \(Cast\): required attribute\(s\) to missing"):
        import_model(model)  # import_model does not run onnx's checker; the schema check still applies


def test_errors_in_nodes_the_opset_upgrade_made_name_the_users_node():
    # Fuzz finding F1: upgrading LogSoftmax-10 makes Flatten + LogSoftmax + Reshape; an invalid
    # axis failed in "node 'Flatten_3' (Flatten)", a node the user's model does not have.
    model = _model([h.make_node("Relu", ["x"], ["r"]), h.make_node("LogSoftmax", ["r"], ["y"], axis=-6,
                                                                   name="logsoftmax_9")],
                   [_vi("x", [4])], [_vi("y", [4])], opset=10)
    model.ir_version = 6
    with pytest.raises(ShapeError, match=r"^node 'logsoftmax_9' \(LogSoftmax\), in the Flatten node that upgrading "
                                         r"the model from opset 10 made of it: axis -?\d+ is out of range"):
        load(model)
    model.graph.node[1].ClearField("name")  # unnamed: named as the importer names it, by its index
    with pytest.raises(ShapeError, match=r"^node 'LogSoftmax_1' \(LogSoftmax\), in the Flatten node"):
        load(model)


def test_gather_on_a_scalar_is_refused_at_import():
    # Fuzz mutants:47313: a dropped attribute left a Gather on a scalar; the cpu lowering divided by its rank.
    model = _model([h.make_node("Gather", ["d", "i"], ["y"], name="gather")], [], [_vi("y", [])],
                   [_init("d", np.float32(1.0)), _init("i", np.int64(0))])
    with pytest.raises(ShapeError, match=r"node 'gather' \(Gather\): data 'd' is a scalar"):
        rammer.compile(model, backend="reference")


def test_undecodable_op_names_are_listed_not_crashed_on():
    # Fuzz mutants:32495: protobuf hands back undecodable strings as bytes; sorting them with str crashed.
    from rammer.errors import UnsupportedOpError
    from rammer.frontend.onnx_import import raise_if_unsupported

    model = _model([h.make_node("Relu", ["x"], ["a"], name="r"), h.make_node("Foo", ["a"], ["y"], name="f")],
                   [_vi("x", [2])], [_vi("y", [2])])
    data = model.SerializeToString().replace(b"Relu", b"R\xf3lu").replace(b"\x1a\x01f", b"\x1a\x01\xf3")
    corrupt = onnx.ModelProto()
    corrupt.ParseFromString(data)
    assert isinstance(corrupt.graph.node[1].name, bytes)  # the corrupt node name, as protobuf returns it
    with pytest.raises(UnsupportedOpError, match="2 unsupported op type"):
        raise_if_unsupported(corrupt)


def test_names_that_are_not_utf8_are_refused_when_the_model_loads():
    # Fuzz mutants:58424/51188/58022: undecodable names came back from protobuf as bytes and
    # crashed later steps (sorting, passes) with a raw TypeError.
    model = _model([h.make_node("LayerNormalization", ["x", "s"], ["y"], epsilon=1e-5, name="ln")],
                   [_vi("x", [2, 4])], [_vi("y", [2, 4])], [_init("s", _f32(4))])
    corrupt = onnx.ModelProto()
    corrupt.ParseFromString(model.SerializeToString().replace(b"epsilon", b"\xe5psilon"))
    with pytest.raises(ModelLoadError, match=r"not a valid ONNX model: model: node #0: an attribute name "
                                             r"b'\\xe5psilon' is not valid UTF-8"):
        load(corrupt)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_of_a_scalar_is_refused_at_import(op):
    model = _model([h.make_node(op, ["x"], ["y"], name="sm")], [_vi("x", [])], [_vi("y", [])])
    with pytest.raises(ShapeError, match=rf"node 'sm' \({op}\): rank-0 input 'x' \(shape \[\]\); {op} needs rank 1"):
        load(model)


def test_graph_output_declared_with_another_element_type_is_refused():
    model = _model([h.make_node("Shape", ["x"], ["y"], name="shape")], [_vi("x", [2, 3])], [_vi("y", [2], T.FLOAT)])
    with pytest.raises(ShapeError, match="model output 'y' is declared float32 but the model computes int64"):
        load(model)


def test_a_tensor_written_twice_is_refused_even_without_the_onnx_checker():
    from rammer.frontend import import_model

    model = _model([h.make_node("Relu", ["x"], ["y"], name="first"), h.make_node("Neg", ["x"], ["y"], name="second")],
                   [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(ModelLoadError, match=r"node 'second' \(Neg\) writes tensor 'y', which an earlier node"):
        import_model(model)


def test_an_initializer_of_an_unknown_element_type_is_named():
    # Found by ci/fuzz.py (mutants:9008357): damaged bytes gave an initializer data_type 33, reported as
    # "model initializer: element type 33 ..." without saying which initializer.
    from rammer.fuzzing.campaign import build_case

    data, _, _ = build_case("mutants", 9008357)
    with pytest.raises(RammerError, match=r"initializer 'w20': element type 33 is not supported"):
        rammer.compile(data, backend="reference")
