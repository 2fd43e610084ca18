"""One timing protocol for `rammer run` and `rammer bench`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rammer.bench.timing import percentile, summarize, time_calls
from rammer.cli import main


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentiles_match_numpy(n):
    ts = list(np.random.default_rng(n).random(n))
    t = summarize(ts, warmup=2)
    for q, got in [(50, t.p50_s), (90, t.p90_s), (99, t.p99_s)]:
        assert got == pytest.approx(float(np.percentile(ts, q)))
    assert t.mean_s == pytest.approx(float(np.mean(ts)))
    assert t.std_s == pytest.approx(float(np.std(ts, ddof=1)) if n > 1 else 0.0)
    assert (t.min_s, t.max_s, t.runs, t.warmup, t.median_s) == (min(ts), max(ts), n, 2, t.p50_s)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_time_calls_counts_warmups_and_runs():
    calls = []
    t = time_calls(lambda: calls.append(1), repeat=4, warmup=3)
    assert len(calls) == 7 and t.runs == 4 and t.warmup == 3 and not t.settled


def test_run_and_bench_report_the_same_statistics(tmp_path, capsys):
    assert main(["run", "--zoo", "lstm-tc-small", "--backend", "reference", "--repeat", "3", "--warmup", "2",
                 "--json"]) == 0
    run_doc = json.loads(capsys.readouterr().out)
    assert set(run_doc["timing"]) >= {"mean_s", "std_s", "p50_s", "p90_s", "p99_s", "runs", "warmup", "settled"}
    assert run_doc["timing"]["runs"] == 3 and run_doc["timing"]["warmup"] == 2
    assert run_doc["timing"]["settled"] is False
    out = tmp_path / "b"
    assert main(["bench", "--models", "lstm-tc-small", "--backends", "reference", "--repeat", "3", "--warmup", "2",
                 "--out", str(out), "--no-charts"]) == 0
    capsys.readouterr()
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    for key in ("mean_s", "std_s", "p50_s", "p90_s", "p99_s"):
        assert cell[key] is not None and cell[key] > 0
    assert cell["runs"] == 3 and cell["warmup"] == 2 and cell["settled"] is False
    assert "p99_ms" in (out / "results.csv").read_text().splitlines()[0]
