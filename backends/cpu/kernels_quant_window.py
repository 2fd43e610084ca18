"""QLinearConv (2-D, not depthwise) on the 8-bit micro-kernels: :func:`k_qconv_int8`, whose own form
gathers the pixel windows into the GEMM kernel's column panels (weights as rows), and which dispatches to
the NHWC and pointwise forms of :mod:`.kernels_quant_conv`.  Moved out of :mod:`.kernels_quant` (which
re-exports it) to keep that module to its element-wise and matrix kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_quant_conv import qconv_nhwc, qconv_pointwise
from .ukernel_int8 import MR, NR, int8_shift, rint_f32, ukernel_int8

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64
f32 = np.float32


@njit(**_JIT)
def _byte(B, at, signed):
    """The 8-bit element at byte ``at`` as int32 (sign-extended when ``signed``; as :mod:`.kernels_quant`'s)."""
    v = np.int32(B[_u(at)])
    if signed and v > 127:
        v -= 256
    return v


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"nnan", "ninf", "nsz"})
def _requantize_run(J, acc, colsum, zw, c, mult, zy, lo, hi, B, out, n):
    """B[out + q] = saturate(rint(float32(J[acc + q] - zw * J[colsum + q] + c) * mult) + zy) to [lo, hi]
    for q < n: one row of a conv tile's requantizing store, wrapping in int32 as the spec's accumulation."""
    a = J[_u(acc):_u(acc + n)]
    s = J[_u(colsum):_u(colsum + n)]
    o = B[_u(out):_u(out + n)]
    for q in range(n):
        v = a[q] - zw * s[q] + c
        y = rint_f32(f32(np.int32(v)) * mult) + zy
        y = min(max(y, lo), hi)
        o[q] = np.uint8(np.int32(y) & 255)


