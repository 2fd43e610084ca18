"""`rammer run` and `rammer bench` time through one function, timing.time_rounds: back to
back for run's one model, in rotated rounds for bench's backends (the documented difference)."""

from __future__ import annotations

import json

import pytest

import rammer.bench.timing as timing
from rammer.cli import main


def test_rounds_rotate_and_one_runner_runs_back_to_back():
    order: list[str] = []
    times = timing.time_rounds({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeat=3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
    order.clear()
    t = timing.time_calls(lambda: order.append("x"), repeat=4, warmup=2)
    assert order == ["x"] * 6 and t.runs == 4


def test_a_failing_runner_is_reported_and_dropped():
    errors = []

    def boom() -> None:
        raise RuntimeError("kernel failed")

    times = timing.time_rounds({"ok": lambda: None, "bad": boom}, repeat=3,
                               on_error=lambda name, exc: errors.append((name, str(exc))))
    assert errors == [("bad", "kernel failed")] and len(times["ok"]) == 3 and times["bad"] == []
    with pytest.raises(RuntimeError, match="kernel failed"):
        timing.time_rounds({"bad": boom}, repeat=1)


def test_run_and_bench_go_through_time_rounds(tmp_path, capsys, monkeypatch):
    seen: list[tuple[list[str], int, bool]] = []
    real = timing.time_rounds

    def spy(calls, repeat, settle=False, **kwargs):
        seen.append((sorted(calls), repeat, settle))
        return real(calls, repeat, settle, **kwargs)

    monkeypatch.setattr(timing, "time_rounds", spy)
    assert main(["run", "--zoo", "lstm-tc-small", "-b", "reference", "--repeat", "3", "--settle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["timing"]["runs"] == 3
    assert seen == [(["run"], 3, True)]  # one model: its runs back to back
    seen.clear()
    pytest.importorskip("onnxruntime", reason="the alternated row needs a second runner: onnxruntime")
    assert main(["bench", "--models", "lstm-tc-small", "--backends", "reference,onnxruntime", "--repeat", "4",
                 "--out", str(tmp_path / "b"), "--no-charts"]) == 0
    capsys.readouterr()
    assert seen == [(["onnxruntime", "reference"], 4, False)]  # the row's runners alternated, run by run
    cells = json.loads((tmp_path / "b" / "results.json").read_text())["cells"]
    assert all(c["runs"] == 4 for c in cells)


def test_help_and_readme_say_how_run_and_bench_differ(capsys):
    from pathlib import Path

    readme = Path(__file__).resolve().parent.parent.joinpath("README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines()
            if (line.startswith("| `rammer run MODEL") and "--repeat" in line.split("|")[1] + line.split("|")[2])
            or line.startswith("| `rammer bench --models")}
    assert len(rows) == 2
    for row in rows.values():
        assert "alternat" in row and "back to back" in row
    for command in ("run", "bench"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "back to back" in text and "alternat" in text, command
