"""Traditional ML models (scikit-learn via skl2onnx, the ai.onnx.ml domain) as tensor programs.

``lower_ml`` rewrites ai.onnx.ml nodes into standard ops with Hummingbird's
strategies (:mod:`rammer.ml.trees`); ``convert`` compiles a fitted estimator.
"""

from __future__ import annotations

from .convert import MlModel, convert, to_onnx
from .lower import has_ml_nodes, lower_ml
from .strategy import choose
from .trees import STRATEGIES

__all__ = ["MlModel", "STRATEGIES", "choose", "convert", "has_ml_nodes", "lower_ml", "to_onnx"]
