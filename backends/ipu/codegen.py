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
from functools import partial

import numpy as np

from rammer.ir import Graph
from rammer.rtask import Box
from rammer.schedule import Schedule
from rammer.schedule import op_waves as core_op_waves
from rammer.schedule.walk import rtask_locations

from .bsp import BSPOrderError, BSPProgram, ExchangeGroup, IpuPlacementError, Slices, TileTasks
from .kernels import CODE_BYTES_PER_KERNEL, VERTEX_BYTES, IpuCostModel
from .placement import (
    box_volume,
    boxes_array,
    chunk_box,
    chunk_boxes,
    is_static,
    narrowest_int,
    overlapping_pairs,
    reader_partition,
    refuse_over_chip,
)
from .relief import MARGIN_FRACTION, ChunkKey, relief_moves
from .remote_reads import RemoteReads, read_chunk, sorted_distinct
from .split_waves import split_waves
from .stationary import (
    constant_bytes_of,
    constant_cap,
    plan_all_pieces,
    stationary_anchors,
    weight_stationary_tiles,
)
from .tile_memory import Intervals, busiest_per_step, labelled_at, live_grid, peak_bytes

MODES = ("merged", "compute-set")
#: Candidate (read box, slice) pairs x axes compared per numpy step: bounds the lowering's temporary
#: arrays (about 16 MB each) whatever the number of slices of a tensor.
_BLOCK_ELEMENTS = 1 << 21


def _itemsize(graph: Graph, name: str) -> int:
    info = graph.value_info.get(name)
    return np.dtype(info.dtype).itemsize if info is not None and info.dtype != "bool" else 1


def op_waves(schedule: Schedule) -> list[int]:
    """The compute set of each op in Rammer's mapping: its wave (one op per wave op by op)."""
    return core_op_waves([op.preds for op in schedule.ops], one_per_op=bool(schedule.options.get("launch_per_op")))


#: Weight-stationary placement (:func:`.stationary.weight_stationary_tiles`): the first reader of a
#: constant piece runs on the tile that owns the piece.  Off, every rTask runs where the schedule put it.
WEIGHT_STATIONARY = True

#: When the waves overflow a tile, a last candidate program runs each wave over supersteps that give a
#: tile at most one rTask with remote reads (:func:`.split_waves.split_waves`).
SPLIT_WAVES = True

#: Graph inputs held on their tiles from the host's load to their last read (off: to the end, as constants).
INPUTS_FREED = True

#: Times the lowering places the constants again with owners that relieve overflowing tiles.
RELIEF_ROUNDS = 3
#: Times the weight-stationary placement is planned again, with each tile's room for constants
#: taken from the failed program (before any relief round).
STATIONARY_ROUNDS = 2


