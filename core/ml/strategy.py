"""Which tree strategy to use: a measured table, looked up by depth, batch and device kind.

The table is data (:data:`TABLE`), written from ``ci/bench_ml.py`` runs; each
row covers trees up to ``max_depth`` and batches up to ``max_batch`` on one
device kind, and the first matching row wins.  ``tree_strategy=`` overrides it.
"""

from __future__ import annotations

from typing import NamedTuple

from .trees import STRATEGIES


class Row(NamedTuple):
    device: str
    max_depth: int
    max_batch: int
    strategy: str


#: Measured on the 2-core development VM (100 trees of depth 2-12 on 28 features; 1 vEU up to
#: 64 rows, 2 above; medians of 7 runs on a shared, noisy machine), ms per run:
#:   batch 1:     depth 2-8 perfect_tree_traversal ~ tree_traversal (0.02-0.06) < gemm (0.05-4.1);
#:                depth 12 tree_traversal 0.08 < perfect 0.15
#:   batch 64:    depth 2 gemm 0.07 < perfect 0.10 < traversal 0.15; depth 3-12 perfect
#:                (depth 8: perfect 0.50, traversal 0.91, gemm 10.8)
#:   batch 1000:  depth 2 gemm 3.5 ~ perfect 3.6; depth 3-12 perfect (depth 8: 11.6 vs
#:                traversal 15.6 vs gemm 140; depth 12: 13.8 vs traversal 25.2)
TABLE: tuple[Row, ...] = (
    Row("cpu", 8, 1, "perfect_tree_traversal"),
    Row("cpu", 1_000_000, 1, "tree_traversal"),
    Row("cpu", 2, 64, "gemm"),
    Row("cpu", 14, 1_000_000_000, "perfect_tree_traversal"),
    Row("cpu", 1_000_000, 1_000_000_000, "tree_traversal"),
)

#: Up to this many rows per run, one vEU: waking a second worker costs more than it saves
#: (100 trees of depth 8: 0.04 ms on 1 vEU vs 3.5 ms on 2 at batch 1, 0.51 vs 0.72 at 64).
SINGLE_VEU_MAX_BATCH = 64


def choose(depth: int, batch: int, device: str = "cpu") -> str:
    """The strategy for trees of ``depth`` at ``batch`` rows on a ``device`` kind."""
    rows = [r for r in TABLE if r.device == device] or [r for r in TABLE if r.device == "cpu"]
    for r in rows:
        if depth <= r.max_depth and batch <= r.max_batch:
            return r.strategy
    return "tree_traversal"


#: ``tree_strategy="off"`` keeps the ai.onnx.ml nodes (they run through the op registry).
OFF = "off"


def check_strategy(name: str | None) -> str | None:
    """The forced strategy, None for the table's choice; an error for an unknown name."""
    if name in (None, "", "auto"):
        return None
    if name not in STRATEGIES and name != OFF:
        raise ValueError(f"tree strategy {name!r} is not one of auto, off, {', '.join(STRATEGIES)}")
    return name
