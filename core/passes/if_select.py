"""An ``If`` on a run-time condition as both branches inlined and a ``Where`` per output.

A backend without host control flow (one static device program, as the GPU backends emit) cannot
skip a branch; it can compute both and select.  ONNX ops are pure, and every shape here is static,
so computing the branch not taken changes nothing but the time: for the branches this pass accepts
the result is exactly what the taken branch gives.  The pass inlines an ``If`` when

* each branch is a plain graph (no inputs of its own, no nested subgraphs, not ``Unreachable`` at
  the compiled shapes: that branch would be an error if taken, and computing it is impossible);
* the condition has one element, of a rank no larger than any output's (``Where`` broadcasts it);
* every output has the same shape and dtype in both branches and in the ``If`` node.

Branch tensors and constants are renamed apart (``<if name>.<branch>.<tensor>``), so two ``If``
nodes reading the same outer tensors never clash.  Others are left as they were (the backend then
refuses them by name).  Hardware-neutral; backends that run ``If`` on the host (``cpu``) do not
list this pass.
"""

from __future__ import annotations

import math
from typing import cast

from ..ir import Graph, Node, TensorInfo
from ..ops.control import RAMMER_DOMAIN
from .pipeline import Pass
from .relu_concat import fresh_name

__all__ = ["IF_TO_SELECT", "if_to_select"]

_BRANCHES = ("then_branch", "else_branch")


def _branch_ok(sub: object) -> bool:
    return (isinstance(sub, Graph) and not sub.inputs and bool(sub.outputs)
            and not any(n.subgraphs() for n in sub.nodes)
            and not any(n.op_type == "Unreachable" and n.domain == RAMMER_DOMAIN for n in sub.nodes))


def _inline(node: Node, graph: Graph, taken: set[str], inits: dict, value_info: dict,
            opset: dict) -> list[Node] | None:
    """The nodes replacing If ``node`` (both branches, then one Where per output), or None."""
    subs = cast("list[Graph]", [node.attrs.get(attr) for attr in _BRANCHES])  # each checked by _branch_ok
    if not all(_branch_ok(s) for s in subs) or not node.inputs or not node.inputs[0]:
        return None
    cond = graph.value_info.get(node.inputs[0])
    outs = cast("list[TensorInfo]", [graph.value_info.get(o) for o in node.outputs])  # None checked below
    if cond is None or math.prod(cond.shape) != 1 or any(o is None for o in outs):
        return None
    if any(len(cond.shape) > len(o.shape) for o in outs):
        return None
    for sub in subs:
        if len(sub.outputs) != len(outs):
            return None
        for got, want in zip(sub.outputs, outs):
            info = sub.value_info.get(got.name, got)
            if tuple(info.shape) != tuple(want.shape) or info.dtype != want.dtype:
                return None
        if any(o and o not in sub.value_info for n in sub.nodes for o in n.outputs):
            return None
    stem = node.name or node.outputs[0]
    new_nodes: list[Node] = []
    branch_outputs: list[list[str]] = []
    for attr, sub in zip(_BRANCHES, subs):
        local = set(sub.initializers) | {o for n in sub.nodes for o in n.outputs if o}
        rename = {t: fresh_name(f"{stem}.{attr.split('_')[0]}.{t}", taken) for t in sorted(local)}
        for t, value in sub.initializers.items():
            inits[rename[t]] = value
            info = sub.value_info.get(t)
            value_info[rename[t]] = TensorInfo(rename[t], info.dtype if info else str(value.dtype), tuple(value.shape))
        for n in sub.nodes:
            for o in n.outputs:
                if o:
                    info = sub.value_info[o]
                    value_info[rename[o]] = TensorInfo(rename[o], info.dtype, tuple(info.shape))
            new_nodes.append(Node(n.op_type, tuple(rename.get(i, i) if i else i for i in n.inputs),
                                  tuple(rename.get(o, o) if o else o for o in n.outputs),
                                  fresh_name(f"{stem}.{attr.split('_')[0]}.{n.name or n.op_type}", taken),
                                  n.domain, n.attrs))
        branch_outputs.append([rename.get(t.name, t.name) for t in sub.outputs])
        for domain, version in sub.opset.items():
            opset.setdefault(domain, version)
    for j, out in enumerate(node.outputs):
        new_nodes.append(Node("Where", (node.inputs[0], branch_outputs[0][j], branch_outputs[1][j]), (out,),
                              fresh_name(f"{stem}.select{j}", taken)))
    return new_nodes


def if_to_select(graph: Graph) -> Graph:
    """``graph`` with each ``If`` it can inline as both branches and a ``Where`` (the same object when none)."""
    if not any(n.op_type == "If" and n.domain == "" for n in graph.nodes):
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {n.name for n in graph.nodes}
    inits, value_info, opset = dict(graph.initializers), dict(graph.value_info), dict(graph.opset)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        inlined = _inline(node, graph, taken, inits, value_info, opset) \
            if node.op_type == "If" and node.domain == "" else None
        if inlined is None:
            nodes.append(node)
        else:
            nodes.extend(inlined)
            changed = True
    if not changed:
        return graph
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=value_info, opset=opset)


IF_TO_SELECT = Pass("if-to-select", if_to_select,
                    "an If on a run-time condition as both branches and a Where per output (no host control flow)")
