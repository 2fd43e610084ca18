"""Shape-deciding tensor ops, indexing, Resize and control flow: exact static
shapes from constant inputs, ONNX's edge rules (Reshape 0/-1, Slice clamping
and negative steps, uneven Split), agreement with onnxruntime for Resize, and
errors that name the node when a shape-deciding input is not constant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rammer.errors import OpExecutionError, ShapeError
from rammer.ir import Graph, Node, TensorInfo, dtype_name
from rammer.ops.registry import OpContext, lookup

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def run_op(op_type: str, *inputs: np.ndarray | None, opset: int = 18, n_out: int = 1,
           constant: bool = True, run_graph=None, **attrs: object) -> list[np.ndarray]:
    """Infer (inputs known as constants unless ``constant=False``), compute, and
    check that the computed outputs have the inferred dtypes and shapes."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = Node(op_type, names, [f"out{j}" for j in range(n_out)], name="the_node", attrs=attrs)
    infos = [TensorInfo(n, dtype_name(x.dtype), x.shape) if x is not None else None for n, x in zip(names, inputs)]
    op = lookup(op_type)
    assert op is not None, op_type
    values = list(inputs) if constant else [None] * len(inputs)
    specs = op.infer(OpContext(node, opset, infos, values, run_graph))
    outs = op.compute(OpContext(node, opset, infos, list(inputs), run_graph), *inputs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    assert len(outs) == len(specs) == n_out
    for out, (dtype, shape) in zip(outs, specs):
        assert isinstance(out, np.ndarray)
        assert (dtype_name(out.dtype), out.shape) == (dtype, tuple(shape))
    return outs


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


# -- Reshape / Split / Squeeze ---------------------------------------------------------


def test_reshape_zero_copies_and_minus_one_infers() -> None:
    (y,) = run_op("Reshape", X, i64(0, -1))
    assert y.shape == (2, 12)
    np.testing.assert_array_equal(y, X.reshape(2, 12))
    (y,) = run_op("Reshape", X, i64(-1, 0, 2))
    assert y.shape == (4, 3, 2)
    empty = np.zeros((0, 3), np.float32)
    (z,) = run_op("Reshape", empty, i64(3, 0), allowzero=1)  # 0 is a real size with allowzero
    assert z.shape == (3, 0)
    with pytest.raises(ShapeError, match="the_node"):
        run_op("Reshape", X, i64(5, -1))
    with pytest.raises(ShapeError, match="more than one -1"):
        run_op("Reshape", X, i64(-1, -1))


def test_split_uneven_num_outputs_and_sizes_across_opsets() -> None:
    x = np.arange(7, dtype=np.int32)
    parts = run_op("Split", x, n_out=3, num_outputs=3, opset=18)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]
    parts = run_op("Split", x, i64(2, 5), n_out=2, opset=13)
    assert [len(p) for p in parts] == [2, 5]
    parts = run_op("Split", x, n_out=2, split=[4, 3], opset=11)
    assert [len(p) for p in parts] == [4, 3]
    with pytest.raises(ShapeError, match="evenly"):
        run_op("Split", x, n_out=2, opset=13)


def test_squeeze_unsqueeze_axes_attribute_and_input_forms() -> None:
    x = np.zeros((1, 3, 1), np.float32)
    assert run_op("Squeeze", x, axes=[0], opset=11)[0].shape == (3, 1)
    assert run_op("Squeeze", x, i64(-1), opset=13)[0].shape == (1, 3)
    assert run_op("Squeeze", x, opset=13)[0].shape == (3,)
    assert run_op("Unsqueeze", x, i64(-1, 0), opset=13)[0].shape == (1, 1, 3, 1, 1)
    with pytest.raises(ShapeError, match="size is 3"):
        run_op("Squeeze", x, i64(1))


# -- Slice / Gather ----------------------------------------------------------------------


def test_slice_negative_steps_and_clamping() -> None:
    x = np.arange(10, dtype=np.int64)
    (y,) = run_op("Slice", x, i64(-1), i64(INT64_MIN), i64(0), i64(-1))
    np.testing.assert_array_equal(y, x[::-1])
    (y,) = run_op("Slice", x, i64(8), i64(1), i64(0), i64(-3))
    np.testing.assert_array_equal(y, [8, 5, 2])
    (y,) = run_op("Slice", x, i64(-100), i64(INT64_MAX), i64(0), i64(4))
    np.testing.assert_array_equal(y, [0, 4, 8])
    (y,) = run_op("Slice", X, i64(1, 10), i64(1000, -1000), i64(1, -1), i64(1, -1))
    np.testing.assert_array_equal(y, X[:, 1:, ::-1])
    (empty,) = run_op("Slice", x, i64(5), i64(2))  # ends before start: an empty slice
    assert empty.shape == (0,)
    (old,) = run_op("Slice", X, opset=9, starts=[1], ends=[3], axes=[2])  # attribute form
    np.testing.assert_array_equal(old, X[:, :, 1:3])


