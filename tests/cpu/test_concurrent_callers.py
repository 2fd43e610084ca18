"""One compiled model called from several threads: right answers, and callers beyond the first run on lanes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rammer
import rammer.zoo


def test_concurrent_callers_get_right_answers_on_lanes():
    graph = rammer.zoo.build("nasnet-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    errors = _call_from_threads(graph, model, model.run, threads=4, runs=12)
    assert not errors, errors[:5]
    exe = model.executable
    assert 1 <= exe._lane_count <= 4  # lanes were used (up to two per core; the whole program is left alone
    # while callers come and go)
    assert all(lane.program.num_veus == 1 for lane in list(_drain(exe._lanes)))
    assert exe._inside == []  # every caller counted out again


@pytest.mark.parametrize("hold", [True, False])
def test_short_lane_launches_keep_the_gil_and_stay_right(monkeypatch, hold):
    """A lane probes its first runs holding the GIL and keeps holding it when they are short
    (every run still right); with the threshold at 0 every probed lane releases it.  The threads
    call the lanes directly (whether callers overlap in ``run`` is up to the scheduler)."""
    from rammer.backends.cpu import runtime

    monkeypatch.setattr(runtime, "LANE_GIL_MAX_S", 1.0 if hold else 0.0)
    if hold:
        # and no single probe run ends the probing (a first run in a fresh clone, loading a native image or
        # touching cold pages, can pass LANE_GIL_RELEASE_S; that rule has its own test below)
        monkeypatch.setattr(runtime, "LANE_GIL_RELEASE_S", 60.0)
    graph = rammer.zoo.build("lstm-tc-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    errors = _call_from_threads(graph, model, lambda f: model.executable._run_on_lane(model.check_feeds(f)),
                                threads=3, runs=40)
    assert not errors, errors[:5]
    lanes = _drain(model.executable._lanes)
    assert lanes
    probed = [lane for lane in lanes if not lane._lane_probing]
    # (a lane from the compile cache runs its native image's drivers, one compiled here numba's)
    holding = [lane for lane in lanes if lane._driver == lane._driver_holding_gil]
    assert probed
    if hold:
        assert holding == lanes
    else:
        assert not [lane for lane in probed if lane in holding]


def test_a_long_probe_run_releases_the_gil_at_once(monkeypatch):
    from rammer.backends.cpu import runtime

    monkeypatch.setattr(runtime, "LANE_GIL_RELEASE_S", 0.0)  # every run counts as long
    graph = rammer.zoo.build("lstm-tc-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    lane = model.executable._new_lane()
    # a new lane probes holding the GIL (numba's run_holding_gil, or its native image's)
    assert lane._driver == lane._driver_holding_gil != lane._driver_releasing_gil
    model.executable._lanes.put(lane)
    model.executable._lane_count += 1
    model.executable._run_on_lane(model.check_feeds(model.random_feeds(0)))
    assert lane._driver == lane._driver_releasing_gil and not lane._lane_probing and len(lane._lane_times) == 1


def _call_from_threads(graph, model, call, threads: int, runs: int) -> list[str]:
    """``threads`` threads, started together, each ``call`` ``runs`` times on feeds drawn from
    ``threads`` seeds in turn; the outputs that differ from the reference backend's on ``graph``."""
    ref = rammer.compile(graph, backend="reference")
    feeds = [model.random_feeds(seed) for seed in range(threads)]
    want = [ref.run(f) for f in feeds]
    barrier = threading.Barrier(threads)
    errors: list[str] = []

    def work(i: int) -> None:
        barrier.wait()
        for k in range(runs):
            j = (i + k) % threads
            got = call(feeds[j])
            for name, w in want[j].items():
                if not np.allclose(got[name], w, rtol=1e-3, atol=1e-4):
                    errors.append(f"thread {i} run {k} output {name}")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors


def _drain(q):
    items = []
    while not q.empty():
        items.append(q.get_nowait())
    for it in items:
        q.put(it)
    return items
