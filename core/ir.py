"""The intermediate representation: a static-shape data-flow graph.

Everything here is an immutable dataclass.  Passes build new graphs instead of
editing old ones (``Graph.replace``), and :meth:`Graph.verify` checks the
invariants every pass must keep:

* SSA form: every tensor name is defined exactly once (graph input,
  initializer or node output);
* topological order: a node only reads tensors defined before it (or in an
  enclosing graph, for subgraphs of control-flow ops);
* every tensor has a static shape and a supported dtype, and initializers
  match their declared shape and dtype.

Dtypes are numpy dtype names (``"float32"``, ``"int64"``, ``"bool"``...), so IR
objects are hashable, printable and JSON-friendly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import IRVerificationError

#: Dtypes the IR can carry.  ``object`` holds ONNX strings.
SUPPORTED_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "object",
    }
)


def dtype_name(dtype: Any) -> str:
    """Canonical dtype name for anything numpy understands as a dtype."""
    return np.dtype(dtype).name if np.dtype(dtype).kind != "O" else "object"


def _freeze(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's name, dtype name and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype) if self.dtype != "object" else np.dtype(object)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.np_dtype.itemsize

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Node:
    """One operator application.

    ``inputs`` may contain ``""`` for an omitted optional input, as in ONNX.
    ``attrs`` maps attribute names to Python values: int, float, str,
    lists of those, ``np.ndarray`` (tensor attributes) or :class:`Graph`
    (subgraphs of control-flow ops).
    """

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str = ""
    domain: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", _freeze(self.attrs))
        # ai.onnx is spelled "" everywhere in the IR.
        if self.domain == "ai.onnx":
            object.__setattr__(self, "domain", "")

    def __hash__(self) -> int:  # attrs may hold arrays; identity is enough
        return id(self)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    @property
    def label(self) -> str:
        """How errors name this node: ``'name' (OpType)``."""
        shown = self.name or (self.outputs[0] if self.outputs else "?")
        return f"node '{shown}' ({self.op_type})"

    def subgraphs(self) -> list[Graph]:
        found: list[Graph] = []
        for value in self.attrs.values():
            if isinstance(value, Graph):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                found.extend(v for v in value if isinstance(v, Graph))
        return found


@dataclass(frozen=True, eq=False)
class Graph:
    """A static-shape data-flow graph in topological order."""

    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    nodes: tuple[Node, ...]
    initializers: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: TensorInfo for every tensor defined in this graph (inputs,
    #: initializers and node outputs).
    value_info: Mapping[str, TensorInfo] = field(default_factory=dict)
    #: Opset version per domain ("" is ai.onnx).
    opset: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "initializers", _freeze(self.initializers))
        object.__setattr__(self, "value_info", _freeze(self.value_info))
        object.__setattr__(self, "opset", _freeze(self.opset))

    def replace(self, **changes: Any) -> Graph:
        """A copy with some fields changed (the way passes build new graphs)."""
        return replace(self, **changes)

    # -- lookups ---------------------------------------------------------
    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.value_info[name]
        except KeyError:
            raise IRVerificationError(f"graph '{self.name}' has no tensor '{name}'") from None

    @cached_property
    def producer(self) -> Mapping[str, Node]:
        """Tensor name -> the node that writes it."""
        return MappingProxyType({out: n for n in self.nodes for out in n.outputs if out})

    @cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        """Tensor name -> nodes that read it, in graph order."""
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in set(n.inputs) | _outer_names(n):
                if name:
                    users.setdefault(name, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in users.items()})

    @property
    def num_parameters(self) -> int:
        return sum(int(v.size) for v in self.initializers.values())

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return counts

    # -- invariants ------------------------------------------------------
    def verify(self, outer: Iterable[str] = ()) -> None:
        """Raise :class:`IRVerificationError` unless every invariant holds."""
        defined: set[str] = set()
        outer_names = set(outer)

        def define(name: str, what: str) -> None:
            if not name:
                raise IRVerificationError(f"graph '{self.name}': {what} has an empty name")
            if name in defined:
                raise IRVerificationError(
                    f"graph '{self.name}': tensor '{name}' is defined twice (SSA violated, at {what})"
                )
            defined.add(name)
            info = self.value_info.get(name)
            if info is None:
                raise IRVerificationError(f"graph '{self.name}': tensor '{name}' ({what}) has no TensorInfo")
            if info.dtype not in SUPPORTED_DTYPES:
                raise IRVerificationError(f"tensor '{name}' has unsupported dtype {info.dtype}")
            if any(d < 0 for d in info.shape):
                raise IRVerificationError(f"tensor '{name}' has a non-static shape {info.shape}")

        for t in self.inputs:
            define(t.name, "graph input")
            if self.value_info[t.name] != t:
                raise IRVerificationError(f"graph input '{t.name}' disagrees with value_info")
        for name, value in self.initializers.items():
            define(name, "initializer")
            info = self.value_info[name]
            if tuple(value.shape) != info.shape or dtype_name(value.dtype) != info.dtype:
                raise IRVerificationError(
                    f"initializer '{name}' is {dtype_name(value.dtype)}{list(value.shape)} "
                    f"but declared {info.dtype}{list(info.shape)}"
                )
        for node in self.nodes:
            # (no union of the two sets per node: that copy made verify quadratic, 2.2 s on a 14k-node graph)
            for name in node.inputs:
                if name and name not in defined and name not in outer_names:
                    raise IRVerificationError(
                        f"{node.label} reads '{name}' before it is defined (not topologically ordered)"
                    )
            for sub in node.subgraphs():
                sub.verify(outer=defined | outer_names)
            for name in node.outputs:
                if name:
                    define(name, node.label)
        for t in self.outputs:
            if t.name not in defined and t.name not in outer_names:
                raise IRVerificationError(f"graph output '{t.name}' is never defined")
            if self.value_info.get(t.name, t) != t:
                raise IRVerificationError(f"graph output '{t.name}' disagrees with value_info")
        stray = set(self.value_info) - defined
        if stray:
            raise IRVerificationError(
                f"graph '{self.name}': value_info names tensors nobody defines: {sorted(stray)[:5]}"
            )


def captured_names(sub: Graph) -> set[str]:
    """Tensors a subgraph (a branch or loop body) reads from enclosing scopes."""
    local = {t.name for t in sub.inputs} | set(sub.initializers)
    local |= {o for n in sub.nodes for o in n.outputs}
    names: set[str] = set()
    for n in sub.nodes:
        names |= {i for i in n.inputs if i and i not in local}
        names |= _outer_names(n) - local
    names |= {t.name for t in sub.outputs if t.name not in local}
    return names


def _outer_names(node: Node) -> set[str]:
    """Names a node's subgraphs read from enclosing scopes."""
    return set().union(*(captured_names(sub) for sub in node.subgraphs()))


def outer_names(node: Node) -> set[str]:
    """Tensors that a control-flow node's subgraphs capture from outside."""
    return _outer_names(node)


def standalone_graph(sub: Graph, outer: Graph, name: str) -> Graph | None:
    """``sub`` as a graph of its own: what it captures from ``outer`` becomes its inputs (computed
    tensors) or initializers (constants), so a backend can compile a branch like any model.

    None when that is not possible as a plain graph: a body with inputs of its own (a loop body), an
    output that only passes a captured or constant tensor through, or a captured tensor ``outer``
    does not describe.
    """
    if sub.inputs:
        return None
    captured = sorted(captured_names(sub))
    if any(c not in outer.value_info for c in captured):
        return None
    produced = {o for n in sub.nodes for o in n.outputs if o}
    if any(t.name not in produced for t in sub.outputs):
        return None
    inits = dict(sub.initializers)
    inputs = []
    value_info = dict(sub.value_info)
    for c in captured:
        value_info[c] = outer.value_info[c]
        if c in outer.initializers:
            inits[c] = outer.initializers[c]
        else:
            inputs.append(outer.value_info[c])
    return Graph(name, tuple(inputs), sub.outputs, sub.nodes, inits, value_info, {**outer.opset, **sub.opset})
