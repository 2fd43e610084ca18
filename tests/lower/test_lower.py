"""The hardware-neutral lowering pieces (core/lower) used without any backend."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.ir import Graph
from rammer.lower.aliasing import alias_outputs, is_view, reshape_view
from rammer.lower.batching import find_chunks
from rammer.lower.ew_translate import ew_reason, ew_translate
from rammer.lower.ewops import ARITY, TABLE
from rammer.lower.ewprogram import EwProgram, epilogue_io
from rammer.lower.fusion import ancestors, build_groups
from rammer.lower.operator import LoweredOp, OpCycle, Rules, classify, grid_split, split_range, topological_order
from rammer.lower.views import Buffer, View, broadcast_view, dense_strides


def _load(nodes, inputs, outputs, inits=()) -> Graph:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return rammer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _chain() -> Graph:
    """x @ W -> Add b -> Relu -> Transpose -> Reshape -> Sigmoid."""
    w = numpy_helper.from_array(np.ones((4, 6), np.float32), "W")
    b = numpy_helper.from_array(np.ones((6,), np.float32), "b")
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Reshape", ["t", "shape"], ["s"], name="rs"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="sig")]
    return _load(nodes, [_vi("x", [2, 4])], [_vi("y", [3, 4])], [w, b, shape])


def test_views_are_dtype_neutral():
    assert Buffer(0, "float16", 10, "temp").nbytes == 20
    assert Buffer(0, "int8", 10, "temp", byte_offset=64).elem_offset == 64
    v = View(0, "float32", (2, 3), dense_strides((2, 3)))
    assert v.is_dense() and broadcast_view(View(0, "float32", (3,), (1,)), (2, 3)).strides == (0, 1)


def test_classify_fuse_and_order_with_backend_rules():
    g = _chain()
    rules = Rules(host_reason=lambda n: "", is_empty=lambda n: False, is_view=lambda n: is_view(g, 17, n),
                  ew_reason=lambda n: ew_reason(n, g), head_ops=frozenset({"MatMul"}), head_reason=lambda n: None,
                  op_types=frozenset(), op_reason=lambda n: "none")
    kinds, _ = classify(g, rules)
    assert kinds == ["head", "ew", "ew", "view", "view", "ew"]
    groups, group_of = build_groups(g, kinds, ancestors(g))
    # the MatMul takes Add and Relu as its epilogue; the Sigmoid has another shape
    assert group_of[0] == group_of[1] == group_of[2] != group_of[5]
    # a backend without heads: the MatMul is an op of its own, its readers a group
    kinds2, reasons = classify(g, Rules(host_reason=lambda n: "", is_empty=lambda n: False,
                                        is_view=lambda n: False, ew_reason=lambda n: ew_reason(n, g),
                                        head_ops=frozenset(), head_reason=lambda n: "no",
                                        op_types=frozenset({"MatMul"}), op_reason=lambda n: None))
    assert kinds2[0] == "op" and kinds2[3] == "host" and reasons[3] == "no rKernel for this op"


def test_aliasing_views_and_copies():
    g = _chain()
    src = View(7, "float32", (2, 6), (6, 1))
    t = alias_outputs(g, 17, g.nodes[3], src)["t"]
    assert t.shape == (6, 2) and t.strides == (1, 6)
    # a reshape of the transposed view cannot be strided: the caller copies
    r = View(7, "float32", (6, 2), (1, 6))
    assert reshape_view(r, (3, 4)) is None
    assert alias_outputs(g, 17, g.nodes[4], r) == {"s": None}
    assert reshape_view(src, (3, 4)).strides == (4, 1)


def test_ew_program_translates_and_allocates_registers():
    g = _chain()
    prog = EwProgram((2, 6))
    x = prog.load(View(0, "float32", (2, 6), (6, 1)))
    values = {"m": x}

    def operands(node):
        def operand(k: int) -> int:
            name = node.inputs[k]
            return values[name] if name in values else prog.load(View(1, "float32", (6,), (1,)))
        return operand

    for node in g.nodes[1:3]:
        values[node.outputs[0]] = ew_translate(node, g, prog, operands(node),
                                               lambda a: prog.load(View(2, "float32", (), ())))
    prog.store(values["r"], View(3, "float32", (2, 6), (6, 1)))
    assert [i.op for i in prog.instrs] == ["ADD", "RELU"]
    assert prog.n_registers() <= 3
    reads, writes, n = epilogue_io(prog)
    assert reads == {0, 1} and writes == {3} and n == 2
    with pytest.raises(ValueError):
        prog.op("ADD", x)
    assert len(ARITY) == len(TABLE)


def test_batching_takes_the_dtype_set():
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    nodes = [helper.make_node("MatMul", [f"x{i}", "W"], [f"y{i}"], name=f"mm{i}") for i in range(3)]
    g = _load(nodes, [_vi(f"x{i}", [1, 4]) for i in range(3)], [_vi(f"y{i}", [1, 4]) for i in range(3)], [w])
    assert find_chunks(g, ancestors(g), 8) == [[0, 1, 2]]
    assert find_chunks(g, ancestors(g), 8, dtypes=frozenset({"float16"})) == []


@dataclass
class _Op:
    index: int
    reads: tuple[int, ...]
    writes: tuple[int, ...]


def test_topological_order_and_cycles():
    ops = [_Op(0, (1,), (2,)), _Op(1, (0,), (1,))]
    assert [o.writes for o in topological_order(ops)] == [(1,), (2,)]
    with pytest.raises(OpCycle):
        topological_order([_Op(0, (1,), (2,)), _Op(1, (2,), (1,))])


def test_lowered_op_tilings_and_splits():
    op = LoweredOp("o", "ew", (), (0,), (1,), 1e6, 1e6, lambda n: [split_range(10, n, i) for i in range(n)], None)
    tilings = op.tilings(2)
    assert sorted(tilings) == [1, 2, 4, 8] and tilings[2] == [(0, 5), (5, 10)]
    assert LoweredOp("h", "host", (), (), (), 0, 0, None, None, host=True).tilings(4) == {1: [None]}
    assert grid_split(2, 64, 4, 16) == [(0, 1, 0, 32), (0, 1, 32, 64), (1, 2, 0, 32), (1, 2, 32, 64)]
