"""IF_TO_SELECT (core/passes/if_select.py): an If on a run-time condition becomes both branches and a
Where per output, with the same results on reference for either condition; Ifs it cannot inline
(a branch with a nested If, outputs whose shapes differ) are left in place."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.frontend import load
from rammer.passes import IF_TO_SELECT, run_pipeline

F = TensorProto.FLOAT


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _branch(label, op, out_shape=(2, 3), nested=None):
    nodes = [helper.make_node(op, ["x", "k"], [f"{label}_a"], name=f"{label}_op"),
             helper.make_node("Tanh", [f"{label}_a"], [f"{label}_out"], name=f"{label}_tanh"),
             helper.make_node("Relu" if label == "then" else "Neg", ["deep" if nested else "x_passed"],
                              [f"{label}_z"])]  # captured from the outer graph
    if nested is not None:
        nodes.insert(0, nested)
    # the same constant name "k" in both branches: the pass must rename them apart
    return helper.make_graph(nodes, label, [], [_vi(f"{label}_out", list(out_shape)), _vi(f"{label}_z", [2, 3])],
                             [numpy_helper.from_array(np.float32(1.5 if label == "then" else -0.5), "k")])


def _model(then_branch, else_branch, two_ifs=False, cond2=False):
    nodes = [helper.make_node("Identity", ["x"], ["x_passed"]),
             helper.make_node("If", ["cond"], ["y", "z"], then_branch=then_branch, else_branch=else_branch,
                              name="the_if")]
    outputs = [_vi("y", [2, 3]), _vi("z", [2, 3])]
    if two_ifs:  # a second If with branches of the same tensor names
        nodes.append(helper.make_node("If", ["cond"], ["y2", "z2"], then_branch=then_branch, else_branch=else_branch,
                                      name="other_if"))
        outputs += [_vi("y2", [2, 3]), _vi("z2", [2, 3])]
    inputs = [_vi("x", [2, 3]), _vi("cond", [], TensorProto.BOOL)]
    inputs += [_vi("cond2", [], TensorProto.BOOL)] if cond2 else []
    g = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("two_ifs", [False, True])
def test_if_becomes_both_branches_and_a_where_with_the_same_results(cond, two_ifs):
    m = _model(_branch("then", "Add"), _branch("else", "Mul"), two_ifs)
    graph = load(m)
    out = run_pipeline(graph, [IF_TO_SELECT], verify=True).graph
    assert "If" not in out.op_counts() and out.op_counts()["Where"] == (4 if two_ifs else 2)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32), "cond": np.array(cond)}
    want = rammer.compile(m, backend="reference").run(feeds)
    got = rammer.compile(out, backend="reference").run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    assert not np.allclose(want["y"], np.tanh(feeds["x"] * -0.5 if cond else feeds["x"] + 1.5))  # the branch matters


def test_ifs_it_cannot_inline_are_left_in_place():
    inner = helper.make_node("If", ["cond2"], ["deep"], name="nested",
                             then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["d1"])], "t", [],
                                                           [_vi("d1", [2, 3])]),
                             else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["d2"])], "e", [],
                                                           [_vi("d2", [2, 3])]))
    nested = _model(_branch("then", "Add", nested=inner), _branch("else", "Mul"), cond2=True)
    graph = load(nested)
    assert run_pipeline(graph, [IF_TO_SELECT]).graph is graph
