"""QLinearConv with symmetric int8 weights in the NHWC form (:mod:`rammer.backends.cpu.lower_quant_conv`,
``kernels_quant_conv.qconv_nhwc``): the convolution micro-kernel in its forms against numpy, and
whole convs against the reference over shapes that cross bands, panels, images and the 4-channel
groups, with strides, dilations, asymmetric padding and int8 activations."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare
from onnx import numpy_helper
from test_quant_gemm_int8 import FORMS, WEIGHTS_MIN, _assert_tile, _qconv

from rammer.backends.cpu import lower_quant, lower_quant_conv
from rammer.backends.cpu import ukernel_int8 as U


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("wmin", WEIGHTS_MIN)
@pytest.mark.parametrize("ntaps,cg,rows", [(9, 16, 6), (1, 65, 4), (49, 1, 1)])
def test_conv_ukernel_matches_numpy(form, wmin, ntaps, cg, rows):
    rng = np.random.default_rng(ntaps * 100 + cg)
    a = rng.integers(0, 256, 30000, dtype=np.uint8)
    a[:64] = 255  # extremes, where a saturating dot (vpdpbusds, vpmaddubsw) would show
    a[64:128] = 0
    toff = np.sort(rng.integers(0, 10000, ntaps)).astype(np.int64)
    toff[0] = 0
    poff = rng.integers(0, 10000, U.MR).astype(np.int64)
    poff[0] = 0
    poff[1] = 64
    w = rng.integers(wmin, 128, (ntaps * cg * 4, U.NR), dtype=np.int8)
    w[:16, 0] = wmin
    w[:16, 1] = 127
    packed = U.pack_b(w)
    c = np.full((U.MR, U.NR + 5), -7, np.int32)  # ldc = NR + 5
    wsafe = int(wmin > -128)  # the caller vouches for no -128: the AVX2 form skips its check
    a_in = a ^ np.uint8(0x80) if U.SHIFTS[form] else a  # a form with a shift reads A as int8 a - 128
    U.conv_cfunc(form)(ntaps, toff.ctypes.data, cg, a_in.ctypes.data, poff.ctypes.data, rows, packed.ctypes.data,
                       c.ctypes.data, U.NR + 5, wsafe)
    want = np.zeros((U.MR, U.NR), np.int64)
    for r in range(U.MR):
        p = poff[min(r, rows - 1)]  # rows past ``rows`` repeat the last one
        window = np.concatenate([a[p + t:p + t + 4 * cg] for t in toff]).astype(np.int64)
        want[r] = window @ w.astype(np.int64)
    want -= U.SHIFTS[form] * w.astype(np.int64).sum(0)
    _assert_tile(c, want, rows)


def test_nhwc_pays_by_shape_class():
    assert lower_quant_conv.nhwc_pays(9, 64, 64)  # 3x3, a full panel of channels
    assert lower_quant_conv.nhwc_pays(49, 4, 64)  # a 7x7 stem over 3 channels
    # half a panel: the gathered form with VNNI, the NHWC form with the avx2 form (a quarter used at least)
    assert not lower_quant_conv.nhwc_pays(9, 4, 32, form="vnni")
    assert not lower_quant_conv.nhwc_pays(9, 4, 32, form="portable")
    assert lower_quant_conv.nhwc_pays(9, 4, 32, form="avx2")
    assert lower_quant_conv.nhwc_pays(9, 16, 16, form="avx2")
    assert not lower_quant_conv.nhwc_pays(9, 4, 8, form="avx2")  # an eighth of a panel
    assert not lower_quant_conv.nhwc_pays(1, 64, 128, form="avx2")
    assert not lower_quant_conv.nhwc_pays(1, 64, 128)  # a shallow 1x1: the gathered form
    assert lower_quant_conv.nhwc_pays(1, 320, 1280)


@pytest.mark.parametrize("case", [
    # a stem: 3 channels (padded to 4), stride 2, padding, two images
    ((2, 3, 15, 13), (64, 3, 3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    # int8 activations and output, two panels (100 channels), dilation, asymmetric padding, no bias
    ((1, 16, 7, 9), (100, 16, 3, 2), "int8", "int8", "int8", False, False,
     dict(pads=[0, 1, 2, 0], dilations=[2, 1])),
    # a deep 1x1 (258 channels: K not a multiple of 4), a pixel count not a multiple of MR
    ((1, 258, 3, 5), (64, 258, 1, 1), "uint8", "int8", "uint8", True, True, {}),
    # more output rows than one band holds (bands of 12 rows at 40 columns), stride 1, 5x5
    ((1, 8, 30, 40), (48, 8, 5, 5), "uint8", "int8", "uint8", True, True, dict(pads=[2, 2, 2, 2])),
    # 20 output channels: a third of a panel (the avx2 form takes NHWC there), stride 2, padding
    ((1, 5, 12, 17), (20, 5, 3, 3), "uint8", "int8", "uint8", True, True, dict(pads=[1, 1, 1, 1], strides=[2, 2])),
], ids=["stem-c3-s2", "int8-dilated-asym", "pointwise-deep", "bands", "third-of-a-panel"])
def test_qlinear_conv_nhwc_grid(case, monkeypatch):
    taken = []

    def counting(*args, **kwargs):
        taken.append(True)
        return lower_quant_conv.nhwc_conv_op(*args, **kwargs)

    monkeypatch.setattr(lower_quant, "nhwc_conv_op", counting)
    monkeypatch.setattr(lower_quant_conv, "POINTWISE_CONV", False)  # the 1x1 case would take the GEMM form
    monkeypatch.setattr(lower_quant_conv, "nhwc_pays", lambda taps, cp, oc: True)  # every form, whatever the host
    m, feeds = _qconv(*case[:7], **case[7])
    # the NHWC form takes symmetric weights only: zero points of 0, per channel or per tensor
    for init in m.graph.initializer:
        if init.name == "wz":
            init.CopyFrom(numpy_helper.from_array(np.zeros(tuple(init.dims), np.int8), "wz"))
    compare(m, feeds, expect_fallback=False)
    assert taken == [True]
