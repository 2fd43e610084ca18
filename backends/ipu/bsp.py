"""The bulk-synchronous program an IPU runs, as plain data.

Superstep ``s`` is: exchange ``s`` (slices produced in earlier supersteps move
between tiles), a global sync, then compute ``s`` (every tile runs its rTasks).
Every tensor slice has exactly one owner tile; a tile may read only slices it
owns or received in the exchange of the current superstep.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    tasks: list[TileTask]
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
        tiles_busy: dict[int, set[int]] = {}
        for t in self.tasks:
            tiles_busy.setdefault(t.superstep, set()).add(t.tile)
        tile_util = (sum(len(v) for v in tiles_busy.values()) / (self.num_tiles * max(1, self.num_supersteps)))
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
