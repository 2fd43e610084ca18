"""Depthwise convolution in blocks of WIDTH channels (backends/cpu/ukernel_dwcb.py).

The kernel is run through ctypes at the host's vector width and at AVX2's 8 lanes, each variant
(kernel width, stride) and the generic one, against a float64 window sum: planes of 1x1 to 17x17,
windows wider than the plane, asymmetric pads, several blocks per call, with and without a bias,
NaN inputs (the clamp keeps them).  The input planes sit between NaNs and the outputs between
sentinels, so a read or a write outside them shows.  Then whole depthwise convs on ``cpu`` against
the reference: channel counts with a tail that runs plane by plane, rows split over two vEUs at
channels that are not a multiple of the block, the activations the kernel fuses.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

from rammer.backends.cpu import lower_common
from rammer.backends.cpu import machine_code as mc
from rammer.backends.cpu import ukernel as uk
from rammer.backends.cpu import ukernel_dwcb as cb

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
CFUNC = ctypes.CFUNCTYPE(None, _P, *[_I] * 11, _P, _I, _P, _I, _F, _F, _P, _P, _I)
_ENGINES: dict = {}


def _kernel(width: int, dispatch: bool):
    """The entry (which picks the variant for the call's window) or the generic variant."""
    name = cb.SYMBOL if dispatch else cb.symbol(None)
    if width == uk.WIDTH:
        return CFUNC(cb.CBLOCK.address(name))
    if width not in _ENGINES:
        _ENGINES[width] = mc.compile_module(cb.cblock_module(width))
    address = _ENGINES[width].get_function_address(name)
    assert address, name
    return CFUNC(address)


def _windows(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: int, ph: int, pw: int, OH: int, OW: int,
             lo: float, hi: float) -> np.ndarray:
    C, H, W = x.shape
    k = w.shape[1]
    xp = np.zeros((C, ph + s * OH + k, pw + s * OW + k))
    xp[:, ph:ph + H, pw:pw + W] = x
    out = np.zeros((C, OH, OW)) + (0.0 if b is None else b[:, None, None])
    for i in range(k):
        for j in range(k):
            out += w[:, i, j, None, None] * xp[:, i:i + s * OH:s, j:j + s * OW:s][:, :OH, :OW]
    with np.errstate(invalid="ignore"):
        out = np.where(out > lo, out, np.where(np.isnan(out), out, lo))
        return np.where(out < hi, out, np.where(np.isnan(out), out, hi))


GEOMETRIES = [  # (H, W, k, stride, ph, pw, pad at the end)
    (7, 7, 3, 1, 1, 1, 1), (7, 7, 5, 1, 2, 2, 2), (14, 14, 5, 2, 2, 2, 2), (14, 14, 3, 2, 0, 0, 1),
    (1, 1, 3, 1, 1, 1, 1), (2, 3, 5, 1, 2, 2, 2), (5, 4, 7, 1, 3, 3, 3), (17, 13, 7, 2, 3, 2, 1),
    (9, 16, 3, 1, 0, 0, 0), (6, 11, 5, 2, 1, 2, 0), (12, 12, 1, 1, 0, 0, 0), (10, 9, 4, 3, 1, 2, 1),
]


@pytest.mark.parametrize("width", sorted({uk.WIDTH, 8}))
@pytest.mark.parametrize("variant", ["dispatch", "generic"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_channel_block_kernel_is_the_padded_window(width, variant, geometry):
    H, W, k, s, ph, pw, end = geometry
    OH = (H + ph + end - k) // s + 1
    OW = (W + pw + end - k) // s + 1
    nblk = 3
    C = nblk * width
    rng = np.random.default_rng(H * 100 + W * 10 + k)
    x = rng.standard_normal((C, H, W)).astype(np.float32)
    x[1, H // 2, W // 2] = np.nan
    guard = np.full(2 * width, np.nan, np.float32)
    xs = np.concatenate([guard, x.ravel(), guard])
    w = rng.standard_normal((C, k, k)).astype(np.float32)
    wt = np.ascontiguousarray(w.reshape(C, k * k).T)
    has_bias = variant == "dispatch"
    b = rng.standard_normal(C).astype(np.float32)
    lo, hi = -0.25, 1.5
    scratch = np.full(cb.scratch_floats(OH, OW, k, k, s, s, width), np.nan, np.float32)
    sentinel = np.float32(7.5)
    out = np.full(C * OH * OW + 3 * width, sentinel, np.float32)
    fn = _kernel(width, variant == "dispatch")
    fn(xs.ctypes.data + 4 * len(guard), H * W, H, W, ph, pw, k, k, s, s, OH, OW, wt.ctypes.data, C,
       b.ctypes.data, int(has_bias), lo, hi, scratch.ctypes.data, out.ctypes.data, nblk)
    got = out[:C * OH * OW].reshape(C, OH, OW)
    want = _windows(x.astype(np.float64), w, b if has_bias else None, s, ph, pw, OH, OW, lo, hi)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(got[1]).any() or OH * OW == 0
    assert np.all(out[C * OH * OW:] == sentinel), "written past the last output plane"


def _dw(c: int, hw: tuple[int, int], k: int, stride: int, act: str, n: int = 1):
    x = rand(n, c, *hw)
    x[0, 1, 0, 0] = np.nan
    consts = {"w": rand(c, 1, k, k, seed=1), "b": rand(c, seed=2)}
    strides = list(stride) if isinstance(stride, tuple) else [stride, stride]
    nodes = [node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=strides, pads=[k // 2] * 4, group=c)]
    if act == "relu6":
        consts.update(lo=np.array(0.0, np.float32), hi=np.array(6.0, np.float32))
        nodes.append(node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "hswish":
        nodes.append(node("HardSwish", ["c"], ["y"]))
    elif act == "silu":
        nodes += [node("Sigmoid", ["c"], ["g"]), node("Mul", ["c", "g"], ["y"])]
    else:
        nodes.append(node("Identity", ["c"], ["y"]))
    return model(nodes, {"x": x}, ["y"], consts, opset=17), {"x": x}


@pytest.mark.parametrize("c,hw,k,stride,act,n,veus", [
    (2 * uk.WIDTH, (7, 7), 5, 1, "hswish", 1, 1),
    (2 * uk.WIDTH + 3, (7, 7), 3, 1, "relu6", 2, 1),       # a tail of 3 channels plane by plane
    (3 * uk.WIDTH + 1, (14, 14), 5, 2, "silu", 1, 2),      # two vEUs: split inside a block
    (uk.WIDTH, (14, 14), 3, 2, "none", 1, 1),
    (2 * uk.WIDTH, (14, 14), 3, 1, "relu6", 1, 1),         # 3x3 on 14x14: plane sweeps
    (uk.WIDTH + 5, (28, 28), 7, 1, "relu6", 1, 2),         # a 7x7 window on a larger plane
    (4 * uk.WIDTH, (4, 4), 3, 1, "hswish", 3, 2),          # tiny planes, a batch over two vEUs
    (uk.WIDTH - 1, (7, 7), 3, 1, "relu6", 1, 1),           # fewer channels than a block: planes only
    # a tail after the blocks on the phase-plane sweeps, whose tap table shares the blocks' scratch
    # (PP-OCR's direction classifier: 104 channels of 3 x 96, 5x5 at stride (2, 1))
    (6 * uk.WIDTH + 8, (3, 96), 5, (2, 1), "hswish", 1, 1),
    (uk.WIDTH + 5, (28, 28), 7, 1, "relu6", 2, 1),
])
def test_depthwise_convs_in_channel_blocks_match_the_reference(c, hw, k, stride, act, n, veus):
    sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
    geo = (n, c, *hw, k, k, sh, sw, k // 2, k // 2, 1, 1, (hw[0] - 1) // sh + 1, (hw[1] - 1) // sw + 1)
    blocks = c >= uk.WIDTH and (geo[12] * geo[13] <= 64 or k >= 5)
    assert lower_common.dwconv_channel_blocks(c, 1, geo, np.zeros(1)) == blocks
    m, feeds = _dw(c, hw, k, stride, act, n)
    report = compare(m, feeds, veus=veus)
    assert report["ops_by_family"] == {"conv.depthwise": 1}, report["ops_by_family"]


def test_channel_blocks_keep_to_their_class():
    """3x3 windows on planes past 8x8 keep the plane sweeps; 5x5 and 7x7 take blocks while the
    scratch bound allows; dilation and channel multipliers never do."""
    def geo(side: int, k: int, s: int = 1, d: int = 1) -> tuple:
        o = (side - 1) // s + 1
        return (1, 64, side, side, k, k, s, s, k // 2, k // 2, d, d, o, o)
    w = np.zeros(1)
    assert lower_common.dwconv_channel_blocks(64, 1, geo(7, 3), w)
    assert lower_common.dwconv_channel_blocks(64, 1, geo(14, 3, s=2), w)
    assert not lower_common.dwconv_channel_blocks(64, 1, geo(14, 3), w)
    assert not lower_common.dwconv_channel_blocks(64, 1, geo(28, 3), w)
    assert lower_common.dwconv_channel_blocks(64, 1, geo(56, 5), w)
    assert lower_common.dwconv_channel_blocks(64, 1, geo(56, 7), w)
    assert not lower_common.dwconv_channel_blocks(64, 1, geo(512, 7), w)  # scratch past the bound
    assert not lower_common.dwconv_channel_blocks(64, 1, geo(7, 3, d=2), w)
    assert not lower_common.dwconv_channel_blocks(64, 2, geo(7, 3), w)
    assert not lower_common.dwconv_channel_blocks(64, 1, geo(7, 3), None)
