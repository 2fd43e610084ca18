"""The hardware-neutral arena planner (core/memory/arena.py) on plain buffers and ops."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rammer.errors import CompileError
from rammer.memory import plan_arena


@dataclass
class Buf:
    id: int
    nbytes: int
    kind: str = "temp"
    byte_offset: int = -1


@dataclass
class Op:
    reads: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()
    host: bool = False
    extra: dict = field(default_factory=dict)


def _overlap(a: Buf, b: Buf) -> bool:
    return a.byte_offset < b.byte_offset + b.nbytes and b.byte_offset < a.byte_offset + a.nbytes


def _chain():
    """x -> a -> b -> c -> y: each intermediate dies once the next op has read it."""
    bufs = [Buf(0, 100, "input"), Buf(1, 100), Buf(2, 100), Buf(3, 100), Buf(4, 100), Buf(5, 64, "const")]
    ops = [Op((0, 5), (1,)), Op((1,), (2,)), Op((2,), (3,)), Op((3,), (4,))]
    return bufs, ops


def test_constants_first_then_reuse_along_a_chain():
    bufs, ops = _chain()
    p = plan_arena(bufs, ops, keep={4}, scratch_bytes=10)
    assert bufs[5].byte_offset == 0 and p.const_bytes == 64
    assert all(b.byte_offset >= 64 and b.byte_offset % 64 == 0 for b in bufs[:5])
    assert not _overlap(bufs[1], bufs[2]) and not _overlap(bufs[2], bufs[3])  # read and written together
    assert _overlap(bufs[1], bufs[3])  # a is dead (and done) when c is written: its memory is reused
    assert p.unshared_bytes == 5 * 128 and p.dynamic_bytes < p.unshared_bytes
    assert p.scratch_offset == p.const_bytes + p.dynamic_bytes and p.total_bytes == p.scratch_offset + 64


def test_alignment_is_a_parameter():
    bufs, ops = _chain()
    p = plan_arena(bufs, ops, keep={4}, alignment=256)
    assert all(b.byte_offset % 256 == 0 for b in bufs) and p.const_bytes == 256


def test_done_before_limits_reuse():
    bufs, ops = _chain()
    # nothing is known to be done before anything: no memory may be reused
    plan_arena(bufs, ops, keep={4}, ancestors=[0, 0, 0, 0])
    temps = bufs[:5]
    assert not any(_overlap(a, b) for i, a in enumerate(temps) for b in temps[i + 1:])


def test_constants_in_their_own_space_with_a_capacity():
    bufs, ops = _chain()
    def space(b):
        return "flash" if b.kind == "const" else "sram"

    p = plan_arena(bufs, ops, keep={4}, space_of=space, main_space="sram", alignment={"sram": 8, "flash": 4},
                   capacity={"sram": 1000, "flash": 64})
    assert bufs[5].byte_offset == 0 and p.spaces["flash"].const_bytes == 64
    assert p.const_bytes == 0 and min(b.byte_offset for b in bufs[:5]) == 0  # SRAM holds no constants
    assert p.spaces["sram"].dynamic_bytes == p.dynamic_bytes
    with pytest.raises(CompileError, match="memory space 'sram'.*the device has 150"):
        plan_arena(*_chain(), keep={4}, space_of=space, main_space="sram", capacity={"sram": 150})


def test_an_aliased_buffer_lives_inside_its_outer_one():
    # Concat(a, b) -> c with a and b written in place at their slices of c
    bufs = [Buf(0, 16, "input"), Buf(1, 40), Buf(2, 40), Buf(3, 80), Buf(4, 80)]
    ops = [Op((0,), (1,)), Op((0,), (2,)), Op((1, 2), (3,)), Op((3,), (4,))]
    plan_arena(bufs, ops, keep={4}, aliases=[(1, 3, 0), (2, 3, 40)])
    assert bufs[1].byte_offset == bufs[3].byte_offset and bufs[2].byte_offset == bufs[3].byte_offset + 40
    assert not _overlap(bufs[3], bufs[4])


def test_host_ops_order_everything():
    bufs, ops = _chain()
    ops[2] = Op((2,), (3,), host=True)
    plan_arena(bufs, ops, keep={4})
    assert _overlap(bufs[1], bufs[3])
