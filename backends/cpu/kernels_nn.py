"""Neural-network rKernels that are not GEMMs: im2col, depthwise convolution,
pooling, reductions, softmax and layer normalization.

All work on dense float32 NCHW data (the lowering inserts a copy for a
strided input).  Reductions accumulate in float64, which keeps them closer
to the exact result than numpy's float32 pairwise sums are.
"""

from __future__ import annotations

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

import numpy as np
from numba import njit

from .fastmath import exp32
from .kernels_ew import ew_run

f32 = np.float32
f64 = np.float64
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# Window descriptor shared by im2col, depthwise conv and pooling:
W_X, W_C, W_H, W_W, W_KH, W_KW, W_SH, W_SW, W_PH, W_PW, W_DH, W_DW, W_OH, W_OW, W_OUT = range(15)
# then: im2col: [.., groups, cg]; dwconv: [.., w_off, mult, epi]; pool: [.., mode, lo_h, hi_h, lo_w, hi_w]
WIN_LEN = 15


@njit(**_JIT)
def k_im2col(F, B, I, J, X, R, p, sbase):
    """Rows of the column matrix of (batch n, group g) blocks.

    Row: [desc, block0, block1, row0, row1] with block = n * groups + g and
    row = (c * kh + i) * kw + j of the group's Cg * kh * kw rows.
    Column matrix of block b starts at ``out + b * rows * OH * OW``.
    """
    d = p[0]
    C = X[d + W_C]
    H = X[d + W_H]
    W = X[d + W_W]
    kh = X[d + W_KH]
    kw = X[d + W_KW]
    sh = X[d + W_SH]
    sw = X[d + W_SW]
    ph = X[d + W_PH]
    pw = X[d + W_PW]
    dh = X[d + W_DH]
    dw = X[d + W_DW]
    OH = X[d + W_OH]
    OW = X[d + W_OW]
    groups = X[d + WIN_LEN]
    cg = X[d + WIN_LEN + 1]
    nrows = cg * kh * kw
    ohw = OH * OW
    for blk in range(p[1], p[2]):
        n = blk // groups
        g = blk % groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        cb = X[d + W_OUT] + blk * nrows * ohw
        for row in range(p[3], p[4]):
            j = row % kw
            t = row // kw
            i = t % kh
            c = t // kh
            src = xb + c * H * W
            dst = cb + row * ohw
            # output columns whose input column is inside [0, W)
            for oh in range(OH):
                ih = oh * sh - ph + i * dh
                o = dst + oh * OW
                if ih < 0 or ih >= H:
                    for ow in range(OW):
                        F[o + ow] = f32(0.0)
                    continue
                s = src + ih * W - pw + j * dw
                if sw == 1:
                    lo = min(max(pw - j * dw, 0), OW)
                    hi = min(max(W + pw - j * dw, lo), OW)
                    for ow in range(lo):
                        F[o + ow] = f32(0.0)
                    for ow in range(lo, hi):
                        F[o + ow] = F[s + ow]
                    for ow in range(hi, OW):
                        F[o + ow] = f32(0.0)
                else:
                    for ow in range(OW):
                        iw = ow * sw - pw + j * dw
                        F[o + ow] = F[s + ow * sw] if 0 <= iw < W else f32(0.0)


@njit(**_JIT)
def k_dwconv(F, B, I, J, X, R, p, sbase):
    """Depthwise convolution (groups == C) of channel planes [c0, c1) of batch items [n0, n1).

    Row: [desc, n0, n1, c0, c1].  Output channel m = c * mult + k reads input
    channel c.  Descriptor tail: [w_off, mult, epilogue, bias_or_-1].
    """
    d = p[0]
    C = X[d + W_C]
    H = X[d + W_H]
    W = X[d + W_W]
    kh = X[d + W_KH]
    kw = X[d + W_KW]
    sh = X[d + W_SH]
    sw = X[d + W_SW]
    ph = X[d + W_PH]
    pw = X[d + W_PW]
    dh = X[d + W_DH]
    dw = X[d + W_DW]
    OH = X[d + W_OH]
    OW = X[d + W_OW]
    w_off = X[d + WIN_LEN]
    mult = X[d + WIN_LEN + 1]
    epi = X[d + WIN_LEN + 2]
    M = C * mult
    for n in range(p[1], p[2]):
        for c in range(p[3], p[4]):
            src = X[d + W_X] + (n * C + c) * H * W
            for k in range(mult):
                m = c * mult + k
                dst = X[d + W_OUT] + (n * M + m) * OH * OW
                wb = w_off + m * kh * kw
                for q in range(OH * OW):
                    F[dst + q] = f32(0.0)
                for i in range(kh):
                    for j in range(kw):
                        wv = F[wb + i * kw + j]
                        for oh in range(OH):
                            ih = oh * sh - ph + i * dh
                            if ih < 0 or ih >= H:
                                continue
                            o = dst + oh * OW
                            s = src + ih * W - pw + j * dw
                            lo = 0
                            hi = OW
                            # clip ow so that 0 <= ow*sw - pw + j*dw < W
                            while lo < hi and lo * sw - pw + j * dw < 0:
                                lo += 1
                            while hi > lo and (hi - 1) * sw - pw + j * dw >= W:
                                hi -= 1
                            if sw == 1:
                                for ow in range(lo, hi):
                                    F[o + ow] += wv * F[s + ow]
                            else:
                                for ow in range(lo, hi):
                                    F[o + ow] += wv * F[s + ow * sw]
                if epi >= 0:
                    ew_run(F, B, I, J, X, R, epi, n * M + m, n * M + m + 1, 0, OH * OW, sbase)


