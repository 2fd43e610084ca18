"""Elementwise fusion (core/passes/fuse_elementwise.py), Before/Expected, with a backend description
(:class:`ElementwiseFusion`) written here: which chains become one FusedElementwise node, and which
are left alone (an op the backend runs natively, an opcode or dtype its fused kernel lacks)."""

from __future__ import annotations

import numpy as np
from pass_graphs import assert_graphs_equal, assert_left_alone, graph, node

from rammer.ir import Graph, Node
from rammer.lower import ewops
from rammer.passes import ElementwiseFusion, fuse_elementwise, fuse_elementwise_pass, run_pipeline
from rammer.passes.fuse_elementwise import FUSED_OP, FusedProgram

#: A backend whose fused kernel has every core opcode, over float32 only, natively running Relu.
EVERY_OPCODE = ElementwiseFusion(domain="test.fused", opcodes=frozenset(op for op, _, _ in ewops.TABLE), max_rank=4,
                                 native=frozenset({"Relu"}))


def _fused(before: Graph, inputs: tuple[str, ...], outputs: tuple[str, ...], name: str, program: FusedProgram,
           members: tuple[str, ...], rest: tuple[Node, ...] = (), domain: str = "test.fused") -> Graph:
    fused = Node(FUSED_OP, inputs, outputs, name=name, domain=domain, attrs={"program": program, "members": members})
    nodes = (fused, *rest)
    # the chain's intermediates no node reads or writes any more are gone from value_info
    live = {t for n in nodes for t in (*n.inputs, *n.outputs)} | {t.name for t in (*before.inputs, *before.outputs)}
    return before.replace(nodes=nodes, value_info={k: v for k, v in before.value_info.items() if k in live})


def test_a_chain_becomes_one_node_running_its_program():
    before = graph([node("Relu", ["x"], ["a"]), node("Neg", ["a"], ["b"]), node("Add", ["b", "x"], ["y"])],
                   {"x": [2, 3]}, {"y": [2, 3]})
    program = FusedProgram((2, 3), 1, (("RELU", 1, (0,), ()), ("NEG", 2, (1,), ()), ("ADD", 3, (2, 0), ())), (3,),
                           ("f",))
    expected = _fused(before, ("x",), ("y",), "Add_2_fused", program, ("Relu_0", "Neg_1", "Add_2"))
    after = run_pipeline(before, [fuse_elementwise_pass(EVERY_OPCODE)], verify=True).graph
    assert_graphs_equal(after, expected)


def test_a_tensor_read_outside_the_chain_is_written_by_the_fused_node():
    before = graph([node("Relu", ["x"], ["a"]), node("Exp", ["a"], ["b"]), node("Mul", ["b", "s"], ["y"]),
                    node("Transpose", ["a"], ["z"], perm=[1, 0])],
                   {"x": [2, 3]}, {"y": [2, 3], "z": [3, 2]}, {"s": np.float32(2.0)})
    program = FusedProgram((2, 3), 2, (("RELU", 2, (0,), ()), ("EXP", 3, (2,), ()), ("MUL", 4, (3, 1), ())), (2, 4),
                           ("f", "f"))
    expected = _fused(before, ("x", "s"), ("a", "y"), "Mul_2_fused", program, ("Relu_0", "Exp_1", "Mul_2"),
                      rest=(before.nodes[3],))
    assert_graphs_equal(fuse_elementwise(before, EVERY_OPCODE), expected)


def test_a_lone_native_op_is_left_alone_and_a_lone_other_op_is_fused():
    assert_left_alone(lambda g: fuse_elementwise(g, EVERY_OPCODE),
                      graph([node("Relu", ["x"], ["y"])], {"x": [4]}, {"y": [4]}))
    before = graph([node("Erf", ["x"], ["y"])], {"x": [4]}, {"y": [4]})
    program = FusedProgram((4,), 1, (("ERF", 1, (0,), ()),), (1,), ("f",))
    assert_graphs_equal(fuse_elementwise(before, EVERY_OPCODE),
                        _fused(before, ("x",), ("y",), "Erf_0_fused", program, ("Erf_0",)))


def test_what_the_backends_kernel_lacks_is_left_alone():
    chain = graph([node("Sigmoid", ["x"], ["a"]), node("Neg", ["a"], ["y"])], {"x": [2, 3]}, {"y": [2, 3]})
    no_sigmoid = ElementwiseFusion(domain="test.fused", opcodes=EVERY_OPCODE.opcodes - {"SIGMOID"}, max_rank=4)
    assert_left_alone(lambda g: fuse_elementwise(g, no_sigmoid), chain)
    rank_one = ElementwiseFusion(domain="test.fused", opcodes=EVERY_OPCODE.opcodes, max_rank=1)
    assert_left_alone(lambda g: fuse_elementwise(g, rank_one), chain)
    # the fused node is in the backend's own domain
    other = ElementwiseFusion(domain="other.fused", opcodes=EVERY_OPCODE.opcodes, max_rank=4)
    assert {n.domain for n in fuse_elementwise(chain, other).nodes} == {"other.fused"}
