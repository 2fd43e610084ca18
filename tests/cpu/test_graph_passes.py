"""The CPU backend's graph rewrites: its pipeline (backends/cpu/graph_passes.py) of core passes
(core/passes/relu_concat.py, merge_convs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

import rammer
import rammer.zoo
from rammer import plugins
from rammer.backends.cpu.graph_passes import EPILOGUE_OPS, PIPELINE, prepare
from rammer.passes import merge_sibling_convs, sink_relu_into_concat


def _same_outputs(before, after, feeds):
    """The reference backend gives the same results on both graphs."""
    want = rammer.compile(before, backend="reference")(feeds)
    got = rammer.compile(after, backend="reference")(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=k)


def _ops(graph):
    return [n.op_type for n in graph.nodes]


def _concat_model(extra_reader: bool = False):
    x = rand(1, 4, 5, 5)
    nodes = [node("Add", ["x", "x"], ["a"]), node("Sigmoid", ["x"], ["s"]), node("Neg", ["x"], ["n"]),
             node("Concat", ["a", "s", "a", "n"], ["c"], axis=1),
             node("Relu", ["c"], ["r1"]), node("Relu", ["c"], ["r2"]),  # CSE would merge these; here both stay
             node("Mul", ["r1", "r2"], ["y"]), node("Mul", ["n", "s"], ["z"])]
    if extra_reader:
        nodes.append(node("Tanh", ["c"], ["t"]))
    return model(nodes, {"x": x}, ["y", "z"] + (["t"] if extra_reader else [])), {"x": x}


def test_relu_of_a_concat_moves_onto_its_parts():
    m, feeds = _concat_model()
    g = rammer.load(m)
    h = sink_relu_into_concat(g)
    h.verify()
    # one Relu per distinct part, then the Concat of them under the first Relu's name
    assert _ops(h) == ["Add", "Sigmoid", "Neg", "Relu", "Relu", "Relu", "Concat", "Mul", "Mul"]
    concat = h.nodes[6]
    assert concat.outputs == ("r1",) and len(set(concat.inputs)) == 3 and concat.inputs[0] == concat.inputs[2]
    assert h.nodes[7].inputs == ("r1", "r1")  # the second Relu's reader reads the first's name
    assert "c" not in h.value_info and "r2" not in h.value_info
    _same_outputs(g, h, feeds)
    compare(m, feeds)


def test_concat_with_another_reader_or_graph_output_is_left_alone():
    m, _ = _concat_model(extra_reader=True)
    g = rammer.load(m)
    assert sink_relu_into_concat(g) is g
    x = rand(1, 2, 3)
    g2 = rammer.load(model([node("Concat", ["x", "x"], ["c"], axis=1), node("Relu", ["c"], ["y"])],
                           {"x": x}, ["y", "c"]))
    assert sink_relu_into_concat(g2) is g2  # the concat is a graph output
    # a part that is a graph input: nothing produces it, nothing to fold the Relu into
    g3 = rammer.load(model([node("Concat", ["x", "x"], ["c"], axis=1), node("Relu", ["c"], ["y"])], {"x": x}, ["y"]))
    assert sink_relu_into_concat(g3) is g3


def _sibling_convs(batch: int = 1, opset: int = 17, kernel: int = 1, lone_reader: bool = False, **attrs2):
    x = rand(batch, 6, 7, 7)
    consts = {"w1": rand(5, 6, kernel, kernel, seed=1), "b1": rand(5, seed=2), "w2": rand(3, 6, kernel, kernel, seed=3)}
    pads = [kernel // 2] * 4
    nodes = [node("Relu", ["x"], ["r"]),
             node("Conv", ["r", "w1", "b1"], ["c1"], pads=pads),
             node("Conv", ["r", "w2"], ["c2"], pads=pads, **attrs2),
             # several readers each, as NASNet's projections have
             node("Sigmoid", ["c1"], ["s1"]), node("Neg", ["c2"], ["n2"]),
             node("AveragePool", ["c1"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Add", ["s1", "p1"], ["y1"])]
    outs = ["y1", "n2"]
    if not lone_reader:
        nodes.append(node("Tanh", ["c2"], ["t2"]))
        outs.append("t2")
    return model(nodes, {"x": x}, outs, consts, opset=opset), {"x": x}


@pytest.mark.parametrize("opset,kernel", [(17, 1), (17, 3), (11, 1)])
def test_sibling_convs_merge_into_one_and_a_split(opset, kernel):
    m, feeds = _sibling_convs(opset=opset, kernel=kernel)
    g = rammer.load(m)
    h = merge_sibling_convs(g, EPILOGUE_OPS)
    h.verify()
    convs = [n for n in h.nodes if n.op_type == "Conv"]
    assert len(convs) == 1 and h.initializers[convs[0].inputs[1]].shape[0] == 8
    np.testing.assert_array_equal(h.initializers[convs[0].inputs[2]][5:], 0)  # the second had no bias
    split = next(n for n in h.nodes if n.op_type == "Split")
    assert split.outputs == ("c1", "c2")
    assert ("split" in split.attrs) == (opset < 13)
    assert "w1" not in h.initializers and "w2" not in h.initializers
    _same_outputs(g, h, feeds)
    compare(m, feeds)


@pytest.mark.parametrize("case", ["batch2", "strides", "lone-elementwise-reader"])
def test_convs_that_cannot_or_should_not_merge(case):
    if case == "batch2":
        m, _ = _sibling_convs(batch=2)  # the parts of the merged output would not be contiguous
    elif case == "strides":
        m, _ = _sibling_convs(strides=[2, 2])
    else:
        m, _ = _sibling_convs(lone_reader=True)  # c2's Neg would run in its conv's epilogue
    g = rammer.load(m)
    assert merge_sibling_convs(g, EPILOGUE_OPS) is g


def test_the_absorbable_ops_are_the_backends_choice():
    """A backend without conv epilogues merges a conv whose lone reader is elementwise."""
    m, feeds = _sibling_convs(lone_reader=True)
    g = rammer.load(m)
    h = merge_sibling_convs(g)
    assert h is not g and [n.op_type for n in h.nodes].count("Conv") == 1
    _same_outputs(g, h, feeds)


def test_the_cpu_backend_declares_its_pipeline_as_data():
    backend = plugins.get_backend("cpu")
    assert backend.graph_passes == PIPELINE
    assert [p.name for p in PIPELINE] == ["decompose", "fold-batchnorm", "norm-as-layernorm", "fuse-gelu",
                                         "qdq-to-qlinear", "qdq-lookup", "qdq-add", "qdq-matmul-float",
                                         "qdq-as-float",
                                         "cse", "relu-concat", "merge-convs", "cse-again", "fuse-attention"]
    g = rammer.load(rammer.zoo.build("nasnet-small"))
    result = backend.prepare_graph(g, verify=True)
    assert [t.name for t in result.timings] == [p.name for p in PIPELINE]
    assert all(t.seconds >= 0 for t in result.timings)
    assert next(t for t in result.timings if t.name == "cse").changed
    assert result.graph.nodes == prepare(g).nodes


def test_prepare_keeps_the_ir_valid_on_nasnet():
    proto = rammer.zoo.build("nasnet-small")
    g = rammer.load(proto)
    h = prepare(g, verify=True)

    def relus_of_concats(graph):  # concats that only Relus read (a factorized reduction's is read raw too)
        return sum(n.op_type == "Concat" and all(r.op_type == "Relu" for r in graph.consumers[n.outputs[0]])
                   for n in graph.nodes if n.outputs[0] in graph.consumers)

    assert relus_of_concats(g) > 0 and relus_of_concats(h) == 0
    assert _ops(h).count("Conv") < _ops(g).count("Conv")
    feeds = {t.name: rand(*t.shape, seed=4) for t in g.inputs}
    _same_outputs(g, h, feeds)
