"""The poptorch path is guarded: without poptorch the simulator runs; with a
(fake) poptorch module the model goes through ``poptorch.inferenceModel``.
Real poptorch (Poplar SDK) is not installable here, so the path itself is untested."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import rammer
from rammer.backends.ipu import poptorch_path
from rammer.errors import BackendUnavailableError, UnsupportedOpError
from rammer.plugins import get_backend

from .graphs import conv_block, mlp


@pytest.fixture
def no_poptorch(monkeypatch):
    monkeypatch.setitem(sys.modules, "poptorch", None)  # import raises ImportError


@pytest.fixture
def fake_poptorch(monkeypatch):
    torch = pytest.importorskip("torch", reason="the poptorch guard test builds a torch module")
    calls = []
    mod = types.ModuleType("poptorch")

    class Options:
        def useIpuModel(self, flag):
            calls.append(("useIpuModel", flag))

    def inferenceModel(model, options):
        calls.append(("inferenceModel", type(model).__name__))

        def run(*args):
            with torch.no_grad():
                return model(*args)
        return run

    mod.Options = Options
    mod.inferenceModel = inferenceModel
    mod.ipuHardwareIsAvailable = lambda: False
    monkeypatch.setitem(sys.modules, "poptorch", mod)
    return calls


def test_without_poptorch_the_simulator_runs(no_poptorch) -> None:
    ok, why = poptorch_path.poptorch_status()
    assert not ok and why.startswith("poptorch not importable")
    assert "simulator" in get_backend("ipu").description
    assert get_backend("ipu").availability().ok
    compiled = rammer.compile(mlp(), backend="ipu")
    assert compiled.executable.runner is None and compiled.executable.report()["engine"] == "simulator"


def test_engine_poptorch_without_poptorch_is_refused(no_poptorch) -> None:
    with pytest.raises(BackendUnavailableError, match="Poplar SDK"):
        rammer.compile(mlp(), backend="ipu", engine="poptorch")


def test_with_poptorch_the_model_goes_through_inference_model(fake_poptorch) -> None:
    assert poptorch_path.poptorch_status()[0]
    assert "poptorch" in get_backend("ipu").description
    compiled = rammer.compile(mlp(), backend="ipu")
    assert compiled.executable.report()["engine"] == "poptorch"
    assert ("inferenceModel", "IRModule") in fake_poptorch and ("useIpuModel", True) in fake_poptorch
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)}
    want = rammer.compile(mlp(), backend="reference").run(feeds)["y"]
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-5, atol=1e-6)


def test_ops_without_torch_lowering_fall_back_or_refuse(fake_poptorch) -> None:
    compiled = rammer.compile(conv_block(), backend="ipu")  # Conv is not in the torch table
    assert compiled.executable.report()["engine"] == "simulator"
    with pytest.raises(UnsupportedOpError, match="Conv"):
        rammer.compile(conv_block(), backend="ipu", engine="poptorch")


def test_export_json_has_tile_mapping(tmp_path, no_poptorch) -> None:
    import json

    path = tmp_path / "ipu.json"
    rammer.compile(mlp(), backend="ipu", export_json=str(path))
    data = json.loads(path.read_text())
    assert data["bsp"]["format"] == "rammer.ipu.bsp/1"
    assert data["bsp"]["slices"] and data["bsp"]["compute"]
    assert data["schedule"]["format"].startswith("rammer.schedule/")
