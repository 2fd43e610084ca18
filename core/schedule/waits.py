"""Barrier waits stored compactly: shared wait groups, each barrier one group minus a few members.

On a vDevice with many vEUs (the ipu's 1,472 tiles), the wavefront policy puts before an op's
first rTask on each vEU a barrier waiting for the last rTask of its producers on every other
vEU: an op spread over all vEUs after another gives 1,472 barriers of 1,471 waits each (98 M
wait entries for the Caffe2 ResNet-50).  Those barriers share one list (the producers' last
rTask per vEU) and differ only in the few members a vEU need not wait for (its own, or ones it
already waited for).  So each list is kept once, as a *group*, and per barrier its group and
the positions in the group it leaves out.  The per-barrier tuples of
:attr:`Schedule.barrier_waits <rammer.schedule.Schedule.barrier_waits>` are built only when a
reader asks for them, all at once with numpy (:meth:`CompactWaits.arrays`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: The positions a barrier leaves out of its group when it waits for all of it.
NO_SKIP = np.zeros(0, dtype=np.int64)
#: Skip entries :meth:`CompactWaits.permuted` gathers at a time (its int64 index arrays are this long).
_GATHER_CHUNK = 1 << 20


def skip_dtype(group_size: int) -> type[np.signedinteger]:
    """The narrowest integer type that holds every position in a group of ``group_size``: the skips
    are most of what a schedule on many vEUs stores (37 M of them for densenet121 on the ipu's 1,472
    tiles: 296 MB as int64, kept twice while the schedule was finished)."""
    return np.int16 if group_size <= np.iinfo(np.int16).max else np.int32


def narrow_skips(skip: np.ndarray, group_size: int) -> np.ndarray:
    """``skip`` (positions in a group of ``group_size``) as :func:`skip_dtype`'s type."""
    return skip.astype(skip_dtype(group_size), copy=False)


@dataclass(frozen=True, eq=False)
class CompactWaits:
    """Barrier ``b`` waits for the ids ``group_ids[group_starts[g]:group_starts[g + 1]]`` of its
    group ``g = barrier_group[b]``, in that order, except those at the group positions
    ``skip_positions[skip_starts[b]:skip_starts[b + 1]]`` (distinct, increasing)."""

    group_ids: np.ndarray
    group_starts: np.ndarray
    barrier_group: np.ndarray
    skip_positions: np.ndarray
    skip_starts: np.ndarray

    def __len__(self) -> int:
        return int(self.barrier_group.size)

    @property
    def num_waits(self) -> int:
        """Wait entries over all barriers (without building them)."""
        group_lengths = np.diff(self.group_starts)[self.barrier_group]
        return int(group_lengths.sum()) - int(self.skip_positions.size)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(every barrier's waits concatenated, start of each barrier's waits and the end): barrier
        ``b`` waits for ``flat[starts[b]:starts[b + 1]]``."""
        group_lengths = np.diff(self.group_starts)[self.barrier_group]
        spans = np.zeros(group_lengths.size + 1, dtype=np.int64)
        np.cumsum(group_lengths, out=spans[1:])
        # Position k of barrier b's group span reads group_ids[group_starts[g] + k].
        index = np.arange(int(spans[-1]), dtype=np.int64) + np.repeat(
            self.group_starts[self.barrier_group] - spans[:-1], group_lengths)
        skips = np.diff(self.skip_starts)
        keep = np.ones(index.size, dtype=bool)
        keep[np.repeat(spans[:-1], skips) + self.skip_positions] = False
        starts = np.zeros(group_lengths.size + 1, dtype=np.int64)
        np.cumsum(group_lengths - skips, out=starts[1:])
        return self.group_ids[index[keep]], starts

    def tuples(self) -> list[tuple[int, ...]]:
        """Each barrier's waits as a tuple of ints."""
        flat, starts = self.arrays()
        ids = flat.tolist()
        bounds = starts.tolist()
        return [tuple(ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def permuted(self, order: np.ndarray) -> CompactWaits:
        """The same barriers in the order ``order`` (new barrier ``i`` is old barrier ``order[i]``)."""
        skips = np.diff(self.skip_starts)[order]
        starts = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(skips, out=starts[1:])
        shift = self.skip_starts[order] - starts[:-1]  # new position + shift = old position
        positions = np.empty(int(starts[-1]), dtype=self.skip_positions.dtype)
        # Gathered a chunk of barriers at a time: one index over all entries took two int64 arrays
        # of every skip entry beside the result.
        b = 0
        while b < order.size:
            e = max(b + 1, int(np.searchsorted(starts, starts[b] + _GATHER_CHUNK, side="right")) - 1)
            e = min(e, order.size)
            lo, hi = int(starts[b]), int(starts[e])
            index = np.repeat(shift[b:e], skips[b:e])
            index += np.arange(lo, hi, dtype=np.int64)
            positions[lo:hi] = self.skip_positions[index]
            b = e
        return CompactWaits(self.group_ids, self.group_starts, self.barrier_group[order], positions, starts)


def compact_waits(group_ids: list[np.ndarray], barrier_group: list[int], skips: list[np.ndarray]) -> CompactWaits:
    """The store from per-group id arrays, and per barrier its group and left-out positions."""
    group_starts = np.zeros(len(group_ids) + 1, dtype=np.int64)
    np.cumsum([g.size for g in group_ids], out=group_starts[1:])
    skip_starts = np.zeros(len(skips) + 1, dtype=np.int64)
    np.cumsum([s.size for s in skips], out=skip_starts[1:])
    flat = np.concatenate(group_ids).astype(np.int64, copy=False) if group_ids else NO_SKIP
    positions = np.empty(int(skip_starts[-1]), dtype=skip_dtype(int(np.diff(group_starts).max(initial=0))))
    if skips:  # (positions within their group: the narrow type holds them)
        np.concatenate(skips, out=positions, casting="unsafe")
    return CompactWaits(flat, group_starts, np.asarray(barrier_group, dtype=np.int64), positions, skip_starts)


class BarrierWaitsField:
    """``Schedule.barrier_waits``: a list of tuples to its readers, kept as a :class:`CompactWaits`
    until one reads it (the ipu never does: its BSP program orders data by supersteps).

    Assigning a list (or a :class:`CompactWaits`) replaces it; the list, once built, is the
    schedule's own and may be edited in place (tests break schedules that way)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_value"

    def __get__(self, obj: Any, owner: type | None = None) -> list[tuple[int, ...]]:
        if obj is None:
            # No default for the dataclass field (the dataclass asks the class for one).
            raise AttributeError(self.slot)
        value = obj.__dict__[self.slot]
        if isinstance(value, CompactWaits):
            value = value.tuples()
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj: Any, value: list[tuple[int, ...]]) -> None:
        obj.__dict__[self.slot] = value


def hold_compact(obj: Any, waits: CompactWaits, field_name: str = "barrier_waits") -> None:
    """Let ``obj.<field_name>`` hold ``waits`` compactly until it is read."""
    obj.__dict__[f"_{field_name}_value"] = waits


def stored_waits(obj: Any, field_name: str = "barrier_waits") -> list[tuple[int, ...]] | CompactWaits:
    """What ``obj.<field_name>`` holds now, without building the tuples."""
    return obj.__dict__[f"_{field_name}_value"]
