"""Elementwise programs over [rows, few columns] with per-column constants (a scaler's offsets, a
classifier's class indices, an int64 table): the cpu backend runs whole rows per register block and
tiles the repeated row of columns (``_row_tile`` in kernels_ew), and must agree with the reference
for float, int64 and bool operands, rows that straddle blocks, and leading broadcast dimensions."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand


@pytest.mark.parametrize("rows,cols", [(1000, 20), (777, 3), (300, 7), (2, 5)])
def test_per_column_constants_over_short_rows(rows, cols):
    x = rand(rows, cols)
    consts = {"offset": rand(cols, seed=1), "scale": rand(1, cols, seed=2), "row": rand(rows, 1, seed=3)}
    nodes = [node("Sub", ["x", "offset"], ["s"]), node("Mul", ["s", "scale"], ["m"]), node("Add", ["m", "row"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x})


def test_argmax_pattern_with_per_column_positions():
    # the first index of a row's maximum, as the ML lowering writes it: Equal, Where with a row of
    # column positions, ReduceMin
    x = np.round(rand(513, 4) * 2).astype(np.float32)  # ties on purpose
    consts = {"pos": np.arange(4, dtype=np.float32).reshape(1, 4), "big": np.full((1, 4), 4.0, np.float32),
              "axes": np.array([1], np.int64)}
    nodes = [node("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1), node("Equal", ["x", "m"], ["hit"]),
             node("Where", ["hit", "pos", "big"], ["p"]), node("ReduceMin", ["p"], ["y"], axes=[1], keepdims=0)]
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x})


def test_int64_and_bool_per_column_operands():
    a = np.random.default_rng(0).integers(-50, 50, (400, 6)).astype(np.int64)
    consts = {"col": np.array([2**40 + 1, -3, 7, 0, 11, -(2**35)], np.int64),
              "mask": np.array([True, False, True, True, False, False])}
    nodes = [node("Add", ["a", "col"], ["s"]), node("Greater", ["s", "a"], ["g"]), node("And", ["g", "mask"], ["y"])]
    compare(model(nodes, {"a": a}, ["s", "y"], consts), {"a": a})


def test_leading_broadcast_dimensions():
    x = rand(3, 50, 5)
    consts = {"b": rand(5, seed=4), "c": rand(3, 1, 1, seed=5)}
    nodes = [node("Add", ["x", "b"], ["s"]), node("Mul", ["s", "c"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x})
