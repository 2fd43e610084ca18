"""The wavefront placer's order of an op's rTasks (core/schedule/wavefront.py ``run_order``): the
array form for many rTasks gives exactly what the heap gives, and whole ops appended at once
(``ScheduleBuilder.append_rtasks``) give the schedule of one rTask at a time."""

from __future__ import annotations

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.errors import ScheduleError
from rammer.schedule import build_problem, get_policy, wavefront
from rammer.schedule.schedule import ScheduleBuilder
from rammer.vdevice import get_preset


def _heap_order(est, veus, n, duration):
    saved = wavefront.SMALL_RUN
    wavefront.SMALL_RUN = n  # the heap path for this call
    try:
        return wavefront.run_order(est, veus, n, duration)
    finally:
        wavefront.SMALL_RUN = saved


@pytest.mark.parametrize("case", ["equal", "spread", "one-early", "ties", "tiny-duration"])
def test_run_order_arrays_match_the_heap(case):
    rng = np.random.default_rng(7)
    k, n, d = 13, 5000, 0.37
    veus = np.sort(rng.choice(40, k, replace=False))
    est = {"equal": np.full(k, 2.5), "spread": rng.uniform(0, 40, k), "one-early": np.r_[0.0, np.full(k - 1, 900.0)],
           "ties": rng.integers(0, 4, k) * d, "tiny-duration": rng.uniform(1e9, 1e9 + 1, k)}[case]
    if case == "tiny-duration":
        d = 1e-9  # est + d rounds: equal times on one vEU, ties across vEUs
    got_veus, got_starts = wavefront.run_order(est, veus, n, d)
    want_veus, want_starts = _heap_order(est, veus, n, d)
    assert np.array_equal(got_veus, want_veus)
    assert np.array_equal(got_starts, want_starts)  # bit for bit: the same additions in the same order


def test_the_array_form_gives_the_heaps_schedule(monkeypatch):
    problem = build_problem(zoo_graph("resnext-small"), get_preset("v100").with_veus(7))
    heap = get_policy("wavefront").schedule(problem)
    monkeypatch.setattr(wavefront, "SMALL_RUN", 0)  # every op through the array form
    arrays = get_policy("wavefront").schedule(problem)
    assert arrays.to_dict() == heap.to_dict()
    assert max(op.kernel.num_rtasks for op in heap.ops) > 7  # ops of several rTasks per vEU


@pytest.mark.parametrize("small", [0, 256])
def test_append_rtasks_is_append_rtask_in_order(small, monkeypatch):
    from rammer.schedule import schedule as schedule_module

    monkeypatch.setattr(schedule_module, "SMALL_APPEND", small)  # 0: every op through the arrays
    problem = build_problem(zoo_graph("resnext-small"), get_preset("v100").with_veus(5))
    kernels = [rop.fastest(5) for rop in problem.rops]
    rng = np.random.default_rng(3)
    one, whole = (ScheduleBuilder(problem, "test", 1.0) for _ in range(2))
    for op, kernel in enumerate(kernels):  # every op at once, in program order (no dependencies)
        veus = rng.integers(0, 5, kernel.num_rtasks)
        for b in (one, whole):
            b.choose(op, kernel)
        handles = [one.append_rtask(op, r, int(v)) for r, v in enumerate(veus)]
        assert whole.append_rtasks(op, veus) == handles[0] and handles == list(range(handles[0], handles[-1] + 1))
        if op % 3 == 0:
            for b in (one, whole):
                b.wait_ids(handles[:2], op % 5)
    assert one.programs == whole.programs
    assert one.finish().to_dict() == whole.finish().to_dict()
    with pytest.raises(ScheduleError):
        whole.append_rtasks(0, np.zeros(kernels[0].num_rtasks, np.int64))  # placed twice
    with pytest.raises(ScheduleError):
        whole.append_rtask(0, 0, 0)


def test_one_rtask_goes_where_the_heap_puts_it():
    # The least (time, vEU): a tie in time goes to the lower vEU, whatever the candidates' order.
    rng = np.random.default_rng(11)
    for _ in range(200):
        k = int(rng.integers(1, 9))
        veus = rng.permutation(40)[:k]
        est = rng.integers(0, 3, k) * 0.5
        got_veus, got_starts = wavefront.run_order(est, veus, 1, 0.25)
        heap = sorted(zip(est.tolist(), veus.tolist()))[0]
        assert got_veus.tolist() == [heap[1]] and got_starts.tolist() == [heap[0]]
        assert got_veus.dtype == np.int64 and got_starts.dtype == np.float64
