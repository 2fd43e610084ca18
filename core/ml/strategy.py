"""Which tree strategy to use: a measured table, looked up by depth, batch and device kind.

The table is data (:data:`TABLE`), written from ``ci/bench_ml.py`` runs; each
row covers trees up to ``max_depth`` and batches up to ``max_batch`` on one
device kind, and the first matching row wins.  ``tree_strategy=`` overrides it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..ops.ml import TREE_SCORES
from .trees import STRATEGIES


class Row(NamedTuple):
    device: str
    max_depth: int
    max_batch: int
    strategy: str


#: Measured on the 2-core development VM: 100-tree forests on 28 features, each compiled
#: op of the cpu program timed alone and summed (the program's work; wall-clock runs on the
#: shared VM were too noisy to rank strategies), ms, gemm / tree_traversal / perfect:
#:   depth 2:  batch 1 0.055/0.079/0.042   batch 64 0.087/0.149/0.091   batch 1000 0.355/0.886/0.414
#:   depth 3:  batch 1 0.058/0.124/0.043   batch 64 0.122/0.236/0.123   batch 1000 0.735/1.464/0.645
#:   depth 4:  batch 1 0.066/0.168/0.045   batch 64 0.213/0.322/0.182   batch 1000 1.344/2.038/1.090
#:   depth 6:  batch 1 0.125/0.255/0.109   batch 64 0.845/0.491/0.315   batch 1000 9.745/3.161/1.969
#:   depth 8:  batch 1 3.179/0.346/0.172   batch 64 6.392/0.674/0.445   batch 1000 81.17/4.373/2.846
#:   depth 12: batch 1 -/0.531/0.299       batch 64 -/1.015/0.714       batch 1000 -/6.376/4.401
#: Perfect tree traversal is refused past depth 14 (2**depth table rows per tree).
TABLE: tuple[Row, ...] = (
    Row("cpu", 2, 1, "perfect_tree_traversal"),
    Row("cpu", 2, 4096, "gemm"),
    Row("cpu", 14, 1_000_000_000, "perfect_tree_traversal"),
    Row("cpu", 1_000_000, 1_000_000_000, "tree_traversal"),
)

#: Up to this many rows per run, one vEU: waking a second worker costs more than it saves
#: (100 trees of depth 8: 0.04 ms on 1 vEU vs 3.5 ms on 2 at batch 1, 0.51 vs 0.72 at 64).
SINGLE_VEU_MAX_BATCH = 64


def choose(depth: int, batch: int, device: str = "cpu") -> str:
    """The strategy for trees of ``depth`` at ``batch`` rows on a ``device`` kind."""
    # A device kind the table has not measured uses the rows of the first kind it has.
    rows = [r for r in TABLE if r.device == device] or [r for r in TABLE if r.device == TABLE[0].device]
    for r in rows:
        if depth <= r.max_depth and batch <= r.max_batch:
            return r.strategy
    return "tree_traversal"


#: ``tree_strategy="off"`` keeps the ai.onnx.ml nodes (they run through the op registry).
OFF = "off"
#: ``tree_strategy="tree_kernel"``: each block of trees becomes one ``TreeEnsembleScores`` op
#: (:data:`rammer.ops.ml.TREE_SCORES`), which the cpu backend runs as one rKernel walking rows
#: through the trees (``backends/cpu/kernels_tree.py``) instead of a program of Gathers and
#: elementwise ops per level.  It is chosen only for a backend that compiles that op (its
#: ``capabilities.ops`` names it, :func:`compiles_tree_kernel`); others get tensor-op strategies.
KERNEL = "tree_kernel"


def compiles_tree_kernel(capabilities: Any) -> bool:
    """Whether a backend with these :class:`~rammer.backend.Capabilities` compiles the tree
    rKernel's op itself (a backend that runs every op through the registry does not count: the
    numpy walk is no faster there than the tensor ops)."""
    ops = capabilities.ops
    return ops is not None and TREE_SCORES in ops


def use_kernel(tree_kernel: bool, threshold_dtype: str) -> bool:
    """Whether trees lower to the tree rKernel op when no strategy is forced, on a backend that
    compiles it (``tree_kernel``, :func:`compiles_tree_kernel`).

    On cpu the kernel's cost per row and tree is the walk itself (one node load, one feature read,
    one compare per level), while each tensor-op strategy pays that work plus about 1.5 us of
    dispatch per op per level and [trees, rows] intermediates: 10-15 task rows instead of 29-212 for
    the corpus's forests, 1.6-2.5x less time on one vEU for random-forest(-rows8) and
    gradient-boosting (in one process, alternating); in ``ci/bench_ml.py``'s grid (depth 4-12,
    1-1,000 rows, strategies timed one after the other on a loaded machine) it was the fastest in 5
    of 9 cells and 2-21% behind the fastest in the others, all sub-millisecond runs of 1-8 rows
    (docs/benchmarks.md, "Small programs on one vEU and a tree-ensemble rKernel").  The kernel
    compares float32 only."""
    return tree_kernel and threshold_dtype == "float32"


def check_strategy(name: str | None) -> str | None:
    """The forced strategy, None for the table's choice; an error for an unknown name."""
    if name in (None, "", "auto"):
        return None
    if name not in STRATEGIES and name not in (OFF, KERNEL):
        raise ValueError(f"tree strategy {name!r} is not one of auto, off, {KERNEL}, {', '.join(STRATEGIES)}")
    return name
