"""Lowering a static rTask schedule to a bulk-synchronous IPU program.

A vEU is a tile (``vdevice.extra["veus_per_tile"]`` vEUs per tile when a
vDevice models tile threads as vEUs).  Each rTask runs on the tile of the vEU
the schedule put it on and owns the boxes it writes; constants and graph
inputs are cut into chunks, each owned by the tile of its first reader (or the
least loaded tile when that one is half full).  Superstep modes:

* ``compute-set`` -- Rammer/NNFusion's mapping: one wave of the schedule (ops
  whose predecessors are done; one op per wave for op-by-op schedules) is one
  compute set, so one superstep;
* ``merged`` -- an rTask runs in the earliest superstep where everything it
  reads is on its tile: in the same superstep as a producer on the same tile,
  the one after a producer on another tile.  Supersteps whose tiles do not
  exchange are thereby merged.

Every read of an rTask on another tile's slice becomes an exchange of the
intersection into the reader's tile before the reader's superstep.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from rammer.ir import Graph
from rammer.rtask import Box, boxes_overlap
from rammer.schedule import Schedule

from .bsp import BSPOrderError, BSPProgram, Exchange, IpuPlacementError, TensorSlice, TileTask
from .kernels import CODE_BYTES_PER_KERNEL, VERTEX_BYTES, IpuCostModel
from .placement import box_volume, boxes_array, chunk_boxes, is_static, live_at, peak_per_tile

MODES = ("merged", "compute-set")
_BLOCK = 512  # reads compared with slices per numpy step (bounds memory on large models)


def _itemsize(graph: Graph, name: str) -> int:
    info = graph.value_info.get(name)
    return np.dtype(info.dtype).itemsize if info is not None and info.dtype != "bool" else 1


def op_waves(schedule: Schedule) -> list[int]:
    """The compute set of each op in Rammer's mapping: its wave (one op per wave op by op)."""
    if schedule.options.get("launch_per_op"):
        return list(range(len(schedule.ops)))
    wave: list[int] = []
    for op in schedule.ops:
        wave.append(1 + max((wave[p] for p in op.preds), default=-1))
    return wave


