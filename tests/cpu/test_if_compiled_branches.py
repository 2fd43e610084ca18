"""An If left to the host runs its taken branch compiled, not op by op (silero VAD's whole network
sits in such a branch: 1.7 ms interpreted, 0.18 ms compiled)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.ir import captured_names, standalone_graph


def _model() -> bytes:
    w = numpy_helper.from_array(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4), "w")
    b = numpy_helper.from_array(np.full(4, 0.25, np.float32), "b")
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4])  # noqa: E731
    # then: Relu(r @ w + b) * x_scale - r2 ; reads r (computed outside), w and b (outer constants), s (graph input)
    then = helper.make_graph([
        helper.make_node("MatMul", ["r", "w"], ["t1"]),
        helper.make_node("Add", ["t1", "b"], ["t2"]),
        helper.make_node("Relu", ["t2"], ["t3"]),
        helper.make_node("Mul", ["t3", "s"], ["t4"]),
        helper.make_node("Sigmoid", ["t4"], ["then_y"]),
    ], "then", [], [out("then_y")])
    other = helper.make_graph([
        helper.make_node("MatMul", ["r", "w"], ["e1"]),
        helper.make_node("Tanh", ["e1"], ["e2"]),
        helper.make_node("Sub", ["e2", "b"], ["e3"]),
        helper.make_node("Mul", ["e3", "s"], ["else_y"]),
    ], "else", [], [out("else_y")])
    graph = helper.make_graph([
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=other),
        helper.make_node("Add", ["y", "y"], ["z"]),
    ], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6]),
             helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 4]),
             helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_branch_becomes_a_graph_of_its_own():
    graph = rammer.load(_model())
    node = next(n for n in graph.nodes if n.op_type == "If")
    assert captured_names(node.attrs["then_branch"]) == {"r", "w", "b", "s"}
    alone = standalone_graph(node.attrs["then_branch"], graph, "then")
    assert [t.name for t in alone.inputs] == ["r", "s"] and set(alone.initializers) == {"w", "b"}
    alone.verify()


@pytest.mark.parametrize("cond", [True, False])
def test_the_taken_branch_runs_compiled_and_matches_reference(cond):
    model = rammer.compile(_model(), backend="cpu")
    ref = rammer.compile(_model(), backend="reference")
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((3, 6)).astype(np.float32),
             "s": rng.standard_normal((3, 4)).astype(np.float32), "c": np.array(cond)}
    for _ in range(2):  # the second run reuses the compiled branch
        np.testing.assert_allclose(model(feeds)["z"], ref(feeds)["z"], rtol=1e-5, atol=1e-6)
    branches = model.executable._branches
    taken = "then_branch" if cond else "else_branch"
    assert [k[1] for k in branches] == [taken]  # only the taken branch was compiled
    assert isinstance(next(iter(branches.values())), rammer.CompiledModel)


def _small_model() -> bytes:
    k = numpy_helper.from_array(np.array(1.5, np.float32), "k")
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])  # noqa: E731
    then = helper.make_graph([helper.make_node("Add", ["r", "k"], ["t"])], "then", [], [out("t")])
    other = helper.make_graph([helper.make_node("Sub", ["r", "k"], ["e"])], "else", [], [out("e")])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [out("y")], [k])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_small_branch_is_interpreted():
    model = rammer.compile(_small_model(), backend="cpu")
    y = model({"x": -np.ones((2, 3), np.float32), "c": np.array(False)})["y"]
    assert (y == -1.5).all()
    assert list(model.executable._branches.values()) == [None]


def test_a_branch_the_compiler_refuses_is_interpreted(monkeypatch):
    from rammer.backends.cpu import runtime

    model = rammer.compile(_model(), backend="cpu")
    ref = rammer.compile(_model(), backend="reference")

    def refuse(*args, **kwargs):
        raise rammer.errors.RammerError("refused on purpose")

    monkeypatch.setattr(runtime.api, "compile", refuse)
    feeds = {"x": np.ones((3, 6), np.float32), "s": np.ones((3, 4), np.float32), "c": np.array(True)}
    np.testing.assert_allclose(model(feeds)["z"], ref(feeds)["z"], rtol=1e-5, atol=1e-6)
    assert list(model.executable._branches.values()) == [None]
