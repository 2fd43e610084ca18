"""The direct depthwise sweeps (backends/cpu/ukernel_window.py) against a float64 window sum.

Each generated sweep is run through ctypes at the host's vector width and at AVX2's 8 lanes,
on planes whose strips are inside the plane (plain loads), at its edges (masked loads) or both,
with rows inside and outside the plane, every remainder of the row blocks and asymmetric pads.
The input plane sits between NaNs: a masked-off lane that read them would poison its output
(the max pools' own NaNs inside the plane must win).
"""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.cpu import machine_code as mc
from rammer.backends.cpu import ukernel as uk
from rammer.backends.cpu import ukernel_window as uw

_ENGINES: dict = {}


def _sweep(width: int, stride: int, k: int, op: str):
    if width == uk.WIDTH:
        return uw.CFUNCTYPE(uw.ADDRESSES[(stride, k, op)])
    if width not in _ENGINES:
        _ENGINES[width] = mc.compile_module(uw.direct_module(width))
    return uw.CFUNCTYPE(_ENGINES[width].get_function_address(uw.symbol(stride, k, op)))


def _window(x: np.ndarray, w: np.ndarray, stride: int, ph: int, pw: int, OH: int, OW: int, op: str) -> np.ndarray:
    """The window sum (zero padding) or maximum (-inf padding, NaN winning) at float64."""
    H, W = x.shape
    k = w.shape[0]
    xp = np.full((ph + stride * OH + k, pw + stride * OW + k), -np.inf if op == "max" else 0.0)
    xp[ph:ph + H, pw:pw + W] = x
    taps = [xp[i:i + stride * OH:stride, j:j + stride * OW:stride][:OH, :OW] for i in range(k) for j in range(k)]
    if op == "max":
        return np.max(np.stack(taps), axis=0)
    return sum(w.ravel()[t] * tap for t, tap in enumerate(taps))


GEOMETRIES = [  # (H, W, ph, pw, pad at the end)
    (1, 1, 2, 2, 2), (4, 7, 1, 1, 1), (13, 16, 0, 0, 0), (17, 40, 1, 1, 1), (23, 70, 2, 2, 2),
    (9, 112, 0, 0, 1), (30, 57, 1, 2, 0), (12, 200, 2, 1, 2),
]


@pytest.mark.parametrize("width", sorted({uk.WIDTH, 8}))
@pytest.mark.parametrize("op", uw.OPS)
@pytest.mark.parametrize("stride,k", uw.SHAPES)
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_direct_sweep_is_the_padded_window(width, op, stride, k, geometry):
    H, W, ph, pw, end = geometry
    ph, pw = min(ph, k - 1), min(pw, k - 1)
    OH = (H + ph + end - k) // stride + 1
    OW = (W + pw + end - k) // stride + 1
    assert OH > 0 and OW > 0
    rng = np.random.default_rng(H * 1000 + W)
    x = rng.standard_normal((H, W)).astype(np.float32)
    if op == "max" and H * W > 3:
        x.flat[[1, H * W // 2]] = np.nan  # NaN wins the maximum (and -inf padding never beats a value)
    w = rng.standard_normal((k, k)).astype(np.float32)
    guard = 2 * width + 8
    plane = np.full(H * W + 2 * guard, np.nan, np.float32)
    plane[guard:guard + H * W] = x.ravel()
    out = np.full(OH * OW + guard, 7.0, np.float32)
    r0, r1 = (1, OH - 1) if OH > 2 else (0, OH)  # a row range, as a task has it
    bias, lo, hi = 0.25, -1.5, 2.0
    sweep = _sweep(width, stride, k, op)
    sweep(plane.ctypes.data + 4 * guard, H, W, ph, pw, w.ctypes.data, r0, r1, OW, out.ctypes.data, bias, lo, hi)
    want = _window(x.astype(np.float64), w.astype(np.float64), stride, ph, pw, OH, OW, op)
    if op == "conv":
        want = np.clip(want + bias, lo, hi)
    got = out[:OH * OW].reshape(OH, OW)
    np.testing.assert_allclose(got[r0:r1], want[r0:r1], rtol=1e-5, atol=1e-5, equal_nan=True)
    assert (got[:r0] == 7.0).all() and (got[r1:] == 7.0).all() and (out[OH * OW:] == 7.0).all()


def test_the_geometries_reach_both_kinds_of_strip_and_of_row():
    # Strips inside the plane need W >= stride * 16 + span; rows inside it need H >= k: the table
    # above has planes of both kinds at 16 lanes (and so at 8).
    def has_inside_strip(W: int, stride: int, k: int, pw: int) -> bool:
        span = k - 1 + 16 if stride == 1 else 2 * ((k - 1) // 2) + 32
        return any(0 <= stride * ox0 - pw and stride * ox0 - pw + span <= W for ox0 in range(0, W, 16))
    for stride, k in uw.SHAPES:
        assert any(has_inside_strip(W, stride, k, min(pw, k - 1)) and H >= k + 4 * stride
                   for H, W, _, pw, _ in GEOMETRIES), (stride, k)