def lower(schedule: Schedule, graph: Graph, mode: str = "merged") -> BSPProgram:
    """The BSP program of ``schedule`` (of ``graph``); raises :class:`IpuPlacementError` when a
    tile's SRAM overflows."""
    if mode not in MODES:
        raise ValueError(f"unknown superstep mode {mode!r}; known: {', '.join(MODES)}")
    vd = schedule.vdevice
    per_tile = int(vd.extra.get("veus_per_tile", 1))
    num_tiles = math.ceil(vd.num_veus / per_tile)
    sram = vd.veu.local_mem_bytes * per_tile
    cost = IpuCostModel.for_vdevice(vd, num_tiles)
    n = schedule.num_rtasks
    veu_of = np.full(n, -1, dtype=np.int64)
    for v, prog in enumerate(schedule.programs):
        ids = np.asarray([e for e in prog if e < n], dtype=np.int64)
        veu_of[ids] = v
    tile_of = veu_of // per_tile
    waves = op_waves(schedule)
    sources = set(graph.initializers) | {t.name for t in graph.inputs}
    const_load = np.zeros(num_tiles, dtype=np.int64)

    slices: dict[str, list[TensorSlice]] = {}
    arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # boxes, owners, supersteps
    rtask_step = np.zeros(n, dtype=np.int64)
    last_use: dict[str, int] = {}
    exchange_set: set[tuple[int, int, int, str, Box]] = set()

    def add_slices(name: str, new: list[TensorSlice]) -> None:
        slices.setdefault(name, []).extend(new)
        ss = slices[name]
        ndim = len(ss[0].box)
        arrays[name] = (boxes_array([s.box for s in ss], ndim), np.array([s.owner for s in ss], dtype=np.int64),
                        np.array([s.superstep for s in ss], dtype=np.int64))

    def place_source(name: str, readers: list[tuple[int, Box]]) -> None:
        info = graph.value_info[name]
        size = _itemsize(graph, name)
        new = []
        rb = boxes_array([b for _, b in readers], len(info.shape))
        for box in chunk_boxes(info.shape, size):
            nbytes = box_volume(box) * size
            owner = -1
            if len(rb):
                hit = np.flatnonzero(boxes_overlap(boxes_array([box], len(info.shape)), rb)[0]) if box else [0]
                if len(hit):
                    owner = readers[int(hit[0])][0]
            if owner < 0 or const_load[owner] + nbytes > sram // 2:
                owner = int(np.argmin(const_load))
            const_load[owner] += nbytes
            new.append(TensorSlice(name, box, owner, -1))
        add_slices(name, new)

    for i, op in enumerate(schedule.ops):
        node = graph.nodes[i]
        k = op.kernel
        ids = np.arange(op.first_rtask, op.first_rtask + k.num_rtasks)
        tiles = tile_of[ids]
        acc = [k.accesses(r) for r in range(k.num_rtasks)]
        by_slot: dict[int, list[tuple[int, Box]]] = defaultdict(list)
        for r, a in enumerate(acc):
            for slot, box in a.reads:
                if slot < len(node.inputs) and node.inputs[slot] and not is_static(graph, node.inputs[slot]):
                    by_slot[slot].append((r, box))
        need = np.zeros(k.num_rtasks, dtype=np.int64)
        hits: list[tuple[str, list[tuple[int, Box]], np.ndarray, np.ndarray]] = []
        for slot, reads in by_slot.items():
            name = node.inputs[slot]
            if name not in slices:
                if name not in sources:
                    raise BSPOrderError(f"{node.label} reads '{name}', which no earlier rTask wrote")
                place_source(name, [(int(tiles[r]), b) for r, b in reads])
            sboxes, owners, steps = arrays[name]
            ndim = sboxes.shape[1]
            rtiles = np.array([tiles[r] for r, _ in reads], dtype=np.int64)
            rlocal = np.array([r for r, _ in reads], dtype=np.int64)
            rboxes = boxes_array([b for _, b in reads], ndim)
            for lo in range(0, len(reads), _BLOCK):
                sl = slice(lo, lo + _BLOCK)
                hit = boxes_overlap(rboxes[sl], sboxes) if ndim else np.ones((len(rlocal[sl]), len(owners)), bool)
                remote = owners[None, :] != rtiles[sl, None]
                req = np.where(hit, steps[None, :] + remote, -1).max(axis=1, initial=-1)
                np.maximum.at(need, rlocal[sl], req)
                pr, ps = np.nonzero(hit & remote)
                hits.append((name, reads, pr + lo, ps))
        if mode == "compute-set":
            step = np.full(k.num_rtasks, waves[i], dtype=np.int64)
            if (need > step).any():  # cannot happen for a valid schedule: waves follow the dependencies
                raise BSPOrderError(f"{node.label}: wave {waves[i]} comes before data it reads")
        else:
            step = need
        rtask_step[ids] = step
        for name, reads, pr, ps in hits:
            sboxes, owners, _ = arrays[name]
            size = _itemsize(graph, name)
            last_use[name] = max(last_use.get(name, -1), int(step.max(initial=0)))
            for j, m in zip(pr.tolist(), ps.tolist()):
                r, rbox = reads[j]
                box = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(rbox, slices[name][m].box))
                exchange_set.add((int(step[r]), int(owners[m]), int(tiles[r]), name, box))
        for slot in by_slot:
            name = node.inputs[slot]
            last_use[name] = max(last_use.get(name, -1), int(step.max(initial=0)))
        writes: dict[str, list[TensorSlice]] = defaultdict(list)
        for r, a in enumerate(acc):
            for slot, box in a.writes:
                if slot < len(node.outputs) and node.outputs[slot]:
                    writes[node.outputs[slot]].append(TensorSlice(node.outputs[slot], box, int(tiles[r]), int(step[r])))
        for name, new in writes.items():
            add_slices(name, new)

    num_steps = int(rtask_step.max(initial=-1)) + 1
    for t in graph.outputs:  # outputs that are constants or inputs still need an owner
        if t.name not in slices and t.name in sources and not is_static(graph, t.name):
            place_source(t.name, [])
    exchanges = [Exchange(s, src, dst, name, box, box_volume(box) * _itemsize(graph, name))
                 for s, src, dst, name, box in sorted(exchange_set, key=lambda e: (e[0], e[1], e[2], e[3], e[4]))]

    # Tile tasks and timing.
    groups: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    dur = np.zeros(n)
    for i, op in enumerate(schedule.ops):
        lo, hi = op.first_rtask, op.first_rtask + op.kernel.num_rtasks
        dur[lo:hi] = cost.rtask_us(op.kernel)
        for r in range(lo, hi):
            groups[(int(rtask_step[r]), int(tile_of[r]), i)].append(r - lo)
    tasks = [TileTask(s, t, i, tuple(rs)) for (s, t, i), rs in sorted(groups.items())]
    compute_us = np.zeros(num_steps)
    if n:
        key = rtask_step * vd.num_veus + veu_of
        uniq, inv = np.unique(key, return_inverse=True)
        per = np.bincount(inv, weights=dur)
        np.maximum.at(compute_us, uniq // vd.num_veus, per)
    exchange_us = np.zeros(num_steps)
    if exchanges:
        es = np.array([e.superstep for e in exchanges])
        eb = np.array([e.nbytes for e in exchanges], dtype=np.float64)
        for ends in (np.array([e.src for e in exchanges]), np.array([e.dst for e in exchanges])):
            key = es * num_tiles + ends
            uniq, inv = np.unique(key, return_inverse=True)
            per = np.bincount(inv, weights=eb)
            busiest = np.zeros(num_steps)
            np.maximum.at(busiest, uniq // num_tiles, per)
            exchange_us = np.maximum(exchange_us, busiest)
        exchange_us = np.array([cost.exchange_us(b) for b in exchange_us])

    # Memory: owned slices from their superstep to the tensor's last use, received boxes for
    # their superstep, code for the whole program.
    keep = {t.name for t in graph.outputs}
    it_tile, it_start, it_end, it_bytes, it_name = [], [], [], [], []
    for name, ss in slices.items():
        size = _itemsize(graph, name)
        end = num_steps - 1 if name in keep or name in sources else last_use.get(name, -1)
        for s in ss:
            it_tile.append(s.owner)
            it_start.append(max(0, s.superstep))
            it_end.append(max(end, s.superstep, 0))
            it_bytes.append(box_volume(s.box) * size)
            it_name.append(name)
    for e in exchanges:
        it_tile.append(e.dst), it_start.append(e.superstep), it_end.append(e.superstep)
        it_bytes.append(e.nbytes), it_name.append(f"{e.tensor} (received)")
    kernels_on: dict[int, set[str]] = defaultdict(set)
    vertices = np.zeros(num_tiles, dtype=np.int64)
    for t in tasks:
        kernels_on[t.tile].add(schedule.ops[t.op].kernel.kernel_id)
        vertices[t.tile] += len(t.rtasks)
    for tile, ks in kernels_on.items():
        it_tile.append(tile), it_start.append(0), it_end.append(max(0, num_steps - 1))
        it_bytes.append(len(ks) * CODE_BYTES_PER_KERNEL + int(vertices[tile]) * VERTEX_BYTES), it_name.append("(code)")
    arr = [np.asarray(x, dtype=np.int64) for x in (it_tile, it_start, it_end, it_bytes)]
    peak = peak_per_tile(num_tiles, *arr)
    if (peak > sram).any():
        raise IpuPlacementError(_overflow_message(peak, sram, arr, it_name, vd.name))

    busy = float(dur.sum())
    return BSPProgram(mode, schedule.policy, num_tiles, sram, num_steps, slices, exchanges, tasks, compute_us,
                      exchange_us, cost.sync_us, peak, busy, vd.num_veus, cost.describe())


def _overflow_message(peak: np.ndarray, sram: int, arr: list[np.ndarray], names: list[str], device: str) -> str:
    tile, start, end, nbytes = arr
    over = np.flatnonzero(peak > sram)
    worst = int(over[np.argmax(peak[over])])
    mine = np.flatnonzero(tile == worst)
    at = max(set(start[mine].tolist()), key=lambda s: int(nbytes[live_at(worst, s, tile, start, end)].sum()))
    live = live_at(worst, at, tile, start, end)
    per: dict[str, int] = defaultdict(int)
    for j in live.tolist():
        per[names[j]] += int(nbytes[j])
    top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
    listing = ", ".join(f"'{k}' {v / 1024:.1f} KiB" for k, v in top)
    return (f"the model does not fit the {device} tile memories: {len(over)} tile(s) overflow their "
            f"{sram // 1024} KiB SRAM; tile {worst} needs {int(peak[worst]) / 1024:.1f} KiB in superstep {at} "
            f"({listing}); choose kernels with smaller rTasks (more of them), a larger IPU preset, or split the model")
