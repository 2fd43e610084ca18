"""A Relu of a Concat moved onto the concatenated parts (core/passes/relu_concat.py), Before/Expected."""

from __future__ import annotations

from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

from rammer.passes import RELU_CONCAT, run_pipeline, sink_relu_into_concat

IO = ({"x": [1, 2]}, {"y": [1, 4]})


def test_relus_that_are_a_concats_only_readers_become_relus_of_its_parts():
    before = graph([node("Sigmoid", ["x"], ["p"]), node("Tanh", ["x"], ["q"]),
                    node("Concat", ["p", "q"], ["c"], axis=1), node("Relu", ["c"], ["r1"]),
                    node("Relu", ["c"], ["r2"]), node("Add", ["r1", "r2"], ["y"])], *IO)
    expected = graph([node("Sigmoid", ["x"], ["p"]), node("Tanh", ["x"], ["q"]),
                      node("Relu", ["p"], ["p_relu"]), node("Relu", ["q"], ["q_relu"]),
                      node("Concat", ["p_relu", "q_relu"], ["r1"], axis=1),
                      node("Add", ["r1", "r1"], ["y"])], *IO)
    assert_graphs_equal(run_pipeline(before, [RELU_CONCAT], verify=True).graph, expected)


def test_a_part_read_twice_gets_one_relu():
    before = graph([node("Sigmoid", ["x"], ["p"]), node("Concat", ["p", "p"], ["c"], axis=1),
                    node("Relu", ["c"], ["r"]), node("Neg", ["r"], ["y"])], *IO)
    expected = graph([node("Sigmoid", ["x"], ["p"]), node("Relu", ["p"], ["pr"]),
                      node("Concat", ["pr", "pr"], ["r"], axis=1), node("Neg", ["r"], ["y"])], *IO)
    assert_graphs_equal(sink_relu_into_concat(before), expected)


def test_a_concat_with_another_reader_a_graph_output_or_an_input_part_is_left_alone():
    other_reader = graph([node("Sigmoid", ["x"], ["p"]), node("Tanh", ["x"], ["q"]),
                          node("Concat", ["p", "q"], ["c"], axis=1), node("Relu", ["c"], ["r"]),
                          node("Neg", ["c"], ["n"]), node("Add", ["r", "n"], ["y"])], *IO)
    relu_is_output = graph([node("Sigmoid", ["x"], ["p"]), node("Tanh", ["x"], ["q"]),
                            node("Concat", ["p", "q"], ["c"], axis=1), node("Relu", ["c"], ["y"])], *IO)
    input_part = graph([node("Sigmoid", ["x"], ["p"]), node("Concat", ["p", "x"], ["c"], axis=1),
                        node("Relu", ["c"], ["r"]), node("Neg", ["r"], ["y"])], *IO)
    for before in (other_reader, relu_is_output, input_part):
        assert_left_alone(sink_relu_into_concat, before)
