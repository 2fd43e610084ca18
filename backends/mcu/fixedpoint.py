"""TFLite's fixed-point requantization, bit for bit, in numpy (int64 arithmetic emulating int32 C).

These are the functions of TFLite's ``kernels/internal/common.h`` and gemmlowp's
``fixedpoint.h`` that CMSIS-NN and TFLite Micro use for int8 kernels:

* ``quantize_multiplier(M)``: a real multiplier as (int32 q31 multiplier, shift), M = q * 2^(shift-31),
  rounding half away from zero (``TfLiteRound``);
* ``srdhm(a, b)``: SaturatingRoundingDoublingHighMul, ``(a*b + nudge) / 2^31`` with C's truncating
  division and gemmlowp's nudge (2^30 for a*b >= 0, else 1 - 2^30: ties of positive products round
  up, of negative ones toward zero), the one overflow case (INT32_MIN * INT32_MIN) saturated;
* ``rdbpot(x, e)``: RoundingDivideByPOT, x / 2^e rounding half away from zero;
* ``mbqm(x, q, shift)``: MultiplyByQuantizedMultiplier = rdbpot(srdhm(x << max(shift, 0), q), max(-shift, 0)).

One deliberate difference: TFLite computes ``x * (1 << left_shift)`` in int32, which overflows
(undefined behaviour in C) for large x; here and in the generated C it saturates instead.  Both agree
whenever TFLite's result is defined.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(q31 multiplier, shift) with m ~= q * 2^(shift - 31); (0, 0) for m == 0."""
    if m < 0:
        raise ValueError(f"negative requantization multiplier {m}")
    if m == 0.0:
        return 0, 0
    frac, shift = math.frexp(m)
    q = int(math.floor(frac * (1 << 31) + 0.5))  # TfLiteRound: half away from zero (frac > 0)
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def srdhm(a, b) -> np.ndarray:
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    # C's int64 division truncates toward zero.
    q = np.where(s >= 0, s >> 31, -((-s) >> 31))
    return np.where(overflow, INT32_MAX, q).astype(np.int64)


def rdbpot(x, exponent) -> np.ndarray:
    x = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def saturating_left_shift(x, shift) -> np.ndarray:
    x = np.asarray(x, np.int64) << np.asarray(shift, np.int64)
    return np.clip(x, INT32_MIN, INT32_MAX)


def mbqm(x, q, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (per element; q and shift broadcast)."""
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rdbpot(srdhm(saturating_left_shift(x, left), q), right)
