"""``rammer.ml.convert``: a scikit-learn estimator compiled like any network.

skl2onnx writes the ONNX model (``zipmap=False``: plain label and
probability tensors), :func:`~rammer.ml.lower.lower_ml` turns its ai.onnx.ml
nodes into tensor ops, and ``rammer.compile`` builds it for a backend at a
fixed batch; ``predict`` runs any number of rows in batch-sized pieces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import api  # (module import: rammer.api lowers ai.onnx.ml nodes through rammer.ml.lower)
from ..errors import CompileError
from ..frontend import load
from ..plugins import get_backend
from .lower import lower_ml
from .strategy import SINGLE_VEU_MAX_BATCH, compiles_tree_kernel


def to_onnx(estimator: Any, n_features: int, dtype: Any = np.float32) -> Any:
    """The estimator as an ONNX model (skl2onnx, zipmap off where the converter has the option)."""
    try:
        from skl2onnx import to_onnx as skl_to_onnx
    except ImportError as exc:
        raise CompileError("rammer.ml.convert needs scikit-learn and skl2onnx: pip install -e '.[ml]' in the rammer "
                           f"checkout ({exc})") \
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


def run_rows_for(rows: int, cap: int = RUN_ROWS) -> int:
    """The compiled run size for a call of ``rows`` rows with ``batch=None``: the power of two
    at or above ``rows``, at most ``cap`` (so at most log2(cap) + 1 sizes are ever compiled, and
    padding wastes less than half of a run)."""
    size = 1
    while size < rows and size < cap:
        size *= 2
    return min(size, cap)


class MlModel:
    """A compiled estimator: ``predict``, ``predict_proba`` (classifiers), ``compiled``.

    With a fixed ``batch`` every call runs in runs of ``batch`` rows (the last one padded).
    With ``batch=None`` a call runs full runs of ``max_batch`` rows and its remaining rows
    (or all of a smaller call) in one run compiled for the next power of two, compiled on
    first use and kept."""

    def __init__(self, estimator: Any, compiled: api.CompiledModel, batch: int | None, strategies: dict,
                 build: Callable[[int], tuple[api.CompiledModel, dict]] | None = None):
        self.estimator = estimator
        #: The model compiled for full runs (``max_batch`` rows).
        self.compiled = compiled
        #: Rows per run, or None: chosen per call (see the class docstring).
        self.batch = batch
        #: Rows of a full run.
        self.max_batch = int(compiled.inputs[0].shape[0])
        #: The tree strategies used, per tree-ensemble node (over every compiled run size).
        self.strategies = strategies
        self._build = build
        self._by_rows: dict[int, api.CompiledModel] = {self.max_batch: compiled}
        self._lock = threading.Lock()
        self._input = compiled.inputs[0]
        outs = compiled.outputs
        self._label = outs[0].name if len(outs) > 1 else None
        self._scores = outs[1].name if len(outs) > 1 else outs[0].name

    @property
    def run_sizes(self) -> list[int]:
        """The run sizes (rows) compiled so far."""
        return sorted(self._by_rows)

    def compiled_for(self, rows: int) -> api.CompiledModel:
        """The model a run of ``rows`` rows (at most ``max_batch``) goes through."""
        if self.batch is not None or self._build is None:
            return self.compiled
        size = run_rows_for(rows, self.max_batch)
        with self._lock:  # (predict may be called from several threads)
            model = self._by_rows.get(size)
            if model is None:
                model, used = self._build(size)
                self._by_rows[size] = model
                for node, names in used.items():
                    self.strategies[node] = sorted(set(self.strategies.get(node, [])) | set(names))
        return model

    def _run(self, x: Any) -> dict[str, np.ndarray]:
        x = np.asarray(x, dtype=self._input.np_dtype)
        if x.ndim != 2 or x.shape[1] != self._input.shape[1]:
            raise CompileError(f"expected rows of {self._input.shape[1]} features, got an array of shape {x.shape}")
        parts: dict[str, list[np.ndarray]] = {}
        for start in range(0, len(x), self.max_batch):
            chunk = x[start:start + self.max_batch]
            n = len(chunk)
            model = self.compiled_for(n)
            size = int(model.inputs[0].shape[0])
            if n < size:
                chunk = np.concatenate([chunk, np.zeros((size - n,) + x.shape[1:], x.dtype)])
            out = model.run({self._input.name: np.ascontiguousarray(chunk)})
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


def convert(estimator: Any, backend: str | None = None, batch: int | None = None, tree_strategy: str | None = None,
            tree_groups: int | None = None, max_run_rows: int | None = RUN_ROWS, **options: Any) -> MlModel:
    """Compile a fitted scikit-learn estimator for ``backend``.

    ``batch=None`` (the default) compiles runs of ``max_run_rows`` rows now; a call runs its
    rows in runs of that size and its remaining rows (or all of a smaller call) in a run
    compiled, on first use, for the power of two at or above their count.  ``batch=B``
    compiles one run size, ``min(B, max_run_rows)``, and pads every call's last run to it
    (``max_run_rows=None``: exactly ``B``).

    ``tree_strategy``: ``None``/``"auto"`` (the measured table), ``"gemm"``,
    ``"tree_traversal"``, ``"perfect_tree_traversal"`` or ``"off"`` (keep the
    ai.onnx.ml ops).  Other keyword options go to ``rammer.compile``; a backend taking a
    ``veus`` option gets ``veus=1`` for runs of up to
    :data:`~rammer.ml.strategy.SINGLE_VEU_MAX_BATCH` rows unless given."""
    n_features = getattr(estimator, "n_features_in_", None)
    if n_features is None:
        raise CompileError(f"{type(estimator).__name__} is not fitted (no n_features_in_)")
    if batch is not None and int(batch) < 1:
        raise CompileError(f"batch={batch}: rows per run must be at least 1 (or None to choose per call)")
    if max_run_rows is not None and int(max_run_rows) < 1:
        raise CompileError(f"max_run_rows={max_run_rows}: must be at least 1 (or None for no limit)")
    if batch is None:
        full = int(max_run_rows) if max_run_rows is not None else RUN_ROWS
    else:
        full = min(int(batch), int(max_run_rows)) if max_run_rows is not None else int(batch)
    model = to_onnx(estimator, int(n_features))
    be = get_backend(backend)
    accepted = be.capabilities.options

    def build(rows: int) -> tuple[api.CompiledModel, dict]:
        graph = load(model, {model.graph.input[0].name: (rows, int(n_features))})
        used: dict = {}
        graph = lower_ml(graph, tree_strategy, device=be.capabilities.device, tree_groups=tree_groups, report=used,
                         tree_kernel=compiles_tree_kernel(be.capabilities))
        run_options = dict(options)
        if rows <= SINGLE_VEU_MAX_BATCH and "veus" not in options and accepted is not None and "veus" in accepted:
            run_options["veus"] = 1
        return api.compile(graph, backend, **run_options), used

    compiled, used = build(full)
    return MlModel(estimator, compiled, None if batch is None else full, used, build if batch is None else None)
