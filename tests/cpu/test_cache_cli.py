"""The compile cache, ``rammer compile`` and the emitted program."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np

import rammer
import rammer.zoo
from rammer.cli import main
from rammer.frontend import load
from rammer.time_limits import scaled_limit


def _graph(name: str = "lstm-tc-small"):
    return load(rammer.zoo.build(name))


def test_second_compile_hits_the_cache_and_gives_the_same_results(cache_dir):
    g = _graph()
    first = rammer.compile(g, backend="cpu")
    assert first.executable.cache_status == "miss"
    second = rammer.compile(g, backend="cpu")
    assert second.executable.cache_status == "hit"
    assert second.compile_seconds < 1.0
    feeds = first.random_feeds()
    np.testing.assert_array_equal(first(feeds)["h_final"], second(feeds)["h_final"])
    # the schedules come back from the cache too, and verify
    from rammer.schedule import verify

    [sched] = second.executable.schedules
    assert sched.num_rtasks == first.executable.schedules[0].num_rtasks
    verify(sched)
    # other options are other entries
    third = rammer.compile(g, backend="cpu", policy="op-by-op")
    assert third.executable.cache_status == "miss"
    assert len(os.listdir(os.path.join(cache_dir, "cpu", "programs"))) == 2


def test_corrupt_cache_entry_is_detected_and_rebuilt(cache_dir):
    g = _graph()
    rammer.compile(g, backend="cpu")
    [entry] = glob.glob(os.path.join(cache_dir, "cpu", "programs", "*"))
    with open(os.path.join(entry, "consts.bin"), "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff\xff\xff")
    again = rammer.compile(g, backend="cpu")
    assert again.executable.cache_status.startswith("rebuilt")
    ref = rammer.compile(g, backend="reference")
    feeds = again.random_feeds()
    np.testing.assert_allclose(again(feeds)["h_final"], ref(feeds)["h_final"], rtol=1e-4, atol=1e-5)
    # the rebuilt entry is whole again
    assert rammer.compile(g, backend="cpu").executable.cache_status == "hit"
    # a truncated metadata file too
    with open(os.path.join(entry, "meta.json"), "w") as f:
        f.write("{")
    assert rammer.compile(g, backend="cpu").executable.cache_status.startswith("rebuilt")
    # no temporary folders are left behind
    assert not glob.glob(os.path.join(cache_dir, "cpu", "programs", ".tmp-*"))


def test_cli_compile_report_and_emit(tmp_path, capsys, cache_dir):
    out = tmp_path / "emit"
    assert main(["compile", "--zoo", "seq2seq-small", "--backend", "cpu", "--report", "--emit", str(out)]) == 0
    text = capsys.readouterr().out
    assert "no fallback" in text and "peak_intermediate_bytes" in text
    for name in ("program.py", "schedule.json", "report.json", "tables.npz", "consts.bin"):
        assert (out / name).exists(), name
    sched = json.loads((out / "schedule.json").read_text())
    assert sched["format"] == "rammer.schedule/1" and sched["num_rtasks"] > 0
    # the generated program runs on its own
    run = subprocess.run([sys.executable, str(out / "program.py")], capture_output=True, text=True,
                         timeout=scaled_limit(300))
    assert run.returncode == 0, run.stderr
    assert "decoder_outputs" in run.stdout


def test_cli_compile_json_lists_fallbacks(tmp_path, capsys, cache_dir):
    import onnx
    from onnx import helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=onnx.TensorProto.DOUBLE)],
        "fb", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2, 3])])
    path = tmp_path / "fb.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["compile", str(path), "--backend", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["op"] for f in report["fallbacks"]] == ["Cast"]
    assert "float64" in report["fallbacks"][0]["reason"]
