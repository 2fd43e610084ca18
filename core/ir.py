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

Equality is structural (:func:`graph_differences`): two graphs are equal when
their inputs and outputs (names, dtypes, shapes), nodes in order (op type,
domain, attributes by value -- arrays by dtype, shape and contents, subgraphs
recursively -- inputs and outputs), initializers (by value), the dtype and
shape of every tensor, and opsets match.  Graph names and node names are
labels and do not count.  ``==`` compares internal tensor names too;
``Graph.structurally_equal(other, rename=True)`` accepts any consistent
renaming of internal tensors (node outputs that are not graph outputs, and
initializers), which is what a Before/Expected test of a pass wants, since
passes derive fresh names.  Hashes stay by identity.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

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


@dataclass(frozen=True, eq=False)
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

    def __eq__(self, other: object) -> bool:
        """Field by field, attributes by value (arrays by contents, subgraphs structurally)."""
        if not isinstance(other, Node):
            return NotImplemented
        return (self.op_type, self.inputs, self.outputs, self.name, self.domain) == \
            (other.op_type, other.inputs, other.outputs, other.name, other.domain) \
            and _attrs_differ(self.attrs, other.attrs) is None

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

    # -- structural equality ---------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return self is other or not graph_differences(self, other)

    __hash__ = object.__hash__  # by identity: graphs are used as cache keys while equal ones may differ in names

    def structurally_equal(self, other: Graph, rename: bool = False) -> bool:
        """Whether ``other`` is this graph (see the module's notes); with ``rename``, up to a
        consistent renaming of internal tensors."""
        return not graph_differences(self, other, rename)

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


# -- structural equality --------------------------------------------------------------------------
def _values_differ(a: Any, b: Any, where: str) -> str | None:
    """Why attribute or initializer values ``a`` and ``b`` differ, or None when equal by value."""
    if isinstance(a, Graph) or isinstance(b, Graph):
        if not (isinstance(a, Graph) and isinstance(b, Graph)):
            return f"{where}: a subgraph against {type(b if isinstance(a, Graph) else a).__name__}"
        diffs = graph_differences(a, b)
        return f"{where}: subgraphs differ: {diffs[0]}" if diffs else None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if dtype_name(x.dtype) != dtype_name(y.dtype) or x.shape != y.shape:
            return f"{where}: {dtype_name(x.dtype)}{list(x.shape)} against {dtype_name(y.dtype)}{list(y.shape)}"
        nan_ok = x.dtype.kind in "fc"
        if not np.array_equal(x, y, equal_nan=nan_ok):
            bad = int(np.sum(~((x == y) | (np.isnan(x) & np.isnan(y)) if nan_ok else x == y)))
            return f"{where}: {bad} of {x.size} values differ"
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            why = _values_differ(x, y, f"{where}[{i}]")
            if why:
                return why
        return None
    if _kind(a) != _kind(b) or (a != b and not (_kind(a) == "float" and math.isnan(a) and math.isnan(b))):
        return f"{where}: {a!r} against {b!r}"
    return None


