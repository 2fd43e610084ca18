"""Fused elementwise chains over long rows (backends/cpu/kernels_ew_direct.py) run straight from their
operands to their output, not through the interpreter's registers: one binary op with a per-row
constant (a squeeze-excitation gate, a per-channel scale or shift), and chains of them with unaries
(a GroupNorm's affine ``Mul + Add`` and its activation).  They must agree with the reference for every
op, either operand order, two tensors, batches of several rows' dimensions, rows longer than a piece,
NaN and infinities, a strided (sliced) operand that keeps the register path, programs that are not
chains (a value used twice), and a gate computed in the same program's segment."""

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


_UNARIES = {"Relu": {}, "Sigmoid": {}, "Tanh": {}, "Exp": {}, "Erf": {}, "HardSwish": {},
            "Gelu": {"approximate": "none"}, "GeluTanh": {"approximate": "tanh"}}


def _chain(x_shape, steps, seed=0):
    """x -> step -> step ...: ("Mul"|"Add"|"Sub"|"Div", "row" | "full", x_first) or (unary,)."""
    x = rand(*x_shape, seed=seed)
    x.flat[::97] = np.nan
    x.flat[5::211] = np.inf
    x.flat[7::223] = -np.inf
    consts, nodes, cur = {}, [], "x"
    row_shape = tuple(x_shape[:-1]) + (1,)
    for k, step in enumerate(steps):
        out = "y" if k == len(steps) - 1 else f"t{k}"
        if len(step) == 1:
            op = step[0]
            if op == "Clip":
                consts.update(lo=np.array(-0.5, np.float32), hi=np.array(0.75, np.float32))
                nodes.append(node("Clip", [cur, "lo", "hi"], [out]))
            else:
                kind = "Gelu" if op == "GeluTanh" else op
                nodes.append(node(kind, [cur], [out], **_UNARIES[op]))
        else:
            op, kind, run_first = step
            c = rand(*(row_shape if kind == "row" else x_shape), seed=seed + k + 1) + (3.0 if op == "Div" else 0.0)
            consts[f"c{k}"] = c
            nodes.append(node(op, [cur, f"c{k}"] if run_first else [f"c{k}", cur], [out]))
        cur = out
    return model(nodes, {"x": x}, ["y"], consts, opset=20), {"x": x}


@pytest.mark.parametrize("steps", [
    [("Mul", "row", True), ("Add", "row", True)],                                # an affine per channel
    [("Sub", "row", True), ("Div", "row", True), ("Mul", "row", False), ("Add", "row", False)],
    [("Mul", "row", True), ("Add", "row", True), ("Gelu",)],                      # wav2vec2's GroupNorm
    [("Mul", "row", True), ("Add", "row", True), ("Relu",)],
    [("Mul", "row", True), ("Add", "full", True), ("Clip",)],                     # + a residual
    [("Relu",), ("Mul", "row", False), ("Sub", "row", False)],                    # a unary first
    [("Add", "full", False), ("Div", "row", False), ("HardSwish",), ("Sigmoid",)],
    [("Mul", "row", True), ("Tanh",), ("Exp",), ("Erf",), ("GeluTanh",)],
])
@pytest.mark.parametrize("shape", [(1, 24, 3199), (2, 3, 9000), (2, 4, 6, 70)])
def test_chains_match_the_reference(steps, shape):
    m, feeds = _chain(shape, steps)
    report = compare(m, feeds, veus=1)
    assert report["ops_by_family"] == {"ew": 1}, report["ops_by_family"]


def test_a_value_used_twice_is_not_a_chain_and_still_right():
    x = rand(2, 8, 300)
    g = rand(2, 8, 1, seed=1)
    nodes = [node("Mul", ["x", "g"], ["a"]), node("Add", ["a", "g"], ["b"]), node("Mul", ["b", "b"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], {"g": g}), {"x": x}, veus=2)
