"""The implicit-GEMM convolution (k_convp, weights packed at compile time) against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, conv_model, model, node, rand

from rammer.backends.cpu import lower_conv
from rammer.backends.cpu.kernels_conv import (
    FORM_DIRECT,
    FORM_PIXEL_ROWS,
    FORM_PLANES,
    FORM_TRANSPOSED,
    FORM_WINOGRAD,
    pack_weights,
)
from rammer.backends.cpu.ukernel import MR

CASES = [
    # x shape, w shape, attrs
    ((1, 3, 9, 11), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 5, 10, 7), (13, 5, 3, 2), dict(strides=[2, 1], pads=[1, 0, 2, 1])),
    ((1, 4, 17, 19), (7, 4, 5, 5), dict(strides=[3, 2], pads=[2, 2, 2, 2])),
    ((1, 6, 12, 12), (12, 3, 3, 3), dict(group=2, pads=[1, 1, 1, 1], dilations=[2, 2])),
    ((1, 8, 9, 9), (16, 2, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 16, 6, 6), (40, 16, 1, 1), {}),                       # 1x1 stride 1 (pointwise gather)
    ((2, 16, 7, 9), (24, 8, 1, 1), dict(group=2)),            # grouped 1x1, batch 2
    ((1, 16, 9, 9), (20, 16, 1, 1), dict(strides=[2, 2])),     # 1x1 stride 2
    ((1, 3, 20, 20), (5, 3, 4, 4), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 1, 30, 25), (32, 1, 7, 5), dict(strides=[2, 2], pads=[3, 2, 3, 2])),  # one input channel
    ((1, 64, 9, 40), (33, 64, 5, 5), dict(pads=[2, 2, 2, 2])),  # several K blocks, odd M
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES)
def test_conv_matches_reference(x_shape, w_shape, attrs):
    m, feeds = conv_model(x_shape, w_shape, **attrs)
    # float32 sums of K products of unit normals differ by about sqrt(K) ulps of their terms
    report = compare(m, feeds, atol=1e-6 * int(np.prod(w_shape[1:])))
    assert report["ops_by_family"].get("conv") == 1, report["ops_by_family"]


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 4, 50), (6, 4, 3), dict(pads=[1, 1])),
    ((2, 3, 41), (8, 3, 5), dict(strides=[2], pads=[2, 1], dilations=[2])),
    ((1, 6, 33), (10, 3, 1), dict(group=2)),
])
def test_conv1d_matches_reference(x_shape, w_shape, attrs):
    m, feeds = conv_model(x_shape, w_shape, **attrs)
    compare(m, feeds)


@pytest.mark.parametrize("epilogue", [("Relu",), ("Add", "Relu"), ("Sigmoid",)])
def test_conv_fused_epilogues(epilogue):
    m, feeds = conv_model((2, 8, 11, 13), (20, 4, 3, 3), epilogue=epilogue, group=2, pads=[1, 1, 1, 1])
    report = compare(m, feeds)
    assert report["ops_by_family"] == {"conv": 1}, report["ops_by_family"]


def test_conv_without_bias_and_tiny_k():
    m, feeds = conv_model((1, 1, 5, 6), (3, 1, 1, 1), n_bias=False)
    compare(m, feeds)


@pytest.mark.parametrize("x_shape,w_shape", [
    ((1, 10, 23, 21), (50, 10, 3, 3)),  # two vEUs split the pixels (the second starts mid-row)
    ((1, 10, 6, 6), (50, 10, 3, 3)),    # too few pixels: they split the output channels
])
def test_conv_split_into_many_rtasks(monkeypatch, x_shape, w_shape):
    # Small blocks force several K blocks and pixel chunks per rTask.
    monkeypatch.setattr(lower_conv, "IMPLICIT_KC", 24)
    monkeypatch.setattr(lower_conv, "IMPLICIT_NC", 64)
    monkeypatch.setattr(lower_conv, "IMPLICIT_MIN_PIXELS", 32)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), pads=[1, 1, 1, 1])
    compare(m, feeds, veus=2)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16])
def test_conv_partition_covers_output_once(k):
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    m, _ = conv_model((2, 8, 20, 20), (36, 4, 3, 3), group=2, pads=[1, 1, 1, 1])
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    parts = op.partition(k)
    if not parts:
        return
    seen = np.zeros((4, 18, 400), np.int64)  # blocks x channels of a group x pixels
    for b0, b1, m0, m1, q0, q1 in parts:
        assert m0 % MR == 0  # the kernel reads whole packed A panels from m0
        seen[b0:b1, m0:m1, q0:q1] += 1
    assert (seen == 1).all()


def test_pack_weights_layout():
    w = rand(2 * 14, 3, 2, 2)
    kc = 5
    packed = pack_weights(w, 2, kc)
    K, mg = 12, 14
    mpad = -(-mg // MR) * MR  # (2 panels of 12 with AVX-512, 3 of 6 with AVX2)
    assert packed.size == 2 * mpad * K
    flat = w.reshape(2, mg, K)
    for g in range(2):
        for pc in range(0, K, kc):
            kcb = min(kc, K - pc)
            for mp in range(mpad // MR):
                base = g * mpad * K + pc * mpad + mp * MR * kcb
                panel = packed[base:base + kcb * MR].reshape(kcb, MR)
                for r in range(MR):
                    row = mp * MR + r
                    want = flat[g, row, pc:pc + kcb] if row < mg else np.zeros(kcb, np.float32)
                    np.testing.assert_array_equal(panel[:, r], want)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 64, 2, 2), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),             # 2x2 plane, ResNet's last stage
    ((1, 32, 4, 4), (70, 32, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # 2x2 out, channels past NR
    ((1, 96, 4, 4), (64, 96, 1, 1), {}),                                   # pointwise gather, MR-wide panels
    ((1, 8, 3, 3), (40, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
])
@pytest.mark.parametrize("veus", [1, 2])
def test_conv_transposed_form_for_small_planes(monkeypatch, x_shape, w_shape, attrs, veus):
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.kernels_conv import FORM_TRANSPOSED
    from rammer.frontend import load

    # several K blocks too, so that tiles are scattered with accumulation
    monkeypatch.setattr(lower_conv, "IMPLICIT_KC_TRANSPOSED", 40)
    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_TRANSPOSED)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), **attrs)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "implicit-transposed"
    compare(m, feeds, veus=veus, atol=1e-6 * int(np.prod(w_shape[1:])))


def test_conv_form_choice():
    from rammer.backends.cpu.kernels_conv import FORM_DIRECT, FORM_PIXEL_ROWS, FORM_TRANSPOSED

    form = lower_conv.conv_form
    assert form(64, 4, 64, 1) == FORM_TRANSPOSED           # 2x2 plane, shallow 1x1: too shallow for pixel rows
    # 4x4 plane: with AVX2's 6-row panels the direct form fills 32 of 36 rows (the fill rule's pick, unmeasured)
    assert form(32, 16, 32, 1) == (FORM_TRANSPOSED if MR == 12 else FORM_DIRECT)
    assert form(8, 1024, 27, 9) == FORM_DIRECT            # few channels, large plane, K too small
    assert form(64, 1024, 576, 9) == FORM_PIXEL_ROWS      # ResNeXt's grouped 3x3
    assert form(256, 64, 2304, 9) == FORM_PIXEL_ROWS      # ... on an 8x8 plane
    assert form(64, 4, 576, 9) == FORM_PIXEL_ROWS         # deep 3x3 on a 2x2 plane: half of each 8-pixel tile
    assert form(1024, 1024, 256, 1) == FORM_DIRECT        # 1x1 convs: the direct form reads their input in place
    assert form(32, 1024, 192, 1) == FORM_DIRECT
    assert form(32, 1024, 32, 1) == FORM_DIRECT
    assert form(512, 64, 512, 1) == FORM_DIRECT           # 8x8 plane, weights within L2
    assert form(1024, 64, 4096, 1) == FORM_PIXEL_ROWS     # ResNeXt's 8x8 4096 -> 1024: weights past L2
    assert form(1024, 256, 4096, 1) == FORM_PIXEL_ROWS    # ... and on 16x16 planes (packed pixel rows)
    assert form(1024, 1024, 4096, 1) == FORM_DIRECT       # ... not on 32x32 planes
    # 7x7 planes, weights of 384 KiB to 1 MiB: the pixel rows fill 49 of 52 rows, the direct form 49 of 64 columns
    if MR == 6:
        assert form(440, 49, 440, 1) == FORM_PIXEL_ROWS   # RegNetY's last stage
        assert form(160, 49, 960, 1) == FORM_PIXEL_ROWS   # MobileNetV2's projection
        assert form(256, 49, 256, 1) == FORM_DIRECT       # lighter weights keep the direct form
        assert form(1152, 1, 48, 1) == FORM_TRANSPOSED    # a squeeze-excitation conv at 1x1: not the rule's
        assert form(208, 196, 208, 1) == FORM_DIRECT      # 14x14: the direct form fills 196 of 208 columns
    assert form(512, 256, 256, 1, strided_1x1=True) == FORM_PIXEL_ROWS  # read in place, no gather
    # 8 of 32 channels per tile (AVX-512); AVX2's 16-wide panels half full, read in place (unmeasured)
    assert form(8, 256, 256, 1, strided_1x1=True) == (FORM_DIRECT if MR == 12 else FORM_PIXEL_ROWS)
    # 1-D convolutions (a line of pixels): with AVX2 the direct form unless the pixel rows fill clearly
    # better; with AVX-512 the pixel rows (measured faster on the whole ci/micro_conv1d.py grid)
    line_form = FORM_PIXEL_ROWS if MR == 12 else FORM_DIRECT
    assert form(384, 1500, 1152, 3) == FORM_PIXEL_ROWS                # the same shape as a plane ...
    assert form(384, 1500, 1152, 3, line=True) == line_form           # ... and as Whisper's strided conv
    assert form(512, 1599, 1536, 3, line=True) == line_form           # wav2vec2's stack
    assert form(256, 100, 768, 3, line=True) == FORM_PIXEL_ROWS       # 100 outputs: 4 of 32 pixels of a tile idle
    # groups of at most 8 output channels (RegNet, ResNeXt 32x4d, few-class heads): the plane form where its
    # tiles fill well, i.e. rows of NR pixels or more, or shorter rows of a stride-1 conv
    assert form(8, 784, 72, 9, plane_rows=(28, 30)) == FORM_PLANES
    assert form(4, 3136, 36, 9, plane_rows=(56, 58)) == FORM_PLANES
    assert form(8, 49, 72, 9, plane_rows=(7, 9)) == FORM_PLANES       # 7 of 9 positions of a wrapped tile
    # (a strided conv's 7x7 output: with AVX-512 the pixel rows' 32-channel panels would be a quarter full)
    assert form(8, 49, 72, 9, plane_rows=None) == (FORM_DIRECT if MR == 12 else FORM_PIXEL_ROWS)
    # wider groups keep their forms (the fill rule's: AVX-512's direct tiles are 12 channels tall)
    assert form(16, 784, 144, 9, plane_rows=(28, 30)) == (FORM_DIRECT if MR == 12 else FORM_PIXEL_ROWS)
    assert form(8, 784, 8, 1, plane_rows=(28, 28)) == FORM_DIRECT     # and 1x1 convs


def test_pointwise_in_place_or_packed():
    in_place = lower_conv.pointwise_in_place
    assert in_place(16, 96, 112 * 112)          # a shallow K: reading the planes in place is cheap
    assert in_place(96, 24, 56 * 56)            # few output channels: a packed panel serves too few
    assert in_place(192, 32, 28 * 28)
    assert not in_place(256, 64, 56 * 56)       # a large plane: each k step of a tile is a new page
    assert not in_place(512, 128, 28 * 28)      # many output-channel panels share each packed panel
    assert not in_place(1024, 256, 64 * 64)
    assert not in_place(4096, 16, 16)           # deeper than INPLACE_B_MAX_K


@pytest.mark.parametrize("veus", [1, 2])
def test_pointwise_conv_on_packed_panels_matches_reference(veus):
    # 64 -> 128 channels over 40x40: packed B panels (many channel panels, a plane past a page per row)
    m, feeds = conv_model((1, 64, 40, 40), (128, 64, 1, 1), epilogue=("Relu",))
    compare(m, feeds, veus=veus, atol=1e-6 * 64)


def test_pack_weights_nr_wide_panels():
    from rammer.backends.cpu.ukernel import NR

    w = rand(40, 3, 2, 2)
    packed = pack_weights(w, 1, 12, NR)
    npad = -(-40 // NR) * NR  # (2 panels of 32 with AVX-512, 3 of 16 with AVX2)
    assert packed.size == npad * 12
    last = npad - NR
    panel = packed[last * 12:npad * 12].reshape(12, NR)  # the last channel panel, k-major
    np.testing.assert_array_equal(panel[:, :40 - last], w.reshape(40, 12)[last:].T)
    assert not panel[:, 40 - last:].any()


def test_copy_block_constant_and_runtime_counts():
    from numba import njit

    from rammer.backends.cpu.atomics import copy_block

    @njit
    def copy(a, n):
        copy_block(a, 40, 3, 16)
        copy_block(a, 80, 7, n)

    a = np.arange(100, dtype=np.float32)
    want = a.copy()
    want[40:56] = a[3:19]
    want[80:85] = a[7:12]
    copy(a, 5)
    np.testing.assert_array_equal(a, want)


PIXEL_ROW_CASES = CASES + [
    ((1, 64, 8, 8), (64, 16, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),       # full 8-pixel rows and 32-channel panels
    ((1, 16, 7, 7), (40, 16, 3, 3), dict(pads=[1, 1, 1, 1])),                 # tiles across rows, partial channel panel
    ((1, 32, 16, 16), (64, 16, 3, 3), dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1])),  # phase planes
    ((1, 24, 5, 13), (32, 24, 1, 1), {}),                                      # pointwise, partial last tile
    ((1, 24, 9, 13), (40, 24, 1, 1), dict(strides=[2, 3])),                    # strided 1x1: read in place
    ((1, 16, 8, 8), (32, 16, 1, 1), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # padded 1x1: phase planes
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", PIXEL_ROW_CASES)
@pytest.mark.parametrize("veus", [1, 2])
def test_conv_pixel_row_form_matches_reference(monkeypatch, x_shape, w_shape, attrs, veus):
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.kernels_conv import FORM_PIXEL_ROWS
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PIXEL_ROWS)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), **attrs)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "pixel-rows"
    compare(m, feeds, veus=veus, atol=1e-6 * int(np.prod(w_shape[1:])))


@pytest.mark.parametrize("x_shape,w_shape", [
    ((1, 2048, 3, 5), (70, 2048, 1, 1)),  # pointwise, read in place: edge tiles both ways
    ((1, 256, 4, 4), (48, 256, 3, 3)),    # 3x3 through the phase planes
])
@pytest.mark.parametrize("veus", [1, 2])
def test_conv_pixel_rows_in_k_blocks(monkeypatch, x_shape, w_shape, veus):
    # Weights past L2 (channel panels outer) with a small block budget: the K rows run in
    # three blocks, the first storing bias + residual, the others accumulating, the last
    # applying the ReLU; a NaN in the input reaches the output as in the reference.
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PIXEL_ROWS)
    K = int(np.prod(w_shape[1:]))
    monkeypatch.setattr(lower_conv, "PIXEL_ROWS_L2_FLOATS", (K * 32 + x_shape[1] * 36) // 3 + 1)
    assert lower_conv.pixel_rows_depth(K, x_shape[1] * 36) < K
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Add", "Relu"), pads=[w_shape[2] // 2] * 4)
    feeds["x"] = feeds["x"] - 0.5
    feeds["x"][0, 3, 1, 2] = np.nan
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "pixel-rows"
    compare(m, feeds, veus=veus, atol=1e-5 * K)


@pytest.mark.parametrize("x_shape,strides", [
    ((1, 1024, 3, 5), [1, 1]),  # a tile spans output rows (one run of pixels); the edge tile does not
    ((1, 1024, 7, 6), [2, 2]),  # strided: every tile's pixels gathered one by one
])
@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("blocks", [1, 3])
def test_conv_pixel_rows_packed(monkeypatch, x_shape, strides, veus, blocks):
    # An unpadded 1x1 conv with weights past L2 (channel panels outer) copies its tiles' pixel
    # rows into scratch once per K block and runs every channel panel over the copies; the
    # result, edge tiles, bias + residual + ReLU and a NaN included, is the reference's.
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PIXEL_ROWS)
    w_shape = (280, x_shape[1], 1, 1)  # 140 channels a vEU with two: weights past L2 either way
    K = x_shape[1]
    if blocks > 1:
        budget = (K * 32 + K * x_shape[2] * x_shape[3]) // blocks + 1
        monkeypatch.setattr(lower_conv, "PIXEL_ROWS_L2_FLOATS", budget)
        assert -(-K // lower_conv.pixel_rows_depth(K, K * x_shape[2] * x_shape[3])) == blocks
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Add", "Relu"), strides=strides)
    feeds["x"] = feeds["x"] - 0.5
    feeds["x"][0, 3, 2, 4] = np.nan
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "pixel-rows" and op.extra["packed_rows"]
    compare(m, feeds, veus=veus, atol=1e-5 * K)
    monkeypatch.setattr(lower_conv, "PACK_PIXEL_ROWS_MAX", None)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert not op.extra["packed_rows"]


@pytest.mark.parametrize("form", [None, FORM_DIRECT, FORM_TRANSPOSED, FORM_PIXEL_ROWS, FORM_WINOGRAD])
@pytest.mark.parametrize("chain", ["relu", "relu_add_raw", "bias_only", "relu_then_sigmoid", "add_relu",
                                   "add_relu_add_raw", "add_broadcast_relu", "add_relu_both_outputs", "relu6",
                                   "add_relu6", "clip_not_relu6", "sum_relu", "hswish", "add_hswish_sixth",
                                   "hswish_raw_read", "silu", "add_silu", "silu_sigmoid_read"])
@pytest.mark.parametrize("k,kc,m", [(3, None, 40), (1, None, 40), (1, 24, 40), (1, 24, 44)])
def test_conv_bias_residual_and_relu_in_the_kernel(monkeypatch, form, chain, k, kc, m):
    # The kernel adds the bias and a dense residual and applies a ReLU when the value it replaces
    # has no other reader; otherwise (a later member reads it, a broadcast residual) the
    # interpreter does the rest.  A Clip to [0, 6] (ReLU6) is applied by the kernel like a ReLU;
    # other bounds stay in the interpreter.
    # 1x1: the direct form reads the input in place and applies the epilogue as each tile is
    # stored (bias and residual with the first K block, ReLU with the last: kc=24 makes two).
    # 40 and 44 output channels end in a panel of 4 and of 8 (the short micro-kernels).
    monkeypatch.setattr(lower_conv, "FORCE_FORM", form)
    if kc:
        monkeypatch.setattr(lower_conv, "IMPLICIT_KC", kc)
    x = rand(1, 40, 10, 11)
    consts = {"w": rand(m, 40, k, k, seed=1), "b": rand(m, seed=2), "zb": rand(1, m, 1, 1, seed=4),
              "lo": np.array(0.0, np.float32), "six": np.array(6.0, np.float32), "one": np.array(1.0, np.float32),
              "three": np.array(3.0, np.float32), "sixth": np.array(1.0 / 6.0, np.float32)}
    feeds = {"x": x, "z": rand(1, m, 10, 11, seed=3)}
    steps = {
        "relu": [("Relu", ["c"], "r")],
        "relu_add_raw": [("Relu", ["c"], "r"), ("Add", ["r", "c"], "y")],
        "bias_only": [],
        "relu_then_sigmoid": [("Relu", ["c"], "r"), ("Sigmoid", ["r"], "y")],
        "add_relu": [("Add", ["z", "c"], "a"), ("Relu", ["a"], "y")],
        "add_relu_add_raw": [("Add", ["c", "z"], "a"), ("Relu", ["a"], "r"), ("Add", ["r", "a"], "y")],
        "add_broadcast_relu": [("Add", ["c", "zb"], "a"), ("Relu", ["a"], "y")],
        "add_relu_both_outputs": [("Add", ["c", "z"], "a"), ("Relu", ["a"], "y")],
        "relu6": [("Clip", ["c", "lo", "six"], "r")],
        "add_relu6": [("Add", ["c", "z"], "a"), ("Clip", ["a", "lo", "six"], "y")],
        "clip_not_relu6": [("Clip", ["c", "lo", "one"], "r")],
        "sum_relu": [("Sum", ["z", "c"], "a"), ("Relu", ["a"], "y")],  # Caffe2's residual
        # HardSwish as Paddle writes it: x * Clip(x + 3, 0, 6) / 6 (or * 1/6)
        "hswish": [("Add", ["c", "three"], "a3"), ("Clip", ["a3", "lo", "six"], "g"), ("Mul", ["c", "g"], "p"),
                   ("Div", ["p", "six"], "y")],
        "add_hswish_sixth": [("Add", ["c", "z"], "a"), ("Add", ["three", "a"], "a3"),
                             ("Clip", ["a3", "lo", "six"], "g"), ("Mul", ["g", "a"], "p"),
                             ("Mul", ["p", "sixth"], "y")],
        "silu": [("Sigmoid", ["c"], "g"), ("Mul", ["c", "g"], "y")],  # torch's SiLU
        "add_silu": [("Add", ["c", "z"], "a"), ("Sigmoid", ["a"], "g"), ("Mul", ["g", "a"], "y")],
        "silu_sigmoid_read": [("Sigmoid", ["c"], "g"), ("Mul", ["c", "g"], "m"), ("Add", ["m", "g"], "y")],
        "hswish_raw_read": [("Add", ["c", "three"], "a3"), ("Clip", ["a3", "lo", "six"], "g"), ("Mul", ["c", "g"], "p"),
                            ("Div", ["p", "six"], "q"), ("Add", ["q", "c"], "y")],
    }[chain]
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4)]
    nodes += [node(op, ins, [out]) for op, ins, out in steps]
    outputs = [steps[-1][2] if steps else "c"] + (["a"] if chain == "add_relu_both_outputs" else [])
    used = {k: v for k, v in consts.items() if any(k in n.input for n in nodes)}
    used_feeds = {k: v for k, v in feeds.items() if any(k in n.input for n in nodes)}
    report = compare(model(nodes, used_feeds, outputs, used), used_feeds, atol=2e-4)
    assert report["ops_by_family"] == {"conv": 1}, report["ops_by_family"]


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 16, 30, 34), (40, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 8, 23, 31), (33, 8, 5, 5), dict(strides=[2, 2], pads=[2, 1, 2, 3])),
    ((1, 12, 21, 17), (32, 12, 3, 3), dict(strides=[2, 1], pads=[1, 1, 1, 1], dilations=[2, 1])),
    ((1, 16, 198, 258), (32, 16, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # tasks cut to fit their rows
])
@pytest.mark.parametrize("veus", [1, 2])
def test_strided_pixel_rows_read_plain_rows_at_the_stride(monkeypatch, x_shape, w_shape, attrs, veus):
    # The plain padded rows read at the stride (STRIDED_PIXEL_ROWS_PLAIN) give the reference's outputs.
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PIXEL_ROWS)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), **attrs)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "pixel-rows" and op.extra["plain_rows"]
    compare(m, feeds, veus=veus, atol=1e-6 * int(np.prod(w_shape[1:])))


@pytest.mark.parametrize("m_out", [4, 5, 6, 7, 8, 9, 12, 13, 17])
@pytest.mark.parametrize("veus", [1, 2])
def test_pointwise_in_place_k_blocks_every_last_panel(m_out, veus):
    """A 1x1 conv reading its input planes in place over two K blocks (the later one accumulating),
    for every size of a last panel of output channels: with AVX2's MR = 6, panels of 5-8 rows ran the
    8-row kernel variant, which read two rows past the A panel and wrote two past the tile (the next
    block then accumulated junk onto another panel's rows; resnet50 came out 1% off)."""
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    m, feeds = conv_model((1, 300, 8, 8), (m_out, 300, 1, 1), epilogue=("Relu",))
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "implicit" and op.extra["K"] > lower_conv.IMPLICIT_KC
    compare(m, feeds, veus=veus, atol=1e-6 * 300)


def test_pixel_row_panels_cover_the_channels():
    """Every group's channels fall in whole panels, at most two of them narrow: with AVX2's 24 and 16
    they pad the channels only up to a multiple of 8 (and 16), with AVX-512's 32 up to a panel."""
    from rammer.backends.cpu.kernels_conv import pixel_row_panel_start, pixel_row_panels
    from rammer.backends.cpu.ukernel import PX_NR, PX_NR_NARROW

    for mg in range(1, 400):
        wide, narrow = pixel_row_panels(mg)
        mpad = pixel_row_panel_start(wide + narrow, wide)
        assert narrow <= 2 and mpad >= mg
        if PX_NR_NARROW == PX_NR:
            assert mpad == -(-mg // PX_NR) * PX_NR
        else:
            assert mpad == max(PX_NR_NARROW, -(-mg // 8) * 8), mg


def test_pack_pixel_row_weights_layout():
    from rammer.backends.cpu.kernels_conv import pack_pixel_row_weights, pixel_row_panel_start, pixel_row_panels
    from rammer.backends.cpu.ukernel import PX_NR, PX_NR_NARROW

    for mg in (5, 16, 24, 32, 40, 64, 72):
        w = rand(2 * mg, 3, 3, 3)
        packed = pack_pixel_row_weights(w, 2)
        wide, narrow = pixel_row_panels(mg)
        mpad, K = pixel_row_panel_start(wide + narrow, wide), 27
        assert packed.size == 2 * mpad * K
        flat = w.reshape(2, mg, K)
        for g in range(2):
            for p in range(wide + narrow):
                s, width = pixel_row_panel_start(p, wide), (PX_NR if p < wide else PX_NR_NARROW)
                panel = packed[g * mpad * K + s * K:g * mpad * K + (s + width) * K].reshape(K, width)
                for j in range(width):
                    want = flat[g, s + j] if s + j < mg else np.zeros(K, np.float32)
                    np.testing.assert_array_equal(panel[:, j], want)


@pytest.mark.parametrize("m_out", [16, 24, 32, 40, 64, 72, 128, 136])
@pytest.mark.parametrize("veus", [1, 2])
def test_pixel_rows_wide_and_narrow_panels(monkeypatch, m_out, veus):
    """Output channel counts that end in narrow panels (or none), split over tasks on panel starts."""
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.kernels_conv import pixel_row_panel_start, pixel_row_panels
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PIXEL_ROWS)
    m, feeds = conv_model((1, 16, 5, 6), (m_out, 16, 3, 3), epilogue=("Relu",), pads=[1, 1, 1, 1])
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "pixel-rows"
    wide, narrow = pixel_row_panels(m_out)
    panel_starts = {pixel_row_panel_start(p, wide) for p in range(wide + narrow)}
    for k in (2, 3, 5, 8):
        seen = np.zeros((m_out, 30), np.int64)
        for _, _, m0, m1, q0, q1 in op.partition(k) or [(0, 1, 0, m_out, 0, 30)]:
            assert m0 in panel_starts
            seen[m0:m1, q0:q1] += 1
        assert (seen == 1).all()
    compare(m, feeds, veus=veus, atol=1e-6 * 144)


PLANE_CASES = [
    ((1, 48, 20, 22), (48, 8, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),                   # RegNet's groups of 8
    ((2, 24, 13, 17), (24, 4, 3, 3), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),   # groups of 4, batch 2
    ((1, 64, 7, 7), (64, 8, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),                     # wrapped tiles (7 < NR)
    ((1, 16, 11, 9), (6, 16, 3, 3), dict(pads=[2, 2, 2, 2], dilations=[2, 2])),            # 6: a short panel, wrapped
    ((1, 12, 20, 37), (6, 6, 5, 3), dict(group=2, strides=[2, 1], pads=[2, 1, 2, 1])),     # a last row run of 5
    ((1, 3, 40, 40), (8, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),               # a stem of 8 channels
    ((1, 8, 18, 18), (20, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                              # 20 channels: 5 panels
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", PLANE_CASES)
@pytest.mark.parametrize("veus", [1, 2])
def test_conv_plane_form_matches_reference(monkeypatch, x_shape, w_shape, attrs, veus):
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_PLANES)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), **attrs)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "planes"
    compare(m, feeds, veus=veus, atol=1e-6 * int(np.prod(w_shape[1:])))


@pytest.mark.parametrize("side", [20, 7])
@pytest.mark.parametrize("chain", ["add_relu", "add_silu", "add_broadcast_relu", "relu_add_raw"])
def test_conv_plane_form_epilogues(side, chain):
    """Bias, a residual and an activation in the kernel's store (rows of NR pixels and more, and the
    wrapped tiles' stores from the scratch tile), or the interpreter's epilogue, by the form's own choice."""
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    x = rand(1, 16, side, side)
    consts = {"w": rand(16, 8, 3, 3, seed=1), "b": rand(16, seed=2), "zb": rand(1, 16, 1, 1, seed=4)}
    feeds = {"x": x, "z": rand(1, 16, side, side, seed=3)}
    steps = {"add_relu": [("Add", ["z", "c"], "a"), ("Relu", ["a"], "y")],
             "add_silu": [("Add", ["c", "z"], "a"), ("Sigmoid", ["a"], "g"), ("Mul", ["g", "a"], "y")],
             "add_broadcast_relu": [("Add", ["c", "zb"], "a"), ("Relu", ["a"], "y")],
             "relu_add_raw": [("Relu", ["c"], "r"), ("Add", ["r", "c"], "y")]}[chain]
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, group=2)]
    nodes += [node(op, ins, [out]) for op, ins, out in steps]
    used = {k: v for k, v in consts.items() if any(k in n.input for n in nodes)}
    used_feeds = {k: v for k, v in feeds.items() if any(k in n.input for n in nodes)}
    graph = model(nodes, used_feeds, [steps[-1][2]], used)
    (op,) = [o for o in compile_program(load(graph)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "planes"
    report = compare(graph, used_feeds, atol=2e-4)
    assert report["ops_by_family"] == {"conv": 1}, report["ops_by_family"]
