"""One compiled model called from several threads: right answers, and callers beyond the first run on lanes."""

from __future__ import annotations

import threading

import numpy as np

import rammer
import rammer.zoo


def test_concurrent_callers_get_right_answers_on_lanes():
    graph = rammer.zoo.build("nasnet-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    ref = rammer.compile(graph, backend="reference")
    feeds = [model.random_feeds(seed) for seed in range(4)]
    want = [ref.run(f) for f in feeds]
    barrier = threading.Barrier(4)
    errors: list[str] = []

    def work(i: int) -> None:
        barrier.wait()
        for k in range(12):
            j = (i + k) % 4
            got = model.run(feeds[j])
            for name, w in want[j].items():
                if not np.allclose(got[name], w, rtol=1e-3, atol=1e-4):
                    errors.append(f"thread {i} run {k} output {name}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    exe = model.executable
    assert 1 <= exe._lane_count <= 3  # lanes were used: 4 callers, one of them on the whole program
    assert all(lane.program.num_veus == 1 for lane in list(_drain(exe._lanes)))
    assert exe._callers == 0


def _drain(q):
    items = []
    while not q.empty():
        items.append(q.get_nowait())
    for it in items:
        q.put(it)
    return items
