"""Integer elementwise ops compile on the cpu backend, exactly (no float round trip), and an If
whose branches run compiled is control flow, not a fallback (silero VAD: Equal on the int64
sample rate feeding an If; its opset-15 export multiplies the sample rate as int64)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.errors import CompileError
from rammer.lower.ewprogram import EwProgram
from rammer.lower.views import View

I64_MIN = np.iinfo(np.int64).min
I32_MIN = np.iinfo(np.int32).min

#: int64 values past float64's exact integers (2**53) and float32's (2**24), with their neighbours.
BIG = np.array([[2**53 + 1, -(2**60) - 3, 2**62 + 12345, -5, 2**24 + 1, 0],
                [7, 2**31 + 5, I64_MIN, 3, -(2**53) - 1, 2**63 - 1]], np.int64)
OTHER = np.array([3, -(2**10) - 1, 2**40 + 7, -1, 2**24, 2**53 + 2], np.int64)


def _cpu_vs_reference(nodes, feeds, outputs, consts=None) -> dict:
    """Compiled on cpu with no fallback and exactly equal, dtype for dtype, to the reference."""
    return compare(model(nodes, feeds, outputs, consts), feeds, rtol=0, atol=0, expect_fallback=False)


@pytest.mark.parametrize("op,fn", [("Mul", np.multiply), ("Add", np.add), ("Sub", np.subtract)])
def test_int64_arithmetic_above_2_53_is_exact(op, fn):
    feeds = {"a": BIG, "b": OTHER}
    report = _cpu_vs_reference([node(op, ["a", "b"], ["y"])], feeds, ["y"])
    assert report["ops_by_family"] == {"ew": 1}
    cpu = rammer.compile(model([node(op, ["a", "b"], ["y"])], feeds, ["y"]), backend="cpu", cache=False)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(cpu(feeds)["y"], fn(BIG, OTHER))  # wraps on overflow, as numpy


def test_int64_comparisons_output_bool_and_tell_neighbours_apart():
    # 2**53 + 1 and 2**53 + 2 are one float64; 2**24 and 2**24 + 1 one float32
    a = np.array([2**53 + 1, 2**53 + 2, 2**24 + 1, -(2**62), 5, I64_MIN], np.int64)
    b = np.array([2**53 + 2, 2**53 + 2, 2**24, -(2**62) + 1, 5, I64_MIN], np.int64)
    feeds = {"a": a, "b": b}
    ops = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]
    nodes = [node(op, ["a", "b"], [op.lower()]) for op in ops]
    cpu = rammer.compile(model(nodes, feeds, [op.lower() for op in ops]), backend="cpu", cache=False)
    assert cpu.executable.report["fallbacks"] == []
    got = cpu(feeds)
    for op, fn in zip(ops, (np.equal, np.less, np.less_equal, np.greater, np.greater_equal)):
        assert got[op.lower()].dtype == np.bool_
        np.testing.assert_array_equal(got[op.lower()], fn(a, b), err_msg=op)


def test_int32_wraps_like_numpy():
    big = np.array([2**31 - 1, I32_MIN, 123456789, -7, 46341, I32_MIN], np.int32)
    small = np.array([1, -1, 1000, 2, 46341, -1], np.int32)
    feeds = {"a": big, "b": small}
    nodes = [node("Add", ["a", "b"], ["add"]), node("Sub", ["a", "b"], ["sub"]), node("Mul", ["a", "b"], ["mul"]),
             node("Neg", ["a"], ["neg"]), node("Abs", ["a"], ["abs"]), node("Div", ["a", "b"], ["div"]),
             node("Equal", ["a", "b"], ["eq"]), node("Cast", ["mul"], ["wide"], to=TensorProto.INT64)]
    _cpu_vs_reference(nodes, feeds, ["add", "sub", "mul", "neg", "abs", "div", "eq", "wide"])


def test_division_and_remainders_truncate_and_survive_zero_and_minus_one():
    a = np.array([7, -7, 7, -7, 5, I64_MIN, 2**62 + 3, -9], np.int64)
    b = np.array([2, 2, -2, -2, 0, -1, 2**31, 3], np.int64)
    feeds = {"a": a, "b": b}
    nodes = [node("Div", ["a", "b"], ["div"]), node("Mod", ["a", "b"], ["mod"]),
             node("Mod", ["a", "b"], ["fmod"], fmod=1)]
    with np.errstate(divide="ignore", over="ignore"):
        _cpu_vs_reference(nodes, feeds, ["div", "mod", "fmod"])


@pytest.mark.parametrize("a_shape,b_shape", [((3, 1, 4), (1, 5, 4)), ((2, 3), ()), ((), (4, 1)),
                                             ((300, 1), (300, 3)), ((7, 700), (700,))])
def test_broadcasting(a_shape, b_shape):
    rng = np.random.default_rng(3)
    a = rng.integers(-(2**62), 2**62, a_shape, dtype=np.int64)
    b = rng.integers(-(2**62), 2**62, b_shape, dtype=np.int64)
    feeds = {"a": a, "b": b}
    nodes = [node("Mul", ["a", "b"], ["m"]), node("Add", ["m", "a"], ["s"]), node("Greater", ["s", "b"], ["g"]),
             node("Where", ["g", "s", "b"], ["w"]), node("Max", ["w", "a"], ["y"])]
    with np.errstate(over="ignore"):
        _cpu_vs_reference(nodes, feeds, ["y", "g", "m"])


def test_long_strided_operands_run_many_blocks():
    # a transposed int64 operand (strided loads) over more elements than one integer register block
    a = np.random.default_rng(4).integers(-(2**40), 2**40, (1500, 3), dtype=np.int64)
    b = np.random.default_rng(5).integers(-(2**40), 2**40, (3, 1500), dtype=np.int64)
    feeds = {"a": a, "b": b}
    nodes = [node("Transpose", ["a"], ["t"], perm=[1, 0]), node("Sub", ["t", "b"], ["d"]),
             node("Abs", ["d"], ["y"])]
    _cpu_vs_reference(nodes, feeds, ["y"])


def test_casts_between_floats_bools_and_integers():
    f = np.array([1.9, -1.9, 16777217.0, -0.5, 3e9, 0.0], np.float32)
    i = np.array([2**53 + 1, -(2**40) - 1, 16777217, 0, 2**32 + 5, -1], np.int64)
    feeds = {"f": f, "i": i}
    nodes = [node("Cast", ["f"], ["f2i"], to=TensorProto.INT64), node("Cast", ["i"], ["i2f"], to=TensorProto.FLOAT),
             node("Cast", ["i"], ["i2i32"], to=TensorProto.INT32), node("Cast", ["i"], ["i2b"], to=TensorProto.BOOL),
             node("Cast", ["i2b"], ["b2i"], to=TensorProto.INT64), node("Neg", ["f2i"], ["negf2i"])]
    _cpu_vs_reference(nodes, feeds, ["f2i", "i2f", "i2i32", "i2b", "b2i", "negf2i"])


def test_unary_variadic_and_clip_on_integers():
    a = np.array([-(2**60), -3, 0, 5, 2**61, I64_MIN + 1], np.int64)
    b = np.array([4, -(2**61), 1, 5, 2**60, 0], np.int64)
    lo, hi = np.array(-4, np.int64), np.array(2**55, np.int64)
    feeds = {"a": a, "b": b}
    nodes = [node("Relu", ["a"], ["relu"]), node("Clip", ["a", "lo", "hi"], ["clip"]),
             node("Max", ["a", "b", "relu"], ["max"]), node("Min", ["a", "b"], ["min"])]
    _cpu_vs_reference(nodes, feeds, ["relu", "clip", "max", "min"], {"lo": lo, "hi": hi})


def test_int_and_float_values_share_one_program():
    # the sample-rate pattern of silero's opset-15 export: an int64 product cast to float, then float math
    sr = np.array(16000, np.int64)
    x = rand(1, 8)
    feeds = {"sr": sr, "x": x}
    nodes = [node("Mul", ["sr", "k"], ["m"]), node("Cast", ["m"], ["f"], to=TensorProto.FLOAT),
             node("Mul", ["x", "f"], ["y"])]
    report = _cpu_vs_reference(nodes, feeds, ["y", "m"], {"k": np.array(3, np.int64)})
    assert report["fallbacks"] == []


def test_integer_values_in_a_gemm_epilogue():
    # MatMul -> Cast int64 -> Mul int64 -> Cast float: the integer members run in the GEMM's epilogue
    rng = np.random.default_rng(6)  # small integers: the GEMM is exact, so the casts are too
    x = rng.integers(-4, 5, (5, 7)).astype(np.float32)
    w = rng.integers(-4, 5, (7, 6)).astype(np.float32)
    feeds = {"x": x}
    nodes = [node("MatMul", ["x", "w"], ["m"]), node("Cast", ["m"], ["i"], to=TensorProto.INT64),
             node("Mul", ["i", "k"], ["p"]), node("Cast", ["p"], ["y"], to=TensorProto.FLOAT)]
    report = _cpu_vs_reference(nodes, feeds, ["y", "p"], {"w": w, "k": np.array(2**33 + 1, np.int64)})
    assert report["ops_by_family"] == {"gemm": 1}


def test_programs_check_register_types():
    prog = EwProgram((4,))
    i = prog.load(View(0, "int64", (4,), (1,)))
    f = prog.load(View(1, "float32", (4,), (1,)))
    with pytest.raises(ValueError, match="reads 'ff' registers"):
        prog.op("ADD", i, f)
    with pytest.raises(ValueError, match="int64 output cannot be stored"):
        prog.store(prog.op("I2F", i), View(2, "int64", (4,), (1,)))
    prog.store(prog.op("IMUL", i, i), View(2, "int64", (4,), (1,)))
    assert prog.uses_ints()


# -- If on an int64 sample rate: control flow, not a fallback ---------------------------------------

def _vad_like(tiny_else: bool = False) -> bytes:
    """y = If(sr == 16000, then: Sigmoid(Relu(x @ w) * 2 + 2), else: Tanh(Relu(x @ w) - 2)); a
    ``tiny_else`` is x @ w alone (one node: interpreted, not compiled)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4])  # noqa: E731
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t1"]), helper.make_node("Relu", ["t1"], ["t2"]),
                              helper.make_node("Mul", ["t2", "two"], ["t3"]),
                              helper.make_node("Add", ["t3", "two"], ["t4"]),
                              helper.make_node("Sigmoid", ["t4"], ["then_y"])], "then", [], [out("then_y")])
    other_nodes = [helper.make_node("MatMul", ["x", "w"], ["e1"]), helper.make_node("Relu", ["e1"], ["e2"]),
                   helper.make_node("Sub", ["e2", "two"], ["e3"]), helper.make_node("Tanh", ["e3"], ["else_y"])]
    if tiny_else:
        other_nodes = [helper.make_node("MatMul", ["x", "w"], ["else_y"])]
    other = helper.make_graph(other_nodes, "else", [], [out("else_y")])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "k16"], ["is16k"], name="Equal_0"),
         helper.make_node("If", ["is16k"], ["y"], name="If_0", then_branch=then, else_branch=other)], "vad_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [w, two, numpy_helper.from_array(np.array(16000, np.int64), "k16")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_vad_pattern_compiles_with_no_fallback(caplog):
    with caplog.at_level(logging.WARNING, logger="rammer"):
        cpu = rammer.compile(_vad_like(), backend="cpu", cache=False, strict=True)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    report = cpu.executable.report
    assert report["fallbacks"] == []
    assert [(c["node"], c["op"]) for c in report["control_flow"]] == [("If_0", "If")]
    assert "control flow, not a fallback" in report["control_flow"][0]["reason"]
    ref = rammer.compile(_vad_like(), backend="reference")
    x = rand(3, 6)
    for sr in (16000, 8000, 16001):
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        np.testing.assert_allclose(cpu(feeds)["y"], ref(feeds)["y"], rtol=1e-5, atol=1e-6)


