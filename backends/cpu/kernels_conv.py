"""Implicit-GEMM convolution: no column matrix, weights packed at compile time.

A convolution of block b = (image n, group g) is the GEMM
``out[m, q] = sum_k W[g, m, k] col[k, q]`` with ``k = (c, i, j)`` (input
channel, kernel row, kernel column) and ``q`` an output pixel.  Where the
im2col path writes the whole ``col`` to the arena and then packs it again
for the micro-kernel, this kernel gathers ``col`` straight from the input
into the micro-kernel's packed B layout, one KC x NC panel at a time in the
vEU's scratch (L2-sized), and multiplies it with the weights, which the
lowering packed once at compile time into the A-panel layout the micro-kernel
reads (:func:`pack_weights`):

    per group g, per K block [pc, pc + kc), per MR-row panel mp:
        kc x MR floats, element (k, r) = W[g, mp * MR + r, pc + k] (0 past mg),
    at offset ``g * Mpad * K + pc * Mpad + mp * MR * kc``  (Mpad = mg rounded up to MR).

Descriptor (int64 side table), after the shared window words of
:mod:`.kernels_nn` (x, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, out)::

    [groups, cg, mg, w_packed, Mpad, KC, NC, epilogue, panel_scratch]

Task row: ``[desc, b0, b1, m0, m1, q0, q1]`` with m0 a multiple of MR.
"""

from __future__ import annotations

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

import numpy as np
from numba import njit

from .kernels_ew import ew_run
from .kernels_nn import W_C, W_DH, W_DW, W_H, W_KH, W_KW, W_OH, W_OUT, W_OW, W_PH, W_PW, W_SH, W_SW, W_W, W_X, \
    WIN_LEN
from .ukernel import MR, NR, ukernel

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

(C_GROUPS, C_CG, C_MG, C_WPACK, C_MPAD, C_KC, C_NC, C_EPI, C_PANEL) = range(WIN_LEN, WIN_LEN + 9)


