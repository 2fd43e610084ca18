"""Reductions and Resize on the GPU backends: run on opencl (PoCL) in both modes against reference;
axis sets and modes no rKernel implements are refused naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.api import random_feeds
from rammer.errors import UnsupportedOpError
from rammer.frontend import load

#: Each case builds OpenCL programs on PoCL: seconds each with PoCL's cache cold (a fresh machine). Left out
#: of the quick subset.
pytestmark = pytest.mark.slow


def _opencl():
    be = plugins.backends().get("opencl")
    if be is None or not be.availability().ok:
        pytest.skip("needs an OpenCL device (PoCL: apt-get install pocl-opencl-icd)")


def _model(node, x_shape, y_shape, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, modes=("persistent", "wave")):
    want_model = rammer.compile(model, backend="reference")
    for mode in modes:
        got_model = rammer.compile(model, backend="opencl", mode=mode)
        feeds = random_feeds(got_model.inputs, seed=4)
        want, got = want_model.run(feeds), got_model.run(feeds)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keep,y", [([3], 1, [2, 3, 5, 1]), ([1], 0, [2, 5, 7]), ([1, 2], 1, [2, 1, 1, 7]),
                                         ([-1, -2], 0, [2, 3]), (None, 0, [])])
def test_reductions_match_reference(op, axes, keep, y):
    _opencl()
    inits = []
    if axes is not None and op == "ReduceSum":  # opset 13+: ReduceSum's axes are an input
        inits = [helper.make_tensor("ax", TensorProto.INT64, [len(axes)], axes)]
        node = helper.make_node(op, ["x", "ax"], ["y"], keepdims=keep)
    elif axes is not None:
        node = helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keep)
    else:
        node = helper.make_node(op, ["x"], ["y"], keepdims=keep)
    _check(_model(node, [2, 3, 5, 7], y, inits))


def test_reduction_axes_in_more_runs_than_the_kernel_indexes_are_refused():
    # Non-adjacent axes run (tests/gpu/test_gpu_coverage.py); five separate runs of reduced axes
    # exceed the general kernel's index spaces.
    node = helper.make_node("ReduceMax", ["x"], ["y"], axes=[0, 2, 4, 6, 8], keepdims=0, name="the_reduce")
    with pytest.raises(UnsupportedOpError, match="the_reduce.*separate runs"):  # refused before any device is used
        plugins.backends()["opencl"].compile(load(_model(node, [2] * 9, [2] * 4)), {})


@pytest.mark.parametrize("mode,coord,nearest", [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"), ("linear", "half_pixel", "round_prefer_floor"),
    ("linear", "align_corners", "round_prefer_floor"), ("linear", "asymmetric", "round_prefer_floor"),
    ("linear", "pytorch_half_pixel", "round_prefer_floor")])
@pytest.mark.parametrize("scale", [2.0, 0.5, 1.5])
def test_resize_matches_reference(mode, coord, nearest, scale):
    _opencl()
    x, out = [1, 3, 6, 8], [1, 3, int(6 * scale), int(8 * scale)]
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], []),
             helper.make_tensor("sc", TensorProto.FLOAT, [4], [1.0, 1.0, scale, scale])]
    node = helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode=mode, coordinate_transformation_mode=coord,
                            nearest_mode=nearest)
    _check(_model(node, x, out, inits), modes=("wave",))


def test_resize_with_sizes_runs_in_persistent_mode():
    _opencl()
    inits = [helper.make_tensor("sz", TensorProto.INT64, [4], [2, 2, 9, 5])]
    node = helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear")
    _check(_model(node, [2, 2, 4, 6], [2, 2, 9, 5], inits), modes=("persistent",))


def test_cubic_resize_is_refused():
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], []),
             helper.make_tensor("sc", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])]
    node = helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="cubic", name="the_resize")
    model = _model(node, [1, 1, 4, 4], [1, 1, 8, 8], inits)
    with pytest.raises(UnsupportedOpError, match="the_resize.*cubic"):
        plugins.backends()["opencl"].compile(load(model), {})
