"""Traditional ML models (scikit-learn via skl2onnx, the ai.onnx.ml domain) as tensor programs.

``lower_ml`` rewrites ai.onnx.ml nodes into standard ops with Hummingbird's
strategies (:mod:`rammer.ml.trees`); ``convert`` compiles a fitted estimator.
"""

from __future__ import annotations

from typing import Any

from .lower import has_ml_nodes, lower_ml
from .strategy import choose
from .trees import STRATEGIES

__all__ = ["MlModel", "STRATEGIES", "choose", "convert", "has_ml_nodes", "lower_ml", "to_onnx"]

#: What :mod:`rammer.ml.estimators` gives this package's namespace.
_ESTIMATOR_NAMES = ("MlModel", "convert", "to_onnx")


def __getattr__(name: str) -> Any:
    """``convert``, ``MlModel`` and ``to_onnx`` from :mod:`rammer.ml.estimators` on first use."""
    if name in _ESTIMATOR_NAMES:
        # Not at import: the estimator path compiles through rammer.api, which lowers ai.onnx.ml
        # nodes with this package's lower_ml (a module-level import here would be a cycle).
        from . import estimators
        return getattr(estimators, name)
    raise AttributeError(f"module 'rammer.ml' has no attribute {name!r}")
