"""The core pipeline stages over one operator per graph node (what the GPU family and the ipu schedule
with): the same problem and schedule as scheduling the graph itself, and the wave option of the
ordering stage (memory reused across launches only)."""

from __future__ import annotations

import onnx
import pytest
from helpers import make_model, rand
from onnx import helper

import rammer
from rammer.kernel_families import generic_families
from rammer.kernels_generic import candidates_from
from rammer.memory import ArenaBuffer
from rammer.pipeline import NodeOp, node_operators, operator_predecessors, order_and_plan, schedule_operators
from rammer.schedule import op_predecessors, op_waves, schedule_graph
from rammer.vdevice import get_preset


def _diamond():
    """x -> MatMul -> (Relu, Sigmoid) -> Mul -> Exp: two independent ops in one wave."""
    w = helper.make_tensor("w", onnx.TensorProto.FLOAT, [8, 8], rand((8, 8), 1).ravel().tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["a"]),
             helper.make_node("Sigmoid", ["m"], ["b"]), helper.make_node("Mul", ["a", "b"], ["c"]),
             helper.make_node("Exp", ["c"], ["y"])]
    return rammer.load(make_model(nodes, [("x", onnx.TensorProto.FLOAT, (16, 8))],
                                  [("y", onnx.TensorProto.FLOAT, (16, 8))], initializers=[w]))


def test_node_operators_depend_on_each_other_as_the_graph_nodes_do():
    graph = _diamond()
    assert operator_predecessors(node_operators(graph)) == op_predecessors(graph) == [(), (0,), (0,), (1, 2), (3,)]


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
def test_scheduling_node_operators_with_the_graph_gives_the_graphs_schedule(policy):
    graph, vdevice = _diamond(), get_preset("v100")
    families = generic_families()

    def candidates(op: NodeOp, vd):
        return candidates_from(families, op.node, graph, vd)

    ours = schedule_operators(node_operators(graph), candidates, vdevice, policy, graph.name, check=True, graph=graph)
    assert ours.to_dict() == schedule_graph(graph, policy, vdevice).to_dict()
    # without the graph, the ops are recorded over buffers b<id>, named by position and op type
    bare = schedule_operators(node_operators(graph), candidates, vdevice, policy, graph.name)
    assert bare.ops[1].name.startswith("1:") and bare.ops[1].inputs[0].name == "b2"


def test_waves_order_only_across_launches():
    graph, vdevice = _diamond(), get_preset("v100")
    ops = node_operators(graph)
    families = generic_families()
    schedule = schedule_operators(ops, lambda op, vd: candidates_from(families, op.node, graph, vd), vdevice,
                                  "wavefront", graph.name, graph=graph)
    # node_operators numbers buffers as first met: x, w, m, a, b, c, y
    order = ["x", "w", "m", "a", "b", "c", "y"]
    buffers = [ArenaBuffer(i, "const" if n == "w" else "input" if n == "x" else "temp", 4 * 16 * 8, name=n)
               for i, n in enumerate(order)]
    waves = op_waves(operator_predecessors(ops))
    assert waves == [0, 1, 1, 2, 3]
    ordered = order_and_plan([ops], [schedule], buffers, {order.index("y")}, waves=waves)
    position = {id(op): k for k, op in enumerate(ordered.walk)}
    for op, done in zip(ordered.walk, ordered.done_before):
        wave = waves[ops.index(op)]
        assert done == sum(1 << position[id(o)] for o, w in zip(ops, waves) if w < wave)
    # Relu and Sigmoid run in one launch: neither's output may take the other's or their input's place
    offset = {b.name: b.byte_offset for b in buffers}
    assert len({offset["m"], offset["a"], offset["b"]}) == 3
    with pytest.raises(rammer.errors.ScheduleError, match="4 waves given for 5 operators"):
        order_and_plan([ops], [schedule], buffers, set(), waves=waves[:4])
