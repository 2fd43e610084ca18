"""Softmax over short contiguous rows (``kernels_nn._softmax_short_rows``, rows of at most
``SOFTMAX_SHORT_ROW`` floats): bit for bit the row kernel's values, NaN and infinities included, for
task rows that start inside the tensor and for outputs written over their input; a whole model on
either side of the threshold matches the reference."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from onnx import TensorProto, helper

import rammer
from rammer.backends.cpu import kernels_nn as kn


@njit(nogil=True)
def _row_kernel(F, x, out, rows, n):
    for e in range(rows):
        kn.ukernel_softmax_row(n, F, x + e * n, F, out + e * n)


def _rows(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    a = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    specials = [np.nan, np.inf, -np.inf, 80.0, -80.0, 1e-40]
    for r in range(0, rows, 5):
        a[r, rng.integers(n)] = specials[(r // 5) % len(specials)]
    if rows > 3:
        a[3, :] = -np.inf  # every value -inf: NaN, as the reference's x - max
        a[2, :] = 7.0      # all equal
    return a


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9, 10, 16, 31, 32])
def test_short_rows_give_the_row_kernels_values(n):
    rng = np.random.default_rng(n)
    rows = 37
    a = _rows(rng, rows, n)
    F = np.concatenate([a.ravel(), np.zeros(rows * n, np.float32)])
    G = F.copy()
    _row_kernel(F, 0, rows * n, rows, n)
    kn._softmax_short_rows(G, 0, rows * n, rows, n)
    want, got = F[rows * n:], G[rows * n:]
    assert np.array_equal(np.isnan(want), np.isnan(got))
    assert np.array_equal(want[~np.isnan(want)], got[~np.isnan(got)])
    assert np.isnan(got.reshape(rows, n)[3]).all()


@pytest.mark.parametrize("in_place", [False, True])
def test_k_softmax_rows_from_the_middle_of_the_tensor(in_place):
    rng = np.random.default_rng(5)
    rows, n = 50, 6
    a = _rows(rng, rows, n)
    F = np.concatenate([a.ravel(), np.full(rows * n, -1.0, np.float32)])
    out = 0 if in_place else rows * n
    X = np.array([0, rows, n, 1, out, 0], np.int64)
    kn.k_softmax(F, np.zeros(1, np.uint8), np.zeros(1, np.int64), np.zeros(1, np.int32), X, np.zeros(1),
                 np.array([0, 11, 29], np.int64), 0)
    got = F[out:out + rows * n].reshape(rows, n)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(a[11:29].astype(np.float64) - a[11:29].max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got[11:29], want, rtol=2e-6, atol=1e-30)
    untouched = a if in_place else np.full((rows, n), -1.0, np.float32)
    assert np.array_equal(got[:11], untouched[:11], equal_nan=True)
    assert np.array_equal(got[29:], untouched[29:], equal_nan=True)


@pytest.mark.parametrize("n", [4, kn.SOFTMAX_SHORT_ROW, kn.SOFTMAX_SHORT_ROW + 1])
def test_model_softmax_matches_the_reference(n):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40, n])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": (np.random.default_rng(n).standard_normal((3, 40, n)) * 5).astype(np.float32)}
    got = rammer.compile(model, backend="cpu", veus=1, cache=False).run(feeds)["y"]
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_log_softmax_keeps_log_sum_beside_a_huge_maximum():
    """(x - max) - log(sum), as the reference: x - (max + log(sum)) loses log(sum) when the maximum is
    1e37 (the fuzzer's mutants:61507313, off by log 7)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7])
    graph = helper.make_graph([helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.array([[1e37] * 7, [1e37, 1e37, 0, 0, 0, 0, 0]], np.float32)}
    got = rammer.compile(model, backend="cpu", veus=1, cache=False).run(feeds)["y"]
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(got[0], np.full(7, -np.log(7.0), np.float32), rtol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@njit(nogil=True)
def _exp_row(F, n, inv):
    kn.ukernel_exp_row(n, F, 0, np.float32(0.0), inv, 0)


def test_exp_row_over_the_whole_nonpositive_range():
    """The attention's exp pass (``ukernel_exp_row``, x <= 0): e**x within 3e-7 where it is a normal
    float, exactly 0 below FLT_MIN, 1 at 0, NaN kept, and 1 / sum of the row in ``inv`` (the row
    kernel's values bit for bit: test_short_rows_give_the_row_kernels_values)."""
    tiny = np.finfo(np.float32).tiny
    x = np.concatenate([np.linspace(-100.0, 0.0, 20001), np.linspace(-87.5, -87.2, 3001), [-np.inf, -0.0, 0.0],
                        np.float32(np.log(tiny)) + np.arange(-8, 9) * np.spacing(np.float32(87.0))]).astype(np.float32)
    F = x.copy()
    inv = np.zeros(1, np.float32)
    _exp_row(F, F.size, inv)
    want = np.exp(x.astype(np.float64))
    normal = want >= tiny * (1 + 1e-6)
    assert (F[want < tiny * (1 - 1e-6)] == 0).all()
    np.testing.assert_allclose(F[normal], want[normal], rtol=3e-7)
    assert (F[x == 0] == 1).all()
    np.testing.assert_allclose(inv[0], 1 / want[want >= tiny].sum(), rtol=1e-6)
    G = np.array([-1.0, np.nan, -3.0] * 11, np.float32)
    _exp_row(G, G.size, inv)
    assert np.isnan(G[1::3]).all() and np.isnan(inv[0]) and (G[0::3] == np.float32(np.exp(-1.0))).all()
