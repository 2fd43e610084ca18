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
from .kernels_gemm import gemm_acc

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
def _col_block(F, xb, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, c0, nch, q0, q1, col):
    """col[(c*kh + i)*kw + j, q - q0] = x[c0 + c, ih, iw] (0 outside) for output pixels q in [q0, q1)."""
    nt = q1 - q0
    for c in range(nch):
        src = xb + (c0 + c) * H * W
        for i in range(kh):
            for j in range(kw):
                row = col[((c * kh + i) * kw + j) * nt:((c * kh + i) * kw + j + 1) * nt]
                q = q0
                while q < q1:
                    oh = q // OW
                    ow0 = q - oh * OW
                    ow1 = min(OW, ow0 + (q1 - q))
                    seg = row[q - q0:q - q0 + (ow1 - ow0)]
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= H:
                        for t in range(ow1 - ow0):
                            seg[t] = f32(0.0)
                    elif sw == 1:
                        # valid ow: 0 <= ow - pw + j*dw < W
                        lo = min(max(pw - j * dw, ow0), ow1)
                        hi = max(min(W + pw - j * dw, ow1), lo)
                        for t in range(lo - ow0):
                            seg[t] = f32(0.0)
                        base = src + ih * W - pw + j * dw
                        inp = F[base + lo:base + hi]
                        for t in range(hi - lo):
                            seg[lo - ow0 + t] = inp[t]
                        for t in range(hi - ow0, ow1 - ow0):
                            seg[t] = f32(0.0)
                    else:
                        for t in range(ow1 - ow0):
                            iw = (ow0 + t) * sw - pw + j * dw
                            seg[t] = F[src + ih * W + iw] if 0 <= iw < W else f32(0.0)
                    q += ow1 - ow0


