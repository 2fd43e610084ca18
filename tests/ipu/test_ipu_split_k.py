"""MatMul/Gemm split along K when one rTask's operand blocks would not fit half a tile: partial
products on their own tiles, summed by an Add tree whose reads of the partials are exchanges."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.ipu.bsp import BSPOrderError
from rammer.backends.ipu.passes import k_pieces
from rammer.backends.ipu.simulator import simulate_program

K, N = 9216, 64  # AlexNet fc6's K: one 8-column block of the weight is 288 KiB


def _fc() -> onnx.ModelProto:
    w = (np.random.default_rng(0).standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(N, np.float32), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_k_pieces_follow_the_operand_blocks() -> None:
    assert k_pieces(1, 4096, 9216, 312 * 1024) == 2  # (1 + 8) x 9216 x 4 B = 324 KiB
    assert k_pieces(128, 3072, 768, 312 * 1024) == 1  # a BERT layer is left alone
    assert k_pieces(1, 4096, 9216, 128 * 1024) == 3


@pytest.fixture(scope="module")
def compiled():
    model = _fc()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)}
    return model, feeds, rammer.compile(model, backend="ipu")


def test_long_k_gemm_is_split_reduced_and_matches(compiled) -> None:
    model, feeds, ipu = compiled
    exe = ipu.executable
    gemms = [o for o in exe.schedule.ops if o.op_type == "Gemm"]
    adds = [o for o in exe.schedule.ops if o.op_type == "Add"]
    assert len(gemms) == 2 and len(adds) == 1
    # No rTask of a partial product reads more than half a tile of operands.
    for op in gemms:
        a = op.kernel.accesses(0)
        assert sum(np.prod([hi - lo for lo, hi in box]) * 4 for _, box in a.reads) <= 312 * 1024
    want = rammer.compile(model, backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(ipu.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
    report = exe.report()
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"]


def _partial_names(exe) -> set[str]:
    return {exe.graph.nodes[i].outputs[0] for i, o in enumerate(exe.schedule.ops) if o.op_type == "Gemm"}


def test_partials_reach_the_reduction_by_exchange_and_removing_one_is_caught(compiled) -> None:
    _, feeds, ipu = compiled
    exe = ipu.executable
    prog = exe.program
    partials = _partial_names(exe)
    moved = [e for e in prog.exchanges if e.tensor in partials]
    assert moved, "the reduction's tiles receive no partial product"
    assert prog.exchange_bytes >= sum(e.nbytes for e in moved) > 0
    prog.exchanges = [e for e in prog.exchanges if e is not moved[0]]
    with pytest.raises(BSPOrderError, match="neither owns nor received"):
        simulate_program(prog, exe.schedule, exe.graph, feeds)


def test_removing_the_reduction_is_caught() -> None:
    model = _fc()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, K)).astype(np.float32)}
    exe = rammer.compile(model, backend="ipu").executable
    add = next(i for i, o in enumerate(exe.schedule.ops) if o.op_type == "Add")
    exe.program.tasks = [t for t in exe.program.tasks if t.op != add]
    with pytest.raises(BSPOrderError):
        simulate_program(exe.program, exe.schedule, exe.graph, feeds)
