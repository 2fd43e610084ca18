"""Elementwise chains on the GPU backends: fused into one rKernel through the core's grouping and
elementwise program IR, run on PoCL in both modes against reference; intermediates never reach the
arena; equal chains share one kernel; chains the GPU cannot run are left as they were."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.api import random_feeds
from rammer.backends.gpu.fuse import FUSED_OP
from rammer.backends.gpu.fuse import gpu_fuse_elementwise as fuse_elementwise
from rammer.backends.gpu.pipeline import FUSE_ELEMENTWISE
from rammer.frontend import load
from rammer.passes import run_pipeline


def _opencl():
    be = plugins.backends().get("opencl")
    if be is None or not be.availability().ok:
        pytest.skip("needs an OpenCL device (PoCL: apt-get install pocl-opencl-icd)")


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _chain():
    """x[2,3,4,5] + bias[3,1,1] -> *0.5 -> Clip(-1, 1.5) -> Erf -> Where(mask, ., -x) -> Gelu-ish tanh; a Relu
    of the first sum read outside the chain (a second output)."""
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("bias", TensorProto.FLOAT, [3, 1, 1], rng.standard_normal(3).astype(np.float32)),
             helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("lo", TensorProto.FLOAT, [], [-1.0]), helper.make_tensor("hi", TensorProto.FLOAT, [], [1.5]),
             helper.make_tensor("mask", TensorProto.BOOL, [5], [True, False, True, True, False])]
    nodes = [helper.make_node("Add", ["x", "bias"], ["s"]), helper.make_node("Mul", ["s", "half"], ["m"]),
             helper.make_node("Clip", ["m", "lo", "hi"], ["c"]), helper.make_node("Erf", ["c"], ["e"]),
             helper.make_node("Neg", ["x"], ["nx"]), helper.make_node("Where", ["mask", "e", "nx"], ["w"]),
             helper.make_node("Tanh", ["w"], ["y"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MatMul", ["r", "k"], ["z"])]
    inits.append(helper.make_tensor("k", TensorProto.FLOAT, [5, 2], rng.standard_normal(10).astype(np.float32)))
    g = helper.make_graph(nodes, "chain", [_vi("x", [2, 3, 4, 5])], [_vi("y", [2, 3, 4, 5]), _vi("z", [2, 3, 4, 2])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_chain_is_one_node_and_the_graph_stays_valid():
    graph = load(_chain())
    fused = run_pipeline(graph, [FUSE_ELEMENTWISE], verify=True).graph
    ops = [n.op_type for n in fused.nodes]
    assert ops.count(FUSED_OP) == 1 and ops.count("MatMul") == 1 and len(ops) == 2
    node = next(n for n in fused.nodes if n.op_type == FUSED_OP)
    assert set(node.outputs) == {"y", "r"}  # r is read by the MatMul; s, m, c, e, nx, w stay in registers
    assert "mask_f32" in node.inputs  # the bool mask as 0/1 floats


@pytest.mark.parametrize("mode", ["persistent", "wave"])
def test_fused_chain_matches_reference(mode):
    _opencl()
    model = _chain()
    compiled = rammer.compile(model, backend="opencl", mode=mode)
    assert not {"s", "m", "c", "e", "w"} & set(compiled.executable.program.tensors)
    feeds = random_feeds(compiled.inputs, seed=1)
    want = rammer.compile(model, backend="reference").run(feeds)
    got = compiled.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)


def test_equal_chains_share_one_kernel():
    nodes, outs = [], []
    for i in range(3):
        nodes += [helper.make_node("Add", ["x", f"b{i}"], [f"s{i}"]), helper.make_node("Sigmoid", [f"s{i}"], [f"g{i}"]),
                  helper.make_node("Mul", [f"s{i}", f"g{i}"], [f"y{i}"])]
        outs.append(_vi(f"y{i}", [4, 8]))
    inits = [helper.make_tensor(f"b{i}", TensorProto.FLOAT, [8], np.full(8, i, np.float32)) for i in range(3)]
    g = helper.make_graph(nodes, "silu", [_vi("x", [4, 8])], outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    be = plugins.backends()["cuda"]
    exe = be.compile(load(model), {})
    fused = [k.name for k in exe.program.kernels if k.name.startswith("ew_")]
    assert len(fused) == 1 and exe.program.report["rtasks"] >= 3


def test_integer_chains_fuse_into_one_program_with_integer_registers():
    """Integer arithmetic runs fused in 64-bit registers (the arena holds the exact float32 values)."""
    g = helper.make_graph([helper.make_node("Add", ["i", "i"], ["j"]), helper.make_node("Mul", ["j", "i"], ["k"])], "ints",
                          [_vi("i", [4], TensorProto.INT64)], [_vi("k", [4], TensorProto.INT64)])
    graph = load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    fused = fuse_elementwise(graph)
    assert [n.op_type for n in fused.nodes] == ["FusedElementwise"]
    prog = fused.nodes[0].attrs["program"]
    assert prog.in_types == ("i",) and [ins[0] for ins in prog.instrs] == ["IADD", "IMUL"]


def test_a_fused_kernel_is_made_once_per_program_and_tiling_shares_it():
    # An unrolled RNN has thousands of equal fused chains, each lowered at every tiling: the kernel's
    # IR is made once and shared, and it is the one made from the program directly.
    from rammer.backends.gpu import fuse
    from rammer.backends.gpu import kernels_ew as kew
    from rammer.backends.gpu.lower import lower_node

    graph = run_pipeline(load(_chain()), [FUSE_ELEMENTWISE], verify=True).graph
    node = next(n for n in graph.nodes if n.op_type == FUSED_OP)
    fuse._KERNELS.clear()
    one, four = lower_node(node, graph, 1), lower_node(node, graph, 4)
    assert len(fuse._KERNELS) == 1 and one.kernel is four.kernel and one.flops < four.flops
    prog = node.attrs["program"]
    assert one.kernel == kew.fused_kernel(f"ew_{prog.key}", prog.n_in, len(prog.outputs), prog.instrs, prog.outputs,
                                          256, prog.in_types)
