"""The pairs of accesses a race check must prove ordered, reduced by transitivity: near-linear in the
accesses, where all pairs of accesses to one memory region are quadratic in them.

An *access* is a group (an operator, or one call) reading or writing ranges of an arena.  Two groups
*conflict* on a range both touch where one of them writes.  A program is race-free when every two
conflicting groups are ordered by happens-before.  Happens-before is transitive, so within one
*elementary interval* of the arena (a stretch no range starts or ends inside), walked in a total
order that extends happens-before, it is enough to check

* each writer against the previous writer and against every reader since that writer, and
* each reader against the previous writer;

the other conflicting pairs follow: the writers form a chain, and each reader sits between the
writer before it and the writer after it.  Every pair checked does conflict, so a pair found
unordered is a race in any case; and when two accesses are not ordered, the one later in the total
order is not before the earlier one, so checking each pair in the total order's direction alone
is exact.  :func:`conflict_pairs` returns those pairs (once each, over all intervals).
"""

from __future__ import annotations

import numpy as np

__all__ = ["conflict_pairs"]


def _merged(start: np.ndarray, end: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranges ``[start, end)`` of each ``key`` merged where they overlap or touch, as
    ``(start, end, key)`` arrays sorted by key then start (an operator's calls read overlapping
    rows: merged, each of its ranges is expanded over the elementary intervals once)."""
    order = np.lexsort((start, key))
    start, end, key = start[order], end[order], key[order]
    if not start.size:
        return start, end, key
    # The running maximum of the ends within each key: keys and end ranks packed in one int64
    # (both below the number of ranges), so one accumulate does not run across keys.
    end_values, end_rank = np.unique(end, return_inverse=True)
    packed = key * np.int64(end_values.size) + end_rank.ravel()
    reach = end_values[np.maximum.accumulate(packed) - key * np.int64(end_values.size)]
    new = np.ones(start.size, bool)
    new[1:] = (key[1:] != key[:-1]) | (start[1:] > reach[:-1])
    first = np.nonzero(new)[0]
    last = np.append(first[1:], start.size) - 1
    return start[first], reach[last], key[first]


def conflict_pairs(start: np.ndarray, length: np.ndarray, group: np.ndarray, writes: np.ndarray,
                   rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(a, z)`` of groups to check, ``a`` before ``z`` in the total order, each once.
    Range ``i`` is ``[start[i], start[i] + length[i])``, touched by group ``group[i]``, written when
    ``writes[i]``; ``rank[g]`` is group ``g``'s place in a total order that extends happens-before
    (distinct per group).  A group that reads and writes an interval counts as its writer there."""
    start = np.asarray(start, np.int64)
    end = start + np.asarray(length, np.int64)
    group = np.asarray(group, np.int64)
    writes = np.asarray(writes, bool)
    keep = end > start
    start, end, key = _merged(start[keep], end[keep], group[keep] * 2 + writes[keep])
    if not start.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Each merged range over the elementary intervals it covers.
    bounds = np.unique(np.concatenate([start, end]))
    lo = np.searchsorted(bounds, start)
    count = np.searchsorted(bounds, end) - lo
    total = int(count.sum())
    offset = np.repeat(np.cumsum(count) - count, count)
    interval = np.repeat(lo, count) + (np.arange(total, dtype=np.int64) - offset)
    rec_group = np.repeat(key >> 1, count)
    rec_write = np.repeat(key & 1, count).astype(bool)
    rank = np.asarray(rank, np.int64)
    # Per interval, the groups in the total order; a group's write before its read of one interval,
    # and only the first of the two kept.
    order = np.lexsort((~rec_write, rank[rec_group], interval))
    interval, rec_group, rec_write = interval[order], rec_group[order], rec_write[order]
    first = np.ones(interval.size, bool)
    first[1:] = (interval[1:] != interval[:-1]) | (rec_group[1:] != rec_group[:-1])
    interval, rec_group, rec_write = interval[first], rec_group[first], rec_write[first]
    n = interval.size
    at = np.arange(n, dtype=np.int64)
    new_interval = np.ones(n, bool)
    new_interval[1:] = interval[1:] != interval[:-1]
    seg_first = np.maximum.accumulate(np.where(new_interval, at, 0))
    last_in = np.append(np.nonzero(new_interval)[0][1:], n) - 1
    seg_last = np.repeat(last_in, np.diff(np.append(np.nonzero(new_interval)[0], n)))
    # The previous writer of every access, and the next writer of every reader, in its interval.
    writer_at = np.where(rec_write, at, -1)
    prev_writer = np.full(n, -1, np.int64)
    prev_writer[1:] = np.maximum.accumulate(writer_at)[:-1]
    has_prev = prev_writer >= seg_first
    writer_from = np.where(rec_write, at, n)
    next_writer = np.full(n, n, np.int64)
    next_writer[:-1] = np.minimum.accumulate(writer_from[::-1])[::-1][1:]
    has_next = ~rec_write & (next_writer <= seg_last)
    a = np.concatenate([rec_group[prev_writer[has_prev]], rec_group[has_next]])
    z = np.concatenate([rec_group[has_prev], rec_group[next_writer[has_next]]])
    groups = int(rank.size)
    distinct = np.unique(a * groups + z)
    return distinct // groups, distinct % groups