@njit(**_JIT)
def k_conv(F, B, I, J, X, R, p, sbase):
    """Convolution tile: output channels [m0, m1) of one group x output pixels [q0, q1) of blocks [b0, b1).

    Row: [desc, b0, b1, m0, m1, q0, q1] with block b = n * groups + g.  The
    input channels are taken in chunks; each chunk's im2col block (chunk
    rows x tile pixels) is built in scratch and multiplied in by sgemm, so
    the column matrix never exists as a whole.  Then the fused epilogue runs
    on the tile.  Descriptor tail: [groups, cg, mg, w_off, chunk_channels,
    epilogue, col_scratch_offset, pixel_tile, pack_offset (from the col)].
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
    mg = X[d + WIN_LEN + 2]
    w_off = X[d + WIN_LEN + 3]
    chunk = X[d + WIN_LEN + 4]
    epi = X[d + WIN_LEN + 5]
    cbase = sbase + X[d + WIN_LEN + 6]
    qt = X[d + WIN_LEN + 7]
    m0 = p[3]
    m1 = p[4]
    ohw = OH * OW
    kdim = cg * kh * kw
    M = groups * mg
    for b in range(p[1], p[2]):
        n = b // groups
        g = b % groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        out = X[d + W_OUT] + (n * M + g * mg) * ohw
        wg = w_off + g * mg * kdim
        # pixel sub-tiles of at most qt columns keep the im2col block in L2
        q0 = p[5]
        while q0 < p[6]:
            q1 = min(p[6], q0 + qt)
            nt = q1 - q0
            c0 = 0
            while c0 < cg:
                nch = min(chunk, cg - c0)
                rows = nch * kh * kw
                col = F[cbase:cbase + rows * nt]
                _col_block(F, xb, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, c0, nch, q0, q1, col)
                # out[m, q0:q1] (+)= W[g, m, chunk rows] @ col
                gemm_acc(F, wg + c0 * kh * kw, kdim, 1, cbase - q0, nt, out, ohw, rows, m0, m1, q0, q1,
                         0 if c0 == 0 else 1, cbase + X[d + WIN_LEN + 8])
                c0 += nch
            if epi >= 0:
                ew_run(F, B, I, J, X, R, epi, b * mg + m0, b * mg + m1, q0, q1, sbase)
            q0 = q1


@njit(**_JIT)
def _padded_plane(F, src, H, W, ph, pw, Hp, Wp, P, fill):
    """P[:Hp*Wp] = the H x W plane at F[src:] placed at (ph, pw) in a Hp x Wp field of ``fill``."""
    for q in range(Hp * Wp):
        P[q] = fill
    for ih in range(H):
        r = ih + ph
        if r < 0 or r >= Hp:
            continue
        lo = max(0, -pw)
        hi = min(W, Wp - pw)
        if hi <= lo:
            continue
        row = P[r * Wp + pw + lo:r * Wp + pw + hi]
        inp = F[src + ih * W + lo:src + ih * W + hi]
        for j in range(hi - lo):
            row[j] = inp[j]


@njit(**_JIT)
def k_dwconv(F, B, I, J, X, R, p, sbase):
    """Depthwise convolution (groups == C) of channel planes [c0, c1) of batch items [n0, n1).

    Row: [desc, n0, n1, c0, c1].  Output channel m = c * mult + k reads input
    channel c.  Each input plane is copied once into zero-padded scratch, then
    every kernel tap is one vectorized sweep over the output plane (no bounds
    tests in the inner loop).  Descriptor tail: [w_off, mult, epilogue].
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
    Hp = (OH - 1) * sh + (kh - 1) * dh + 1
    Wp = (OW - 1) * sw + (kw - 1) * dw + 1
    # scratch: the padded plane (plus a row of slack), then the wide output, after the epilogue's registers
    pbase = sbase + X[d + WIN_LEN + 3]
    P = F[pbase:pbase + (Hp + 1) * Wp]
    wide = F[pbase + (Hp + 1) * Wp:pbase + (Hp + 1) * Wp + OH * Wp]
    unit = sh == 1 and sw == 1
    for n in range(p[1], p[2]):
        for c in range(p[3], p[4]):
            _padded_plane(F, X[d + W_X] + (n * C + c) * H * W, H, W, ph, pw, Hp + 1, Wp, P, f32(0.0))
            for k in range(mult):
                m = c * mult + k
                dst = X[d + W_OUT] + (n * M + m) * OH * OW
                out = F[dst:dst + OH * OW]
                wb = w_off + m * kh * kw
                if unit:
                    # Stride 1: compute OH rows of the padded width at once, one
                    # flat sweep per tap; columns past OW are junk, dropped after.
                    for q in range(OH * Wp):
                        wide[q] = f32(0.0)
                    L = OH * Wp
                    for i in range(kh):
                        j = 0
                        # Four taps per sweep: the accumulator is loaded and stored once per four FMAs.
                        while j + 4 <= kw:
                            b0 = i * dh * Wp + j * dw
                            s0 = P[b0:b0 + L]
                            s1 = P[b0 + dw:b0 + dw + L]
                            s2 = P[b0 + 2 * dw:b0 + 2 * dw + L]
                            s3 = P[b0 + 3 * dw:b0 + 3 * dw + L]
                            w0 = F[wb + i * kw + j]
                            w1 = F[wb + i * kw + j + 1]
                            w2 = F[wb + i * kw + j + 2]
                            w3 = F[wb + i * kw + j + 3]
                            for q in range(L):
                                wide[q] += w0 * s0[q] + w1 * s1[q] + w2 * s2[q] + w3 * s3[q]
                            j += 4
                        while j < kw:
                            wv = F[wb + i * kw + j]
                            src = P[i * dh * Wp + j * dw:i * dh * Wp + j * dw + L]
                            for q in range(L):
                                wide[q] += wv * src[q]
                            j += 1
                    for oh in range(OH):
                        orow = out[oh * OW:oh * OW + OW]
                        wrow = wide[oh * Wp:oh * Wp + OW]
                        for ow in range(OW):
                            orow[ow] = wrow[ow]
                    if epi >= 0:
                        ew_run(F, B, I, J, X, R, epi, n * M + m, n * M + m + 1, 0, OH * OW, sbase)
                    continue
                for q in range(OH * OW):
                    out[q] = f32(0.0)
                for i in range(kh):
                    for j in range(kw):
                        wv = F[wb + i * kw + j]
                        for oh in range(OH):
                            orow = out[oh * OW:oh * OW + OW]
                            base = (oh * sh + i * dh) * Wp + j * dw
                            if sw == 1:
                                irow = P[base:base + OW]
                                for ow in range(OW):
                                    orow[ow] += wv * irow[ow]
                            else:
                                for ow in range(OW):
                                    orow[ow] += wv * P[base + ow * sw]
                if epi >= 0:
                    ew_run(F, B, I, J, X, R, epi, n * M + m, n * M + m + 1, 0, OH * OW, sbase)


