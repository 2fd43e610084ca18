"""Executing a BSP program in numpy, tile by tile.

Each tile has its own memory: per tensor, an array and a mask of the elements
it holds (slices it owns, boxes it received this superstep).  An rTask's
declared reads must be present on its tile, else :class:`BSPOrderError`; its
op is then computed with the reference semantics on inputs assembled from the
tile's memory only (elements the tile does not hold are NaN, 0 for integer
tensors), so a read the rKernel did not declare gives a wrong result rather
than a right one by accident, and only the boxes the rTasks write are kept.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

import numpy as np

from rammer.interpreter import _Env, run_node
from rammer.ir import Graph
from rammer.schedule import Schedule

from .bsp import BSPOrderError, BSPProgram
from .placement import is_static


def _sl(box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in box)


class TileMemory:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.data: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.received: list[tuple[str, tuple]] = []

    def _entry(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self.data:
            info = self.graph.value_info[name]
            dtype = np.dtype(info.dtype)
            fill = np.nan if np.issubdtype(dtype, np.floating) else 0
            self.data[name] = (np.full(info.shape, fill, dtype=dtype), np.zeros(info.shape, dtype=bool))
        return self.data[name]

    def store(self, name: str, box, values: np.ndarray) -> None:
        arr, mask = self._entry(name)
        arr[_sl(box)] = values
        mask[_sl(box)] = True

    def holds(self, name: str, box) -> bool:
        if any(hi <= lo for lo, hi in box):
            return True  # an empty box reads nothing
        if name not in self.data:
            return False
        return bool(self.data[name][1][_sl(box)].all())

    def view(self, name: str) -> np.ndarray:
        return self._entry(name)[0]


def simulate_program(program: BSPProgram, schedule: Schedule, graph: Graph,
                     feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``program`` on ``feeds``; the graph outputs gathered from their owner tiles."""
    tiles: dict[int, TileMemory] = defaultdict(lambda: TileMemory(graph))
    values = {**graph.initializers, **{k: np.asarray(v) for k, v in feeds.items()}}
    for name, ss in program.slices.items():  # host -> tile streams before superstep 0
        for s in ss:
            if s.superstep < 0:
                tiles[s.owner].store(name, s.box, np.asarray(values[name])[_sl(s.box)])
    by_step_x: dict[int, list] = defaultdict(list)
    for e in program.exchanges:
        by_step_x[e.superstep].append(e)
    by_step_t: dict[int, list] = defaultdict(list)
    for t in program.tasks:
        by_step_t[t.superstep].append(t)
    owned_by: dict[tuple[str, int], list] = defaultdict(list)
    for name, ss in program.slices.items():
        for s in ss:
            owned_by[(name, s.owner)].append(s)
    with np.errstate(all="ignore"):
        for step in range(program.num_supersteps):
            # Exchange: the source must own the whole box, from an earlier superstep.
            for e in by_step_x[step]:
                src = tiles[e.src]
                ok = any(s.superstep < step and all(a <= c and d <= b for (a, b), (c, d) in zip(s.box, e.box))
                         for s in owned_by[(e.tensor, e.src)])
                if not ok or not src.holds(e.tensor, e.box):
                    raise BSPOrderError(f"superstep {step}: tile {e.src} sends '{e.tensor}' {list(e.box)} "
                                        "that it does not own yet")
                dst = tiles[e.dst]
                dst.store(e.tensor, e.box, src.view(e.tensor)[_sl(e.box)])
                dst.received.append((e.tensor, e.box))
            for t in by_step_t[step]:
                _compute(t, schedule, graph, tiles[t.tile], step)
            # Received buffers are freed at the end of the superstep; slices of one tensor are
            # disjoint, so a received box never overlaps what the tile owns.
            for tile in tiles.values():
                for name, box in tile.received:
                    arr, mask = tile.data[name]
                    mask[_sl(box)] = False
                    arr[_sl(box)] = _fill(arr.dtype)
                tile.received.clear()
    out = {}
    for t in graph.outputs:
        if is_static(graph, t.name):
            out[t.name] = np.array(graph.initializers[t.name], copy=True)
            continue
        full = np.empty(graph.value_info[t.name].shape, dtype=np.dtype(graph.value_info[t.name].dtype))
        for s in program.slices.get(t.name, []):
            full[_sl(s.box)] = tiles[s.owner].view(t.name)[_sl(s.box)]
        out[t.name] = full
    return out


def _fill(dtype: np.dtype):
    return np.nan if np.issubdtype(dtype, np.floating) else 0


def _compute(task, schedule: Schedule, graph: Graph, mem: TileMemory, step: int) -> None:
    op = schedule.ops[task.op]
    node = graph.nodes[task.op]
    k = op.kernel
    acc = [k.accesses(r) for r in task.rtasks]
    for r, a in zip(task.rtasks, acc):
        for slot, box in a.reads:
            name = node.inputs[slot] if slot < len(node.inputs) else ""
            if name and not is_static(graph, name) and not mem.holds(name, box):
                raise BSPOrderError(
                    f"superstep {step}: tile {task.tile} runs rTask {r} of {node.label}, which reads "
                    f"'{name}' {[list(b) for b in box]} that the tile neither owns nor received")
    env = _Env(graph, None)
    env.values = {name: graph.initializers[name] if is_static(graph, name) else mem.view(name)
                  for name in node.inputs if name}
    outs = run_node(node, graph, env, check=True)
    produced = dict(zip([o for o in node.outputs if o], outs))
    for a in acc:
        for slot, box in a.writes:
            name = node.outputs[slot] if slot < len(node.outputs) else ""
            if name:
                mem.store(name, box, np.asarray(produced[name])[_sl(box)])
