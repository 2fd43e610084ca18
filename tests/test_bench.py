"""rammer bench: the matrix, its checks against reference, reports, charts, merge and CLI."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rammer.plugins
from rammer.backend import Availability, Backend, Capabilities
from rammer.backends.reference.device import ReferenceBackend
from rammer.bench import MatrixConfig, merge_results, run_matrix, write_all
from rammer.bench.baselines import TorchRunner
from rammer.bench.config import expand_models, load_matrix
from rammer.bench.matrix import add_speedups
from rammer.bench.progress import Progress
from rammer.bench.report import to_markdown
from rammer.bench.runner import compare
from rammer.cli import main
from rammer.errors import RammerError
from rammer.hookspecs import hookimpl

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


# -- test backends, registered through the plugin hook ------------------------

RUN_LOG: list[str] = []


class _Logged:
    def __init__(self, inner: Any, name: str):
        self.inner, self.name = inner, name

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        RUN_LOG.append(self.name)
        return self.inner.run(feeds)


class LoggedBackend(ReferenceBackend):
    """The reference backend under another name, logging every run."""

    def __init__(self, name: str):
        self.name = name

    def compile(self, graph, options):
        return _Logged(super().compile(graph, options), self.name)


class _Noisy:
    def __init__(self, inner: Any):
        self.inner = inner

    def run(self, feeds):
        return {k: v + np.float32(0.5) for k, v in self.inner.run(feeds).items()}


class NoisyBackend(ReferenceBackend):
    name = "noisy"
    capabilities = Capabilities(ops=None, rtol=1e-5, atol=1e-5)

    def compile(self, graph, options):
        return _Noisy(super().compile(graph, options))


class BrokenBackend(Backend):
    name = "broken"
    capabilities = Capabilities(ops=None)

    def compile(self, graph, options):
        raise RuntimeError("no kernels today\nsecond line that must not show")


class OfflineBackend(ReferenceBackend):
    name = "offline"

    def availability(self) -> Availability:
        return Availability(False, "needs a device this machine lacks")


class _TestPlugin:
    @hookimpl
    def rammer_register_backends(self, register):
        for backend in (LoggedBackend("log-a"), LoggedBackend("log-b"), NoisyBackend(), BrokenBackend(),
                        OfflineBackend()):
            register(backend)


@pytest.fixture(scope="module", autouse=True)
def test_backends():
    rammer.plugins.register_plugin(_TestPlugin(), "bench-test-backends")
    yield
    rammer.plugins.unregister_plugin("bench-test-backends")


def _cells(doc: dict, **match: Any) -> list[dict]:
    return [c for c in doc["cells"] if all(c[k] == v for k, v in match.items())]


def _add_model(path: Path, batch_dim: int | str = "N") -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch_dim, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# -- the matrix ----------------------------------------------------------------


def test_cells_are_checked_then_timed_with_alternating_order() -> None:
    RUN_LOG.clear()
    doc = run_matrix(MatrixConfig(models=["alexnet-small"], backends=["log-a", "log-b", "reference"],
                                  repeat=4, warmup=1))
    for name in ("log-a", "log-b", "reference"):
        (cell,) = _cells(doc, backend=name)
        assert cell["status"] == "ok" and cell["runs"] == 4
        assert cell["min_s"] <= cell["median_s"] <= cell["max_s"]
        assert cell["max_abs_err"] == 0.0
    # Checking run + warm-up for each, then 4 rounds in an order rotated each round:
    # (a, b, ref), (b, ref, a), (ref, a, b), (a, b, ref); reference does not log.
    assert RUN_LOG[:4] == ["log-a", "log-a", "log-b", "log-b"]
    assert RUN_LOG[4:] == ["log-a", "log-b", "log-b", "log-a", "log-a", "log-b", "log-a", "log-b"]
    assert doc["baseline"] == "reference"
    (ref,) = _cells(doc, backend="reference")
    assert ref["speedup"] == pytest.approx(1.0)


def test_wrong_results_are_shown_wrong_never_timed() -> None:
    doc = run_matrix(MatrixConfig(models=["resnext-small"], backends=["reference", "noisy"], repeat=2))
    (cell,) = _cells(doc, backend="noisy")
    assert cell["status"] == "wrong"
    assert cell["median_s"] is None and cell["runs"] == 0 and cell["speedup"] is None
    assert cell["max_abs_err"] == pytest.approx(0.5, rel=1e-3)
    assert "outside rtol=1e-05 atol=1e-05" in cell["reason"]
    md = to_markdown(doc)
    assert "WRONG (err 0.5)" in md


def test_unavailable_and_failing_backends() -> None:
    doc = run_matrix(MatrixConfig(models=["alexnet-small"], backends=["offline", "broken", "no-such", "reference"],
                                  repeat=1))
    (off,) = _cells(doc, backend="offline")
    assert off["status"] == "n/a" and off["reason"] == "needs a device this machine lacks"
    (broken,) = _cells(doc, backend="broken")
    assert broken["status"] == "error"
    assert broken["reason"].startswith("compile: CompileError: backend 'broken' failed to compile")
    assert "second line" not in broken["reason"]
    (unknown,) = _cells(doc, backend="no-such")
    assert unknown["status"] == "n/a" and "not a rammer backend or baseline" in unknown["reason"]
    assert doc["runners"]["offline"]["available"] is False


def test_model_files_bind_a_dynamic_batch_and_refuse_a_fixed_one(tmp_path: Path) -> None:
    dynamic = _add_model(tmp_path / "dyn.onnx")
    fixed = _add_model(tmp_path / "fixed.onnx", batch_dim=1)
    doc = run_matrix(MatrixConfig(models=[str(dynamic), str(fixed)], backends=["reference", "onnxruntime"],
                                  batches=[2], repeat=1))
    assert {c["status"] for c in _cells(doc, model="dyn.onnx")} == {"ok"}
    fixed_cells = _cells(doc, model="fixed.onnx")
    assert {c["status"] for c in fixed_cells} == {"n/a"}
    assert "fixes the batch of input 'x' to 1 (use --batch 1)" in fixed_cells[0]["reason"]


def test_torch_column_is_honest_about_onnx_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = str(_add_model(tmp_path / "add.onnx"))

    def no_importer():
        raise ModuleNotFoundError("No module named 'onnx2torch'")

    monkeypatch.setattr(TorchRunner, "importer", staticmethod(no_importer))
    doc = run_matrix(MatrixConfig(models=[model], backends=["reference", "torch"], repeat=1))
    (cell,) = _cells(doc, backend="torch")
    assert cell["status"] == "n/a" and cell["reason"].startswith("no ONNX importer for torch")

    # With a converter (here a stand-in module for this one-op model), the column is timed and checked.
    torch = pytest.importorskip("torch")

    class AddModule(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    monkeypatch.setattr(TorchRunner, "importer", staticmethod(lambda: (lambda proto: AddModule())))
    doc = run_matrix(MatrixConfig(models=[model], backends=["reference", "torch"], repeat=2))
    (cell,) = _cells(doc, backend="torch")
    assert cell["status"] == "ok" and cell["runs"] == 2


def test_compare() -> None:
    exp = {"y": np.array([1.0, np.nan, np.inf], dtype=np.float32)}
    assert compare(exp, {"y": exp["y"].copy()}, 0.0, 0.0).ok
    near = {"y": np.array([1.0 + 1e-4, np.nan, np.inf], dtype=np.float32)}
    assert compare(exp, near, 1e-3, 0.0).ok and not compare(exp, near, 1e-6, 1e-6).ok
    assert not compare(exp, {"y": np.array([1.0, np.nan, 3e38], np.float32)}, 1.0, 1.0).ok  # inf is exact
    assert "NaNs" in compare(exp, {"y": np.array([1.0, 2.0, np.inf], np.float32)}, 1, 1).problem
    assert "float64" in compare(exp, {"y": exp["y"].astype(np.float64)}, 1, 1).problem
    assert "shape" in compare(exp, {"y": exp["y"][:2]}, 1, 1).problem
    assert "missing" in compare(exp, {}, 1, 1).problem
    ints = {"k": np.array([1, 2], np.int64)}
    assert not compare(ints, {"k": np.array([1, 3], np.int64)}, 1.0, 1.0).ok  # integers are exact


# -- reports, charts, merge, CLI --------------------------------------------------


def _fake_doc(machine: str, cpu: str, times: dict[str, float], baseline: str = "onnxruntime") -> dict:
    cells = []
    for backend, t in times.items():
        cells.append({"model": "m", "batch": 1, "backend": backend, "kind": "rammer", "machine": machine,
                      "status": "ok", "reason": "", "median_s": t, "min_s": t, "max_s": t, "runs": 3,
                      "compile_s": 0.1, "max_abs_err": 0.0, "rtol": 0.0, "atol": 0.0, "speedup": None})
    doc = {"schema": "rammer-bench/1", "config": {"repeat": 3}, "baseline": baseline,
           "machines": {machine: {"name": machine, "cpu_model": cpu, "gpus": [], "versions": {}}},
           "runners": {}, "cells": cells}
    add_speedups(doc["cells"], baseline)
    return doc


def test_merge_keeps_each_cells_machine(tmp_path: Path) -> None:
    cpu = _fake_doc("cpu-box", "EPYC", {"reference": 0.010, "onnxruntime": 0.002})
    gpu = _fake_doc("gpu-box", "Xeon", {"cuda": 0.0005, "onnxruntime": 0.001})
    merged = merge_results([("a/results.json", cpu), ("b/results.json", gpu)])
    assert set(merged["machines"]) == {"cpu-box", "gpu-box"}
    speed = {(c["backend"], c["machine"]): c["speedup"] for c in merged["cells"]}
    # Each speedup is against the baseline on the same machine.
    assert speed[("reference", "cpu-box")] == pytest.approx(0.2)
    assert speed[("cuda", "gpu-box")] == pytest.approx(2.0)
    assert "cuda @ gpu-box" in to_markdown(merged)
    with pytest.raises(RammerError, match="both called 'cpu-box'"):
        merge_results([("a", cpu), ("b", _fake_doc("cpu-box", "Other CPU", {"onnxruntime": 1.0}))])
    with pytest.raises(RammerError, match="different baselines"):
        merge_results([("a", cpu), ("b", _fake_doc("gpu-box", "Xeon", {"cuda": 1.0}, baseline="cuda"))])


def test_cli_bench_smoke_matrix_and_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CI smoke run of ci/bench-matrix.toml, then a merge of two such runs."""
    out = tmp_path / "run"
    rc = main(["bench", "--config", str(ROOT / "ci" / "bench-matrix.toml"), "--matrix", "smoke",
               "--backends", "reference,onnxruntime,offline", "--machine-name", "box-a", "--strict",
               "--out", str(out)])
    assert rc == 0
    stdout = capsys.readouterr().out
    assert "| model | batch | reference | onnxruntime | offline |" in stdout
    for name in ("results.json", "results.csv", "results.md", "latency.png", "speedup.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "latency.png").read_bytes()[:8] == PNG
    doc = json.loads((out / "results.json").read_text())
    small = [e for e in expand_models(["zoo-small"])]
    assert [c["model"] for c in _cells(doc, backend="reference")] == small
    assert {c["status"] for c in doc["cells"] if c["backend"] != "offline"} == {"ok"}
    facts = doc["machines"]["box-a"]
    assert facts["logical_cpus"] >= 1 and "numpy" in facts["versions"] and "onnxruntime" in facts["versions"]
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert len(rows) == len(small) * 3 and float(rows[0]["median_ms"]) > 0
    md = (out / "results.md").read_text()
    assert "speedup over `onnxruntime`" in md and "| alexnet-small | 1 |" in md

    doc["machines"]["box-b"] = dict(facts, name="box-b", cpu_model="other")
    del doc["machines"]["box-a"]
    for c in doc["cells"]:
        c["machine"] = "box-b"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(doc))
    rc = main(["bench", "merge", str(out / "results.json"), str(tmp_path / "b" / "results.json"),
               "--out", str(tmp_path / "merged"), "--no-charts"])
    assert rc == 0
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert set(merged["machines"]) == {"box-a", "box-b"} and len(merged["cells"]) == 2 * len(doc["cells"])
    assert "reference @ box-b" in (tmp_path / "merged" / "results.md").read_text()


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--models", "alexnet-small", "--backends", "reference"]) == 1
    assert "--out DIR" in capsys.readouterr().err
    assert main(["bench", "--models", "nope", "--backends", "reference", "--out", str(tmp_path)]) == 1
    assert "neither a zoo model nor an existing file" in capsys.readouterr().err
    assert main(["bench", "--models", "alexnet-small", "--backends", "reference", "--baseline", "onnxruntime",
                 "--out", str(tmp_path)]) == 1
    assert "is not one of --backends" in capsys.readouterr().err
    bad = tmp_path / "m.toml"
    bad.write_text('[matrix.x]\nmodels = ["zoo-small"]\nrepeats = 3\n')
    with pytest.raises(RammerError, match="unknown key 'repeats'"):
        load_matrix(str(bad), "x")
    with pytest.raises(RammerError, match="has no matrix 'y'"):
        load_matrix(str(bad), "y")