def test_gather_negative_indices_and_out_of_range_error() -> None:
    (y,) = run_op("Gather", X, i64(-1, 0), axis=1)
    np.testing.assert_array_equal(y, X[:, [2, 0]])
    (y,) = run_op("GatherElements", X, np.full((2, 3, 1), -1, np.int64), axis=2)
    np.testing.assert_array_equal(y, X[:, :, -1:])
    with pytest.raises(OpExecutionError, match=r"Gather node .the_node. \(op Gather\): index 3 out of range \[-3, 3\)"):
        run_op("Gather", X, i64(3), axis=1)


def test_gather_nd_batch_dims_and_scatter_reductions() -> None:
    (y,) = run_op("GatherND", X, np.array([[[1, -1]], [[0, 0]]], np.int64), batch_dims=1)
    np.testing.assert_array_equal(y, [[X[0, 1, -1]], [X[1, 0, 0]]])
    data = np.zeros(4, np.float32)
    (s,) = run_op("ScatterElements", data, i64(1, 1, -1), np.ones(3, np.float32), reduction="add")
    np.testing.assert_array_equal(s, [0, 2, 0, 1])
    (s,) = run_op("ScatterND", data, np.array([[0], [0]], np.int64), np.array([3, 5], np.float32), reduction="max")
    np.testing.assert_array_equal(s, [5, 0, 0, 0])


# -- Pad / Expand / generators -------------------------------------------------------------


def test_pad_modes_and_negative_pads() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    (r,) = run_op("Pad", x, i64(0, 2, 0, 1), mode="reflect")
    np.testing.assert_array_equal(r, [[3, 2, 1, 2, 3, 2], [6, 5, 4, 5, 6, 5]])
    (e,) = run_op("Pad", x, i64(1, 0, 0, 0), mode="edge")
    np.testing.assert_array_equal(e, [[1, 2, 3], [1, 2, 3], [4, 5, 6]])
    (w,) = run_op("Pad", x, i64(0, 1, 0, 1), mode="wrap", opset=19)
    np.testing.assert_array_equal(w[0], [3, 1, 2, 3, 1])
    (c,) = run_op("Pad", x, i64(-1, 1), np.array(9, np.float32), i64(1))  # axes input, crop + pad
    np.testing.assert_array_equal(c, [[2, 3, 9], [5, 6, 9]])
    (old,) = run_op("Pad", x, pads=[0, 1, 0, 0], value=7.0, opset=2)  # attribute form
    np.testing.assert_array_equal(old[:, 0], [7, 7])


def test_constant_forms_and_generators_keep_onnx_dtypes() -> None:
    assert run_op("Constant", value_ints=[1, 2])[0].dtype == np.int64
    assert run_op("Constant", value_float=1.5)[0].shape == ()
    (r,) = run_op("Range", np.array(10, np.int32), np.array(1, np.int32), np.array(-3, np.int32))
    assert r.dtype == np.int32 and r.tolist() == [10, 7, 4]
    (f,) = run_op("ConstantOfShape", i64(2, 3), value=np.array([7], np.int8))
    assert f.dtype == np.int8 and f.shape == (2, 3) and (f == 7).all()
    (e,) = run_op("Expand", np.ones((3, 1), np.int16), i64(2, 1, 4))
    assert e.shape == (2, 3, 4) and e.dtype == np.int16
    (s,) = run_op("Shape", X, start=-2)
    assert s.tolist() == [3, 4]


# -- errors for run-time shape inputs -----------------------------------------------------------


@pytest.mark.parametrize(
    "op_type, inputs, attrs",
    [
        ("Reshape", (X, i64(6, 4)), {}),
        ("Expand", (X, i64(2, 3, 4)), {}),
        ("Tile", (X, i64(1, 1, 2)), {}),
        ("Slice", (X, i64(0), i64(1)), {}),
        ("Resize", (X, None, np.ones(3, np.float32)), {}),
        ("NonZero", (X,), {}),
    ],
)
def test_infer_names_the_node_when_a_shape_input_is_not_constant(op_type, inputs, attrs) -> None:
    with pytest.raises(ShapeError, match=r"node 'the_node' \(" + op_type + r"\).*(constant|run time)"):
        run_op(op_type, *inputs, constant=False, **attrs)


# -- Resize against onnxruntime ---------------------------------------------------------------------


