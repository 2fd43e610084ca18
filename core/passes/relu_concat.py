"""Moving a ``Relu`` of a ``Concat`` onto the concatenated parts.

``Relu(Concat(x1, ..., xn)) == Concat(Relu(x1), ..., Relu(xn))`` exactly.  When
every reader of a concatenation is a ``Relu`` (NASNet: each cell's output is
read only through the ``Relu`` of the next two cells' input projections), the
rewrite turns one elementwise pass over the whole concatenation (up to 768 KiB
per cell, read back from L2/L3 after the branches wrote it) into ``Relu`` s of
the parts, which the elementwise fusion folds into each part's producer (the
branch's ``Add`` or last ``Conv``) and which still write straight into the
concatenation's memory.

A part that is read elsewhere too keeps its own value; its ``Relu`` is then a
separate (but no larger) pass.  Graph outputs, graph inputs and initializers
among the parts, and graphs with control-flow subgraphs, are left alone.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node, TensorInfo
from .names import fresh_name
from .pipeline import Pass


def sink_relu_into_concat(graph: Graph) -> Graph:
    """``graph`` with each all-``Relu``-read ``Concat`` rewritten (the same object when none is)."""
    if any(n.subgraphs() for n in graph.nodes):  # bodies may read outer tensors by name
        return graph
    outputs = {t.name for t in graph.outputs}
    producer = graph.producer
    consumers = graph.consumers
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    # concat node id -> (new nodes in its place); relu node ids to drop; renamed tensors
    at: dict[int, list[Node]] = {}
    dropped: set[int] = set()
    rename: dict[str, str] = {}
    value_info: dict[str, TensorInfo] = dict(graph.value_info)
    for node in graph.nodes:
        if node.op_type != "Concat" or node.domain or len(node.outputs) != 1:
            continue
        y = node.outputs[0]
        readers = consumers.get(y, ())
        if not readers or y in outputs or any(
                r.op_type != "Relu" or r.domain or r.inputs[0] != y or r.outputs[0] in outputs for r in readers):
            continue
        if any(not x or x not in producer for x in node.inputs):
            continue
        parts: dict[str, str] = {}
        new_nodes: list[Node] = []
        for x in node.inputs:
            if x in parts:
                continue
            name = fresh_name(f"{x}_relu", taken)
            parts[x] = name
            value_info[name] = replace(graph.value_info[x], name=name)
            new_nodes.append(Node("Relu", (x,), (name,), name=fresh_name(f"{node.name or y}_relu_part", node_names),
                                  attrs={}))
        keep = readers[0].outputs[0]
        new_nodes.append(replace(node, inputs=tuple(parts[x] for x in node.inputs), outputs=(keep,)))
        at[id(node)] = new_nodes
        for r in readers:
            dropped.add(id(r))
            if r.outputs[0] != keep:
                rename[r.outputs[0]] = keep
        value_info.pop(y, None)
    if not at:
        return graph
    for old in rename:
        value_info.pop(old, None)
    nodes: list[Node] = []
    for node in graph.nodes:
        if id(node) in dropped:
            continue
        if id(node) in at:
            nodes.extend(at[id(node)])
            continue
        if rename and any(i in rename for i in node.inputs):
            node = replace(node, inputs=tuple(rename.get(i, i) for i in node.inputs))
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes), value_info=value_info)


#: The pass, for pipelines.
RELU_CONCAT = Pass("relu-concat", sink_relu_into_concat,
                   "move a Relu that is a Concat's only reader onto the concatenated parts")

