"""The race check's reduction (rammer.schedule.overlaps.conflict_pairs): per elementary interval of the
arena, each writer is checked only against the previous writer and the readers since it, each reader
only against the previous writer.  Each race below is caught only if the reduction keeps the pair
that is unordered; the passing programs need transitivity through a third block."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sched_util import happens_before

from rammer.schedule.overlaps import conflict_pairs
from rammer.schedule.programs import Call, ProgramError, Signal, Step, Wait, check_races


def _w(name: str, span: tuple[int, int] = (0, 8), op: int = -1) -> Call:
    return Call(name, 0, (), (), (span,), op)


def _r(name: str, span: tuple[int, int] = (0, 8), op: int = -1) -> Call:
    return Call(name, 0, (), (span,), (), op)


def test_two_unordered_writers_are_a_race():
    # w1 then a reader on block 1 (ordered), and w2 on block 2 ordered after the reader's block
    # only up to before the reader: w1 and w2 are unordered.
    programs: list[list[Step]] = [[_w("w1"), Signal()], [Wait(0, 1), _r("r"), Signal()], [_w("w2")]]
    with pytest.raises(ProgramError, match="race: w1 .* w2|race: w2 .* w1"):
        check_races(programs)


def test_a_reader_unordered_with_an_earlier_writer_is_a_race():
    programs: list[list[Step]] = [[_w("w1"), Signal(), _w("w0", (100, 4))], [Wait(0, 1), _r("r1"), _r("r2", (4, 8))],
                                  [Wait(0, 1), _r("late", (6, 1))]]
    check_races(programs)  # w1 before both readers, and r2 reads [4, 12) after w1's [0, 8)
    programs[2] = [_r("late", (6, 1))]
    with pytest.raises(ProgramError, match="race: w1 rTask 0 on block 0 and late"):
        check_races(programs)


def test_a_writer_unordered_with_an_earlier_reader_is_a_race_though_the_readers_writer_is_ordered():
    # w1 -> r (block 1) and w1 -> w2 (block 2) are ordered, r and w2 are not: a write after a read.
    ordered: list[list[Step]] = [[_w("w1"), Signal()], [Wait(0, 1), _r("r"), Signal()],
                                 [Wait(1, 1), _w("w2")]]
    check_races(ordered)  # w2 knows w1 only through block 1: transitivity
    unordered = [ordered[0], ordered[1], [Wait(0, 1), _w("w2")]]
    with pytest.raises(ProgramError, match="race: r rTask 0 on block 1 and w2"):
        check_races(unordered)


def test_one_reader_among_many_unordered_with_the_next_writer_is_a_race():
    # Readers on blocks 1-4 after w1; w2 on block 5 waits for all of them but block 3.
    programs: list[list[Step]] = [[_w("w1"), Signal()]]
    programs += [[Wait(0, 1), _r(f"r{b}"), Signal()] for b in range(1, 5)]
    programs.append([*(Wait(b, 1) for b in (1, 2, 4)), _w("w2")])
    with pytest.raises(ProgramError, match="race: r3 rTask 0 on block 3 and w2"):
        check_races(programs)
    programs[5].insert(0, Wait(3, 1))
    check_races(programs)


def test_an_operator_across_blocks_is_one_access():
    # Operator 7 writes [0, 8) from blocks 0 and 1 (its calls are not ordered against each other);
    # the reader on block 2 must have seen both blocks' signals.
    programs: list[list[Step]] = [[_w("op7", (0, 4), op=7), Signal()], [_w("op7", (4, 4), op=7), Signal()],
                                  [Wait(0, 1), _r("r", (0, 8))]]
    with pytest.raises(ProgramError, match="race: op7 .* r rTask"):
        check_races(programs)
    programs[2].insert(0, Wait(1, 1))
    check_races(programs)


def test_conflict_pairs_are_linear_in_accesses_to_one_region():
    # 1,000 groups writing then reading one region in turn: all pairs would be ~500,000.
    n = 1000
    start, length = np.zeros(2 * n, np.int64), np.full(2 * n, 16, np.int64)
    group = np.repeat(np.arange(n), 2)
    writes = np.tile([True, False], n)
    rank = np.arange(n)[::-1].copy()  # any order: the pairs follow it
    a, z = conflict_pairs(start, length, group, writes, rank)
    assert a.size == n - 1
    assert (rank[a] < rank[z]).all()
    assert set(zip(a.tolist(), z.tolist())) == {(g + 1, g) for g in range(n - 1)}


def _random_operator_programs(rng: random.Random) -> list[list[Step]]:
    """Random programs where some calls belong to operators spread over several blocks; a block
    waits only for lower-numbered blocks' signals that are sent, so none deadlocks."""
    blocks = rng.randint(2, 4)
    programs: list[list[Step]] = []
    for b in range(blocks):
        steps: list[Step] = []
        for i in range(rng.randint(2, 12)):
            r = rng.random()
            sent = [sum(isinstance(s, Signal) for s in p) for p in programs]
            if r < 0.5:
                span = ((rng.randint(0, 10), rng.randint(1, 4)),)
                op = rng.choice([-1, -1, 0, 1, 2])
                writes = rng.random() < 0.5
                steps.append(Call("k", 10 * b + i, (), () if writes else span, span if writes else (), op))
            elif r < 0.75 or not any(sent):
                steps.append(Signal())
            else:
                u = rng.choice([u for u in range(b) if sent[u]])
                steps.append(Wait(u, rng.randint(1, sent[u])))
        programs.append(steps)
    return programs


def _groups_brute_force(programs: list[list[Step]]) -> str:
    """'race' or 'ok' by all pairs of groups (an operator's calls, or one call) over an explicit
    happens-before graph: two groups that touch one float (one writing) must be ordered call by
    call, every call of one before every call of the other.  Programs that do not deadlock only."""
    reach = happens_before(programs)

    groups: dict[object, list[tuple[tuple[int, int], Call]]] = {}
    for b, steps in enumerate(programs):
        for i, s in enumerate(steps):
            if isinstance(s, Call):
                groups.setdefault(s.op if s.op >= 0 else ("call", b, i), []).append(((b, i), s))
    after = {n: reach(n) for g in groups.values() for n, _ in g}

    def floats(g: list[tuple[tuple[int, int], Call]], field: str) -> set[int]:
        return {x for _, c in g for s, n in getattr(c, field) for x in range(s, s + n)}

    listed = list(groups.values())
    for x, g1 in enumerate(listed):
        for g2 in listed[x + 1:]:
            w1, w2 = floats(g1, "writes"), floats(g2, "writes")
            if not (w1 & (w2 | floats(g2, "reads")) or w2 & floats(g1, "reads")):
                continue
            before = all(n2 in after[n1] for n1, _ in g1 for n2, _ in g2)
            later = all(n1 in after[n2] for n1, _ in g1 for n2, _ in g2)
            if not (before or later):
                return "race"
    return "ok"


def test_check_races_with_operators_agrees_with_all_pairs_of_groups():
    rng = random.Random(40)
    seen = {"ok": 0, "race": 0}
    for _ in range(300):
        programs = _random_operator_programs(rng)
        want = _groups_brute_force(programs)
        try:
            check_races(programs)
            got = "ok"
        except ProgramError as exc:
            assert "deadlock" not in str(exc)
            got = "race"
        assert got == want, programs
        seen[got] += 1
    assert min(seen.values()) >= 20, seen
