"""Lowering of rammer's ``TreeEnsembleScores`` (a block of trees, :data:`rammer.ops.ml.TREE_SCORES`) to the
tree-ensemble rKernel of :mod:`.kernels_tree`.

The op's tables are compile-time constants (the ML lowering writes them as initializers); the rTasks
cut the rows into blocks, each running its rows through all of the op's trees.  The trees of an
ensemble are split into a few such ops by the ML lowering (``rammer.ml.lower``), whose outputs it
sums (or takes the min / max of): rTasks over row blocks x tree blocks, then that reduction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rammer.ir import Node
from rammer.ops.ml import TREE_SCORES

from .kernels_tree import AGGREGATES
from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, split_range

#: What one level of one row's walk through one tree costs, as the cost model's loop flops and bytes:
#: a dependent load of the packed node, the feature read and a compare-and-branch, about 5 ns
#: (random-forest rows through 100 trees of depth 8-12 on this machine's cores).
STEP_FLOPS = 60.0
STEP_BYTES = 40.0
#: Walk steps below which splitting the rows further does not pay for an rTask row.
MIN_STEPS_PER_TASK = 2048


def _walk_steps(node: Node, lw: LowerContext) -> float:
    """Rows x trees x mean levels: the op's walk steps (its depth bound, an upper estimate)."""
    rows = lw.graph.value_info[node.inputs[0]].shape[0]
    trees = lw.graph.value_info[node.inputs[3]].shape[0]
    return float(rows * trees * max(int(node.attr("depth", 1)), 1))


def tree_reason(lw: LowerContext, node: Node) -> str | None:
    x = lw.graph.value_info[node.inputs[0]]
    if x.dtype != "float32" or lw.graph.value_info[node.inputs[2]].dtype != "float32":
        return f"{TREE_SCORES} with {x.dtype} inputs (the cpu kernel compares float32)"
    if any(name not in lw.graph.initializers for name in node.inputs[1:5]):
        return f"{TREE_SCORES} tables computed at run time (the cpu kernel needs them as constants)"
    if str(node.attr("aggregate", "SUM")) not in AGGREGATES:
        return f"aggregate {node.attr('aggregate')!r}"
    return None


def lower_tree_scores(lw: LowerContext, node: Node) -> None:
    x = lw.dense(node.inputs[0])
    nodes, thr, roots, weights = (lw.view(name) for name in node.inputs[1:5])
    out = lw.views[node.outputs[0]]
    rows, features = x.shape
    n_trees = roots.shape[0]
    n_out = weights.shape[1]
    agg = AGGREGATES[str(node.attr("aggregate", "SUM"))]
    steps = _walk_steps(node, lw)
    min_rows = max(1, int(np.ceil(MIN_STEPS_PER_TASK * rows / max(steps, 1.0))))

    def partition(n: int) -> list:
        n = max(1, min(n, rows // min_rows or 1))
        return [split_range(rows, n, i) for i in range(n)]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        desc = ctx.side.add_ints([ctx.locate(x), features, ctx.locate(nodes), ctx.locate(thr), ctx.locate(roots),
                                  n_trees, ctx.locate(weights), n_out, ctx.locate(out), agg,
                                  max(int(node.attr("depth", 0)), 0)])
        return [("k_tree", [desc, r0, r1]) for r0, r1 in parts]

    lw.add_op(CpuOp(node.name or TREE_SCORES, "tree", (node,), (x.buffer, nodes.buffer, thr.buffer, roots.buffer,
                                                                  weights.buffer), (out.buffer,),
                    STEP_FLOPS * steps, STEP_BYTES * steps, partition, emit))


LOWERINGS: dict[str, Callable[[LowerContext, Node], None]] = {TREE_SCORES: lower_tree_scores}
REASONS: dict[str, Callable[[LowerContext, Node], str | None]] = {TREE_SCORES: tree_reason}
