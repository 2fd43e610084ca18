"""QLinearConv and QLinearMatMul (the QOperator format of quantized models, e.g. the corpus's
mobilenet-v2-int8-qop) on the GPU backends: integer accumulation in 64-bit registers, the float32
requantization multiplier computed as the reference computes it, so the 8-bit outputs must equal
``reference`` exactly, on opencl (PoCL) and on the CUDA-semantics emulator (the real CuPy runner)."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import install_fake_cupy
from gpu_helpers import const, model, need_opencl, vi
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.backends.gpu.compiler import unsupported

U8, I8 = TensorProto.UINT8, TensorProto.INT8


def _refusals(m) -> list[str]:
    be = plugins.get_backend("opencl", compile_only=True)
    return [why for _, why in unsupported(be.prepare_graph(rammer.load(m)).graph)]


def _qconv_model(x_shape, w_shape, y_shape, per_channel: bool, xtype: int, wtype: int, bias: bool,
                 seed: int, **attrs):
    """``x`` quantized by QuantizeLinear (so the input is a float feed), then QLinearConv; the 8-bit
    output is the graph output.  Scales are chosen so that some outputs saturate at both ends."""
    rng = np.random.default_rng(seed)
    xdt = np.uint8 if xtype == U8 else np.int8
    wdt = np.uint8 if wtype == U8 else np.int8
    oc = w_shape[0]
    taps = int(np.prod(w_shape[1:]))
    lo, hi = np.iinfo(wdt).min, np.iinfo(wdt).max
    inits = [const("xs", np.array(0.05, np.float32)), const("xz", np.array(128 if xtype == U8 else -3, xdt)),
             const("w", rng.integers(lo, hi + 1, w_shape).astype(wdt)),
             const("ws", (rng.uniform(0.002, 0.02, oc) if per_channel else np.array(0.01)).astype(np.float32)),
             const("wz", (rng.integers(lo // 2, hi // 2, oc) if per_channel else np.array(hi // 4)).astype(wdt)),
             const("ys", np.array(0.08 * np.sqrt(taps / 27), np.float32)), const("yz", np.array(120, np.uint8))]
    ins = ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(const("b", rng.integers(-3000, 3000, oc).astype(np.int32)))
        ins.append("b")
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ins, ["y"], **attrs)]
    return model(nodes, [vi("x", list(x_shape))], [vi("y", list(y_shape), U8)], inits)


#: (x, w, y shapes, attributes): dense 3x3 with padding and stride, depthwise, grouped with
#: dilation, 1x1, and 1-d.
CONV_CASES = {
    "dense_pad_stride": ((1, 3, 9, 8), (6, 3, 3, 3), (1, 6, 5, 4), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "depthwise": ((2, 4, 6, 6), (4, 1, 3, 3), (2, 4, 6, 6), dict(pads=[1, 1, 1, 1], group=4)),
    "grouped_dilated": ((1, 4, 8, 8), (6, 2, 3, 3), (1, 6, 4, 4), dict(group=2, dilations=[2, 2])),
    "pointwise": ((1, 5, 4, 4), (7, 5, 1, 1), (1, 7, 4, 4), {}),
    "one_d": ((1, 3, 10), (4, 3, 3), (1, 4, 10), dict(pads=[1, 1])),
}


def _feeds(shape, seed: int, name: str = "x") -> dict:
    return {name: (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)}


def _assert_exact(got: dict, want: dict) -> None:
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_equals_reference_on_opencl(case, per_channel):
    need_opencl()
    xs, ws, ys, attrs = CONV_CASES[case]
    m = _qconv_model(xs, ws, ys, per_channel, U8 if per_channel else I8, I8 if per_channel else U8,
                     bias=case != "pointwise", seed=len(case), **attrs)
    assert _refusals(m) == []
    compiled = rammer.compile(m, backend="opencl", mode="wave")
    assert "qlinear_conv" in compiled.executable.report["kernels"]
    want_model = rammer.compile(m, backend="reference")
    saturated = 0
    for seed in (1, 2):
        feeds = _feeds(xs, seed)
        want = want_model.run(feeds)
        _assert_exact(compiled.run(feeds), want)
        saturated += int((want["y"] == 0).any()) + int((want["y"] == 255).any())
    assert saturated  # the check covers the clamps


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_qlinear_ops_on_the_cuda_emulator(monkeypatch, op):
    install_fake_cupy(monkeypatch)
    xs, ws, ys, attrs = CONV_CASES["grouped_dilated"]
    if op == "QLinearConv":
        m, shape, name = _qconv_model(xs, ws, ys, True, U8, I8, True, seed=3, **attrs), xs, "x"
    else:
        m, shape, name = _qmatmul_model((2, 5, 33), (33, 6), (2, 5, 6), per_column=True, seed=4), (2, 5, 33), "a"
    feeds = _feeds(shape, 7, name)
    _assert_exact(rammer.compile(m, backend="cuda").run(feeds), rammer.compile(m, backend="reference").run(feeds))


def _qmatmul_model(a_shape, b_shape, y_shape, per_column: bool, seed: int):
    rng = np.random.default_rng(seed)
    n = b_shape[-1]
    inits = [const("as", np.array(0.04, np.float32)), const("az", np.array(131, np.uint8)),
             const("b", rng.integers(-128, 128, b_shape).astype(np.int8)),
             const("bs", (rng.uniform(0.002, 0.02, n) if per_column else np.array(0.008)).astype(np.float32)),
             const("bz", (rng.integers(-20, 20, n) if per_column else np.array(5)).astype(np.int8)),
             const("ys", np.array(0.1, np.float32)), const("yz", np.array(-4, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
             helper.make_node("QLinearMatMul", ["aq", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])]
    return model(nodes, [vi("a", list(a_shape))], [vi("y", list(y_shape), I8)], inits)


#: (A, B, Y shapes): batched rows that fit one block, and rows longer than a block's threads.
MATMUL_CASES = {"batched": ((2, 5, 33), (33, 6), (2, 5, 6)), "wide": ((3, 20), (20, 150), (3, 150))}


@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_equals_reference_on_opencl(case, per_column):
    need_opencl()
    a_shape, b_shape, y_shape = MATMUL_CASES[case]
    m = _qmatmul_model(a_shape, b_shape, y_shape, per_column, seed=5)
    assert _refusals(m) == []
    compiled = rammer.compile(m, backend="opencl", mode="wave")
    assert "qlinear_matmul" in compiled.executable.report["kernels"]
    feeds = _feeds(a_shape, 8, "a")
    want = rammer.compile(m, backend="reference").run(feeds)
    _assert_exact(compiled.run(feeds), want)
    assert (want["y"] == -128).any() and (want["y"] == 127).any()


def test_a_qlinear_scale_computed_at_run_time_is_refused_by_name():
    m = _qmatmul_model((2, 4), (4, 3), (2, 3), per_column=False, seed=6)
    kept = [t for t in m.graph.initializer if t.name != "ys"]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    m.graph.input.append(vi("ys", []))  # the output scale is fed: computed at run time
    why = _refusals(m)
    assert len(why) == 1 and "QLinearMatMul" in why[0] and "y_scale 'ys' is computed at run time" in why[0], why
