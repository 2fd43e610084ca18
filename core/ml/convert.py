"""``rammer.ml.convert``: a scikit-learn estimator compiled like any network.

skl2onnx writes the ONNX model (``zipmap=False``: plain label and
probability tensors), :func:`~rammer.ml.lower.lower_ml` turns its ai.onnx.ml
nodes into tensor ops, and ``rammer.compile`` builds it for a backend at a
fixed batch; ``predict`` runs any number of rows in batch-sized pieces.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import api  # (module import: rammer.api lowers ai.onnx.ml nodes through rammer.ml.lower)
from ..errors import CompileError
from ..frontend import load
from ..plugins import get_backend
from .lower import lower_ml
from .strategy import SINGLE_VEU_MAX_BATCH


def to_onnx(estimator: Any, n_features: int, dtype: Any = np.float32) -> Any:
    """The estimator as an ONNX model (skl2onnx, zipmap off where the converter has the option)."""
    try:
        from skl2onnx import to_onnx as skl_to_onnx
    except ImportError as exc:
        raise CompileError(f"rammer.ml.convert needs scikit-learn and skl2onnx: pip install 'rammer[ml]' ({exc})") \
            from None
    sample = np.zeros((1, n_features), dtype)
    opset = {"": 17, "ai.onnx.ml": 3}
    try:
        return skl_to_onnx(estimator, sample, options={"zipmap": False}, target_opset=opset)
    except (RuntimeError, NameError, ValueError) as first:
        if "zipmap" not in str(first):
            raise CompileError(f"skl2onnx cannot convert {type(estimator).__name__}: {first}") from None
    try:
        return skl_to_onnx(estimator, sample, target_opset=opset)
    except Exception as exc:
        raise CompileError(f"skl2onnx cannot convert {type(estimator).__name__}: {exc}") from None


#: Rows per run of a converted model: past this, runs of this many rows beat one big run on the
#: cpu backend (100 trees of depth 8, 100,000 rows: 294 ms in 1,000-row runs, 354 ms in 4,096-row
#: runs, 689 ms in one run), as each run's [trees, rows] temporaries stay in cache.
RUN_ROWS = 1024


class MlModel:
    """A compiled estimator: ``predict``, ``predict_proba`` (classifiers), ``compiled``."""

    def __init__(self, estimator: Any, compiled: api.CompiledModel, batch: int, strategies: dict):
        self.estimator = estimator
        self.compiled = compiled
        self.batch = batch
        #: The tree strategies used, per tree-ensemble node.
        self.strategies = strategies
        self._input = compiled.inputs[0]
        outs = compiled.outputs
        self._label = outs[0].name if len(outs) > 1 else None
        self._scores = outs[1].name if len(outs) > 1 else outs[0].name

    def _run(self, x: Any) -> dict[str, np.ndarray]:
        x = np.asarray(x, dtype=self._input.np_dtype)
        if x.ndim != 2 or x.shape[1] != self._input.shape[1]:
            raise CompileError(f"expected rows of {self._input.shape[1]} features, got an array of shape {x.shape}")
        parts: dict[str, list[np.ndarray]] = {}
        for start in range(0, len(x), self.batch):
            chunk = x[start:start + self.batch]
            n = len(chunk)
            if n < self.batch:
                chunk = np.concatenate([chunk, np.zeros((self.batch - n,) + x.shape[1:], x.dtype)])
            out = self.compiled.run({self._input.name: np.ascontiguousarray(chunk)})
            for k, v in out.items():
                parts.setdefault(k, []).append(np.asarray(v)[:n])
        return {k: np.concatenate(v) for k, v in parts.items()}

    def predict(self, x: Any) -> np.ndarray:
        out = self._run(x)
        if self._label is not None:
            labels = out[self._label].reshape(-1)
            classes = getattr(self.estimator, "classes_", None)
            return labels.astype(classes.dtype) if classes is not None and classes.dtype.kind != "O" else labels
        y = out[self._scores]
        return y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y

    def predict_proba(self, x: Any) -> np.ndarray:
        if self._label is None:
            raise AttributeError(f"{type(self.estimator).__name__} is not a classifier with probabilities")
        return self._run(x)[self._scores]

    def decision_function(self, x: Any) -> np.ndarray:
        return self._run(x)[self._scores]


def convert(estimator: Any, backend: str | None = None, batch: int = 1, tree_strategy: str | None = None,
            tree_groups: int | None = None, max_run_rows: int | None = RUN_ROWS, **options: Any) -> MlModel:
    """Compile a fitted scikit-learn estimator for ``backend`` at ``batch`` rows per run
    (at most ``max_run_rows``: larger batches run as several runs; None: no limit).

    ``tree_strategy``: ``None``/``"auto"`` (the measured table), ``"gemm"``,
    ``"tree_traversal"``, ``"perfect_tree_traversal"`` or ``"off"`` (keep the
    ai.onnx.ml ops).  Other keyword options go to ``rammer.compile``; a backend taking a
    ``veus`` option gets ``veus=1`` up to :data:`~rammer.ml.strategy.SINGLE_VEU_MAX_BATCH` rows
    unless given."""
    n_features = getattr(estimator, "n_features_in_", None)
    if n_features is None:
        raise CompileError(f"{type(estimator).__name__} is not fitted (no n_features_in_)")
    if max_run_rows is not None:
        batch = min(int(batch), int(max_run_rows))
    model = to_onnx(estimator, int(n_features))
    name = model.graph.input[0].name
    graph = load(model, {name: (int(batch), int(n_features))})
    device = get_backend(backend).capabilities.device
    used: dict = {}
    graph = lower_ml(graph, tree_strategy, device=device, tree_groups=tree_groups, report=used)
    accepted = get_backend(backend).capabilities.options
    if batch <= SINGLE_VEU_MAX_BATCH and "veus" not in options and accepted is not None and "veus" in accepted:
        options["veus"] = 1
    return MlModel(estimator, api.compile(graph, backend, **options), int(batch), used)
