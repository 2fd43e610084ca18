"""Elementwise, activation and quantization ops: semantics ONNX pins down and
numpy gets differently (integer division, rounding, dtype preservation...).

Each op runs through its registered ``infer`` and ``compute``; the helper
checks that the two agree on every output's dtype and shape, as the reference
runtime does.  Tricky cases are also checked against onnxruntime.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from rammer.errors import ShapeError
from rammer.ir import Node, TensorInfo, dtype_name
from rammer.ops.registry import OpContext, lookup


def run_op(op_type: str, *inputs: np.ndarray | None, opset: int = 17, n_out: int = 1, **attrs: object) -> list:
    """Infer and compute one node; assert both agree; return the outputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = Node(op_type, names, [f"out{j}" for j in range(n_out)], name="n", attrs=attrs)
    infos = [TensorInfo(n, dtype_name(x.dtype), x.shape) if x is not None else None for n, x in zip(names, inputs)]
    ctx = OpContext(node, opset, infos, list(inputs))
    op = lookup(op_type)
    assert op is not None, op_type
    specs = op.infer(ctx)
    outs = op.compute(ctx, *inputs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for out, (dtype, shape) in zip(outs, specs):
        assert isinstance(out, np.ndarray)
        assert (dtype_name(out.dtype), out.shape) == (dtype, tuple(shape))
    return outs


def run_ort(op_type: str, *inputs: np.ndarray, opset: int = 17, n_out: int = 1, **attrs: object) -> list:
    ort = pytest.importorskip("onnxruntime")

    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{j}" for j in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_empty_tensor_value_info(o) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))


def same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


INTS = np.array([7, -7, 7, -7, 0, 5, -128 + 1], dtype=np.int8)
DIVISORS = np.array([2, 2, -2, -2, 3, 5, 3], dtype=np.int8)


def test_int_div_truncates_toward_zero_like_c() -> None:
    (got,) = run_op("Div", INTS, DIVISORS)
    same(got, np.array([3, -3, -3, 3, 0, 1, -42], np.int8))
    same(got, run_ort("Div", INTS, DIVISORS)[0])


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_sign_follows_divisor_or_dividend(fmod: int) -> None:
    (got,) = run_op("Mod", INTS, DIVISORS, fmod=fmod)
    expected = np.fmod(INTS, DIVISORS) if fmod else np.mod(INTS, DIVISORS)
    same(got, expected.astype(np.int8))
    assert got[1] == (-1 if fmod else 1)
    same(got, run_ort("Mod", INTS, DIVISORS, fmod=fmod)[0])


def test_round_is_half_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 2.5001], np.float32)
    (got,) = run_op("Round", x)
    same(got, np.array([0, 2, 2, -0.0, -2, 2, 3], np.float32))


def test_binary_ops_broadcast_and_keep_input_dtype() -> None:
    a = np.arange(6, dtype=np.float16).reshape(2, 3, 1)
    b = np.array([1, 2], dtype=np.float16)
    for op in ("Add", "Sub", "Mul", "Div"):
        (got,) = run_op(op, a, b)
        assert got.dtype == np.float16 and got.shape == (2, 3, 2)
    (u8,) = run_op("Add", np.array([250], np.uint8), np.array([10], np.uint8))
    same(u8, np.array([4], np.uint8))  # wraps, never promotes


def test_pow_output_has_base_dtype() -> None:
    (got,) = run_op("Pow", np.array([2, 3], np.int64), np.array([0.5, 2.0], np.float32))
    same(got, np.array([1, 9], np.int64))
    (got,) = run_op("Pow", np.array([2.0, 4.0], np.float32), np.array([3, -1], np.int64))
    same(got, np.array([8.0, 0.25], np.float32))


def test_bitshift_out_of_range_shifts() -> None:
    x = np.array([-8, 4, -1, 64], np.int8)
    y = np.array([8, -1, 127, 1], np.int8)
    (right,) = run_op("BitShift", x, y, direction="RIGHT")
    same(right, np.array([-1, 0, -1, 32], np.int8))
    (left,) = run_op("BitShift", x, y, direction="LEFT")
    same(left, np.array([0, 0, 0, -128], np.int8))


def test_comparisons_and_where() -> None:
    a = np.array([[1, 2, 3]], np.int32)
    b = np.array([[2], [1]], np.int32)
    (less,) = run_op("Less", a, b)
    same(less, np.array([[True, False, False], [False, False, False]]))
    (eq,) = run_op("Equal", np.array(["a", "b"], dtype=object), np.array(["a"], dtype=object))
    same(eq, np.array([True, False]))
    (w,) = run_op("Where", less, a, np.zeros((2, 1), np.int32))
    same(w, np.array([[1, 0, 0], [0, 0, 0]], np.int32))


def test_variadic_ops_broadcast_all_inputs() -> None:
    xs = [np.array([1.0, 5.0], np.float32), np.array([[3.0], [0.0]], np.float32), np.array(2.0, np.float32)]
    same(run_op("Max", *xs)[0], np.array([[3, 5], [2, 5]], np.float32))
    same(run_op("Min", *xs)[0], np.array([[1, 2], [0, 0]], np.float32))
    same(run_op("Sum", *xs)[0], np.array([[6, 10], [3, 7]], np.float32))
    same(run_op("Mean", *xs)[0], np.array([[2, 10 / 3], [1, 7 / 3]], np.float32))


