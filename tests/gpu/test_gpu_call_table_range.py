"""A call argument beyond the GPU call table's int32 is refused naming the node (found by the fuzzer: a
Conv stride of 2**33 raised a ProgramError naming only the rKernel)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer import plugins
from rammer.errors import RammerError


def test_an_argument_beyond_int32_names_the_node():
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd)")
    w = numpy_helper.from_array(np.ones((4, 3, 5, 2), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="wide_stride", strides=[1, 2 ** 33],
                            auto_pad="SAME_UPPER")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 9, 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(RammerError, match=r"wide_stride.*Conv.*beyond the 32-bit call table"):
        rammer.compile(model, backend="opencl")


def test_a_pool_stride_on_an_axis_of_one_output_is_not_an_argument():
    # Found by the fuzzer (mutant 40900147): an AveragePool stride of 2**33 along an axis with one
    # output position, which never applies it; the pool runs with stride 1 there and matches.
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd)")
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[1, 1], strides=[2 ** 33, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((1, 1, 4, 2)).astype(np.float32)
    np.testing.assert_array_equal(rammer.compile(model, backend="opencl")({"x": x})["y"], x[:, :, :1, :])
