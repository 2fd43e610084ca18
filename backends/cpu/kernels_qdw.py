"""Depthwise QLinearConv (one input and one output channel per group) through the float window sweeps.

An 8-bit depthwise tap sum is small: each product ``(x - x_zp) * (w - w_zp)`` is an integer of magnitude
at most 255 * 255, so up to 258 taps sum to less than 2**24 and every partial sum is exact in float32,
fused multiply-adds included.  So the plane is widened once to float32 (``x - x_zp``), swept by the
float depthwise kernels of :mod:`.kernels_window` (LLVM, the accumulator in registers across all taps)
with the weights ``w - w_zp`` prepared as float32 at compile time, and the exact integer sum is then
requantized as :func:`.kernels_quant.k_qlinearconv` does (int32 bias added, ``rint(acc * x_s * w_s / y_s)
+ y_zp``, saturated): the same bytes as the integer plane kernel, at the float kernel's speed (the plane
kernel adds one tap at a time over int32 rows in memory: 9 passes over the accumulator for a 3x3).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_quant import _byte
from .kernels_window import direct_sweep

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64
f32 = np.float32
_INF = f32(np.inf)

#: Most taps whose 8-bit products still sum exactly in float32 (255 * 255 * 258 < 2**24).
MAX_EXACT_TAPS = 258


@njit(**_JIT)
def _widen_plane(B, src, n, signed, zx, F, dst):
    """F[dst:dst + n] = float32(byte - zx) of the bytes at B[src:] (int8 when ``signed``)."""
    if signed:
        for t in range(n):
            F[_u(dst + t)] = f32(np.int32(np.int8(B[_u(src + t)])) - zx)
    else:
        for t in range(n):
            F[_u(dst + t)] = f32(np.int32(B[_u(src + t)]) - zx)


@njit(**_JIT)
def _requantize_plane(F, acc, n, J, bias, b_at, mult, zy, lo, hi, B, dst):
    """B[dst:dst + n] = saturate(rint(float32(int32(acc) + bias) * mult) + zy) to [lo, hi]."""
    b0 = J[_u(b_at)] if bias else np.int32(0)
    for t in range(n):
        v = np.rint(f32(np.int32(F[_u(acc + t)]) + b0) * mult) + zy
        v = min(max(v, lo), hi)
        B[_u(dst + t)] = np.int32(v) & 255


@njit(**_JIT)
def k_qdwconv(F, B, I, J, X, R, p, sbase):
    """Depthwise QLinearConv (2-D, C == OC == group, a k x k window at equal strides that
    :func:`.kernels_window.direct_fits`) of planes [q0, q1) of (image, channel).  Row: [desc, q0, q1].
    Descriptor: [x, wf, out, C, H, W, OH, OW, k, stride, pad top, pad left, x signed, out signed, x zp
    (-1 none), x scale, w scale, w scale per channel, y scale, y zp (-1 none), bias (int32, -1 none)];
    ``wf`` the float32 weights ``w - w_zp``, k * k per channel.  Scratch: the widened input plane
    (H * W floats), then the output plane's sums."""
    d = p[0]
    x = X[d]
    wf = X[d + 1]
    out = X[d + 2]
    C = X[d + 3]
    H = X[d + 4]
    W = X[d + 5]
    OH = X[d + 6]
    OW = X[d + 7]
    k = X[d + 8]
    stride = X[d + 9]
    pt = X[d + 10]
    pl = X[d + 11]
    x_signed = X[d + 12] != 0
    o_signed = X[d + 13] != 0
    x_zp = X[d + 14]
    x_scale = X[d + 15]
    w_scale = X[d + 16]
    w_scale_ch = X[d + 17] != 0
    y_scale = X[d + 18]
    y_zp = X[d + 19]
    bias = X[d + 20]
    zx = _byte(B, x_zp, x_signed) if x_zp >= 0 else np.int32(0)
    zy = f32(_byte(B, y_zp, o_signed)) if y_zp >= 0 else f32(0.0)
    lo = f32(-128.0) if o_signed else f32(0.0)
    hi = f32(127.0) if o_signed else f32(255.0)
    plane_in = H * W
    plane_out = OH * OW
    xin = sbase
    acc = sbase + plane_in
    for q in range(p[1], p[2]):
        c = q % C
        _widen_plane(B, x + q * plane_in, plane_in, x_signed, zx, F, xin)
        direct_sweep(False, k, stride, F, xin, H, W, pt, pl, wf + c * k * k, OH, OW, acc, f32(0.0), -_INF, _INF)
        mult = F[_u(x_scale)] * F[_u(w_scale + (c if w_scale_ch else 0))] / F[_u(y_scale)]
        _requantize_plane(F, acc, plane_out, J, bias >= 0, bias + c, mult, zy, lo, hi, B, out + q * plane_out)
    return 0
