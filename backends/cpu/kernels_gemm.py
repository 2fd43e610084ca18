"""GEMM rKernels: MatMul, Gemm and the GEMM half of convolutions.

A GEMM rOperator is described once in the int64 side array (the
*descriptor*) and each rTask computes one tile ``C[b, m0:m1, n0:n1]`` for a
range of batch matrices, then runs the fused epilogue program (bias,
residual add, activation...) over that tile while it is still in cache.

Descriptor layout (element offsets into the float32 arena)::

    [M, N, K, a_rs, a_cs, b_rs, b_cs, c_rs, epilogue_prog, alpha_imm, table]

and ``table`` holds, per batch matrix, ``(a_off, b_off, c_off)``.

Three inner paths: OpenBLAS ``sgemm`` on the tile when it is large enough
and both operands have a unit stride; a row-broadcast loop for the skinny
GEMV-like tiles of batch-1 RNNs (vectorized over N, four K steps per pass so
C is loaded once per four rows of B); and a generic strided loop.
"""

from __future__ import annotations

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

import numpy as np
from numba import njit

from .blas import HAVE_BLAS, sgemm
from .kernels_ew import ew_run

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_JIT_REASSOC = dict(_JIT, fastmath={"reassoc", "contract", "nsz"})

USE_BLAS = HAVE_BLAS
#: Tiles with fewer multiply-adds than this (or fewer rows) use the loops.
BLAS_MIN_MACS = 32 * 1024
BLAS_MIN_ROWS = 12

D_M, D_N, D_K, D_ARS, D_ACS, D_BRS, D_BCS, D_CRS, D_EPI, D_ALPHA, D_TABLE = range(11)
DESC_LEN = 11


@njit(**_JIT)
def _rows_times_b(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, alpha):
    """C[m, n0:n1] = alpha * sum_k A[m, k] B[k, n0:n1] with unit column stride in B and C.

    Four rows of C share each row of B read (the skinny GEMMs of batch-1
    RNNs are bound by reading B).  Loops index slices from 0, so numba emits
    no negative-index wrap-around and LLVM vectorizes them.
    """
    nt = n1 - n0
    m = m0
    while m < m1:
        rows = min(4, m1 - m)
        c0 = F[c_off + m * c_rs + n0:c_off + m * c_rs + n0 + nt]
        c1 = F[c_off + (m + 1) * c_rs + n0:c_off + (m + 1) * c_rs + n0 + nt] if rows > 1 else c0
        c2 = F[c_off + (m + 2) * c_rs + n0:c_off + (m + 2) * c_rs + n0 + nt] if rows > 2 else c0
        c3 = F[c_off + (m + 3) * c_rs + n0:c_off + (m + 3) * c_rs + n0 + nt] if rows > 3 else c0
        for j in range(nt):
            c0[j] = f32(0.0)
            c1[j] = f32(0.0)
            c2[j] = f32(0.0)
            c3[j] = f32(0.0)
        if rows == 1:
            ab = a_off + m * a_rs
            k = 0
            while k + 4 <= K:
                a0 = F[ab + k * a_cs]
                a1 = F[ab + (k + 1) * a_cs]
                a2 = F[ab + (k + 2) * a_cs]
                a3 = F[ab + (k + 3) * a_cs]
                r0 = b_off + k * b_rs + n0
                b0 = F[r0:r0 + nt]
                b1 = F[r0 + b_rs:r0 + b_rs + nt]
                b2 = F[r0 + 2 * b_rs:r0 + 2 * b_rs + nt]
                b3 = F[r0 + 3 * b_rs:r0 + 3 * b_rs + nt]
                for j in range(nt):
                    c0[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]
                k += 4
            while k < K:
                a0 = F[ab + k * a_cs]
                r0 = b_off + k * b_rs + n0
                b0 = F[r0:r0 + nt]
                for j in range(nt):
                    c0[j] += a0 * b0[j]
                k += 1
        else:
            for k in range(K):
                r0 = b_off + k * b_rs + n0
                bk = F[r0:r0 + nt]
                x0 = F[a_off + m * a_rs + k * a_cs]
                x1 = F[a_off + (m + 1) * a_rs + k * a_cs] if rows > 1 else f32(0.0)
                x2 = F[a_off + (m + 2) * a_rs + k * a_cs] if rows > 2 else f32(0.0)
                x3 = F[a_off + (m + 3) * a_rs + k * a_cs] if rows > 3 else f32(0.0)
                if rows == 4:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
                        c2[j] += x2 * v
                        c3[j] += x3 * v
                elif rows == 3:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
                        c2[j] += x2 * v
                else:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
        if alpha != f32(1.0):
            for j in range(nt):
                c0[j] *= alpha
                if rows > 1:
                    c1[j] *= alpha
                if rows > 2:
                    c2[j] *= alpha
                if rows > 3:
                    c3[j] *= alpha
        m += rows


