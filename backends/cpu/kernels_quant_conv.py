"""QLinearConv with symmetric int8 weights as the convolution form of the 8-bit micro-kernel
(:func:`.ukernel_int8.ukernel_int8_conv`): output pixels are the tile's rows, output channels its columns.

The input rows a band of output rows reads are copied once into the vEU's scratch as NHWC bytes
(channels padded to a multiple of 4, the window's padding filled with the input's zero point), so
that every tap of every pixel is a run of channels at a known offset: the micro-kernel reads them
where they lie and sums all the taps in its registers.  Nothing is gathered per tap, unlike
:func:`.kernels_quant.k_qconv_int8` (weights as rows, gathered pixel windows as columns), whose
byte-by-byte window gather cost more than its multiply-adds on 3x3 layers.

The weights are int8 with zero point 0 (``quantize_static``'s per-channel weights, onnxruntime's
"symmetric" convolution); with A = x (uint8, or int8 XOR 0x80 = x + 128) and zx' its zero point on that
scale, ``sum (x - zx) * w = D - zx' * colsum(w)``, the column sums computed at compile time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .ukernel_int8 import MR, NR, int8_shift, no_min_byte, pack4_int8, rint_f32, ukernel_int8_conv, ukernel_int8_pw

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64
f32 = np.float32



@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"nnan", "ninf", "nsz"})
def _requantize_rows(J, F, acc, npx, nc, terms, mults, zy, lo, hi, B, stage):
    """stage[q * NR + j] = saturate(rint(float32(J[acc + q * NR + j] + J[terms + j]) * F[mults + j]) + zy)
    for pixel q < npx, channel j < nc: the band's sums requantized along its rows (channels contiguous,
    so the loop vectorizes), as bytes in the same [pixel, channel] order."""
    t = J[_u(terms):_u(terms + nc)]
    m = F[_u(mults):_u(mults + nc)]
    for q in range(npx):
        a = J[_u(acc + q * NR):_u(acc + q * NR + nc)]
        o = B[_u(stage + q * NR):_u(stage + q * NR + nc)]
        for j in range(nc):
            y = rint_f32(f32(np.int32(a[j] + t[j])) * m[j]) + zy
            y = min(max(y, lo), hi)
            o[j] = np.uint8(np.int32(y) & 255)


@njit(**_JIT)
def _store_channels(B, stage, npx, nc, out, plane):
    """out[j * plane + q] = stage[q * NR + j]: the requantized band into NCHW, one channel's pixels
    contiguous."""
    for j in range(nc):
        o = out + j * plane
        for q in range(npx):
            B[_u(o + q)] = B[_u(stage + q * NR + j)]


@njit(**_JIT)
def _fill_band(B, J, x, band, C, H, W, cp, ih0, rows, wp, pl, flip, zfill):
    """band[(r * wp + col) * cp + c] = x[c, ih0 + r, col - pl] ^ flip, or ``zfill`` outside the image
    and for the channels past C.  Written a 4-channel word at a time (``band`` and ``cp`` are multiples of
    4: the word of channels 4g..4g+3 of a pixel is int32 slot ``band / 4 + (r * wp + col) * cp / 4 + g``),
    each word from four contiguous source rows: a quarter of the stores and no byte scatter (the byte
    loop it replaces, a memset of the band then every byte stored on its own, took 1.5-2.2x the time)."""
    cg = cp // 4
    zb = np.uint32(zfill)
    zword = np.int32(zb | (zb << np.uint32(8)) | (zb << np.uint32(16)) | (zb << np.uint32(24)))
    fb = np.uint32(flip)
    fword = fb | (fb << np.uint32(8)) | (fb << np.uint32(16)) | (fb << np.uint32(24))
    col0 = max(0, pl)
    col1 = max(col0, min(wp, W + pl))
    full = C // 4
    for r in range(rows):
        ih = ih0 + r
        row = band // 4 + r * wp * cg
        if ih < 0 or ih >= H or col1 <= col0:
            for e in range(wp * cg):
                J[_u(row + e)] = zword
            continue
        for col in range(col0):
            for g in range(cg):
                J[_u(row + col * cg + g)] = zword
        for col in range(col1, wp):
            for g in range(cg):
                J[_u(row + col * cg + g)] = zword
        for g in range(cg):
            src = x + (4 * g * H + ih) * W - pl  # channel 4g at band column col is B[src + col]
            dst = row + g
            if g < full:
                s1 = src + H * W
                s2 = s1 + H * W
                s3 = s2 + H * W
                for col in range(col0, col1):
                    w = np.uint32(B[_u(src + col)]) | (np.uint32(B[_u(s1 + col)]) << np.uint32(8)) \
                        | (np.uint32(B[_u(s2 + col)]) << np.uint32(16)) | (np.uint32(B[_u(s3 + col)]) << np.uint32(24))
                    J[_u(dst + col * cg)] = np.int32(w ^ fword)
            else:  # the last group, C % 4 channels: the bytes past C are zfill (one loop per count)
                rest = C - 4 * g
                s1 = src + H * W
                s2 = s1 + H * W
                if rest == 1:
                    top = np.uint32(zword) & np.uint32(0xFFFFFF00)
                    for col in range(col0, col1):
                        J[_u(dst + col * cg)] = np.int32(top | (np.uint32(B[_u(src + col)]) ^ fb))
                elif rest == 2:
                    top = np.uint32(zword) & np.uint32(0xFFFF0000)
                    for col in range(col0, col1):
                        w = np.uint32(B[_u(src + col)]) | (np.uint32(B[_u(s1 + col)]) << np.uint32(8))
                        J[_u(dst + col * cg)] = np.int32(top | (w ^ (fword & np.uint32(0xFFFF))))
                else:
                    top = np.uint32(zword) & np.uint32(0xFF000000)
                    for col in range(col0, col1):
                        w = np.uint32(B[_u(src + col)]) | (np.uint32(B[_u(s1 + col)]) << np.uint32(8)) \
                            | (np.uint32(B[_u(s2 + col)]) << np.uint32(16))
                        J[_u(dst + col * cg)] = np.int32(top | (w ^ (fword & np.uint32(0xFFFFFF))))


@njit(**_JIT)
def qconv_nhwc(F, B, J, X, d, t0, t1, sbase):
    """Output rows [t0, t1) of t = image * OH + output row.  Descriptor: [x, packed weights (bytes),
    out, C, H, W, OC, OH, OW, channels padded (cp), KH, KW, sh, sw, dh, dw, pad top, pad left,
    x signed, out signed, x zp (-1), x scale, w scale, w scale per channel, y scale, y zp (-1),
    bias (int32, -1 none), weight column sums (int32 per output channel), output rows per band,
    padded width (wp), int32 slots of the band, int32 slots of its sums, no -128 weight (scratch: the band's bytes,
    its sums, per-channel terms and multipliers, then the requantized bytes)].  The weights are packed
    as a [KH * KW * cp, OC] matrix (row (i * KW + j) * cp + c), :func:`.ukernel_int8.pack_b`."""
    x = X[d]
    wpk = X[d + 1]
    out = X[d + 2]
    C = X[d + 3]
    H = X[d + 4]
    W = X[d + 5]
    OC = X[d + 6]
    OH = X[d + 7]
    OW = X[d + 8]
    cp = X[d + 9]
    KH = X[d + 10]
    KW = X[d + 11]
    sh = X[d + 12]
    sw = X[d + 13]
    dh = X[d + 14]
    dw = X[d + 15]
    pt = X[d + 16]
    pl = X[d + 17]
    x_signed = X[d + 18] != 0
    o_signed = X[d + 19] != 0
    x_zp = X[d + 20]
    bias = X[d + 26]
    colsum = X[d + 27]
    band_rows = X[d + 28]
    wp = X[d + 29]
    band_slots = X[d + 30]
    lo = f32(-128.0) if o_signed else f32(0.0)
    hi = f32(127.0) if o_signed else f32(255.0)
    zx_byte = B[_u(x_zp)] if x_zp >= 0 else np.uint8(0)
    zx = np.int64(zx_byte)
    if x_signed:
        zx = np.int64(np.int8(zx_byte)) + 128
    shift = int8_shift()  # the kernel form's: its sums are D - shift * colsum(w), the shift joins zx's term
    zx -= shift
    # the band holds a' (x, or int8 x ^ 0x80): a form with a shift reads it as int8 a' - 128 = a' ^ 0x80
    flip = np.uint8((128 if x_signed else 0) ^ (128 if shift != 0 else 0))
    zfill = zx_byte ^ flip
    x_scale = F[_u(X[d + 21])]
    y_scale = F[_u(X[d + 24])]
    zy = f32(np.int32(np.int8(B[_u(X[d + 25])])) if o_signed else np.int32(B[_u(X[d + 25])])) \
        if X[d + 25] >= 0 else f32(0.0)
    ntaps = KH * KW
    cg = cp // 4
    plane = OH * OW
    panels = (OC + NR - 1) // NR
    panel_bytes = ntaps * cp * NR
    band = sbase * 4
    acc = sbase + band_slots
    terms = acc + X[d + 31]
    mults = terms + NR
    stage = (mults + NR) * 4
    toff = np.empty(ntaps, np.int64)
    for i in range(KH):
        for j in range(KW):
            toff[i * KW + j] = (i * dh * wp + j * dw) * cp
    poff = np.empty(MR, np.int64)
    known_safe = X[d + 32] != 0  # the lowering found no -128 in the weights
    wsafe = np.empty(panels, np.int64)  # else the weights read once per task, not by every 6-pixel call
    for pnl in range(panels):
        wsafe[pnl] = (1 if known_safe else no_min_byte(B, wpk + pnl * panel_bytes, panel_bytes)) if shift != 0 else 0
    t = t0
    while t < t1:
        n = t // OH
        oh0 = t % OH
        oh1 = min(OH, oh0 + band_rows, oh0 + (t1 - t))
        t += oh1 - oh0
        ih0 = oh0 * sh - pt
        rows_in = (oh1 - 1 - oh0) * sh + (KH - 1) * dh + 1
        _fill_band(B, J, x + n * C * H * W, band, C, H, W, cp, ih0, rows_in, wp, pl, flip, zfill)
        npx = (oh1 - oh0) * OW
        for pnl in range(panels):
            for q0 in range(0, npx, MR):
                nr = min(MR, npx - q0)
                for r in range(nr):
                    q = q0 + r
                    poff[r] = ((q // OW) * sh * wp + (q % OW) * sw) * cp
                ukernel_int8_conv(ntaps, toff, 0, cg, B, band, poff, 0, nr, B, wpk + pnl * panel_bytes, J,
                                  acc + q0 * NR, NR, wsafe[pnl])
            c0 = pnl * NR
            nc = min(NR, OC - c0)
            for j in range(nc):
                oc = c0 + j
                c_oc = -zx * np.int64(J[_u(colsum + oc)])
                if bias >= 0:
                    c_oc += np.int64(J[_u(bias + oc)])
                J[_u(terms + j)] = np.int32(c_oc << 32 >> 32)
                F[_u(mults + j)] = x_scale * F[_u(X[d + 22] + (oc if X[d + 23] != 0 else 0))] / y_scale
            _requantize_rows(J, F, acc, npx, nc, terms, mults, zy, lo, hi, B, stage)
            _store_channels(B, stage, npx, nc, out + (n * OC + c0) * plane + oh0 * OW, plane)
    return 0


@njit(**_JIT)
def qconv_pointwise(F, B, J, X, d, t0, t1, sbase):
    """An unpadded 1x1 QLinearConv with symmetric int8 weights as the GEMM it is, ``y[OC, OH*OW] =
    w[OC, C] x[C, pixels]`` per image, tasks [t0, t1) of t = image * panels + NR-pixel panel.  Each panel is
    interleaved once from the NCHW planes into the micro-kernel's column layout (4 channels of a pixel
    together, unsigned: int8 activations XOR 0x80; at stride 1 by vector shuffles, strided by a gather
    of the panel's pixels), then every MR output channels are one call of
    :func:`.ukernel_int8.ukernel_int8_pw`, which requantizes the tile and stores the bytes in NCHW.
    Nothing is gathered per tap and no column sums are needed: with weights of zero point 0,
    ``sum (x - zx) * w = D - zx' * rowsum(w)``, a constant per output channel (zx' = zx, or zx + 128 for
    int8 activations), folded with the bias into the kernel's row terms.  Descriptor: [x, weights (int8
    rows of kp bytes), out, C, plane, OC, x signed, out signed, x zp (-1), x scale, w scale, w scale per
    channel, y scale, y zp (-1), bias (int32, -1 none), weight row sums (int32), kp, H, W, OW, sh, sw,
    no -128 weight]
    (plane = OH * OW, the output's)."""
    x = X[d]
    wrows = X[d + 1]
    out = X[d + 2]
    C = X[d + 3]
    plane = X[d + 4]
    OC = X[d + 5]
    x_signed = X[d + 6] != 0
    o_signed = X[d + 7] != 0
    x_zp = X[d + 8]
    bias = X[d + 14]
    rowsum = X[d + 15]
    kp = X[d + 16]
    H = X[d + 17]
    W = X[d + 18]
    OW = X[d + 19]
    sh = X[d + 20]
    sw = X[d + 21]
    strided = sh != 1 or sw != 1
    k4 = kp // 4
    full4 = C // 4
    zx_byte = B[_u(x_zp)] if x_zp >= 0 else np.uint8(0)
    zx = np.int64(zx_byte)
    if x_signed:
        zx = np.int64(np.int8(zx_byte)) + 128
    flip = 128 if x_signed else 0
    shift = int8_shift()  # the kernel form's: its sums are D - shift * rowsum(w), the shift joins zx's term
    zx -= shift
    x_scale = F[_u(X[d + 9])]
    y_scale = F[_u(X[d + 12])]
    panels = (plane + NR - 1) // NR
    pan = sbase * 4
    stage = pan + kp * NR
    terms = sbase + (kp * NR + MR * NR) // 4
    mults = terms + OC
    params = mults + OC
    F[_u(params)] = f32(np.int32(np.int8(B[_u(X[d + 13])])) if o_signed else np.int32(B[_u(X[d + 13])])) \
        if X[d + 13] >= 0 else f32(0.0)
    F[_u(params + 1)] = f32(-128.0) if o_signed else f32(0.0)
    F[_u(params + 2)] = f32(127.0) if o_signed else f32(255.0)
    for oc in range(OC):
        c_oc = -zx * np.int64(J[_u(rowsum + oc)])
        if bias >= 0:
            c_oc += np.int64(J[_u(bias + oc)])
        J[_u(terms + oc)] = np.int32(c_oc << 32 >> 32)
        F[_u(mults + oc)] = x_scale * F[_u(X[d + 10] + (oc if X[d + 11] != 0 else 0))] / y_scale
    pix = np.empty(NR, np.int64)
    # once per task, not by every call; not at all when the lowering found no -128 in the weights
    wsafe = (1 if X[d + 22] != 0 else no_min_byte(B, wrows, OC * kp)) if shift != 0 else 0
    for t in range(t0, t1):
        n = t // panels
        p0 = (t % panels) * NR
        npx = min(NR, plane - p0)
        if strided:
            for q in range(npx):
                pix[q] = ((p0 + q) // OW) * sh * W + ((p0 + q) % OW) * sw
            src = x + n * C * H * W
            for k in range(kp):
                dst = pan + (k // 4) * NR * 4 + (k % 4)
                if k < C:
                    s = src + k * H * W
                    for q in range(npx):
                        B[_u(dst + q * 4)] = B[_u(s + pix[q])] ^ flip
                else:
                    for q in range(npx):
                        B[_u(dst + q * 4)] = 0
            k_first = kp
        elif npx == NR:
            src = x + n * C * plane + p0
            pack4_int8(B, src, plane, full4, B, pan, flip)
            k_first = full4 * 4
        else:
            src = x + n * C * plane + p0
            k_first = 0
        for k in range(k_first, kp):  # the channels past the last group of 4 (zeros past C), or a short panel
            dst = pan + (k // 4) * NR * 4 + (k % 4)
            if k < C:
                s = src + k * plane
                for q in range(npx):
                    B[_u(dst + q * 4)] = B[_u(s + q)] ^ flip
            else:
                for q in range(npx):
                    B[_u(dst + q * 4)] = 0
        obase = out + n * OC * plane + p0
        for oc0 in range(0, OC, MR):
            nr = min(MR, OC - oc0)
            if npx == NR:
                ukernel_int8_pw(k4, B, wrows + oc0 * kp, kp, nr, B, pan, J, terms + oc0, F, mults + oc0, F, params,
                                B, obase + oc0 * plane, plane, wsafe)
            else:
                ukernel_int8_pw(k4, B, wrows + oc0 * kp, kp, nr, B, pan, J, terms + oc0, F, mults + oc0, F, params,
                                B, stage, NR, wsafe)
                for r in range(nr):
                    o = obase + (oc0 + r) * plane
                    for q in range(npx):
                        B[_u(o + q)] = B[_u(stage + r * NR + q)]
    return 0
