"""Waves split into supersteps that give a tile one receiving rTask at a time
(backends/ipu/split_waves.py, the lowering's last candidate program in backends/ipu/codegen.py).

A tile holds what it receives during the superstep, so two rTasks of a wave on one tile hold their
received boxes together.  Scaled down from real:vgg19 (constants 381 KiB of each 624 KiB tile, conv
partials with more rTasks than tiles): two 3x3 convs, 16 -> 32 -> 32 channels at 16 x 16, then a
8,192 x 32 FC (1 MiB, split along K), on 16 tiles of 128 KiB.  Without the split every candidate
program overflows a tile, relief rounds included; with it the model places and matches ``reference``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu import codegen
from rammer.backends.ipu.bsp import BSPOrderError, IpuPlacementError
from rammer.backends.ipu.simulator import simulate_program
from rammer.backends.ipu.split_waves import split_waves

from .graphs import write_small_ipu

TILES, SRAM, C_IN, HW = 16, 128 * 1024, 16, 16


def _convs_then_fc() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev, c = [], [], "x", C_IN
    for i, co in enumerate((32, 32)):
        w = (rng.standard_normal((co, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"cw{i}"))
        nodes += [helper.make_node("Conv", [prev, f"cw{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"cr{i}"])]
        prev, c = f"cr{i}", co
    nodes.append(helper.make_node("Flatten", [prev], ["flat"]))
    k = c * HW * HW
    inits.append(numpy_helper.from_array((rng.standard_normal((k, 32)) / np.sqrt(k)).astype(np.float32), "fw"))
    nodes += [helper.make_node("MatMul", ["flat", "fw"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "convs_then_fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, C_IN, HW, HW])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small_ipu(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vd") / "ipu_128k.json"
    return write_small_ipu(path, TILES, SRAM)


@pytest.fixture(scope="module")
def compiled(small_ipu):
    feeds = {"x": np.random.default_rng(1).standard_normal((1, C_IN, HW, HW)).astype(np.float32)}
    return feeds, rammer.compile(_convs_then_fc(), backend="ipu", vdevice=small_ipu)


def test_without_split_waves_it_is_refused(small_ipu, monkeypatch) -> None:
    monkeypatch.setattr(codegen, "SPLIT_WAVES", False)  # weight-stationary re-plans and relief rounds still run
    with pytest.raises(IpuPlacementError, match="tile memories"):
        rammer.compile(_convs_then_fc(), backend="ipu", vdevice=small_ipu)


def test_placed_one_owner_per_slice_and_matches(compiled) -> None:
    feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    assert int(prog.tile_peak_bytes.max()) <= prog.sram_bytes
    for name, slices in prog.slices.items():
        boxes = [s.box for s in slices]
        assert len(boxes) == len(set(boxes)), f"{name} has a slice with two owners"
    # The split program: more supersteps than the schedule has waves (merged or not, there are at most that many).
    assert prog.num_supersteps > max(codegen.op_waves(exe.schedule)) + 1
    want = rammer.compile(_convs_then_fc(), backend="reference").run(feeds)
    got = ipu.run(feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-5)


def test_a_removed_exchange_is_caught(compiled) -> None:
    feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    into = [e for e in prog.exchanges if e.tensor.startswith("cr")]
    assert into
    saved = prog.exchanges
    try:
        prog.exchanges = [e for e in saved if e is not into[len(into) // 2]]
        with pytest.raises(BSPOrderError, match="neither owns nor received"):
            simulate_program(prog, exe.schedule, exe.graph, feeds)
    finally:
        prog.exchanges = saved


def test_split_waves_ranks_the_receiving_rtasks_of_a_tile() -> None:
    wave = np.array([0, 0, 0, 0, 1, 1, 2])
    tile = np.array([0, 0, 0, 1, 0, 0, 1])
    receives = np.array([True, False, True, True, True, True, False])
    # Wave 0: tile 0 receives for rTasks 0 and 2 (supersteps 0, 1; rTask 1, not receiving, in the
    # first), tile 1 for rTask 3 (superstep 0).  Wave 1 starts at superstep 2: tile 0's rTasks 4, 5.
    # Wave 2 (nothing received) is one superstep.
    assert split_waves(wave, tile, receives).tolist() == [0, 0, 1, 0, 2, 3, 4]
    assert split_waves(wave, tile, np.zeros(7, dtype=bool)).tolist() == wave.tolist()
    assert split_waves(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)).size == 0
