"""MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)] as one MatMulIntegerToFloat
(core/passes/qdq_matmul_float.py), on the reference and on cpu (k_gemm_int8's float store)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from pass_graphs import assert_left_alone

import rammer
from rammer.ops.control import RAMMER_DOMAIN
from rammer.ops.quant import MATMUL_INTEGER_FLOAT
from rammer.passes import run_pipeline
from rammer.passes.qdq_matmul_float import QDQ_MATMUL_FLOAT

M, K, N = 5, 70, 130


def _chain_model(per_column_scale: bool = False, bias: bool = True, bias_first: bool = True,
                 extra_reader: bool = False, bias_shape: tuple[int, ...] = (N,)):
    """quantize_dynamic's chain: a run-time scale (a_scale * b_scale) and a constant float bias."""
    rng = np.random.default_rng(5)
    inits = {"b": rng.integers(-128, 128, (K, N)).astype(np.int8), "zb": np.array(0, np.int8),
             "bs": (rng.random(N if per_column_scale else ()) * 0.01 + 0.001).astype(np.float32),
             "bias": rng.standard_normal(bias_shape).astype(np.float32)}
    nodes = [helper.make_node("Mul", ["as", "bs"], ["s"], name="scales"),
             helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["i"], name="mm"),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["f", "s"], ["d"], name="deq")]
    out = "d"
    if bias:
        nodes.append(helper.make_node("Add", ["bias", "d"] if bias_first else ["d", "bias"], ["y"], name="bias"))
        out = "y"
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [M, N])]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["f"], ["z"], name="other"))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [M, N]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [M, K]),
                                       helper.make_tensor_value_info("za", TensorProto.UINT8, []),
                                       helper.make_tensor_value_info("as", TensorProto.FLOAT, [])],
                          outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    return {"a": rng.integers(0, 256, (M, K)).astype(np.uint8), "za": np.array(131, np.uint8),
            "as": np.array(0.037, np.float32)}


@pytest.mark.parametrize("case", [{}, dict(per_column_scale=True, bias_first=False), dict(bias=False)],
                         ids=["scalar-scale-bias", "column-scale-bias-second", "no-bias"])
def test_the_chain_becomes_one_op_with_the_chain_s_values_on_reference_and_cpu(case):
    model = _chain_model(**case)
    graph = rammer.load(model)
    rewritten = run_pipeline(graph, [QDQ_MATMUL_FLOAT], verify=True).graph
    assert [(n.domain, n.op_type) for n in rewritten.nodes] == [("", "Mul"), (RAMMER_DOMAIN, MATMUL_INTEGER_FLOAT)]
    fused = rewritten.nodes[1]
    assert fused.inputs == ("a", "b", "za", "zb", "s", "bias" if case.get("bias", True) else "")
    feeds = _feeds()
    want = rammer.compile(graph, backend="reference")(feeds)
    got = rammer.compile(rewritten, backend="reference")(feeds)
    on_cpu = rammer.compile(model, backend="cpu", cache=False)
    assert on_cpu.executable.report["fallbacks"] == []
    got_cpu = on_cpu(feeds)
    for k in want:  # the float32 roundings of the chain, bit for bit
        np.testing.assert_array_equal(got[k], want[k])
        np.testing.assert_array_equal(got_cpu[k], want[k])


@pytest.mark.parametrize("case", [dict(extra_reader=True), dict(bias_shape=(M, N))],
                         ids=["cast-read-elsewhere", "bias-not-per-column"])
def test_chains_it_cannot_take_whole(case):
    graph = rammer.load(_chain_model(**case))
    if case.get("extra_reader"):
        assert_left_alone(QDQ_MATMUL_FLOAT, graph)
        return
    rewritten = run_pipeline(graph, [QDQ_MATMUL_FLOAT], verify=True).graph  # the Add stays a float Add
    assert [n.op_type for n in rewritten.nodes] == ["Mul", MATMUL_INTEGER_FLOAT, "Add"]
    assert rewritten.nodes[1].inputs[5] == ""
    feeds = _feeds()
    np.testing.assert_array_equal(rammer.compile(rewritten, backend="reference")(feeds)["y"],
                                  rammer.compile(graph, backend="reference")(feeds)["y"])
