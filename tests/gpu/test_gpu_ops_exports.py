"""The torch.onnx (TorchScript exporter) exports of bert, gpt2, vit and mobilenetv2 run on opencl (PoCL) in
wave mode and match reference: the embedding Gathers of int64 token ids, the int64 attention mask
(Unsqueeze, Cast), LayerNormalization, Erf (GELU), Where (the causal mask), Clip (ReLU6) and ViT's
attention-head Gathers.  The CUDA and HIP texts of bert build with nvcc and hipcc where they are on
PATH."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed; the torch.onnx export tests need it "
                               '(pip install -e ".[torch]")')

import torch_models  # noqa: E402  (tests/ is on sys.path: tests/conftest.py)

import rammer  # noqa: E402
from rammer import plugins  # noqa: E402

# slow: torch.onnx exports of whole models, then compiles of them (left out of the quick subset)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]
NAMES = ["bert", "gpt2", "vit", "mobilenetv2"]


class _Exports:
    """Each model exported once per module, as tests/test_torch_exports.py's ``Exports`` does for its
    "torchscript" variant (that module's name is not unique on sys.path, so it is not imported)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.done = folder, {}

    def get(self, name: str) -> tuple[Path, dict[str, np.ndarray]]:
        if name not in self.done:
            path = self.folder / f"{name}-torchscript.onnx"
            try:
                feeds = torch_models.export_torchscript(name, str(path))
            except Exception as exc:  # the deprecated exporter may go away
                pytest.skip(f"torch's TorchScript exporter failed on {name}: {type(exc).__name__}: {exc}")
            self.done[name] = (path, feeds)
        return self.done[name]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> _Exports:
    return _Exports(tmp_path_factory.mktemp("gpu_ops_exports"))


@pytest.mark.parametrize("name", NAMES)
def test_torchscript_export_runs_on_opencl_in_wave_mode_and_matches_reference(exports, name):
    be = plugins.get_backend("opencl")
    if not be.availability().ok:
        pytest.skip(f"needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd): {be.availability().reason}")
    path, feeds = exports.get(name)
    compiled = rammer.compile(str(path), backend="opencl", mode="wave")
    want = rammer.compile(str(path), backend="reference").run(feeds)
    got = compiled.run(feeds)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=f"{name} output '{k}'")


@pytest.mark.parametrize("backend, compiler, arch", [("cuda", "nvcc", "sm_80"), ("rocm", "hipcc", "gfx90a")])
def test_bert_export_builds_with_the_vendor_compiler(exports, backend, compiler, arch):
    if shutil.which(compiler) is None:
        pytest.skip(f"needs {compiler} on PATH")
    path, _ = exports.get("bert")
    graph = rammer.load(str(path))
    for mode in ("wave", "persistent"):
        exe = plugins.backends()[backend].compile(graph, {"mode": mode})
        assert {"gather_rows", "layernorm_rows"} <= set(exe.program.report["kernels"])
        built = exe.compile_check(arch)
        assert built["binary_bytes"] > 0 and built["usage"]["rammer_main"]["registers"] > 0
