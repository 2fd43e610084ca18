"""Fusing elementwise chains into one node each: the core's grouping (``rammer.lower.fusion``) and
elementwise program IR (``rammer.lower.ew_translate``), for a backend that runs a chain as one rKernel.

:func:`fuse_elementwise` groups the elementwise nodes the core can translate (same output shape, no
cycle through the rest of the graph) and replaces each group of two or more nodes, and each single
node of an op the backend has no kernel of its own for, by one ``FusedElementwise`` node (in the
backend's domain) that reads the group's external tensors and writes the tensors read outside it.
The node carries its program as plain data (:class:`FusedProgram`); the backend's lowering turns it
into a kernel.  What differs between backends is data, an :class:`ElementwiseFusion`: which opcodes
its fused kernel has an expression for, the largest rank, the ops it runs natively, and the dtypes its
memory holds (e.g. the GPU family's float arena: bools as 0.0/1.0, integers as exact float32 values
loaded into integer registers).  A group with an opcode the backend lacks, or an external tensor of
another dtype, is left as it was.  Constants a program needs (BatchNorm scales, bool masks as 0/1)
become float32 initializers, integer ones int64 initializers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node, TensorInfo
from ..lower.ew_translate import ew_reason, ew_translate
from ..lower.ewprogram import EwProgram
from ..lower.fusion import build_groups
from ..lower.views import View, dense_strides
from .names import fresh_name
from .pipeline import Pass

__all__ = ["FUSED_OP", "ElementwiseFusion", "FusedProgram", "fuse_elementwise", "fuse_elementwise_pass"]

FUSED_OP = "FusedElementwise"


@dataclass(frozen=True)
class ElementwiseFusion:
    """What a backend's fused elementwise rKernel runs."""

    #: The domain of the fused nodes (the backend's lowering recognizes them by it).
    domain: str
    #: The program opcodes (:mod:`rammer.lower.ewops`) the fused kernel has an expression for.
    opcodes: frozenset[str]
    #: The largest output rank the fused kernel indexes.
    max_rank: int
    #: Ops with a kernel of their own: alone and all float32, a node of one is left unfused.
    native: frozenset[str] = frozenset()
    #: Dtypes held as float values (bools as 0.0/1.0): what the kernel loads and stores as floats.
    float_dtypes: tuple[str, ...] = ("float32",)
    #: Integer dtypes the kernel loads into integer registers (held as exact float32 values).
    int_dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FusedProgram:
    """A fused chain as data: inputs are values ``0..n_in-1`` (the node's inputs, broadcast to
    ``shape``), ``instrs`` are ``(opcode, dst, args, imms)``, ``outputs[j]`` the value written to
    the node's output ``j``."""

    shape: tuple[int, ...]
    n_in: int
    instrs: tuple[tuple[str, int, tuple[int, ...], tuple[float, ...]], ...]
    outputs: tuple[int, ...]
    #: Register type of each input ("f" float, "i" integer), as :mod:`rammer.lower.ewops` types it.
    in_types: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Equal programs share one kernel (lstm-tc's cells are thousands of the same chain)."""
        text = repr((self.n_in, self.instrs, self.outputs, self.in_types)).encode()
        return hashlib.sha1(text).hexdigest()[:10]


def _as_float(value: np.ndarray) -> np.ndarray | None:
    """A constant as exact float32 values, or None."""
    value = np.asarray(value)
    if value.dtype == np.float32:
        return value
    if value.dtype == np.bool_ or (np.issubdtype(value.dtype, np.integer) and np.all(np.abs(value) < 2 ** 24)):
        return value.astype(np.float32)
    return None


def _program(graph: Graph, members: list[Node], inits: dict[str, np.ndarray], value_info: dict[str, TensorInfo],
             taken: set[str], fusion: ElementwiseFusion) -> tuple[list[str], list[str], FusedProgram] | None:
    """(inputs, outputs, FusedProgram) of ``members`` or None when the backend cannot run it."""
    shape = tuple(graph.value_info[members[0].outputs[0]].shape)
    if len(shape) > fusion.max_rank:
        return None
    prog = EwProgram(shape)
    value_of: dict[str, int] = {}
    inputs: list[str] = []

    def external(name: str) -> int:
        # value_info and inits, not the graph's: constant() adds the constants it makes there.
        info = value_info[name]
        if info.dtype in fusion.int_dtypes and (name not in inits or _as_float(inits[name]) is not None):
            if name not in inputs:
                inputs.append(name)
            return prog.load(View(inputs.index(name), info.dtype, tuple(info.shape), dense_strides(tuple(info.shape))))
        if name in inits and info.dtype != "float32":
            as_float = _as_float(inits[name])
            if as_float is None:
                raise ValueError(name)
            new = fresh_name(f"{name}_f32", taken)
            inits[new], value_info[new] = as_float, TensorInfo(new, "float32", info.shape)
            name, info = new, value_info[new]
        elif info.dtype not in fusion.float_dtypes:
            raise ValueError(name)
        if name not in inputs:
            inputs.append(name)
        return prog.load(View(inputs.index(name), "float32", tuple(info.shape), dense_strides(tuple(info.shape))))

    def constant(value: np.ndarray) -> int:
        as_float = _as_float(value)
        if as_float is None:
            raise ValueError("constant")
        new = fresh_name("fused_const", taken)
        if np.asarray(value).dtype.name in fusion.int_dtypes:  # an integer register's operand stays integer
            as_int = np.ascontiguousarray(value, np.int64)
            inits[new], value_info[new] = as_int, TensorInfo(new, "int64", as_int.shape)
            return external(new)
        inits[new], value_info[new] = np.ascontiguousarray(as_float), TensorInfo(new, "float32", as_float.shape)
        return external(new)

    try:
        for m in members:
            def operand(i: int, m: Node = m) -> int:
                name = m.inputs[i]
                return value_of[name] if name in value_of else external(name)
            value_of[m.outputs[0]] = ew_translate(m, graph, prog, operand, constant)
    except (ValueError, KeyError):
        return None
    if any(ins.op not in fusion.opcodes for ins in prog.instrs) or not inputs:
        return None
    ids = {id(m) for m in members}
    graph_outputs = {t.name for t in graph.outputs}
    outputs = [t for t in (m.outputs[0] for m in members)
               if t in graph_outputs or any(id(r) not in ids for r in graph.consumers.get(t, ()))]
    if any(graph.value_info[t].dtype not in fusion.float_dtypes + fusion.int_dtypes
           for t in outputs) or not outputs:
        return None
    if len(prog.inputs) != len(inputs):
        return None
    # Renumber: inputs are values 0..n_in-1 in load order, then one value per instruction.
    number = {value: k for k, value in enumerate(prog.input_values)}
    for j, ins in enumerate(prog.instrs):
        number[ins.dst] = len(inputs) + j
    instrs = tuple((i.op, number[i.dst], tuple(number[a] for a in i.args), tuple(float(x) for x in i.imms))
                   for i in prog.instrs)
    in_types = tuple(prog.types[value] for value in prog.input_values)
    return inputs, outputs, FusedProgram(shape, len(inputs), instrs, tuple(number[value_of[t]] for t in outputs),
                                         in_types)


def fuse_elementwise(graph: Graph, fusion: ElementwiseFusion) -> Graph:
    """``graph`` with the elementwise chains ``fusion`` runs fused (the same object when none is)."""
    if any(n.subgraphs() for n in graph.nodes):
        return graph
    kinds = ["ew" if ew_reason(n, graph) is None else "other" for n in graph.nodes]
    if "ew" not in kinds:
        return graph
    groups, _ = build_groups(graph, kinds)
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    inits, value_info = dict(graph.initializers), dict(graph.value_info)
    replace_at: dict[int, Node] = {}
    dropped: set[int] = set()
    for g in groups:
        members = [graph.nodes[i] for i in sorted(g.members)]
        if len(members) == 1 and members[0].op_type in fusion.native and all(
                graph.value_info[t].dtype == "float32" for t in (*members[0].inputs, *members[0].outputs) if t):
            continue  # the native kernel runs it (an integer one runs fused: the native kernels are float)
        built = _program(graph, members, inits, value_info, taken, fusion)
        if built is None:
            continue
        inputs, outputs, prog = built
        name = fresh_name(f"{members[-1].name or outputs[0]}_fused", node_names)
        node = Node(FUSED_OP, tuple(inputs), tuple(outputs), name=name, domain=fusion.domain,
                    attrs={"program": prog, "members": tuple(m.name for m in members)})
        replace_at[sorted(g.members)[-1]] = node
        dropped.update(sorted(g.members)[:-1])
    if not replace_at:
        return graph
    nodes = _topological([replace_at.get(i, n) for i, n in enumerate(graph.nodes) if i not in dropped])
    live = {t for n in nodes for t in (*n.inputs, *n.outputs)} | {t.name for t in graph.outputs} \
        | {t.name for t in graph.inputs}
    value_info = {k: v for k, v in value_info.items() if k in live or k in graph.initializers}
    inits = {k: v for k, v in inits.items() if k in live}
    value_info = {k: v for k, v in value_info.items() if k in live}
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=value_info)


def _topological(nodes: list[Node]) -> list[Node]:
    """``nodes`` in an order where every tensor is written before it is read, keeping the given
    order where it already is one (a fused node sits at its last member's place, after readers of
    an earlier member's output that stood between the members)."""
    made = {t for n in nodes for t in n.outputs}
    done: set[str] = set()
    out: list[Node] = []
    waiting = list(nodes)
    while waiting:
        rest = []
        for n in waiting:
            if all(not t or t not in made or t in done for t in n.inputs):
                out.append(n)
                done.update(n.outputs)
            else:
                rest.append(n)
        if len(rest) == len(waiting):  # cannot happen: the grouping never makes a cycle
            raise ValueError("fused elementwise groups made a cycle")
        waiting = rest
    return out


def fuse_elementwise_pass(fusion: ElementwiseFusion, description: str = "") -> Pass:
    """The graph pass ``fuse-elementwise`` for a backend's :class:`ElementwiseFusion`."""
    return Pass("fuse-elementwise", lambda graph: fuse_elementwise(graph, fusion),
                description or "elementwise chains as one rKernel each (the core's fusion and program IR)")
