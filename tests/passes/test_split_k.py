"""Split-K: MatMul/Gemm with a long K and few output tiles become partial products and a sum with the
same result (reference before and after); products with many tiles or computed weights are left alone;
on the GPU backends the split ops run on PoCL."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer
from gpu_helpers import need_opencl
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
