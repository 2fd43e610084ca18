"""Attention chains as one ScaledDotProductAttention op (core/passes/fuse_attention.py), Before/Expected,
and the op's numpy reference against the unfused graph."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

import rammer
from rammer.interpreter import run_graph
from rammer.ir import Graph
from rammer.ops.control import RAMMER_DOMAIN
from rammer.passes import FUSE_ATTENTION, fuse_attention, run_pipeline

B, H, S, D = 1, 2, 5, 4
QKV = {"q": [B, H, S, D], "k": [B, H, S, D], "v": [B, H, S, D]}
SCALE = np.array(0.5, np.float32)


def _fused(inputs: dict, output: str, fused_inputs: list[str], scale: float | None,
           extra_nodes: list | None = None, inits: dict | None = None) -> Graph:
    """The expected graph: a Transpose of k and the fused op (built through the frontend with the
    rammer domain imported)."""
    attrs = {} if scale is None else {"scale": scale}
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), *(extra_nodes or []),
             helper.make_node("ScaledDotProductAttention", fused_inputs, [output], domain=RAMMER_DOMAIN, **attrs)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [B, H, S, D])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(RAMMER_DOMAIN, 1)])
    return rammer.load(model)


def _chain(scale_op: str | None, mask: bool, mask_first: bool = False) -> list:
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"])]
    scores = "qk"
    if scale_op is not None:
        nodes.append(node(scale_op, ["qk", "c"], ["qks"]))
        scores = "qks"
    if mask:
        nodes.append(node("Add", ["m", scores] if mask_first else [scores, "m"], ["qkm"]))
        scores = "qkm"
    return nodes + [node("Softmax", [scores], ["p"], axis=-1), node("MatMul", ["p", "v"], ["y"])]


def test_scaled_masked_chain_becomes_one_op():
    ins = {**QKV, "m": [B, 1, 1, S]}
    before = graph(_chain("Mul", True), ins, {"y": [B, H, S, D]}, {"c": SCALE})
    expected = _fused(ins, "y", ["q", "kt", "v", "m"], 0.5)
    after = run_pipeline(before, [FUSE_ATTENTION], verify=True).graph
    assert_graphs_equal(after, expected)
    assert "c" not in after.initializers  # the scale constant has no reader left


def test_divisor_becomes_reciprocal_scale_and_bias_may_come_first():
    ins = {**QKV, "m": [S, S]}
    before = graph(_chain("Div", True, mask_first=True), ins, {"y": [B, H, S, D]}, {"c": np.array(8.0, np.float32)})
    assert_graphs_equal(fuse_attention(before), _fused(ins, "y", ["q", "kt", "v", "m"], 0.125))


def test_unscaled_unmasked_chain():
    before = graph(_chain(None, False), QKV, {"y": [B, H, S, D]})
    assert_graphs_equal(fuse_attention(before), _fused(QKV, "y", ["q", "kt", "v"], None))


def test_chains_the_pass_must_leave_alone():
    out = {"y": [B, H, S, D]}
    # the scores are also a graph output / read twice
    scores_out = graph(_chain("Mul", False), QKV, {**out, "qks": [B, H, S, S]}, {"c": SCALE})
    # softmax over another axis
    other_axis = graph(_chain(None, False)[:2] + [node("Softmax", ["qk"], ["p"], axis=2),
                                                  node("MatMul", ["p", "v"], ["y"])], QKV, out)
    # a bias that would widen the scores (its batch dim is larger)
    wide = graph(_chain(None, True), {**QKV, "m": [3, H, S, S]}, {"y": [3, H, S, D]})
    # a scale that is a run-time tensor, not a constant
    runtime_scale = graph(_chain("Mul", False), {**QKV, "c": [1]}, out)
    # the probabilities are read by something else too
    p_read = graph(_chain(None, False) + [node("Neg", ["p"], ["np"])], QKV, {**out, "np": [B, H, S, S]})
    for before in (scores_out, other_axis, wide, runtime_scale, p_read):
        assert_left_alone(fuse_attention, before)


def test_switched_off_it_leaves_the_graph_alone(monkeypatch):
    module = importlib.import_module("rammer.passes.fuse_attention")  # (the package attribute is the function)

    before = graph(_chain(None, False), QKV, {"y": [B, H, S, D]})
    monkeypatch.setattr(module, "ENABLED", False)
    assert_left_alone(fuse_attention, before)


@pytest.mark.parametrize("scale_op,mask", [("Mul", True), ("Div", False), (None, True)])
def test_the_reference_backend_runs_the_fused_op_like_the_chain(scale_op, mask):
    rng = np.random.default_rng(0)
    ins = {**QKV, "m": [B, 1, S, S]} if mask else dict(QKV)
    before = graph(_chain(scale_op, mask), ins, {"y": [B, H, S, D]}, {"c": SCALE} if scale_op else None)
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in ins.items()}
    fused = fuse_attention(before)
    assert [n.op_type for n in fused.nodes] == ["Transpose", "ScaledDotProductAttention"]
    want, got = run_graph(before, feeds), run_graph(fused, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_float32_casts_after_softmax_and_two_biases_are_taken_in():
    # T5/MPNet: scores + position bias + mask; HF exports: softmax(..., dtype=float32).to(dtype) as Casts
    ins = {**QKV, "pos": [1, H, S, S], "m": [B, 1, 1, S]}
    nodes = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"]),
             node("Add", ["qk", "pos"], ["qkp"]), node("Add", ["qkp", "m"], ["qkm"]),
             node("Softmax", ["qkm"], ["p"], axis=-1), node("Cast", ["p"], ["p1"], to=1),
             node("Cast", ["p1"], ["p2"], to=1), node("MatMul", ["p2", "v"], ["y"])]
    before = graph(nodes, ins, {"y": [B, H, S, D]})
    after = run_pipeline(before, [FUSE_ATTENTION], verify=True).graph
    assert [n.op_type for n in after.nodes] == ["Transpose", "Add", "ScaledDotProductAttention"]
    bias_sum = after.nodes[1]
    assert bias_sum.inputs == ("pos", "m") and after.nodes[2].inputs[3] == bias_sum.outputs[0]
    assert after.value_info[bias_sum.outputs[0]].shape == (1, H, S, S)
    rng = np.random.default_rng(1)
    feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in ins.items()}
    np.testing.assert_allclose(run_graph(after, feeds)[0], run_graph(before, feeds)[0], rtol=1e-5, atol=1e-6)


def test_a_cast_to_another_type_stops_the_match():
    nodes = _chain(None, False)[:-1] + [node("Cast", ["p"], ["p16"], to=10), node("Cast", ["p16"], ["p32"], to=1),
                                         node("MatMul", ["p32", "v"], ["y"])]
    assert_left_alone(fuse_attention, graph(nodes, QKV, {"y": [B, H, S, D]}))


def test_the_op_refuses_mismatched_head_sizes_with_one_clear_line():
    nodes = [helper.make_node("ScaledDotProductAttention", ["q", "kt", "v"], ["y"], name="att", domain=RAMMER_DOMAIN)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 5, 4]),
                                       helper.make_tensor_value_info("kt", TensorProto.FLOAT, [1, 2, 8, 5]),
                                       helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 2, 5, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(RAMMER_DOMAIN, 1)])
    with pytest.raises(rammer.errors.RammerError, match="att.*head sizes") as err:
        rammer.load(model)
    assert "\n" not in str(err.value)


def test_operands_computed_inside_the_chain_stop_the_match():
    square = {"q": [1, 2, 5, 5], "k": [1, 2, 5, 5]}
    self_bias = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"]),
                 node("Add", ["qk", "qk"], ["qkm"]), node("Softmax", ["qkm"], ["p"], axis=-1),
                 node("MatMul", ["p", "k"], ["y"])]
    probs_as_values = [node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), node("MatMul", ["q", "kt"], ["qk"]),
                       node("Softmax", ["qk"], ["p"], axis=-1), node("MatMul", ["p", "p"], ["y"])]
    for nodes in (self_bias, probs_as_values):
        assert_left_alone(fuse_attention, graph(nodes, square, {"y": [1, 2, 5, 5]}))
