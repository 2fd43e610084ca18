"""The register-tiled conv rKernels, launched alone on PoCL over a grid of shapes: ``conv_igemm`` (a
2 x 4 register tile a thread, 32 x 64 outputs an rTask) at the edges of its row, pixel and K tiles,
with groups, strides, dilation, and a non-finite weight meeting the padding's zero; ``conv_transpose``
(outputs by stride phase, 4 output channels a thread, or 1 for groups of fewer) with groups whose channel count is not a
multiple of 4, strides, dilation, pads and an output larger than the strided input (output_padding).
One program build per kernel; every case is one launch."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_nn import _conv_ref

from rammer.backends.gpu import kernels_conv as kc
from rammer.backends.gpu.lower_nn import lower_conv
from rammer.backends.gpu.lower_types import CONV_IMPLICIT_GEMM
from rammer.codegen.dialects import DIALECTS
from rammer.codegen.render import render_kernel

#: (n, c, h, w, oc, kernel, stride, pad, dilation, groups)
IGEMM_GRID = [
    (1, 3, 9, 11, 5, (3, 3), (1, 1), (1, 1), (1, 1), 1),       # K = 27, P = 99: partial K, row and pixel tiles
    (2, 20, 8, 8, 33, (3, 3), (1, 1), (1, 1), (1, 1), 1),      # M = 33: a second row tile of one channel
    (1, 16, 16, 16, 64, (1, 1), (1, 1), (0, 0), (1, 1), 1),    # whole tiles, K = 16
    (1, 4, 13, 10, 70, (3, 2), (2, 3), (2, 1), (2, 1), 1),     # strides, dilation, M = 70
    (2, 6, 8, 8, 4, (3, 3), (1, 1), (0, 0), (1, 1), 2),        # groups
    (1, 8, 7, 9, 8, (3, 3), (2, 2), (1, 1), (1, 1), 8),        # depthwise
    (1, 5, 1, 1, 3, (1, 1), (1, 1), (0, 0), (1, 1), 1),        # one pixel
]


@pytest.fixture(scope="module")
def igemm(opencl):
    return opencl.build(render_kernel(kc.conv2d_implicit_gemm("conv", 16), DIALECTS["opencl"]))


@pytest.mark.parametrize("case", IGEMM_GRID, ids=str)
def test_conv_igemm_matches_numpy_on_the_grid(opencl, igemm, case):
    n, c, h, w, oc, k, stride, pad, dil, groups = case
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // groups, *k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = _conv_ref(x, wt, b, stride, pad, dil, groups)
    oh, ow = want.shape[2:]
    tm, tp = kc.conv_tile()
    blocks = n * groups * -(-(oc // groups) // tm) * -(-(oh * ow) // tp)
    y, yb = opencl.output(want.shape)
    igemm.conv(opencl.queue, (blocks * 256,), (256,), opencl.buffer(x), opencl.buffer(wt), opencl.buffer(b), yb,
               *map(np.int32, (1, y.size, n, c, h, w, oc, oh, ow, *k, *stride, *pad, *dil, groups)))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-4, atol=1e-4)


def test_a_nan_weight_meets_the_padding_zero(opencl, igemm):
    """NaN x a padded input's zero is NaN: a tile that skipped padded taps would give numbers at the border."""
    x = np.ones((1, 2, 5, 5), np.float32)
    wt = np.ones((3, 2, 3, 3), np.float32)
    wt[1, 0, 0, 0] = np.nan
    y, yb = opencl.output((1, 3, 5, 5))
    zeros = opencl.buffer(np.zeros(3, np.float32))
    igemm.conv(opencl.queue, (256,), (256,), opencl.buffer(x), opencl.buffer(wt), zeros, yb,
               *map(np.int32, (0, y.size, 1, 2, 5, 5, 3, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1)))
    got = opencl.read(y, yb)
    assert np.isnan(got[0, 1]).all() and np.isfinite(got[0, [0, 2]]).all()


