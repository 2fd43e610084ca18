"""LayerNormalization, Clip and Erf on the GPU backends: small ONNX models compiled for opencl (PoCL)
in wave mode against reference; what no rKernel implements is refused naming node and op."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gpu_helpers import check_wave as _check
from gpu_helpers import const as _const
from gpu_helpers import model as _model
from gpu_helpers import need_opencl as _opencl
from gpu_helpers import vi as _vi
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.errors import UnsupportedOpError

#: Each case builds OpenCL programs on PoCL: seconds each with PoCL's cache cold (a fresh machine). Left out
#: of the quick subset.
pytestmark = pytest.mark.slow

F = TensorProto.FLOAT


# -- LayerNormalization --------------------------------------------------------------------------

def _layernorm(x_shape, axis, scale_shape, bias_shape, eps=1e-5, scale_input=False):
    rng = np.random.default_rng(0)
    inits = [] if scale_input else [_const("scale", rng.standard_normal(scale_shape).astype(np.float32))]
    inputs = [_vi("x", list(x_shape))] + ([_vi("scale", list(scale_shape))] if scale_input else [])
    ins = ["x", "scale"]
    if bias_shape is not None:
        inits.append(_const("bias", rng.standard_normal(bias_shape).astype(np.float32)))
        ins.append("bias")
    node = helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=eps)
    return _model([node], inputs, [_vi("y", list(x_shape))], inits)


@pytest.mark.parametrize("x_shape, axis, scale_shape, bias_shape", [
    ((2, 16, 64), -1, (64,), (64,)),          # bert/gpt2/vit: the last axis, scale and bias
    ((3, 5, 300), 2, (300,), (300,)),         # a row longer than the block (256 threads)
    ((2, 17, 8), 1, (17, 8), (8,)),           # two normalized axes; the bias repeats along the row
    ((4, 6), -1, (1, 6), None),               # no bias; a scale with a leading 1
    ((2, 3, 4), 0, (4,), (1,)),               # every axis: one row; bias broadcast from one value
])
def test_layernorm_matches_reference(x_shape, axis, scale_shape, bias_shape):
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32) * 3 + 100  # a large mean
    _check(_layernorm(x_shape, axis, scale_shape, bias_shape), {"x": x}, kernels=["layernorm_rows"])


def test_layernorm_with_a_scale_computed_at_run_time_and_a_tiny_epsilon():
    model = _layernorm((3, 40), -1, (40,), (40,), eps=1e-12, scale_input=True)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 40)).astype(np.float32), "scale": rng.standard_normal(40).astype(np.float32)}
    _check(model, feeds, kernels=["layernorm_rows"])


def test_layernorm_after_an_add_as_the_transformers_have_it():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["y"], axis=-1, epsilon=1e-12)]
    model = _model(nodes, [_vi("x", [2, 7, 32]), _vi("r", [2, 7, 32])], [_vi("y", [2, 7, 32])],
                   [_const("scale", rng.standard_normal(32).astype(np.float32)),
                    _const("bias", rng.standard_normal(32).astype(np.float32))])
    feeds = {k: rng.standard_normal((2, 7, 32)).astype(np.float32) for k in ("x", "r")}
    _check(model, feeds, kernels=["layernorm_rows"])


@pytest.mark.parametrize("outputs", [("y", "mean", "inv"), ("y", "mean"), ("y", "", "inv")])
def test_layernorm_mean_and_inv_std_dev_outputs(outputs):
    rng = np.random.default_rng(4)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], list(outputs), axis=1, epsilon=1e-3)
    outs = [_vi("y", [3, 4, 5])] + [_vi(o, [3, 1, 1]) for o in outputs[1:] if o]
    inits = [_const("scale", rng.standard_normal((4, 5)).astype(np.float32)),
             _const("bias", rng.standard_normal(5).astype(np.float32))]
    model = _model([node], [_vi("x", [3, 4, 5])], outs, inits)
    _check(model, {"x": rng.standard_normal((3, 4, 5)).astype(np.float32) + 2}, kernels=["layernorm_rows"])


@pytest.mark.parametrize("case, why", [("stash_double", "stash_type"), ("scale_17x1", "broadcasts")])
def test_layernorm_cases_without_an_rkernel_are_refused_naming_the_node(case, why):
    _opencl()
    from rammer.backends.gpu.compiler import unsupported

    if case == "stash_double":
        node = helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=-1, stash_type=11, name="the_ln")
        model = _model([node], [_vi("x", [17, 8])], [_vi("y", [17, 8])], [_const("scale", np.ones(8, np.float32))])
    else:
        node = helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=0, name="the_ln")
        model = _model([node], [_vi("x", [17, 8])], [_vi("y", [17, 8])],
                       [_const("scale", np.ones((17, 1), np.float32))])
    with pytest.raises(UnsupportedOpError, match="the_ln"):
        rammer.compile(model, backend="opencl", mode="wave")
    reasons = [r for _, r in unsupported(plugins.get_backend("opencl").prepare_graph(rammer.load(model)).graph)]
    assert any("the_ln" in r and "LayerNormalization" in r and why in r for r in reasons), reasons


# -- Clip ------------------------------------------------------------------------------------------

def _clip(lo, hi, opset=17):
    """Clip of x[4, 6] with constant min/max inputs (None: absent), or as attributes at opset 6."""
    if opset < 11:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        return _model([helper.make_node("Clip", ["x"], ["y"], **attrs)], [_vi("x", [4, 6])], [_vi("y", [4, 6])],
                      opset=opset)
    inits = [_const(n, np.float32(v)) for n, v in (("lo", lo), ("hi", hi)) if v is not None]
    ins = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
    while ins[-1] == "":
        ins.pop()
    return _model([helper.make_node("Clip", ins, ["y"])], [_vi("x", [4, 6])], [_vi("y", [4, 6])], inits, opset)


@pytest.mark.parametrize("lo, hi, opset", [(0.0, 6.0, 17), (-0.5, None, 17), (None, 0.25, 17), (None, None, 17),
                                           (0.0, 6.0, 6), (-1.0, None, 6), (2.0, 1.0, 17)])
def test_clip_with_constant_bounds_matches_reference(lo, hi, opset):
    x = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32) * 4
    _check(_clip(lo, hi, opset), {"x": x})


def test_clip_with_a_bound_computed_at_run_time_is_refused_naming_the_node():
    _opencl()
    model = _model([helper.make_node("Clip", ["x", "lo"], ["y"], name="the_clip")], [_vi("x", [4]), _vi("lo", [])],
                   [_vi("y", [4])])
    with pytest.raises(UnsupportedOpError, match=r"Clip.*the_clip"):
        rammer.compile(model, backend="opencl", mode="wave")


# -- Erf -------------------------------------------------------------------------------------------

def test_erf_matches_reference_over_its_range():
    x = np.concatenate([np.linspace(-6, 6, 241), [0.0, -0.0, 1e-8, -1e-8, 1e-30, 30.0, -30.0]]).astype(np.float32)
    model = _model([helper.make_node("Erf", ["x"], ["y"])], [_vi("x", [x.size])], [_vi("y", [x.size])])
    compiled = _check(model, {"x": x}, atol=1e-6)
    got = compiled.run({"x": x})["y"]
    exact = np.array([math.erf(float(v)) for v in x])
    assert np.max(np.abs(got - exact)) < 1e-6  # erf in float32: about 1e-7 absolute


def test_gelu_as_torch_exports_it():
    # x * 0.5 * (1 + erf(x / sqrt(2))): one fused kernel.
    nodes = [helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    model = _model(nodes, [_vi("x", [3, 50])], [_vi("y", [3, 50])],
                   [_const("r2", np.float32(math.sqrt(2))), _const("one", np.float32(1)),
                    _const("half", np.float32(0.5))])
    x = np.random.default_rng(6).standard_normal((3, 50)).astype(np.float32) * 3
    compiled = _check(model, {"x": x})
    assert len(compiled.executable.report["kernels"]) == 1
