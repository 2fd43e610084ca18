"""Traditional ML through skl2onnx (``ai.onnx.ml`` operators), run on 1,000 rows as an onnxruntime user
runs a batch: a random forest, a gradient-boosted ensemble, and a scaler + logistic-regression pipeline,
each fitted on a fixed synthetic data set (20 features, 4 classes).  Full size: 100 trees of depth 10 /
100 boosting stages of depth 3; CI size: 10 trees / 10 stages.  ``batch`` is the number of rows.
"""

from __future__ import annotations

import numpy as np

from . import Built, Entry

FEATURES = 20


def _data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = (x[:, :4] @ np.array([1.0, -2.0, 0.5, 1.5]) + 0.3 * rng.standard_normal(rows) > 0).astype(int)
    y += 2 * (x[:, 5] > 0.5)
    return x, y


def build_ml(size: str, batch: int, model: str) -> Built:
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    full = size == "full"
    x, y = _data(2000, 0)
    if model == "random-forest":
        est = RandomForestClassifier(n_estimators=100 if full else 10, max_depth=10, random_state=0)
    elif model == "gradient-boosting":
        est = GradientBoostingClassifier(n_estimators=100 if full else 10, max_depth=3, random_state=0)
    else:
        est = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    est.fit(x, y)
    proto = to_onnx(est, x[:1], options={id(est): {"zipmap": False}} if model != "scaler-linear"
                    else {id(est.steps[-1][1]): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    rows, _ = _data(batch, 1)
    name = proto.graph.input[0].name
    return Built(proto.SerializeToString(), {name: rows})


ENTRIES = [
    Entry("random-forest", "traditional-ml", "RandomForestClassifier, 100 trees depth 10, 1,000 rows", build_ml,
          batch=1000, params=(("model", "random-forest"),)),
    Entry("random-forest-rows8", "traditional-ml", "random forest, 8 rows", build_ml, batch=8,
          params=(("model", "random-forest"),)),
    Entry("gradient-boosting", "traditional-ml", "GradientBoostingClassifier, 100 stages x 4 classes, 1,000 rows",
          build_ml, batch=1000, params=(("model", "gradient-boosting"),)),
    Entry("scaler-linear", "traditional-ml", "StandardScaler + LogisticRegression pipeline, 1,000 rows", build_ml,
          batch=1000, params=(("model", "scaler-linear"),)),
]
