"""The torch.onnx exports of the test suite (tests/torch_models.py: BERT, GPT-2, ResNet-18, MobileNetV2, ViT,
LSTM, BiLSTM) on the GPU backends: run on opencl (PoCL) in both modes against reference, and their CUDA and
HIP texts build with nvcc (sm_80, sm_90) and hipcc (gfx90a, gfx908)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed; the torch.onnx export tests need it "
                                            '(pip install -e ".[torch]")')
pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")

import torch_models  # noqa: E402

import rammer  # noqa: E402
from rammer import plugins  # noqa: E402
from rammer.frontend import load  # noqa: E402

# slow: torch.onnx exports of whole models, then compiles of them (left out of the quick subset)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]
NAMES = list(torch_models.CASES)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("gpu_torch")
    done: dict[str, tuple[Path, dict[str, np.ndarray]]] = {}

    def get(name: str) -> tuple[Path, dict[str, np.ndarray]]:
        if name not in done:
            raw, path = folder / f"{name}-raw.onnx", folder / f"{name}.onnx"
            feeds = torch_models.export_dynamo(name, str(raw), str(path))
            done[name] = (path, feeds)
        return done[name]
    return get


def _error(got: np.ndarray, want: np.ndarray) -> float:
    g, w = got.astype(np.float64), want.astype(np.float64)
    return float(np.max(np.abs(g - w) / np.maximum(1.0, np.abs(w)))) if w.size else 0.0


@pytest.mark.parametrize("mode", ["persistent", "wave"])
@pytest.mark.parametrize("name", NAMES)
def test_export_runs_on_opencl_and_matches_reference(exported, name, mode):
    be = plugins.backends().get("opencl")
    if be is None or not be.availability().ok:
        pytest.skip("needs an OpenCL device (PoCL: apt-get install pocl-opencl-icd)")
    path, feeds = exported(name)
    compiled = rammer.compile(str(path), backend="opencl", mode=mode)
    want = rammer.compile(str(path), backend="reference").run(feeds)
    got = compiled.run(feeds)
    for k in want:
        assert got[k].shape == want[k].shape
        assert _error(got[k], want[k]) <= 1e-4, k
    assert compiled.executable.report["launches_per_run"] == (1 if mode == "persistent" else
                                                               compiled.executable.report["waves"])


@pytest.mark.parametrize("name", NAMES)
def test_export_builds_with_nvcc_and_hipcc(exported, name):
    if shutil.which("nvcc") is None and shutil.which("hipcc") is None:
        pytest.skip("needs nvcc (CUDA toolkit) or hipcc (Debian hipcc; ci/setup.sh)")
    path, _ = exported(name)
    graph = load(onnx.load(str(path)))
    for backend, compiler, archs in (("cuda", "nvcc", ("sm_80", "sm_90")), ("rocm", "hipcc", ("gfx90a", "gfx908"))):
        if shutil.which(compiler) is None:
            continue
        exe = plugins.backends()[backend].compile(graph, {})
        for arch in archs:
            built = exe.compile_check(arch)
            assert built["binary_bytes"] > 0 and built["usage"]["rammer_main"]["registers"] > 0
