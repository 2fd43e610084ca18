"""Winograd F(2x2, 3x3) convolution: its LLVM transforms against numpy, the form against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, conv_model, model, node, rand

from rammer.backends.cpu import lower_conv
from rammer.backends.cpu import ukernel_winograd as uw
from rammer.backends.cpu.kernels_conv import FORM_WINOGRAD
from rammer.backends.cpu.machine_code import compile_module
from rammer.backends.cpu.ukernel import EPI_BIAS, EPI_RELU, EPI_RESIDUAL, WIDTH


@pytest.fixture(scope="module", params=sorted({WIDTH, 8}))
def transforms(request):
    """Both transforms compiled at each vector width (AVX2 code runs on AVX-512 CPUs too)."""
    width = request.param
    engine = compile_module(uw.winograd_module(width))
    yield (width, uw.IN_CFUNCTYPE(engine.get_function_address(uw.IN_SYMBOL)),
           uw.OUT_CFUNCTYPE(engine.get_function_address(uw.OUT_SYMBOL)), engine)


def test_input_transform_is_bt_d_b_per_channel_and_tile(transforms):
    width, fin, _, _ = transforms
    rng = np.random.default_rng(0)
    ncg, wq = 3, 2 * width + 9
    cstride = 5 * wq
    x = rng.standard_normal(ncg * cstride + 64).astype(np.float32)
    ldv, vs = width + 5, 3 * (width + 5) + 3
    v = np.full(16 * vs + 64, 7.0, np.float32)
    fin(x.ctypes.data, wq, cstride, v.ctypes.data, ldv, vs, ncg)
    written = np.zeros(v.size, bool)
    for c in range(ncg):
        for t in range(width):
            d = np.array([[x[c * cstride + i * wq + 2 * t + j] for j in range(4)] for i in range(4)], np.float64)
            at = np.arange(16) * vs + c * ldv + t
            np.testing.assert_allclose(v[at], (uw.BT @ d @ uw.BT.T).ravel(), rtol=1e-5, atol=1e-5)
            written[at] = True
    assert (v[~written] == 7.0).all()  # nothing else is written


@pytest.mark.parametrize("flags", range(16))
def test_output_transform_stores_at_a_m_a_with_its_epilogue_and_masks(transforms, flags):
    """Odd column counts, one row and a partial second half: nothing outside them is written."""
    width, _, fout, _ = transforms
    rng = np.random.default_rng(flags)
    nm, mstride = 3, width + 9
    ms = nm * mstride + 1
    mx = rng.standard_normal(16 * ms + 64).astype(np.float32)
    ldo = 2 * width + 11
    ostride = 3 * ldo
    bias = rng.standard_normal(nm).astype(np.float32)
    for ncols, nrows in ((2 * width, 2), (5, 2), (2 * width - 1, 1), (width + 3, 2)):
        res = rng.standard_normal(nm * ostride + 64).astype(np.float32)
        res[ldo + 1] = np.nan  # a NaN residual stays NaN through the ReLU
        out = np.full(nm * ostride + 64, 9.0, np.float32)
        fout(mx.ctypes.data, ms, mstride, out.ctypes.data, ldo, ostride, nm, ncols, nrows, flags, bias.ctypes.data,
             res.ctypes.data)
        want = np.full(out.size, 9.0)
        for r in range(nm):
            for t in range(width):
                y = uw.AT @ mx[np.arange(16) * ms + r * mstride + t].astype(np.float64).reshape(4, 4) @ uw.AT.T
                for a in range(nrows):
                    for b in range(2):
                        col = 2 * t + b
                        if col >= ncols:
                            continue
                        at = r * ostride + a * ldo + col
                        val = y[a, b] + (bias[r] if flags & EPI_BIAS else 0) + (res[at] if flags & EPI_RESIDUAL else 0)
                        want[at] = val if not flags & EPI_RELU or np.isnan(val) or val > 0 else 0.0
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_transformed_weights_give_the_direct_convolution_of_a_tile():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 3, 3, 3))
    d = rng.standard_normal((3, 4, 4))
    u = uw.transform_weights(w).astype(np.float64)  # [16, m, c]
    v = np.stack([uw.BT @ d[c] @ uw.BT.T for c in range(3)]).reshape(3, 16)
    mx = np.einsum("xmc,cx->mx", u, v).reshape(2, 4, 4)
    got = np.stack([uw.AT @ mx[m] @ uw.AT.T for m in range(2)])
    direct = np.array([[[sum((w[m, c] * d[c, a:a + 3, b:b + 3]).sum() for c in range(3)) for b in range(2)]
                        for a in range(2)] for m in range(2)])
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)


def test_winograd_plan_takes_deep_3x3_stride_1_convs_on_planes_with_enough_tiles():
    def plan(c, m, hw, k=3, s=1, groups=1, force=False):
        oh = (hw + 2 - k) // s + 1
        geo = (1, c, hw, hw, k, k, s, s, 1, 1, 1, 1, oh, oh)
        return lower_conv.winograd_plan(geo, c // groups, m // groups, force=force)
    assert plan(1024, 1024, 32, groups=16) is not None   # ResNeXt's 64-channel groups at 32x32
    assert plan(2048, 2048, 16, groups=16) is not None   # ... 128-channel groups at 16x16
    assert plan(4096, 4096, 8, groups=16) is None        # 16 tiles: its weights cost more than it saves
    assert plan(64, 64, 56) is not None                  # ResNet's first stage
    assert plan(8, 8, 32) is None                        # too shallow
    assert plan(8, 8, 32, force=True) is not None        # ... but it can run it
    assert plan(64, 64, 32, k=5) is None and plan(64, 64, 32, k=5, force=True) is None
    assert plan(64, 64, 32, s=2, force=True) is None
    trc, tcp, wq = plan(1024, 1024, 32, groups=16)
    assert tcp % 32 == 0 and trc * 16 <= tcp and wq == 34


WINOGRAD_CASES = [
    ((1, 16, 12, 12), (24, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 8, 9, 13), (20, 4, 3, 3), dict(group=2, pads=[1, 0, 2, 1])),     # odd planes, uneven pads
    ((1, 5, 3, 40), (7, 5, 3, 3), dict(pads=[0, 1, 0, 1])),               # one output row: half tiles
    ((1, 32, 34, 34), (40, 32, 3, 3), dict()),                            # unpadded; tile rows of 16
    ((1, 3, 2, 2), (2, 3, 3, 3), dict(pads=[1, 1, 1, 1])),                # a single tile
    ((1, 16, 12, 12), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1])),           # a last panel of 8 channels
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", WINOGRAD_CASES)
@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("epilogue", [("Relu",), ("Add", "Relu"), ("Sigmoid",)])
def test_conv_winograd_form_matches_reference(monkeypatch, x_shape, w_shape, attrs, veus, epilogue):
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_WINOGRAD)
    m, feeds = conv_model(x_shape, w_shape, epilogue=epilogue, **attrs)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "winograd"
    compare(m, feeds, veus=veus, atol=2e-6 * int(np.prod(w_shape[1:])) + 1e-5)


@pytest.mark.parametrize("veus", [1, 2])
def test_conv_winograd_chunks_of_tile_rows_and_row_partitions(monkeypatch, veus):
    """Chunks of 2 tile rows (the last one shorter) and rTasks cutting tile rows and channels."""
    monkeypatch.setattr(lower_conv, "WINOGRAD_CHUNK_FLOATS", 16 * (16 + 24) * 8 * 2)
    x = rand(1, 16, 18, 15)
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["y"])]
    m = model(nodes, {"x": x}, ["y"], {"w": rand(24, 16, 3, 3, seed=1), "b": rand(24, seed=2)})
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    monkeypatch.setattr(lower_conv, "FORCE_FORM", FORM_WINOGRAD)
    (op,) = [o for o in compile_program(load(m)).lowered.ops if o.family == "conv"]
    assert op.extra["kernel"] == "winograd"
    assert len(op.partition(4)) == 4 and {p[5] % (2 * 15) for p in op.partition(4)} == {0}  # whole tile rows (OW 15)
    compare(m, {"x": x}, veus=veus, atol=1e-4)
