"""Unpadded 1x1 QLinearConv with symmetric int8 weights as a GEMM (:func:`.lower_quant_conv.pointwise_conv_op`,
``kernels_quant_conv.qconv_pointwise``): the pointwise micro-kernel (requantizing store) and the
4-plane interleave in each form against numpy, and whole convs against the reference over shapes that
cross panels, images, channel groups of 4 and MR-row blocks, with uint8 / int8 activations and outputs,
per-tensor and per-channel scales."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare
from onnx import numpy_helper
from test_quant_gemm_int8 import FORMS, WEIGHTS_MIN, _qconv

from rammer.backends.cpu import lower_quant, lower_quant_conv
from rammer.backends.cpu import ukernel_int8 as U


def _requantize(acc: np.ndarray, terms: np.ndarray, mults: np.ndarray, zy: float, lo: float, hi: float) -> np.ndarray:
    """The float32 requantization of ``kernels_quant`` (int32 wrap, one rounding per operation)."""
    v = (acc + terms[:, None]).astype(np.int32).astype(np.float32) * mults[:, None]
    y = np.clip(np.rint(v) + np.float32(zy), np.float32(lo), np.float32(hi))
    return (y.astype(np.int32) & 255).astype(np.uint8)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("wmin", WEIGHTS_MIN)
@pytest.mark.parametrize("k4,rows,flip,signed_out", [(4, 6, 0, False), (36, 3, 128, True), (1, 1, 0, False),
                                                     (80, 5, 128, False)])
def test_pointwise_ukernel_and_pack_match_numpy(form, wmin, k4, rows, flip, signed_out):
    rng = np.random.default_rng(k4 * 10 + rows)
    K, plane, at = 4 * k4, 150, 7
    x = rng.integers(0, 256, (K, plane), dtype=np.uint8)
    x[:, at:at + 3] = 255  # extremes, where a saturating dot (vpdpbusds, vpmaddubsw) would show
    x[:, at + 3:at + 6] = flip  # 0 after the flip: x = -128
    kernel, pack = U.pointwise_cfuncs(form)
    panel = np.zeros(K * U.NR, np.uint8)
    pack(x.ctypes.data + at, plane, k4, panel.ctypes.data, flip)
    cols = x[:, at:at + U.NR] ^ np.uint8(flip)  # K x NR, unsigned
    np.testing.assert_array_equal(panel, cols.T.reshape(U.NR, k4, 4).transpose(1, 0, 2).reshape(-1))
    w = rng.integers(wmin, 128, (U.MR, K), dtype=np.int8)
    w[0, :] = wmin
    w[1, :] = 127
    terms = rng.integers(-2**31, 2**31 - 1, U.MR, dtype=np.int64).astype(np.int32)  # wraps in int32
    terms[1:] //= 2**16
    mults = (rng.random(U.MR) * 0.02).astype(np.float32)
    lo, hi, zy = (-128.0, 127.0, 3.0) if signed_out else (0.0, 255.0, 120.0)
    params = np.array([zy, lo, hi], np.float32)
    ldo = U.NR + 9
    out = np.full((U.MR, ldo), 77, np.uint8)
    wsafe = int(wmin > -128)  # the caller vouches for no -128: the AVX2 form skips its check
    kernel(k4, w.ctypes.data, K, rows, panel.ctypes.data, terms.ctypes.data, mults.ctypes.data, params.ctypes.data,
           out.ctypes.data, ldo, wsafe)
    acc = w.astype(np.int64) @ cols.astype(np.int64) - U.SHIFTS[form] * w.astype(np.int64).sum(1)[:, None]
    want = _requantize(acc, terms.astype(np.int64), mults, zy, lo, hi)
    np.testing.assert_array_equal(out[:rows, :U.NR], want[:rows])
    assert (out[rows:] == 77).all() and (out[:, U.NR:] == 77).all()  # rows past ``rows``, columns past NR


@pytest.mark.parametrize("case", [
    # two images, a plane of 35 pixels (one short panel), 40 -> 70 channels (OC not a multiple of MR)
    ((2, 40, 5, 7), (70, 40, 1, 1), "uint8", "int8", "uint8", True, True),
    # 3 input channels (no whole group of 4), full and short panels (130 pixels), int8 in and out
    ((1, 3, 10, 13), (16, 3, 1, 1), "int8", "int8", "int8", True, False),
    # 18 channels (a tail of 2 past the groups), per-tensor weight scale, a plane of exactly 2 panels
    ((1, 18, 8, 16), (50, 18, 1, 1), "uint8", "int8", "uint8", False, True),
    # deep K, uint8 in, int8 out
    ((1, 260, 4, 16), (24, 260, 1, 1), "uint8", "int8", "int8", True, True),
    # stride 2 over odd sizes (a resnet shortcut's shape class), two images, int8 activations
    ((2, 20, 11, 9), (40, 20, 1, 1), "int8", "int8", "uint8", True, True, dict(strides=[2, 2])),
    # unequal strides, more than one panel of output pixels
    ((1, 12, 24, 30), (8, 12, 1, 1), "uint8", "int8", "uint8", True, True, dict(strides=[3, 1])),
], ids=["images-short-panel", "c3-int8", "c18-per-tensor", "deep-k", "stride-2", "stride-3x1"])
def test_qlinear_conv_pointwise_grid(case, monkeypatch):
    taken = []

    def counting(*args, **kwargs):
        taken.append(True)
        return lower_quant_conv.pointwise_conv_op(*args, **kwargs)

    monkeypatch.setattr(lower_quant, "pointwise_conv_op", counting)
    m, feeds = _qconv(*case[:7], **(case[7] if len(case) > 7 else {}))
    for init in m.graph.initializer:  # symmetric weights: zero points of 0
        if init.name == "wz":
            init.CopyFrom(numpy_helper.from_array(np.zeros(tuple(init.dims), np.int8), "wz"))
    compare(m, feeds, expect_fallback=False)
    assert taken == [True]


@pytest.mark.parametrize("attrs,zero_wz", [(dict(pads=[1, 0, 0, 0]), True), ({}, False)],
                         ids=["padded", "weight-zero-point"])
def test_pointwise_form_only_where_it_applies(attrs, zero_wz, monkeypatch):
    taken = []
    monkeypatch.setattr(lower_quant, "pointwise_conv_op", lambda *a, **k: taken.append(True))
    m, feeds = _qconv((1, 16, 6, 6), (32, 16, 1, 1), "uint8", "int8", "uint8", True, True, **attrs)
    if zero_wz:
        for init in m.graph.initializer:
            if init.name == "wz":
                init.CopyFrom(numpy_helper.from_array(np.zeros(tuple(init.dims), np.int8), "wz"))
    compare(m, feeds, expect_fallback=False)
    assert taken == []
