"""The cpu compiler's vEU count from the cost model (``scheduling.choose_veus``): a program whose
estimated work is too small for a second vEU's barriers and worker launch runs on one vEU when the
caller names no count; a count the caller names is kept; the compile cache keeps the two apart."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import model, node, rand

import rammer
from rammer.backends.cpu.scheduling import BARRIER_WAIT_US, LAUNCH_WAKE_US, VeuChoice, default_veus

two_cores = pytest.mark.skipif(default_veus() < 2, reason="needs 2 CPU cores this process may use (and numba threads)")


def _tiny():
    x = rand(8, 16)
    nodes = [node("Add", ["x", "b"], ["t"]), node("Tanh", ["t"], ["u"]), node("MatMul", ["u", "w"], ["y"])]
    return model(nodes, {"x": x}, ["y"], {"b": rand(16, seed=1), "w": rand(16, 16, seed=2)}), {"x": x}


def _large():
    x = rand(512, 512)
    nodes = [node("MatMul", ["x", "w"], ["t"]), node("Relu", ["t"], ["u"]), node("MatMul", ["u", "w"], ["y"])]
    return model(nodes, {"x": x}, ["y"], {"w": rand(512, 512, seed=3) / 20}), {"x": x}


def _run(m, feeds, **options):
    compiled = rammer.compile(m, backend="cpu", **options)
    want = rammer.compile(m, backend="reference")(feeds)["y"]
    np.testing.assert_allclose(compiled(feeds)["y"], want, rtol=1e-4, atol=1e-4)
    return compiled.executable.program


def test_the_rule_compares_the_estimated_gain_with_the_synchronisation():
    few = VeuChoice(offered=2, veus=2, work_us=30.0, span_us=15.0, barriers=2, segments=1)
    assert few.gain_us == 15.0 and few.sync_us == 2 * BARRIER_WAIT_US + LAUNCH_WAKE_US
    many = VeuChoice(offered=2, veus=2, work_us=3000.0, span_us=1500.0, barriers=20, segments=1)
    assert many.gain_us > many.sync_us
    assert set(few.to_dict()) >= {"work_us", "span_us", "barriers", "gain_us", "sync_us", "veus"}


@two_cores
def test_tiny_program_runs_on_one_veu_without_a_count():
    m, feeds = _tiny()
    program = _run(m, feeds, cache=False)
    choice = program.report["veu_choice"]
    assert program.num_veus == 1 and program.report["veus"] == 1
    assert choice["offered"] == default_veus() and choice["veus"] == 1
    assert choice["gain_us"] <= choice["sync_us"]


@two_cores
def test_a_count_the_caller_names_is_kept():
    m, feeds = _tiny()
    program = _run(m, feeds, veus=2, cache=False)
    assert program.num_veus == 2 and "veu_choice" not in program.report


@two_cores
def test_large_program_keeps_every_veu():
    m, feeds = _large()
    program = _run(m, feeds, cache=False)
    assert program.num_veus == default_veus(), program.report["veu_choice"]
    assert program.report["veu_choice"]["gain_us"] > program.report["veu_choice"]["sync_us"]


@two_cores
def test_cache_keeps_the_chosen_and_the_named_count_apart(tmp_path):
    m, feeds = _tiny()
    first = _run(m, feeds, cache_dir=str(tmp_path))
    named = _run(m, feeds, cache_dir=str(tmp_path), veus=2)
    again = _run(m, feeds, cache_dir=str(tmp_path))
    assert (first.num_veus, named.num_veus, again.num_veus) == (1, 2, 1)