def test_written_markdown_and_csv_of_every_status(tmp_path: Path) -> None:
    doc = run_matrix(MatrixConfig(models=["alexnet-small"], backends=["reference", "noisy", "offline", "broken"],
                                  repeat=1))
    paths = write_all(doc, str(tmp_path))
    md = Path(paths["md"]).read_text()
    for text in ("WRONG", "n/a", "error", "needs a device this machine lacks"):
        assert text in md
    statuses = [r["status"] for r in csv.DictReader(open(paths["csv"]))]
    assert statuses == ["ok", "wrong", "n/a", "error"]
    json.loads(Path(paths["json"]).read_text())  # strict JSON: no NaN or Infinity


def test_charts_are_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rammer.bench.charts import write_charts

    doc = _fake_doc("box", "EPYC", {"reference": 0.01, "cpu": 0.001, "onnxruntime": 0.002})
    doc["cells"].append(dict(doc["cells"][0], backend="torch", status="n/a", median_s=None, min_s=None,
                             max_s=None, speedup=None, reason="no ONNX importer"))
    paths = write_charts(doc, str(tmp_path))
    assert [Path(p).name for p in paths] == ["latency.png", "speedup.png"]
    assert all(Path(p).read_bytes()[:8] == PNG for p in paths)


def test_progress_bar_only_on_a_terminal() -> None:
    quiet = io.StringIO()
    p = Progress(3, stream=quiet)
    p.advance(1, "x")
    p.close()
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    p = Progress(2, stream=loud, enabled=True)
    p.advance(1, "model-a")
    assert "\r[" in loud.getvalue() and "1/2" in loud.getvalue() and "model-a" in loud.getvalue()
    p.close()
    assert loud.getvalue().endswith("\r")


