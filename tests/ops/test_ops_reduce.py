"""Reductions, arg-reductions, scans and TopK: axes forms across opsets,
keepdims, empty axes, empty tensors, and tie-breaking."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.errors import ShapeError
from rammer.ir import Node, TensorInfo, dtype_name
from rammer.ops.registry import OpContext, lookup


def run_op(op_type: str, *inputs: np.ndarray | None, opset: int = 18, n_out: int = 1,
           constant: bool = True, **attrs: object) -> list:
    """Infer (inputs known as constants unless ``constant=False``) and compute."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = Node(op_type, names, [f"out{j}" for j in range(n_out)], name="n", attrs=attrs)
    infos = [TensorInfo(n, dtype_name(x.dtype), x.shape) if x is not None else None for n, x in zip(names, inputs)]
    values = list(inputs) if constant else [None] * len(inputs)
    op = lookup(op_type)
    assert op is not None, op_type
    specs = op.infer(OpContext(node, opset, infos, values))
    outs = op.compute(OpContext(node, opset, infos, list(inputs)), *inputs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for out, (dtype, shape) in zip(outs, specs):
        assert isinstance(out, np.ndarray)
        assert (dtype_name(out.dtype), out.shape) == (dtype, tuple(shape))
    return outs


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10


def axes(*a: int) -> np.ndarray:
    return np.array(a, dtype=np.int64)


def test_axes_attribute_before_opset_18_and_input_after() -> None:
    (old,) = run_op("ReduceMean", X, opset=13, axes=[1], keepdims=0)
    (new,) = run_op("ReduceMean", X, axes(1), opset=18, keepdims=0)
    np.testing.assert_allclose(old, X.mean(axis=1))
    np.testing.assert_allclose(new, X.mean(axis=1))
    # ReduceSum switched to the input form already in opset 13.
    (s,) = run_op("ReduceSum", X, axes(-1, 0), opset=13)
    assert s.shape == (1, 3, 1)
    np.testing.assert_allclose(s, X.sum(axis=(0, 2), keepdims=True))


def test_empty_axes_reduce_all_or_noop() -> None:
    (everything,) = run_op("ReduceSum", X, axes())
    assert everything.shape == (1, 1, 1) and everything.item() == X.sum()
    (unchanged,) = run_op("ReduceMax", X, axes(), noop_with_empty_axes=1)
    np.testing.assert_array_equal(unchanged, X)
    # "No reduction" still applies the elementwise part of the op.
    (squared,) = run_op("ReduceSumSquare", X, noop_with_empty_axes=1)
    np.testing.assert_array_equal(squared, X * X)
    (absolute,) = run_op("ReduceL1", X, axes(), noop_with_empty_axes=1, keepdims=0)
    np.testing.assert_array_equal(absolute, np.abs(X))
    (no_input,) = run_op("ReduceProd", np.array([[2, 3], [4, 5]], np.int32), keepdims=0)
    assert no_input.dtype == np.int32 and no_input.shape == () and no_input == 120


def test_reductions_over_empty_sets_give_identities() -> None:
    empty = np.zeros((2, 0, 3), np.float32)
    expected = {
        "ReduceSum": 0.0,
        "ReduceProd": 1.0,
        "ReduceMax": -np.inf,
        "ReduceMin": np.inf,
        "ReduceL1": 0.0,
        "ReduceL2": 0.0,
        "ReduceSumSquare": 0.0,
        "ReduceLogSum": -np.inf,
        "ReduceLogSumExp": -np.inf,
    }
    for op, value in expected.items():
        (got,) = run_op(op, empty, axes(1), keepdims=1)
        assert got.shape == (2, 1, 3) and got.dtype == np.float32, op
        np.testing.assert_array_equal(got, np.full((2, 1, 3), value, np.float32), err_msg=op)
    (mx,) = run_op("ReduceMax", np.zeros((0,), np.int32), axes(0), keepdims=0)
    assert mx.dtype == np.int32 and mx == np.iinfo(np.int32).min


def test_reductions_keep_dtype_and_are_stable() -> None:
    ints = np.array([[1, -2], [3, -4]], np.int32)
    (l2,) = run_op("ReduceL2", ints, axes(1), keepdims=0)
    assert l2.dtype == np.int32
    np.testing.assert_array_equal(l2, [2, 5])  # sqrt(5)=2.23 -> 2, sqrt(25)=5
    big = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    (lse,) = run_op("ReduceLogSumExp", big, axes(1), keepdims=0)
    np.testing.assert_allclose(lse, [1000 + np.log(2), -np.inf], rtol=1e-6)


def test_non_constant_axes_input_is_a_clear_error() -> None:
    with pytest.raises(ShapeError, match="axes"):
        run_op("ReduceSum", X, axes(1), constant=False)


def test_argmax_argmin_keepdims_and_last_index() -> None:
    x = np.array([[1, 5, 5, 0], [2, 2, 0, 0]], np.int32)
    (first,) = run_op("ArgMax", x, axis=1)
    np.testing.assert_array_equal(first, [[1], [0]])
    (last,) = run_op("ArgMax", x, axis=1, select_last_index=1, keepdims=0)
    assert last.dtype == np.int64
    np.testing.assert_array_equal(last, [2, 1])
    (last_min,) = run_op("ArgMin", x, axis=-1, select_last_index=1, keepdims=0)
    np.testing.assert_array_equal(last_min, [3, 3])


@pytest.mark.parametrize(
    ("exclusive", "reverse", "expected"),
    [(0, 0, [1, 3, 6, 10]), (1, 0, [0, 1, 3, 6]), (0, 1, [10, 9, 7, 4]), (1, 1, [9, 7, 4, 0])],
)
def test_cumsum_exclusive_and_reverse(exclusive: int, reverse: int, expected: list[int]) -> None:
    x = np.array([1, 2, 3, 4], np.int32)
    (got,) = run_op("CumSum", x, np.array(0, np.int32), exclusive=exclusive, reverse=reverse)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_cumprod_exclusive_starts_at_one() -> None:
    x = np.array([[2.0, 3.0, 4.0]], np.float32)
    (got,) = run_op("CumProd", x, np.array([1], np.int64), exclusive=1)
    np.testing.assert_array_equal(got, [[1, 2, 6]])


def test_topk_ties_prefer_lower_index() -> None:
    x = np.array([[3, 1, 3, 2, 1, 3]], np.int64)
    values, indices = run_op("TopK", x, np.array([4], np.int64), n_out=2)
    np.testing.assert_array_equal(values, [[3, 3, 3, 2]])
    np.testing.assert_array_equal(indices, [[0, 2, 5, 3]])
    values, indices = run_op("TopK", x, np.array([3], np.int64), n_out=2, largest=0)
    np.testing.assert_array_equal(values, [[1, 1, 2]])
    np.testing.assert_array_equal(indices, [[1, 4, 3]])


def test_topk_attribute_form_axis_and_unsigned() -> None:
    x = np.array([[0, 255], [7, 3], [9, 1]], np.uint8)
    values, indices = run_op("TopK", x, opset=9, n_out=2, k=2, axis=0)
    assert values.dtype == np.uint8 and indices.dtype == np.int64
    np.testing.assert_array_equal(values, [[9, 255], [7, 3]])
    np.testing.assert_array_equal(indices, [[2, 0], [1, 1]])
    with pytest.raises(ShapeError, match="k=5"):
        run_op("TopK", x, np.array([5], np.int64), n_out=2, axis=0)
