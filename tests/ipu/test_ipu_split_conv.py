"""A Conv whose smallest rTask does not fit its room on a tile, split over slices of its input
channels (backends/ipu/split_conv.py, passes.conv_pieces): partial convolutions on their own tiles,
summed by an Add tree whose reads of the partials are exchanges.

On a small IPU (32 tiles of 64 KiB) a 3x3 conv over 128 channels of 8 x 16 pixels has, as its
smallest rTask (one output row, 8 output channels), 24 KiB of input rows and 36 KiB of weight: with
its output and code more than a tile, so it is refused without the split, as real:vgg19's conv4
layers (168 KiB of input and 144 KiB of weight next to 381 KiB of weights per tile) were on a GC200."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu import passes
from rammer.backends.ipu.bsp import BSPOrderError, IpuPlacementError
from rammer.backends.ipu.conv_plan import conv_room, pressure_limit, pressure_pieces
from rammer.backends.ipu.passes import conv_pieces
from rammer.backends.ipu.simulator import simulate_program
from rammer.ir import Node

from .graphs import write_small_ipu

C_IN, C_OUT, H, W, TILES, SRAM = 128, 16, 8, 16, 32, 64 * 1024


def _conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((C_OUT, C_IN, 3, 3)) / np.sqrt(9 * C_IN)).astype(np.float32)
    b = rng.standard_normal(C_OUT).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "wide_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, H, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, H, W])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, C_IN, H, W)).astype(np.float32)}


@pytest.fixture(scope="module")
def small_ipu(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vd") / "small_ipu.json"
    return write_small_ipu(path, TILES, SRAM)


@pytest.fixture(scope="module")
def compiled(small_ipu):
    return rammer.compile(_conv(), backend="ipu", vdevice=small_ipu)


def test_conv_pieces_follow_the_operand_blocks_and_the_weights_kept() -> None:
    conv = Node("Conv", ("x", "w"), ("y",), attrs={"pads": [1, 1, 1, 1]})
    tile = 624 * 1024
    # real:vgg19's conv4_2 (28 x 28 x 512 -> 512): 168 KiB of input rows + 144 KiB of weight is half
    # a tile, but the rest of its weights (565 MB) take 375 KiB of every tile: room 249 KiB, 2 slices.
    room = conv_room(tile, 1472, 574_669_392 - 512 * 512 * 9 * 4)
    assert 240 * 1024 < room < 256 * 1024
    assert conv_pieces(conv, (1, 512, 28, 28), (512, 512, 3, 3), room, 1472) == 2
    # With few weights besides it, the same layer keeps every channel (and any model's small convs do).
    assert conv_room(tile, 1472, 10_000_000) == tile // 2
    assert conv_pieces(conv, (1, 512, 28, 28), (512, 512, 3, 3), tile // 2) == 1
    assert conv_pieces(conv, (1, 64, 56, 56), (64, 64, 3, 3), conv_room(tile, 1472, 10_000_000), 1472) == 1
    # This test's conv: 60 KiB of operands against half of a 64 KiB tile.
    assert conv_pieces(conv, (1, C_IN, H, W), (C_OUT, C_IN, 3, 3), SRAM // 2) == 2


def test_before_the_change_the_conv_is_refused(small_ipu, monkeypatch) -> None:
    monkeypatch.setattr(passes, "split_large_convs", lambda graph, tile_bytes=0, num_tiles=0: graph)
    with pytest.raises(IpuPlacementError, match="tile memories"):
        rammer.compile(_conv(), backend="ipu", vdevice=small_ipu)


def test_the_conv_is_split_over_its_channels_placed_and_matches(compiled) -> None:
    exe = compiled.executable
    convs = [op for op in exe.schedule.ops if op.op_type == "Conv"]
    adds = [op for op in exe.schedule.ops if op.op_type == "Add"]
    assert len(convs) >= 2 and len(adds) == len(convs) - 1
    for op in convs:  # no partial rTask reads more than half a tile of operands
        a = op.kernel.accesses(0)
        assert sum(np.prod([hi - lo for lo, hi in box]) * 4 for _, box in a.reads) <= SRAM // 2
    report = exe.report()
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"] == SRAM
    want = rammer.compile(_conv(), backend="reference").run(_feeds())["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], want, rtol=1e-4, atol=1e-5)


def test_removing_a_partial_exchange_is_caught(compiled) -> None:
    exe = compiled.executable
    prog = exe.program
    partials = {exe.graph.nodes[i].outputs[0] for i, o in enumerate(exe.schedule.ops) if o.op_type == "Conv"}
    moved = [e for e in prog.exchanges if e.tensor in partials]
    assert moved, "the reduction's tiles receive no partial convolution"
    kept = prog.exchanges
    prog.exchanges = [e for e in kept if e is not moved[0]]
    try:
        with pytest.raises(BSPOrderError, match="neither owns nor received"):
            simulate_program(prog, exe.schedule, exe.graph, _feeds())
    finally:
        prog.exchanges = kept


def test_under_memory_pressure_the_channels_are_cut_for_blocks_that_fit_half_the_room() -> None:
    conv = Node("Conv", ("x", "w"), ("y",), attrs={"pads": [1, 1, 1, 1]})
    tile = 624 * 1024
    room = conv_room(tile, 1472, 574_669_392 - 512 * 512 * 9 * 4)  # real:vgg19's conv4_2
    limit = pressure_limit(tile, room)
    assert limit == room // 2
    # Some family block over 512/6 channels reads and writes <= 124 KiB with <= 1,472 rTasks in
    # all six slices; with fewer slices none does.
    assert pressure_pieces(conv, (1, 512, 28, 28), (512, 512, 3, 3), limit, 1472) == 6
    assert pressure_limit(tile, tile // 2) is None  # room for half a tile: no pressure


def test_least_traffic_fit_keeps_the_fitting_kernels_that_move_the_fewest_bytes() -> None:
    from rammer.backends.ipu.conv_plan import _rtask_bytes, least_traffic_fit
    from rammer.backends.ipu.device import IpuBackend
    from rammer.frontend import load

    backend = IpuBackend()
    vd = backend.vdevice()
    model = _conv()
    graph = load(model)
    node = next(n for n in graph.nodes if n.op_type == "Conv")
    kernels = backend.rkernels(node, graph, vd)
    sizes = {k.kernel_id: _rtask_bytes(k, 4) for k in kernels}
    limit = sorted(sizes.values())[len(sizes) // 2]  # about half of them fit
    kept = least_traffic_fit(kernels, limit)
    fitting = [k for k in kernels if sizes[k.kernel_id] <= limit]
    assert kept and len(fitting) < len(kernels)
    assert all(sizes[k.kernel_id] <= limit for k in kept)
    least = min(sizes[k.kernel_id] * k.num_rtasks for k in fitting)
    assert all(sizes[k.kernel_id] * k.num_rtasks == least for k in kept)
    # With a bound on the rTask count that some fitting kernel meets, only those are considered.
    fewest = min(k.num_rtasks for k in fitting)
    assert all(k.num_rtasks <= fewest for k in least_traffic_fit(kernels, limit, fewest))
    assert least_traffic_fit(kernels, 1) == kernels  # nothing fits: the scheduler's choice stands
