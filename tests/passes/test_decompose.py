"""Decomposing real models' ops into simpler ones (core/passes/decompose.py), Before/Expected, and the
rewritten graphs computing what the originals do."""

from __future__ import annotations

import numpy as np
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

from rammer.interpreter import run_graph
from rammer.passes import DECOMPOSE, decompose_model_ops, run_pipeline


def test_an_unread_dropout_mask_is_dropped():
    before = graph([node("Dropout", ["x"], ["d", "mask"]), node("Relu", ["d"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]})
    expected = graph([node("Dropout", ["x"], ["d"]), node("Relu", ["d"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]})
    assert_graphs_equal(run_pipeline(before, [DECOMPOSE], verify=True).graph, expected)


def test_a_read_dropout_mask_and_a_fractional_resize_are_left_alone():
    assert_left_alone(decompose_model_ops, graph(
        [node("Dropout", ["x"], ["d", "mask"]), node("Cast", ["mask"], ["m"], to=1), node("Add", ["d", "m"], ["y"])],
        {"x": [2, 3]}, {"y": [2, 3]}))
    assert_left_alone(decompose_model_ops, graph(
        [node("Resize", ["x", "", "s"], ["y"], mode="nearest")], {"x": [1, 1, 4, 4]}, {"y": [1, 1, 6, 6]},
        {"s": np.array([1, 1, 1.5, 1.5], np.float32)}))


def _same_values(before, feeds):
    after = run_pipeline(before, [DECOMPOSE], verify=True).graph
    assert after is not before and {n.op_type for n in after.nodes} != {n.op_type for n in before.nodes}
    for got, want in zip(run_graph(after, feeds), run_graph(before, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return after


def test_integer_nearest_resize_lrn_and_reflect_pad_become_simpler_ops_with_the_same_values():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    after = _same_values(graph([node("Resize", ["x", "", "s"], ["y"], mode="nearest")], {"x": [1, 3, 4, 4]},
                               {"y": [1, 3, 8, 8]}, {"s": np.array([1, 1, 2, 2], np.float32)}), {"x": x})
    assert "Resize" not in {n.op_type for n in after.nodes}
    after = _same_values(graph([node("LRN", ["x"], ["y"], size=3, alpha=1e-3, beta=0.75, bias=1.0)],
                               {"x": [1, 3, 4, 4]}, {"y": [1, 3, 4, 4]}), {"x": x})
    assert "LRN" not in {n.op_type for n in after.nodes}
    after = _same_values(graph([node("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": [1, 3, 4, 4]},
                               {"y": [1, 3, 6, 8]}, {"p": np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64)}), {"x": x})
    assert "Pad" not in {n.op_type for n in after.nodes}
