"""The benchmark matrix behind ``rammer bench``.

Columns are *runners*: rammer backends and outside baselines (onnxruntime,
torch) behind one interface (:mod:`rammer.bench.runner`), so every cell
compares like with like, on the same model, inputs and machine, in the same
run.  Every cell is checked against the ``reference`` backend before it is
timed.

    from rammer.bench import MatrixConfig, run_matrix, write_all
    doc = run_matrix(MatrixConfig(models=["nasnet-small"], backends=["reference", "onnxruntime"]))
    write_all(doc, "bench-out")

Modules: :mod:`~rammer.bench.matrix` (the loop), :mod:`~rammer.bench.runner`
and :mod:`~rammer.bench.baselines` (the columns), :mod:`~rammer.bench.report`
(json/csv/md), :mod:`~rammer.bench.charts` (PNG), :mod:`~rammer.bench.merge`
(cross-machine), :mod:`~rammer.bench.machine` (machine facts).
"""

from __future__ import annotations

from .matrix import MatrixConfig, run_matrix
from .merge import merge_results
from .report import load_results, write_all

__all__ = ["MatrixConfig", "run_matrix", "merge_results", "load_results", "write_all"]
