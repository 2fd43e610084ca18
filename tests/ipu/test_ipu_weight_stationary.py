"""Weight-stationary placement: compute moved to its weights (backends/ipu/stationary.py,
``weight_stationary_tiles``; the lowering in backends/ipu/codegen.py).

A model whose weights take more than half of every tile on average (real:vgg19: 381 KiB of a 624
KiB tile), scaled down: two 3x3 convs on 16 x 32 x 32, then a 16,384 x 72 FC (4.5 MiB, split along K
by split-k) and a 72 x 64 one, on an IPU of 32 tiles of 256 KiB (the weights are 57% of the chip,
145 KiB per tile).  Before, each constant piece lived on its reader's tile until the tile owned half
its SRAM, and on the least-loaded tile after; the FC's blocks were then owned by tiles that do not
read them, and received on top of what their readers own: refused, with the relief's rounds too.
Now the reader of a piece runs on the tile that can own it (each tile's constants near the average
share, then, on a re-plan, within what the failed program left free on it): placed, the FC weights
never exchanged, the outputs equal to ``reference``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu import codegen
from rammer.backends.ipu.bsp import BSPOrderError, IpuPlacementError
from rammer.backends.ipu.simulator import simulate_program
from rammer.backends.ipu.stationary import constant_cap, weight_stationary_tiles

from .graphs import write_small_ipu

TILES, SRAM, C_IN, HW = 32, 256 * 1024, 8, 32


def _convs_then_fcs() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev, c = [], [], "x", C_IN
    for i, co in enumerate((16, 16)):
        w = (rng.standard_normal((co, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"cw{i}"))
        nodes += [helper.make_node("Conv", [prev, f"cw{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"cr{i}"])]
        prev, c = f"cr{i}", co
    nodes.append(helper.make_node("Flatten", [prev], ["flat"]))
    prev, k = "flat", c * HW * HW
    for i, n in enumerate((72, 64)):
        inits.append(numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), f"fw{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"fw{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"])]
        prev, k = f"r{i}", n
    g = helper.make_graph(nodes, "convs_then_fcs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, C_IN, HW, HW])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, k])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small_ipu(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vd") / "ipu_256k.json"
    return write_small_ipu(path, TILES, SRAM)


@pytest.fixture(scope="module")
def compiled(small_ipu):
    feeds = {"x": np.random.default_rng(1).standard_normal((1, C_IN, HW, HW)).astype(np.float32)}
    return feeds, rammer.compile(_convs_then_fcs(), backend="ipu", vdevice=small_ipu)


def test_without_weight_stationary_it_is_refused(small_ipu, monkeypatch) -> None:
    monkeypatch.setattr(codegen, "WEIGHT_STATIONARY", False)  # the relief rounds still run
    with pytest.raises(IpuPlacementError, match="tile memories"):
        rammer.compile(_convs_then_fcs(), backend="ipu", vdevice=small_ipu)


def test_placed_with_one_owner_per_slice_and_matches(compiled) -> None:
    feeds, ipu = compiled
    prog = ipu.executable.program
    assert int(prog.tile_peak_bytes.max()) <= prog.sram_bytes
    for name, slices in prog.slices.items():
        boxes = [s.box for s in slices]
        assert len(boxes) == len(set(boxes)), f"{name} has a slice with two owners"
    want = rammer.compile(_convs_then_fcs(), backend="reference").run(feeds)
    got = ipu.run(feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)


def test_fc_weights_are_never_exchanged(compiled) -> None:
    _, ipu = compiled
    exe = ipu.executable
    weights = {n.inputs[1] for n in exe.graph.nodes if n.op_type == "MatMul"}
    assert len(weights) > 2, "the FC was not split along K"
    assert all(w in exe.graph.initializers for w in weights)
    assert not [e for e in exe.program.exchanges if e.tensor in weights]
    # ... and their pieces are not all on a few tiles: the readers moved to them.
    owners = {s.owner for w in weights for s in exe.program.slices[w]}
    assert len(owners) == TILES


def test_a_removed_exchange_into_a_moved_reader_is_caught(compiled) -> None:
    feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    inputs = {n.inputs[0] for n in exe.graph.nodes if n.op_type == "MatMul"}
    into = [e for e in prog.exchanges if e.tensor in inputs]
    assert into
    saved = prog.exchanges
    try:
        prog.exchanges = [e for e in saved if e is not into[0]]
        with pytest.raises(BSPOrderError, match="neither owns nor received"):
            simulate_program(prog, exe.schedule, exe.graph, feeds)
    finally:
        prog.exchanges = saved


def test_the_planner_moves_readers_to_room_and_keeps_the_op_spread() -> None:
    tiles = np.array([0, 0, 1, 2])  # an op's 4 rTasks, two on tile 0 as scheduled
    load = np.array([90.0, 0.0, 50.0, 0.0])
    capacity = np.full(4, 100)
    # Largest first: rTask 2's piece (40) fits its tile 1; rTask 0's (20) does not fit tile 0 (90 + 20
    # > 100) and goes to the tile with the most room (3: 100 left; tile 1 has 60), rTask 3's (5) stays.
    [out] = weight_stationary_tiles([(tiles, [(0, 20), (2, 40), (3, 5)])], load, capacity)
    assert out.tolist() == [3, 0, 1, 2]
    # Two ops planned at once, largest piece first (65 of the later op, then 30, then 20): each stays on
    # its tile while it fits, and a tile runs no more rTasks of an op than the busiest as scheduled.
    a, b = weight_stationary_tiles([(np.array([0, 1]), [(0, 20), (1, 30)]), (np.array([0, 0]), [(0, 65)])],
                                   np.zeros(2), np.full(2, 90))
    assert a.tolist() == [0, 1] and b.tolist() == [0, 0]
    a, b = weight_stationary_tiles([(np.array([0, 1]), [(0, 20), (1, 30)]), (np.array([0, 0]), [(0, 65)])],
                                   np.array([0.0, 10.0]), np.full(2, 80))
    assert b.tolist()[0] == 0 and a.tolist()[1] == 1  # 65 on tile 0 (15 left), 30 on tile 1 (40 left)
    assert a.tolist()[0] == 0  # 20 fits nowhere: the one tile the op's limit (one rTask per tile) leaves
    # The cap: half a tile, unless the constants need more on average.
    assert constant_cap(624, 10, 1000) == 312
    assert constant_cap(640, 10, 3810) == 381 + 10
