from __future__ import annotations

import numpy as np
import pytest
from helpers import add_relu_model, shape_chain_model

import rammer
from rammer.errors import IRVerificationError
from rammer.ir import Graph, Node, TensorInfo


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
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
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


# -- structural equality ----------------------------------------------------------------------------
from rammer.ir import assert_graphs_equal, graph_differences  # noqa: E402


def _chain(mid: str = "a", w_name: str = "w", w=None, alpha: float = 0.5, node_name: str = "r1") -> Graph:
    """x -> Mul(x, w) -> mid -> LeakyRelu -> b"""
    w = np.array([1.0, 2.0], np.float32) if w is None else w
    x, b = TensorInfo("x", "float32", (2,)), TensorInfo("b", "float32", (2,))
    vi = {"x": x, w_name: TensorInfo(w_name, "float32", (2,)), mid: TensorInfo(mid, "float32", (2,)), "b": b}
    nodes = (Node("Mul", ("x", w_name), (mid,), node_name),
             Node("LeakyRelu", (mid,), ("b",), "r2", attrs={"alpha": alpha}))
    return Graph("g", (x,), (b,), nodes, {w_name: w}, vi, {"": 17})


def test_graphs_with_the_same_structure_are_equal_whatever_their_node_and_graph_names():
    a, b = _chain(), _chain(node_name="other").replace(name="h")
    assert a == b and a.structurally_equal(b) and graph_differences(a, b) == []
    assert a is not b and len({a, b}) == 2  # hashes stay by identity


def test_initializers_and_attributes_compare_by_value():
    assert _chain() == _chain(w=np.array([1.0, 2.0], np.float32))
    assert graph_differences(_chain(), _chain(w=np.array([1.0, 3.0], np.float32))) == [
        "initializer 'w': 1 of 2 values differ"]
    assert _chain() != _chain(w=np.array([1.0, 2.0], np.float64))
    assert graph_differences(_chain(), _chain(alpha=0.25)) == ["node #1 node 'r2' (LeakyRelu): attribute 'alpha': 0.5 "
                                                               "against 0.25"]
    nan = np.array([np.nan, 2.0], np.float32)
    assert _chain(w=nan) == _chain(w=nan.copy())  # NaN constants compare equal


def test_internal_names_count_unless_renaming_is_allowed():
    a, b = _chain(), _chain(mid="t", w_name="w2")
    assert a != b
    assert any("writes 'a' against 't'" in d for d in graph_differences(a, b))
    assert a.structurally_equal(b, rename=True)
    assert_graphs_equal(a, b)


def test_renaming_must_be_consistent_and_keeps_graph_interface_names():
    x, y = TensorInfo("x", "float32", (2,)), TensorInfo("y", "float32", (2,))
    vi = {"x": x, "y": y, "p": TensorInfo("p", "float32", (2,)), "q": TensorInfo("q", "float32", (2,))}

    def g(second_reads: str) -> Graph:
        def upper(name: str) -> str:
            return name.replace("p", "P").replace("q", "Q")

        vi2 = {upper(k): v.__class__(upper(k), v.dtype, v.shape)
               for k, v in vi.items()} if second_reads.isupper() else vi
        p, q = ("P", "Q") if second_reads.isupper() else ("p", "q")
        nodes = (Node("Relu", ("x",), (p,)), Node("Neg", ("x",), (q,)), Node("Add", (p, second_reads), ("y",)))
        return Graph("g", (x,), (y,), nodes, {}, vi2, {"": 17})

    assert g("q").structurally_equal(g("Q"), rename=True)
    assert not g("q").structurally_equal(g("P"), rename=True)  # reads the Relu's output where the first reads the Neg's
    renamed_output = _chain().replace(outputs=(TensorInfo("c", "float32", (2,)),))
    assert not _chain().structurally_equal(renamed_output, rename=True)


def test_a_failed_comparison_shows_both_graphs():
    with pytest.raises(AssertionError) as info:
        assert_graphs_equal(_chain(), _chain(alpha=0.25))
    text = str(info.value)
    assert "attribute 'alpha': 0.5 against 0.25" in text
    assert "-b = LeakyRelu[alpha=0.5](a)" in text and "+b = LeakyRelu[alpha=0.25](a)" in text


def test_subgraphs_compare_structurally():
    def if_graph(then_value: float) -> Graph:
        out = TensorInfo("o", "float32", (1,))
        constant = Node("Constant", (), ("o",), attrs={"value": np.array([then_value], np.float32)})
        branch = Graph("then", (), (out,), (constant,), {}, {"o": out}, {})
        c, y = TensorInfo("c", "bool", ()), TensorInfo("y", "float32", (1,))
        node = Node("If", ("c",), ("y",), attrs={"then_branch": branch, "else_branch": branch})
        return Graph("g", (c,), (y,), (node,), {}, {"c": c, "y": y}, {"": 17})

    assert if_graph(1.0) == if_graph(1.0)
    assert if_graph(1.0) != if_graph(2.0)
    assert Node("If", ("c",), ("y",), attrs={"v": np.ones(2)}) == Node("If", ("c",), ("y",), attrs={"v": np.ones(2)})