def test_an_rtask_is_a_32_by_64_output_tile():
    from onnx import TensorProto, helper

    from rammer.frontend import load

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40, 10, 13])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [40, 8, 3, 3], np.zeros(40 * 72, np.float32))])
    graph = load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    low = lower_conv(graph.nodes[0], graph, CONV_IMPLICIT_GEMM)
    assert kc.conv_tile() == (32, 64)
    assert len(low.calls) == 2 * 2 * 3  # images x ceil(40 / 32) x ceil(130 / 64)


def _conv_transpose_ref(x, w, b, stride, pad, dil, groups, out_hw):
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    icg = c // groups
    full = np.zeros((n, ocg * groups, (h - 1) * stride[0] + (kh - 1) * dil[0] + 1 + out_hw[0],
                     (wd - 1) * stride[1] + (kw - 1) * dil[1] + 1 + out_hw[1]), np.float64)
    for g in range(groups):
        xs = x[:, g * icg:(g + 1) * icg]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xs, w[g * icg:(g + 1) * icg, :, i, j])
                full[:, g * ocg:(g + 1) * ocg, i * dil[0]: i * dil[0] + stride[0] * h: stride[0],
                     j * dil[1]: j * dil[1] + stride[1] * wd: stride[1]] += contrib
    y = full[:, :, pad[0]:pad[0] + out_hw[0], pad[1]:pad[1] + out_hw[1]] + b[None, :, None, None]
    return y.astype(np.float32)


#: (n, c, h, w, oc, kernel, stride, pad (begin), dilation, groups, (oh, ow))
TRANSPOSE_GRID = [
    (2, 8, 5, 6, 6, (2, 2), (2, 2), (0, 0), (1, 1), 1, (10, 12)),     # the U-Net upsampling: one tap a phase
    (1, 3, 5, 4, 2, (3, 3), (2, 2), (1, 1), (1, 1), 1, (9, 7)),
    (1, 6, 3, 4, 10, (3, 3), (2, 2), (1, 0), (1, 1), 2, (6, 8)),      # 5 channels a group: a block runs past it
    (1, 2, 4, 5, 3, (3, 2), (1, 2), (0, 1), (2, 1), 1, (8, 10)),      # dilation, an output_padding column
    (1, 4, 3, 3, 4, (3, 3), (3, 2), (0, 0), (1, 1), 4, (9, 7)),       # depthwise, stride 3 x 2
]


@pytest.fixture(scope="module")
def transpose(opencl):
    return {chans: opencl.build(render_kernel(kc.conv_transpose2d_direct("ct", 128, chans), DIALECTS["opencl"]))
            for chans in (1, kc.CT_CHANNELS)}


@pytest.mark.parametrize("case", TRANSPOSE_GRID, ids=str)
@pytest.mark.parametrize("chans", [1, kc.CT_CHANNELS])
def test_conv_transpose_matches_numpy_on_the_grid(opencl, transpose, case, chans):
    n, c, h, w, oc, k, stride, pad, dil, groups, (oh, ow) = case
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, oc // groups, *k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    want = _conv_transpose_ref(x, wt, b, stride, pad, dil, groups, (oh, ow))
    total = kc.conv_transpose_total(n, oc, oh, ow, *stride, groups, chans)
    y, yb = opencl.output(want.shape)
    transpose[chans].ct(opencl.queue, (-(-total // 128) * 128,), (128,), opencl.buffer(x), opencl.buffer(wt),
                 opencl.buffer(b), yb, *map(np.int32, (1, total, n, c, h, w, oc, oh, ow, *k, *stride, *pad, *dil,
                                                       groups)))
    np.testing.assert_allclose(opencl.read(y, yb), want, rtol=1e-4, atol=1e-4)


def test_groups_of_fewer_output_channels_take_one_a_thread():
    assert kc.conv_transpose_channels(1) == kc.conv_transpose_channels(3) == 1
    assert kc.conv_transpose_channels(4) == kc.conv_transpose_channels(64) == kc.CT_CHANNELS
