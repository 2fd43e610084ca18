"""Window ops too large for one row of a vEU's scratch: 1-D convolutions with hundreds of channels over
thousands of frames (speech front ends: Whisper's 80 -> 384 -> 384, wav2vec2's 512-channel stack) and
pooling windows larger than their input (ceil_mode).  Before, the 1-D convs failed to compile with
``ScheduleError: ... candidate(s) need more than a vEU offers``: a 1-D conv ran as a one-row plane whose
phase planes (every input channel's whole padded length) could not be cut.  Each case is compared with
the reference backend over a small grid of the shape class, not one model's shape.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

from rammer.backends.cpu import lower_conv


def _conv1d(cin: int, cout: int, frames: int, k: int, stride: int, pad: int, group: int = 1, bias: bool = True,
            relu: bool = False):
    w = rand(cout, cin // group, k, seed=1) * (1.0 / np.sqrt(cin * k / group))
    consts = {"w": w.astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rand(cout, seed=2)
        ins.append("b")
    nodes = [node("Conv", ins, ["c" if relu else "y"], kernel_shape=[k], strides=[stride], pads=[pad, pad],
                  group=group)]
    if relu:
        nodes.append(node("Relu", ["c"], ["y"]))
    x = rand(1, cin, frames, seed=3)
    return model(nodes, {"x": x}, ["y"], consts), {"x": x}


@pytest.mark.parametrize("cin,cout,frames,k,stride,pad", [
    (384, 384, 3000, 3, 1, 1),    # Whisper's second front-end conv (stride 1 here)
    (384, 384, 3000, 3, 2, 1),    # ... and as Whisper has it, stride 2
    (512, 512, 3199, 3, 2, 0),    # wav2vec2's stack, unpadded
    (512, 512, 1600, 2, 2, 0),    # wav2vec2's last two layers (kernel 2)
    (256, 128, 5000, 5, 1, 2),    # wider kernel, more frames than channels
    (640, 64, 900, 1, 1, 0),      # pointwise over a long axis
])
def test_long_1d_convs_compile_and_match(cin, cout, frames, k, stride, pad):
    assert lower_conv._column_1d(cin, frames + 2 * pad)  # the class this covers: too long for a row's scratch
    m, feeds = _conv1d(cin, cout, frames, k, stride, pad)
    compare(m, feeds, rtol=2e-4, atol=2e-4)


def test_long_grouped_1d_conv_with_relu_matches():
    m, feeds = _conv1d(768, 768, 1500, 3, 1, 1, group=16, relu=True)
    compare(m, feeds, rtol=2e-4, atol=2e-4)


def test_short_1d_convs_keep_the_row_form():
    assert not lower_conv._column_1d(80, 3002)        # Whisper's first conv (80 mel bins) fits a row
    m, feeds = _conv1d(80, 384, 3000, 3, 1, 1)
    compare(m, feeds, rtol=2e-4, atol=2e-4)


def _pool(op: str, shape: tuple[int, ...], kernel: list[int], strides: list[int], pads: list[int], ceil: int,
          include_pad: int = 0):
    x = rand(*shape, seed=4)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil)
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    return model([node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=19), {"x": x}


@pytest.mark.parametrize("op,shape,kernel,strides,pads,ceil,include_pad", [
    # planes larger than a vEU's scratch: swept in bands of output rows
    ("MaxPool", (1, 4, 640, 640), [3, 3], [1, 1], [1, 1, 1, 1], 0, 0),
    ("MaxPool", (1, 3, 800, 640), [3, 3], [2, 2], [1, 1, 1, 1], 1, 0),
    ("AveragePool", (1, 2, 700, 700), [7, 7], [1, 1], [0, 0, 0, 0], 1, 0),
    ("AveragePool", (1, 2, 999, 1001), [2, 2], [2, 2], [0, 0, 0, 0], 1, 0),
    ("AveragePool", (1, 2, 640, 640), [5, 5], [1, 1], [2, 2, 2, 2], 0, 1),
    ("AveragePool", (2, 2, 641, 640), [3, 3], [2, 2], [1, 1, 1, 1], 1, 0),
    # one-row planes (1-D pools over long axes) run as banded columns
    ("AveragePool", (1, 4, 1, 200000), [1, 5], [1, 1], [0, 2, 0, 2], 0, 0),
    ("MaxPool", (1, 3, 1, 300001), [1, 4], [1, 3], [0, 1, 0, 1], 1, 0),
    # windows larger than the plane (ceil_mode, padding): one band
    ("AveragePool", (1, 8, 5, 5), [7, 7], [7, 7], [0, 0, 0, 0], 1, 0),
    ("AveragePool", (1, 8, 3, 3), [7, 7], [1, 1], [2, 2, 2, 2], 1, 0),
    ("MaxPool", (1, 8, 6, 6), [4, 4], [4, 4], [1, 1, 1, 1], 1, 0),
])
def test_pools_over_large_planes_compile_and_match(op, shape, kernel, strides, pads, ceil, include_pad):
    m, feeds = _pool(op, shape, kernel, strides, pads, ceil, include_pad)
    compare(m, feeds, rtol=1e-5, atol=1e-6)


def test_pool_bands_cover_the_plane_and_fit_the_scratch():
    from rammer.backends.cpu import kernels_window as kwin
    from rammer.backends.cpu.lower_nn import POOL_BAND_MAX_FLOATS, _pool_bands

    assert _pool_bands(56, 56, 3, 3, 2, 2, 1, 1, 0) == [(0, 56)]  # what fits stays one sweep
    for OH, OW, k, s in ((640, 640, 3, 1), (347, 1001, 2, 2), (200000, 1, 5, 1)):
        bands = _pool_bands(OH, OW, k, k if OW > 1 else 1, s, s if OW > 1 else 1, 1, 1, 0)
        assert len(bands) > 1 and bands[0][0] == 0 and bands[-1][1] == OH
        assert all(a[1] == b[0] for a, b in zip(bands, bands[1:]))
        assert max(kwin.window_scratch(r1 - r0, OW, k, k if OW > 1 else 1, s, s if OW > 1 else 1, 1, 1)
                   for r0, r1 in bands) <= POOL_BAND_MAX_FLOATS


@pytest.mark.parametrize("op,follower", [("MaxPool", "Relu"), ("AveragePool", "Sigmoid")])
def test_banded_pool_with_a_fused_elementwise_epilogue(op, follower):
    x = rand(1, 3, 640, 640, seed=6)
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    m = model([node(op, ["x"], ["p"], **attrs), node(follower, ["p"], ["y"])], {"x": x}, ["y"], opset=19)
    compare(m, {"x": x}, rtol=1e-5, atol=1e-6)
