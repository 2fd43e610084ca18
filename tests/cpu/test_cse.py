"""Common-subexpression elimination before lowering (core/passes/cse.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

import rammer
from rammer.ir import Node
from rammer.passes import eliminate_common_subexpressions


def _graph(nodes, feeds, outputs, consts=None):
    return rammer.load(model(nodes, feeds, outputs, consts))


def test_repeated_nodes_are_computed_once():
    x = rand(2, 8)
    nodes = [node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["b"]),          # same: b is a
             node("Add", ["a", "b"], ["c"]), node("Add", ["a", "a"], ["d"]),  # the same after renaming b
             node("LeakyRelu", ["x"], ["e"], alpha=0.1), node("LeakyRelu", ["x"], ["f"], alpha=0.2),  # differ
             node("Mul", ["c", "d"], ["m"]), node("Mul", ["e", "f"], ["y"])]
    g = _graph(nodes, {"x": x}, ["m", "y"])
    h = eliminate_common_subexpressions(g)
    h.verify()
    assert [n.op_type for n in h.nodes] == ["Relu", "Add", "LeakyRelu", "LeakyRelu", "Mul", "Mul"]
    assert h.nodes[4].inputs == ("c", "c")
    assert "b" not in h.value_info and "d" not in h.value_info


def test_graph_outputs_random_ops_and_unchanged_graphs_are_kept():
    x = rand(2, 8)
    g = _graph([node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["b"])], {"x": x}, ["a", "b"])
    assert eliminate_common_subexpressions(g) is g  # the duplicate writes a graph output
    # random operators are never merged (built directly: the op registry has none of them)
    rnd = g.replace(nodes=(Node("RandomUniformLike", ("x",), ("u",), attrs={"seed": 1.0}),
                           Node("RandomUniformLike", ("x",), ("w",), attrs={"seed": 1.0}),
                           Node("Add", ("u", "w"), ("a",)), Node("Relu", ("x",), ("b",))))
    assert eliminate_common_subexpressions(rnd) is rnd


@pytest.mark.parametrize("cache", [False, True])
def test_duplicates_around_a_fallback_op(cache_dir, cache):
    # Host steps name nodes by index: the cached program and the executable must agree
    # on the graph after elimination (the second compile loads the cached program).
    x = rand(3, 10)
    k = np.array([4], np.int64)
    nodes = [node("Relu", ["x"], ["r1"]), node("Relu", ["x"], ["r2"]),
             node("TopK", ["r2", "k"], ["v", "i"], axis=1), node("Sigmoid", ["v"], ["s1"]),
             node("Sigmoid", ["v"], ["s2"]), node("Add", ["s1", "s2"], ["y"]), node("Add", ["r1", "r2"], ["z"])]
    m = model(nodes, {"x": x}, ["y", "z", "i"], {"k": k})
    compare(m, {"x": x}, expect_fallback=True)
    ref = rammer.compile(m, backend="reference")({"x": x})
    for _ in range(2 if cache else 1):
        got = rammer.compile(m, backend="cpu", cache=cache)({"x": x})
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-6)
