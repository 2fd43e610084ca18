"""Row-wise neural-network rKernels: reductions, softmax and layer normalization.

All work on dense float32 data.  Reductions accumulate in float64, which
keeps them closer to the exact result than numpy's float32 pairwise sums are.
(Convolutions are in :mod:`.kernels_conv`, depthwise conv and pooling in
:mod:`.kernels_window`.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .fastmath import exp32, flush_subnormal32
from .ukernel_softmax import ukernel_exp_row, ukernel_softmax_row

_F32_MAX = float(np.finfo(np.float32).max)

f32 = np.float32
f64 = np.float64
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
#: Contiguous Softmax rows through the vector kernel of :mod:`.ukernel_softmax` (off: the numba
#: passes of :func:`_softmax_row`, which LLVM left scalar: 4.3 against 2.1 ns a float, loaded).
USE_SOFTMAX_KERNEL = True
#: Softmax rows of at most this many floats (contiguous, in blocks of rows) go through
#: :func:`_softmax_short_rows`: one vector exp pass over the whole block instead of three vector
#: passes per row, masked when the row is shorter than a vector (1,000 rows of 4 classes: 67 -> 14 us;
#: of 10: 74 -> 23; of 32: 51 -> 47; of 48 and 64 it measured 3-8% slower, so they keep the row kernel).
SOFTMAX_SHORT_ROW = 32


# Reduction descriptor: [x_off, outer, red, inner, out_off, mode]
RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_SUMSQ, RED_L1, RED_L2, RED_LOGSUM, RED_LOGSUMEXP = range(10)


@njit(**_JIT)
def _f32_overflow(s):
    """A float64 sum as ONNX defines it, accumulated in float32: beyond float32's range it is
    infinite (a mean, L2 norm or log of it then is too; the fuzzer's mutants:21004818 had a
    finite ReduceL2 where the reference and onnxruntime give inf)."""
    if s > _F32_MAX:
        return f64(np.inf)
    if s < -_F32_MAX:
        return f64(-np.inf)
    return s


@njit(**_JIT)
def k_reduce(F, B, I, J, X, R, p, sbase):
    """out[o, i] = reduce_r x[o, r, i] for flat outputs [e0, e1) (e = o * inner + i).  Row: [desc, e0, e1]."""
    d = p[0]
    x = X[d]
    red = X[d + 2]
    inner = X[d + 3]
    out = X[d + 4]
    mode = X[d + 5]
    if inner == 1 and (mode == RED_SUM or mode == RED_MEAN or mode == RED_MAX or mode == RED_MIN):
        # contiguous rows (global pooling, reductions over the last axes): vectorized passes; the
        # loop below, with its per-element mode tests, took 3 ns per element
        for e in range(p[1], p[2]):
            A = F[x + e * red:x + (e + 1) * red]
            if mode == RED_SUM or mode == RED_MEAN:
                s = _f32_overflow(_row_sum64(A, red))
                F[out + e] = f32(s / red) if mode == RED_MEAN else f32(s)
            elif _row_has_nan(A, red):
                F[out + e] = f32(np.nan)
            else:
                F[out + e] = _row_max(A, red) if mode == RED_MAX else _row_min(A, red)
        return
    for e in range(p[1], p[2]):
        i = e % inner
        o = e // inner
        base = x + o * red * inner + i
        if mode == RED_MAX or mode == RED_MIN:
            acc = f32(-np.inf) if mode == RED_MAX else f32(np.inf)
            for r in range(red):
                v = F[base + r * inner]
                if mode == RED_MAX:
                    if v > acc or v != v:
                        acc = v
                elif v < acc or v != v:
                    acc = v
                if acc != acc:
                    break
            F[out + e] = acc
            continue
        if mode == RED_LOGSUMEXP:
            mx = f64(-np.inf)
            for r in range(red):
                v = f64(F[base + r * inner])
                if v > mx:
                    mx = v
            s = f64(0.0)
            for r in range(red):
                s += np.exp(f64(F[base + r * inner]) - mx)
            F[out + e] = f32(mx + np.log(s)) if np.isfinite(mx) else f32(mx)
            continue
        s = f64(1.0) if mode == RED_PROD else f64(0.0)
        for r in range(red):
            v = f64(F[base + r * inner])
            if mode == RED_PROD:
                s *= v
            elif mode == RED_SUMSQ or mode == RED_L2:
                s += v * v
            elif mode == RED_L1:
                s += abs(v)
            else:
                s += v
        if mode != RED_PROD:
            s = _f32_overflow(s)
        if mode == RED_MEAN:
            s = s / red
        elif mode == RED_L2:
            s = np.sqrt(s)
        elif mode == RED_LOGSUM:
            s = np.log(s)
        F[out + e] = f32(s)


# Passes over one contiguous row.  Each takes its row as a slice argument and
# indexes it with the loop counter, so numba emits plain loads and stores (no
# negative-index handling) and LLVM vectorizes the loop (with a run-time
# overlap check for two slices of the arena): an exp pass written as
# F[ob + r] = exp32(F[base + r] - mx) stayed scalar, 12x slower.  The reductions
# carry their own fast-math flags (numba's inline="always" would lower them
# with the caller's flags); without reassociation LLVM keeps them serial.
@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"nnan", "nsz"})
def _row_max(A, n):
    """max of A[:n]; undefined when the row holds a NaN (the exp pass then makes the row NaN)."""
    mx = f32(-np.inf)
    for r in range(n):
        v = A[r]
        mx = v if v > mx else mx
    return mx


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"nnan", "nsz"})
def _row_min(A, n):
    """min of A[:n]; undefined when the row holds a NaN (see :func:`_row_has_nan`)."""
    mn = f32(np.inf)
    for r in range(n):
        v = A[r]
        mn = v if v < mn else mn
    return mn


@njit(**_JIT)
def _row_has_nan(A, n):
    bad = False
    for r in range(n):
        bad |= A[r] != A[r]
    return bad


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"reassoc", "nsz"})
def _row_sum64(A, n):
    s = f64(0.0)
    for r in range(n):
        s += f64(A[r])
    return s


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"reassoc", "nsz"})
def _row_sqdev64(A, n, mean):
    v = f64(0.0)
    for r in range(n):
        t = f64(A[r]) - mean
        v += t * t
    return v


@njit(**_JIT)
def _exp_shifted(D, A, n, mx):
    for r in range(n):
        D[r] = exp32(A[r] - mx)


@njit(**_JIT)
def _scale_row(D, n, k):
    for r in range(n):
        D[r] *= k


@njit(**_JIT)
def _scale_row_flushed(D, n, k):
    """D *= k with subnormal results flushed to 0 (softmax's probabilities: see fastmath.FLT_MIN)."""
    for r in range(n):
        D[r] = flush_subnormal32(D[r] * k)


@njit(**_JIT)
def _shift_row(D, A, n, shift):
    for r in range(n):
        D[r] = A[r] - shift


@njit(**_JIT)
def _log_shift_row(D, A, n, mx, ls):
    for r in range(n):
        D[r] = (A[r] - mx) - ls


@njit(**_JIT)
def _softmax_row(F, base, ob, n, log):
    """Softmax of one contiguous row in vectorized passes (max, exp, sum, scale).

    A NaN anywhere makes exp's output and so the sum NaN, and the whole row NaN,
    as in the reference; +inf gives inf - inf = NaN the same way.
    """
    A = F[base:base + n]
    D = F[ob:ob + n]
    mx = _row_max(A, n)
    _exp_shifted(D, A, n, mx)
    s = f32(_row_sum64(D, n))
    if log == 1:
        # (a - max) - log(sum), in that order as the reference and the strided rows: a - (max + log(sum))
        # loses log(sum) when the maximum is large (1e37: the fuzzer's mutants:61507313 was off by log 7)
        _log_shift_row(D, A, n, mx, f32(np.log(s)))
    else:
        _scale_row_flushed(D, n, f32(1.0) / s)


@njit(**_JIT)
def _norm_row(D, A, n, m, inv, S, Bv):
    for k in range(n):
        D[k] = (A[k] - m) * inv * S[k] + Bv[k]


@njit(**_JIT)
def _norm_row_unbiased(D, A, n, m, inv, S):
    for k in range(n):
        D[k] = (A[k] - m) * inv * S[k]


@njit(**_JIT)
def _softmax_short_rows(F, x, out, rows, n):
    """Softmax of ``rows`` contiguous rows of ``n`` floats from ``F[x:]`` to ``F[out:]`` (the same rows
    or apart): each row's shift by its maximum, then one vector ``exp`` over the whole block (below
    FLT_MIN: 0, as the row kernel's probabilities end up), then each row's scale.  The values are the
    row kernel's: the same exp, the float64 sum in row order, ``1 / float32(sum)`` and the flush.  A NaN
    or +inf makes its row's shifted values NaN somewhere, so the row's sum and outputs NaN."""
    for r in range(rows):
        A = F[x + r * n:x + (r + 1) * n]
        D = F[out + r * n:out + (r + 1) * n]
        _shift_row(D, A, n, _row_max(A, n))
    inv = np.empty(1, np.float32)
    ukernel_exp_row(rows * n, F, out, f32(0.0), inv, 0)
    for r in range(rows):
        D = F[out + r * n:out + (r + 1) * n]
        _scale_row_flushed(D, n, f32(1.0) / f32(_row_sum64(D, n)))


# Softmax descriptor: [x_off, outer, n, inner, out_off, log]
@njit(**_JIT)
def k_softmax(F, B, I, J, X, R, p, sbase):
    """Softmax (log=0) or LogSoftmax (log=1) along the middle axis of (outer, n, inner).

    Row: [desc, e0, e1] over lines e = o * inner + i.
    """
    d = p[0]
    x = X[d]
    n = X[d + 2]
    inner = X[d + 3]
    out = X[d + 4]
    log = X[d + 5]
    if inner == 1 and log == 0 and n <= SOFTMAX_SHORT_ROW and USE_SOFTMAX_KERNEL:
        _softmax_short_rows(F, x + p[1] * n, out + p[1] * n, p[2] - p[1], n)
        return
    for e in range(p[1], p[2]):
        i = e % inner
        o = e // inner
        base = x + o * n * inner + i
        ob = out + o * n * inner + i
        if inner == 1:
            if log == 0 and USE_SOFTMAX_KERNEL:
                ukernel_softmax_row(n, F, base, F, ob)
            else:
                _softmax_row(F, base, ob, n, log)
            continue
        mx = f32(-np.inf)
        nan = False
        for r in range(n):
            v = F[base + r * inner]
            if v > mx:
                mx = v
            if v != v:
                nan = True
        if nan:
            for r in range(n):
                F[ob + r * inner] = f32(np.nan)
            continue
        s = f64(0.0)
        if inner == 1:
            for r in range(n):
                ev = exp32(F[base + r] - mx)
                F[ob + r] = ev
                s += ev
        else:
            for r in range(n):
                ev = exp32(F[base + r * inner] - mx)
                F[ob + r * inner] = ev
                s += ev
        # the sum rounded to float32 first, as the contiguous rows do (_softmax_row): a row's
        # maximum then gets a log-softmax of exactly 0 when the others add less than float32
        # resolves, as in the reference and onnxruntime, not -1e-9 (which flipped a Less(x, 0)
        # downstream: the fuzzer's graphs:23003769)
        s32 = f32(s)
        if log == 1:
            ls = f32(np.log(s32))
            for r in range(n):
                F[ob + r * inner] = (F[base + r * inner] - mx) - ls
        else:
            inv = f32(1.0) / s32
            for r in range(n):
                F[ob + r * inner] = flush_subnormal32(F[ob + r * inner] * inv)


# LayerNorm descriptor: [x_off, rows, n, out_off, scale_off, bias_off(-1), eps_imm]
@njit(**_JIT)
def k_layernorm(F, B, I, J, X, R, p, sbase):
    """y = (x - mean) / sqrt(var + eps) * scale + bias over the last n elements of rows [r0, r1)."""
    d = p[0]
    x = X[d]
    n = X[d + 2]
    out = X[d + 3]
    sc = X[d + 4]
    bi = X[d + 5]
    eps = f64(R[X[d + 6]])
    for r in range(p[1], p[2]):
        A = F[x + r * n:x + (r + 1) * n]
        D = F[out + r * n:out + (r + 1) * n]
        # ONNX defines the statistics in float32 (stash_type 1): a sum that overflows there
        # makes the mean infinite (every output NaN) and a sum of squares that overflows makes
        # 1/std zero (every output the bias); float64 would give the exact answer, which neither
        # the spec nor onnxruntime returns (mutants:20027605).
        mean = _f32_overflow(_row_sum64(A, n)) / n
        inv = 1.0 / np.sqrt(_f32_overflow(_row_sqdev64(A, n, mean)) / n + eps)
        if bi >= 0:
            _norm_row(D, A, n, f32(mean), f32(inv), F[sc:sc + n], F[bi:bi + n])
        else:
            _norm_row_unbiased(D, A, n, f32(mean), f32(inv), F[sc:sc + n])