@njit(**_JIT_REASSOC)
def _dot_tiles(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha):
    """Generic strides: one dot product per output element (vectorized when both K strides are 1)."""
    for m in range(m0, m1):
        ab = a_off + m * a_rs
        for n in range(n0, n1):
            bb = b_off + n * b_cs
            acc = f32(0.0)
            if a_cs == 1 and b_rs == 1:
                av = F[ab:ab + K]
                bv = F[bb:bb + K]
                for k in range(K):
                    acc += av[k] * bv[k]
            else:
                for k in range(K):
                    acc += F[ab + k * a_cs] * F[bb + k * b_rs]
            F[c_off + m * c_rs + n] = acc * alpha


@njit(**_JIT)
def gemm_acc(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, acc):
    """C[m0:m1, n0:n1] (+)= A[m0:m1, :] @ B[:, n0:n1] with unit column strides in A, B and C.

    ``acc`` = 0 overwrites C, 1 adds to it (K-chunked convolutions).
    """
    mt = m1 - m0
    nt = n1 - n0
    if mt <= 0 or nt <= 0:
        return
    if USE_BLAS and mt >= 4 and mt * nt * K >= BLAS_MIN_MACS:
        sgemm(0, 0, nt, mt, K, f32(1.0), F, b_off + n0, b_rs, F, a_off + m0 * a_rs, a_rs,
              f32(acc), F, c_off + m0 * c_rs + n0, c_rs)
        return
    for m in range(m0, m1):
        cb = c_off + m * c_rs + n0
        c = F[cb:cb + nt]
        if acc == 0:
            for j in range(nt):
                c[j] = f32(0.0)
        ab = a_off + m * a_rs
        for k in range(K):
            a0 = F[ab + k * a_cs]
            r0 = b_off + k * b_rs + n0
            bk = F[r0:r0 + nt]
            for j in range(nt):
                c[j] += a0 * bk[j]


@njit(**_JIT)
def gemm_tile(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha):
    """C[m0:m1, n0:n1] = alpha * A[m0:m1, :] @ B[:, n0:n1] (C has unit column stride)."""
    mt = m1 - m0
    nt = n1 - n0
    if mt <= 0 or nt <= 0:
        return
    if K == 0:
        for m in range(m0, m1):
            for n in range(n0, n1):
                F[c_off + m * c_rs + n] = f32(0.0)
        return
    a_unit = a_cs == 1 or a_rs == 1
    b_unit = b_cs == 1 or b_rs == 1
    if USE_BLAS and a_unit and b_unit and mt >= BLAS_MIN_ROWS and mt * nt * K >= BLAS_MIN_MACS:
        # Row-major C = A B is column-major C^T = B^T A^T.
        tb = 0 if b_cs == 1 else 1
        ldb = b_rs if b_cs == 1 else b_cs
        ta = 0 if a_cs == 1 else 1
        lda = a_rs if a_cs == 1 else a_cs
        sgemm(tb, ta, nt, mt, K, alpha, F, b_off + n0 * b_cs, ldb, F, a_off + m0 * a_rs, lda,
              f32(0.0), F, c_off + m0 * c_rs + n0, c_rs)
    elif b_cs == 1:
        _rows_times_b(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, alpha)
    else:
        _dot_tiles(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha)


@njit(**_JIT)
def k_gemm(F, B, I, J, X, R, p, sbase):
    """Task row: [desc, batch0, batch1, m0, m1, n0, n1]."""
    d = p[0]
    M = X[d + D_M]
    K = X[d + D_K]
    a_rs = X[d + D_ARS]
    a_cs = X[d + D_ACS]
    b_rs = X[d + D_BRS]
    b_cs = X[d + D_BCS]
    c_rs = X[d + D_CRS]
    epi = X[d + D_EPI]
    alpha = R[X[d + D_ALPHA]]
    table = X[d + D_TABLE]
    m0 = p[3]
    m1 = p[4]
    n0 = p[5]
    n1 = p[6]
    for b in range(p[1], p[2]):
        t = table + 3 * b
        gemm_tile(F, X[t], a_rs, a_cs, X[t + 1], b_rs, b_cs, X[t + 2], c_rs, K, m0, m1, n0, n1, alpha)
        if epi >= 0:
            ew_run(F, B, I, J, X, R, epi, b * M + m0, b * M + m1, n0, n1, sbase)
