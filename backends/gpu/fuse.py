"""Fusing elementwise chains for the GPU backends: the core's grouping (``rammer.lower.fusion``)
and elementwise program IR (``rammer.lower.ew_translate``), one rKernel per chain.

:data:`FUSE_ELEMENTWISE` is a graph pass.  It groups the elementwise nodes that the core can
translate (same output shape, no cycle through the rest of the graph) and replaces each group of
two or more nodes, and each single node of an op the GPU has no kernel of its own for (Clip, Erf,
Where, comparisons...), by one ``FusedElementwise`` node (domain ``rammer.gpu``) that reads the
group's external tensors and writes the tensors read outside it.  The node carries its program as
plain data (:class:`FusedProgram`); :func:`lower_fused` turns it into the kernel of
:mod:`.kernels_ew`.  Integer programs (int64/int32 arithmetic on position ids, masks...) run in
64-bit integer registers over the exact float32 values the arena holds (:mod:`.lower_ints`).  A
group with an opcode without a GPU expression, or whose external tensors are neither float32, bool
(0.0/1.0 in the arena) nor int32/int64, is left as it was.  Constants a program needs (BatchNorm
scales, bool masks as 0/1) become float32 initializers, integer ones int64 initializers.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rammer.ir import Graph, Node, TensorInfo
from rammer.lower.ew_translate import ew_reason, ew_translate
from rammer.lower.ewprogram import EwProgram
from rammer.lower.fusion import build_groups
from rammer.lower.views import View
from rammer.passes import Pass
from rammer.passes.names import fresh_name

from . import kernels_ew as kew
from .kernels_model import MAX_RANK

__all__ = ["FUSED_OP", "FUSED_DOMAIN", "FUSIBLE_OPS", "FusedProgram", "FUSE_ELEMENTWISE", "fuse_elementwise",
           "lower_fused"]

FUSED_OP, FUSED_DOMAIN = "FusedElementwise", "rammer.gpu"
#: Elementwise ops with a GPU kernel of their own: alone, they are left unfused.
NATIVE = frozenset({"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Sqrt", "Log", "Add", "Sub", "Mul", "Div"})
_THREADS = 256
#: Tensor dtypes a program may read and write: bools live in the arena as 0.0/1.0, exactly what the
#: comparisons and logic opcodes compute and what they read as false/true (``!= 0``).
_ARENA_FLOATS = ("float32", "bool")
#: Integer dtypes a program loads into integer registers (exact float32 values in the arena).
_ARENA_INTS = ("int32", "int64")
#: ONNX ops the pass can run (alone or in a chain) on float32 tensors: those whose translation
#: uses only opcodes with a GPU expression.
FUSIBLE_OPS = frozenset({
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Erf",
    "Softplus", "Softsign", "Sign", "HardSwish", "LeakyRelu", "Elu", "HardSigmoid", "ThresholdedRelu", "Gelu",
    "Clip", "Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "Not", "IsNaN", "IsInf", "Where",
    "BatchNormalization"})


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


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(out[::-1])


def _as_float(value: np.ndarray) -> np.ndarray | None:
    """A constant as exact float32 values, or None."""
    value = np.asarray(value)
    if value.dtype == np.float32:
        return value
    if value.dtype == np.bool_ or (np.issubdtype(value.dtype, np.integer) and np.all(np.abs(value) < 2 ** 24)):
        return value.astype(np.float32)
    return None


def _program(graph: Graph, members: list[Node], inits: dict, value_info: dict, taken: set[str]):
    """(inputs, outputs, FusedProgram) of ``members`` or None when the GPU cannot run it."""
    shape = tuple(graph.value_info[members[0].outputs[0]].shape)
    if len(shape) > MAX_RANK:
        return None
    prog = EwProgram(shape)
    value_of: dict[str, int] = {}
    inputs: list[str] = []

    def external(name: str) -> int:
        # value_info and inits, not the graph's: constant() adds the constants it makes there.
        info = value_info[name]
        if info.dtype in _ARENA_INTS and (name not in inits or _as_float(inits[name]) is not None):
            if name not in inputs:
                inputs.append(name)
            return prog.load(View(inputs.index(name), info.dtype, tuple(info.shape), _strides(tuple(info.shape))))
        if name in inits and info.dtype != "float32":
            as_float = _as_float(inits[name])
            if as_float is None:
                raise ValueError(name)
            new = fresh_name(f"{name}_f32", taken)
            inits[new], value_info[new] = as_float, TensorInfo(new, "float32", info.shape)
            name, info = new, value_info[new]
        elif info.dtype not in _ARENA_FLOATS:
            raise ValueError(name)
        if name not in inputs:
            inputs.append(name)
        return prog.load(View(inputs.index(name), "float32", tuple(info.shape), _strides(tuple(info.shape))))

    def constant(value: np.ndarray) -> int:
        as_float = _as_float(value)
        if as_float is None:
            raise ValueError("constant")
        new = fresh_name("fused_const", taken)
        if np.asarray(value).dtype.name in _ARENA_INTS:  # an integer register's operand stays integer
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
    if not kew.supported(prog.instrs) or not inputs:
        return None
    ids = {id(m) for m in members}
    graph_outputs = {t.name for t in graph.outputs}
    outputs = [t for t in (m.outputs[0] for m in members)
               if t in graph_outputs or any(id(r) not in ids for r in graph.consumers.get(t, ()))]
    if any(graph.value_info[t].dtype not in _ARENA_FLOATS + _ARENA_INTS for t in outputs) or not outputs:
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


def fuse_elementwise(graph: Graph) -> Graph:
    """``graph`` with its GPU-runnable elementwise chains fused (the same object when none is)."""
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
        if len(members) == 1 and members[0].op_type in NATIVE and all(
                graph.value_info[t].dtype == "float32" for t in (*members[0].inputs, *members[0].outputs) if t):
            continue  # the native kernel runs it (an integer one runs fused: the native kernels are float)
        built = _program(graph, members, inits, value_info, taken)
        if built is None:
            continue
        inputs, outputs, prog = built
        name = fresh_name(f"{members[-1].name or outputs[0]}_fused", node_names)
        node = Node(FUSED_OP, tuple(inputs), tuple(outputs), name=name, domain=FUSED_DOMAIN,
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


FUSE_ELEMENTWISE = Pass("fuse-elementwise", fuse_elementwise,
                        "elementwise chains as one GPU rKernel each (the core's fusion and program IR)")


def lower_fused(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """The fused chain's rKernel: chunks of ``256 * mult`` elements per rTask."""
    prog: FusedProgram = node.attrs["program"]
    shape = prog.shape
    rank = len(shape)
    dims = [1] * (MAX_RANK - rank) + list(shape)
    strides: list[int] = []
    for k, name in enumerate(node.inputs):
        in_shape = tuple(graph.value_info[name].shape)
        pad = rank - len(in_shape)
        full = (1,) * pad + in_shape
        own = (0,) * pad + _strides(in_shape)
        s = [0 if d_in == 1 else st for d_in, st in zip(full, own)]
        strides += [0] * (MAX_RANK - rank) + s
    total = int(math.prod(shape))
    chunk = _THREADS * mult
    args = (*(ref("in", k) for k in range(len(node.inputs))), *(ref("out", j) for j in range(len(node.outputs))),
            total, chunk, *dims[1:], *strides)
    kernel = kew.fused_kernel(f"ew_{prog.key}", prog.n_in, len(prog.outputs), prog.instrs, prog.outputs, _THREADS,
                              prog.in_types)
    calls = tuple((r, args) for r in range(max(1, math.ceil(total / chunk))))
    n_io = prog.n_in + len(prog.outputs)
    return lowered(kernel, calls, float(chunk * max(len(prog.instrs), 1)), 4.0 * chunk * n_io)
