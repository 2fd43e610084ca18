"""The requantization arithmetic against a scalar transcription of TFLite's reference functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rammer.backends.mcu.fixedpoint import INT32_MAX, INT32_MIN, mbqm, quantize_multiplier, rdbpot, srdhm


def ref_srdhm(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    s = ab + nudge
    return int(s / (1 << 31)) if abs(s) < (1 << 52) else (s // (1 << 31) if s >= 0 else -((-s) // (1 << 31)))


def ref_rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def test_quantize_multiplier_known_values():
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(0.25) == (1 << 30, -1)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.0) == (0, 0)
    q, s = quantize_multiplier(0.1)
    assert abs(q * 2.0 ** (s - 31) - 0.1) < 1e-9


def test_srdhm_matches_reference_and_saturates():
    rng = np.random.default_rng(1)
    a = rng.integers(INT32_MIN, INT32_MAX, 2000, endpoint=True)
    b = rng.integers(INT32_MIN, INT32_MAX, 2000, endpoint=True)
    got = srdhm(a, b)
    assert [int(g) for g in got] == [ref_srdhm(int(x), int(y)) for x, y in zip(a, b)]
    assert int(srdhm(INT32_MIN, INT32_MIN)) == INT32_MAX
    # gemmlowp's nudge: +1.5 -> 2 but -1.5 -> -1 (the nudge is 1 - 2^30, then C truncation)
    assert int(srdhm(3, 1 << 30)) == 2 and int(srdhm(-3, 1 << 30)) == -1


@pytest.mark.parametrize("e", [0, 1, 2, 5, 17, 31])
def test_rdbpot_rounds_half_away_from_zero(e):
    xs = list(range(-70, 71)) + [INT32_MIN, INT32_MAX, -(1 << 20) - 7]
    assert [int(v) for v in rdbpot(np.array(xs), e)] == [ref_rdbpot(x, e) for x in xs]
    if e == 1:
        assert [int(v) for v in rdbpot(np.array([-3, -1, 1, 3]), 1)] == [-2, -1, 1, 2]


def test_mbqm_is_close_to_the_real_product():
    rng = np.random.default_rng(2)
    x = rng.integers(-(1 << 20), 1 << 20, 500)
    for m in (0.0003, 0.07, 0.5, 0.99, 1.7):
        q, s = quantize_multiplier(m)
        got = mbqm(x, q, s)
        assert np.all(np.abs(got - x * m) <= 1.0 + abs(m) * 1e-6 * np.abs(x))
    assert math.isclose(float(mbqm(1 << 20, *quantize_multiplier(0.5))), float(1 << 19))
