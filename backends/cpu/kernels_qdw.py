"""Depthwise QLinearConv (one input and one output channel per group) through float32 window sweeps.

An 8-bit depthwise tap sum is small: each product ``(x - x_zp) * (w - w_zp)`` is an integer of magnitude
at most 255 * 255, so up to 258 taps sum to less than 2**24 and every partial sum is exact in float32,
fused multiply-adds included.  So the plane is widened once to float32 (``x - x_zp``), swept in float32
by the direct sweeps of :mod:`.kernels_window` (LLVM, every tap of a block of output rows in vector
registers) with the weights ``w - w_zp`` prepared as float32 at compile time, and the exact integer sum is then
requantized as :func:`.kernels_quant.k_qlinearconv` does (int32 bias added, ``rint(acc * x_s * w_s / y_s)
+ y_zp``, saturated): the same bytes as the integer plane kernel.

Every widening and requantizing loop runs over slices in float32 / int32 (``rint`` as
:func:`.ukernel_int8.rint_f32`), so that LLVM vectorizes it: numba's int32 + int32 is an int64,
int32 - float32 a float64 and ``np.rint`` of a float32 a call per element, each of which had kept the
first form of these loops scalar (widening and requantizing cost twice the sweep).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_quant import _byte
from .kernels_window import direct_sweep
from .ukernel_int8 import rint_f32

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64
f32 = np.float32
_INF = f32(np.inf)

#: Most taps whose 8-bit products still sum exactly in float32 (255 * 255 * 258 < 2**24).
MAX_EXACT_TAPS = 258
#: A bias of at most this magnitude added to an exact sum (|sum| < 2**24) stays inside int32, so the
#: requantizing loop adds in int32 (vectorized); a larger one takes the int64 loop.
_BIAS_INT32_SAFE = 2**31 - 2**24 - 1


def qdw_scratch(H: int, W: int, OH: int, OW: int) -> int:
    """Float32 scratch slots :func:`k_qdwconv` needs: the widened plane and the output plane's sums."""
    return H * W + OH * OW + 64


@njit(**_JIT)
def _widen(B, src, n, signed, zx, F, dst):
    """F[dst:dst + n] = float32(byte - zx) of the bytes at B[src:] (int8 when ``signed``); zx a float32
    integer, so every value is exact."""
    a = B[_u(src):_u(src + n)]
    o = F[_u(dst):_u(dst + n)]
    if signed:
        for t in range(n):
            o[t] = f32(np.int8(a[t])) - zx
    else:
        for t in range(n):
            o[t] = f32(a[t]) - zx


@njit(**_JIT)
def _requantize(F, acc, n, b0, mult, zy, lo, hi, B, dst):
    """B[dst:dst + n] = saturate(rint(float32(int32(acc) + b0) * mult) + zy) to [lo, hi], the sum in int32
    (the caller checked that it cannot overflow)."""
    a = F[_u(acc):_u(acc + n)]
    o = B[_u(dst):_u(dst + n)]
    for t in range(n):
        s = np.int32(np.int32(a[t]) + b0)
        v = min(max(rint_f32(f32(s) * mult) + zy, lo), hi)
        o[t] = np.int32(v) & 255


@njit(**_JIT)
def _requantize_wide(F, acc, n, b0, mult, zy, lo, hi, B, dst):
    """As :func:`_requantize` with the sum in int64 (a bias near the int32 limits)."""
    for t in range(n):
        v = np.rint(f32(np.int64(F[_u(acc + t)]) + np.int64(b0)) * mult) + zy
        v = min(max(v, lo), hi)
        B[_u(dst + t)] = np.int32(v) & 255


@njit(**_JIT)
def _store_sums(F, acc, n, b0, mult, zy, lo, hi, B, dst):
    if abs(np.int64(b0)) <= _BIAS_INT32_SAFE:
        _requantize(F, acc, n, b0, mult, zy, lo, hi, B, dst)
    else:
        _requantize_wide(F, acc, n, b0, mult, zy, lo, hi, B, dst)


@njit(**_JIT)
def k_qdwconv(F, B, I, J, X, R, p, sbase):
    """Depthwise QLinearConv (2-D, C == OC == group, a k x k window at equal strides that
    :func:`.kernels_window.direct_fits`) of planes [q0, q1) of (image, channel).  Row: [desc, q0, q1].
    Descriptor: [x, wf, out, C, H, W, OH, OW, k, stride, pad top, pad left, x signed, out signed, x zp
    (-1 none), x scale, w scale, w scale per channel, y scale, y zp (-1 none), bias (int32, -1 none)];
    ``wf`` the float32 weights ``w - w_zp``, k * k per channel.  Scratch: :func:`qdw_scratch`."""
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
    zx = f32(_byte(B, x_zp, x_signed)) if x_zp >= 0 else f32(0.0)
    zy = f32(_byte(B, y_zp, o_signed)) if y_zp >= 0 else f32(0.0)
    lo = f32(-128.0) if o_signed else f32(0.0)
    hi = f32(127.0) if o_signed else f32(255.0)
    plane_in = H * W
    plane_out = OH * OW
    xin = sbase
    acc = sbase + plane_in
    for q in range(p[1], p[2]):
        c = q % C
        mult = F[_u(x_scale)] * F[_u(w_scale + (c if w_scale_ch else 0))] / F[_u(y_scale)]
        b0 = J[_u(bias + c)] if bias >= 0 else np.int32(0)
        _widen(B, x + q * plane_in, plane_in, x_signed, zx, F, xin)
        direct_sweep(False, k, stride, F, xin, H, W, pt, pl, wf + c * k * k, OH, OW, acc, f32(0.0), -_INF, _INF)
        _store_sums(F, acc, plane_out, b0, mult, zy, lo, hi, B, out + q * plane_out)
    return 0