@njit(**_JIT)
def k_pool(F, B, I, J, X, R, p, sbase):
    """Max (mode 0) or average (mode 1) pooling of planes [q0, q1) (q = n * C + c).

    Row: [desc, q0, q1].  Descriptor tail: [mode, lo_h, hi_h, lo_w, hi_w,
    scratch]: taps whose padded coordinate falls in [lo, hi) count towards
    the average.  Like depthwise convolution: a padded copy of the plane in
    scratch, then one vectorized sweep per tap.
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
    Hp = (OH - 1) * sh + (kh - 1) * dh + 1
    Wp = (OW - 1) * sw + (kw - 1) * dw + 1
    pbase = sbase + X[d + WIN_LEN + 5]
    P = F[pbase:pbase + (Hp + 1) * Wp]
    inv_h = F[pbase + (Hp + 1) * Wp:pbase + (Hp + 1) * Wp + OH]
    inv_w = F[pbase + (Hp + 1) * Wp + OH:pbase + (Hp + 1) * Wp + OH + OW]
    wb0 = pbase + (Hp + 1) * Wp + OH + OW
    wide = F[wb0:wb0 + OH * Wp]
    unit = sh == 1 and sw == 1
    if mode == 1:
        # 1 / (taps counted along each axis): the count is separable.
        for oh in range(OH):
            cnt = 0
            for i in range(kh):
                if lo_h <= oh * sh + i * dh < hi_h:
                    cnt += 1
            inv_h[oh] = f32(1.0) / f32(cnt) if cnt > 0 else f32(np.nan)
        for ow in range(OW):
            cnt = 0
            for j in range(kw):
                if lo_w <= ow * sw + j * dw < hi_w:
                    cnt += 1
            inv_w[ow] = f32(1.0) / f32(cnt) if cnt > 0 else f32(np.nan)
    fill = f32(-np.inf) if mode == 0 else f32(0.0)
    for q in range(p[1], p[2]):
        _padded_plane(F, X[d + W_X] + q * H * W, H, W, ph, pw, Hp + 1, Wp, P, fill)
        dst = X[d + W_OUT] + q * OH * OW
        out = F[dst:dst + OH * OW]
        if unit:
            # Stride 1: flat sweeps over OH rows of the padded width (see k_dwconv).
            for t in range(OH * Wp):
                wide[t] = fill
            for i in range(kh):
                for j in range(kw):
                    src = P[i * dh * Wp + j * dw:i * dh * Wp + j * dw + OH * Wp]
                    if mode == 0:
                        for t in range(OH * Wp):
                            v = src[t]
                            a = wide[t]
                            wide[t] = v if (v > a or v != v) else a
                    else:
                        for t in range(OH * Wp):
                            wide[t] += src[t]
            for oh in range(OH):
                orow = out[oh * OW:oh * OW + OW]
                wrow = wide[oh * Wp:oh * Wp + OW]
                if mode == 0:
                    for ow in range(OW):
                        orow[ow] = wrow[ow]
                else:
                    s = inv_h[oh]
                    for ow in range(OW):
                        orow[ow] = wrow[ow] * (s * inv_w[ow])
            continue
        for t in range(OH * OW):
            out[t] = fill
        for i in range(kh):
            for j in range(kw):
                for oh in range(OH):
                    orow = out[oh * OW:oh * OW + OW]
                    base = (oh * sh + i * dh) * Wp + j * dw
                    if mode == 0:
                        for ow in range(OW):
                            v = P[base + ow * sw]
                            a = orow[ow]
                            orow[ow] = v if (v > a or v != v) else a
                    elif sw == 1:
                        irow = P[base:base + OW]
                        for ow in range(OW):
                            orow[ow] += irow[ow]
                    else:
                        for ow in range(OW):
                            orow[ow] += P[base + ow * sw]
        if mode == 1:
            for oh in range(OH):
                orow = out[oh * OW:oh * OW + OW]
                s = inv_h[oh]
                for ow in range(OW):
                    orow[ow] *= s * inv_w[ow]


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
