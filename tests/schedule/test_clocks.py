"""The vector-clock engine (rammer.schedule.clocks) against a brute-force happens-before: random block
programs of calls, signals and waits, checked by check_races, and the schedule clocks that verify and
schedule_order read."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sched_util import happens_before, zoo_graph

from rammer.schedule import clocks
from rammer.schedule.clocks import SIGNAL, WAIT, Clocks, Deadlock, program_clocks
from rammer.schedule.programs import Call, ProgramError, Signal, Step, Wait, check_races


def _random_programs(rng: random.Random) -> list[list[Step]]:
    blocks = rng.randint(2, 4)
    programs: list[list[Step]] = []
    for b in range(blocks):
        steps: list[Step] = []
        for i in range(rng.randint(1, 10)):
            r = rng.random()
            if r < 0.45:
                span = ((rng.randint(0, 12), rng.randint(1, 4)),)
                writes = rng.random() < 0.5
                steps.append(Call("k", 10 * b + i, (), () if writes else span, span if writes else ()))
            elif r < 0.7:
                steps.append(Signal())
            else:
                steps.append(Wait(rng.randrange(blocks), rng.randint(0, 3)))
        programs.append(steps)
    return programs


def _brute_force(programs: list[list[Step]]) -> str:
    """'deadlock', 'race' or 'ok', from an explicit happens-before graph."""
    nb = len(programs)
    pos, sent = [0] * nb, [0] * nb
    moved = True
    while moved:
        moved = False
        for b, steps in enumerate(programs):
            while pos[b] < len(steps):
                s = steps[pos[b]]
                if isinstance(s, Wait) and sent[s.block] < s.count:
                    break
                sent[b] += isinstance(s, Signal)
                pos[b] += 1
                moved = True
    if any(pos[b] < len(p) for b, p in enumerate(programs)):
        return "deadlock"
    nodes = [(b, i) for b, p in enumerate(programs) for i in range(len(p))]

    calls = [(n, programs[n[0]][n[1]]) for n in nodes if isinstance(programs[n[0]][n[1]], Call)]
    reach = happens_before(programs)
    after = {n: reach(n) for n, _ in calls}
    for x, (nx, cx) in enumerate(calls):
        for ny, cy in calls[x + 1:]:
            if nx[0] == ny[0]:
                continue
            touch = any(s1 < s2 + n2 and s2 < s1 + n1 for w in (True, False)
                        for s1, n1 in (cx.writes if w else cx.reads) for s2, n2 in cy.writes + (cy.reads if w else ()))
            if touch and ny not in after[nx] and nx not in after[ny]:
                return "race"
    return "ok"


@pytest.mark.parametrize("path", ["python", "numba"])
def test_check_races_agrees_with_a_brute_force_happens_before(path, monkeypatch):
    # The walk runs as Python on small programs and compiled on large ones: both must agree.
    monkeypatch.setattr(clocks, "LARGE_WALK", 0 if path == "numba" else 1 << 62)
    rng = random.Random(7)
    outcomes = {"ok": 0, "race": 0, "deadlock": 0}
    for _ in range(400):
        programs = _random_programs(rng)
        want = _brute_force(programs)
        try:
            check_races(programs)
            got = "ok"
        except ProgramError as exc:
            got = "deadlock" if "deadlock" in str(exc) else "race"
        assert got == want, programs
        outcomes[want] += 1
    assert min(outcomes.values()) >= 20, outcomes  # every outcome exercised


def test_clocks_of_a_two_block_handshake():
    # block 0: signal, wait (1, 1), mark; block 1: wait (0, 1), signal, mark
    kinds = np.array([SIGNAL, WAIT, 2, WAIT, SIGNAL, 2], np.int8)
    result = program_clocks(np.array([0, 3, 6]), kinds, np.array([-1, 0, -1, 1, -1, -1]), np.array([0, 1, 2]),
                            np.array([1, 0]), np.array([1, 1]))
    assert isinstance(result, Clocks)
    # the marks: block 0 knows its own signal and block 1's; block 1 knows both too
    assert result.before(np.array([2, 5]), np.array([0, 1])).tolist() == [[1, 1], [1, 1]]
    stuck = program_clocks(np.array([0, 1, 2]), np.array([WAIT, WAIT], np.int8), np.array([0, 1]),
                           np.array([0, 1, 2]), np.array([1, 0]), np.array([1, 1]))
    assert isinstance(stuck, Deadlock) and set(stuck.stuck) == {0, 1}


def test_a_wait_for_a_missing_block_is_named():
    with pytest.raises(ProgramError, match="block 1 waits for block 5, which does not exist"):
        check_races([[Signal()], [Wait(5, 1)]])


def test_order_through_a_third_block_is_seen_and_its_absence_is_a_race():
    write, read = Call("w", 0, (), (), ((0, 4),)), Call("r", 0, (), ((0, 4),), ())
    relay = [[write, Signal()], [Wait(0, 1), Signal()], [Wait(1, 1), read]]
    check_races(relay)  # block 2 knows block 0's signal only through block 1
    with pytest.raises(ProgramError, match="race"):
        check_races([[write, Signal()], [Signal()], [Wait(1, 1), read]])


@pytest.mark.parametrize("model,veus", [("nasnet-small", 5), ("resnext-small", 3)])
def test_min_before_is_the_minimum_of_the_clocks_before(model, veus, monkeypatch):
    """What every rTask of an op knows (the planner's ``start``), from the distinct group rows of
    its rTasks, equals the elementwise minimum of their clocks, for every op of a schedule."""
    from rammer.schedule import build_problem, get_policy
    from rammer.schedule.clocks import schedule_clocks
    from rammer.vdevice import get_preset

    problem = build_problem(zoo_graph(model), get_preset("v100").with_veus(veus))
    sched = get_policy("wavefront").schedule(problem)
    sc = schedule_clocks(sched)
    assert sched.num_barriers > 0
    monkeypatch.setattr(clocks, "SMALL_MIN_BEFORE", 0)  # the grouping, however small the op
    for op in sched.ops:
        rtasks = np.arange(op.first_rtask, op.first_rtask + op.kernel.num_rtasks)
        assert np.array_equal(sc.min_before_rtasks(rtasks), sc.before_rtasks(rtasks).min(axis=0)), op.name
