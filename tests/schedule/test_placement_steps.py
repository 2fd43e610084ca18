"""The wavefront placer's compiled steps (core/schedule/placement_steps.py) give exactly the schedule of
its numpy path: the same barriers, skips, vEUs and start times, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.schedule import build_problem, get_policy, placement_steps, wavefront
from rammer.vdevice import get_preset


def _both(problem, monkeypatch):
    monkeypatch.setattr(wavefront, "LARGE_PLACEMENT", 10 ** 18)  # the numpy path
    plain = get_policy("wavefront").schedule(problem)
    monkeypatch.setattr(wavefront, "LARGE_PLACEMENT", 0)  # every op through the compiled steps
    compiled = get_policy("wavefront").schedule(problem)
    return plain, compiled


@pytest.mark.parametrize("model,veus", [("resnext-small", 7), ("resnext-small", 80), ("nasnet-small", 13),
                                        ("nasnet-small", 108), ("lstm-tc-small", 1), ("lstm-tc-small", 40),
                                        ("alexnet-small", 3)])
def test_compiled_placement_is_the_numpy_placement(model, veus, monkeypatch):
    problem = build_problem(zoo_graph(model), get_preset("v100").with_veus(veus))
    plain, compiled = _both(problem, monkeypatch)
    assert compiled.to_dict() == plain.to_dict()
    assert plain.num_barriers > 0 or veus == 1


@pytest.mark.parametrize("seed", range(8))
def test_steps_as_python_match_the_numpy_forms(seed):
    # The steps' own loops (as plain Python, what numba compiles) against the numpy path's pieces;
    # times on a grid of 0.5 so that starts tie across vEUs (seed 7: a zero duration, all on one vEU).
    rng = np.random.default_rng(seed)
    duration = 0.0 if seed == 7 else 0.5
    v, m = int(rng.integers(2, 30)), int(rng.integers(1, 12))
    cols = rng.permutation(v)[:m].astype(np.int64)
    known = rng.integers(-1, 4, (v, v)).astype(np.int64)
    req_pos = rng.integers(0, 4, m).astype(np.int64)
    req_fin = rng.integers(0, 5, m) * 0.5
    avail = rng.integers(0, 6, v) * 0.5
    missing, need, est = placement_steps.requirement_state(avail, known, cols, req_pos, req_fin, 0.25, large=False)
    want = known[:, cols] < req_pos
    want[cols, np.arange(m)] = False
    assert np.array_equal(missing, want) and np.array_equal(need, want.any(axis=1))
    if need.any():
        ready = wavefront._latest_missed(want, req_fin)
        want_est = avail.copy()
        want_est[need] = np.maximum(avail[need], ready[need]) + 0.25
        assert np.array_equal(est, want_est)
    n = int(rng.integers(1, 3 * v))
    cand = rng.permutation(v)[:min(n, v)].astype(np.int64)
    known_after = known.copy()
    veu_of, starts, used, last_r, skip, lo, hi = placement_steps.place_rtasks(
        est, cand, n, duration, need, missing, known_after, cols, req_pos, large=False)
    want_veus, want_starts = wavefront.run_order(est[cand], cand, n, duration)
    assert np.array_equal(veu_of, want_veus) and np.array_equal(starts, want_starts)
    first, last = wavefront._first_and_last(want_veus)
    assert used.tolist() == first and last_r.tolist() == last
    for i, u in enumerate(used.tolist()):
        if need[u]:
            assert skip[lo[i]:hi[i]].tolist() == np.flatnonzero(~missing[u]).tolist()
            assert np.array_equal(known_after[u, cols], np.where(missing[u], req_pos, known[u, cols]))
        else:
            assert lo[i] == -1 and np.array_equal(known_after[u], known[u])


def test_the_skips_kept_are_their_own_arrays():
    # The schedule keeps each barrier's skips: they must not be views of a count x m buffer (on an
    # IPU's 1,472 vEUs that kept 17 MB per op alive: swin's placement ran out of memory).
    v, m = 12, 5
    known = np.full((v, v), -1, np.int64)
    cols = np.arange(m, dtype=np.int64)
    req_pos = np.zeros(m, np.int64)
    missing, need, est = placement_steps.requirement_state(np.zeros(v), known, cols, req_pos, np.ones(m), 0.5,
                                                           large=False)
    *_, skip, lo, hi = placement_steps.place_rtasks(est, np.arange(v, dtype=np.int64), v, 1.0, need, missing,
                                                    known, cols, req_pos, large=False)
    assert skip.base is None and skip.size == int((hi - lo)[lo >= 0].sum())


@pytest.mark.parametrize("exact_waits", [True, False])
def test_on_a_vdevice_wider_than_the_compiled_steps_pay_for_the_numpy_path_places_the_same(exact_waits, monkeypatch):
    # On the ipu's 1,472 tiles the numpy path keeps numba's runtime (~120 MB resident) out of the
    # process; the schedule is the compiled steps' (also when the vDevice reads no exact waits and
    # the numpy path works out no skips).
    from dataclasses import replace

    from rammer.schedule.schedule import ScheduleBuilder

    vd = replace(get_preset("gc200"), exact_waits=exact_waits)
    problem = build_problem(zoo_graph("resnext-small"), vd)
    monkeypatch.setattr(wavefront, "LARGE_PLACEMENT", len(problem.rops) * 512)  # a large problem from 512 vEUs
    assert not wavefront._Placer(problem, ScheduleBuilder(problem, "t", 0.5)).compiled
    narrower = build_problem(zoo_graph("resnext-small"), vd.with_veus(wavefront.COMPILED_PLACEMENT_MAX_VEUS))
    assert wavefront._Placer(narrower, ScheduleBuilder(narrower, "t", 0.5)).compiled
    plain = get_policy("wavefront").schedule(problem)
    monkeypatch.setattr(wavefront, "COMPILED_PLACEMENT_MAX_VEUS", 10 ** 9)
    compiled = get_policy("wavefront").schedule(problem)
    assert compiled.to_dict() == plain.to_dict() and plain.num_barriers > 0
