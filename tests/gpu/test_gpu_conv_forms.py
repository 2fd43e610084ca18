"""Both conv forms of the GPU backends (direct, implicit GEMM) match reference on PoCL for strides,
padding, dilation, groups (depthwise too), 1-d convs and no bias; the scheduler gets both as candidates."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.api import random_feeds
from rammer.backends.gpu import compiler
from rammer.backends.gpu.lower import CONV_IMPLICIT_GEMM
from rammer.frontend import load
from rammer.vdevice import get_preset

#: Each case builds OpenCL programs on PoCL: seconds each with PoCL's cache cold (a fresh machine). Left out
#: of the quick subset.
pytestmark = pytest.mark.slow


def _conv(x, w_shape, y, bias=True, **attrs):
    rng = np.random.default_rng(5)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, list(w_shape), rng.standard_normal(w_shape).astype(np.float32).ravel())]
    inputs = ["x", "w"]
    if bias:
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, [w_shape[0]],
                                        rng.standard_normal(w_shape[0]).astype(np.float32)))
        inputs.append("b")
    g = helper.make_graph([helper.make_node("Conv", inputs, ["y"], **attrs)], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CASES = {
    "3x3-pad": lambda: _conv([1, 5, 9, 11], (7, 5, 3, 3), [1, 7, 9, 11], pads=[1, 1, 1, 1]),
    "stride-dilation": lambda: _conv([2, 4, 13, 12], (6, 4, 3, 2), [2, 6, 5, 6], strides=[2, 2], dilations=[2, 1],
                                     pads=[1, 0, 1, 1], bias=False),
    "groups": lambda: _conv([1, 6, 8, 8], (9, 2, 3, 3), [1, 9, 8, 8], group=3, pads=[1, 1, 1, 1]),
    "depthwise": lambda: _conv([1, 8, 10, 10], (8, 1, 5, 5), [1, 8, 5, 5], group=8, strides=[2, 2], pads=[2, 2, 2, 2]),
    "1x1-wide": lambda: _conv([1, 40, 6, 7], (33, 40, 1, 1), [1, 33, 6, 7]),
    "1d": lambda: _conv([2, 3, 20], (4, 3, 5), [2, 4, 16]),
}


@pytest.mark.parametrize("form", [1, CONV_IMPLICIT_GEMM])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_conv_form_matches_reference(case, form, monkeypatch):
    be = plugins.backends().get("opencl")
    if be is None or not be.availability().ok:
        pytest.skip("needs an OpenCL device (PoCL: apt-get install pocl-opencl-icd)")
    monkeypatch.setattr(compiler, "_mults", lambda node: (form,) if node.op_type == "Conv" else (1,))
    model = CASES[case]()
    compiled = rammer.compile(model, backend="opencl")
    kernels = {k.name for k in compiled.executable.program.kernels}
    assert ("conv_igemm" if form == CONV_IMPLICIT_GEMM else "conv_direct") in kernels
    feeds = random_feeds(compiled.inputs, seed=3)
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def test_both_forms_are_candidates_for_the_scheduler():
    be = plugins.backends()["cuda"]
    graph = be.prepare_graph(load(CASES["1x1-wide"]())).graph
    families = {k.family for k in compiler.gpu_rkernels(graph.nodes[0], graph, get_preset("a100"))}
    assert families == {"gpu.conv_direct", "gpu.conv_igemm"}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("form", [1, CONV_IMPLICIT_GEMM])
def test_nonfinite_weights_give_the_nan_of_padding(form, bad, monkeypatch):
    """A NaN or infinite weight times a padding zero is NaN: a form that skipped padded taps gave finite
    values there (the cpu backend's twin: mutants:26000924)."""
    be = plugins.backends().get("opencl")
    if be is None or not be.availability().ok:
        pytest.skip("needs an OpenCL device (PoCL: apt-get install pocl-opencl-icd)")
    monkeypatch.setattr(compiler, "_mults", lambda node: (form,) if node.op_type == "Conv" else (1,))
    model = CASES["3x3-pad"]()
    w = model.graph.initializer[0]
    values = list(w.float_data)
    values[0] = bad  # tap (0, 0) of output channel 0: on padding at the first output pixel
    del w.float_data[:]
    w.float_data.extend(values)
    compiled = rammer.compile(model, backend="opencl")
    feeds = random_feeds(compiled.inputs, seed=3)
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    assert np.isnan(want).any()
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-4, equal_nan=True)
