"""The graph rewrites the CPU backend runs before lowering, in order.

Each pass returns the same graph object when it has nothing to do, and each
keeps the IR's invariants (``Graph.verify``, checked after every pass in the
tests).  The program and its executable both see the rewritten graph (host
steps name its nodes by index); every pass is deterministic, so a cached
program matches it too.
"""

from __future__ import annotations

from rammer.ir import Graph

from .cse import eliminate_common_subexpressions
from .merge_convs import merge_sibling_convs
from .relu_concat import sink_relu_into_concat

#: (name, pass).  CSE runs again last: a ReLU moved onto a concatenated part
#: often repeats one that a branch already applies to that part.
PASSES = (
    ("cse", eliminate_common_subexpressions),
    ("relu-concat", sink_relu_into_concat),
    ("merge-convs", merge_sibling_convs),
    ("cse-again", eliminate_common_subexpressions),
)


def prepare(graph: Graph, verify: bool = False) -> Graph:
    """``graph`` after every pass of :data:`PASSES` (verified after each when ``verify``)."""
    for _, step in PASSES:
        graph = step(graph)
        if verify:
            graph.verify()
    return graph
