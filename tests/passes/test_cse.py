"""Common-subexpression elimination (core/passes/cse.py), Before/Expected."""

from __future__ import annotations

import numpy as np
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

from rammer.passes import CSE, eliminate_common_subexpressions, run_pipeline


def test_a_repeated_node_is_computed_once_and_its_readers_read_the_first():
    before = graph([node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["b"]),
                    node("Transpose", ["a"], ["ta"], perm=[1, 0]), node("Transpose", ["b"], ["tb"], perm=[1, 0]),
                    node("Add", ["ta", "tb"], ["y"])], {"x": [2, 3]}, {"y": [3, 2]})
    expected = graph([node("Relu", ["x"], ["a"]), node("Transpose", ["a"], ["ta"], perm=[1, 0]),
                      node("Add", ["ta", "ta"], ["y"])], {"x": [2, 3]}, {"y": [3, 2]})
    # the second Transpose became a repeat only once its input was renamed to the first Relu's
    assert_graphs_equal(run_pipeline(before, [CSE], verify=True).graph, expected)


def test_nodes_that_differ_in_attributes_inputs_or_constants_stay():
    w = np.ones((2, 3), np.float32)
    before = graph([node("Transpose", ["x"], ["a"], perm=[1, 0]), node("LeakyRelu", ["x"], ["b"], alpha=0.1),
                    node("LeakyRelu", ["x"], ["c"], alpha=0.2), node("Add", ["x", "w"], ["d"]),
                    node("Sum", ["b", "c", "d"], ["y"])], {"x": [2, 3]}, {"y": [2, 3], "a": [3, 2]}, {"w": w})
    assert_left_alone(eliminate_common_subexpressions, before)


def test_random_ops_and_graph_outputs_are_kept():
    """Dropout stands for the ops with randomness (in training form its mask is random)."""
    before = graph([node("Dropout", ["x"], ["r1"]), node("Dropout", ["x"], ["r2"]),
                    node("Relu", ["x"], ["y1"]), node("Relu", ["x"], ["y2"]), node("Add", ["r1", "r2"], ["y3"])],
                   {"x": [4]}, {"y1": [4], "y2": [4], "y3": [4]})
    assert_left_alone(eliminate_common_subexpressions, before)
