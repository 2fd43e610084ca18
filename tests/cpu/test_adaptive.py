"""The lone caller's choice between the whole program and a 1-vEU lane."""

from __future__ import annotations

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.backends.cpu.adaptive import FULL, LANE, MAX_PROBE, LaunchChooser


def _drive(chooser: LaunchChooser, cost: dict[str, float], launches: int, lane_ready: bool = True) -> dict[str, int]:
    used = {FULL: 0, LANE: 0}
    for _ in range(launches):
        v = chooser.choose(lane_ready)
        used[v] += 1
        chooser.record(v, cost[v])
    return used


def test_quiet_machine_stays_on_the_whole_program_and_never_wants_a_lane():
    c = LaunchChooser()
    used = _drive(c, {FULL: 1.0, LANE: 1.6}, 500, lane_ready=False)
    assert used == {FULL: 500, LANE: 0} and not c.lane_wanted


def test_slowed_whole_program_asks_for_a_lane_and_moves_to_it():
    c = LaunchChooser()
    _drive(c, {FULL: 1.0, LANE: 1.6}, 40, lane_ready=False)
    _drive(c, {FULL: 5.0, LANE: 1.6}, 40, lane_ready=False)  # a core is taken
    assert c.lane_wanted
    used = _drive(c, {FULL: 5.0, LANE: 1.6}, 200)
    assert c.current == LANE and used[LANE] > 150


def test_back_to_the_whole_program_when_the_cores_are_free_again_and_probes_get_rare():
    c = LaunchChooser()
    _drive(c, {FULL: 5.0, LANE: 1.6}, 100)
    assert c.current == LANE
    _drive(c, {FULL: 1.0, LANE: 1.6}, 300)
    assert c.current == FULL
    used = _drive(c, {FULL: 1.0, LANE: 1.6}, 4000)
    assert used[LANE] < 4000 / 50 and c.interval == MAX_PROBE


@pytest.mark.slow
def test_adaptive_launches_give_the_same_answers():
    graph = rammer.zoo.build("nasnet-small")
    model = rammer.compile(graph, backend="cpu", veus=2)
    want = rammer.compile(graph, backend="reference").run(model.random_feeds(3))
    exe = model.executable
    exe._build_solo_lane()  # as if the cores had been shared
    feeds = model.random_feeds(3)
    seen = set()
    for _ in range(40):
        variant = exe._chooser.choose(True)
        seen.add(variant)
        out = exe._solo_lane._run_here(feeds) if variant == LANE else exe._run_here(feeds)
        exe._chooser.record(variant, 1.0 if variant == FULL else 0.5)
        for name, w in want.items():
            np.testing.assert_allclose(out[name], w, rtol=1e-3, atol=1e-4)
    assert seen == {FULL, LANE} and exe._solo_lane.program.num_veus == 1
    # the lone caller's lane is not probed for the GIL: it releases it like the whole program
    lane = exe._solo_lane
    assert lane._driver == lane._driver_releasing_gil and not lane._lane_probing
