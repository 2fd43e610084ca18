"""The arena: one allocation for constants, inputs, intermediates and scratch.

Constants are placed first and never move.  Every other buffer gets an
offset in the *dynamic* region by a first-fit-decreasing-waste allocator that
walks the ops in order and reuses the memory of dead buffers.

Reuse must be safe under the schedule that runs the program, not only in
the order the planner walks: buffer ``X`` (written by op ``w``) may take the
memory of a dead buffer ``Y`` only if every op that touched ``Y`` is certain
to be done before ``w`` starts, so no extra dependency is needed.  The
compiler passes that relation from the compiled schedule (:mod:`.ordering`:
vEU program order plus barriers); without it, the default is "an ancestor
of ``w`` in the op graph (or before a host op that precedes ``w``)", which
is safe for any schedule.  The check is a bitset inclusion.

A buffer may also live *inside* another one: a Concat whose input buffer
is placed at its slice of the output (``op.extra["aliases"]``: (inner,
outer, element offset)), so the producer writes the output directly.  Such
a group is planned as its outermost buffer, live from the first write of any
member to the last use of any, and reusable memory must be safe for every
op that writes a member.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ops import CpuOp
from .views import ARENA_DTYPES, Buffer

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class ArenaPlan:
    const_bytes: int
    dynamic_bytes: int  # peak of the intermediate region (inputs, temps)
    scratch_offset: int  # start of the per-vEU scratch region
    total_bytes: int
    #: Sum of dynamic buffer sizes: what the region would need without reuse.
    unshared_bytes: int


def op_ancestors(ops: list[CpuOp]) -> list[int]:
    """Bit p of result[i]: op p must finish before op i starts (host ops join everything)."""
    writer: dict[int, int] = {}
    anc: list[int] = []
    joined = 0  # everything up to and including the latest host op
    for i, op in enumerate(ops):
        if op.host:
            acc = (1 << i) - 1
        else:
            acc = joined
            for b in op.reads:
                p = writer.get(b)
                if p is not None:
                    acc |= anc[p] | (1 << p)
        anc.append(acc)
        for b in op.writes:
            writer[b] = i
        if op.host:
            joined = acc | (1 << i)
    return anc


def alias_roots(ops: list[CpuOp]) -> dict[int, tuple[int, int]]:
    """Buffer -> (outermost buffer it lives in, element offset there), for aliased buffers only."""
    parent = {inner: (outer, off) for op in ops for inner, outer, off in op.extra.get("aliases", ())}
    roots: dict[int, tuple[int, int]] = {}
    for b in parent:
        root, off = b, 0
        while root in parent:
            root, step = parent[root]
            off += step
        roots[b] = (root, off)
    return roots


def plan(buffers: list[Buffer], ops: list[CpuOp], keep: set[int], scratch_bytes: int,
         ancestors: list[int] | None = None) -> ArenaPlan:
    """Place every buffer, walking ``ops`` in order; ``keep`` are buffers live to the end (graph
    outputs).  ``ancestors[i]``: bitmask of the ops certainly done before op i starts (default:
    its ancestors in the op graph, safe for any schedule; :mod:`.ordering` derives them from
    the compiled schedule)."""
    offset = 0
    for b in buffers:
        if b.kind == "const":
            b.byte_offset = offset
            offset += _align(b.nbytes)
    const_bytes = offset
    anc = op_ancestors(ops) if ancestors is None else ancestors
    roots = alias_roots(ops)

    def root(b: int) -> int:
        return roots[b][0] if b in roots else b

    keep = {root(b) for b in keep}
    users: dict[int, int] = {}
    first_write: dict[int, int] = {}
    last_use: dict[int, int] = {}
    #: Root -> AND of the ancestors of every op writing a member: memory reused
    #: for the group must be dead for all of them, not only the first writer.
    safe: dict[int, int] = {}
    for i, op in enumerate(ops):
        for b in op.writes:
            b = root(b)
            first_write.setdefault(b, i)
            users[b] = users.get(b, 0) | (1 << i)
            last_use[b] = i
            safe[b] = safe.get(b, anc[i]) & anc[i]
        for b in op.reads:
            b = root(b)
            users[b] = users.get(b, 0) | (1 << i)
            last_use[b] = i
    dynamic = [b for b in buffers if b.kind != "const" and b.id not in roots]
    for b in dynamic:
        if b.kind == "input" or b.id in keep:
            last_use[b.id] = len(ops) if b.id in keep else last_use.get(b.id, -1)
    free: list[list[int]] = []  # [offset, size, users mask]
    top = 0
    unshared = 0

    def allocate(b: Buffer, at: int, mask_ok: int) -> None:
        nonlocal top
        need = _align(b.nbytes)
        best = -1
        for k, (off, size, mask) in enumerate(free):
            if size >= need and mask & ~mask_ok == 0 and (best < 0 or size < free[best][1]):
                best = k
        if best >= 0:
            off, size, mask = free[best]
            b.byte_offset = const_bytes + off
            if size > need:
                free[best] = [off + need, size - need, mask]
            else:
                free.pop(best)
            return
        b.byte_offset = const_bytes + top
        top += need

    # Graph inputs are written before any op runs.
    releases: dict[int, list[Buffer]] = {}
    for b in dynamic:
        if b.kind == "input":
            allocate(b, -1, 0)
            unshared += _align(b.nbytes)
        end = last_use.get(b.id, -1)
        if end < len(ops) and b.id not in keep:
            releases.setdefault(max(end, first_write.get(b.id, end)), []).append(b)
    by_id = {b.id: b for b in dynamic}
    for i, op in enumerate(ops):
        for bid in op.writes:
            bid = root(bid)
            b = by_id.get(bid)
            if b is not None and b.byte_offset < 0 and first_write.get(bid) == i:
                allocate(b, i, safe.get(bid, anc[i]))
                unshared += _align(b.nbytes)
        for b in releases.get(i, ()):
            if b.byte_offset >= 0:
                free.append([b.byte_offset - const_bytes, _align(b.nbytes), users.get(b.id, 0)])
        _coalesce(free)
    # Buffers nobody writes (unused outputs of host ops...) still need a place.
    for b in dynamic:
        if b.byte_offset < 0:
            b.byte_offset = const_bytes + top
            top += _align(b.nbytes)
            unshared += _align(b.nbytes)
    for b, (r, off) in roots.items():
        buffers[b].byte_offset = buffers[r].byte_offset + off * ARENA_DTYPES[buffers[b].dtype]
    scratch_offset = const_bytes + top
    return ArenaPlan(const_bytes, top, scratch_offset, scratch_offset + _align(scratch_bytes), unshared)


def _coalesce(free: list[list[int]]) -> None:
    """Merge adjacent free blocks (their user masks merge too)."""
    if len(free) < 2:
        return
    free.sort()
    out = [free[0]]
    for off, size, mask in free[1:]:
        last = out[-1]
        if last[0] + last[1] == off:
            last[1] += size
            last[2] |= mask
        else:
            out.append([off, size, mask])
    free[:] = out
