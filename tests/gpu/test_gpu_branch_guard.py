"""An If whose other branch cannot run at the compiled shapes (silero VAD's If on the sample rate) on
the GPU backends: IF_TO_SELECT inlines the reachable branch and leaves a BranchGuard on the condition,
which the runners read back and check after the run (backends/gpu/guards.py).  On opencl (PoCL) in
persistent mode and through the CuPy runner on the CUDA emulator in wave mode: the reachable rate
matches reference, the other is the If's own error (never the inlined branch's outputs), and the next
run is right again."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import install_fake_cupy
from gpu_helpers import const, model, need_opencl, vi
from onnx import TensorProto, helper

import rammer
from rammer.errors import OpExecutionError

_ERROR = r"node 'on_rate' \(If\): the else-branch was taken, but it cannot run at the shapes .*cannot reshape"
_GUARD = _ERROR + r".*the condition 'cond' was False at run time"


def _vad_like(dead_shape=(4, 4)):
    """``[y, state] = If(sr == 16000)``: then a small computation on x and state, else a Reshape of x to
    ``dead_shape``, which x's [2, 3] cannot take (so the frontend makes the else-branch Unreachable)."""
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t_m"]), helper.make_node("Add", ["t_m", "state"], ["t_s"]),
         helper.make_node("Tanh", ["t_s"], ["t_y"]), helper.make_node("Sigmoid", ["t_s"], ["t_state"])],
        "then", [], [vi("t_y", [2, 4]), vi("t_state", [2, 4])],
        [const("w", np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))])
    else_g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shp"], ["e_r"]), helper.make_node("Neg", ["e_r"], ["e_y"]),
         helper.make_node("Abs", ["e_r"], ["e_state"])],
        "else", [], [vi("e_y", [2, 4]), vi("e_state", [2, 4])], [const("shp", np.array(dead_shape, np.int64))])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["cond"]),
             helper.make_node("If", ["cond"], ["y", "state_n"], name="on_rate", then_branch=then_g,
                              else_branch=else_g)]
    return model(nodes, [vi("x", [2, 3]), vi("state", [2, 4]), vi("sr", [], TensorProto.INT64)],
                 [vi("y", [2, 4]), vi("state_n", [2, 4])], [const("rate", np.array(16000, np.int64))])


def _feeds(sr: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32),
            "state": rng.standard_normal((2, 4)).astype(np.float32), "sr": np.array(sr, np.int64)}


def _check(compiled, reference) -> None:
    for seed in (0, 1):
        feeds = _feeds(16000, seed)
        got, want = compiled.run(feeds), reference.run(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(OpExecutionError, match=_GUARD):
        compiled.run(_feeds(8000))
    with pytest.raises(OpExecutionError, match=_ERROR):  # the reference says the same
        reference.run(_feeds(8000))
    feeds = _feeds(16000, 2)  # and the program is right again after the refused run
    got, want = compiled.run(feeds), reference.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_reachable_branch_inlined_and_the_other_an_error_on_opencl():
    need_opencl()
    m = _vad_like()
    compiled = rammer.compile(m, backend="opencl", mode="persistent")
    guards = compiled.executable.program.guards  # the If became its then-branch and one guard on 'cond'
    assert [(g.condition, g.expected) for g in guards] == [("cond", True)]
    _check(compiled, rammer.compile(m, backend="reference"))


def test_reachable_branch_inlined_and_the_other_an_error_on_the_cuda_emulator(monkeypatch):
    install_fake_cupy(monkeypatch)
    m = _vad_like()
    _check(rammer.compile(m, backend="cuda", mode="wave"), rammer.compile(m, backend="reference"))
