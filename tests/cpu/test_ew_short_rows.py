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


# -- operands that are views with short rows: whole-rows mode loads and stores them row piece by row
#    piece (``_row_pieces`` in kernels_ew), many rows to a register block


@pytest.mark.parametrize("batch,seq,heads,dim", [(1, 37, 3, 32), (2, 128, 4, 64), (1, 9, 5, 8)])
@pytest.mark.parametrize("veus", [1, None])
def test_rotary_embedding_over_transposed_heads(batch, seq, heads, dim, veus):
    # q (batch, seq, heads, dim) viewed as (batch, heads, seq, dim); rotate_half slices it in two
    x = rand(batch, seq, heads, dim)
    half = dim // 2
    consts = {"cos": rand(seq, dim, seed=1), "sin": rand(seq, dim, seed=2), "z": np.array([0], np.int64),
              "h": np.array([half], np.int64), "e": np.array([dim], np.int64), "ax": np.array([3], np.int64)}
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
             node("Slice", ["t", "z", "h", "ax"], ["x1"]), node("Slice", ["t", "h", "e", "ax"], ["x2"]),
             node("Neg", ["x2"], ["n2"]), node("Concat", ["n2", "x1"], ["rot"], axis=3),
             node("Mul", ["t", "cos"], ["a"]), node("Mul", ["rot", "sin"], ["c"]), node("Add", ["a", "c"], ["y"])]
    options = {} if veus is None else {"veus": veus}
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x}, **options)


@pytest.mark.parametrize("shape", [(2, 3, 50, 64), (1, 4, 33, 128), (3, 2, 7, 20)])
def test_unary_and_binary_of_half_row_slices(shape):
    x = rand(*shape)
    d = shape[-1]
    consts = {"h": np.array([d // 2], np.int64), "e": np.array([d], np.int64), "z": np.array([0], np.int64),
              "ax": np.array([3], np.int64)}
    nodes = [node("Slice", ["x", "h", "e", "ax"], ["x2"]), node("Slice", ["x", "z", "h", "ax"], ["x1"]),
             node("Neg", ["x2"], ["n"]), node("Mul", ["x1", "x2"], ["p"]), node("Sigmoid", ["p"], ["y"])]
    compare(model(nodes, {"x": x}, ["n", "y"], consts), {"x": x}, veus=1)


@pytest.mark.parametrize("veus", [1, 2])
def test_columns_read_across_rows(veus):
    # a transpose of the last two axes: each row of the group reads a column of x (column stride 40)
    x = rand(3, 40, 24)
    consts = {"b": rand(24, 1, seed=3)}
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), node("Add", ["t", "b"], ["s"]),
             node("Relu", ["s"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], consts), {"x": x}, veus=veus)


def test_int64_and_bool_views_with_short_rows():
    a = np.random.default_rng(1).integers(-1000, 1000, (2, 30, 3, 16)).astype(np.int64)
    consts = {"c": np.arange(16, dtype=np.int64) * (2**33)}
    nodes = [node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3]), node("Add", ["t", "c"], ["s"]),
             node("Greater", ["s", "t"], ["g"]), node("Not", ["g"], ["y"])]
    compare(model(nodes, {"a": a}, ["s", "y"], consts), {"a": a}, veus=1)


@pytest.mark.parametrize("shape", [(1, 128, 4096), (2, 40, 100), (1, 33, 1024), (3, 17, 9)])
@pytest.mark.parametrize("op", ["Relu", "Gelu"])
def test_elementwise_over_a_transposed_plane(shape, op):
    # [b, c, n] read as [b, n, c]: adjacent rows of the group are adjacent in memory (loaded column
    # by column, ``_transposed_rows``), with and without a power-of-two column stride
    x = rand(*shape)
    consts = {"b": rand(shape[1], seed=6)}
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), node(op, ["t"], ["g"]), node("Add", ["g", "b"], ["y"])]
    compare(model(nodes, {"x": x}, ["y"], consts, opset=20), {"x": x}, veus=1)
