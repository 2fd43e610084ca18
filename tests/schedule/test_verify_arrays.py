"""verify in array passes: each op's hosts (the vEUs of its rTasks, the last or first position on each)
from one sort, the dependency order for every (op, producer) pair at once, the clocks reused and read
entry by entry; each against the direct form it replaced."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.schedule import build_problem, get_policy
from rammer.schedule.walk import rtask_locations
from rammer.vdevice import get_preset


def _per_op(schedule, loc_veu, loc_pos, first):
    hosts = []
    for op in schedule.ops:
        sl = slice(op.first_rtask, op.first_rtask + op.kernel.num_rtasks)
        v, p = loc_veu[sl], loc_pos[sl]
        order = np.lexsort((-p if first else p, v))
        v, p = v[order], p[order]
        last = np.ones(v.size, dtype=bool)
        last[:-1] = v[1:] != v[:-1]
        hosts.append((v[last], p[last]))
    return hosts


@pytest.mark.parametrize("name,veus", [("nasnet-small", 2), ("resnext-small", 5), ("alexnet-small", 3)])
def test_op_hosts_equal_the_per_op_sort(name, veus):
    schedule = get_policy("wavefront").schedule(build_problem(zoo_graph(name), get_preset("v100").with_veus(veus)))
    loc_veu, loc_pos = rtask_locations(schedule)
    assert any(op.kernel.num_rtasks > veus for op in schedule.ops)  # some op has several rTasks on a vEU
    for first in (False, True):
        want = _per_op(schedule, loc_veu, loc_pos, first)
        got = importlib.import_module("rammer.schedule.verify")._op_hosts(schedule, loc_veu, loc_pos, first)
        assert len(got) == len(want) == len(schedule.ops)
        for (wv, wp), (gv, gp) in zip(want, got):
            assert np.array_equal(wv, gv) and np.array_equal(wp, gp)


def _violated_per_op(sc, hosts, firsts, preds) -> bool:
    """The op-by-op form of verify's dependency test (what _check_order walks to name a violation)."""
    for o in range(len(preds)):
        fv, fp = firsts[o]
        if not preds[o] or not fv.size:
            continue
        clock = sc.clocks.before(sc.starts[fv] + fp, fv)
        for pred in preds[o]:
            pv, pp = hosts[pred]
            same = fv[:, None] == pv[None, :]
            if (same & (pp[None, :] > fp[:, None])).any() or (~same & (clock[:, pv] <= pp[None, :])).any():
                return True
    return False


@pytest.mark.parametrize("name,veus", [("nasnet-small", 6), ("resnext-small", 5)])
def test_order_check_in_array_passes_agrees_with_the_per_op_walk(name, veus, monkeypatch):
    vf = importlib.import_module("rammer.schedule.verify")
    from rammer.schedule.clocks import schedule_clocks

    schedule = get_policy("wavefront").schedule(build_problem(zoo_graph(name), get_preset("v100").with_veus(veus)))
    preds = [op.preds for op in schedule.ops]
    n = schedule.num_rtasks
    barriers = [(v, i) for v, prog in enumerate(schedule.programs) for i, e in enumerate(prog) if e >= n]
    assert len(barriers) > 10
    rng = np.random.default_rng(3)
    outcomes = set()
    monkeypatch.setattr(vf, "_PAIRS_PER_PASS", 64)  # many passes, and ops larger than one pass
    for trial in range(12):
        programs = [list(p) for p in schedule.programs]
        for v, i in sorted((barriers[k] for k in rng.choice(len(barriers), trial % 4, replace=False)),
                           reverse=True):
            del programs[v][i]  # a removed barrier: some consumer may now start too early
        mutated = dataclasses.replace(schedule, programs=programs)
        sc = schedule_clocks(mutated)
        hosts = vf._op_hosts(mutated, sc.rtask_veu, sc.rtask_pos)
        firsts = vf._op_hosts(mutated, sc.rtask_veu, sc.rtask_pos, first=True)
        want = _violated_per_op(sc, hosts, firsts, preds)
        assert vf._order_violated(sc, hosts, firsts, preds) == want
        outcomes.add(want)
    assert outcomes == {True, False}


def test_schedule_clocks_are_reused_only_for_the_same_entries_and_waits():
    # verify and the planner's ordering ask for one schedule's clocks in turn: computed once, and
    # again whenever the schedule's entries changed since (here a barrier removed in place).
    from rammer.schedule.clocks import schedule_clocks

    schedule = get_policy("wavefront").schedule(build_problem(zoo_graph("nasnet-small"),
                                                              get_preset("v100").with_veus(6)))
    first = schedule_clocks(schedule)
    assert schedule_clocks(schedule) is first
    n = schedule.num_rtasks
    v, i = next((v, i) for v, prog in enumerate(schedule.programs) for i, e in enumerate(prog) if e >= n)
    del schedule.programs[v][i]
    again = schedule_clocks(schedule)
    fresh = schedule_clocks(dataclasses.replace(schedule, programs=[list(p) for p in schedule.programs]))
    assert again is not first and np.array_equal(again.starts, fresh.starts)
    assert np.array_equal(again.clocks.rows, fresh.clocks.rows) and not np.array_equal(again.starts, first.starts)


def test_clock_entries_equal_the_clock_matrix():
    from rammer.schedule.clocks import schedule_clocks

    schedule = get_policy("wavefront").schedule(build_problem(zoo_graph("resnext-small"),
                                                              get_preset("v100").with_veus(5)))
    sc = schedule_clocks(schedule)
    rng = np.random.default_rng(0)
    rtasks = rng.integers(0, schedule.num_rtasks, 200)
    own = sc.rtask_veu[rtasks]
    steps = sc.starts[own] + sc.rtask_pos[rtasks]
    blocks = rng.integers(0, 5, 200)
    blocks[:20] = own[:20]  # some on the step's own vEU: its own signal count
    matrix = sc.clocks.before(steps, own)
    assert np.array_equal(sc.clocks.before_at(steps, own, blocks), matrix[np.arange(200), blocks])
    assert matrix.any()
