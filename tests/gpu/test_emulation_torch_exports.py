"""The torch.onnx exports of the test suite (tests/torch_models.py) compiled for cuda and executed by the
real CuPy runner on the CUDA emulator, in both modes, against reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed; the torch.onnx export tests need it "
                                            "(pip install -e '.[torch]')")
pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")

import torch_models  # noqa: E402
from emu_helpers import install_fake_cupy  # noqa: E402

import rammer  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("emu_torch")
    done: dict[str, tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]] = {}

    def get(name: str):
        if name not in done:
            raw, path = folder / f"{name}-raw.onnx", folder / f"{name}.onnx"
            feeds = torch_models.export_dynamo(name, str(raw), str(path))
            want = rammer.compile(str(path), backend="reference").run(feeds)
            done[name] = (path, feeds, want)
        return done[name]
    return get


@pytest.mark.parametrize("mode", ["persistent", "wave"])
@pytest.mark.parametrize("name", list(torch_models.CASES))
def test_torch_export_on_cuda_emulator_matches_reference(monkeypatch, exported, name, mode):
    fake = install_fake_cupy(monkeypatch)
    path, feeds, want = exported(name)
    compiled = rammer.compile(str(path), backend="cuda", mode=mode)
    for _ in range(2):
        got = compiled.run(feeds)
        for k in want:
            g, w = got[k].astype(np.float64), want[k].astype(np.float64)
            assert got[k].shape == want[k].shape
            assert float(np.max(np.abs(g - w) / np.maximum(1.0, np.abs(w)))) <= 1e-4 if w.size else True, k
    launches = 1 if mode == "persistent" else compiled.executable.program.launches
    assert len(fake.launches) == 2 * launches
