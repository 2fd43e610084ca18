"""IF_TO_SELECT (core/passes/if_select.py): an If on a run-time condition becomes both branches and a
Where per output, with the same results on reference for either condition; Ifs it cannot inline
(a branch with a nested If, outputs whose shapes differ) are left in place."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.frontend import load
from rammer.ir import Node
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


# -- one branch Unreachable at the compiled shapes: the other inlined, and a guard on the condition ----

def _guarded_model(dead: str = "else", outputs_twice: bool = False):
    """``y = If(sr == 16000)``: one branch tanh(x + 1.5), the other a Reshape to [4, 4] that cannot run at
    x's [2, 3] (so the frontend makes that branch Unreachable), as silero VAD's If on the sample rate."""
    twice = 2 if outputs_twice else 1  # one tensor as two outputs: written through an Identity
    live_g = helper.make_graph([helper.make_node("Add", ["x", "k"], ["l_a"]),
                                helper.make_node("Tanh", ["l_a"], ["l_out"])],
                               "live", [], [_vi("l_out", [2, 3])] * twice,
                               [numpy_helper.from_array(np.float32(1.5), "k")])
    dead_g = helper.make_graph([helper.make_node("Reshape", ["x", "shp"], ["d_r"]),
                                helper.make_node("Neg", ["d_r"], ["d_out"])],
                               "dead", [], [_vi("d_out", [2, 3])] * twice,
                               [numpy_helper.from_array(np.array([4, 4], np.int64), "shp")])
    branches = {"then_branch": live_g, "else_branch": dead_g} if dead == "else" else \
        {"then_branch": dead_g, "else_branch": live_g}
    outs = ["y", "y2"] if outputs_twice else ["y"]
    nodes = [helper.make_node("Equal", ["sr", "c16k"], ["cond"]),
             helper.make_node("If", ["cond"], outs, name="on_rate", **branches)]
    g = helper.make_graph(nodes, "g", [_vi("x", [2, 3]), _vi("sr", [], TensorProto.INT64)],
                          [_vi(o, [2, 3]) for o in outs], [numpy_helper.from_array(np.array(16000, np.int64), "c16k")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dead,outputs_twice", [("else", False), ("then", False), ("else", True)])
def test_an_if_with_one_unreachable_branch_becomes_that_branch_and_a_guard(dead, outputs_twice):
    m = _guarded_model(dead, outputs_twice)
    out = run_pipeline(load(m), [IF_TO_SELECT], verify=True).graph
    ops = out.op_counts()
    assert "If" not in ops and "Where" not in ops and ops["BranchGuard"] == 1 and ops["Tanh"] == 1
    guard = next(n for n in out.nodes if n.op_type == "BranchGuard")
    assert guard.inputs == ("cond",) and guard.attrs["expected"] == (dead == "else")
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    live_sr, dead_sr = (16000, 8000) if dead == "else" else (8000, 16000)
    feeds = {"x": x, "sr": np.array(live_sr, np.int64)}
    got = rammer.compile(out, backend="reference").run(feeds)
    want = rammer.compile(m, backend="reference").run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
        np.testing.assert_allclose(got[k], np.tanh(x + 1.5), rtol=1e-6)
    # the other rate selects the branch that cannot run: the same error as the If's, naming it and the condition
    with pytest.raises(rammer.errors.OpExecutionError, match=r"node 'on_rate' \(If\): the (then|else)-branch was "
                       r"taken, but it cannot run .* cannot reshape .*the condition 'cond' was"):
        rammer.compile(out, backend="reference").run({"x": x, "sr": np.array(dead_sr, np.int64)})


def test_an_if_whose_branches_are_both_unreachable_is_left():
    m = _guarded_model()
    graph = load(m)
    the_if = next(n for n in graph.nodes if n.op_type == "If")
    both_dead = Node(the_if.op_type, the_if.inputs, the_if.outputs, the_if.name, the_if.domain,
                     {**the_if.attrs, "then_branch": the_if.attrs["else_branch"]})
    both = graph.replace(nodes=tuple(both_dead if n is the_if else n for n in graph.nodes))
    assert run_pipeline(both, [IF_TO_SELECT]).graph is both
