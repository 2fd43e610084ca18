"""A plugin's rKernels reach the ipu backend through ``rammer_register_rkernels``, also for ops the ipu
has kernels of its own for (Reshape-like views here): those replace the generic families, never a
plugin's.  The plugin kernel is costed almost free, so the scheduler picks it."""

from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.hookspecs import hookimpl
from rammer.rtask import RKernel


class _CheapReshape:
    name = "plugin.reshape"
    op_types = frozenset({"Reshape"})

    def candidates(self, node, graph, vdevice):
        return [RKernel(family="plugin.reshape", params={}, num_rtasks=1, duration_us=1e-9)]


@pytest.fixture(autouse=True)
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


def _reshape_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [16, 16])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")], "g", [x], [y],
                          [shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reshape_kernels(backend):
    graph = backend.prepare_graph(rammer.load(_reshape_model())).graph
    node = next(n for n in graph.nodes if n.op_type == "Reshape")
    return [k.family for k in backend.rkernels(node, graph, backend.vdevice(None))]


def test_plugin_rkernel_joins_the_ipus_own():
    backend = plugins.backends()["ipu"]
    own = _reshape_kernels(backend)
    assert own and "plugin.reshape" not in own

    @hookimpl
    def rammer_register_rkernels(backend, register):
        if backend == "ipu":
            register(_CheapReshape())

    plugins.register_plugin(types.SimpleNamespace(rammer_register_rkernels=rammer_register_rkernels), "cheap-reshape")
    with_plugin = _reshape_kernels(plugins.backends()["ipu"])
    assert "plugin.reshape" in with_plugin
    assert set(own) <= set(with_plugin)


def test_the_ipus_own_kernels_still_run():
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    got = rammer.compile(_reshape_model(), backend="ipu").run({"x": x})
    out = got["y"] if isinstance(got, dict) else got[0]
    np.testing.assert_array_equal(out, x.reshape(16, 16))