def _ort_resize(x: np.ndarray, scales: np.ndarray | None, sizes: np.ndarray | None, **attrs: object) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    inputs = ["x", "", "", "sizes"] if sizes is not None else ["x", "", "scales"]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    inits = []
    if scales is not None:
        inits.append(onnx.numpy_helper.from_array(scales, "scales"))
    if sizes is not None:
        inits.append(onnx.numpy_helper.from_array(sizes, "sizes"))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    "attrs, scales, sizes",
    [
        ({"mode": "linear"}, np.array([1, 1, 2.0, 1.5], np.float32), None),
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, i64(1, 2, 3, 7)),
        ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None, i64(1, 2, 2, 3)),
        ({"mode": "nearest"}, np.array([1, 1, 0.6, 2.5], np.float32), None),
        ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}, None,
         i64(1, 2, 9, 4)),
        ({"mode": "cubic"}, np.array([1, 1, 1.7, 0.8], np.float32), None),
    ],
)
def test_resize_matches_onnxruntime(attrs, scales, sizes) -> None:
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 6)).astype(np.float32)
    expected = _ort_resize(x, scales, sizes, **attrs)
    (y,) = run_op("Resize", x, None, scales, sizes, opset=19, **attrs)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_resize_keep_aspect_ratio_and_integer_rounding() -> None:
    x = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4) * 15
    (y,) = run_op("Resize", x, None, None, i64(2, 8), axes=[2, 3], keep_aspect_ratio_policy="not_larger",
                  mode="linear", opset=19)
    assert y.shape == (1, 1, 2, 2) and y.dtype == np.uint8  # scale min(2/4, 8/4) on both axes


# -- control flow ------------------------------------------------------------------------------


def _interp_run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from rammer.interpreter import run_graph

    return run_graph(graph, feeds)


def _graph(name: str, inputs: list[TensorInfo], outputs: list[TensorInfo], nodes: list[Node]) -> Graph:
    infos = {t.name: t for t in inputs + outputs}
    return Graph(name, inputs, outputs, nodes, value_info=infos, opset={"": 18})


def test_loop_scan_outputs_need_a_static_trip_count() -> None:
    state = TensorInfo("s_in", "float32", (2,))
    body = _graph(
        "body",
        [TensorInfo("i", "int64", ()), TensorInfo("c_in", "bool", ()), state],
        [TensorInfo("c_out", "bool", ()), TensorInfo("s_out", "float32", (2,)), TensorInfo("scan", "float32", (2,))],
        [Node("Identity", ["c_in"], ["c_out"]), Node("Add", ["s_in", "s_in"], ["s_out"]),
         Node("Identity", ["s_out"], ["scan"])],
    )
    init = np.ones(2, np.float32)
    final, scanned = run_op("Loop", i64(3), np.array(True), init, n_out=2, body=body, run_graph=_interp_run_graph)
    np.testing.assert_array_equal(final, [8, 8])
    assert scanned.shape == (3, 2) and scanned[:, 0].tolist() == [2, 4, 8]
    with pytest.raises(ShapeError, match="the_node.*trip count"):
        run_op("Loop", i64(3), np.array(True), init, n_out=2, body=body, constant=False)


def test_if_branches_must_agree_unless_the_condition_is_constant() -> None:
    def branch(name: str, shape: tuple[int, ...]) -> Graph:
        out = TensorInfo(f"{name}_out", "float32", shape)
        value = np.zeros(shape, np.float32)
        return _graph(name, [], [out], [Node("Constant", [], [out.name], attrs={"value": value})])

    then_b, else_b = branch("then", (2,)), branch("else", (3,))
    (y,) = run_op("If", np.array(False), then_branch=then_b, else_branch=else_b, run_graph=_interp_run_graph)
    assert y.shape == (3,)
    with pytest.raises(ShapeError, match="the_node.*then-branch"):
        run_op("If", np.array(False), then_branch=then_b, else_branch=else_b, constant=False)


def test_resize_infer_needs_sizes_but_not_roi_as_constant() -> None:
    node = Node("Resize", ["x", "roi", "", "sizes"], ["y"], name="r",
                attrs={"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"})
    infos = [TensorInfo("x", "float32", (1, 1, 4, 4)), TensorInfo("roi", "float32", (8,)), None,
             TensorInfo("sizes", "int64", (4,))]
    ctx = OpContext(node, 19, infos, [None, None, None, i64(1, 1, 3, 5)])
    assert lookup("Resize").infer(ctx) == [("float32", (1, 1, 3, 5))]


def test_data_dependent_shapes_name_the_tensor_to_bind() -> None:
    with pytest.raises(ShapeError) as info:
        run_op("NonZero", X, constant=False)
    assert info.value.needs_constant == "in0"  # lets a caller retry with that input bound
