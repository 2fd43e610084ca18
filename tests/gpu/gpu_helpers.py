"""What the opencl model tests share: the skip without an OpenCL device, model builders, and the run
against reference (wave mode, twice: the second run reuses the arena)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer import plugins


def need_opencl() -> None:
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd): "
                    f"{plugins.get_backend('opencl').availability().reason}")


def vi(name: str, shape, t: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def check_wave(m: onnx.ModelProto, feeds, kernels=(), rtol: float = 1e-4, atol: float = 1e-5):
    """Runs ``m`` on opencl (wave mode) twice and on reference: same dtypes, shapes and values; the
    report names ``kernels``.  Returns the compiled model."""
    need_opencl()
    compiled = rammer.compile(m, backend="opencl", mode="wave")
    want = rammer.compile(m, backend="reference").run(feeds)
    for _ in range(2):
        got = compiled.run(feeds)
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol)
    used = set(compiled.executable.report["kernels"])
    assert set(kernels) <= used, used
    return compiled
