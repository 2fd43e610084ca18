"""The torch.onnx exports of tests/torch_models.py (BERT, GPT-2, ResNet-18, MobileNetV2,
ViT, LSTM, bidirectional LSTM) run through the IPU simulator and match ``reference``
within 1e-4 relative error, for each way torch writes ONNX (as tests/test_torch_exports.py
builds them: TorchScript exporter, dynamo exporter, dynamo before its optimizer)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed; the torch.onnx exports need it")

import torch_models  # noqa: E402

import rammer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

VARIANTS = ["torchscript", "dynamo", "dynamo-raw"]


class _Exports:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.done: dict[tuple[str, str], tuple[Path, dict[str, np.ndarray]]] = {}

    def get(self, name: str, variant: str) -> tuple[Path, dict[str, np.ndarray]]:
        if (name, variant) not in self.done:
            if variant == "torchscript":
                path = self.folder / f"{name}-torchscript.onnx"
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        feeds = torch_models.export_torchscript(name, str(path))
                except Exception as exc:  # the deprecated exporter may go away
                    pytest.skip(f"torch's TorchScript exporter failed on {name}: {type(exc).__name__}: {exc}")
                self.done[(name, variant)] = (path, feeds)
            else:
                pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")
                raw, opt = self.folder / f"{name}-dynamo-raw.onnx", self.folder / f"{name}-dynamo.onnx"
                feeds = torch_models.export_dynamo(name, str(raw), str(opt))
                self.done[(name, "dynamo-raw")] = (raw, feeds)
                self.done[(name, "dynamo")] = (opt, feeds)
        return self.done[(name, variant)]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> _Exports:
    return _Exports(tmp_path_factory.mktemp("ipu_torch_onnx"))


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, |want|), elementwise (tests/test_torch_exports.py's measure)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    return float(np.max(np.abs(got64 - want64) / np.maximum(1.0, np.abs(want64)))) if want.size else 0.0


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(torch_models.CASES))
def test_torch_export_matches_reference_on_the_simulator(exports: _Exports, name: str, variant: str) -> None:
    path, feeds = exports.get(name, variant)
    ipu = rammer.compile(path, backend="ipu")
    ref = rammer.compile(path, backend="reference")
    got, want = ipu.run(feeds), ref.run(feeds)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        error = relative_error(got[k], want[k])
        assert error <= 1e-4, f"{name} ({variant}) output '{k}': relative error {error:.3g} > 1e-4"
    report = ipu.executable.report()
    assert report["engine"] == "simulator" and report["tile_peak_bytes"] <= report["tile_sram_bytes"]
