"""Full-size zoo models on the V100 and local CPU presets: every schedule
verifies, the paper's pattern holds on the V100, and LSTM-TC schedules in
seconds.  Slow (building
the full models takes most of the time)."""

from __future__ import annotations

import time

import pytest
from sched_util import zoo_graph

from rammer.schedule import build_problem, get_policy, simulate, verify
from rammer.time_limits import scaled_limit
from rammer.vdevice import get_preset

pytestmark = pytest.mark.slow

GAINS = ["lstm-tc", "seq2seq", "nasnet", "resnext", "deepspeech2"]


@pytest.mark.parametrize("model", GAINS + ["alexnet"])
@pytest.mark.parametrize("preset", ["v100", "cpu"])
def test_full_zoo_model(model, preset):
    graph = zoo_graph(model)
    problem = build_problem(graph, get_preset(preset))
    makespan = {}
    for name in ("wavefront", "op-by-op"):
        schedule = get_policy(name).schedule(problem)
        verify(schedule, graph)
        makespan[name] = simulate(schedule).makespan_us
    if preset != "v100":
        assert makespan["wavefront"] <= makespan["op-by-op"]
    elif model in GAINS:
        assert makespan["wavefront"] < 0.95 * makespan["op-by-op"]
    else:  # AlexNet: no inter-operator parallelism, about equal
        assert abs(makespan["wavefront"] / makespan["op-by-op"] - 1) < 0.15


def test_lstm_tc_schedules_in_under_ten_seconds():
    graph = zoo_graph("lstm-tc")
    assert len(graph.nodes) > 14000
    start = time.perf_counter()
    problem = build_problem(graph, get_preset("v100"))
    schedule = get_policy("wavefront").schedule(problem)
    took = time.perf_counter() - start
    assert schedule.num_rtasks > 10000
    limit = scaled_limit(10.0)  # ten seconds on a quiet machine
    assert took < limit, f"scheduling LSTM-TC took {took:.1f} s (limit {limit:.0f} s on this machine now)"