def pack_weights(w: np.ndarray, groups: int, kc: int) -> np.ndarray:
    """Weights [M, Cg, kh, kw] in the A-panel layout above (K blocks of ``kc``)."""
    m = w.shape[0]
    mg = m // groups
    k = int(np.prod(w.shape[1:]))
    mpad = -(-mg // MR) * MR
    flat = np.zeros((groups, mpad, k), np.float32)
    flat[:, :mg] = np.asarray(w, np.float32).reshape(groups, mg, k)
    out = np.empty(groups * mpad * k, np.float32)
    pos = 0
    for g in range(groups):
        for pc in range(0, k, kc):
            blk = flat[g, :, pc:pc + kc]  # mpad x kcb
            kcb = blk.shape[1]
            # panels of MR rows, each stored k-major: (panel, k, r)
            panels = blk.reshape(mpad // MR, MR, kcb).transpose(0, 2, 1)
            out[pos:pos + mpad * kcb] = panels.reshape(-1)
            pos += mpad * kcb
    return out


@njit(**_JIT)
def _gather_panel(F, xb, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, p0, kc, q0, nc, pb):
    """F[pb + jp*kc*NR + k*NR + t] = col[p0 + k, q0 + jp*NR + t] for the nc pixels from q0.

    ``col[(c*kh + i)*kw + j, oh*OW + ow] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]``
    (0 outside the input).  Pixels are walked in runs that stay inside one
    output row and one NR panel, so each run is one contiguous copy when the
    stride is 1.  Columns past nc in the last panel are left as they are:
    their products only reach the discarded part of an edge tile.
    """
    taps = kh * kw
    hw = H * W
    qe = q0 + nc
    pointwise = taps == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 and OW == W
    for k in range(kc):
        r = p0 + k
        c = r // taps
        t = r - c * taps
        i = t // kw
        j = t - i * kw
        src = xb + c * hw
        row = pb + k * NR
        if pointwise:
            # a 1x1 stride-1 convolution: col row k is the input plane itself
            q = q0
            while q < qe:
                rel = q - q0
                jp = rel // NR
                jj = rel - jp * NR
                run = min(qe - q, NR - jj)
                dst = F[row + jp * kc * NR + jj:row + jp * kc * NR + jj + run]
                inp = F[src + q:src + q + run]
                for u in range(run):
                    dst[u] = inp[u]
                q += run
            continue
        q = q0
        oh = q0 // OW
        ow = q0 - oh * OW
        while q < qe:
            rel = q - q0
            jp = rel // NR
            jj = rel - jp * NR
            run = min(qe - q, OW - ow, NR - jj)
            dst = F[row + jp * kc * NR + jj:row + jp * kc * NR + jj + run]
            ih = oh * sh - ph + i * dh
            if ih < 0 or ih >= H:
                for u in range(run):
                    dst[u] = f32(0.0)
            elif sw == 1:
                # input column of ow is ow - pw + j*dw; valid where it lies in [0, W)
                shift = j * dw - pw
                lo = min(max(-shift, ow), ow + run)
                hi = max(min(W - shift, ow + run), lo)
                for u in range(lo - ow):
                    dst[u] = f32(0.0)
                base = src + ih * W + shift
                inp = F[base + lo:base + hi]
                for u in range(hi - lo):
                    dst[lo - ow + u] = inp[u]
                for u in range(hi - ow, run):
                    dst[u] = f32(0.0)
            else:
                rowbase = src + ih * W
                for u in range(run):
                    iw = (ow + u) * sw - pw + j * dw
                    dst[u] = F[rowbase + iw] if 0 <= iw < W else f32(0.0)
            q += run
            ow += run
            if ow == OW:
                ow = 0
                oh += 1


@njit(**_JIT)
def k_convp(F, B, I, J, X, R, p, sbase):
    """Convolution tile: output channels [m0, m1) x pixels [q0, q1) of blocks [b0, b1)."""
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
    groups = X[d + C_GROUPS]
    cg = X[d + C_CG]
    mg = X[d + C_MG]
    wpack = X[d + C_WPACK]
    mpad = X[d + C_MPAD]
    KC = X[d + C_KC]
    NC = X[d + C_NC]
    epi = X[d + C_EPI]
    pb = sbase + X[d + C_PANEL]
    pt = pb + KC * ((NC + NR - 1) // NR) * NR
    tile = F[pt:pt + MR * NR]
    m0 = p[3]
    m1 = p[4]
    ohw = OH * OW
    K = cg * kh * kw
    M = groups * mg
    for b in range(p[1], p[2]):
        n = b // groups
        g = b - n * groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        out = X[d + W_OUT] + (n * M + g * mg) * ohw
        wg = wpack + g * mpad * K
        qc = p[5]
        while qc < p[6]:
            nc = min(NC, p[6] - qc)
            pc = 0
            while pc < K:
                kc = min(KC, K - pc)
                _gather_panel(F, xb, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, pc, kc, qc, nc, pb)
                first = pc == 0
                for ir in range(m0, m1, MR):
                    rows = min(MR, m1 - ir)
                    a = wg + pc * mpad + ir * kc
                    for jr in range(0, nc, NR):
                        cols = min(NR, nc - jr)
                        cp = out + ir * ohw + qc + jr
                        if rows == MR and cols == NR:
                            ukernel(kc, F, a, F, pb + jr * kc, F, cp, ohw, 0 if first else 1)
                        else:
                            ukernel(kc, F, a, F, pb + jr * kc, F, pt, NR, 0)
                            for r in range(rows):
                                crow = F[cp + r * ohw:cp + r * ohw + cols]
                                trow = tile[r * NR:r * NR + cols]
                                if first:
                                    for u in range(cols):
                                        crow[u] = trow[u]
                                else:
                                    for u in range(cols):
                                        crow[u] += trow[u]
                pc += kc
            if epi >= 0:
                ew_run(F, B, I, J, X, R, epi, b * mg + m0, b * mg + m1, qc, qc + nc, sbase)
            qc += nc
