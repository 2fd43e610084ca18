"""An ``If`` on a run-time condition as both branches inlined and a ``Where`` per output, or as its
one reachable branch and a guard.

A backend without host control flow (one static device program, as the GPU backends emit) cannot
skip a branch; it can compute both and select.  ONNX ops are pure, and every shape here is static,
so computing the branch not taken changes nothing but the time: for the branches this pass accepts
the result is exactly what the taken branch gives.  The pass inlines an ``If`` when

* each branch is a plain graph (no inputs of its own, no nested subgraphs, not ``Unreachable`` at
  the compiled shapes: that branch would be an error if taken, and computing it is impossible);
* the condition has one element, of a rank no larger than any output's (``Where`` broadcasts it);
* every output has the same shape and dtype in both branches and in the ``If`` node.

When one branch is ``Unreachable`` (the frontend found it invalid at the compiled shapes: an
exporter's path for other input sizes, such as silero VAD's 8 kHz branch) and the other is a plain
graph as above, the reachable branch alone is inlined, its outputs written to the ``If``'s, and a
:data:`~rammer.ops.branch_guard.OP_TYPE` node on the condition stands for the other branch: its
output is the condition, which the backend checks after the run (the reference implementation
raises at once), so taking the unreachable branch is the error it always was, never a result of the
wrong branch.  The condition need not depend on the inputs alone: it is computed with the program.

Branch tensors and constants are renamed apart (``<if name>.<branch>.<tensor>``), so two ``If``
nodes reading the same outer tensors never clash.  Others are left as they were (the backend then
refuses them by name).  Hardware-neutral; backends that run ``If`` on the host (``cpu``) do not
list this pass.
"""

from __future__ import annotations

import math
from typing import cast

from ..ir import Graph, Node, TensorInfo
from ..ops.branch_guard import OP_TYPE as GUARD_OP
from ..ops.control import RAMMER_DOMAIN
from .pipeline import Pass
from .relu_concat import fresh_name

__all__ = ["IF_TO_SELECT", "if_to_select"]

_BRANCHES = ("then_branch", "else_branch")


def _unreachable(sub: object) -> bool:
    """Whether ``sub`` is a branch the frontend found invalid at the compiled shapes (only
    ``Unreachable`` nodes: :func:`rammer.ops.control.unreachable_branch`)."""
    return (isinstance(sub, Graph) and bool(sub.nodes)
            and all(n.op_type == "Unreachable" and n.domain == RAMMER_DOMAIN for n in sub.nodes))


def _branch_ok(sub: object) -> bool:
    return (isinstance(sub, Graph) and not sub.inputs and bool(sub.outputs)
            and not any(n.subgraphs() for n in sub.nodes)
            and not any(n.op_type == "Unreachable" and n.domain == RAMMER_DOMAIN for n in sub.nodes))


def _outputs_match(sub: Graph, outs: list[TensorInfo]) -> bool:
    """Whether ``sub``'s outputs have the ``If`` outputs' shapes and dtypes, and every tensor it computes
    has its type (the inlined nodes need them)."""
    if len(sub.outputs) != len(outs):
        return False
    for got, want in zip(sub.outputs, outs):
        info = sub.value_info.get(got.name, got)
        if tuple(info.shape) != tuple(want.shape) or info.dtype != want.dtype:
            return False
    return not any(o and o not in sub.value_info for n in sub.nodes for o in n.outputs)


def _inline_branch(sub: Graph, prefix: str, taken: set[str], inits: dict, value_info: dict, opset: dict,
                   into: dict[str, str]) -> tuple[list[Node], list[str]]:
    """``sub``'s nodes renamed apart under ``prefix`` (its constants into ``inits``), and the names its
    outputs have then.  ``into`` renames some of its tensors to given names instead (an output written
    straight to the ``If``'s output)."""
    local = set(sub.initializers) | {o for n in sub.nodes for o in n.outputs if o}
    rename = {t: into.get(t) or fresh_name(f"{prefix}.{t}", taken) for t in sorted(local)}
    for t, value in sub.initializers.items():
        inits[rename[t]] = value
        info = sub.value_info.get(t)
        value_info[rename[t]] = TensorInfo(rename[t], info.dtype if info else str(value.dtype), tuple(value.shape))
    nodes: list[Node] = []
    for n in sub.nodes:
        for o in n.outputs:
            if o:
                info = sub.value_info[o]
                value_info[rename[o]] = TensorInfo(rename[o], info.dtype, tuple(info.shape))
        nodes.append(Node(n.op_type, tuple(rename.get(i, i) if i else i for i in n.inputs),
                          tuple(rename.get(o, o) if o else o for o in n.outputs),
                          fresh_name(f"{prefix}.{n.name or n.op_type}", taken), n.domain, n.attrs))
    for domain, version in sub.opset.items():
        opset.setdefault(domain, version)
    return nodes, [rename.get(t.name, t.name) for t in sub.outputs]


