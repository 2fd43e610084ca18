"""Common-subexpression elimination before lowering.

Two nodes with the same operator, attributes and inputs compute the same
tensors, so the later one is dropped and its readers read the earlier one's
outputs.  NASNet applies ``Relu`` to every cell's output twice (as the next
cell's "current" input and the one after's "previous" input): 18 duplicate
passes over up to 768 KiB each.

Only operators without randomness and without subgraphs take part, with
attributes that compare by value; a node that writes a graph output is kept.
A graph with control-flow subgraphs is left alone (their bodies may read
outer tensors by name).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..ir import Graph, Node
from .pipeline import Pass

#: Operators whose results are not a function of their inputs and attributes.
_IMPURE = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                     "Multinomial", "Dropout"})


def _key(node: Node) -> tuple | None:
    if node.op_type in _IMPURE or not node.outputs:
        return None
    attrs = plain_attrs(node)
    if attrs is None:
        return None
    return node.domain, node.op_type, node.inputs, attrs, len(node.outputs)


def plain_attrs(node: Node) -> tuple | None:
    """The node's attributes as sorted (name, plain value) pairs, comparable and hashable; None
    when one is not a plain value (a tensor, a subgraph)."""
    attrs = []
    for name in sorted(node.attrs):
        value = _plain(node.attrs[name])
        if value is None:
            return None
        attrs.append((name, value))
    return tuple(attrs)


def _plain(value: Any) -> Any:
    """``value`` as a hashable plain value, or None for anything else (tensors, graphs)."""
    if isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return None if any(v is None for v in items) else ("seq", tuple(items))
    return None


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """``graph`` without repeated computations (the same object when there are none)."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    outputs = {t.name for t in graph.outputs}
    first: dict[tuple, Node] = {}
    rename: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        if rename and any(i in rename for i in node.inputs):
            node = replace(node, inputs=tuple(rename.get(i, i) for i in node.inputs))
        key = _key(node)
        kept = first.get(key) if key is not None else None
        if kept is not None and not outputs.intersection(node.outputs) \
                and all(bool(a) == bool(b) for a, b in zip(node.outputs, kept.outputs)):
            rename.update({a: b for a, b in zip(node.outputs, kept.outputs) if a})
            continue
        if key is not None:
            first.setdefault(key, node)
        nodes.append(node)
    if not rename:
        return graph
    value_info = {k: v for k, v in graph.value_info.items() if k not in rename}
    return graph.replace(nodes=tuple(nodes), value_info=value_info)


#: The pass, for pipelines.
CSE = Pass("cse", eliminate_common_subexpressions, "compute repeated nodes (same op, attributes, inputs) once")
