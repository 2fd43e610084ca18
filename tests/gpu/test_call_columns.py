"""The GPU compiler hands the core its calls as columns (rammer.schedule.steps.CallColumns): the block
programs made from them are the programs made from one Call per rTask, step for step; the race check
and the entry kernel read the columns without making a step, and give what they give on the steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import rammer
from rammer import zoo
from rammer.backends.gpu import compiler, entry
from rammer.backends.gpu import program as gp
from rammer.plugins import get_backend


@pytest.fixture(scope="module")
def compiled():
    """resnext-small for cuda: the schedule and call columns from_schedule got, and what the entry
    kernel was given (its rKernels and block threads)."""
    be = get_backend("cuda", compile_only=True)
    graph = be.prepare_graph(rammer.load(zoo.build("resnext-small"))).graph
    seen: dict = {}
    original, original_entry = gp.from_schedule, entry.persistent_kernel

    def spy(schedule, calls):
        seen["schedule"], seen["columns"] = schedule, calls
        return original(schedule, calls)

    def entry_spy(name, kernels, programs, threads, check=True, index=None):
        seen["kernels"], seen["threads"], seen["built"] = kernels, threads, programs._make_steps is None
        out = original_entry(name, kernels, programs, threads, check, index)
        seen["built_after"] = programs._make_steps is None
        seen["tables"] = out[1]
        return out

    gp.from_schedule, entry.persistent_kernel = spy, entry_spy
    try:
        compiler.compile_program(graph, be, be.vdevice("a100"))
    finally:
        gp.from_schedule, entry.persistent_kernel = original, original_entry
    return seen


def _one_call_each(columns: gp.CallColumns) -> dict[int, gp.Call]:
    return {r: columns.call(r) for r in range(len(columns))}


def test_columns_give_the_programs_of_one_call_per_rtask(compiled):
    schedule, columns = compiled["schedule"], compiled["columns"]
    assert isinstance(columns, gp.CallColumns) and len(columns) == schedule.num_rtasks
    lazy = gp.from_schedule(schedule, columns)
    eager = gp.from_schedule(schedule, _one_call_each(columns))
    assert lazy._make_steps is not None and len(lazy) == len(eager)  # no step made for its length
    assert list(lazy) == list(eager) and lazy == eager
    assert all(np.array_equal(a, b) for a, b in zip(lazy.steps_index.kinds, eager.steps_index.kinds))


def test_race_check_and_entry_read_the_columns_and_match_the_steps(compiled):
    schedule, columns = compiled["schedule"], compiled["columns"]
    assert not compiled["built"] and not compiled["built_after"]  # the compile made no step
    eager = gp.from_schedule(schedule, _one_call_each(columns))
    _, tables = entry.persistent_kernel("rammer_main", compiled["kernels"], [list(p) for p in eager],
                                        compiled["threads"])
    assert tables.keys() == compiled["tables"].keys()
    for k in tables:
        assert np.array_equal(tables[k], compiled["tables"][k]) and tables[k].dtype == compiled["tables"][k].dtype


def test_race_check_on_columns_sees_their_operators():
    # Every call its own group (op -1): the rTasks of one operator on different blocks write the same
    # output range with nothing between them, a race on the columns as on the steps.
    be = get_backend("cuda", compile_only=True)
    graph = be.prepare_graph(rammer.load(zoo.build("alexnet-small"))).graph
    seen: dict = {}
    original = gp.from_schedule

    def spy(schedule, calls):
        seen["schedule"], seen["columns"] = schedule, calls
        return original(schedule, calls)

    gp.from_schedule = spy
    try:
        compiler.compile_program(graph, be, be.vdevice("a100"))
    finally:
        gp.from_schedule = original
    schedule, columns = seen["schedule"], seen["columns"]
    gp.check_races(gp.from_schedule(schedule, columns))
    alone = dataclasses.replace(columns, op=np.full_like(columns.op, -1))
    lazy = gp.from_schedule(schedule, alone)
    with pytest.raises(gp.ProgramError, match="race") as on_columns:
        gp.check_races(lazy, lazy.steps_index)
    assert lazy._make_steps is not None
    with pytest.raises(gp.ProgramError, match="race") as on_steps:
        gp.check_races([list(p) for p in gp.from_schedule(schedule, _one_call_each(alone))])
    assert str(on_columns.value) == str(on_steps.value)


def test_race_check_in_small_passes_gives_the_same_answers(compiled, monkeypatch):
    from rammer.schedule import programs as sp

    schedule, columns = compiled["schedule"], compiled["columns"]
    alone = dataclasses.replace(columns, op=np.full_like(columns.op, -1))
    with pytest.raises(gp.ProgramError, match="race") as one_pass:
        gp.check_races(gp.from_schedule(schedule, alone))
    monkeypatch.setattr(sp, "_CLOCKS_PER_PASS", 1)  # one group's first calls per pass
    gp.check_races(gp.from_schedule(schedule, columns))
    with pytest.raises(gp.ProgramError, match="race") as many_passes:
        gp.check_races(gp.from_schedule(schedule, alone))
    assert str(one_pass.value) == str(many_passes.value)


def test_call_table_rows_are_their_tuples_converted(compiled):
    # column_arrays converts each distinct tuple once and gathers it per row: every row of itab/ftab
    # is its own tuple's integers (int32) and floats (float32), as one row at a time would give.
    table = entry._CallTable(compiled["kernels"])
    rng = np.random.default_rng(5)
    names = table.names
    rows, tuples, kernel_of, keys = 300, [], [], []
    for name in names:
        for _ in range(3):
            tuples.append((name, tuple(float(rng.integers(-9, 9)) if p.pointer or p.dtype != "float"
                                       else float(rng.standard_normal()) for p in table.kernels[name].params)))
    pick = rng.integers(0, len(tuples), rows)
    kernel_of = np.array([table.index[tuples[k][0]] for k in pick], np.int64)
    keys = pick.astype(np.int64)
    rtasks = rng.integers(0, 50, rows).astype(np.int64)
    got = table.column_arrays(kernel_of, keys, rtasks, lambda i: tuples[int(pick[i])][1], lambda i: 0,
                              lambda k: tuples[k][1])
    itab, ftab = got["itab"].reshape(rows, table.wi), got["ftab"].reshape(rows, table.wf)
    for r, k in enumerate(pick.tolist()):
        name, args = tuples[k]
        ints = [args[i] for i in table._int_at[name]]
        flts = [args[i] for i in table._flt_at[name]]
        assert itab[r, 0] == rtasks[r] and itab[r, 1:1 + len(ints)].tolist() == [int(x) for x in ints]
        assert ftab[r, :len(flts)].tolist() == np.float32(flts).tolist()
    big = (names[0], tuple(2.0 ** 40 if p.pointer or p.dtype != "float" else 0.0
                           for p in table.kernels[names[0]].params))
    tuples.append(big)
    keys2 = np.r_[keys, len(tuples) - 1]
    with pytest.raises(entry.CallArgumentRangeError, match="does not fit"):
        table.column_arrays(np.r_[kernel_of, table.index[names[0]]], keys2, np.r_[rtasks, 0],
                            lambda i: tuples[int(keys2[i])][1], lambda i: 7, lambda k: tuples[k][1])
