"""The torch.onnx exports of tests/torch_models.py run on the cpu backend with
no fallback and match onnxruntime (same metric as tests/test_torch_exports.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the export tests")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is needed to compare against")
pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")

import torch_models  # noqa: E402

import rammer  # noqa: E402

# slow: torch.onnx exports of whole models, then compiles of them (left out of the quick subset)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                                             "ignore::DeprecationWarning")]


@pytest.mark.parametrize("name", list(torch_models.CASES))
def test_dynamo_export_runs_compiled_and_matches_onnxruntime(name, tmp_path):
    raw, optimized = tmp_path / f"{name}-raw.onnx", tmp_path / f"{name}.onnx"
    feeds = torch_models.export_dynamo(name, str(raw), str(optimized))
    model = rammer.compile(str(optimized), backend="cpu", cache=False)
    report = model.executable.report
    assert report["fallbacks"] == [], report["fallbacks"]
    got = model(feeds)
    want = ort.InferenceSession(str(optimized), providers=["CPUExecutionProvider"]).run(None, feeds)
    for out, ref in zip(model.outputs, want):
        g64, r64 = got[out.name].astype(np.float64), ref.astype(np.float64)
        assert got[out.name].shape == ref.shape
        error = float(np.max(np.abs(g64 - r64) / np.maximum(1.0, np.abs(r64)))) if ref.size else 0.0
        assert error <= 1e-4, f"{out.name}: relative error {error:.3g}"
