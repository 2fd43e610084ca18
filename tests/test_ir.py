from __future__ import annotations

import numpy as np
import pytest

import rammer
from rammer.errors import IRVerificationError
from rammer.ir import Graph, Node, TensorInfo

from helpers import add_relu_model, shape_chain_model


def _graph(nodes, value_info=None, inits=None):
    x = TensorInfo("x", "float32", (2,))
    vi = {"x": x, "a": TensorInfo("a", "float32", (2,)), "b": TensorInfo("b", "float32", (2,))}
    vi.update(value_info or {})
    return Graph("g", (x,), (vi["b"],), tuple(nodes), inits or {}, vi, {"": 17})


def test_valid_graph_verifies():
    g = _graph([Node("Relu", ("x",), ("a",), "r1"), Node("Relu", ("a",), ("b",), "r2")])
    g.verify()
    assert g.producer["a"].name == "r1"
    assert [n.name for n in g.consumers["a"]] == ["r2"]


def test_ssa_violation_is_caught():
    g = _graph([Node("Relu", ("x",), ("a",), "r1"), Node("Relu", ("x",), ("a",), "r2"),
                Node("Relu", ("a",), ("b",), "r3")])
    with pytest.raises(IRVerificationError, match="defined twice"):
        g.verify()


def test_topological_order_is_checked():
    g = _graph([Node("Relu", ("a",), ("b",), "r2"), Node("Relu", ("x",), ("a",), "r1")])
    with pytest.raises(IRVerificationError, match="before it is defined"):
        g.verify()


def test_initializer_must_match_declared_info():
    g = _graph([Node("Add", ("x", "w"), ("a",), "add"), Node("Relu", ("a",), ("b",), "r")],
               {"w": TensorInfo("w", "float32", (3,))}, {"w": np.zeros(2, np.float32)})
    with pytest.raises(IRVerificationError, match="initializer 'w'"):
        g.verify()


def test_ir_is_immutable():
    n = Node("Relu", ("x",), ("a",), "r", attrs={"alpha": 1.0})
    with pytest.raises(Exception):
        n.op_type = "Sigmoid"  # type: ignore[misc]
    with pytest.raises(TypeError):
        n.attrs["alpha"] = 2.0  # type: ignore[index]


def test_loaded_graph_is_static_and_verified():
    g = rammer.load(add_relu_model())
    g.verify()
    assert g.tensor("r").shape == (2, 3)


def test_shape_computation_is_folded_away():
    g = rammer.load(shape_chain_model())
    assert [n.op_type for n in g.nodes] == ["Reshape", "Relu"]
    assert g.outputs[0].shape == (2, 12)
    assert g.initializers[g.nodes[0].inputs[1]].tolist() == [2, -1]
