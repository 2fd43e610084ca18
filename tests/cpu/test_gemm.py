"""The SIMD micro-kernel and the packed GEMM around it, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.cpu import kernels_gemm as kg
from rammer.backends.cpu import ukernel as uk


@pytest.mark.parametrize("accumulate", [0, 1])
def test_microkernel_tile(accumulate):
    rng = np.random.default_rng(0)
    k = 37
    a = rng.standard_normal(k * uk.MR).astype(np.float32)
    b = rng.standard_normal(k * uk.NR).astype(np.float32)
    c = rng.standard_normal((uk.MR, uk.NR + 5)).astype(np.float32)
    before = c.copy()
    uk.CFUNC(k, a.ctypes.data, b.ctypes.data, c.ctypes.data, uk.NR + 5, accumulate)
    want = a.reshape(k, uk.MR).T.astype(np.float64) @ b.reshape(k, uk.NR).astype(np.float64)
    if accumulate:
        want += before[:, :uk.NR]
    np.testing.assert_allclose(c[:, :uk.NR], want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c[:, uk.NR:], before[:, uk.NR:])  # nothing written past the tile


@pytest.mark.parametrize("m,n,k", [(5, 7, 3), (13, 33, 300), (40, 100, 64), (kg.MC + 3, kg.NC + 9, kg.KC + 17)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_packed_gemm_edges_and_transposes(m, n, k, ta, tb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    store_a = a.T.copy() if ta else a
    store_b = b.T.copy() if tb else b
    F = np.zeros(a.size + b.size + m * n + kg.PACK_FLOATS + 64, np.float32)
    a_off, b_off, c_off = 0, a.size, a.size + b.size
    pack = c_off + m * n
    F[a_off:b_off] = store_a.ravel()
    F[b_off:c_off] = store_b.ravel()
    a_rs, a_cs = (1, m) if ta else (k, 1)
    b_rs, b_cs = (1, k) if tb else (n, 1)
    kg.gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, n, k, 0, m, 0, n, np.float32(0.5), 0, pack)
    want = 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(F[c_off:c_off + m * n].reshape(m, n), want, rtol=1e-4, atol=1e-4)
    # accumulate into what is there
    kg.gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, n, k, 0, m, 0, n, np.float32(0.5), 1, pack)
    np.testing.assert_allclose(F[c_off:c_off + m * n].reshape(m, n), 2 * want, rtol=1e-4, atol=1e-4)
