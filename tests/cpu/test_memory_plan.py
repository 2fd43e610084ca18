"""Memory reuse against the synchronisation the task table actually contains.

The planner reuses a dead buffer's memory once the compiled schedule has
certainly finished with it (core/schedule/ordering.py, core/memory/arena.py).  Here that is
checked independently of the planner: vector clocks are rebuilt from the
emitted rows (kernel rows in program order, barrier rows waiting on another
vEU's row count), and for every two buffers whose bytes overlap, every op
touching one must be done before any op touching the other starts.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.backends.cpu.compiler import compile_program
from rammer.backends.cpu.driver import BARRIER
from rammer.backends.cpu.planner import cpu_aliases
from rammer.memory import alias_roots


def _row_clocks(T: np.ndarray, starts, ends) -> dict[int, np.ndarray]:
    """Vector clock (rows known complete per vEU) before every row of one segment."""
    veus = len(starts)
    clocks: dict[int, np.ndarray] = {}
    pos = [int(s) for s in starts]
    current = [np.zeros(veus, np.int64) for _ in range(veus)]
    progress = True
    while progress:
        progress = False
        for v in range(veus):
            while pos[v] < ends[v]:
                r = pos[v]
                clock = current[v].copy()
                clock[v] = r - starts[v]
                if T[r, 0] == BARRIER:
                    u, count = int(T[r, 2]), int(T[r, 3])
                    if count > 0:
                        last = int(starts[u]) + count - 1  # the waited vEU's row `count - 1`
                        if last not in clocks:
                            break
                        after = clocks[last].copy()
                        after[u] = count
                        np.maximum(clock, after, out=clock)
                clocks[r] = clock
                current[v] = clock.copy()
                current[v][v] = r - starts[v] + 1
                pos[v] += 1
                progress = True
    assert all(pos[v] == ends[v] for v in range(veus)), "the barrier rows deadlock"
    return clocks


@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("name", ["nasnet-small", "resnext-small", "lstm-tc-small", "deepspeech2-small",
                                  "seq2seq-small", "alexnet-small", "nasnet"])
def test_overlapping_buffers_are_ordered_by_the_barriers(name, veus):
    comp = compile_program(rammer.load(rammer.zoo.build(name)), veus)
    segs = comp.tables.segments
    assert len(segs) == 1  # the zoo runs without fallback
    seg = segs[0]
    ops = [op for op in comp.lowered.ops if not op.host]
    T = comp.tables.T
    clocks = _row_clocks(T, seg.starts, seg.ends)
    big = np.iinfo(np.int64).max // 2
    done = np.zeros((len(ops), veus), np.int64)
    start = np.full((len(ops), veus), big, np.int64)
    for r, i in seg.row_op.items():
        v = int(np.searchsorted(seg.ends, r, side="right"))
        done[i, v] = max(done[i, v], r - seg.starts[v] + 1)
        np.minimum(start[i], clocks[r], out=start[i])

    def before(a: set[int], b: set[int]) -> bool:
        return all(np.all(done[i] <= start[j]) for i in a for j in b if i != j)

    roots = alias_roots(cpu_aliases(ops, comp.lowered.buffers))
    touch: dict[int, set[int]] = {}
    for i, op in enumerate(ops):
        for b in (*op.reads, *op.writes):
            touch.setdefault(roots[b][0] if b in roots else b, set()).add(i)
    bufs = [b for b in comp.lowered.buffers if b.id in touch and b.kind not in ("const", "input")
            and b.id not in roots]
    overlaps = 0
    for x, y in itertools.combinations(bufs, 2):
        if x.byte_offset < y.byte_offset + y.nbytes and y.byte_offset < x.byte_offset + x.nbytes:
            overlaps += 1
            assert before(touch[x.id], touch[y.id]) or before(touch[y.id], touch[x.id]), (
                f"{name}: buffers {x.id} and {y.id} share memory but their ops are not ordered")
    assert overlaps > 0  # memory is reused at all


def test_nasnet_arena_stays_near_its_live_set():
    # Reuse by the schedule's order: with one vEU the arena is about the live set (3.3 MB), not the
    # 40 MB that reuse safe for any schedule needed.
    comp = compile_program(rammer.load(rammer.zoo.build("nasnet")), 1)
    assert comp.program.report["arena"]["peak_intermediate_bytes"] < 8e6
