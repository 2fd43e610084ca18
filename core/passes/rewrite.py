"""What passes that replace nodes share when they rebuild the graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..ir import Graph, Node


def splice(graph: Graph, at: Mapping[int, Sequence[Node]], inits: dict, value_info: dict) -> Graph:
    """``graph`` with each node whose ``id`` is in ``at`` replaced by those nodes, with ``inits`` and
    ``value_info`` (the pass's copies, new tensors added) as its initializers and tensors, less the
    original initializers nothing reads any more (a weight now read only through its pieces): a
    graph input or output of that name still counts as read."""
    nodes = tuple(m for node in graph.nodes for m in at.get(id(node), (node,)))
    read = ({i for n in nodes for i in n.inputs} | {t.name for t in graph.outputs}
            | {t.name for t in graph.inputs})
    for name in [k for k in inits if k in graph.initializers and k not in read]:
        del inits[name]
        value_info.pop(name, None)
    return graph.replace(nodes=nodes, initializers=inits, value_info=value_info)


def sole_reader(graph: Graph) -> Callable[[str], Node | None]:
    """``reader(name)``: the one node that reads tensor ``name`` (a node reading it twice counts
    twice), None when it has several readers or none or is a graph output: what a rewrite that
    absorbs the tensor into one node may remove."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    outputs = {t.name for t in graph.outputs}

    def reader(name: str) -> Node | None:
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and name not in outputs else None

    return reader
