"""The exported exact GELU as one Gelu node (core/passes/fuse_gelu.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pass_graphs import assert_left_alone, graph, node

import rammer
from rammer.passes import FUSE_GELU, fuse_gelu, run_pipeline

_C = {"sqrt2": np.array(math.sqrt(2.0), np.float32), "rsqrt2": np.array(math.sqrt(0.5), np.float32),
      "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}


def _torch_form(scale_op: str = "Div", swap: bool = False, extra_reader: bool = False, one: float = 1.0):
    """Div(x, sqrt 2) -> Erf -> Add 1 -> Mul(x, .) -> Mul(., 0.5), after a MatMul, as torch exports it."""
    inits = {**_C, "w": np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32),
             "one": np.array(one, np.float32)}
    nodes = [node("MatMul", ["x", "w"], ["h"]),
             node(scale_op, ["h", "sqrt2" if scale_op == "Div" else "rsqrt2"], ["d"]),
             node("Erf", ["d"], ["e"]),
             node("Add", ["one", "e"] if swap else ["e", "one"], ["a"]),
             node("Mul", ["a", "h"] if swap else ["h", "a"], ["m"]),
             node("Mul", ["half", "m"] if swap else ["m", "half"], ["y"])]
    outputs = {"y": [2, 16]}
    if extra_reader:
        nodes.append(node("Relu", ["e"], ["z"]))
        outputs["z"] = [2, 16]
    return graph(nodes, {"x": [2, 8]}, outputs, inits)


def _hf_form():
    """x * 0.5 * (1 + erf(x / sqrt 2)): Mul(x, 0.5) first, as Hugging Face's gelu exports."""
    nodes = [node("Mul", ["x", "half"], ["hx"]), node("Div", ["x", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
             node("Add", ["e", "one"], ["a"]), node("Mul", ["hx", "a"], ["y"])]
    return graph(nodes, {"x": [3, 5]}, {"y": [3, 5]}, _C)


def _run(g, feeds):
    return rammer.compile(g, backend="reference")(feeds)


@pytest.mark.parametrize("form", ["div", "mul", "swapped", "hf"])
def test_each_export_form_becomes_one_gelu_with_the_same_values(form):
    before = _hf_form() if form == "hf" else _torch_form("Mul" if form == "mul" else "Div", swap=form == "swapped")
    after = run_pipeline(before, [FUSE_GELU], verify=True).graph  # the IR verifier runs after the pass
    ops = [n.op_type for n in after.nodes]
    assert ops.count("Gelu") == 1 and "Erf" not in ops and "Div" not in ops
    assert ops.count("Mul") == 0 and ops.count("Add") == 0
    assert set(after.initializers) <= {"w"}  # the formula's constants are gone with their nodes
    x = np.random.default_rng(1).standard_normal([3, 5] if form == "hf" else [2, 8]).astype(np.float32) * 3
    np.testing.assert_allclose(_run(after, {"x": x})["y"], _run(before, {"x": x})["y"], rtol=1e-6, atol=1e-6)


def test_a_chain_read_elsewhere_or_with_other_constants_is_left_alone():
    assert_left_alone(fuse_gelu, _torch_form(extra_reader=True))
    assert_left_alone(fuse_gelu, _torch_form(one=1.5))


def test_the_cpu_backend_runs_the_fused_gelu_in_the_gemm_store():
    g = _torch_form()
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    model = rammer.compile(g, backend="cpu", cache=False)
    assert model.executable.report["compiled_nodes"] == 1 + 1  # MatMul and Gelu, no Erf chain
    np.testing.assert_allclose(model({"x": x})["y"], _run(g, {"x": x})["y"], rtol=1e-5, atol=1e-6)


_T = {"beta": np.array(math.sqrt(2.0 / math.pi), np.float32), "kappa": np.array(0.044715, np.float32),
      "three": np.array(3.0, np.float32), "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}


def _tanh_form(form: str, kappa: float = 0.044715, extra_reader: bool = False):
    """The tanh approximation after a MatMul: "hf" as Hugging Face's gelu_new exports it (Pow, Mul(x, 0.5)
    first), "torch" as torch's gelu(approximate="tanh") does below opset 20 (Mul(x, Mul(x, x)), operands
    swapped, Mul(0.5, .) last)."""
    inits = {**_T, "w": np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32),
             "kappa": np.array(kappa, np.float32)}
    nodes = [node("MatMul", ["x", "w"], ["h"])]
    if form == "hf":
        nodes += [node("Mul", ["h", "half"], ["hx"]), node("Pow", ["h", "three"], ["c"]),
                  node("Mul", ["c", "kappa"], ["kc"]), node("Add", ["h", "kc"], ["i"]),
                  node("Mul", ["i", "beta"], ["s"]), node("Tanh", ["s"], ["t"]),
                  node("Add", ["t", "one"], ["a"]), node("Mul", ["hx", "a"], ["y"])]
    else:
        nodes += [node("Mul", ["h", "h"], ["sq"]), node("Mul", ["h", "sq"], ["c"]),
                  node("Mul", ["kappa", "c"], ["kc"]), node("Add", ["kc", "h"], ["i"]),
                  node("Mul", ["beta", "i"], ["s"]), node("Tanh", ["s"], ["t"]),
                  node("Add", ["one", "t"], ["a"]), node("Mul", ["h", "a"], ["m"]),
                  node("Mul", ["half", "m"], ["y"])]
    outputs = {"y": [2, 16]}
    if extra_reader:
        nodes.append(node("Relu", ["i"], ["z"]))
        outputs["z"] = [2, 16]
    return graph(nodes, {"x": [2, 8]}, outputs, inits)


@pytest.mark.parametrize("form", ["hf", "torch"])
def test_each_tanh_export_form_becomes_one_tanh_gelu_with_the_same_values(form):
    before = _tanh_form(form)
    after = run_pipeline(before, [FUSE_GELU], verify=True).graph
    ops = [n.op_type for n in after.nodes]
    assert ops == ["MatMul", "Gelu"], ops
    assert after.nodes[1].attrs["approximate"] == "tanh"
    assert set(after.initializers) <= {"w"}
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32) * 3
    np.testing.assert_allclose(_run(after, {"x": x})["y"], _run(before, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_a_tanh_chain_read_elsewhere_or_with_other_constants_is_left_alone():
    assert_left_alone(fuse_gelu, _tanh_form("hf", extra_reader=True))
    assert_left_alone(fuse_gelu, _tanh_form("torch", kappa=0.05))


def test_the_cpu_backend_runs_the_tanh_gelu_in_the_gemm_store():
    g = _tanh_form("hf")
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32) * 4
    model = rammer.compile(g, backend="cpu", cache=False)
    assert model.executable.report["compiled_nodes"] == 1 + 1  # MatMul and Gelu, no Pow/Tanh chain
    np.testing.assert_allclose(model({"x": x})["y"], _run(g, {"x": x})["y"], rtol=1e-5, atol=1e-6)
