"""GEMM with A read in place (rows at a stride) against a B packed in the micro-kernel's panels.

For products whose A is used once or has few columns (attention's scores Q K^T with a head size
of 64, and its probabilities times V), packing A (:func:`.kernels_gemm._pack_a`, a transposing
gather) costs about as much as the multiply-adds; :mod:`.ukernel_lda`'s kernels broadcast A's
floats from its rows directly.  B must be packed (:func:`.kernels_gemm.prepack_b`'s layout, or
:func:`.kernels_gemm._pack_b` at run time, which a caller does once per operand).
"""

from __future__ import annotations

from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .ukernel import MR, NR
from .ukernel_lda import (
    ukernel_lda1,
    ukernel_lda2,
    ukernel_lda3,
    ukernel_lda4,
    ukernel_lda5,
    ukernel_lda6,
    ukernel_lda7,
    ukernel_lda8,
    ukernel_lda9,
    ukernel_lda10,
    ukernel_lda11,
    ukernel_lda12,
)

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
#: K steps per pass over a B panel: a panel of KC_INPLACE x NR floats (48 KiB) stays in L1/L2 while
#: every row panel of A is multiplied by it.
KC_INPLACE = 384
#: Floats of scratch :func:`gemm_inplace` needs (one MR x NR tile for a ragged last column panel).
INPLACE_SCRATCH = MR * NR


@njit(**_JIT)
def _lda_tile(rows, kc, F, a, lda, b, c, ldc, acc):
    if rows == 12:
        ukernel_lda12(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 11:
        ukernel_lda11(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 10:
        ukernel_lda10(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 9:
        ukernel_lda9(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 8:
        ukernel_lda8(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 7:
        ukernel_lda7(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 6:
        ukernel_lda6(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 5:
        ukernel_lda5(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 4:
        ukernel_lda4(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 3:
        ukernel_lda3(kc, F, a, lda, F, b, F, c, ldc, acc)
    elif rows == 2:
        ukernel_lda2(kc, F, a, lda, F, b, F, c, ldc, acc)
    else:
        ukernel_lda1(kc, F, a, lda, F, b, F, c, ldc, acc)


@njit(**_JIT)
def lda_tile_into(rows, cols, kc, F, a, lda, b, cp, ldc, acc, pt):
    """One ``rows`` x ``cols`` tile of C at ``cp`` (stored, or added to when ``acc``) from
    :func:`_lda_tile`: a full NR-wide tile straight into C, a ragged one through the MR x NR
    scratch tile ``pt`` and then its first ``cols`` columns."""
    if cols == NR:
        _lda_tile(rows, kc, F, a, lda, b, cp, ldc, acc)
        return
    _lda_tile(rows, kc, F, a, lda, b, pt, NR, 0)
    for r in range(rows):
        crow = F[cp + r * ldc:cp + r * ldc + cols]
        trow = F[pt + r * NR:pt + r * NR + cols]
        if acc == 0:
            for j in range(cols):
                crow[j] = trow[j]
        else:
            for j in range(cols):
                crow[j] += trow[j]


@njit(**_JIT)
def gemm_inplace_panels(F, a_off, lda, bp, K, Kp, c_off, ldc, m0, m1, n0, n1, pt):
    """:func:`gemm_inplace` over the first ``K`` rows of a B whose panels hold ``Kp`` >= K rows each
    (attention's probabilities times V when a mask leaves only the first K keys)."""
    for pc in range(0, K, KC_INPLACE):
        kc = min(KC_INPLACE, K - pc)
        acc = 0 if pc == 0 else 1
        for jr in range(n0, n1, NR):
            cols = min(NR, n1 - jr)
            b = bp + ((jr // NR) * Kp + pc) * NR
            for ir in range(m0, m1, MR):
                rows = min(MR, m1 - ir)
                a = a_off + ir * lda + pc
                lda_tile_into(rows, cols, kc, F, a, lda, b, c_off + ir * ldc + jr, ldc, acc, pt)


@njit(**_JIT)
def gemm_inplace(F, a_off, lda, bp, K, c_off, ldc, m0, m1, n0, n1, pt):
    """C[m0:m1, n0:n1] = A[m0:m1, :] @ B, A's row i at ``a_off + i*lda`` (unit column stride), B packed
    K x N in NR-wide panels at ``bp`` (``n0`` a multiple of NR); ``pt``: :data:`INPLACE_SCRATCH` floats."""
    gemm_inplace_panels(F, a_off, lda, bp, K, K, c_off, ldc, m0, m1, n0, n1, pt)
