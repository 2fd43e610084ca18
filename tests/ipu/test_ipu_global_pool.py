"""Global pools whose one channel plane fits a tile but 8 planes do not (real:ocr-det-640's
GlobalAveragePool over 96 x 160 x 160 on a GC200): the core pool family's blocks of 1, 2 or 4
channels place them, and the simulated outputs match ``reference``.  On a small IPU (32 tiles of
64 KiB), after a Relu so the pooled tensor is an activation the pool's tiles receive."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rammer

from .graphs import write_small_ipu

TILES, SRAM = 32, 64 * 1024
#: (op, channels, height, width): one plane 20-36 KiB, 8 planes 160-288 KiB.
GRID = [("GlobalAveragePool", 16, 64, 96), ("GlobalMaxPool", 6, 96, 96), ("GlobalAveragePool", 24, 80, 64)]


def _relu_pool(op: str, c: int, h: int, w: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r"], ["y"])]
    g = helper.make_graph(nodes, "relu_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small_ipu(tmp_path_factory) -> str:
    return write_small_ipu(tmp_path_factory.mktemp("vd") / "small_ipu.json", TILES, SRAM)


@pytest.mark.parametrize("op,c,h,w", GRID)
def test_a_global_pool_over_planes_larger_than_an_eighth_of_a_tile_places_and_matches(small_ipu, op, c, h, w):
    plane = h * w * 4
    assert plane < SRAM < 8 * plane
    model = _relu_pool(op, c, h, w)
    compiled = rammer.compile(model, backend="ipu", vdevice=small_ipu)
    exe = compiled.executable
    (pool,) = [o for o in exe.schedule.ops if o.op_type == op]
    assert pool.kernel.params["channels"] < min(c, 8)
    report = exe.report()
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"] == SRAM
    feeds = {"x": np.random.default_rng(c).standard_normal((1, c, h, w)).astype(np.float32)}
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-5, atol=1e-6)
