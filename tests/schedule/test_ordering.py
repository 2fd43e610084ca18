"""Vector-clock ordering of a schedule (core/schedule/ordering.py): what is certainly done before what."""

from __future__ import annotations

import numpy as np
import pytest
from sched_util import execute, zoo_graph

from rammer.schedule import build_problem, get_policy, schedule_order
from rammer.vdevice import get_preset


def _schedule(model: str, policy: str, veus: int):
    g = zoo_graph(model)
    problem = build_problem(g, get_preset("v100").with_veus(veus))
    return problem, get_policy(policy).schedule(problem)


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
@pytest.mark.parametrize("model,veus", [("nasnet-small", 3), ("lstm-tc-small", 2), ("resnext-small", 1)])
def test_done_before_holds_for_any_durations_and_covers_dependencies(model, policy, veus):
    problem, sched = _schedule(model, policy, veus)
    n = len(problem.rops)
    order, anc = schedule_order([list(range(n))], [sched])
    assert sorted(order) == list(range(n))
    pos = {op: k for k, op in enumerate(order)}
    for i in range(n):  # the schedule orders every dependency, so the clocks know it
        for p in problem.preds[i]:
            assert anc[pos[i]] >> pos[p] & 1, (problem.names[p], problem.names[i])
    ranges = [(op.first_rtask, op.first_rtask + op.kernel.num_rtasks) for op in sched.ops]
    rng = np.random.default_rng(0)
    for _ in range(3):  # "done before" must hold whatever the rTasks take
        start, finish = execute(sched, rng.uniform(0.1, 10.0, sched.num_rtasks))
        for k, i in enumerate(order):
            s = start[ranges[i][0]:ranges[i][1]].min()
            bits = anc[k]
            while bits:
                low = bits & -bits
                j = order[low.bit_length() - 1]
                assert finish[ranges[j][0]:ranges[j][1]].max() <= s + 1e-9, (problem.names[j], problem.names[i])
                bits ^= low


def test_one_veu_orders_everything_before_what_follows_it():
    problem, sched = _schedule("resnext-small", "wavefront", 1)
    order, anc = schedule_order([list(range(len(problem.rops)))], [sched])
    assert all(anc[k] == (1 << k) - 1 for k in range(len(order)))


def test_host_ops_and_segments_in_program_order():
    problem, sched = _schedule("nasnet-small", "wavefront", 2)
    n = len(problem.rops)
    order, anc = schedule_order(["host-a", list(range(n)), "host-b"], [sched])
    assert order[0] == "host-a" and order[-1] == "host-b" and len(order) == n + 2
    assert anc[0] == 0 and all(anc[k] & 1 for k in range(1, n + 2))  # the first host op is done before all
    assert anc[-1] == (1 << (n + 1)) - 1  # everything is done before the last host op


@pytest.mark.parametrize("seed", [0, 1])
def test_blocked_done_before_masks_match_the_direct_comparison(seed):
    """The blocked test (bounds per block of ops, entry by entry only for the ops between them)
    gives exactly ``done[j] <= start[k]`` on every vEU, over blocks of every kind: clocks that
    grow along the walk (an op done before all of a later block, after all of an earlier one)
    with jitter so that ops near a block's start are mixed."""
    from rammer.schedule.ordering import _MASK_BLOCK, _done_before_masks

    rng = np.random.default_rng(seed)
    n, veus = 2 * _MASK_BLOCK + 37, 9
    base = np.arange(n)[:, None] * 3
    done = np.where(rng.random((n, veus)) < 0.3, base + rng.integers(1, 12, (n, veus)), 0)
    done[np.arange(n), rng.integers(0, veus, n)] = base[:, 0] + 1  # every op runs somewhere
    start = base + rng.integers(-8, 8, (n, veus)).clip(-base, None)
    masks = _done_before_masks(done, start)
    for k in range(n):
        hits = np.all(done <= start[k], axis=1)
        hits[k] = False
        assert masks[k] == sum(1 << int(j) for j in np.flatnonzero(hits)), k
    assert 0 < sum(bin(m).count("1") for m in masks) < n * (n - 1) // 2  # neither empty nor trivial
