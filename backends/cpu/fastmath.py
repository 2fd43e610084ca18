"""Scalar float32 math that LLVM can vectorize.

numba lowers ``math.exp`` and friends to libm calls, which LLVM cannot turn
into SIMD code; an LSTM cell spends most of its elementwise time in sigmoid
and tanh.  These functions use only arithmetic, selects and bit casts, so a
loop over them vectorizes (AVX2/AVX-512).  Accuracy is ~1e-7 relative (a few
float32 ulps), far inside the backend's 1e-4 tolerance; NaN and +-Inf
propagate as in numpy.

All functions are ``inline='always'`` so that they disappear into the
caller's loop.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

f32 = np.float32


@intrinsic
def float_bits(typingctx, x):
    """The IEEE-754 bits of a float32, as an int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(x), codegen


@intrinsic
def bits_float(typingctx, x):
    """The float32 whose bits are the low 32 bits of ``x``."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        if v.type.width > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif v.type.width < 32:
            v = builder.zext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(x), codegen


_MAGIC = f32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer in the low mantissa bits
_LOG2E = f32(1.4426950408889634)
_LN2_HI = f32(0.693145751953125)
_LN2_LO = f32(1.428606765330187e-06)


_SHIFT = f32(44.3614195558365)  # 64 ln 2
_TWO_M64 = f32(5.421010862427522e-20)  # 2**-64


@njit(inline="always", error_model="numpy")
def exp32(x):
    """e**x: range reduction x = n ln2 + r, a degree-7 polynomial for e**r, 2**n from bits.

    Below -87 the result is subnormal: compute e**(x + 64 ln2) and scale by
    2**-64 afterwards, so the rounding to a subnormal happens once, as in libm.
    """
    tiny = x < f32(-86.0)
    xs = x + _SHIFT if tiny else x
    xc = xs if xs > f32(-86.0) else f32(-86.0)
    xc = xc if xc < f32(88.7228) else f32(88.7228)
    t = xc * _LOG2E + _MAGIC
    n = t - _MAGIC
    r = xc - n * _LN2_HI
    r = r - n * _LN2_LO
    p = f32(1.0 / 5040.0)
    p = p * r + f32(1.0 / 720.0)
    p = p * r + f32(1.0 / 120.0)
    p = p * r + f32(1.0 / 24.0)
    p = p * r + f32(1.0 / 6.0)
    p = p * r + f32(0.5)
    p = p * r + f32(1.0)
    p = p * r + f32(1.0)
    # t's low mantissa bits hold n + 2**22; turn them into the exponent field
    # of 2**(n-1) (n reaches 128 near the overflow threshold) and double.
    y = (p + p) * bits_float((float_bits(t) + np.int32(126 - 0x400000)) << np.int32(23))
    y = y * _TWO_M64 if tiny else y
    y = f32(np.inf) if x > f32(88.7228) else y
    return x if x != x else y


#: The smallest normal float32.  Softmax's probabilities below it are flushed to 0: a subnormal
#: operand costs a microcode assist in every FMA it enters (a GEMM over probabilities with 1%
#: subnormals ran 2.5x slower, 10%: 16x), and such a probability differs from 0 by less than 1.2e-38.
FLT_MIN = f32(1.1754943508222875e-38)


@njit(inline="always", error_model="numpy")
def flush_subnormal32(y):
    """``y``, or 0 where ``|y|`` is below :data:`FLT_MIN` (NaN kept)."""
    return y if (abs(y) >= FLT_MIN or y != y) else f32(0.0)


@njit(inline="always", error_model="numpy")
def sigmoid32(x):
    return f32(1.0) / (f32(1.0) + exp32(-x))


@njit(inline="always", error_model="numpy")
def sigmoid_act32(x):
    """sigmoid for activations (SiLU): ``exp32``'s reduction without its subnormal and overflow
    paths, the exponent clamped to +-87 instead, so a vector loop of it is about half as long.
    Relative error ~2e-7 for |x| <= 87; beyond, the result is within 2e-38 of the exact one (0 or 1).
    NaN propagates.  Callers compiled with ``fastmath={"contract"}`` get its polynomial as FMAs."""
    t = -x
    t = t if t > f32(-87.0) else f32(-87.0)
    t = t if t < f32(87.0) else f32(87.0)
    k = t * _LOG2E + _MAGIC
    n = k - _MAGIC
    r = t - n * _LN2_HI
    r = r - n * _LN2_LO
    p = f32(1.0 / 720.0)
    p = p * r + f32(1.0 / 120.0)
    p = p * r + f32(1.0 / 24.0)
    p = p * r + f32(1.0 / 6.0)
    p = p * r + f32(0.5)
    p = p * r + f32(1.0)
    p = p * r + f32(1.0)
    # k's low mantissa bits hold n + 2**22 (see _MAGIC): n + 127 in the exponent field is 2**n
    e = p * bits_float((float_bits(k) - np.int32(0x4B400000) + np.int32(127)) << np.int32(23))
    y = f32(1.0) / (f32(1.0) + e)
    return x if x != x else y


@njit(inline="always", error_model="numpy")
def hardswish32(x):
    """HardSwish, ``x * clip(x + 3, 0, 6) / 6``, with NaN kept (as the conv micro-kernels' EPI_HSWISH)."""
    g = x + f32(3.0)
    g = g if (g > f32(0.0) or g != g) else f32(0.0)
    g = g if (g < f32(6.0) or g != g) else f32(6.0)
    return x * g / f32(6.0)


@njit(inline="always", error_model="numpy")
def tanh32(x):
    """tanh: an odd polynomial near 0 (no cancellation), 1 - 2/(e**2|x| + 1) elsewhere."""
    a = abs(x)
    x2 = x * x
    # Taylor series to x**11: error < 2e-8 relative for |x| < 0.3.
    p = f32(-1382.0 / 155925.0)
    p = p * x2 + f32(62.0 / 2835.0)
    p = p * x2 + f32(-17.0 / 315.0)
    p = p * x2 + f32(2.0 / 15.0)
    p = p * x2 + f32(-1.0 / 3.0)
    small = x + x * x2 * p
    big = f32(1.0) - f32(2.0) / (exp32(f32(2.0) * a) + f32(1.0))
    big = big if x >= f32(0.0) else -big
    y = small if a < f32(0.3) else big
    return x if x != x else y


#: erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (beyond, erf is +-1 in float32): a
#: minimax rational fit (the one Eigen and XLA use for float32).  Measured
#: against math.erf on 2.1 million points: 4.5e-7 relative error at most,
#: with the right slope 2/sqrt(pi) at 0.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


@njit(inline="always", error_model="numpy")
def erf32(x):
    """erf without libm, so that GELU's loops vectorize (the libm call cost 3 ns an element)."""
    c = f32(4.0) if x > f32(4.0) else x  # NaN stays NaN; +-inf become +-4 -> +-1
    c = f32(-4.0) if c < f32(-4.0) else c
    x2 = c * c
    p = f32(_ERF_P[0])
    p = p * x2 + f32(_ERF_P[1])
    p = p * x2 + f32(_ERF_P[2])
    p = p * x2 + f32(_ERF_P[3])
    p = p * x2 + f32(_ERF_P[4])
    p = p * x2 + f32(_ERF_P[5])
    p = p * x2 + f32(_ERF_P[6])
    q = f32(_ERF_Q[0])
    q = q * x2 + f32(_ERF_Q[1])
    q = q * x2 + f32(_ERF_Q[2])
    q = q * x2 + f32(_ERF_Q[3])
    q = q * x2 + f32(_ERF_Q[4])
    return c * p / q