def _kind(value: Any) -> str:
    """What kind of scalar an attribute holds: a numpy integer counts as an int (passes compute
    sizes with numpy), but an int is not a float nor a bool an int (ONNX types its attributes)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    return type(value).__name__


def _attrs_differ(a: Mapping[str, Any], b: Mapping[str, Any], where: str = "attrs") -> str | None:
    if set(a) != set(b):
        return f"{where}: attributes {sorted(a)} against {sorted(b)}"
    for key in sorted(a):
        why = _values_differ(a[key], b[key], f"{where} '{key}'")
        if why:
            return why
    return None


class _Names:
    """The correspondence of tensor names of graph ``a`` to those of graph ``b`` found so far."""

    def __init__(self, outer: Mapping[str, str] | None = None):
        self.a_to_b: dict[str, str] = dict(outer or {})
        self.bound_b: set[str] = set(self.a_to_b.values())

    def bind(self, x: str, y: str) -> str | None:
        if x in self.a_to_b:
            return None if self.a_to_b[x] == y else f"'{x}' is '{self.a_to_b[x]}' there, not '{y}'"
        if y in self.bound_b:
            return f"'{y}' already stands for another tensor"
        self.a_to_b[x] = y
        self.bound_b.add(y)
        return None


def graph_differences(a: Graph, b: Graph, rename: bool = False, limit: int = 10,
                      _outer: Mapping[str, str] | None = None) -> list[str]:
    """What differs between ``a`` and ``b`` structurally (empty when nothing does), at most
    ``limit`` lines, each naming the node or tensor.  With ``rename``, internal tensors (node
    outputs other than graph outputs, and initializers) may carry other names in ``b`` as long
    as the renaming is consistent; graph inputs and outputs keep theirs."""
    diffs: list[str] = []
    names = _Names(_outer)
    fixed_a = {t.name for t in a.inputs} | {t.name for t in a.outputs}

    def note(line: str | None) -> None:
        if line and len(diffs) < limit:
            diffs.append(line)

    def tensor_infos(what: str, xs: tuple[TensorInfo, ...], ys: tuple[TensorInfo, ...]) -> None:
        if [t.name for t in xs] != [t.name for t in ys]:
            note(f"graph {what}s {[t.name for t in xs]} against {[t.name for t in ys]}")
            return
        for x, y in zip(xs, ys):
            if (x.dtype, x.shape) != (y.dtype, y.shape):
                note(f"graph {what} '{x.name}': {x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}")
            names.bind(x.name, y.name)

    tensor_infos("input", a.inputs, b.inputs)
    if not rename:
        tensor_infos("output", a.outputs, b.outputs)
    elif [t.name for t in a.outputs] != [t.name for t in b.outputs]:
        note(f"graph outputs {[t.name for t in a.outputs]} against {[t.name for t in b.outputs]}")

    def use(x: str, y: str, where: str) -> None:
        """Input ``x`` of ``a`` read where ``b`` reads ``y``."""
        if not x or not y:
            if x != y:
                note(f"{where}: input '{x}' against '{y}' (one is omitted)")
            return
        if x not in names.a_to_b and rename and x not in fixed_a and x in a.initializers and y in b.initializers:
            note(_bind_or_why(names, x, y, where))
            return
        if x not in names.a_to_b and x != y:
            note(f"{where}: reads '{x}' against '{y}'")
            return
        note(_bind_or_why(names, x, y, where))

    if len(a.nodes) != len(b.nodes):
        note(f"{len(a.nodes)} nodes against {len(b.nodes)}: ops {[n.op_type for n in a.nodes]} against "
             f"{[n.op_type for n in b.nodes]}")
    for i, (n, m) in enumerate(zip(a.nodes, b.nodes)):
        where = f"node #{i} {n.label}"
        if (n.op_type, n.domain) != (m.op_type, m.domain):
            note(f"{where}: against {m.label}{' in domain ' + repr(m.domain) if m.domain != n.domain else ''}")
            continue
        if len(n.inputs) != len(m.inputs) or len(n.outputs) != len(m.outputs):
            note(f"{where}: inputs {list(n.inputs)} -> {list(n.outputs)} against {list(m.inputs)} -> {list(m.outputs)}")
            continue
        for x, y in zip(n.inputs, m.inputs):
            use(x, y, where)
        for key in sorted(set(n.attrs) | set(m.attrs)):
            if key not in n.attrs or key not in m.attrs:
                note(f"{where}: attribute '{key}' only in the {'first' if key in n.attrs else 'second'} graph")
            elif isinstance(n.attrs[key], Graph) and isinstance(m.attrs[key], Graph):
                sub = graph_differences(n.attrs[key], m.attrs[key], rename, limit, names.a_to_b)
                note(f"{where}: subgraph '{key}': {sub[0]}" if sub else None)
            else:
                note(_values_differ(n.attrs[key], m.attrs[key], f"{where}: attribute '{key}'"))
        for x, y in zip(n.outputs, m.outputs):
            if not x or not y or not rename or x in fixed_a:
                if x != y:
                    note(f"{where}: writes '{x}' against '{y}'")
                    continue
            note(_bind_or_why(names, x, y, where))
    if rename:
        for t in a.outputs:
            note(_bind_or_why(names, t.name, t.name, f"graph output '{t.name}'"))
        tensor_infos("output", a.outputs, b.outputs)

    # initializers: those read were paired above; the rest must keep their names
    for x in sorted(a.initializers):
        y = names.a_to_b.get(x, x)
        if y not in b.initializers:
            note(f"initializer '{x}' is not in the second graph" + (f" (as '{y}')" if y != x else ""))
            continue
        names.bind(x, y)
        note(_values_differ(a.initializers[x], b.initializers[y], f"initializer '{x}'"))
    paired_b = {names.a_to_b.get(x, x) for x in a.initializers}
    for y in sorted(set(b.initializers) - paired_b):
        note(f"initializer '{y}' is only in the second graph")
    for x, y in sorted(names.a_to_b.items()):
        ix, iy = a.value_info.get(x), b.value_info.get(y)
        if ix is not None and iy is not None and (ix.dtype, ix.shape) != (iy.dtype, iy.shape):
            note(f"tensor '{x}': {ix.dtype}{list(ix.shape)} against {iy.dtype}{list(iy.shape)}")
    extra = sorted(set(a.value_info) - set(names.a_to_b))
    if extra or set(b.value_info) - names.bound_b:
        note(f"value_info describes tensors no node, input or initializer pairs: "
             f"{extra[:5]} against {sorted(set(b.value_info) - names.bound_b)[:5]}")
    if dict(a.opset) != dict(b.opset):
        note(f"opset {dict(a.opset)} against {dict(b.opset)}")
    return diffs


def _bind_or_why(names: _Names, x: str, y: str, where: str) -> str | None:
    why = names.bind(x, y)
    return f"{where}: {why}" if why else None


def graph_text(graph: Graph) -> str:
    """One line per input, initializer, node and output: for diffs in test failures."""
    def attr_text(value: Any) -> str:
        if isinstance(value, np.ndarray):
            return f"array({dtype_name(value.dtype)}{list(value.shape)})"
        if isinstance(value, Graph):
            return f"graph({graph_text(value)!r})"
        return repr(value)

    lines = [f"input {t}" for t in graph.inputs]
    for name in sorted(graph.initializers):
        v = np.asarray(graph.initializers[name])
        shown = v.tolist() if v.size <= 8 else f"[{v.size} values]"
        lines.append(f"init {name}: {dtype_name(v.dtype)}{list(v.shape)} = {shown}")
    for n in graph.nodes:
        attrs = ", ".join(f"{k}={attr_text(v)}" for k, v in sorted(n.attrs.items()))
        op = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
        lines.append(f"{', '.join(n.outputs)} = {op}[{attrs}]({', '.join(n.inputs)})")
    lines += [f"output {t}" for t in graph.outputs]
    return "\n".join(lines)


def assert_graphs_equal(actual: Graph, expected: Graph, rename: bool = True) -> None:
    """Raise ``AssertionError`` with the differences and a line diff of both graphs unless
    ``actual`` structurally equals ``expected`` (by default up to renaming internal tensors)."""
    diffs = graph_differences(actual, expected, rename)
    if diffs:
        text = difflib.unified_diff(graph_text(actual).splitlines(), graph_text(expected).splitlines(),
                                    "actual", "expected", lineterm="")
        raise AssertionError("graphs differ:\n  " + "\n  ".join(diffs) + "\n" + "\n".join(text))
