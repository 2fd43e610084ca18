"""Depthwise convolution of small planes, channels innermost.

On a 4x4 or 2x2 plane the plane-by-plane kernel of :mod:`.kernels_window`
spends more on setting up each plane than on its nine taps (late MobileNet
and NASNet stages have hundreds of such planes).  Here a block of up to
``CB`` channels is transposed once into a zero-padded channels-last copy in
scratch, and every (output pixel, tap) is one vectorized multiply-add over
the block's channels with the weights stored tap-major ([kh*kw][C], packed
at compile time).  The result is transposed back into NCHW, and the fused
epilogue runs on the finished planes.

Descriptor: the window words of :mod:`.kernels_window`, then
``[w_tapmajor, epilogue, scratch offset]``; scratch holds the padded
channels-last block (Hp x Wp x CB) and a CB-float accumulator.
Row: ``[desc, n0, n1, c0, c1]`` (channel multiplier 1 only).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_ew import ew_epilogue
from .kernels_window import W_OUT, W_X, WIN_LEN, read_window

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

#: Channels per block: 64 floats are four AVX-512 vectors.
CB = 64


def dwcl_scratch(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> int:
    """Float32 scratch elements of one channel block."""
    hp = (OH - 1) * sh + (kh - 1) * dh + 1
    wp = (OW - 1) * sw + (kw - 1) * dw + 1
    return hp * wp * CB + CB


@njit(**_JIT)
def _fma(acc, w, x, n):
    # slices as arguments: plain indexed loads, so LLVM vectorizes the loop
    for c in range(n):
        acc[c] += w[c] * x[c]


@njit(**_JIT)
def _zero(acc, n):
    for c in range(n):
        acc[c] = f32(0.0)


@njit(**_JIT)
def k_dwconv_cl(F, B, I, J, X, R, p, sbase):
    """Depthwise convolution of channels [c0, c1) of batch items [n0, n1), channels innermost."""
    d = p[0]
    C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = read_window(X, d)
    wt = X[d + WIN_LEN]
    epi = X[d + WIN_LEN + 1]
    xp = sbase + X[d + WIN_LEN + 2]
    Hp = (OH - 1) * sh + (kh - 1) * dh + 1
    Wp = (OW - 1) * sw + (kw - 1) * dw + 1
    ao = xp + Hp * Wp * CB
    acc = F[ao:ao + CB]
    hw = H * W
    ohw = OH * OW
    for n in range(p[1], p[2]):
        for cb in range(p[3], p[4], CB):
            nb = min(CB, p[4] - cb)
            src = X[d + W_X] + (n * C + cb) * hw
            for hp in range(Hp):
                ih = hp - ph
                for wp in range(Wp):
                    iw = wp - pw
                    dst = xp + (hp * Wp + wp) * CB
                    if 0 <= ih < H and 0 <= iw < W:
                        s = src + ih * W + iw
                        for c in range(nb):
                            F[np.uint64(dst + c)] = F[np.uint64(s + c * hw)]
                    else:
                        for c in range(nb):
                            F[dst + c] = f32(0.0)
            out = X[d + W_OUT] + (n * C + cb) * ohw
            for oh in range(OH):
                for ow in range(OW):
                    _zero(acc, nb)
                    for i in range(kh):
                        for j in range(kw):
                            xo = xp + ((oh * sh + i * dh) * Wp + ow * sw + j * dw) * CB
                            wo = wt + (i * kw + j) * C + cb
                            _fma(acc, F[wo:wo + nb], F[xo:xo + nb], nb)
                    q = out + oh * OW + ow
                    for c in range(nb):
                        F[np.uint64(q + c * ohw)] = acc[c]
        if epi >= 0:
            ew_epilogue(F, X, R, epi, n * C + p[3], n * C + p[4], 0, ohw, sbase)
