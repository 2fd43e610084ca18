"""The bulk-synchronous program an IPU runs, as plain data.

Superstep ``s`` is: exchange ``s`` (slices produced in earlier supersteps move
between tiles), a global sync, then compute ``s`` (every tile runs its rTasks).
Every tensor slice has exactly one owner tile; a tile may read only slices it
owns or received in the exchange of the current superstep.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

import numpy as np

from rammer.errors import RammerError
from rammer.rtask import Box


class IpuPlacementError(RammerError):
    """The model does not fit the IPU's tile memories."""


class BSPOrderError(RammerError):
    """A tile read a slice it neither owns nor received (a missing or late exchange)."""


@dataclass(frozen=True)
class TensorSlice:
    tensor: str
    box: Box
    owner: int
    #: Superstep whose compute writes it; -1 for constants and graph inputs (loaded before superstep 0).
    superstep: int


class Slices(Mapping[str, list[TensorSlice]]):
    """Every tensor's slices as arrays: boxes (n, ndim, 2), owner tiles, and the superstep that writes
    each (-1: loaded).  Read as a mapping, a tensor's slices are :class:`TensorSlice` lists built on
    demand (a full-size model has hundreds of thousands of slices: 93 MB as objects on real:resnet50)."""

    def __init__(self, arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        self._arrays = arrays

    def arrays(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(boxes, owners, supersteps) of ``name``'s slices."""
        return self._arrays[name]

    def __getitem__(self, name: str) -> list[TensorSlice]:
        boxes, owners, steps = self._arrays[name]
        return [TensorSlice(name, tuple((int(lo), int(hi)) for lo, hi in box), int(owner), int(step))
                for box, owner, step in zip(boxes, owners, steps)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)


@dataclass(frozen=True)
class Exchange:
    superstep: int
    src: int
    dst: int
    tensor: str
    box: Box
    nbytes: int


@dataclass(frozen=True)
class TileTask:
    """The rTasks of one op that one tile runs in one superstep's compute."""

    superstep: int
    tile: int
    op: int
    rtasks: tuple[int, ...]


class TileTasks(Sequence[TileTask]):
    """Every tile task of a program as arrays, sorted by (superstep, tile, op): task ``j`` runs the
    local rTasks ``rtasks[starts[j]:starts[j + 1]]`` (increasing) of op ``op[j]`` on tile ``tile[j]`` in
    superstep ``superstep[j]``.  Read as a sequence, a task is a :class:`TileTask` built on demand: a
    full-size model has hundreds of thousands of tile tasks, and as objects (a dict of lists while they
    were grouped, then a dataclass and a tuple of ints each) they were the largest part of a candidate
    program build (+117 MB of RSS on real:ocr-det-320, whose issue 39 bound is 398 MB)."""

    def __init__(self, superstep: np.ndarray, tile: np.ndarray, op: np.ndarray, starts: np.ndarray,
                 rtasks: np.ndarray) -> None:
        self.superstep, self.tile, self.op, self.starts, self.rtasks = superstep, tile, op, starts, rtasks

    @classmethod
    def of_rtasks(cls, step: np.ndarray, tile: np.ndarray, op: np.ndarray, local: np.ndarray) -> TileTasks:
        """The tasks of rTasks given by their superstep, tile, op and local id (one row per rTask)."""
        order = np.lexsort((local, op, tile, step))
        s, t, o = step[order], tile[order], op[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (s[1:] != s[:-1]) | (t[1:] != t[:-1]) | (o[1:] != o[:-1])
        first = np.flatnonzero(new)
        starts = np.append(first, len(order)).astype(np.int64)
        return cls(_narrowed(s[first]), _narrowed(t[first]), _narrowed(o[first]), starts,
                   _narrowed(local[order]))

    @classmethod
    def of_list(cls, tasks: Iterable[TileTask]) -> TileTasks:
        """The same tasks from :class:`TileTask` objects (a test's edited list), in the array order."""
        rows = [(t.superstep, t.tile, t.op, r) for t in tasks for r in t.rtasks]
        if not rows:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, np.zeros(1, dtype=np.int64), empty)
        a = np.array(rows, dtype=np.int64)
        return cls.of_rtasks(a[:, 0], a[:, 1], a[:, 2], a[:, 3])

    def __len__(self) -> int:
        return len(self.superstep)

    def _task(self, j: int) -> TileTask:
        return TileTask(int(self.superstep[j]), int(self.tile[j]), int(self.op[j]),
                        tuple(self.rtasks[self.starts[j]:self.starts[j + 1]].tolist()))

    @overload
    def __getitem__(self, j: int) -> TileTask: ...

    @overload
    def __getitem__(self, j: slice) -> list[TileTask]: ...

    def __getitem__(self, j: int | slice) -> TileTask | list[TileTask]:
        if isinstance(j, slice):
            return [self._task(k) for k in range(*j.indices(len(self)))]
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self):
            raise IndexError(j)
        return self._task(j)

    def __iter__(self) -> Iterator[TileTask]:
        return (self._task(j) for j in range(len(self)))

    def in_superstep(self, step: int) -> list[TileTask]:
        """The tasks of superstep ``step`` (only one superstep's objects at a time)."""
        lo, hi = np.searchsorted(self.superstep, [step, step + 1])
        return [self._task(j) for j in range(int(lo), int(hi))]

    def busy_tiles(self, num_tiles: int) -> int:
        """(superstep, tile) pairs with at least one task."""
        key = self.superstep.astype(np.int64) * num_tiles + self.tile
        return int(np.count_nonzero(np.diff(key)) + 1) if len(key) else 0  # sorted by (superstep, tile)

    def last_superstep_of_ops(self, num_ops: int) -> np.ndarray:
        """Per op, the last superstep one of its tasks runs in (-1: none)."""
        last = np.full(num_ops, -1, dtype=np.int64)
        np.maximum.at(last, self.op.astype(np.int64), self.superstep.astype(np.int64))
        return last


def _narrowed(x: np.ndarray) -> np.ndarray:
    """``x`` in the narrowest of int16/int32/int64 that holds its values."""
    if not x.size:
        return x.astype(np.int64)
    lo, hi = int(x.min()), int(x.max())
    for t in (np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return x.astype(t)
    return x.astype(np.int64)


class ExchangeTable(Protocol):
    """Rows of distinct reads of one tensor, computed on demand (:class:`.remote_reads.RemoteReads`)."""

    def __len__(self) -> int: ...

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(source tile, destination tile, box, bytes, source slice) of ``rows``."""
        ...

    def tiles_bytes(self, rows: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(tile, bytes) of ``rows``: the source tile for ``side="src"``, else the destination."""
        ...


#: Exchanges read from a table per numpy step when summing over a whole group.
_TAKE_BATCH = 1 << 18


@dataclass(frozen=True)
class ExchangeGroup:
    """Exchanges of one tensor as arrays (full-size models have millions of exchanges).

    Exchange ``j`` moves row ``index[j]`` of ``table`` (the lowering's distinct reads, shared by every
    superstep and candidate program: not a copy per exchange) in superstep ``superstep[j]``; the
    exchanges are sorted by superstep.  Read their tiles, boxes and bytes through :meth:`take`."""

    tensor: str
    superstep: np.ndarray
    index: np.ndarray
    table: ExchangeTable

    def __len__(self) -> int:
        return len(self.superstep)

    def take(self, which: np.ndarray | slice = slice(None)
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, boxes, nbytes, source slice) of the exchanges ``which`` (all by default)."""
        return self.table.take(self.index[which])

    def exchanges(self) -> list[Exchange]:
        src, dst, boxes, nbytes, _ = self.take()
        return [Exchange(int(s), int(a), int(b), self.tensor, tuple((int(lo), int(hi)) for lo, hi in box), int(nb))
                for s, a, b, box, nb in zip(self.superstep, src, dst, boxes, nbytes)]

    def nbytes_per_step(self, num_steps: int) -> np.ndarray:
        """Bytes exchanged per superstep."""
        out = np.zeros(num_steps, dtype=np.int64)
        for lo in range(0, len(self), _TAKE_BATCH):
            hi = lo + _TAKE_BATCH
            nbytes = self.table.tiles_bytes(self.index[lo:hi], "dst")[1]
            out += np.bincount(self.superstep[lo:hi], weights=nbytes, minlength=num_steps).astype(np.int64)
        return out

    def total_bytes(self) -> int:
        return sum(int(self.table.tiles_bytes(self.index[lo:lo + _TAKE_BATCH], "dst")[1].sum())
                   for lo in range(0, len(self), _TAKE_BATCH))


@dataclass(eq=False)
class BSPProgram:
    mode: str
    policy: str
    num_tiles: int
    sram_bytes: int
    num_supersteps: int
    #: Per tensor, its slices (:class:`Slices` from the lowering; a test may give a dict of lists).
    slices: Mapping[str, list[TensorSlice]]
    exchange_groups: list[ExchangeGroup]
    #: :class:`TileTasks` from the lowering (a test may give a list of :class:`TileTask`).
    tasks: Sequence[TileTask]
    #: Per-superstep estimated compute, exchange and sync time (us).
    compute_us: np.ndarray
    exchange_us: np.ndarray
    sync_us: float
    tile_peak_bytes: np.ndarray
    busy_us: float
    num_veus: int
    cost_model: dict[str, float] = field(default_factory=dict)
    _exchanges: list[Exchange] | None = field(default=None, repr=False)

    @property
    def exchanges(self) -> list[Exchange]:
        """Every exchange, ordered by superstep, source, destination, tensor and box (built on
        first use; a test may replace the list, and the simulator then runs the replacement)."""
        if self._exchanges is None:
            self._exchanges = sorted((e for g in self.exchange_groups for e in g.exchanges()),
                                     key=lambda e: (e.superstep, e.src, e.dst, e.tensor, e.box))
        return self._exchanges

    @exchanges.setter
    def exchanges(self, value: list[Exchange]) -> None:
        self._exchanges = list(value)

    @property
    def num_exchanges(self) -> int:
        if self._exchanges is not None:
            return len(self._exchanges)
        return sum(len(g) for g in self.exchange_groups)

    @property
    def latency_us(self) -> float:
        return float(self.compute_us.sum() + self.exchange_us.sum() + self.sync_us * self.num_supersteps)

    @property
    def exchange_bytes(self) -> int:
        if self._exchanges is not None:
            return int(sum(e.nbytes for e in self._exchanges))
        return int(sum(g.total_bytes() for g in self.exchange_groups))

    def exchange_bytes_per_superstep(self) -> list[int]:
        out = np.zeros(self.num_supersteps, dtype=np.int64)
        if self._exchanges is not None:
            for e in self._exchanges:
                out[e.superstep] += e.nbytes
        else:
            for g in self.exchange_groups:
                out += g.nbytes_per_step(self.num_supersteps)
        return out.tolist()

    def report(self) -> dict[str, Any]:
        lat = self.latency_us
        tasks = self.tasks if isinstance(self.tasks, TileTasks) else TileTasks.of_list(self.tasks)
        tile_util = tasks.busy_tiles(self.num_tiles) / (self.num_tiles * max(1, self.num_supersteps))
        return {
            "mode": self.mode, "policy": self.policy, "simulated": True,
            "latency_us": lat, "supersteps": self.num_supersteps,
            "exchange_bytes": self.exchange_bytes, "exchanges": self.num_exchanges,
            "tile_peak_bytes": int(self.tile_peak_bytes.max(initial=0)),
            "tile_sram_bytes": self.sram_bytes,
            "tile_utilisation": tile_util,
            "veu_utilisation": self.busy_us / (lat * self.num_veus) if lat > 0 else 0.0,
            "compute_us": float(self.compute_us.sum()), "exchange_us": float(self.exchange_us.sum()),
            "sync_us": self.sync_us * self.num_supersteps, "cost_model": dict(self.cost_model),
        }

    def to_dict(self) -> dict[str, Any]:
        """The tile mapping and the superstep program, for Poplar tooling and inspection."""
        return {
            "format": "rammer.ipu.bsp/1", **self.report(),
            "slices": [{"tensor": s.tensor, "box": [list(b) for b in s.box], "tile": s.owner,
                        "superstep": s.superstep} for ss in self.slices.values() for s in ss],
            "exchanges": [{"superstep": e.superstep, "src": e.src, "dst": e.dst, "tensor": e.tensor,
                           "box": [list(b) for b in e.box], "bytes": e.nbytes} for e in self.exchanges],
            "compute": [{"superstep": t.superstep, "tile": t.tile, "op": t.op, "rtasks": list(t.rtasks)}
                        for t in self.tasks],
        }
