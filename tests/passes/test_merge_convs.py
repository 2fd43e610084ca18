"""Sibling convs merged into one wider conv and a Split (core/passes/merge_convs.py), Before/Expected."""

from __future__ import annotations

import numpy as np
import pytest
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

from rammer.passes import merge_convs_pass, merge_sibling_convs, run_pipeline

rng = np.random.default_rng(0)
W1 = rng.standard_normal((3, 4, 1, 1)).astype(np.float32)
W2 = rng.standard_normal((2, 4, 1, 1)).astype(np.float32)
B1 = rng.standard_normal(3).astype(np.float32)


def _siblings(batch: int = 1, opset: int = 17, reader: str = "Relu"):
    return graph([node("Conv", ["x", "w1", "b1"], ["a"]), node("Conv", ["x", "w2"], ["b"]),
                  node(reader, ["a"], ["ra"]), node("Neg", ["b"], ["nb"]),
                  node("Concat", ["ra", "nb"], ["y"], axis=1)],
                 {"x": [batch, 4, 5, 5]}, {"y": [batch, 5, 5, 5]}, {"w1": W1, "b1": B1, "w2": W2}, opset)


@pytest.mark.parametrize("opset", [17, 11])
def test_two_sibling_convs_become_one_conv_and_a_split(opset):
    weights = np.concatenate([W1, W2])
    bias = np.concatenate([B1, np.zeros(2, np.float32)])  # the bias-less conv adds zeros
    if opset >= 13:  # the split sizes are an input from opset 13 on
        split = node("Split", ["m", "sizes"], ["a", "b"], axis=1)
        inits = {"w": weights, "bias": bias, "sizes": np.array([3, 2], np.int64)}
    else:
        split = node("Split", ["m"], ["a", "b"], axis=1, split=[3, 2])
        inits = {"w": weights, "bias": bias}
    expected = graph([node("Conv", ["x", "w", "bias"], ["m"]), split,
                      node("Relu", ["a"], ["ra"]), node("Neg", ["b"], ["nb"]),
                      node("Concat", ["ra", "nb"], ["y"], axis=1)],
                     {"x": [1, 4, 5, 5]}, {"y": [1, 5, 5, 5]}, inits, opset)
    assert_graphs_equal(run_pipeline(_siblings(opset=opset), [merge_convs_pass()], verify=True).graph, expected)


def test_a_batch_of_two_or_a_conv_whose_reader_runs_in_its_epilogue_is_left_alone():
    assert_left_alone(merge_sibling_convs, _siblings(batch=2))  # channel ranges are not contiguous
    assert_left_alone(merge_convs_pass({"Relu"}), _siblings())  # conv a's Relu runs in its epilogue
    sigmoid = _siblings(reader="Sigmoid")  # ... but a Sigmoid does not, for this backend
    assert [n.op_type for n in merge_convs_pass({"Relu"})(sigmoid).nodes][:2] == ["Conv", "Split"]


def test_convs_with_other_attributes_do_not_merge():
    before = graph([node("Conv", ["x", "w1"], ["a"], strides=[2, 2]), node("Conv", ["x", "w2"], ["b"]),
                    node("MaxPool", ["b"], ["pb"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]),
                    node("Concat", ["a", "pb"], ["y"], axis=1)],
                   {"x": [1, 4, 5, 5]}, {"y": [1, 5, 3, 3]}, {"w1": W1, "w2": W2})
    assert_left_alone(merge_sibling_convs, before)
