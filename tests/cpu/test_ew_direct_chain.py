"""One float binary op over long rows with a per-row constant (a squeeze-excitation gate, a
per-channel scale or shift) runs straight from its operands to its output (``_direct_binary`` in
kernels_ew), not through the interpreter's registers.  It must agree with the reference for every
op, either operand order, two tensors, batches of several rows' dimensions, a strided (sliced)
operand that keeps the register path, and a gate computed in the same program's segment."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("gate_first", [False, True])
@pytest.mark.parametrize("shape", [(1, 24, 17, 19), (2, 5, 64, 3), (3, 7, 100)])
def test_binary_with_a_per_row_constant(op, gate_first, shape):
    x = rand(*shape)
    gate_shape = tuple(shape[:2]) + (1,) * (len(shape) - 2)
    gate = rand(*gate_shape, seed=3) + (3.0 if op == "Div" else 0.0)  # (no division near zero)
    ins = ["g", "x"] if gate_first else ["x", "g"]
    compare(model([node(op, ins, ["y"])], {"x": x}, ["y"], {"g": gate}), {"x": x})


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_binary_of_two_tensors_and_a_computed_gate(op):
    # a squeeze-excitation block's shape: the gate is Sigmoid(mean over the plane) of x itself
    x = rand(1, 16, 12, 12)
    nodes = [node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1), node("Sigmoid", ["m"], ["g"]),
             node("Mul", ["x", "g"], ["s"]), node(op, ["s", "x"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"]), {"x": x})


def test_a_sliced_operand_keeps_the_register_path():
    x = rand(1, 8, 10, 20)
    consts = {"starts": np.array([1], np.int64), "ends": np.array([19], np.int64), "axes": np.array([3], np.int64),
              "steps": np.array([2], np.int64), "g": rand(1, 8, 1, 1, seed=5)}
    nodes = [node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]), node("Mul", ["s", "g"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x})
