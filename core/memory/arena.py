"""The arena planner: one placement for constants, inputs, intermediates and scratch.

Hardware-neutral: it sees *buffers* (an id, a kind, a size in bytes, the
byte offset it sets) and a walk of *ops* that read and write buffers by id
(:class:`PlannedBuffer`, :class:`MemoryOp`).  A backend passes its own
objects when they have those attributes, plus its parameters: the
alignment, and which memory space each buffer lives in (a GPU's global
memory, an IPU tile's SRAM, an MCU's SRAM with its constants in flash).
Every space is an address range of its own, starting at 0; a backend with
one arena (the CPU) puts every buffer in one space.

In each space, constants are placed first and never move.  Every other
buffer gets an offset in the space's *dynamic* region by a
first-fit-decreasing-waste allocator that walks the ops in order and
reuses the memory of dead buffers.

Reuse must be safe under the schedule that runs the program, not only in
the order the planner walks: buffer ``X`` (written by op ``w``) may take the
memory of a dead buffer ``Y`` only if every op that touched ``Y`` is certain
to be done before ``w`` starts, so no extra dependency is needed.  The
caller passes that relation (``ancestors``, e.g. from the compiled schedule
by :func:`rammer.schedule.ordering.schedule_order`: vEU program order plus
barriers); without it, the default is "an ancestor of ``w`` in the op graph
(or before a host op that precedes ``w``)", which is safe for any schedule.
The check is a bitset inclusion.

A buffer may also live *inside* another one (``aliases``: (inner, outer,
byte offset)): a Concat whose input buffer is placed at its slice of the
output, so the producer writes the output directly.  Such a group is
planned as its outermost buffer, live from the first write of any member to
the last use of any, and reusable memory must be safe for every op that
writes a member.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import CompileError

#: The space of every buffer unless the backend says otherwise.
GLOBAL = "global"

#: (inner buffer, outer buffer, byte offset of the inner one in the outer one).
Alias = tuple[int, int, int]


class PlannedBuffer(Protocol):
    """What the planner needs of a buffer.  ``id`` is its index in the buffer list."""

    id: int
    #: ``"const"`` (placed first, never reused), ``"input"`` (written before the first op)
    #: or anything else (an intermediate, live from its first write to its last use).
    kind: str
    #: Set by the planner: the offset in the buffer's memory space (-1 before).
    byte_offset: int

    @property
    def nbytes(self) -> int: ...


class MemoryOp(Protocol):
    """What the planner needs of an op: the buffers it reads and writes (by id), and whether it
    is a host op (run between compiled segments: everything before it is done)."""

    @property
    def reads(self) -> Sequence[int]: ...

    @property
    def writes(self) -> Sequence[int]: ...

    @property
    def host(self) -> bool: ...


@dataclass
class ArenaBuffer:
    """A :class:`PlannedBuffer` for a backend whose own records are not buffers (tensors of a
    graph, an mcu model's activations): the planner is called on these directly."""

    id: int
    kind: str
    nbytes: int
    byte_offset: int = -1
    #: The tensor it holds, for the backend's own bookkeeping.
    name: str = ""


@dataclass(frozen=True)
class ArenaOp:
    """A :class:`MemoryOp` made of its buffer ids, for a backend whose operators are not op records."""

    reads: tuple[int, ...]
    writes: tuple[int, ...]
    host: bool = False


@dataclass
class SpacePlan:
    """One memory space's layout: constants, then the dynamic region."""

    const_bytes: int = 0
    #: Peak of the dynamic region (inputs, intermediates).
    dynamic_bytes: int = 0
    #: Sum of dynamic buffer sizes: what the region would need without reuse.
    unshared_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.const_bytes + self.dynamic_bytes


@dataclass
class ArenaPlan:
    """The layout of the main space (the one with the scratch region), and of every space."""

    const_bytes: int
    dynamic_bytes: int  # peak of the intermediate region (inputs, temps)
    scratch_offset: int  # start of the per-vEU scratch region
    total_bytes: int
    #: Sum of dynamic buffer sizes: what the region would need without reuse.
    unshared_bytes: int
    spaces: dict[str, SpacePlan] = field(default_factory=dict)


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def op_ancestors(ops: Sequence[MemoryOp]) -> list[int]:
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


def alias_roots(aliases: Iterable[Alias]) -> dict[int, tuple[int, int]]:
    """Buffer -> (outermost buffer it lives in, byte offset there), for aliased buffers only."""
    parent = {inner: (outer, off) for inner, outer, off in aliases}
    roots: dict[int, tuple[int, int]] = {}
    for b in parent:
        root, off = b, 0
        while root in parent:
            root, step = parent[root]
            off += step
        roots[b] = (root, off)
    return roots


def plan_arena(buffers: Sequence[PlannedBuffer], ops: Sequence[MemoryOp], keep: Iterable[int],
               scratch_bytes: int = 0, ancestors: Sequence[int] | None = None, *,
               aliases: Iterable[Alias] = (), alignment: int | Mapping[str, int] = 64,
               space_of: Callable[[PlannedBuffer], str] | None = None, main_space: str = GLOBAL,
               capacity: Mapping[str, int] | None = None) -> ArenaPlan:
    """Place every buffer (sets its ``byte_offset``), walking ``ops`` in order.

    ``keep``: buffers live to the end (graph outputs).  ``ancestors[i]``: bitmask of the ops
    certainly done before op i starts (default: its ancestors in the op graph, safe for any
    schedule).  ``alignment``: of every buffer, or per memory space.  ``space_of(buffer)``: its
    memory space (default: every buffer in ``main_space``); the scratch region
    (``scratch_bytes``) follows the dynamic region of ``main_space``.  ``capacity``: bytes per
    space; a plan that needs more raises a :class:`~rammer.errors.CompileError` naming the space.
    """
    def align_of(space: str) -> int:
        return alignment if isinstance(alignment, int) else int(alignment.get(space, 64))

    space = [space_of(b) if space_of is not None else main_space for b in buffers]
    spaces: dict[str, SpacePlan] = {main_space: SpacePlan()}
    for s in space:
        spaces.setdefault(s, SpacePlan())
    for b in buffers:
        if b.kind == "const":
            sp = spaces[space[b.id]]
            b.byte_offset = sp.const_bytes
            sp.const_bytes += align_up(b.nbytes, align_of(space[b.id]))
    anc = op_ancestors(ops) if ancestors is None else ancestors
    roots = alias_roots(aliases)

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
    free: dict[str, list[list[int]]] = {s: [] for s in spaces}  # per space: [offset, size, users mask]
    top: dict[str, int] = {s: 0 for s in spaces}

    def allocate(b: PlannedBuffer, mask_ok: int) -> None:
        s = space[b.id]
        base = spaces[s].const_bytes
        need = align_up(b.nbytes, align_of(s))
        spaces[s].unshared_bytes += need
        blocks = free[s]
        best = -1
        for k, (off, size, mask) in enumerate(blocks):
            if size >= need and mask & ~mask_ok == 0 and (best < 0 or size < blocks[best][1]):
                best = k
        if best >= 0:
            off, size, mask = blocks[best]
            b.byte_offset = base + off
            if size > need:
                blocks[best] = [off + need, size - need, mask]
            else:
                blocks.pop(best)
            return
        b.byte_offset = base + top[s]
        top[s] += need

    # Graph inputs are written before any op runs.
    releases: dict[int, list[PlannedBuffer]] = {}
    for b in dynamic:
        if b.kind == "input":
            allocate(b, 0)
        end = last_use.get(b.id, -1)
        if end < len(ops) and b.id not in keep:
            releases.setdefault(max(end, first_write.get(b.id, end)), []).append(b)
    by_id = {b.id: b for b in dynamic}
    for i, op in enumerate(ops):
        for bid in op.writes:
            bid = root(bid)
            b = by_id.get(bid)
            if b is not None and b.byte_offset < 0 and first_write.get(bid) == i:
                allocate(b, safe.get(bid, anc[i]))
        for b in releases.get(i, ()):
            if b.byte_offset >= 0:
                s = space[b.id]
                free[s].append([b.byte_offset - spaces[s].const_bytes, align_up(b.nbytes, align_of(s)),
                                users.get(b.id, 0)])
        for blocks in free.values():
            _coalesce(blocks)
    # Buffers nobody writes (unused outputs of host ops...) still need a place.
    for b in dynamic:
        if b.byte_offset < 0:
            s = space[b.id]
            need = align_up(b.nbytes, align_of(s))
            b.byte_offset = spaces[s].const_bytes + top[s]
            top[s] += need
            spaces[s].unshared_bytes += need
    for b, (r, off) in roots.items():
        buffers[b].byte_offset = buffers[r].byte_offset + off
    for s, sp in spaces.items():
        sp.dynamic_bytes = top[s]
    main = spaces[main_space]
    scratch_offset = main.const_bytes + main.dynamic_bytes
    total = scratch_offset + align_up(scratch_bytes, align_of(main_space))
    for s, limit in (capacity or {}).items():
        sp = spaces.get(s, SpacePlan())
        need = total if s == main_space else sp.total_bytes
        if need > limit:
            raise CompileError(
                f"the model needs {need} bytes of memory space '{s}' ({sp.const_bytes} of constants, "
                f"{need - sp.const_bytes} of tensors and scratch) but the device has {limit}; use a smaller "
                f"model or batch, or a device with more '{s}' memory")
    return ArenaPlan(main.const_bytes, main.dynamic_bytes, scratch_offset, total, main.unshared_bytes, spaces)


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
