"""Barrier waits kept compactly (rammer.schedule.waits): the waits they stand for, in space linear in
rTasks + barriers on a vDevice with many vEUs, built into the per-barrier lists only when read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sched_util import dependency_violations, execute, zoo_graph

from rammer.schedule import build_problem, get_policy, verify
from rammer.schedule.waits import CompactWaits, compact_waits, stored_waits
from rammer.vdevice import get_preset


def test_each_barrier_waits_for_its_group_but_the_positions_it_skips_in_any_order():
    rng = np.random.default_rng(39)
    groups = [rng.integers(0, 1000, size=int(rng.integers(0, 9))) for _ in range(7)]
    barrier_group = rng.integers(0, len(groups), size=40).tolist()
    skips = [np.sort(rng.choice(groups[g].size, size=int(rng.integers(0, groups[g].size + 1)), replace=False))
             for g in barrier_group]
    want = [tuple(int(x) for j, x in enumerate(groups[g]) if j not in set(s.tolist()))
            for g, s in zip(barrier_group, skips)]
    held = compact_waits(groups, barrier_group, skips)
    assert held.tuples() == want
    assert len(held) == 40 and held.num_waits == sum(len(w) for w in want)
    order = rng.permutation(40)
    assert held.permuted(order).tuples() == [want[i] for i in order]
    flat, starts = held.permuted(order).arrays()
    assert [tuple(flat[a:b].tolist()) for a, b in zip(starts[:-1], starts[1:])] == [want[i] for i in order]


def test_permuting_gathers_in_chunks_and_keeps_the_narrow_positions(monkeypatch):
    import rammer.schedule.waits as waits
    monkeypatch.setattr(waits, "_GATHER_CHUNK", 5)  # many chunks, some barriers longer than one
    rng = np.random.default_rng(7)
    groups = [rng.integers(0, 10**6, size=int(rng.integers(1, 40))) for _ in range(5)]
    barrier_group = rng.integers(0, len(groups), size=60).tolist()
    skips = [np.sort(rng.choice(groups[g].size, size=int(rng.integers(0, groups[g].size + 1)), replace=False))
             for g in barrier_group]
    held = compact_waits(groups, barrier_group, skips)
    assert held.skip_positions.dtype == np.int16  # positions in groups of < 40 members
    order = rng.permutation(60)
    moved = held.permuted(order)
    assert moved.skip_positions.dtype == np.int16
    for new, old in enumerate(order):
        a, b = moved.skip_starts[new], moved.skip_starts[new + 1]
        assert moved.skip_positions[a:b].tolist() == skips[old].tolist()
    assert compact_waits([np.arange(40000)], [0], [np.array([39999])]).skip_positions.dtype == np.int32


def test_a_schedule_on_1472_veus_stores_its_waits_in_linear_space_and_they_order_every_dependency():
    graph = zoo_graph("resnext-small")
    # (The gc200 preset reads no exact waits: the skips are tested on a vDevice that does.)
    schedule = get_policy("wavefront").schedule(build_problem(graph, replace(get_preset("gc200"), exact_waits=True)))
    held = stored_waits(schedule)
    assert isinstance(held, CompactWaits)  # counting barriers did not build the lists
    assert schedule.num_barriers == len(held) > 1000
    stored = held.group_ids.size + held.skip_positions.size
    # Listed one by one the waits are ~40x more (119,760 here): each op's barriers share one group.
    assert stored <= 2 * (schedule.num_rtasks + schedule.num_barriers) and held.num_waits > 20 * stored
    assert held.skip_positions.dtype == np.int16  # positions in groups of at most 1,472 members
    flat, starts = schedule.barrier_wait_arrays()
    waits = schedule.barrier_waits  # built now
    assert [tuple(flat[a:b].tolist()) for a, b in zip(starts[:-1], starts[1:])] == waits
    assert len(flat) == held.num_waits
    verify(schedule, graph)
    start, finish = execute(schedule, np.random.default_rng(0).uniform(0.1, 10.0, schedule.num_rtasks))
    assert not dependency_violations(schedule, [op.preds for op in schedule.ops], start, finish)


def test_the_waits_list_once_built_is_the_schedules_own():
    schedule = get_policy("op-by-op").schedule(build_problem(zoo_graph("alexnet-small"), get_preset("v100")))
    count = schedule.num_barriers
    assert isinstance(stored_waits(schedule), CompactWaits)
    waits = schedule.barrier_waits
    assert schedule.barrier_waits is waits and len(waits) == count
    waits.append((0,))
    assert schedule.num_barriers == count + 1 and schedule.barrier_waits[-1] == (0,)
    schedule.barrier_waits = []
    assert schedule.num_barriers == 0 and schedule.barrier_wait_arrays()[0].size == 0


def test_the_ipu_compile_never_builds_the_wait_lists():
    # The ipu orders data by supersteps, not by the schedule's barriers: building 1,472 x 1,471 waits
    # per op there would bring back what the wait groups saved (98 M entries for the Caffe2 ResNet-50).
    import rammer
    import rammer.plugins
    import rammer.zoo as zoo

    registered = "ipu" not in rammer.plugins.backends()
    if registered:
        import rammer.backends.ipu as ipu

        rammer.plugins.register_plugin(ipu, "rammer-ipu-compact-waits-test")
    try:
        schedule = rammer.compile(zoo.build("resnext-small"), backend="ipu").executable.schedule
    finally:
        if registered:
            rammer.plugins.unregister_plugin("rammer-ipu-compact-waits-test")
    held = stored_waits(schedule)
    assert isinstance(held, CompactWaits) and held.num_waits > 100_000


def test_a_vdevice_that_reads_no_exact_waits_gets_whole_groups_and_the_same_placement():
    """``VDevice.exact_waits`` False (an IPU: every superstep ends in a chip-wide sync): the builder
    keeps no skips; each barrier waits for its whole group, a superset of the exact waits that orders
    nothing more, and the placement, the groups and the kernels are those of the exact schedule."""
    assert not get_preset("gc200").exact_waits and not get_preset("gc2").exact_waits
    assert all(get_preset(p).exact_waits for p in ("cpu", "v100", "a100", "h100", "mi250x", "cortex-m7"))
    graph = zoo_graph("resnext-small")
    exact_vd = replace(get_preset("gc200"), exact_waits=True)
    exact = get_policy("wavefront").schedule(build_problem(graph, exact_vd))
    whole = get_policy("wavefront").schedule(build_problem(graph, get_preset("gc200")))
    assert whole.programs == exact.programs
    assert [op.kernel.kernel_id for op in whole.ops] == [op.kernel.kernel_id for op in exact.ops]
    held_exact, held_whole = stored_waits(exact), stored_waits(whole)
    assert isinstance(held_exact, CompactWaits) and isinstance(held_whole, CompactWaits)
    assert held_exact.skip_positions.size > 1_000 and held_whole.skip_positions.size == 0
    assert np.array_equal(held_whole.group_ids, held_exact.group_ids)
    assert np.array_equal(held_whole.barrier_group, held_exact.barrier_group)
    assert all(set(w) <= set(v) for w, v in zip(exact.barrier_waits, whole.barrier_waits))
    verify(whole, graph)
    start, finish = execute(whole, np.random.default_rng(1).uniform(0.1, 10.0, whole.num_rtasks))
    assert not dependency_violations(whole, [op.preds for op in whole.ops], start, finish)
    # A cpu vDevice (exact waits, the default) keeps them: a barrier never lists its own vEU's rTasks.
    cpu = get_policy("wavefront").schedule(build_problem(graph, get_preset("cpu").with_veus(4)))
    locations = {e: v for v, prog in enumerate(cpu.programs) for e in prog}
    assert cpu.num_barriers and all(locations[w] != locations[cpu.num_rtasks + b]
                                    for b, ws in enumerate(cpu.barrier_waits) for w in ws)