def lower(schedule: Schedule, graph: Graph, mode: str = "merged") -> BSPProgram:
    """The BSP program of ``schedule`` (of ``graph``); raises :class:`IpuPlacementError` when a
    tile's SRAM overflows.

    When every candidate program overflows, constant chunks that the overflowing tiles do not read
    while they overflow are given to tiles with free SRAM (:mod:`.relief`) and the lowering runs
    again, at most :data:`RELIEF_ROUNDS` times; a model that fits at once is lowered once, as before."""
    if mode not in MODES:
        raise ValueError(f"unknown superstep mode {mode!r}; known: {', '.join(MODES)}")
    owners: dict[ChunkKey, int] = {}
    moved: dict[ChunkKey, int] = {}
    vd = schedule.vdevice
    per_tile = int(vd.extra.get("veus_per_tile", 1))
    num_tiles, sram = math.ceil(vd.num_veus / per_tile), vd.veu.local_mem_bytes * per_tile
    # The constant bytes each tile may own: half of it, more when the model's constants need more.
    capacity = np.full(num_tiles, constant_cap(sram, num_tiles, constant_bytes_of(graph)) if WEIGHT_STATIONARY
                       else sram // 2, dtype=np.int64)
    replans = STATIONARY_ROUNDS if WEIGHT_STATIONARY else 0
    relief_round = 0
    while True:
        try:
            return _lower_with_owners(schedule, graph, mode, owners, capacity)
        except IpuPlacementError as exc:
            transient = getattr(exc, "transient", None)
            if replans and transient is not None and not owners:
                # Weight-stationary again: a tile that overflowed may own at most what the failed
                # program left free beside its activations, exchanges and code at their peak; one
                # that did not may own that much too, when it is more than its room was.
                replans -= 1
                limit = sram - int(sram * MARGIN_FRACTION)
                over = getattr(exc, "peak", transient) > limit
                free = np.maximum(0, limit - transient)
                capacity = np.where(over, np.minimum(capacity, free), np.maximum(capacity, free))
                continue
            moves = {k: v for k, v in getattr(exc, "relief", {}).items() if moved.get(k) != v}
            if relief_round == RELIEF_ROUNDS or not moves:
                raise
            moved.update(moves)
            # First round: only the moved chunks are pinned, and the room they leave may take the
            # tile's own later chunks (which it would otherwise receive).  After that, every chunk
            # keeps its owner of the failed program: placed afresh, the chunks after a moved one
            # refill its room with weights the tile reads elsewhere (real:resnet50's tile 14).
            owners = dict(moved) if relief_round == 0 else {**getattr(exc, "const_owners", {}), **moved}
            relief_round += 1
    raise AssertionError("unreachable")


def _lower_with_owners(schedule: Schedule, graph: Graph, mode: str, fixed_owners: dict[ChunkKey, int],
                       capacity: np.ndarray) -> BSPProgram:
    """:func:`lower` once, with ``fixed_owners`` fixing the owner tile of the constant chunks it names
    and ``capacity`` (per tile) the constant bytes each tile may own."""
    vd = schedule.vdevice
    per_tile = int(vd.extra.get("veus_per_tile", 1))
    num_tiles = math.ceil(vd.num_veus / per_tile)
    sram = vd.veu.local_mem_bytes * per_tile
    refuse_over_chip(graph, num_tiles, sram, vd.name)
    cost = IpuCostModel.for_vdevice(vd, num_tiles)
    n = schedule.num_rtasks
    _check_placed(schedule)
    veu_of = rtask_locations(schedule)[0]
    tile_of = veu_of // per_tile
    waves = op_waves(schedule)
    sources = set(graph.initializers) | {t.name for t in graph.inputs}
    # Read boxes are kept in the narrowest integers that hold the tensor's bounds.
    box_type = {name: narrowest_int(max(info.shape, default=0)) for name, info in graph.value_info.items()
                if info.shape is not None and all(isinstance(d, int) for d in info.shape)}
    const_load = np.zeros(num_tiles, dtype=np.int64)
    # When the constants fill the tiles (more than half of each on average), the pieces of every op
    # are placed at once, largest first; otherwise op by op, as the lowering meets them.
    planned = (plan_all_pieces(schedule, graph, tile_of, const_load, capacity)
               if WEIGHT_STATIONARY and constant_bytes_of(graph) > num_tiles * (sram // 2) else None)

    # Slices as arrays of boxes, owners and writer rTasks; the writer's superstep is known once a mode
    # chose the steps.  Constants and graph inputs have writer -1 (loaded before superstep 0).  No Python
    # tuple per slice: real:resnet50's 223,000 slices took 76 MB as (box, owner, writer) tuples.
    arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    asap = np.zeros(n, dtype=np.int64)  # earliest superstep with the rTask's data on its tile
    wave = np.zeros(n, dtype=np.int64)  # Rammer's compute set (its schedule wave)
    readers: dict[str, list[np.ndarray]] = defaultdict(list)  # rTasks reading each tensor
    # Reads of another tile's slice, per tensor, one chunk per op (remote_reads.read_chunk): the read
    # boxes (rTask, bounds) and the source slice of each of their remote reads; no intersection boxes.
    remote: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)

    def add_slices(name: str, new: list[tuple[Box, int, int]]) -> None:
        ndim = len(new[0][0])
        got = (boxes_array([b for b, _, _ in new], ndim), np.array([o for _, o, _ in new], dtype=np.int64),
               np.array([w for _, _, w in new], dtype=np.int64))
        old = arrays.get(name)
        if old is not None:  # (a graph output that is a constant or input gets its slices at the end)
            got = (np.concatenate([old[0], got[0]]), np.concatenate([old[1], got[1]]), np.concatenate([old[2], got[2]]))
        arrays[name] = got

    def place_source(name: str, readers_: list[tuple[int, Box]]) -> None:
        info = graph.value_info[name]
        size = _itemsize(graph, name)
        new = []
        pieces = reader_partition(info.shape, [b for _, b in readers_])
        # A weight-stationary piece stays whole on its reader's tile, which the planner chose for it:
        # cut by the cap, its overflow would be received by that reader on top of what it owns.
        stationary = pieces is not None and WEIGHT_STATIONARY and name in graph.initializers
        if pieces is not None:  # the readers tile it: each piece on its reader's tile
            tile_of_box: dict[Box, int] = {}
            for tile, b in readers_:
                tile_of_box.setdefault(tuple((int(lo), int(hi)) for lo, hi in b), tile)
            chunks = [(c, tile_of_box[p]) for p in pieces for c in chunk_box(p, size)]
        else:
            # Each chunk on the tile of its first reader (the lowest reader index overlapping it).
            rb = boxes_array([b for _, b in readers_], len(info.shape))
            boxes = chunk_boxes(info.shape, size)
            first = np.full(len(boxes), len(readers_), dtype=np.int64)
            for ri, ci in overlapping_pairs(rb, boxes_array(boxes, len(info.shape))):
                np.minimum.at(first, ci, ri)
            chunks = [(box, readers_[int(f)][0] if f < len(readers_) else -1) for box, f in zip(boxes, first)]
        for box, owner in chunks:
            nbytes = box_volume(box) * size
            moved = fixed_owners.get((name, _box_key(box))) if fixed_owners else None
            if moved is not None:
                owner = moved
            elif owner < 0 or (not stationary and const_load[owner] + nbytes > capacity[owner]):
                owner = int(np.argmin(const_load))
            const_load[owner] += nbytes
            new.append((box, owner, -1))
        add_slices(name, new)

    def step_of(steps: np.ndarray, writers: np.ndarray) -> np.ndarray:
        return np.where(writers >= 0, steps[np.maximum(writers, 0)], -1)

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
        moved_tiles = None  # weight-stationary: the first reader of a constant piece runs where it can live
        if planned is not None:
            moved_tiles = planned.get(i)
        elif WEIGHT_STATIONARY:
            anchors = stationary_anchors(graph, node, by_slot, arrays)
            if anchors:
                moved_tiles = weight_stationary_tiles([(tiles, anchors)], const_load, capacity)[0]
        if moved_tiles is not None:
            changed = moved_tiles != tiles
            if changed.any():
                veu_of[ids[changed]] = moved_tiles[changed] * per_tile + veu_of[ids[changed]] % per_tile
                tile_of[ids] = tiles = moved_tiles
        need = np.zeros(k.num_rtasks, dtype=np.int64)
        need_wave = np.zeros(k.num_rtasks, dtype=np.int64)
        for slot, reads in by_slot.items():
            name = node.inputs[slot]
            if name not in arrays:
                if name not in sources:
                    raise BSPOrderError(f"{node.label} reads '{name}', which no earlier rTask wrote")
                place_source(name, [(int(tiles[r]), b) for r, b in reads])
            sboxes, owners, writers = arrays[name]
            s_asap, s_wave = step_of(asap, writers), step_of(wave, writers)
            ndim = sboxes.shape[1]
            rtiles = np.array([tiles[r] for r, _ in reads], dtype=np.int64)
            rlocal = np.array([r for r, _ in reads], dtype=np.int64)
            rboxes = boxes_array([b for _, b in reads], ndim)
            readers[name].append(ids[rlocal])
            far_reads, far_slices = [], []
            for pj, pm in overlapping_pairs(rboxes, sboxes, _BLOCK_ELEMENTS // max(1, 2 * ndim)):
                far = owners[pm] != rtiles[pj]
                np.maximum.at(need, rlocal[pj], s_asap[pm] + far)
                np.maximum.at(need_wave, rlocal[pj], s_wave[pm] + far)
                if far.any():
                    far_reads.append(pj[far])
                    far_slices.append(pm[far].astype(np.int32))
            if far_reads:
                remote[name].append(read_chunk(np.concatenate(far_reads), np.concatenate(far_slices), ids[rlocal],
                                               rboxes, box_type.get(name, np.int64), len(sboxes)))
        if (need_wave > waves[i]).any():  # cannot happen for a valid schedule: waves follow the dependencies
            raise BSPOrderError(f"{node.label}: wave {waves[i]} comes before data it reads")
        asap[ids] = need
        wave[ids] = waves[i]
        writes: dict[str, list[tuple[Box, int, int]]] = defaultdict(list)
        for r, a in enumerate(acc):
            for slot, box in a.writes:
                if slot < len(node.outputs) and node.outputs[slot]:
                    writes[node.outputs[slot]].append((box, int(tiles[r]), int(ids[r])))
        for name, new in writes.items():
            add_slices(name, new)

    for t in graph.outputs:  # outputs that are constants or inputs still need an owner
        if t.name not in arrays and t.name in sources and not is_static(graph, t.name):
            place_source(t.name, [])

    parts = _Parts(schedule, graph, cost, num_tiles, sram, tile_of, veu_of, arrays, readers, remote, sources)
    if mode == "compute-set":
        return parts.build(wave, mode)
    # merged: the better (lower estimated latency) of two ways to need fewer supersteps than
    # compute-set -- Rammer's waves with consecutive supersteps merged where no exchange separates
    # them (never slower than compute-set), and every rTask at its earliest superstep (asap).
    # When merged waves overflow a tile (received boxes of several waves at once), the unmerged
    # waves are tried too: merged mode never rejects a model that compute-set places.
    # One program at a time: each holds the whole exchange list of a large model (52 MB of the
    # 308 MB peak of issue 39's NASNet-style model when two were alive), so the best program is
    # dropped before the next candidate is built, and built again if it stays the best.
    best: tuple[tuple[float, int], np.ndarray] | None = None  # (latency, supersteps) and the steps
    kept: BSPProgram | None = None  # the best program, while it is the last one built
    errors: list[IpuPlacementError] = []
    candidates = [_merge_waves(wave, parts.tables, arrays), asap]
    for k, steps in enumerate(candidates):
        kept = None
        try:
            program = parts.build(steps, mode)
        except IpuPlacementError as exc:
            # Kept without its traceback: the traceback holds the failed build's frame, whose
            # exchange and memory arrays (about 2 GB for real:resnet50) then outlived it, and the
            # third candidate was built with two failed ones alive (a 9.4 GB peak).
            errors.append(exc.with_traceback(None))
            if k == 0:
                candidates.append(wave)
            elif k == 2 and SPLIT_WAVES:
                # The waves overflow too: each tile receives for one rTask of a wave at a time.
                candidates.append(split_waves(wave, parts.tile_of, parts.receives()))
            continue
        score = (program.latency_us, program.num_supersteps)
        if best is None or score < best[0]:
            best, kept = (score, steps), program
        del program
    if best is None:
        # The relief of the first candidate (merged waves, the preferred program) rides on the error raised.
        errors[-1].relief = getattr(errors[0], "relief", {})  # type: ignore[attr-defined]
        errors[-1].const_owners = getattr(errors[0], "const_owners", {})  # type: ignore[attr-defined]
        errors[-1].transient = getattr(errors[0], "transient", None)  # type: ignore[attr-defined]
        errors[-1].peak = getattr(errors[0], "peak", None)  # type: ignore[attr-defined]
        raise errors[-1]
    return kept if kept is not None else parts.build(best[1], mode)


def _box_key(box) -> Box:
    return tuple((int(lo), int(hi)) for lo, hi in box)


def _check_placed(schedule: Schedule) -> None:
    """What the lowering takes from the schedule, checked: every rTask on exactly one vEU, and
    every rKernel fitting a vEU.  The schedule's barriers and program order are not used (the
    supersteps follow from the data each rTask reads, checked in :func:`lower`), so the full
    schedule verifier (vector clocks over every vEU, quadratic in the vEUs) is not needed here."""
    n = schedule.num_rtasks
    flat = np.fromiter((e for prog in schedule.programs for e in prog), dtype=np.int64)
    counts = np.bincount(flat[(flat >= 0) & (flat < n)], minlength=n)
    if n and (counts != 1).any():
        bad = int(np.flatnonzero(counts != 1)[0])
        raise BSPOrderError(f"{schedule.describe_rtask(bad)} runs {int(counts[bad])} times in the schedule "
                            f"(once expected); the schedule does not match its ops")
    veu = schedule.vdevice.veu
    for op in schedule.ops:
        r = op.kernel.resources
        if not r.fits(veu):
            raise BSPOrderError(f"op '{op.name}' uses {op.kernel.kernel_id}, whose rTasks need {r.threads} threads "
                                f"and {r.local_mem_bytes} bytes; a tile of '{schedule.vdevice.name}' has "
                                f"{veu.threads} and {veu.local_mem_bytes}")


def _merge_waves(wave: np.ndarray, tables: dict, arrays: dict) -> np.ndarray:
    """Waves mapped to supersteps: wave ``s`` joins the superstep of wave ``s - 1`` unless an
    exchange into wave ``s`` carries data written since that superstep began (greedy, which
    gives the fewest supersteps for these constraints)."""
    num_waves = int(wave.max(initial=-1)) + 1
    src_wave = np.full(num_waves, -1, dtype=np.int64)
    for name, table in tables.items():
        writers = arrays[name][2][table.pair_slice]
        ok = writers >= 0
        np.maximum.at(src_wave, wave[table.pair_rtasks()[ok]], wave[writers[ok]])
    to_step = np.zeros(num_waves, dtype=np.int64)
    group, start = 0, 0
    for s in range(1, num_waves):
        if src_wave[s] >= start:
            group, start = group + 1, s
        to_step[s] = group
    return to_step[wave] if len(wave) else wave


def _narrow(x: np.ndarray) -> np.ndarray:
    """``x`` as int32 when its values allow (indices into the lowering's tables)."""
    if x.size and (int(x.max()) >= 2**31 or int(x.min()) < -2**31):
        return x
    return x.astype(np.int32)


class _Parts:
    """What the lowering found (slices, reads, remote reads), made into a BSPProgram once the
    superstep of every rTask is chosen."""

    def __init__(self, schedule, graph, cost, num_tiles, sram, tile_of, veu_of, arrays, readers, remote,
                 sources):
        self.schedule, self.graph, self.cost = schedule, graph, cost
        self.num_tiles, self.sram, self.tile_of, self.veu_of = num_tiles, sram, tile_of, veu_of
        self.arrays, self.readers, self.sources = arrays, readers, sources
        # Per tensor, its remote reads as (read box, source slice) pairs and the distinct reads they
        # make (remote_reads.py): computed once for every candidate program; each exchange's tiles, box
        # and bytes are derived from them when asked.  real:resnet50 has 12.8 M remote reads: a row of
        # tiles, box and slice per distinct read kept about 460 MB, the pairs about 26 MB.
        self.slice_bytes = {name: np.prod(np.maximum(b[..., 1] - b[..., 0], 0), axis=1).astype(np.int64)
                            * _itemsize(graph, name) for name, (b, _, _) in arrays.items()}
        self.tables: dict[str, RemoteReads] = {}
        for name in list(remote):
            chunks = remote.pop(name)
            boxes, owners, _ = arrays[name]
            self.tables[name] = RemoteReads.from_chunks(chunks, boxes, owners, tile_of, num_tiles,
                                                         _itemsize(graph, name))
            del chunks

    def receives(self) -> np.ndarray:
        """Per rTask, whether it reads from another tile."""
        out = np.zeros(len(self.tile_of), dtype=bool)
        for table in self.tables.values():
            out[table.read_rtask] = True
        return out

    def exchange_groups(self, rtask_step: np.ndarray) -> list[ExchangeGroup]:
        """One exchange per (superstep, source tile, destination tile, box) of each tensor."""
        groups = []
        step_type = narrowest_int(int(rtask_step.max(initial=0)))
        for name, table in self.tables.items():
            step, row = table.exchanges(rtask_step)
            # The table is shared, not copied per exchange: an exchange is its superstep and distinct read.
            groups.append(ExchangeGroup(name, step.astype(step_type), _narrow(row), table))
        return groups

    def build(self, rtask_step: np.ndarray, mode: str) -> BSPProgram:
        schedule, graph, cost, num_tiles, sram = self.schedule, self.graph, self.cost, self.num_tiles, self.sram
        tile_of, veu_of, vd = self.tile_of, self.veu_of, schedule.vdevice
        n = len(rtask_step)
        num_steps = int(rtask_step.max(initial=-1)) + 1
        last_use = {name: max(int(rtask_step[r].max(initial=-1)) for r in rs) for name, rs in self.readers.items()}
        groups_x = self.exchange_groups(rtask_step)

        # Tile tasks (arrays, not an object per task) and timing.
        counts = np.array([op.kernel.num_rtasks for op in schedule.ops], dtype=np.int64)
        firsts = np.array([op.first_rtask for op in schedule.ops], dtype=np.int64)
        op_of = np.repeat(np.arange(len(counts)), counts)
        dur = np.repeat(np.array([cost.rtask_us(op.kernel) for op in schedule.ops], dtype=np.float64), counts)
        tasks = TileTasks.of_rtasks(rtask_step, tile_of, op_of, np.arange(n) - firsts[op_of])
        del op_of
        compute_us = np.zeros(num_steps)
        if n:
            key = rtask_step * vd.num_veus + veu_of
            uniq, inv = np.unique(key, return_inverse=True)
            per = np.bincount(inv, weights=dur)
            np.maximum.at(compute_us, uniq // vd.num_veus, per)
        exchange_us = np.zeros(num_steps)
        if any(len(g) for g in groups_x):
            # Per superstep, the most bytes a tile sends or receives, summed tensor by tensor.
            for side in ("src", "dst"):
                busiest = busiest_per_step(num_tiles, num_steps, [
                    Intervals.of_table(g.superstep, g.superstep, g.index, partial(g.table.tiles_bytes, side=side), "")
                    for g in groups_x])
                exchange_us = np.maximum(exchange_us, busiest)
            exchange_us = np.array([cost.exchange_us(b) for b in exchange_us])

        # Memory: owned slices from their superstep to the tensor's last use, received boxes for
        # their superstep, code for the whole program.
        # Each group is summed into a (tiles, supersteps) grid on its own (tile_memory.py): no
        # concatenated list of every slice and exchange.
        keep = {t.name for t in graph.outputs}
        held: list[Intervals] = []
        slice_steps: dict[str, np.ndarray] = {}
        for name, (_, owners, writers) in self.arrays.items():
            # (a model without rTasks has only constants and inputs: writers all -1)
            steps = np.where(writers >= 0, rtask_step[np.maximum(writers, 0)], -1) if n else np.full(len(writers), -1)
            slice_steps[name] = steps.astype(narrowest_int(num_steps))
            # Graph inputs are streamed in by the host for each run: held up to their last read, not
            # for the whole program like the constants.
            held_to_end = name in keep or name in graph.initializers or (name in self.sources and not INPUTS_FREED)
            end = num_steps - 1 if held_to_end else last_use.get(name, -1)
            held.append(Intervals(owners, np.maximum(steps, 0), np.maximum(np.maximum(steps, end), 0),
                                  self.slice_bytes[name], name, name not in self.sources))
        # Per tile: its distinct rKernels (code) and its rTasks (vertices).
        kernel_ids: dict[str, int] = {}
        kernel_of_op = np.array([kernel_ids.setdefault(op.kernel.kernel_id, len(kernel_ids)) for op in schedule.ops],
                                dtype=np.int64)
        pairs = sorted_distinct(tasks.tile.astype(np.int64) * max(1, len(kernel_ids))
                                + kernel_of_op[tasks.op.astype(np.int64)])
        kernels_per_tile = np.bincount(pairs // max(1, len(kernel_ids)), minlength=num_tiles)
        vertices = np.bincount(tile_of, minlength=num_tiles) if n else np.zeros(num_tiles, dtype=np.int64)
        code_tiles = np.flatnonzero(kernels_per_tile)
        code_bytes = (kernels_per_tile[code_tiles] * CODE_BYTES_PER_KERNEL
                      + vertices[code_tiles] * VERTEX_BYTES).astype(np.int64)
        held.append(Intervals(code_tiles, np.zeros_like(code_tiles), np.full_like(code_tiles, max(0, num_steps - 1)),
                              code_bytes, "(code)"))
        held += [Intervals.of_table(g.superstep, g.superstep, g.index, partial(g.table.tiles_bytes, side="dst"),
                                    f"{g.tensor} (received)") for g in groups_x]  # received: for their superstep
        peak = peak_bytes(num_tiles, num_steps, held)
        if (peak > sram).any():
            exc = IpuPlacementError(_overflow_message(peak, sram, held, num_tiles, num_steps, vd.name))
            exc.relief = self._relief(rtask_step, num_steps, held, peak)  # type: ignore[attr-defined]
            exc.const_owners = {(name, _box_key(box)): int(owner)  # type: ignore[attr-defined]
                                for name, (boxes, owners, _) in self.arrays.items() if name in self.sources
                                for box, owner in zip(boxes, owners)}
            # Each tile's peak of everything but its constants and inputs (kept for the whole program):
            # what a weight-stationary plan must leave free on it.
            exc.transient = peak_bytes(num_tiles, num_steps, held, movable_only=True)  # type: ignore[attr-defined]
            exc.peak = peak  # type: ignore[attr-defined]
            raise exc
        del held

        # The slices as arrays (the lowering's boxes and owners, shared), read as TensorSlices on demand.
        slices = Slices({name: (boxes, owners, slice_steps[name]) for name, (boxes, owners, _) in self.arrays.items()})
        busy = float(dur.sum())
        return BSPProgram(mode, schedule.policy, num_tiles, sram, num_steps, slices, groups_x, tasks, compute_us,
                          exchange_us, cost.sync_us, peak, busy, vd.num_veus, cost.describe())


    def _relief(self, rtask_step: np.ndarray, num_steps: int, held: list[Intervals], peak: np.ndarray
                ) -> dict[ChunkKey, int]:
        """New owners for constant chunks of the tiles over their SRAM (:func:`.relief.relief_moves`)."""
        live = live_grid(self.num_tiles, num_steps, held)
        over = np.flatnonzero(peak > self.sram * (1 - MARGIN_FRACTION))
        const_slices, read_steps = [], {}
        for name in self.arrays:
            if name not in self.sources:
                continue
            boxes, owners, _ = self.arrays[name]
            mine = np.flatnonzero(np.isin(owners, over))
            if not len(mine):
                continue
            nbytes = self.slice_bytes[name]
            const_slices += [(name, _box_key(boxes[j]), int(owners[j]), int(nbytes[j])) for j in mine]
            rids = np.concatenate(self.readers.get(name) or [np.zeros(0, np.int64)])
            rtiles = self.tile_of[rids]
            for tile in np.intersect1d(over, owners[mine]).tolist():
                read_steps[(name, tile)] = rtask_step[rids[rtiles == tile]]
        return relief_moves(self.sram, live, const_slices, read_steps)


def _overflow_message(peak: np.ndarray, sram: int, held: list[Intervals], num_tiles: int, num_steps: int,
                      device: str) -> str:
    over = np.flatnonzero(peak > sram)
    worst = int(over[np.argmax(peak[over])])
    at = int(np.argmax(live_grid(num_tiles, num_steps, held, tiles=(worst, worst + 1))[0]))  # the tile's peak superstep
    per = labelled_at(held, worst, at)
    top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
    listing = ", ".join(f"'{k}' {v / 1024:.1f} KiB" for k, v in top)
    return (f"the model does not fit the {device} tile memories: {len(over)} tile(s) overflow their "
            f"{sram // 1024} KiB SRAM; tile {worst} needs {int(peak[worst]) / 1024:.1f} KiB in superstep {at} "
            f"({listing}); choose kernels with smaller rTasks (more of them), a larger IPU preset, or split the model")
