"""Split-K: MatMul/Gemm with a long K and few output tiles become partial products and a sum with the
same result (reference before and after); products with many tiles or computed weights are left alone;
on the GPU backends the split ops run on PoCL."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import need_opencl
from onnx import TensorProto, helper

import rammer
from rammer.api import random_feeds
from rammer.frontend import load
from rammer.passes import run_pipeline, split_k
from rammer.passes.split_k import make_split_k


def _model(node, x_shape, y_shape, inits):
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _w(shape, seed=0):
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.05
    return helper.make_tensor("w", TensorProto.FLOAT, list(shape), w.ravel())


def _run(graph_or_model, feeds):
    return rammer.compile(graph_or_model, backend="reference").run(feeds)["y"]


CASES = {
    "matmul": lambda: _model(helper.make_node("MatMul", ["x", "w"], ["y"]), [1, 3000], [1, 40], [_w((3000, 40))]),
    "matmul-3d": lambda: _model(helper.make_node("MatMul", ["x", "w"], ["y"]), [2, 3, 2048], [2, 3, 24],
                                [_w((2048, 24))]),
    "gemm-transB-bias": lambda: _model(helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5, beta=2.0),
                                       [2, 2500], [2, 30],
                                       [_w((30, 2500)), helper.make_tensor("b", TensorProto.FLOAT, [30],
                                                                           np.arange(30, dtype=np.float32))]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_k_keeps_the_result(case):
    model = CASES[case]()
    graph = load(model)
    split = run_pipeline(graph, [make_split_k()], verify=True).graph
    ops = [n.op_type for n in split.nodes]
    assert ops.count(graph.nodes[0].op_type) >= 2 and "Add" in ops and "Slice" in ops
    assert "w" not in split.initializers  # only its slices remain
    feeds = random_feeds(graph.inputs, seed=1)
    np.testing.assert_allclose(_run(split, feeds), _run(graph, feeds), rtol=1e-5, atol=1e-5)


def test_an_empty_product_is_left_alone():
    """A zero-row product has no output tiles (fuzz mutants:28000279: the pass divided by them)."""
    empty = load(_model(helper.make_node("MatMul", ["x", "w"], ["y"]), [0, 3000], [0, 40], [_w((3000, 40))]))
    assert split_k(empty) is empty


def test_products_with_many_tiles_short_k_or_computed_weights_are_left_alone():
    many_tiles = load(_model(helper.make_node("MatMul", ["x", "w"], ["y"]), [1024, 3000], [1024, 64],
                             [_w((3000, 64))]))  # 64 x 4 = 256 tiles: the blocks are busy already
    assert split_k(many_tiles) is many_tiles
    short_k = load(_model(helper.make_node("MatMul", ["x", "w"], ["y"]), [1, 600], [1, 40], [_w((600, 40))]))
    assert split_k(short_k) is short_k  # one slice of 512 only
    g = helper.make_graph([helper.make_node("MatMul", ["x", "z"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3000]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [3000, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    computed = load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert split_k(computed) is computed


@pytest.mark.parametrize("mode", ["persistent", "wave"])
def test_split_products_run_on_opencl(mode):
    need_opencl()
    model = CASES["gemm-transB-bias"]()
    compiled = rammer.compile(model, backend="opencl", mode=mode)
    assert compiled.executable.report["rtasks"] > 4  # the split products, not one 2x30 tile
    feeds = random_feeds(compiled.inputs, seed=2)
    np.testing.assert_allclose(compiled.run(feeds)["y"], _run(model, feeds), rtol=1e-4, atol=1e-5)


# -- Before/Expected on structural graph equality ---------------------------------------------------
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node  # noqa: E402

_WK = np.random.default_rng(2).standard_normal((1024, 16)).astype(np.float32)


def _slice_consts(i: int, lo: int, hi: int) -> dict[str, np.ndarray]:
    return {f"s{i}": np.array([lo], np.int64), f"e{i}": np.array([hi], np.int64), f"a{i}": np.array([1], np.int64)}


def test_before_expected_a_long_k_with_one_output_tile_becomes_two_slices_two_products_and_an_add():
    before = graph([node("MatMul", ["x", "w"], ["y"])], {"x": [1, 1024]}, {"y": [1, 16]}, {"w": _WK})
    # one 16 x 16 output tile of 128 wanted, K = 1024 holds two slices of 512: two pieces
    expected = graph([node("Slice", ["x", "s0", "e0", "a0"], ["x0"]), node("MatMul", ["x0", "w0"], ["p0"]),
                      node("Slice", ["x", "s1", "e1", "a1"], ["x1"]), node("MatMul", ["x1", "w1"], ["p1"]),
                      node("Add", ["p0", "p1"], ["y"])], {"x": [1, 1024]}, {"y": [1, 16]},
                     {**_slice_consts(0, 0, 512), **_slice_consts(1, 512, 1024), "w0": _WK[:512], "w1": _WK[512:]})
    assert_graphs_equal(run_pipeline(before, [make_split_k()], verify=True).graph, expected)


def test_before_expected_the_gemm_bias_joins_the_first_partial_product():
    wt = np.ascontiguousarray(_WK.T)  # transB: K is B's second axis
    bias = np.arange(16, dtype=np.float32)
    before = graph([node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5)], {"x": [1, 1024]}, {"y": [1, 16]},
                   {"w": wt, "b": bias})
    expected = graph([node("Slice", ["x", "s0", "e0", "a0"], ["x0"]),
                      node("Gemm", ["x0", "w0", "b"], ["p0"], transB=1, alpha=0.5),
                      node("Slice", ["x", "s1", "e1", "a1"], ["x1"]),
                      node("Gemm", ["x1", "w1"], ["p1"], transB=1, alpha=0.5),
                      node("Add", ["p0", "p1"], ["y"])], {"x": [1, 1024]}, {"y": [1, 16]},
                     {**_slice_consts(0, 0, 512), **_slice_consts(1, 512, 1024), "w0": wt[:, :512], "w1": wt[:, 512:],
                      "b": bias})
    assert_graphs_equal(split_k(before), expected)


def test_before_expected_many_output_tiles_or_a_short_k_are_left_alone():
    many_tiles = graph([node("MatMul", ["x", "w"], ["y"])], {"x": [256, 1024]}, {"y": [256, 128]},
                       {"w": np.zeros((1024, 128), np.float32)})
    short_k = graph([node("MatMul", ["x", "w"], ["y"])], {"x": [1, 1000]}, {"y": [1, 16]},
                    {"w": np.zeros((1000, 16), np.float32)})
    computed_weight = graph([node("MatMul", ["x", "v"], ["y"])], {"x": [1, 1024], "v": [1024, 16]}, {"y": [1, 16]})
    for before in (many_tiles, short_k, computed_weight):
        assert_left_alone(split_k, before)