def test_settle_waits_out_a_spinning_thread_then_returns() -> None:
    import threading
    import time

    from rammer.bench.quiet import wait_until_idle
    from rammer.time_limits import machine_slowdown

    slowdown = machine_slowdown()  # sleeps overrun on a loaded machine
    assert wait_until_idle(limit_s=0.2 * slowdown) < 0.1 * slowdown  # an idle process: about two windows
    stop = threading.Event()

    def spin() -> None:  # a thread pool's worker spinning after its run
        end = time.perf_counter() + 0.06
        while time.perf_counter() < end and not stop.is_set():
            pass

    t = threading.Thread(target=spin)
    t.start()
    try:
        waited = wait_until_idle(limit_s=1.0)
    finally:
        stop.set()
        t.join()
    assert waited >= 0.04  # it waited for the spinner, not just one window


def test_matrix_config_settle_key(tmp_path: Path) -> None:
    cfg = tmp_path / "m.toml"
    cfg.write_text('[matrix.quick]\nmodels = ["alexnet-small"]\nbackends = ["reference"]\nsettle = false\n')
    assert load_matrix(str(cfg), None)["settle"] is False
    cfg.write_text('[matrix.quick]\nmodels = ["alexnet-small"]\nbackends = ["reference"]\nsettle = 1\n')
    with pytest.raises(RammerError, match="'settle' must be a bool"):
        load_matrix(str(cfg), None)


