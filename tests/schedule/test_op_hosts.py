"""verify's per-op hosts (the vEUs of each op's rTasks and the last or first position on each),
found with one sort over every op, against the direct per-op form they replaced."""

from __future__ import annotations

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.schedule import build_problem, get_policy
from rammer.schedule.verify import _op_hosts
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
        want, got = _per_op(schedule, loc_veu, loc_pos, first), _op_hosts(schedule, loc_veu, loc_pos, first)
        assert len(got) == len(want) == len(schedule.ops)
        for (wv, wp), (gv, gp) in zip(want, got):
            assert np.array_equal(wv, gv) and np.array_equal(wp, gp)
