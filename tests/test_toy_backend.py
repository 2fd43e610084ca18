"""The one-file toy backend (tests/pipeline_toy_backend.py) goes through every core stage of rammer.pipeline and
matches the reference; a plugin's rKernel registered for it is what the scheduler chooses."""

from __future__ import annotations

import types

import numpy as np
import onnx
import pytest
from helpers import make_model, rand
from onnx import helper
from pipeline_toy_backend import ToyBackend

import rammer
from rammer import plugins
from rammer.backend import UnknownOptionError
from rammer.hookspecs import hookimpl
from rammer.rtask import RKernel


def _plugin(**hooks: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


@pytest.fixture(autouse=True)
def toy_registered():
    plugins.reset()
    plugins.register_plugin(_plugin(rammer_register_backends=lambda register: register(ToyBackend())), "toy")
    yield
    plugins.reset()


def _branchy_model() -> onnx.ModelProto:
    """Two parallel branches (so several vEUs run at once and dead buffers can be reused), a host op
    (Sqrt is not a toy op) between segments, and a MatMul with a constant weight."""
    w = helper.make_tensor("w", onnx.TensorProto.FLOAT, [8, 8], rand((8, 8), 1).ravel().tolist())
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["a1"]),
        helper.make_node("Sigmoid", ["m"], ["b1"]),
        helper.make_node("Tanh", ["a1"], ["a2"]),
        helper.make_node("Neg", ["b1"], ["b2"]),
        helper.make_node("Mul", ["a2", "b2"], ["c"]),
        helper.make_node("Abs", ["c"], ["d"]),
        helper.make_node("Sqrt", ["d"], ["e"]),
        helper.make_node("Add", ["e", "x"], ["f"]),
        helper.make_node("Exp", ["f"], ["y"]),
    ]
    return make_model(nodes, [("x", onnx.TensorProto.FLOAT, (16, 8))], [("y", onnx.TensorProto.FLOAT, (16, 8))],
                      initializers=[w])


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
def test_toy_backend_matches_reference_through_the_core_pipeline(policy):
    model = _branchy_model()
    x = rand((16, 8), 2)
    got = rammer.compile(model, backend="toy", policy=policy)(x=x)["y"]
    want = rammer.compile(model, backend="reference")(x=x)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_toy_program_has_segments_around_the_host_op_and_reuses_memory():
    exe = ToyBackend().compile(rammer.load(_branchy_model()), {})
    program = exe.program
    assert [kind for kind, _ in program.steps] == ["segment", "host", "segment"]
    first_segment = program.steps[0][1]
    assert len(first_segment) > 1 and sum(1 for rows in first_segment if rows) > 1  # several vEUs ran rTasks
    assert any(row[0] == "wait" for rows in first_segment for row in rows)  # barriers became row waits
    # the planner reused dead intermediates' memory: the arena is smaller than every tensor laid end to end
    sizes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for _, dtype, shape in program.tensors.values())
    assert program.arena_bytes < sizes


def test_plugin_rkernel_registered_for_toy_is_chosen():
    class CheapRelu:
        name = "plugin.relu"
        op_types = frozenset({"Relu"})

        def candidates(self, node, graph, vdevice):
            return [RKernel(family="plugin.relu", params={}, num_rtasks=1, duration_us=1e-6)]

    def register_rkernels(backend, register):
        if backend == "toy":
            register(CheapRelu())

    plugins.register_plugin(_plugin(rammer_register_rkernels=register_rkernels), "cheap-relu")
    model = _branchy_model()
    exe = ToyBackend().compile(rammer.load(model), {})
    relu_families = [fam for fam, node in zip(exe.program.chosen[0], ["MatMul", "Relu"]) if node == "Relu"]
    assert relu_families == ["plugin.relu"]
    x = rand((16, 8), 3)
    np.testing.assert_allclose(exe.run({"x": x})["y"], rammer.compile(model, backend="reference")(x=x)["y"],
                               rtol=1e-5, atol=1e-6)


def test_unknown_option_names_the_accepted_ones():
    with pytest.raises(UnknownOptionError, match="policy, vdevice"):
        ToyBackend().compile(rammer.load(_branchy_model()), {"veus": 2})
