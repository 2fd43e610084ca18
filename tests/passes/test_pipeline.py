"""The graph pass pipeline runner (core/passes/pipeline.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from onnx import TensorProto, helper

import rammer
from rammer.backend import Backend
from rammer.errors import CompileError, IRVerificationError, RammerError
from rammer.ir import Graph
from rammer.passes import CSE, RELU_CONCAT, Pass, PassError, merge_convs_pass, run_pipeline
from rammer.passes.pipeline import VERIFY_ENV


def _graph() -> Graph:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["x"], ["b"], name="r2"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return rammer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_each_pass_runs_in_order_and_is_timed():
    seen = []

    def spy(name):
        def run(graph):
            seen.append((name, len(graph.nodes)))
            return graph
        return Pass(name, run)

    result = run_pipeline(_graph(), [spy("first"), CSE, spy("last")])
    assert seen == [("first", 3), ("last", 2)]  # CSE dropped the second Relu before "last" ran
    assert [t.name for t in result.timings] == ["first", "cse", "last"]
    assert [t.changed for t in result.timings] == [False, True, False]
    assert result.timings[1].nodes_before == 3 and result.timings[1].nodes_after == 2
    assert all(t.seconds >= 0 for t in result.timings) and result.seconds == sum(t.seconds for t in result.timings)
    assert [r["pass"] for r in result.report()] == ["first", "cse", "last"]
    assert len(result.graph.nodes) == 2


def test_an_empty_pipeline_returns_the_graph():
    g = _graph()
    assert run_pipeline(g, []).graph is g


def test_a_crash_names_the_pass_and_keeps_its_cause():
    def broken(graph):
        raise KeyError("x")

    with pytest.raises(PassError, match="graph pass 'broken-pass' crashed.*KeyError") as info:
        run_pipeline(_graph(), [CSE, Pass("broken-pass", broken)])
    assert isinstance(info.value, CompileError) and isinstance(info.value, RammerError)
    assert info.value.pass_name == "broken-pass"
    assert isinstance(info.value.__cause__, KeyError)


def test_a_rammer_error_in_a_pass_is_reported_with_the_pass_name():
    def refuses(graph):
        raise RammerError("node 'add' (Add): cannot do that")

    with pytest.raises(PassError, match="graph pass 'refuses' failed.*node 'add'"):
        run_pipeline(_graph(), [Pass("refuses", refuses)])


def test_verify_after_each_pass_catches_the_pass_that_breaks_the_ir(monkeypatch):
    def drop_first_node(graph):  # its output is still read: not SSA any more
        return graph.replace(nodes=graph.nodes[1:])

    passes = [RELU_CONCAT, Pass("drop-first", drop_first_node), CSE]
    monkeypatch.delenv(VERIFY_ENV, raising=False)
    run_pipeline(_graph(), passes)  # not checked: no error
    with pytest.raises(PassError, match="graph pass 'drop-first' broke the IR") as info:
        run_pipeline(_graph(), passes, verify=True)
    assert isinstance(info.value.__cause__, IRVerificationError)


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False), ("off", False)])
def test_the_environment_flag_turns_verification_on_for_every_run(monkeypatch, value, on):
    broken = [Pass("drop-first", lambda g: g.replace(nodes=g.nodes[1:]))]
    monkeypatch.setenv(VERIFY_ENV, value)
    if on:
        with pytest.raises(PassError, match="'drop-first' broke the IR"):
            run_pipeline(_graph(), broken)  # the caller did not ask: the flag did
        with pytest.raises(PassError, match="'drop-first' broke the IR"):
            _BrokenPipelineBackend().prepare_graph(_graph())  # a backend's own pipeline too
    else:
        run_pipeline(_graph(), broken)


class _BrokenPipelineBackend(Backend):
    name = "broken-pipeline"
    graph_passes = (Pass("drop-first", lambda g: g.replace(nodes=g.nodes[1:])),)

    def compile(self, graph, options):
        raise NotImplementedError


def test_a_pass_must_return_a_graph():
    with pytest.raises(PassError, match="'nothing' returned NoneType"):
        run_pipeline(_graph(), [Pass("nothing", lambda g: None)])


def test_pass_names_are_unique_in_a_pipeline():
    with pytest.raises(PassError, match="names a pass twice: cse"):
        run_pipeline(_graph(), [CSE, CSE])
    run_pipeline(_graph(), [CSE, CSE.renamed("cse-again")])


def test_merge_convs_takes_the_absorbable_ops():
    p = merge_convs_pass({"Relu"})
    assert p.name == "merge-convs"
    g = _graph()
    assert p(g) is g  # no convs


def test_a_backend_without_passes_leaves_the_graph_alone():
    backend = rammer.plugins.get_backend("reference")
    g = _graph()
    assert backend.graph_passes == () and backend.prepare_graph(g).graph is g


def test_the_runner_keeps_graphs_frozen():
    g = _graph()
    before = [replace(n) for n in g.nodes]
    run_pipeline(g, [CSE])
    assert list(g.nodes) == before and [n.name for n in g.nodes] == ["r1", "r2", "add"]
