"""The correctness table: scikit-learn estimators converted with rammer.ml.convert, on the
datasets bundled with scikit-learn and synthetic data with 100+ features.

Labels must equal scikit-learn's ``predict`` exactly; probabilities and regression outputs
must be within 1e-5 of ``predict_proba``/``predict`` and of onnxruntime's run of the same
ONNX model.  Every tree strategy runs on ``reference``; on ``cpu`` (whose compile costs
more) every strategy runs on the ensembles of a few datasets and the measured table's
choice on the rest.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e \".[ml]\")")
pytest.importorskip("skl2onnx", reason="skl2onnx is not installed (pip install -e \".[ml]\")")

from sklearn import datasets  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, StandardScaler  # noqa: E402
from sklearn.svm import LinearSVC, LinearSVR  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

import rammer.ml as rml  # noqa: E402
from rammer.ml.estimators import RUN_ROWS  # noqa: E402

TREE_STRATEGIES = ["gemm", "tree_traversal", "perfect_tree_traversal"]
#: Datasets on which the cpu backend runs every strategy (the others: the table's choice).
CPU_ALL_STRATEGIES = {"iris", "breast_cancer", "synthetic", "diabetes"}


@functools.cache
def dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "synthetic":
        x, y = datasets.make_classification(400, 120, n_informative=30, n_classes=3, random_state=0)
    elif name == "synthetic_reg":
        x, y = datasets.make_regression(400, 110, n_informative=40, random_state=0)
    else:
        x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return x.astype(np.float32), y


CLASSIFIERS = {
    "random_forest": lambda: RandomForestClassifier(8, max_depth=6, random_state=0),
    "extra_trees": lambda: ExtraTreesClassifier(8, max_depth=7, random_state=0),
    "gradient_boosting": lambda: GradientBoostingClassifier(n_estimators=6, max_depth=3, random_state=0),
    "decision_tree": lambda: DecisionTreeClassifier(max_depth=8, random_state=0),
    # Unlimited depth (15+ on digits): past perfect tree traversal's limit of 14.
    "deep_decision_tree": lambda: DecisionTreeClassifier(random_state=0),
    "logistic_regression": lambda: LogisticRegression(max_iter=5000),
    "linear_svc": lambda: LinearSVC(max_iter=5000),
    "standard_scaler_logistic": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)),
    "minmax_scaler_forest": lambda: make_pipeline(MinMaxScaler(), RandomForestClassifier(6, max_depth=5,
                                                                                          random_state=0)),
}
REGRESSORS = {
    "random_forest": lambda: RandomForestRegressor(8, max_depth=6, random_state=0),
    "extra_trees": lambda: ExtraTreesRegressor(8, max_depth=6, random_state=0),
    "gradient_boosting": lambda: GradientBoostingRegressor(n_estimators=8, max_depth=3, random_state=0),
    "decision_tree": lambda: DecisionTreeRegressor(max_depth=8, random_state=0),
    "linear_regression": lambda: LinearRegression(),
    "linear_svr": lambda: LinearSVR(max_iter=20000, random_state=0),
    "standard_scaler_linear_svr": lambda: make_pipeline(StandardScaler(), LinearSVR(max_iter=20000, random_state=0)),
}
CLF_DATA = ["iris", "wine", "breast_cancer", "digits", "synthetic"]
REG_DATA = ["diabetes", "synthetic_reg"]


@functools.cache
def fitted(kind: str, model: str, data: str):
    x, y = dataset(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of the linear models
        return (CLASSIFIERS if kind == "clf" else REGRESSORS)[model]().fit(x, y)


def _is_tree_model(est) -> bool:
    last = est.steps[-1][1] if hasattr(est, "steps") else est
    return hasattr(last, "estimators_") or hasattr(last, "tree_")


def _cases():
    for backend in ("reference", "cpu"):
        for kind, models, data_names in (("clf", CLASSIFIERS, CLF_DATA), ("reg", REGRESSORS, REG_DATA)):
            for model in models:
                for data in data_names:
                    tree = any(w in model for w in ("forest", "trees", "boosting", "tree"))
                    if not tree:
                        strategies = [None]
                    elif model.startswith("deep"):
                        strategies = [None, "tree_traversal"]
                    elif backend == "reference" or data in CPU_ALL_STRATEGIES:
                        strategies = TREE_STRATEGIES
                    else:
                        strategies = [None]
                    for s in strategies:
                        yield pytest.param(backend, kind, model, data, s, id=f"{backend}-{model}-{data}-{s or 'auto'}")


@functools.cache
def onnxruntime_outputs(kind: str, model: str, data: str) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the second oracle")
    est = fitted(kind, model, data)
    x, _ = dataset(data)
    onx = rml.to_onnx(est, x.shape[1])
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


@pytest.mark.slow
@pytest.mark.parametrize("backend,kind,model,data,strategy", list(_cases()))
def test_matches_scikit_learn_and_onnxruntime(backend, kind, model, data, strategy):
    est = fitted(kind, model, data)
    x, _ = dataset(data)
    compiled = rml.convert(est, backend=backend, batch=128, tree_strategy=strategy)
    if strategy is not None:
        assert all(strategy in used for used in compiled.strategies.values())
    want = est.predict(x)
    got = compiled.predict(x)
    ort_out = onnxruntime_outputs(kind, model, data)
    if kind == "clf":
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, ort_out[0].reshape(-1))
        if hasattr(est, "predict_proba"):
            proba = compiled.predict_proba(x)
            np.testing.assert_allclose(proba, est.predict_proba(x), atol=1e-5, rtol=0)
            np.testing.assert_allclose(proba, ort_out[1], atol=1e-5, rtol=0)
    else:
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=0)
        np.testing.assert_allclose(got, ort_out[0].reshape(-1), atol=1e-5 * scale, rtol=0)


def test_predict_handles_any_row_count():
    est = fitted("clf", "random_forest", "iris")
    x, _ = dataset("iris")
    compiled = rml.convert(est, backend="reference", batch=64)
    np.testing.assert_array_equal(compiled.predict(x[:70]), est.predict(x[:70]))
    np.testing.assert_array_equal(compiled.predict(x[:1]), est.predict(x[:1]))


def test_default_batch_runs_big_calls_in_few_runs_and_small_calls_in_small_runs(monkeypatch):
    """convert()'s default: runs of up to 1,024 rows, the rest in a run compiled for the next
    power of two (so predict on 1,797 rows is 2 runs, not 1,797 runs of one row)."""
    est = fitted("clf", "random_forest", "digits")
    x, _ = dataset("digits")
    compiled = rml.convert(est, backend="reference")
    assert compiled.batch is None and compiled.max_batch == RUN_ROWS == 1024
    runs: list[int] = []
    real_run = type(compiled.compiled).run

    def counted(self, feeds, *args, **kwargs):
        runs.append(next(iter(feeds.values())).shape[0])
        return real_run(self, feeds, *args, **kwargs)

    monkeypatch.setattr(type(compiled.compiled), "run", counted)
    np.testing.assert_array_equal(compiled.predict(x), est.predict(x))
    assert len(x) == 1797 and runs == [1024, 1024]
    runs.clear()
    np.testing.assert_array_equal(compiled.predict(x[:3]), est.predict(x[:3]))
    np.testing.assert_allclose(compiled.predict_proba(x[:70]), est.predict_proba(x[:70]), atol=1e-5)
    assert runs == [4, 128] and compiled.run_sizes == [4, 128, 1024]
    fixed = rml.convert(est, backend="reference", batch=64)
    assert fixed.batch == 64 and fixed.max_batch == 64


def test_missing_values_match_onnxruntime():
    """NaN inputs go where onnxruntime sends them.  (skl2onnx 1.20 writes no missing-value
    tracks for trees trained on NaNs, so scikit-learn itself may send a NaN the other way:
    the ONNX model, not rammer, decides; docs/ml.md.)"""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle here")
    x, y = dataset("breast_cancer")
    x = x.copy()
    x[np.random.default_rng(0).random(x.shape) < 0.1] = np.nan
    est = DecisionTreeClassifier(max_depth=6, random_state=0).fit(x, y)
    onx = rml.to_onnx(est, x.shape[1])
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    labels, proba = sess.run(None, {sess.get_inputs()[0].name: x})
    for backend in ("reference", "cpu"):
        for strategy in TREE_STRATEGIES:
            compiled = rml.convert(est, backend=backend, batch=128, tree_strategy=strategy)
            np.testing.assert_array_equal(compiled.predict(x), labels, err_msg=f"{backend} {strategy}")
            np.testing.assert_allclose(compiled.predict_proba(x), proba, atol=1e-5)


def test_string_class_labels():
    """Trees lowered; only the label lookup (a Gather of strings) runs in numpy on cpu."""
    x, y = dataset("iris")
    names = np.asarray(["setosa", "versicolor", "virginica"])[y]
    est = RandomForestClassifier(5, max_depth=4, random_state=0).fit(x, names)
    for backend in ("reference", "cpu"):
        compiled = rml.convert(est, backend=backend, batch=64)
        np.testing.assert_array_equal(compiled.predict(x), est.predict(x))
        np.testing.assert_allclose(compiled.predict_proba(x), est.predict_proba(x), atol=1e-5)
        assert not any(n.domain == "ai.onnx.ml" for n in compiled.compiled.graph.nodes)
