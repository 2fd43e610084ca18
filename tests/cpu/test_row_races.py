"""The core race check (rammer.schedule.programs.check_races) on the cpu's row programs: the barriers of
a compiled program order every reuse of the arena, and a program stripped of its barriers is refused."""

from __future__ import annotations

import pytest

import rammer
from rammer import zoo
from rammer.backends.cpu.compiler import compile_program
from rammer.backends.cpu.graph_passes import prepare
from rammer.lower.operator import split_at_host
from rammer.pipeline import check_row_races
from rammer.schedule.programs import ProgramError
from rammer.schedule.rows import row_waits


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
def test_cpu_row_programs_are_race_free_and_refused_without_their_barriers(policy):
    compiled = compile_program(prepare(rammer.load(zoo.build("alexnet-small"))), num_veus=3, policy=policy)
    groups, buffers = split_at_host(compiled.lowered.ops), compiled.lowered.buffers
    rows = [row_waits(s) for s in compiled.schedules]
    check_row_races(groups, compiled.schedules, rows, buffers)
    assert any(w for seg in rows for prog in seg for w in prog)  # the program has cross-vEU waits to drop
    no_waits = [[[() for _ in prog] for prog in seg] for seg in rows]
    with pytest.raises(ProgramError, match="race"):
        check_row_races(groups, compiled.schedules, no_waits, buffers)