@njit(**_JIT)
def k_qconv_int8(F, B, I, J, X, R, p, sbase):
    """QLinearConv (2-D, not depthwise) as an 8-bit GEMM per group against weights prepared at compile
    time: output channels are the micro-kernel's rows (A: each channel's ``K = cin per group * kh * kw``
    weights as uint8, ``w + 128`` for int8, rows padded with zeros to ``Kp``, a multiple of 4), panels of
    NR output pixels its columns (B: the pixels' input windows gathered at run time into the kernel's
    layout, 4 consecutive k of a pixel together, as int8: ``x - 128`` for uint8).  Tasks [t0, t1) of
    t = ((image * groups + group) * pixel panels + panel) * channel chunks + chunk.  Row: [desc, t0, t1].
    Descriptor: :func:`k_qlinearconv`'s 31 values (the weight's offset that of A, whose row OC holds
    K ones: the micro-kernel sums B's columns with it), then [A's row sums (int32 per output channel),
    groups, channel chunks, output channels per chunk].

    With zw' = zw + 128 [w int8] and zx' = zx - 128 [x uint8], ``sum (w - zw)(x - zx) = D - zx' *
    rowsum(A) - zw' * colsum(B) + K * zw' * zx'``; taps outside the image read x's zero point (they add
    nothing).  The bias is added and the result requantized as the tile is stored, NR pixels of one
    channel contiguous (NCHW).

    A descriptor whose first value is -1 is the other form, :func:`.kernels_quant_conv.qconv_nhwc`
    (symmetric int8 weights, group 1), its values after the -1; tasks are then output rows.  One
    starting with -2 is :func:`.kernels_quant_conv.qconv_pointwise` (unpadded 1x1, symmetric int8
    weights, group 1); tasks are then NR-pixel panels."""
    d = p[0]
    if X[d] == -1:
        return qconv_nhwc(F, B, J, X, d + 1, p[1], p[2], sbase)
    if X[d] == -2:
        return qconv_pointwise(F, B, J, X, d + 1, p[1], p[2], sbase)
    x = X[d]
    wa = X[d + 1]
    out = X[d + 2]
    C = X[d + 3]
    H = X[d + 4]
    W = X[d + 5]
    OC = X[d + 6]
    OH = X[d + 7]
    OW = X[d + 8]
    cpg = X[d + 9]
    opg = X[d + 10]
    KH = X[d + 11]
    KW = X[d + 12]
    sh = X[d + 13]
    sw = X[d + 14]
    dh = X[d + 15]
    dw = X[d + 16]
    pt = X[d + 17]
    pl = X[d + 18]
    x_signed = X[d + 19] != 0
    w_signed = X[d + 20] != 0
    o_signed = X[d + 21] != 0
    x_zp = X[d + 22]
    w_zp = X[d + 23]
    w_zp_ch = X[d + 24] != 0
    bias = X[d + 30]
    rowsum = X[d + 31]
    groups = X[d + 32]
    chunks = X[d + 33]
    per_chunk = X[d + 34]
    lo = f32(-128.0) if o_signed else f32(0.0)
    hi = f32(127.0) if o_signed else f32(255.0)
    zx_byte = B[_u(x_zp)] if x_zp >= 0 else np.uint8(0)
    zx = np.int64(_byte(B, x_zp, x_signed)) if x_zp >= 0 else np.int64(0)
    zx_shifted = zx if x_signed else zx - 128
    flip = np.uint8(0) if x_signed else np.uint8(128)
    shift = int8_shift()  # the micro-kernel form's: its sums are D - shift * colsum(B)
    K = cpg * KH * KW
    kp = ((K + 3) // 4) * 4
    k4 = kp // 4
    plane = OH * OW
    ppanels = (plane + NR - 1) // NR
    pointwise = KH == 1 and KW == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0 and OH == H and OW == W
    bpan = sbase * 4  # the gathered panel, bytes
    colsum = sbase + kp * NR // 4
    tile = colsum + NR
    x_scale = F[_u(X[d + 25])]
    y_scale = F[_u(X[d + 28])]
    zy = f32(_byte(B, X[d + 29], o_signed)) if X[d + 29] >= 0 else f32(0.0)
    packed_for = -1
    # output columns [col_lo, col_hi) read inside the image, per kernel column; a panel's row segments
    col_lo = np.zeros(KW, np.int64)
    col_hi = np.zeros(KW, np.int64)
    for jj in range(KW):
        off = jj * dw - pl
        col_lo[jj] = (-off + sw - 1) // sw if off < 0 else 0
        col_hi[jj] = (W - 1 - off) // sw + 1 if W - 1 - off >= 0 else 0
    seg_q = np.zeros(NR + 1, np.int64)
    seg_oh = np.zeros(NR + 1, np.int64)
    seg_ow = np.zeros(NR + 1, np.int64)
    seg_end = np.zeros(NR + 1, np.int64)
    for t in range(p[1], p[2]):
        chunk = t % chunks
        pan = t // chunks
        panel = pan % ppanels
        ng = pan // ppanels
        g = ng % groups
        n = ng // groups
        p0 = panel * NR
        npx = min(NR, plane - p0)
        if pan != packed_for:  # consecutive chunks of one panel share its gathering
            packed_for = pan
            # (pixels past the plane are left as they are: columns past the plane are not stored; k
            # past K is zeroed: A's padding is zero, but a form that sums (a' - shift) * b reads it as
            # -shift)
            for k in range(K, kp):
                dst = bpan + (k // 4) * NR * 4 + (k % 4)
                for q in range(NR):
                    B[_u(dst + q * 4)] = 0
            xg = x + (n * C + g * cpg) * H * W
            if pointwise:  # k is the channel: 4 input planes interleaved, one loop per group of 4
                for k0 in range(0, K - 3, 4):
                    s0 = xg + k0 * H * W + p0
                    dst = bpan + (k0 // 4) * NR * 4
                    for q in range(npx):
                        B[_u(dst + q * 4)] = B[_u(s0 + q)] ^ flip
                        B[_u(dst + q * 4 + 1)] = B[_u(s0 + H * W + q)] ^ flip
                        B[_u(dst + q * 4 + 2)] = B[_u(s0 + 2 * H * W + q)] ^ flip
                        B[_u(dst + q * 4 + 3)] = B[_u(s0 + 3 * H * W + q)] ^ flip
                for k in range(K - K % 4, K):
                    src = xg + k * H * W + p0
                    dst = bpan + (k // 4) * NR * 4 + (k % 4)
                    for q in range(npx):
                        B[_u(dst + q * 4)] = B[_u(src + q)] ^ flip
            else:  # per k, the panel's pixels row by row: one bounds check per row, branch-free runs
                # The panel's row segments once per panel and each kernel column's in-image output
                # columns once per call: the k loop below does no division (they cost as much as the
                # copies they located).
                zfill = zx_byte ^ flip
                nseg = 0
                q = 0
                while q < npx:
                    ow_first = (p0 + q) % OW
                    seg_q[nseg] = q
                    seg_oh[nseg] = (p0 + q) // OW
                    seg_ow[nseg] = ow_first
                    seg_end[nseg] = ow_first + min(npx - q, OW - ow_first)
                    q += seg_end[nseg] - ow_first
                    nseg += 1
                for ci in range(cpg):
                    xplane = xg + ci * H * W
                    for i in range(KH):
                        for jj in range(KW):
                            k = (ci * KH + i) * KW + jj
                            dst = bpan + (k // 4) * NR * 4 + (k % 4)
                            off = jj * dw - pl  # input column of output column ow: ow * sw + off
                            for sgi in range(nseg):
                                ow_first = seg_ow[sgi]
                                ow_end = seg_end[sgi]
                                ih = seg_oh[sgi] * sh - pt + i * dh
                                a0 = max(col_lo[jj], ow_first)
                                a1 = min(col_hi[jj], ow_end)
                                if ih < 0 or ih >= H or a1 <= a0:
                                    a0 = a1 = ow_first
                                base = dst + (seg_q[sgi] - ow_first) * 4
                                for ow in range(ow_first, a0):
                                    B[_u(base + ow * 4)] = zfill
                                src = xplane + ih * W + off
                                for ow in range(a0, a1):
                                    B[_u(base + ow * 4)] = B[_u(src + ow * sw)] ^ flip
                                for ow in range(a1, ow_end):
                                    B[_u(base + ow * 4)] = zfill
            # the panel's column sums by the micro-kernel: A's row past the last channel is K ones,
            # whose sums are (1 - shift) * colsum (exact: at most 127 * 128 * K in magnitude)
            ukernel_int8(k4, B, wa + OC * kp, kp, 1, 0, B, bpan, J, tile, NR, 0)
            for q in range(NR):
                J[_u(colsum + q)] = np.int32(np.int64(J[_u(tile + q)]) // (1 - shift))
        oc_lo = g * opg + chunk * per_chunk
        oc_hi = min(g * opg + opg, oc_lo + per_chunk)
        for oc0 in range(oc_lo, oc_hi, MR):
            nr = min(MR, oc_hi - oc0)
            ukernel_int8(k4, B, wa + oc0 * kp, kp, nr, 0, B, bpan, J, tile, NR, 0)  # B: the activations
            for r in range(nr):
                oc = oc0 + r
                zw = np.int64(_byte(B, w_zp + (oc if w_zp_ch else 0), w_signed)) if w_zp >= 0 else np.int64(0)
                if w_signed:
                    zw += 128
                zw_kernel = zw - shift  # the tile holds D - shift * colsum: D - zw * colsum = tile - zw_kernel * colsum
                c_oc = K * zw * zx_shifted - zx_shifted * np.int64(J[_u(rowsum + oc)])
                if bias >= 0:
                    c_oc += np.int64(J[_u(bias + oc)])
                mult = x_scale * F[_u(X[d + 26] + (oc if X[d + 27] != 0 else 0))] / y_scale
                obase = out + (n * OC + oc) * plane + p0
                trow = tile + r * NR
                _requantize_run(J, trow, colsum, np.int32(zw_kernel), np.int32(np.int64(c_oc) << 32 >> 32), mult, zy,
                                lo, hi, B, obase, npx)
    return 0