def test_merge_names_files_and_machines_and_accepts_out_folders(tmp_path, capsys):
    from rammer.cli import main

    for name in ("box-a", "box-b"):
        assert main(["bench", "--models", "lstm-tc-small", "--backends", "reference", "--repeat", "1", "--warmup", "0",
                     "--no-charts", "--machine-name", name, "--out", str(tmp_path / f"run-{name}")]) == 0
    capsys.readouterr()
    assert main(["bench", "merge", str(tmp_path / "run-box-a"), str(tmp_path / "run-box-b" / "results.json"),
                 "--no-charts", "--out", str(tmp_path / "all")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "measured on 2 machine(s): box-a, box-b" in last and "run-box-a" in last


def test_device_metrics_and_quantized_cells_in_the_matrix(tmp_path):
    """A quantized backend's cell is timed and marked as an approximation, with the metrics its
    executable reports (the mcu backend: flash, RAM, Cortex-M4 instructions)."""
    import onnx as _onnx

    from rammer.cli import main

    mcu_models = pytest.importorskip("rammer.backends.mcu.models")
    path = tmp_path / "tiny_cnn.onnx"
    _onnx.save(mcu_models.tiny_cnn(), str(path))
    assert main(["bench", "--models", str(path), "--backends", "mcu,reference", "--repeat", "1", "--warmup", "0",
                 "--no-charts", "--out", str(tmp_path / "out")]) == 0
    cells = {c["backend"]: c for c in json.loads((tmp_path / "out" / "results.json").read_text())["cells"]}
    mcu = cells["mcu"]
    assert mcu["status"] in ("ok", "approx") and mcu["median_s"] > 0
    assert mcu["device_metrics"]["flash_bytes"] > 0 and mcu["device_metrics"]["ram_bytes"] > 0
    assert "flash_bytes=" in (tmp_path / "out" / "results.md").read_text()


def test_pooled_before_after_resamples_whole_workers(tmp_path: Path) -> None:
    """``ci/pool_before_after.py``: after / before of the pooled medians, over the workers of every file."""
    import subprocess
    import sys

    def run(before: list[list[float]], after: list[list[float]], ort: float) -> dict:
        def side(workers: list[list[float]], o: float) -> list[dict]:
            return [{"/tmp/x/m.onnx": {"cpu": w, "onnxruntime": [o] * len(w)}} for w in workers]

        return {"runs": {"before": side(before, 1.0), "after": side(after, ort)}}

    # after is 1.2x before in both files; the second file's after workers also ran in a 1.2x slower phase
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    files[0].write_text(json.dumps(run([[1.0, 1.0, 1.0]] * 2, [[1.2, 1.2, 1.2]] * 2, 1.0)))
    files[1].write_text(json.dumps(run([[1.0, 1.0, 1.0]] * 2, [[1.2, 1.2, 1.2]] * 2, 1.2)))
    script = Path(__file__).resolve().parents[1] / "ci" / "pool_before_after.py"
    out = subprocess.run([sys.executable, str(script), *map(str, files)], capture_output=True, text=True,
                         check=True).stdout
    row = [line for line in out.splitlines() if line.startswith("| m |")]
    assert row == ["| m | 4 | 1.200 | 1.200-1.200 | 1.091 |"], out
