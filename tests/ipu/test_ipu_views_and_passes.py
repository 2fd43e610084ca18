"""Tensors larger than a tile through views, ConvTranspose, Resize and LSTM on the ipu backend.

Each model here was refused on a GC200 before: a Reshape's rTasks each read the whole input
(every reader tile received 1 MiB), and ConvTranspose, nearest Resize and a large LSTM had only
one whole-op rTask, larger than a tile.  Now views read exact boxes (``copy.exact_view``), the
core DECOMPOSE pass rewrites ConvTranspose / Resize, and large RNNs are unrolled."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu.rkernels import flat_range_box


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(value, name)


def _matches_reference(model: onnx.ModelProto) -> rammer.CompiledModel:
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    ipu = rammer.compile(model, backend="ipu")
    got, want = ipu.run(feeds), rammer.compile(model, backend="reference").run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    report = ipu.executable.report()
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"]
    return ipu


def test_flat_range_box_spans_exactly_the_rows_it_must() -> None:
    assert flat_range_box((4, 5, 6), 0, 119) == ((0, 4), (0, 5), (0, 6))
    assert flat_range_box((4, 5, 6), 30, 59) == ((1, 2), (0, 5), (0, 6))
    assert flat_range_box((4, 5, 6), 32, 33) == ((1, 2), (0, 1), (2, 4))
    assert flat_range_box((4, 5, 6), 34, 37) == ((1, 2), (0, 2), (0, 6))  # straddles two rows
    assert flat_range_box((), 0, 0) == ()


def test_reshape_of_a_tensor_larger_than_a_tile_reads_only_its_boxes() -> None:
    shape = np.array([1, 256, 1024], dtype=np.int64)
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["v"]),
                    helper.make_node("Relu", ["v"], ["y"])],
                   [("x", [1, 256, 32, 32])], [("y", [1, 256, 1024])], [_const("shape", shape)])
    exe = _matches_reference(model).executable
    op = next(o for o in exe.schedule.ops if o.op_type == "Reshape")
    assert op.kernel.family == "copy.exact_view"
    for r in range(op.kernel.num_rtasks):
        a = op.kernel.accesses(r)
        (_, read), (_, write) = a.reads[0], a.writes[0]
        assert np.prod([hi - lo for lo, hi in read]) == np.prod([hi - lo for lo, hi in write])


def test_expand_reads_the_broadcast_box() -> None:
    model = _model([helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Relu", ["e"], ["y"])],
                   [("x", [1, 64, 1, 32])], [("y", [4, 64, 32, 32])],
                   [_const("shape", np.array([4, 64, 32, 32], dtype=np.int64))])
    exe = _matches_reference(model).executable
    op = next(o for o in exe.schedule.ops if o.op_type == "Expand")
    assert op.kernel.family == "copy.exact_view"
    assert all(a.reads[0][1][2] == (0, 1) for a in (op.kernel.accesses(r) for r in range(op.kernel.num_rtasks)))


def test_conv_transpose_larger_than_a_tile_is_decomposed_and_matches() -> None:
    w = np.random.default_rng(1).standard_normal((64, 32, 2, 2)).astype(np.float32) * 0.1
    model = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                   [("x", [1, 64, 32, 32])], [("y", [1, 32, 64, 64])],
                   [_const("w", w), _const("b", np.linspace(-1, 1, 32, dtype=np.float32))])
    exe = _matches_reference(model).executable
    assert "ConvTranspose" not in {o.op_type for o in exe.schedule.ops}


def test_nearest_resize_larger_than_a_tile_is_decomposed_and_matches() -> None:
    scales = np.array([1, 1, 2, 2], dtype=np.float32)
    model = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                   [("x", [1, 64, 32, 32])], [("y", [1, 64, 64, 64])], [_const("scales", scales)])
    exe = _matches_reference(model).executable
    assert "Resize" not in {o.op_type for o in exe.schedule.ops}


def test_lstm_larger_than_a_tile_is_unrolled_and_matches() -> None:
    rng = np.random.default_rng(2)
    hidden, width, steps = 160, 128, 8
    inits = [_const("W", (rng.standard_normal((1, 4 * hidden, width)) * 0.1).astype(np.float32)),
             _const("R", (rng.standard_normal((1, 4 * hidden, hidden)) * 0.1).astype(np.float32)),
             _const("B", (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32))]
    model = _model([helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=hidden)],
                   [("x", [steps, 1, width])], [("Y", [steps, 1, 1, hidden])], inits)
    exe = _matches_reference(model).executable
    assert "LSTM" not in {o.op_type for o in exe.schedule.ops}


def test_small_lstm_stays_one_node() -> None:
    from rammer.backends.ipu.passes import unroll_large_rnns
    from rammer.frontend import load

    rng = np.random.default_rng(3)
    inits = [_const("W", rng.standard_normal((1, 32, 8)).astype(np.float32)),
             _const("R", rng.standard_normal((1, 32, 8)).astype(np.float32))]
    graph = load(_model([helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=8)],
                        [("x", [4, 1, 8])], [("Y", [4, 1, 1, 8])], inits))
    assert unroll_large_rnns(graph) is graph
    assert "LSTM" not in {n.op_type for n in unroll_large_rnns(graph, tile_bytes=1024).nodes}


def test_a_model_of_constants_only_compiles_and_runs() -> None:
    # No rTask at all (the frontend folds the Constant): the lowering still places the output.
    value = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    g = helper.make_graph([helper.make_node("Constant", [], ["y"], value=value)], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    np.testing.assert_array_equal(rammer.compile(model, backend="ipu").run({})["y"],
                                  np.arange(6, dtype=np.float32).reshape(2, 3))
