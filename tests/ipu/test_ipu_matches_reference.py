from __future__ import annotations

import numpy as np
import pytest

import rammer
from rammer import zoo

from .graphs import GRAPHS

SMALL_ZOO = [e.name for e in zoo.list_models() if e.name.endswith("-small")]


def _feeds(compiled, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.dtype(t.dtype)) for t in compiled.graph.inputs}


def _max_rel(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(b[k]) + 1e-6), initial=0.0)) for k in b)


def _check(model, **options) -> None:
    ipu = rammer.compile(model, backend="ipu", **options)
    ref = rammer.compile(model, backend="reference")
    feeds = _feeds(ipu)
    got, want = ipu.run(feeds), ref.run(feeds)
    assert _max_rel(got, want) < 1e-4
    report = ipu.executable.report()
    assert report["engine"] == "simulator" and report["simulated"]
    assert report["supersteps"] >= 1 and report["latency_us"] > 0
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"]


def test_small_zoo_models_are_listed() -> None:
    assert len(SMALL_ZOO) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_model_matches_reference(name: str) -> None:
    _check(zoo.build(name))


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", ["merged", "compute-set"])
def test_torch_like_graph_matches_reference(name: str, mode: str) -> None:
    _check(GRAPHS[name](), mode=mode)


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
@pytest.mark.parametrize("mode", ["merged", "compute-set"])
def test_policies_and_modes_on_gc2(policy: str, mode: str) -> None:
    _check(zoo.build("alexnet-small"), policy=policy, mode=mode, vdevice="gc2")


@pytest.mark.parametrize("name", ["lstm-tc-small", "seq2seq-small", "deepspeech2-small", "resnext-small"])
def test_merging_never_adds_supersteps_or_latency(name: str) -> None:
    model = zoo.build(name)
    merged = rammer.compile(model, backend="ipu", mode="merged").executable.program
    waves = rammer.compile(model, backend="ipu", mode="compute-set").executable.program
    assert merged.num_supersteps <= waves.num_supersteps
    assert merged.latency_us <= waves.latency_us + 1e-9
    assert merged.exchange_bytes == waves.exchange_bytes  # same placement: only the supersteps differ


def test_merging_waves_joins_only_waves_without_exchange_between_them() -> None:
    from rammer.backends.ipu.codegen import _merge_waves
    from rammer.backends.ipu.remote_reads import RemoteReads

    boxes = np.array([[[0, 1]]], dtype=np.int64)
    # rTask r runs in wave r; rTask 2 reads (remotely) a slice that rTask 1 wrote.
    wave = np.array([0, 1, 2, 3])
    arrays = {"t": (boxes, np.array([0]), np.array([1]))}
    # The remote reads: one read box of rTask 2 (on tile 1) with one remote read, of slice 0 (tile 0).
    tables = {"t": RemoteReads(np.array([2]), boxes, np.array([0, 1]), np.array([0]), boxes, np.array([0]),
                               np.array([0, 0, 1, 0]), 2, 4)}
    assert _merge_waves(wave, tables, arrays).tolist() == [0, 0, 1, 1]
    assert _merge_waves(wave, {}, arrays).tolist() == [0, 0, 0, 0]


def _if_reading_outer(captured_is_input: bool, nested: bool = False):
    """An If whose branches read the outer tensor 'r' (a graph input or computed); with ``nested``,
    the then-branch is itself an If (a branch core's IF_TO_SELECT does not inline)."""
    from onnx import TensorProto, helper

    def branch(op: str, out: str):
        k = helper.make_tensor("k", TensorProto.FLOAT, [], [1.5])
        return helper.make_graph([helper.make_node(op, ["r", "k"], [out])], out, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])], [k])

    then = branch("Add", "t_out")
    if nested:
        then = helper.make_graph([helper.make_node("If", ["c"], ["t_out"], name="inner", then_branch=branch("Add", "a"),
                                                   else_branch=branch("Mul", "b"))], "then", [],
                                 [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=branch("Sub", "e_out"))]
    if not captured_is_input:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["r"]))
    inputs = [helper.make_tensor_value_info("x" if not captured_is_input else "r", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("captured_is_input", [True, False], ids=["graph-input", "computed"])
def test_an_if_reading_outer_tensors_runs_both_branches_and_selects(captured_is_input: bool) -> None:
    # real:vad (silero: the whole network is the two branches of an If on the sample rate) was refused;
    # core's IF_TO_SELECT, now among the ipu passes, inlines both branches and a Where.
    model = _if_reading_outer(captured_is_input)
    ipu, ref = rammer.compile(model, backend="ipu"), rammer.compile(model, backend="reference")
    assert not any(n.op_type == "If" for n in ipu.executable.graph.nodes)
    for cond in (True, False):
        feeds = {ref.inputs[0].name: np.arange(-3, 3, dtype=np.float32).reshape(2, 3), "c": np.array(cond)}
        np.testing.assert_array_equal(ipu.run(feeds)["y"], ref.run(feeds)["y"])


@pytest.mark.parametrize("captured_is_input", [True, False], ids=["graph-input", "computed"])
def test_a_branch_reading_an_outer_tensor_is_refused_naming_node_and_tensor(captured_is_input: bool) -> None:
    # Found by ci/fuzz.py (graphs:8000022): no exchange delivered the captured tensor to the If's tile,
    # and the run ended in "tensor has no value".  The backend refuses an If the select pass leaves.
    from rammer.errors import UnsupportedOpError

    model = _if_reading_outer(captured_is_input, nested=True)
    with pytest.raises(UnsupportedOpError, match=r"the_if.*'r'.*another --backend"):
        rammer.compile(model, backend="ipu")
    ref = rammer.compile(model, backend="reference")
    assert ref.run({ref.inputs[0].name: np.ones((2, 3), np.float32), "c": np.array(True)})["y"][0, 0] == 2.5


def test_a_matmul_with_zero_rows_compiles_and_runs() -> None:
    # Found by ci/fuzz.py (mutants:11000598): an input of shape [0, 2] gave tile sizes of 0 and the
    # rKernel families divided by them ("ZeroDivisionError" relayed by CompileError).
    from onnx import TensorProto, helper, numpy_helper

    from rammer.kernels_generic import Tiling

    assert Tiling((0, 8), (0, 8)).grid == (1, 1) and Tiling((0, 8), (0, 8)).box(0) == ((0, 0), (0, 8))
    w = numpy_helper.from_array(np.ones((8, 2), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = rammer.compile(model, backend="ipu").run({"x": np.zeros((0, 2), np.float32)})["y"]
    assert out.shape == (0, 8)