def _inline_reachable(node: Node, live: int, subs: list[Graph], cond: TensorInfo, taken: set[str], inits: dict,
                      value_info: dict, opset: dict) -> list[Node]:
    """The reachable branch ``subs[live]`` inlined with its outputs written to ``node``'s, and the
    guard that makes taking the other branch at run time its error."""
    sub, dead = subs[live], subs[1 - live]
    stem = node.name or node.outputs[0]
    produced = {o for n in sub.nodes for o in n.outputs if o}
    names = [t.name for t in sub.outputs]
    # A computed branch output named once is written straight to the If's output; a constant, an
    # outer tensor or one output twice gets an Identity.
    into = {t: out for t, out in zip(names, node.outputs) if t in produced and names.count(t) == 1}
    nodes, results = _inline_branch(sub, f"{stem}.{_BRANCHES[live].split('_')[0]}", taken, inits, value_info,
                                    opset, into)
    for result, out in zip(results, node.outputs):
        if result != out:
            nodes.append(Node("Identity", (result,), (out,), fresh_name(f"{stem}.out", taken)))
    checked = fresh_name(f"{stem}.checked_condition", taken)
    value_info[checked] = TensorInfo(checked, cond.dtype, tuple(cond.shape))
    message = str(dead.nodes[0].attrs.get("message", f"{node.label}: the {_BRANCHES[1 - live]} cannot run"))
    guard = Node(GUARD_OP, (node.inputs[0],), (checked,), fresh_name(f"{stem}.guard", taken), RAMMER_DOMAIN,
                 {"expected": int(live == 0), "message": message})
    opset.setdefault(RAMMER_DOMAIN, 1)
    return [guard, *nodes]


def _inline(node: Node, graph: Graph, taken: set[str], inits: dict, value_info: dict,
            opset: dict) -> list[Node] | None:
    """The nodes replacing If ``node`` (both branches, then one Where per output; or the one reachable
    branch and a guard), or None."""
    subs = cast("list[Graph]", [node.attrs.get(attr) for attr in _BRANCHES])  # each checked below
    if not node.inputs or not node.inputs[0]:
        return None
    dead = [_unreachable(s) for s in subs]
    live = [k for k in range(2) if not dead[k]]
    if len(live) != (1 if any(dead) else 2) or not all(_branch_ok(subs[k]) for k in live):
        return None
    cond = graph.value_info.get(node.inputs[0])
    outs = cast("list[TensorInfo]", [graph.value_info.get(o) for o in node.outputs])  # None checked below
    if cond is None or math.prod(cond.shape) != 1 or any(o is None for o in outs):
        return None
    if not all(_outputs_match(subs[k], outs) for k in live):
        return None
    if len(live) == 1:
        return _inline_reachable(node, live[0], subs, cond, taken, inits, value_info, opset)
    if any(len(cond.shape) > len(o.shape) for o in outs):
        return None
    stem = node.name or node.outputs[0]
    new_nodes: list[Node] = []
    branch_outputs: list[list[str]] = []
    for attr, sub in zip(_BRANCHES, subs):
        nodes, results = _inline_branch(sub, f"{stem}.{attr.split('_')[0]}", taken, inits, value_info, opset, {})
        new_nodes += nodes
        branch_outputs.append(results)
    for j, out in enumerate(node.outputs):
        new_nodes.append(Node("Where", (node.inputs[0], branch_outputs[0][j], branch_outputs[1][j]), (out,),
                              fresh_name(f"{stem}.select{j}", taken)))
    return new_nodes


def if_to_select(graph: Graph) -> Graph:
    """``graph`` with each ``If`` it can inline as both branches and a ``Where``, or as its one reachable
    branch and a guard (the same object when none)."""
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
                    "an If on a run-time condition as both branches and a Where per output, or its one reachable "
                    "branch and a guard on the condition (no host control flow)")
