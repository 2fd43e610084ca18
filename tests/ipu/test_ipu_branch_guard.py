"""An If whose other branch cannot run at the compiled shapes (silero VAD's If on the sample rate) on
the ipu backend: core's IF_TO_SELECT, first among the ipu passes, inlines the reachable branch and
leaves a BranchGuard on the condition; the simulator runs the guard, so the reachable rate matches
reference and the other is the If's own error, after which the program is right again."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.errors import OpExecutionError

_GUARD = (r"node 'on_rate' \(If\): the else-branch was taken, but it cannot run at the shapes .*"
          r"the condition 'cond' was False at run time")


def _vi(name: str, shape: list[int], dtype: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _vad_like():
    """``[y, state] = If(sr == 16000)``: a small computation on x and state, else a Reshape of x to
    [4, 4], which x's [2, 3] cannot take (so the frontend makes the else-branch Unreachable)."""
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t_m"]), helper.make_node("Add", ["t_m", "state"], ["t_s"]),
         helper.make_node("Tanh", ["t_s"], ["t_y"]), helper.make_node("Sigmoid", ["t_s"], ["t_state"])],
        "then", [], [_vi("t_y", [2, 4]), _vi("t_state", [2, 4])],
        [numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")])
    else_g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shp"], ["e_r"]), helper.make_node("Neg", ["e_r"], ["e_y"]),
         helper.make_node("Abs", ["e_r"], ["e_state"])],
        "else", [], [_vi("e_y", [2, 4]), _vi("e_state", [2, 4])],
        [numpy_helper.from_array(np.array([4, 4], np.int64), "shp")])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["cond"]),
             helper.make_node("If", ["cond"], ["y", "state_n"], name="on_rate", then_branch=then_g,
                              else_branch=else_g)]
    graph = helper.make_graph(nodes, "vad_like",
                              [_vi("x", [2, 3]), _vi("state", [2, 4]), _vi("sr", [], TensorProto.INT64)],
                              [_vi("y", [2, 4]), _vi("state_n", [2, 4])],
                              [numpy_helper.from_array(np.array(16000, np.int64), "rate")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(sr: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32),
            "state": rng.standard_normal((2, 4)).astype(np.float32), "sr": np.array(sr, np.int64)}


def test_reachable_branch_inlined_and_the_other_an_error_on_ipu() -> None:
    m = _vad_like()
    compiled = rammer.compile(m, backend="ipu")
    reference = rammer.compile(m, backend="reference")
    assert not any(n.op_type == "If" for n in compiled.executable.graph.nodes)
    for seed in (0, 1):
        got, want = compiled.run(_feeds(16000, seed)), reference.run(_feeds(16000, seed))
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(OpExecutionError, match=_GUARD):
        compiled.run(_feeds(8000))
    got, want = compiled.run(_feeds(16000, 2)), reference.run(_feeds(16000, 2))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
