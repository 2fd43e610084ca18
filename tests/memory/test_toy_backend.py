"""The toy backend of docs/writing-a-backend.md reuses the core's pass pipeline and memory planner."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import rammer

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"


def _toy_module(monkeypatch) -> types.ModuleType:
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
                 if b.startswith("# toy_backend.py"))
    module = types.ModuleType("toy_backend_doc")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # its dataclasses look their module up
    exec(compile(block, str(DOC), "exec"), module.__dict__)
    return module


def _chain_model():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["a2"]),  # CSE: a2 is a
             helper.make_node("Add", ["a", "a2"], ["b"]), helper.make_node("Mul", ["b", "b"], ["c"]),
             helper.make_node("Sub", ["c", "x"], ["d"]), helper.make_node("Relu", ["d"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_toy_backend_runs_its_passes_and_reuses_memory(monkeypatch):
    toy = _toy_module(monkeypatch)
    backend = toy.ToyBackend()
    graph = rammer.load(_chain_model())
    exe = backend.compile(graph, {})
    assert len(exe.steps) == len(graph.nodes) - 1  # CSE dropped the repeated Relu
    tensor = 64 * 64 * 4
    assert exe.arena.nbytes <= 2 * tensor < len(exe.steps) * tensor  # a chain needs two live tensors at a time
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    want = rammer.compile(_chain_model(), backend="reference")({"x": x})["y"]
    for _ in range(2):
        np.testing.assert_allclose(exe.run({"x": x})["y"], want, rtol=1e-6)
