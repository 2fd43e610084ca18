"""``If`` as control flow on the host, and when that is not a fallback.

The condition of an ``If`` is known only at run time, and which branch runs decides which code
runs, so the host reads the condition and runs the taken branch (onnxruntime runs ``If`` the same
way).  ``runtime.py`` compiles a branch of :data:`.compiled.BRANCH_MIN_NODES` or more nodes as a
model of its own on first use.  Such an ``If`` is *control flow*, not a node the backend lacks a
kernel for: the report lists it under ``control_flow``, and it is no fallback (no warning, and
``strict=True`` accepts it).

It stays a fallback when some of it would still run op by op in numpy: a branch too small to be
worth compiling, a branch that cannot stand alone as a model, or a branch with fallbacks of its own
(found by classifying the branch's nodes as its compile would, nested Ifs by the same rule).
A branch the frontend found invalid at the compiled shapes (``Unreachable``) computes nothing:
taking it is an error, so it is no fallback either.
"""

from __future__ import annotations

from collections.abc import Callable

from rammer.ir import Graph, Node, standalone_graph
from rammer.ops.control import RAMMER_DOMAIN

from .compiled import BRANCH_MIN_NODES

#: A graph's nodes the cpu backend would leave to the reference implementation, with the reasons.
HostNodes = Callable[[Graph], "list[tuple[Node, str]]"]

BRANCHES = ("then_branch", "else_branch")


def is_if(node: Node) -> bool:
    """An If the runtime runs by compiling its taken branch (``runtime.CpuExecutable._run_host_step``)."""
    return node.op_type == "If" and node.domain == ""


def unreachable(sub: Graph) -> bool:
    """Whether ``sub`` is a branch that cannot run at the compiled shapes (``unreachable_branch``)."""
    return bool(sub.nodes) and all(n.op_type == "Unreachable" and n.domain == RAMMER_DOMAIN for n in sub.nodes)


def branch_fallbacks(node: Node, outer: Graph, host_nodes: HostNodes) -> list[str]:
    """What of If ``node``'s branches would run op by op in numpy ([] when both run compiled
    without a fallback), one line per branch or node."""
    found: list[str] = []
    for attr in BRANCHES:
        sub = node.attrs.get(attr)
        if not isinstance(sub, Graph):
            found.append(f"{attr} is not a graph")
            continue
        if unreachable(sub):
            continue
        if len(sub.nodes) < BRANCH_MIN_NODES:
            found.append(f"{attr} ({len(sub.nodes)} node(s), under {BRANCH_MIN_NODES}: compiling it would cost "
                         "more than it saves) runs op by op in numpy")
            continue
        graph = standalone_graph(sub, outer, f"{outer.name}.{node.name}.{attr}")
        if graph is None:
            found.append(f"{attr} cannot stand alone as a model and runs op by op in numpy")
            continue
        try:
            hosts = host_nodes(graph)
        except Exception as exc:  # a branch invalid at these shapes fails only if taken (tests/test_if_branches.py)
            found.append(f"{attr} could not be lowered ({type(exc).__name__}) and may run op by op in numpy")
            continue
        for inner, why in hosts:
            if is_if(inner) and not branch_fallbacks(inner, graph, host_nodes):
                continue
            found.append(f"{attr} leaves {inner.op_type} '{inner.name}' to the reference implementation ({why})")
    return found


def if_reason(node: Node, fallbacks: list[str]) -> str:
    """The report's reason for an If host step, given :func:`branch_fallbacks`."""
    sizes = "; ".join(f"{attr}: cannot run at the compiled shapes, taking it is an error" if unreachable(sub)
                      else f"{attr}: {len(sub.nodes)} nodes" for attr in BRANCHES
                      for sub in [node.attrs.get(attr)] if isinstance(sub, Graph))
    if not fallbacks:
        return ("control flow, not a fallback: the host reads the run-time condition and runs the taken branch as "
                f"a model of its own, compiled on first use, as onnxruntime runs If ({sizes})")
    return "control flow: the host picks the branch, but " + "; ".join(fallbacks)