@njit(**_JIT)
def k_pool(F, B, I, J, X, R, p, sbase):
    """Max (mode 0) or average (mode 1) pooling of planes [q0, q1) (q = n * C + c).

    Row: [desc, q0, q1].  Descriptor tail: [mode, lo_h, hi_h, lo_w, hi_w]: taps
    whose padded coordinate falls in [lo, hi) count towards the average.
    """
    d = p[0]
    H = X[d + W_H]
    W = X[d + W_W]
    kh = X[d + W_KH]
    kw = X[d + W_KW]
    sh = X[d + W_SH]
    sw = X[d + W_SW]
    ph = X[d + W_PH]
    pw = X[d + W_PW]
    dh = X[d + W_DH]
    dw = X[d + W_DW]
    OH = X[d + W_OH]
    OW = X[d + W_OW]
    mode = X[d + WIN_LEN]
    lo_h = X[d + WIN_LEN + 1]
    hi_h = X[d + WIN_LEN + 2]
    lo_w = X[d + WIN_LEN + 3]
    hi_w = X[d + WIN_LEN + 4]
    for q in range(p[1], p[2]):
        src = X[d + W_X] + q * H * W
        dst = X[d + W_OUT] + q * OH * OW
        for oh in range(OH):
            for ow in range(OW):
                if mode == 0:
                    acc = f32(-np.inf)
                    for i in range(kh):
                        ih = oh * sh - ph + i * dh
                        if ih < 0 or ih >= H:
                            continue
                        for j in range(kw):
                            iw = ow * sw - pw + j * dw
                            if 0 <= iw < W:
                                v = F[src + ih * W + iw]
                                if v > acc or v != v:
                                    acc = v
                    F[dst + oh * OW + ow] = acc
                else:
                    tot = f64(0.0)
                    cnt = 0
                    for i in range(kh):
                        hp = oh * sh + i * dh
                        ih = hp - ph
                        in_h = lo_h <= hp < hi_h
                        for j in range(kw):
                            wp = ow * sw + j * dw
                            iw = wp - pw
                            if in_h and lo_w <= wp < hi_w:
                                cnt += 1
                            if 0 <= ih < H and 0 <= iw < W:
                                tot += F[src + ih * W + iw]
                    F[dst + oh * OW + ow] = f32(tot / cnt) if cnt > 0 else f32(np.nan)


# Reduction descriptor: [x_off, outer, red, inner, out_off, mode]
RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_SUMSQ, RED_L1, RED_L2, RED_LOGSUM, RED_LOGSUMEXP = range(10)


@njit(**_JIT)
def k_reduce(F, B, I, J, X, R, p, sbase):
    """out[o, i] = reduce_r x[o, r, i] for flat outputs [e0, e1) (e = o * inner + i).  Row: [desc, e0, e1]."""
    d = p[0]
    x = X[d]
    red = X[d + 2]
    inner = X[d + 3]
    out = X[d + 4]
    mode = X[d + 5]
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
        if mode == RED_MEAN:
            s = s / red
        elif mode == RED_L2:
            s = np.sqrt(s)
        elif mode == RED_LOGSUM:
            s = np.log(s)
        F[out + e] = f32(s)


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
    for e in range(p[1], p[2]):
        i = e % inner
        o = e // inner
        base = x + o * n * inner + i
        ob = out + o * n * inner + i
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
        if log == 1:
            ls = f32(np.log(s))
            for r in range(n):
                F[ob + r * inner] = (F[base + r * inner] - mx) - ls
        else:
            inv = f32(1.0 / s)
            for r in range(n):
                F[ob + r * inner] *= inv


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
        base = x + r * n
        s = f64(0.0)
        for k in range(n):
            s += F[base + k]
        mean = s / n
        v = f64(0.0)
        for k in range(n):
            t = f64(F[base + k]) - mean
            v += t * t
        inv = 1.0 / np.sqrt(v / n + eps)
        ob = out + r * n
        m32 = f32(mean)
        i32 = f32(inv)
        if bi >= 0:
            for k in range(n):
                F[ob + k] = (F[base + k] - m32) * i32 * F[sc + k] + F[bi + k]
        else:
            for k in range(n):
                F[ob + k] = (F[base + k] - m32) * i32 * F[sc + k]
