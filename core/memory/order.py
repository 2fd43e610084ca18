"""An op order that keeps few bytes live, for a backend that runs its ops one after another (one core,
no rTask schedule): among the ops ready to run, the one after which the fewest bytes are live.

Ops are :class:`~rammer.memory.MemoryOp` s (buffer ids read and written); ``nbytes`` gives each
buffer's size.  ``initial`` buffers are live before the first op (the inputs), ``keep`` ones to the
end (the outputs).  :func:`least_live_order` keeps the greedy order only when its peak
(:func:`live_bytes`) is lower than the given order's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .arena import MemoryOp


def live_bytes(ops: Sequence[MemoryOp], order: Sequence[int], nbytes: Mapping[int, int], initial: Collection[int],
               keep: Collection[int]) -> tuple[int, dict[int, int]]:
    """The peak of the bytes live while each op runs (no fragmentation) when the ops run in ``order``,
    and those bytes per op index."""
    last_use: dict[int, int] = {}
    for pos, i in enumerate(order):
        for b in ops[i].reads:
            last_use[b] = pos
    live = set(initial)
    peak, per_op = 0, {}
    for pos, i in enumerate(order):
        live.update(ops[i].writes)
        now = sum(nbytes[b] for b in live)
        per_op[i] = now
        peak = max(peak, now)
        live = {b for b in live if last_use.get(b, len(order)) > pos or b in keep}
    return peak, per_op


def greedy_order(ops: Sequence[MemoryOp], nbytes: Mapping[int, int], initial: Collection[int]) -> list[int]:
    """Repeatedly the ready op (everything it reads written, or initial) that adds the fewest bytes
    (what it writes less what it is the last reader of); ties: the earlier op."""
    produced = set(initial)
    readers: dict[int, int] = {}
    for op in ops:
        for b in op.reads:
            readers[b] = readers.get(b, 0) + 1
    remaining = list(range(len(ops)))
    order: list[int] = []
    while remaining:
        ready = [i for i in remaining if all(b in produced for b in ops[i].reads)]

        def added(i: int) -> int:
            freed = sum(nbytes[b] for b in set(ops[i].reads) if readers[b] == 1)
            return sum(nbytes[b] for b in ops[i].writes) - freed

        best = min(ready, key=lambda i: (added(i), i))
        order.append(best)
        remaining.remove(best)
        produced.update(ops[best].writes)
        for b in ops[best].reads:
            readers[b] -= 1
    return order


def least_live_order(ops: Sequence[MemoryOp], nbytes: Mapping[int, int], initial: Collection[int],
                     keep: Collection[int]) -> list[int]:
    """The given order (``range(len(ops))``, which must be valid) or :func:`greedy_order`, whichever has
    the lower peak of live bytes (the given one on a tie)."""
    original = list(range(len(ops)))
    greedy = greedy_order(ops, nbytes, initial)
    return min((original, greedy), key=lambda o: live_bytes(ops, o, nbytes, initial, keep)[0])
