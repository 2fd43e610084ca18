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


#: Measured on the 2-core development VM (ci/bench_ml.py, 100 trees, 28 features); see docs/ml.md.
TABLE: tuple[Row, ...] = (
    Row("cpu", 3, 1_000_000_000, "gemm"),
    Row("cpu", 4, 64, "gemm"),
    Row("cpu", 10, 1_000_000_000, "perfect_tree_traversal"),
    Row("cpu", 1_000_000, 1_000_000_000, "tree_traversal"),
)


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
