"""Schedule data, the builder interface, the verifier and the simulator."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from sched_util import GraphMaker, execute

from rammer.errors import ScheduleError
from rammer.rtask import RKernel, ROperator, RTask, RTaskResources
from rammer.schedule import (
    BarrierEntry,
    RTaskEntry,
    Schedule,
    ScheduleBuilder,
    build_problem,
    get_policy,
    simulate,
    verify,
)
from rammer.schedule.problem import problem_from_rops
from rammer.vdevice import get_preset


def _diamond():
    """x -> a; a -> b, a -> c; (b, c) -> d."""
    g = GraphMaker(4, 64, "diamond")
    x = g.input()
    (a,) = g.op("Relu", [x])
    (b,) = g.op("Sigmoid", [a])
    (c,) = g.op("Tanh", [a])
    (d,) = g.op("Add", [b, c])
    return g.graph([d])


def _fixed_problem(graph, durations, rtasks, num_veus=2, barrier_us=1.0):
    """A problem whose op i has one kernel of rtasks[i] rTasks of durations[i] us."""
    vd = get_preset("v100").with_veus(num_veus)
    vd = type(vd).from_dict({**vd.to_dict(), "barrier_us": barrier_us, "rtask_overhead_us": 0.0})
    rops = [ROperator(i, n, (RKernel("fixed", {}, rtasks[i], durations[i], RTaskResources(1, 0)),))
            for i, n in enumerate(graph.nodes)]
    base = build_problem(graph, vd)
    return problem_from_rops(graph.name, rops, list(base.names), list(base.preds), vd)


def _hand_schedule(graph):
    """The paper's interface by hand: a on vEU 0, b after it on vEU 0, c on
    vEU 1 after a barrier on a, d on vEU 0 after a barrier on c."""
    problem = _fixed_problem(graph, [2.0, 3.0, 5.0, 1.0], [1, 1, 1, 1])
    b = ScheduleBuilder(problem, "hand", barrier_cost_us=1.0)
    rop = problem.rops
    ha = b.append(RTask(rop[0], rop[0].kernels[0], 0), 0)
    b.append(RTask(rop[1], rop[1].kernels[0], 0), 0)
    b.wait([ha], 1)
    hc = b.append(RTask(rop[2], rop[2].kernels[0], 0), 1)
    b.wait([hc], 0)
    b.append(RTask(rop[3], rop[3].kernels[0], 0), 0)
    return b.finish()


def test_builder_gives_stable_ids_and_typed_entries():
    graph = _diamond()
    s = _hand_schedule(graph)
    assert s.num_rtasks == 4 and s.num_barriers == 2
    assert s.programs == [[0, 1, 4, 3], [5, 2]]  # barriers numbered by (vEU, position)
    assert s.entries(0)[2] == BarrierEntry(4, (2,))
    assert s.entries(1)[0] == BarrierEntry(5, (0,))
    assert s.entries(1)[1] == RTaskEntry(2, "n2_Tanh", "fixed[]", 0)
    verify(s, graph)


def test_simulation_of_the_hand_schedule():
    s = _hand_schedule(_diamond())
    sim = simulate(s)
    # vEU 1: barrier waits for a (ends 2) + 1 -> 3, c runs 3..8; vEU 0: a 0..2, b 2..5,
    # barrier waits for c (8) + 1 -> 9, d 9..10.
    assert sim.makespan_us == pytest.approx(10.0)
    assert list(sim.start_us) == [0.0, 2.0, 3.0, 9.0]
    assert sim.per_veu_utilization == pytest.approx([6.0 / 10, 5.0 / 10])
    assert sim.barriers == 2 and sim.kernel_launches == 4
    assert simulate(s, barrier_cost_us=0.0).makespan_us == pytest.approx(8.0)


def test_json_round_trip_keeps_everything(tmp_path):
    graph = _diamond()
    s = get_policy("wavefront").schedule(build_problem(graph, get_preset("v100").with_veus(3)))
    path = tmp_path / "s.json"
    s.to_json(str(path), simulate(s).summary())
    data = json.loads(path.read_text())
    for key in ("policy", "vdevice", "makespan_us", "utilization", "barriers", "programs"):
        assert key in data
    back = Schedule.from_json(str(path))
    assert back.to_dict() == s.to_dict()
    verify(back, graph)
    assert simulate(back).makespan_us == pytest.approx(simulate(s).makespan_us)
    with pytest.raises(ScheduleError, match="not a rammer schedule"):
        Schedule.from_dict({"format": "other"})


def _valid():
    graph = _diamond()
    s = get_policy("wavefront").schedule(_fixed_problem(graph, [2.0, 3.0, 5.0, 1.0], [2, 2, 2, 2]))
    verify(s, graph)
    return graph, s


def test_verify_rejects_a_lost_rtask():
    graph, s = _valid()
    s.programs[0] = [e for e in s.programs[0] if e != 3]
    s.programs[1] = [e for e in s.programs[1] if e != 3]
    with pytest.raises(ScheduleError, match="never run.*rTask 3"):
        verify(s, graph)


def test_verify_rejects_a_duplicated_rtask():
    graph, s = _valid()
    s.programs[1].append(s.programs[0][0])
    with pytest.raises(ScheduleError, match="appears 2 times"):
        verify(s, graph)


def test_verify_rejects_a_missing_barrier():
    graph = _diamond()
    s = get_policy("wavefront").schedule(_fixed_problem(graph, [2.0, 3.0, 5.0, 1.0], [2, 2, 2, 2]))
    # Drop every barrier: the two vEUs no longer wait for each other.
    n = s.num_rtasks
    s.programs = [[e for e in p if e < n] for p in s.programs]
    s.barrier_waits = []
    with pytest.raises(ScheduleError, match="dependency not satisfied"):
        verify(s, graph)


def test_verify_rejects_a_consumer_before_its_producer_on_one_veu():
    graph = _diamond()
    problem = _fixed_problem(graph, [1.0] * 4, [1] * 4, num_veus=1)
    s = get_policy("op-by-op").schedule(problem)
    n = s.num_rtasks
    s.programs = [[3, 0, 1, 2]]
    s.barrier_waits = []
    assert all(e < n for e in s.programs[0])
    with pytest.raises(ScheduleError, match="later on the same vEU"):
        verify(s, graph)


def test_verify_finds_a_deadlock_cycle():
    graph = _diamond()
    problem = _fixed_problem(graph, [1.0] * 4, [1] * 4)
    b = ScheduleBuilder(problem, "cycle", 1.0)
    for i, rop in enumerate(problem.rops):
        b.choose(i, rop.kernels[0])
    ha = b.append_rtask(0, 0, 0)
    b.append_rtask(3, 0, 0)
    b.wait_ids([ha], 1)
    b.append_rtask(1, 0, 1)
    b.append_rtask(2, 0, 1)
    s = b.finish()
    assert s.programs == [[0, 3], [4, 1, 2]]
    # vEU 0 now first waits for b, which vEU 1 runs only after waiting for a.
    s.programs[0].insert(0, 5)
    s.barrier_waits.append((1,))
    with pytest.raises(ScheduleError, match="deadlock: a cycle of barriers: vEU"):
        verify(s, graph)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(s)
    with pytest.raises(AssertionError, match="deadlock"):
        execute(s, np.ones(4))


def test_verify_rejects_waiting_for_a_later_rtask_on_the_same_veu():
    graph, s = _valid()
    later = s.programs[0][-1]
    s.programs[0].insert(0, s.num_rtasks + len(s.barrier_waits))
    s.barrier_waits.append((later,))
    with pytest.raises(ScheduleError, match="comes later on the same vEU"):
        verify(s, graph)


def test_verify_rejects_kernels_that_do_not_fit_a_veu():
    graph, s = _valid()
    op = s.ops[1]
    big = RKernel(op.kernel.family, {}, op.kernel.num_rtasks, 1.0, RTaskResources(1, 10**9))
    s.ops[1] = type(op)(op.name, op.op_type, big, op.first_rtask, op.preds)
    with pytest.raises(ScheduleError, match="local memory"):
        verify(s, graph)


def test_verify_rejects_a_schedule_of_another_graph():
    graph, s = _valid()
    g = GraphMaker(4, 64, "other")
    (y,) = g.op("Relu", [g.input()])
    with pytest.raises(ScheduleError, match="has 4 ops but graph 'other' has 1 nodes"):
        verify(s, g.graph([y]))


def test_verify_accepts_transitive_ordering():
    """vEU 2 learns that a (vEU 0) is done only through vEU 1's barrier."""
    g = GraphMaker(4, 64, "chain")
    x = g.input()
    (a,) = g.op("Relu", [x])
    (b,) = g.op("Relu", [a])
    (c,) = g.op("Add", [a, b])
    graph = g.graph([c])
    problem = _fixed_problem(graph, [1.0] * 3, [1] * 3, num_veus=3)
    bld = ScheduleBuilder(problem, "transitive", 1.0)
    for i, rop in enumerate(problem.rops):
        bld.choose(i, rop.kernels[0])
    ha = bld.append_rtask(0, 0, 0)
    bld.wait_ids([ha], 1)
    hb = bld.append_rtask(1, 0, 1)
    bld.wait_ids([hb], 2)  # implies a, which b waited for
    bld.append_rtask(2, 0, 2)
    s = bld.finish()
    verify(s, graph)
    start, finish = execute(s, np.array([5.0, 1.0, 1.0]))
    assert start[2] >= finish[0]


def test_op_by_op_timing_is_launches_plus_latencies():
    graph = _diamond()
    problem = _fixed_problem(graph, [2.0, 3.0, 5.0, 1.0], [3, 1, 2, 4], num_veus=2)
    s = get_policy("op-by-op").schedule(problem)
    verify(s, graph)
    launch = problem.vdevice.kernel_launch_us
    # ceil(3/2)*2 + 3 + 5 + ceil(4/2)*1, and a launch gap before each op but the first.
    assert simulate(s).makespan_us == pytest.approx(4 + 3 + 5 + 2 + 3 * launch)
    assert s.options["launch_per_op"]


def test_schedules_are_deterministic():
    graph = _diamond()
    problem = build_problem(graph, get_preset("a100"))
    one = get_policy("wavefront").schedule(problem).to_dict()
    two = get_policy("wavefront").schedule(copy.copy(problem)).to_dict()
    assert one == two
