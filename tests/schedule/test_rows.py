"""A schedule as per-vEU row programs (core/schedule/rows.py): barriers as waits on row counts,
per-vEU scratch."""

from __future__ import annotations

import pytest
from sched_util import zoo_graph

from rammer.schedule import build_problem, get_policy
from rammer.schedule.rows import RowWait, place_scratch, row_waits, veu_scratch
from rammer.vdevice import get_preset


@pytest.mark.parametrize("model,policy", [("nasnet-small", "wavefront"), ("lstm-tc-small", "op-by-op")])
def test_each_wait_covers_exactly_the_rows_its_barrier_needs(model, policy):
    sched = get_policy(policy).schedule(build_problem(zoo_graph(model), get_preset("v100").with_veus(4)))
    waits = row_waits(sched)
    n_rt = sched.num_rtasks
    # the row at which each rTask sits on its vEU (barriers take one row per wait)
    row_of: dict[int, tuple[int, int]] = {}
    for v, prog in enumerate(sched.programs):
        row = 0
        for q, e in enumerate(prog):
            if e < n_rt:
                assert waits[v][q] == ()
                row_of[e] = (v, row)
                row += 1
            else:
                row += len(waits[v][q])
    for v, prog in enumerate(sched.programs):
        for q, e in enumerate(prog):
            if e < n_rt:
                continue
            got = {w.veu: w.rows for w in waits[v][q]}
            assert v not in got and len(got) == len(waits[v][q])
            need: dict[int, int] = {}
            for t in sched.barrier_waits[e - n_rt]:
                u, r = row_of[t]
                if u != v:
                    need[u] = max(need.get(u, 0), r + 1)
            # waiting for n rows covers the awaited rTask's row; never more than its position allows
            assert set(got) == set(need)
            for u, rows in got.items():
                assert rows >= need[u]
                last = max(q2 for q2, e2 in enumerate(sched.programs[u]) if e2 in sched.barrier_waits[e - n_rt])
                done = sum(1 if e2 < n_rt else len(waits[u][k]) for k, e2 in enumerate(sched.programs[u][:last + 1]))
                assert rows == done


def test_scratch_per_veu_is_its_largest_rtask_and_regions_follow_each_other():
    sched = get_policy("wavefront").schedule(build_problem(zoo_graph("alexnet-small"),
                                                           get_preset("v100").with_veus(3)))
    need = veu_scratch([sched], lambda k, op: 10 * (op + 1), 3)
    for v, prog in enumerate(sched.programs):
        ops = [int(sched.rtask_op[e]) for e in prog if e < sched.num_rtasks]
        assert need[v] == (10 * (max(ops) + 1) if ops else 0)
    starts, end = place_scratch([5, 0, 17], 100, 16)
    assert starts == [100, 116, 116] and end == 148
    assert RowWait(1, 3) == RowWait(1, 3)
