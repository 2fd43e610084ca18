"""Must-fail mutations: the CUDA emulator (with the starvation sweep) must catch each of these
broken programs, so a passing emulation run means something.

- a removed ``__syncthreads``: wrong results (threads read shared memory not yet written);
- a wait count one too high: a deadlock, named (block, thread, counter) by the emulator;
- a wait count one too low: a real race, exposed by starving the producer (the sweep);
- two task rows swapped: wrong results;
- a ``__syncthreads`` under a thread-dependent branch: divergence, named.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from emu_helpers import compile_for, install_fake_cupy, matches, reference

from rammer.backends.gpu.emulation import Policy
from rammer.errors import RammerError

MODEL = "alexnet-small"


class Tables:
    """The persistent program's ``ptab`` read back: per block its segments, per segment its row
    ranges per rKernel, its signal flag and its waits ``(block, count, signals)``."""

    def __init__(self, program) -> None:
        self.program = program
        self.ptab = program.tables["ptab"].copy()
        self.blocks = program.blocks
        self.kernels = [k.name for k in program.kernels[:-1]]
        self.rec = 2 * len(self.kernels) + 3
        self.nseg = int(self.ptab[self.blocks])
        self.wait0 = self.blocks + 1 + self.nseg * self.rec
        assert (len(self.ptab) - self.wait0) % 3 == 0

    def record(self, seg: int) -> int:
        return self.blocks + 1 + seg * self.rec

    def waits(self):
        """``(consumer block, index of the wait in ptab)`` for every wait, in program order."""
        k = 2 * len(self.kernels)
        for b in range(self.blocks):
            for s in range(int(self.ptab[b]), int(self.ptab[b + 1])):
                r = self.record(s)
                for w in range(int(self.ptab[r + k + 1]), int(self.ptab[r + k + 2])):
                    yield b, self.wait0 + 3 * w

    def rows_of(self, kernel: str) -> list[int]:
        t = self.kernels.index(kernel)
        rows = []
        for s in range(self.nseg):
            r = self.record(s)
            rows += range(int(self.ptab[r + 2 * t]), int(self.ptab[r + 2 * t + 1]))
        return sorted(rows)


def _fresh(monkeypatch, **device):
    fake = install_fake_cupy(monkeypatch, **device)
    return fake, compile_for(MODEL, "cuda", "persistent")


def test_removed_syncthreads_gives_wrong_results(monkeypatch):
    _, compiled = _fresh(monkeypatch)
    exe = compiled.executable
    assert "__syncthreads();" in exe.source
    exe.source = exe.source.replace("__syncthreads();", "", 1)  # the first one: in an rKernel
    feeds, want = reference(MODEL, 1)
    assert not matches(compiled.run(feeds), want)


def test_barrier_under_a_thread_dependent_branch_is_named_divergence(monkeypatch):
    _, compiled = _fresh(monkeypatch)
    exe = compiled.executable
    exe.source = exe.source.replace("__syncthreads();", "if (threadIdx.x < 128) __syncthreads();", 1)
    line = exe.source[:exe.source.index("if (threadIdx.x < 128)")].count("\n") + 1
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match="divergence in block") as err:
        compiled.run(feeds)
    assert f"line {line}" in str(err.value) and "thread 128" in str(err.value)


def test_wait_count_one_too_high_is_a_deadlock_named_by_the_watchdog(monkeypatch):
    _, compiled = _fresh(monkeypatch)
    program = compiled.executable.program
    tables = Tables(program)
    ptab = tables.ptab
    # a wait for the producer's last signal: one more never comes in this launch
    consumer, at = next((b, i) for b, i in tables.waits() if ptab[i + 1] == ptab[i + 2])
    producer = int(ptab[at])
    ptab[at + 1] += 1
    program.tables["ptab"] = ptab
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match="deadlock") as err:
        compiled.run(feeds)
    assert f"block {consumer} thread 0 spins on counters[{producer}]" in str(err.value)


def test_wait_count_one_too_low_is_caught_by_the_starvation_sweep(monkeypatch):
    """With the producer's last signal not waited for, the consumer may read what the producer has
    not written yet.  Random and in-order block orders usually miss it; starving each block in
    turn (fresh feeds each run, so stale values from the previous run are wrong too) catches it.
    A wait that another wait implies (the consumer also waits for a block that waited for this
    producer) is no race when lowered, so the mutated wait is the first, in program order, whose
    producer, starved, exposes it; the sweep over every block must then name that producer first."""
    fake, compiled = _fresh(monkeypatch)
    program = compiled.executable.program
    tables = Tables(program)
    original = tables.ptab

    def mutated(at: int) -> np.ndarray:
        ptab = original.copy()
        ptab[at + 1] -= 1
        return ptab

    def wrong_when_starved(victim: int, run: int) -> bool:
        fake.policy = Policy("starve", victim=victim)
        feeds, want = reference(MODEL, 1 + run % 2)
        return not matches(compiled.run(feeds), want)

    at = None
    for run, (_, i) in enumerate((b, i) for b, i in tables.waits() if original[i + 1] == original[i + 2]):
        program.tables["ptab"] = mutated(i)
        compiled.executable._runner = None  # the runner copies the tables when it is built: build it again
        if wrong_when_starved(int(original[i]), run):
            at = i
            break
    assert at is not None, "no wait one too low was exposed by starving its producer"
    producer = int(original[at])
    caught = [victim for victim in range(producer + 1) if wrong_when_starved(victim, victim)]
    assert caught and caught[0] == producer, caught  # the sweep names the starved producer first


def test_two_task_rows_swapped_give_wrong_results(monkeypatch):
    _, compiled = _fresh(monkeypatch)
    program = compiled.executable.program
    tables = Tables(program)
    width = int(re.search(r"itab\[\(i \* (\d+)\)\]", compiled.executable.source).group(1))
    kernel = next(k for k in tables.kernels if len(tables.rows_of(k)) > 2 and k.startswith("conv"))
    rows = tables.rows_of(kernel)
    itab = program.tables["itab"].copy().reshape(-1, width)
    first = rows[0]
    # the last call of another conv layer (other arena pointers: x, w, bias, y): a later op
    last = max(r for r in rows if not np.array_equal(itab[r, 1:5], itab[first, 1:5]))
    itab[[first, last]] = itab[[last, first]]
    program.tables["itab"] = itab.ravel()
    feeds, want = reference(MODEL, 1)
    assert not matches(compiled.run(feeds), want)
