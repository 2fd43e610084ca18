"""Property tests on random DAGs: no lost rTask, no violated dependency, no
deadlock, for every built-in policy on random vDevices; and the verifier
only accepts schedules that are correct under any rTask durations."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_util import GraphMaker, dependency_violations, execute

from rammer.errors import ScheduleError
from rammer.schedule import build_problem, get_policy, op_predecessors, simulate, verify
from rammer.vdevice import VDevice, get_preset

POLICIES = ["wavefront", "wavefront-fastest", "op-by-op"]
UNARY = ["Relu", "Sigmoid", "Tanh", "Exp"]
BINARY = ["Add", "Mul", "Sub"]


@st.composite
def random_graphs(draw):
    rows = draw(st.sampled_from([1, 2, 4, 8]))
    cols = draw(st.sampled_from([8, 32, 64, 256]))
    g = GraphMaker(rows, cols, "random")
    for _ in range(draw(st.integers(1, 3))):
        g.input()
    for k in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["unary", "binary", "matmul", "softmax", "reduce", "split"]))
        pick = st.sampled_from(g.tensors)
        if kind == "unary":
            (y,) = g.op(draw(st.sampled_from(UNARY)), [draw(pick)])
        elif kind == "binary":
            (y,) = g.op(draw(st.sampled_from(BINARY)), [draw(pick), draw(pick)])
        elif kind == "matmul":
            w = g.const(f"w{k}", np.zeros((cols, cols), np.float32))
            (y,) = g.op("MatMul", [draw(pick), w])
        elif kind == "softmax":
            (y,) = g.op("Softmax", [draw(pick)], axis=-1)
        elif kind == "reduce":
            (s,) = g.op("ReduceSum", [draw(pick)], shape=(rows, 1), axes=[1], keepdims=1)
            (y,) = g.op("Add", [draw(pick), s])  # broadcast back to (rows, cols)
        else:
            half = (rows, cols // 2)
            a, b = g.op("Split", [draw(pick)], n_out=2, out_shapes=[half, half], axis=1)
            (y,) = g.op("Concat", [b, a], axis=1)
        g.tensors.append(y)
    outputs = [g.tensors[-1]] + [t for t in draw(st.lists(st.sampled_from(g.tensors[len(g.inputs):]),
                                                          max_size=3, unique=True)) if t != g.tensors[-1]]
    return g.graph(outputs)


@st.composite
def random_vdevices(draw) -> VDevice:
    base = get_preset(draw(st.sampled_from(["v100", "cpu", "gc200"])))
    return VDevice.from_dict({
        **base.to_dict(), "name": "random", "num_veus": draw(st.integers(1, 12)),
        "barrier_us": draw(st.sampled_from([0.0, 0.5, 3.0])),
        "kernel_launch_us": draw(st.sampled_from([0.0, 2.0])),
        "rtask_overhead_us": draw(st.sampled_from([0.0, 0.2, 2.0])),
    })


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(graph=random_graphs(), vdevice=random_vdevices(), seed=st.integers(0, 2**16))
def test_policies_lose_nothing_violate_nothing_and_never_deadlock(graph, vdevice, seed):
    problem = build_problem(graph, vdevice)
    preds = op_predecessors(graph)
    rng = np.random.default_rng(seed)
    for name in POLICIES:
        s = get_policy(name).schedule(problem)
        verify(s, graph)
        # No lost or duplicated rTask, counted independently of the verifier.
        counts = Counter(e for p in s.programs for e in p if e < s.num_rtasks)
        assert sorted(counts) == list(range(s.num_rtasks)) and set(counts.values()) == {1}
        assert s.num_rtasks == sum(op.kernel.num_rtasks for op in s.ops)
        sim = simulate(s)
        assert not dependency_violations(s, preds, sim.start_us, sim.finish_us)
        # Dependencies hold for any durations, and the naive executor never deadlocks.
        for _ in range(2):
            start, finish = execute(s, rng.exponential(1.0, s.num_rtasks))
            assert not dependency_violations(s, preds, start, finish)
        # The simulated makespan is at least the critical path and the work bound.
        busy = sum(op.kernel.num_rtasks * op.kernel.duration_us for op in s.ops)
        assert sim.makespan_us >= busy / vdevice.num_veus - 1e-6


@SETTINGS
@given(graph=random_graphs(), vdevice=random_vdevices(), data=st.data())
def test_verifier_accepts_only_schedules_correct_under_any_durations(graph, vdevice, data):
    """Drop a random barrier from a valid schedule: if the verifier still
    accepts it, random durations must never break a dependency."""
    problem = build_problem(graph, vdevice)
    s = get_policy(data.draw(st.sampled_from(["wavefront", "op-by-op"]))).schedule(problem)
    if not s.num_barriers:
        return
    drop = s.num_rtasks + data.draw(st.integers(0, s.num_barriers - 1))
    s.programs = [[e for e in p if e != drop] for p in s.programs]
    # Renumber the barriers after the dropped one.
    s.programs = [[e - 1 if e > drop else e for e in p] for p in s.programs]
    del s.barrier_waits[drop - s.num_rtasks]
    preds = op_predecessors(graph)
    try:
        verify(s, graph)
    except ScheduleError as exc:
        assert "dependency not satisfied" in str(exc) or "same vEU" in str(exc)
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    for _ in range(3):
        start, finish = execute(s, rng.exponential(1.0, s.num_rtasks))
        assert not dependency_violations(s, preds, start, finish)
