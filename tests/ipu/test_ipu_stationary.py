"""A large FC weight cut so that the tiles hold it evenly (passes.k_pieces with the tile count,
stationary.finest_weight_cut).

On a small IPU (32 tiles of 64 KiB) a 2400 x 88 float weight (825 KiB, 40% of the chip) is split
along K by the operand-block rule alone into 3 slices: 33 rTasks of 24 KiB blocks for 32 tiles, so a
tile runs two blocks of one slice and holds 59 KiB of the weight in one superstep (refused), as
real:vgg19's fc6 (1,536 rTasks of 261 KiB for 1,472 tiles) was on a GC200.  With the tile count the
rule takes 8 slices (88 rTasks of 9 KiB blocks, at most 3 to a tile) and the kernels that cut the
weight finest, and the model places and matches ``reference``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu import codegen, device, passes
from rammer.backends.ipu.bsp import BSPOrderError, IpuPlacementError
from rammer.backends.ipu.passes import k_pieces
from rammer.backends.ipu.simulator import simulate_program

from .graphs import write_small_ipu

K, N, TILES, SRAM = 2400, 88, 32, 64 * 1024


def _fc() -> onnx.ModelProto:
    w = (np.random.default_rng(0).standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "big_fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small_ipu(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vd") / "small_ipu.json"
    return write_small_ipu(path, TILES, SRAM)


@pytest.fixture(scope="module")
def compiled(small_ipu):
    feeds = {"x": np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)}
    return feeds, rammer.compile(_fc(), backend="ipu", vdevice=small_ipu)


def test_k_pieces_with_the_tile_count() -> None:
    share = 312 * 1024
    assert k_pieces(1, 4096, 25088, share) == 3  # real:vgg19's fc6: 1,536 rTasks for 1,472 tiles
    assert k_pieces(1, 4096, 25088, share, num_tiles=1472) == 17  # at most 6 blocks of 46 KiB + A to a tile
    assert k_pieces(1, 4096, 9216, share, num_tiles=1472) == 2  # AlexNet/ZFNet fc6: 1,024 rTasks, unchanged
    assert k_pieces(128, 3072, 768, share, num_tiles=1472) == 1  # a BERT layer is left alone
    assert (k_pieces(1, N, K, SRAM // 2), k_pieces(1, N, K, SRAM // 2, num_tiles=TILES)) == (3, 8)
    # A weight larger than the tiles' shares however cut: the operand-block rule alone.
    assert k_pieces(1, 128, 2700, SRAM // 2, num_tiles=TILES) == k_pieces(1, 128, 2700, SRAM // 2)


def test_before_the_change_two_blocks_on_a_tile_are_refused(small_ipu, monkeypatch) -> None:
    monkeypatch.setattr(passes, "k_pieces", lambda m, n, k, limit, itemsize=4, num_tiles=0:
                        k_pieces(m, n, k, limit, itemsize))
    monkeypatch.setattr(device, "finest_weight_cut", lambda kernels, node, graph, vd: kernels)
    # (the weight-stationary placement, later, places even these blocks: tests/ipu/test_ipu_weight_stationary.py)
    monkeypatch.setattr(codegen, "WEIGHT_STATIONARY", False)
    # (and so, since s9-ipu, does an input freed after its last read, or waves split to one
    # receiving rTask per tile: tests/ipu/test_ipu_split_waves.py)
    monkeypatch.setattr(codegen, "INPUTS_FREED", False)
    monkeypatch.setattr(codegen, "SPLIT_WAVES", False)
    with pytest.raises(IpuPlacementError, match="tile memories"):
        rammer.compile(_fc(), backend="ipu", vdevice=small_ipu)


def test_the_weight_is_spread_finest_placed_and_matches(compiled) -> None:
    feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    matmuls = [op for op in exe.schedule.ops if op.op_type == "MatMul"]
    assert len(matmuls) == 8
    # Every slice read in blocks of 8 columns (the finest cut), not the scheduler's larger tiles.
    assert all(op.kernel.num_rtasks == N // 8 for op in matmuls), [op.kernel.kernel_id for op in matmuls]
    assert int(prog.tile_peak_bytes.max()) <= prog.sram_bytes
    for name, slices in prog.slices.items():
        boxes = [s.box for s in slices]
        assert len(boxes) == len(set(boxes)), f"{name} has a slice with two owners"
    want = rammer.compile(_fc(), backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(ipu.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)


def test_a_removed_exchange_of_a_partial_is_caught(compiled) -> None:
    feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    partials = {exe.graph.nodes[i].outputs[0] for i, op in enumerate(exe.schedule.ops) if op.op_type == "MatMul"}
    moved = [e for e in prog.exchanges if e.tensor in partials]
    assert moved
    saved = prog.exchanges
    try:
        prog.exchanges = [e for e in saved if e is not moved[0]]
        with pytest.raises(BSPOrderError, match="neither owns nor received"):
            simulate_program(prog, exe.schedule, exe.graph, feeds)
    finally:
        prog.exchanges = saved