def test_an_if_with_a_branch_run_op_by_op_stays_a_fallback():
    cpu = rammer.compile(_vad_like(tiny_else=True), backend="cpu", cache=False)
    report = cpu.executable.report
    assert report["control_flow"] == []
    (fallback,) = report["fallbacks"]
    assert fallback["op"] == "If" and "else_branch (1 node(s)" in fallback["reason"]
    with pytest.raises(CompileError, match="strict mode forbids fallbacks"):
        rammer.compile(_vad_like(tiny_else=True), backend="cpu", cache=False, strict=True)


def test_a_branch_invalid_at_the_compiled_shapes_is_no_fallback():
    # silero's 8 kHz branch cannot run at the 16 kHz input shape: the frontend makes it Unreachable
    shape = numpy_helper.from_array(np.array([7, -1], np.int64), "bad_shape")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t1"]), helper.make_node("Relu", ["t1"], ["t2"]),
                              helper.make_node("Sigmoid", ["t2"], ["t3"]), helper.make_node("Neg", ["t3"], ["t4"])],
                             "then", [], [out("t4")])
    other = helper.make_graph([helper.make_node("Reshape", ["x", "bad_shape"], ["e0"])], "else", [], [out("e0")],
                              [shape])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["sr", "k16"], ["c"]),
         helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w, numpy_helper.from_array(np.array(16000, np.int64), "k16")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cpu = rammer.compile(m, backend="cpu", cache=False, strict=True)
    assert cpu.executable.report["fallbacks"] == []
    assert "taking it is an error" in cpu.executable.report["control_flow"][0]["reason"]
    x = rand(2, 4)
    want = -1 / (1 + np.exp(-np.maximum(x @ np.ones((4, 4), np.float32), 0)))
    np.testing.assert_allclose(cpu({"x": x, "sr": np.array(16000)})["y"], want, rtol=1e-5, atol=1e-6)
