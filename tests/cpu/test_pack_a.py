"""Packing panels for the GEMM micro-kernel with vector transposes (ukernel_pack.py) at the AVX-512
and AVX2 shapes: A's MR-row panels (``kernels_gemm._pack_a``: ragged ends, strided rows, alpha) and
the NR-column panels of a B stored column by column (``kernels_gemm._pack_b``: attention's K^T)."""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from rammer.backends.cpu import kernels_gemm as kg
from rammer.backends.cpu import machine_code as mc
from rammer.backends.cpu import ukernel as uk
from rammer.backends.cpu import ukernel_pack as up

_PACK_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                   ctypes.c_float)


@functools.cache
def _engine(rows: int, width: int, ldb: int | None = None):
    return mc.compile_module(up.pack_module(rows, width, ldb))


def _kernel(rows: int, width: int):
    engine = _engine(rows, width)
    return engine, _PACK_CFUNCTYPE(engine.get_function_address(up.SYMBOL))


@pytest.mark.parametrize("rows,width", [(12, 16), (6, 8), (4, 8), (3, 16), (8, 8)])
@pytest.mark.parametrize("blocks", [0, 1, 3])
def test_pack_kernel_transposes_whole_blocks_and_writes_nothing_else(rows, width, blocks):
    _, pack = _kernel(rows, width)
    lda = 3 * width + 5  # rows not aligned to a vector
    a = np.random.default_rng(rows * width + blocks).standard_normal(rows * lda + width).astype(np.float32)
    p = np.full(max(blocks, 1) * width * rows + 2 * width, -7.0, np.float32)
    pack(blocks, a.ctypes.data, lda, p.ctypes.data, -1.5)
    k = blocks * width
    want = (-1.5 * a[:rows * lda].reshape(rows, lda)[:, :k]).T.ravel()
    np.testing.assert_array_equal(p[:k * rows], want)
    assert (p[k * rows:] == -7.0).all()


@pytest.mark.parametrize("vectors", [True, False])
@pytest.mark.parametrize("mc_rows,kc,a_cs", [(uk.MR, 3 * uk.WIDTH, 1), (2 * uk.MR + 5, 2 * uk.WIDTH + 7, 1),
                                             (uk.MR + 1, uk.WIDTH - 1, 1), (uk.MR, 2 * uk.WIDTH, 3)])
def test_pack_a_lays_out_panels_k_major_with_ragged_ends(monkeypatch, vectors, mc_rows, kc, a_cs):
    """Whole panels go through the kernel, cut panels, ragged column ends and strided rows through
    the loops; either way P[(panel * kc + k) * MR + r] = alpha * A[i0 + panel*MR + r, p0 + k], zero
    rows padding the last panel."""
    rng = np.random.default_rng(kc + mc_rows)
    rows_total, cols = mc_rows + 3, (kc + 4) * a_cs
    a = rng.standard_normal((rows_total, cols)).astype(np.float32)
    i0, p0 = 2, 1
    f = np.concatenate([np.zeros(5, np.float32), a.ravel()])
    panels = -(-mc_rows // uk.MR)
    p = np.full(panels * uk.MR * kc + uk.WIDTH, np.nan, np.float32)
    pack = kg._pack_a if vectors else kg._pack_a.py_func
    if not vectors:
        monkeypatch.setattr(kg, "PACK_VECTORS", False)
    pack(f, 5, cols, a_cs, i0, mc_rows, p0, kc, np.float32(0.5), p)
    block = np.zeros((panels * uk.MR, kc), np.float32)
    block[:mc_rows] = 0.5 * a[i0:i0 + mc_rows, p0 * a_cs:(p0 + kc) * a_cs:a_cs]
    want = block.reshape(panels, uk.MR, kc).transpose(0, 2, 1).ravel()
    np.testing.assert_array_equal(p[:want.size], want)
    assert np.isnan(p[want.size:]).all()


@pytest.mark.parametrize("width,ldb", [(16, 32), (8, 16)])
def test_columns_kernel_fills_its_half_of_each_panel_row(width, ldb):
    engine = _engine(12 if width == 16 else 6, width, ldb)
    pack = _PACK_CFUNCTYPE(engine.get_function_address(up.COLUMNS_SYMBOL))
    lda, blocks = 2 * width + 3, 2
    a = np.random.default_rng(width).standard_normal(width * lda + width).astype(np.float32)
    p = np.full(blocks * width * ldb + ldb, -7.0, np.float32)
    pack(blocks, a.ctypes.data, lda, p.ctypes.data + 4 * width, 1.0)  # the second half of each row
    k = blocks * width
    got = p[:k * ldb].reshape(k, ldb)
    np.testing.assert_array_equal(got[:, width:2 * width], a[:width * lda].reshape(width, lda)[:, :k].T)
    assert (got[:, :width] == -7.0).all() and (p[k * ldb:] == -7.0).all()


@pytest.mark.parametrize("vectors", [True, False])
@pytest.mark.parametrize("kc,nc", [(3 * uk.WIDTH, 2 * uk.NR), (2 * uk.WIDTH + 5, uk.NR + 7), (uk.WIDTH - 1, uk.NR)])
def test_pack_b_of_columns_lays_out_panels_with_ragged_ends(monkeypatch, vectors, kc, nc):
    """B[k, j] at b_off + k + j*b_cs (a transposed view): P[(jp*kc + k)*NR + j] = B[p0 + k, j0 + jp*NR + j],
    zero columns padding the last panel; whole panels through the kernel, the rest through the loops."""
    rng = np.random.default_rng(kc * nc)
    b_cs, p0, j0 = kc + 9, 2, 1
    cols_total = j0 + nc + 2
    f = rng.standard_normal(3 + cols_total * b_cs).astype(np.float32)
    panels = -(-nc // uk.NR)
    p = np.full(panels * uk.NR * kc + uk.NR, np.nan, np.float32)
    pack = kg._pack_b if vectors else kg._pack_b.py_func
    if not vectors:
        monkeypatch.setattr(kg, "PACK_VECTORS", False)
    pack(f, 3, 1, b_cs, p0, kc, j0, nc, p)
    b = f[3:3 + cols_total * b_cs].reshape(cols_total, b_cs).T  # B[k, j]
    block = np.zeros((kc, panels * uk.NR), np.float32)
    block[:, :nc] = b[p0:p0 + kc, j0:j0 + nc]
    want = block.reshape(kc, panels, uk.NR).transpose(1, 0, 2).ravel()
    np.testing.assert_array_equal(p[:want.size], want)
    assert np.isnan(p[want.size:]).all()
