"""Run-time profiles: a Chrome trace of a real run, one track per vEU, slices named by op and node."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.cli import main
from rammer.profile import TraceSlice, chrome_trace, top_ops


def test_cpu_profile_writes_a_trace_of_every_row(tmp_path):
    graph = rammer.zoo.build("nasnet-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    feeds = model.random_feeds(1)
    path = tmp_path / "trace.json"
    prof = model.profile(feeds, str(path))
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"vEU 0", "vEU 1"}
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    program = model.executable.program
    assert len(slices) == program.T.shape[0]  # every task and barrier row of the one segment, once
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    ops = [e for e in slices if e["cat"] != "barrier"]
    assert ops and all(e["name"] for e in ops)  # named by op, with the nodes it covers
    assert sum(bool(e["args"]["nodes"]) for e in ops) > len(ops) / 2
    node_names = {n.name for n in graph.graph.node}
    assert any(set(e["args"]["nodes"]) & node_names for e in ops)
    assert any(e["cat"] == "barrier" and e["name"].startswith("wait for vEU") for e in slices)
    # Slices on one track do not overlap: they are the vEU's rows in order.
    for tid in {e["tid"] for e in slices}:
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(mine, mine[1:]))
    assert prof.top_ops(3)[0]["total_us"] >= prof.top_ops(3)[-1]["total_us"]
    # A traced run computes what a plain run does.
    traced, _ = model.executable.trace_run(feeds)
    for name, value in model.run(feeds).items():
        np.testing.assert_array_equal(traced[name], value)


def test_run_profile_cli(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["run", "--zoo", "lstm-tc-small", "--backend", "cpu", "--repeat", "2", "--profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "profile of one run" in out and path.is_file()
    assert main(["run", "--zoo", "lstm-tc-small", "--backend", "reference", "--profile", str(path)]) != 0
    assert "cannot time its runs" in capsys.readouterr().err


def test_session_profiling_like_onnxruntime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = rammer.SessionOptions(enable_profiling=True, profile_file_prefix="prof")
    sess = rammer.InferenceSession(rammer.zoo.build("lstm-tc-small"), sess_options=opts, backend="cpu")
    feeds = rammer.compile(rammer.zoo.build("lstm-tc-small"), backend="reference").random_feeds(0)
    sess.run(None, feeds)
    sess.run(None, feeds)
    path = sess.end_profiling()
    assert path.startswith("prof_") and (tmp_path / path).is_file()
    assert json.loads((tmp_path / path).read_text())["traceEvents"]


def test_chrome_trace_format_and_top_ops():
    s = [TraceSlice("vEU 1", "b", "conv", 2_000, 5_000), TraceSlice("vEU 0", "a", "gemm", 1_000, 2_000),
         TraceSlice("vEU 10", "w", "barrier", 5_000, 6_000), TraceSlice("host", "h", "host", 0, 500)]
    doc = chrome_trace(s)
    tids = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert tids["vEU 0"] < tids["vEU 1"] < tids["vEU 10"] < tids["host"]
    x = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert x["h"]["ts"] == 0 and x["b"]["ts"] == pytest.approx(2.0) and x["b"]["dur"] == pytest.approx(3.0)
    rows = top_ops(s)
    assert rows[0]["name"] == "b" and rows[0]["share"] == pytest.approx(3000 / 5500)