def test_cast_truncates_floats_and_handles_strings() -> None:
    x = np.array([1.9, -1.9, 0.5], np.float32)
    (got,) = run_op("Cast", x, to=TensorProto.INT32)
    same(got, np.array([1, -1, 0], np.int32))
    (s,) = run_op("Cast", np.array([1.5, -2.0], np.float32), to=TensorProto.STRING)
    assert s.dtype == object and list(s) == ["1.5", "-2.0"]
    (back,) = run_op("Cast", np.array(["1.5", "NaN", "-INF"], dtype=object), to=TensorProto.FLOAT)
    assert back.dtype == np.float32 and back[0] == 1.5 and np.isnan(back[1]) and back[2] == -np.inf
    (big,) = run_op("Cast", np.array(["9007199254740993", "100.7"], dtype=object), to=TensorProto.INT64)
    same(big, np.array([9007199254740993, 100], np.int64))  # exact, not through float64
    (flags,) = run_op("Cast", np.array([True, False]), to=TensorProto.STRING)
    assert list(flags) == ["1", "0"]
    (like,) = run_op("CastLike", np.array([3.7], np.float64), np.zeros(0, np.uint8))
    same(like, np.array([3], np.uint8))
    with pytest.raises(ShapeError, match="BFLOAT16"):
        run_op("Cast", x, to=TensorProto.BFLOAT16)


def test_clip_attribute_form_and_omitted_bounds() -> None:
    x = np.array([-3.0, 0.5, 3.0], np.float32)
    same(run_op("Clip", x, opset=6, min=-1.0, max=1.0)[0], np.array([-1, 0.5, 1], np.float32))
    same(run_op("Clip", x, None, np.array(1.0, np.float32))[0], np.array([-3, 0.5, 1], np.float32))
    ints = np.array([-200, 5, 100], np.int32)
    same(run_op("Clip", ints, np.array(0, np.int32))[0], np.array([0, 5, 100], np.int32))
    # min > max: everything becomes max.
    same(run_op("Clip", x, np.array(2.0, np.float32), np.array(1.0, np.float32))[0], np.ones(3, np.float32))


def test_dropout_is_identity_at_inference() -> None:
    x = np.arange(4, dtype=np.float32)
    out, mask = run_op("Dropout", x, np.array(0.7, np.float32), n_out=2)
    same(out, x)
    same(mask, np.ones(4, bool))
    out, mask = run_op("Dropout", x, np.array(0.0, np.float32), np.array(True), n_out=2)
    same(out, x)


def test_isinf_detection_flags_and_isnan() -> None:
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    same(run_op("IsInf", x, detect_negative=0)[0], np.array([True, False, False, False]))
    same(run_op("IsNaN", x)[0], np.array([False, False, True, False]))


def test_erf_and_gelu_are_exact() -> None:
    x = np.linspace(-4, 4, 33).astype(np.float64)
    (got,) = run_op("Erf", x)
    np.testing.assert_allclose(got, [math.erf(v) for v in x], rtol=0, atol=1e-15)
    (gelu,) = run_op("Gelu", x.astype(np.float32), opset=20)
    expected = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    np.testing.assert_allclose(gelu, expected, rtol=1e-6, atol=1e-6)


def test_activations_keep_float16_and_are_stable() -> None:
    x = np.array([-1000.0, -1.0, 0.0, 1.0, 1000.0], np.float32)
    (sig,) = run_op("Sigmoid", x)
    assert np.all(np.isfinite(sig)) and sig[0] == 0 and sig[-1] == 1
    (softplus,) = run_op("Softplus", x)
    assert softplus[-1] == 1000.0 and np.isfinite(softplus).all()
    (h,) = run_op("HardSwish", x.astype(np.float16))
    assert h.dtype == np.float16
    # The slope broadcasts along the last axis.
    (prelu,) = run_op("PRelu", np.array([[-2.0, -2.0], [-1.0, 1.0]], np.float32), np.array([0.5, 3.0], np.float32))
    same(prelu, np.array([[-1, -6], [-0.5, 1]], np.float32))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_axis_semantics_match_onnxruntime(op: str, opset: int) -> None:
    # Before opset 13 axis=1 flattens [2,3,4] to [2,12]; from 13 it is one axis.
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x[0, 0, :2] = 5.0  # a tie for Hardmax: the first one wins
    (got,) = run_op(op, x, opset=opset, axis=1)
    np.testing.assert_allclose(got, run_ort(op, x, opset=opset, axis=1)[0], rtol=1e-5, atol=1e-6)


def test_quantize_dequantize_per_axis_and_saturation() -> None:
    x = np.array([[-300.0, 0.5, 1.5], [2.5, 3.0, 1000.0]], np.float32)
    scale = np.array([1.0, 2.0], np.float32)
    zp = np.array([0, 10], np.int8)
    (q,) = run_op("QuantizeLinear", x, scale, zp, axis=0)
    same(q, np.array([[-128, 0, 2], [11, 12, 127]], np.int8))  # rint halves to even
    (dq,) = run_op("DequantizeLinear", q, scale, zp, axis=0)
    same(dq, np.array([[-128, 0, 2], [2, 4, 234]], np.float32))
    y, s, z = run_op("DynamicQuantizeLinear", np.array([-1.0, 0.0, 2.0], np.float32), n_out=3)
    assert y.dtype == np.uint8 and s.shape == () and z.dtype == np.uint8
    np.testing.assert_allclose((y.astype(np.float32) - z) * s, [-1, 0, 2], atol=float(s))
