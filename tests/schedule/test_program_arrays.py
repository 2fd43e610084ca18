"""The array paths of a GPU compile (issue 40 item 3) say exactly what the step-by-step ones say:
the schedule JSON built per part is ``Schedule.to_json``'s text byte for byte; the step index
``from_schedule`` makes from its arrays is the one read from its steps; the race check reads every
distinct range tuple of an operator's calls, not only the first."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.plugins import get_backend
from rammer.schedule import build_problem, get_policy
from rammer.schedule import programs as sp
from rammer.schedule.records import schedule_json, write_schedule_json
from rammer.vdevice import get_preset


def _plain(schedule, summary=None) -> str:
    return json.dumps(schedule.to_dict(summary), separators=(",", ":"))


@pytest.fixture(scope="module")
def gpu_program():
    """A cuda program of a small zoo model (its schedule has per-rTask tiles and arena offsets),
    and the block programs as ``from_schedule`` returned them."""
    from rammer.backends.gpu import compiler
    from rammer.backends.gpu import program as gp

    be = get_backend("cuda", compile_only=True)
    graph = be.prepare_graph(zoo_graph("resnext-small")).graph
    seen = {}
    original = gp.from_schedule

    def spy(schedule, calls):
        seen["programs"] = original(schedule, calls)
        return seen["programs"]

    gp.from_schedule = spy
    try:
        prog = compiler.compile_program(graph, be, be.vdevice("a100"))
    finally:
        gp.from_schedule = original
    return prog, seen["programs"]


def test_gpu_schedule_json_is_to_json_byte_for_byte(gpu_program, tmp_path):
    schedule = gpu_program[0].schedule
    assert schedule.offsets and any("rtasks" in op for op in schedule.to_dict()["operators"])
    assert schedule_json(schedule) == _plain(schedule)
    assert schedule_json(schedule, {"makespan_us": 1.5, "note": "é"}) == _plain(schedule, {"makespan_us": 1.5,
                                                                                           "note": "é"})
    write_schedule_json(schedule, str(tmp_path / "a.json"))
    schedule.to_json(str(tmp_path / "b.json"))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
def test_core_schedule_json_is_to_json_byte_for_byte(policy):
    graph = zoo_graph("nasnet-small")
    schedule = get_policy(policy).schedule(build_problem(graph, get_preset("v100").with_veus(8)))
    schedule.place({t: 64 * k for k, t in enumerate(sorted(graph.value_info))})
    assert schedule_json(schedule) == _plain(schedule)
    # A summary naming a field the writer fills in itself: the plain path, same text.
    assert schedule_json(schedule, {"num_rtasks": -1}) == _plain(schedule, {"num_rtasks": -1})


def test_from_schedule_step_index_is_the_steps_own(gpu_program):
    programs = gpu_program[1]
    made = programs.steps_index
    read = sp.step_index([list(p) for p in programs])
    assert made is not None and len(made.kinds) == len(read.kinds) == len(programs)
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(made.kinds, read.kinds))
    assert np.array_equal(made.wait_pairs, read.wait_pairs) and made.wait_pairs.shape[0] > 0


def test_race_through_a_later_range_tuple_of_an_operator_is_caught():
    # Operator 0's two calls on block 0 carry different reads tuples; only the second one's range
    # overlaps what operator 1 writes on block 1, with nothing ordering them.
    op0 = [sp.Call("k", 0, (), reads=((0, 4),), writes=((100, 4),), op=0),
           sp.Call("k", 1, (), reads=((8, 4),), writes=((104, 4),), op=0)]
    op1 = [sp.Call("k", 0, (), reads=((200, 4),), writes=((8, 4),), op=1)]
    with pytest.raises(sp.ProgramError, match="race"):
        sp.check_races([op0, op1])
    # Ordered by a signal and a wait, the same calls pass.
    sp.check_races([[*op0, sp.Signal()], [sp.Wait(0, 1), *op1]])


def test_schedule_json_keeps_percent_signs_in_operator_names():
    # The programs' text is one %-format per program: an operator name's % must come out as it is.
    import dataclasses

    graph = zoo_graph("nasnet-small")
    schedule = get_policy("wavefront").schedule(build_problem(graph, get_preset("v100").with_veus(4)))
    renamed = [dataclasses.replace(op, name=f"{op.name}%d%%s{{%}}") for op in schedule.ops]
    odd = dataclasses.replace(schedule, ops=renamed)
    assert schedule_json(odd) == _plain(odd) and "%d%%s{%}" in schedule_json(odd)


def test_schedule_json_is_written_in_parts(gpu_program, tmp_path):
    # The writer never makes the whole text one string (unet-seg-b8's is 238 MB: one string and its
    # copies cost 1.3 s of CPU): it writes the parts, whose concatenation is the text.
    from rammer.schedule.records import schedule_json_parts

    schedule = gpu_program[0].schedule
    parts = schedule_json_parts(schedule)
    assert len(parts) > 2 * len(schedule.ops) and "".join(parts) == _plain(schedule)
    assert max(map(len, parts)) < len("".join(parts)) / 2
    write_schedule_json(schedule, str(tmp_path / "a.json"))
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == _plain(schedule)
