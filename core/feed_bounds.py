"""Which integer inputs index a table, and how large that table is.

Random feeds (``rammer run``, ``rammer bench``) draw integers from a small range
by default; an input whose values a Gather reads as indices, such as a BERT
model's token ids into its vocabulary or its token types into a 2-row table,
must be drawn within the gathered axis, or the run fails on an index out of
range.  The bound is found from the graph, following the input through ops that
pass its values on unchanged (Cast, Reshape, Unsqueeze...), never from its name.
"""

from __future__ import annotations

from .ir import Graph

#: Ops whose output holds only values of their first input (reshaped, selected, repeated or cast
#: between integer types): a bound on the output's values is a bound on that input's values.
_SAME_VALUES = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Transpose",
                          "Expand", "Slice", "Tile", "Split", "Gather", "GatherElements", "Concat"})

#: Index operands: op -> the input position of its indices.
_INDEX_INPUT = {"Gather": 1, "GatherElements": 1, "GatherND": 1}

_INT_KINDS = "iu"


def _index_bound(graph: Graph, node_index: int, position: int) -> int | None:
    """The exclusive upper bound on the values of input ``position`` of node ``node_index`` when it
    is an index operand (the size of the gathered axis), else None."""
    node = graph.nodes[node_index]
    if node.domain not in ("", "ai.onnx") or _INDEX_INPUT.get(node.op_type) != position:
        return None
    data = graph.value_info.get(node.inputs[0])
    if data is None or not data.shape:
        return None
    if node.op_type == "GatherND":
        indices = graph.value_info.get(node.inputs[1])
        b = int(node.attr("batch_dims", 0))
        k = indices.shape[-1] if indices is not None and indices.shape else 0
        dims = data.shape[b:b + k]
        return min(dims) if dims else None
    axis = int(node.attr("axis", 0))
    if not -len(data.shape) <= axis < len(data.shape):
        return None
    return int(data.shape[axis])


def _passes_values(graph: Graph, node_index: int, position: int) -> bool:
    """Whether node ``node_index`` hands the values of its input ``position`` on unchanged."""
    node = graph.nodes[node_index]
    if node.domain not in ("", "ai.onnx") or node.op_type not in _SAME_VALUES:
        return False
    if node.op_type == "Concat":
        return True
    if position != 0:
        return False  # shapes, axes, starts... and the indices of a Gather are not passed on
    if node.op_type == "Cast":
        out = graph.value_info.get(node.outputs[0])
        return out is not None and out.np_dtype.kind in _INT_KINDS
    return True


def index_bounds(graph: Graph) -> dict[str, int]:
    """Graph input name -> the exclusive upper bound its values must keep below, for every integer
    input that an index operand (Gather, GatherElements, GatherND) reads, directly or through ops
    that pass values on unchanged; the smallest bound where several tables read it."""
    readers: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.nodes):
        for p, name in enumerate(node.inputs):
            if name:
                readers.setdefault(name, []).append((i, p))
    bounds: dict[str, int] = {}
    for t in graph.inputs:
        if t.np_dtype.kind not in _INT_KINDS:
            continue
        best: int | None = None
        seen: set[str] = set()
        frontier = [t.name]
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            for i, p in readers.get(name, ()):
                bound = _index_bound(graph, i, p)
                if bound is not None:
                    best = bound if best is None else min(best, bound)
                elif _passes_values(graph, i, p):
                    frontier.extend(o for o in graph.nodes[i].outputs if o)
        if best is not None:
            bounds[t.name] = best
    return bounds

