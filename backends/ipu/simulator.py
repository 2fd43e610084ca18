"""Executing a BSP program in numpy, superstep by superstep.

Memory follows the model, not the tile count: every tensor has one shared value
array (constants and graph inputs are the caller's arrays, not copies) and
per-slice bookkeeping -- owner tile and the superstep its writer ran -- instead
of a copy per tile.  A tile *holds* an element when it owns the slice holding
it and that slice is written, or when the element arrived in this superstep's
exchange; received boxes are forgotten when the superstep ends, and an
activation's value array is freed after its last reader's superstep.

An rTask's declared reads must be held by its tile, else :class:`BSPOrderError`;
an exchange's source must own the whole box, written in an earlier superstep.
The op is computed with the reference semantics on inputs holding only the
boxes its rTasks declared (everything else NaN, 0 for integer tensors) -- on an
IPU a vertex sees only the edges connected to it -- so a read the rKernel did
not declare gives a wrong result rather than a right one by accident; only the
boxes the rTasks write are kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping

import numpy as np

from rammer.interpreter import _Env, run_node
from rammer.ir import Graph
from rammer.schedule import Schedule

from .bsp import BSPOrderError, BSPProgram, Slices, TileTasks
from .placement import boxes_array, is_static

_NOT_WRITTEN = np.iinfo(np.int64).max


def _sl(box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in np.asarray(box).tolist())


def _fill(dtype: np.dtype):
    return np.nan if np.issubdtype(dtype, np.floating) else 0


def _volumes(boxes: np.ndarray) -> np.ndarray:
    return np.maximum(boxes[..., 1] - boxes[..., 0], 0).prod(axis=-1)


def _clip(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """``boxes`` (n, ndim, 2) intersected with one ``box`` (ndim, 2)."""
    return np.stack([np.maximum(boxes[..., 0], box[:, 0]), np.minimum(boxes[..., 1], box[:, 1])], axis=-1)


class TensorState:
    """One tensor on the simulated chip: its slices (owner, written superstep) and one shared value."""

    def __init__(self, graph: Graph, name: str, program: BSPProgram) -> None:
        info = graph.value_info[name]
        self.name = name
        self.shape = tuple(int(d) for d in info.shape)
        self.dtype = np.dtype(info.dtype)
        if isinstance(program.slices, Slices) and name in program.slices:  # the lowering's arrays, shared
            self.boxes, self.owners, steps = program.slices.arrays(name)
            self.loaded = steps < 0
        else:  # slices given as lists (a test's edited program)
            ss = program.slices.get(name, [])
            self.boxes = boxes_array([s.box for s in ss], len(self.shape))
            self.owners = np.array([s.owner for s in ss], dtype=np.int64)
            self.loaded = np.array([s.superstep < 0 for s in ss], dtype=bool)
        self.written = np.full(len(self.owners), _NOT_WRITTEN, dtype=np.int64)
        self.value: np.ndarray | None = None
        self._by_tile: dict[int, np.ndarray] | None = None

    def slices_of(self, tile: int) -> np.ndarray:
        """Indices of the slices ``tile`` owns (a tensor of a large model has tens of thousands of
        slices and as many reads: comparing every owner per read was quadratic)."""
        if self._by_tile is None:
            order = np.argsort(self.owners, kind="stable")
            tiles, starts = np.unique(self.owners[order], return_index=True)
            bounds = np.r_[starts, len(order)]
            self._by_tile = {int(t): order[bounds[j]:bounds[j + 1]] for j, t in enumerate(tiles)}
        return self._by_tile.get(tile, np.zeros(0, dtype=np.int64))

    def release(self) -> None:
        """Drop the value and the per-tile index after the tensor's last read: the index holds an
        array per owner tile (up to 1,472), and kept for every tensor it grew real:densenet121's
        simulation from 381 to 462 MB (394 MB flat with it released)."""
        self.value = None
        self._by_tile = None

    def ensure_value(self) -> np.ndarray:
        if self.value is None:
            self.value = np.full(self.shape, _fill(self.dtype), dtype=self.dtype)
        return self.value


class ChipMemory:
    """Every tensor's state plus the boxes received in the current superstep."""

    def __init__(self, program: BSPProgram, graph: Graph) -> None:
        self.program, self.graph = program, graph
        self.tensors: dict[str, TensorState] = {}
        #: tensor -> (destination tiles, boxes, source slices) received in the current superstep.
        self.received: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: tensor -> (received rows ordered by destination, destination tile -> its range of them),
        #: built on first use in a superstep (a superstep of real:resnet50 receives up to 1.8 M boxes
        #: of one tensor: comparing every destination per read was quadratic).
        self._received_by_tile: dict[str, tuple[np.ndarray, dict[int, tuple[int, int]]]] = {}

    def state(self, name: str) -> TensorState:
        st = self.tensors.get(name)
        if st is None:
            st = self.tensors[name] = TensorState(self.graph, name, self.program)
        return st

    def receive(self, name: str, dst: np.ndarray, boxes: np.ndarray, source: np.ndarray) -> None:
        """``boxes`` of ``name`` received by the tiles ``dst``, each part of the slice ``source``."""
        self.received[name] = (dst, boxes, source)
        self._received_by_tile.pop(name, None)

    def end_superstep(self) -> None:
        """Received buffers live for their superstep only."""
        self.received.clear()
        self._received_by_tile.clear()

    def received_by(self, name: str, tile: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The boxes of ``name`` that ``tile`` received in this superstep and their source slices
        (None: none)."""
        got = self.received.get(name)
        if got is None:
            return None
        index = self._received_by_tile.get(name)
        if index is None:
            order = np.argsort(got[0], kind="stable")
            tiles, starts = np.unique(got[0][order], return_index=True)
            ends = np.r_[starts[1:], len(order)]
            index = self._received_by_tile[name] = (order, dict(zip(tiles.tolist(), zip(starts.tolist(),
                                                                                        ends.tolist()))))
        order, ranges = index
        at = ranges.get(tile)
        if at is None:
            return None
        rows = order[at[0]:at[1]]
        return got[1][rows], got[2][rows]

    def holds(self, name: str, tile: int, box, step: int) -> bool:
        """Whether ``tile`` holds every element of ``box`` of ``name`` during ``step``'s compute."""
        return self.first_not_held(name, tile, [box], step) < 0

    def first_not_held(self, name: str, tile: int, boxes: list, step: int) -> int:
        """The index of the first of ``boxes`` (reads of ``name`` by ``tile``'s rTasks in ``step``)
        that the tile does not wholly hold during the step's compute, or -1.

        What a tile holds is its written slices and the boxes it received, each part of one slice
        of the tensor.  Slices are disjoint, so parts of distinct slices are too, and a read is held
        when the volumes of its parts add up to its own; only parts of one slice can overlap (the
        received boxes of overlapping reads), and only then are the elements marked one part at a
        time (each read marking every part cost real:squeezenet's simulation three quarters of its
        time: a read of a conv's input rows has hundreds of received parts)."""
        st = self.state(name)
        ndim = len(st.shape)
        reads = np.asarray(boxes, dtype=np.int64).reshape(len(boxes), ndim, 2)
        idx = st.slices_of(tile)
        own = idx[st.written[idx] <= step]
        parts, slices = st.boxes[own], own
        mine = self.received_by(name, tile)
        if mine is not None:
            parts, slices = np.concatenate([parts, mine[0]]), np.concatenate([slices, mine[1]])
        for i, box in enumerate(reads):
            want = int(np.maximum(box[:, 1] - box[:, 0], 0).prod())
            if want == 0:
                continue  # an empty box reads nothing
            on_box = _clip(parts, box)
            volumes = _volumes(on_box)
            kept = volumes > 0
            got = int(volumes[kept].sum())
            if got < want:  # the union is at most the sum of the volumes
                return i
            if got == want and len(np.unique(slices[kept])) == int(kept.sum()):
                continue  # one part per slice: disjoint
            if not _union_covers(on_box[kept], box):
                return i
        return -1


def _union_covers(parts: np.ndarray, box: np.ndarray) -> bool:
    """Whether the boxes ``parts`` (k, ndim, 2), inside ``box`` (ndim, 2), cover it (element marks)."""
    covered = np.zeros(tuple((box[:, 1] - box[:, 0]).tolist()), dtype=bool)
    rows = set(map(tuple, (parts - box[:, :1]).reshape(len(parts), 2 * len(box)).tolist()))  # repeats
    for part in rows:
        covered[tuple(slice(part[2 * d], part[2 * d + 1]) for d in range(len(box)))] = True
    return bool(covered.all())


def _exchanges_by_step(program: BSPProgram, memory: ChipMemory) -> Iterator[tuple[int, dict]]:
    """Per superstep: tensor -> (src, dst, boxes, source slice) arrays."""
    per_step: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    if program._exchanges is not None:  # an edited list (tests): source slices looked up here
        for e in program._exchanges:
            st = memory.state(e.tensor)
            b = np.asarray(e.box, dtype=np.int64).reshape(-1, 2)
            inside = np.flatnonzero((st.owners == e.src) & np.all((st.boxes[..., 0] <= b[:, 0])
                                                                 & (b[:, 1] <= st.boxes[..., 1]), axis=-1))
            per_step[e.superstep][e.tensor].append((e.src, e.dst, b, int(inside[0]) if len(inside) else -1))
        for step, by in sorted(per_step.items()):
            yield step, {name: (np.array([x[0] for x in xs]), np.array([x[1] for x in xs]),
                                np.stack([x[2] for x in xs]), np.array([x[3] for x in xs]))
                         for name, xs in by.items()}
        return
    # Groups are sorted by superstep: one slice of each per superstep (no per-exchange objects, and no
    # sorted copy of 8 bytes per exchange, 100 MB on real:resnet50).
    bounds = []
    for g in program.exchange_groups:
        steps = g.superstep
        if len(steps) > 1 and (steps[1:] < steps[:-1]).any():
            raise ValueError(f"the exchanges of '{g.tensor}' are not sorted by superstep")
        bounds.append((g, np.searchsorted(steps, np.arange(program.num_supersteps + 1))))
    for step in range(program.num_supersteps):
        out = {}
        for g, at in bounds:
            lo, hi = int(at[step]), int(at[step + 1])
            if hi > lo:
                src, dst, boxes, _, sid = g.take(slice(lo, hi))
                out[g.tensor] = (src, dst, boxes, sid)
        if out:
            yield step, out


def _tile_tasks(program: BSPProgram) -> TileTasks:
    """The program's tile tasks as arrays (a test's edited list converted)."""
    return program.tasks if isinstance(program.tasks, TileTasks) else TileTasks.of_list(program.tasks)


def _last_use(program: BSPProgram, graph: Graph) -> dict[str, int]:
    """The last superstep reading each tensor (a task's input or an exchange)."""
    last: dict[str, int] = {}
    op_last = _tile_tasks(program).last_superstep_of_ops(len(graph.nodes))
    for op in np.flatnonzero(op_last >= 0).tolist():
        for name in graph.nodes[op].inputs:
            if name:
                last[name] = max(last.get(name, -1), int(op_last[op]))
    if program._exchanges is not None:
        for e in program._exchanges:
            last[e.tensor] = max(last.get(e.tensor, -1), e.superstep)
    else:
        for g in program.exchange_groups:
            if len(g.superstep):
                last[g.tensor] = max(last.get(g.tensor, -1), int(g.superstep.max()))
    return last


def model_bytes(program: BSPProgram, graph: Graph) -> tuple[int, int]:
    """(weights, largest live activations) in bytes: the terms of issue 39's bound on the simulator's
    memory, 3 x (weights + largest live activations) + 300 MB.  Live activations: per superstep, the
    bytes of every computed tensor from its writer's superstep to its last reader's (or the end, for
    graph outputs)."""
    weights = sum(int(np.asarray(v).nbytes) for v in graph.initializers.values())
    last = _last_use(program, graph)
    outputs = {t.name for t in graph.outputs}
    live = np.zeros(program.num_supersteps + 1, dtype=np.int64)
    for name in program.slices:
        if isinstance(program.slices, Slices):
            steps = program.slices.arrays(name)[2]
            first = int(steps.min()) if len(steps) else -1
        else:
            first = min((s.superstep for s in program.slices[name]), default=-1)
        if first < 0:
            continue
        info = graph.value_info[name]
        end = program.num_supersteps - 1 if name in outputs else max(first, last.get(name, first))
        live[first:end + 1] += int(np.prod(info.shape)) * np.dtype(info.dtype).itemsize
    return weights, int(live.max())


def simulate_program(program: BSPProgram, schedule: Schedule, graph: Graph,
                     feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``program`` on ``feeds``; the graph outputs gathered from their owner tiles."""
    memory = ChipMemory(program, graph)
    for name in program.slices:  # host -> tile streams before superstep 0
        st = memory.state(name)
        if st.loaded.any():
            source = feeds[name] if name in feeds else graph.initializers[name]
            st.value = np.asarray(source, dtype=st.dtype)  # the caller's array: no copy per tile
            st.written[st.loaded] = -1
    tasks = _tile_tasks(program)
    keep = {t.name for t in graph.outputs}
    last = _last_use(program, graph)
    free_at: dict[int, list[str]] = defaultdict(list)
    for name, step in last.items():
        if name not in keep:
            free_at[step].append(name)
    exchanges = _exchanges_by_step(program, memory)  # lazily, in superstep order
    pending = next(exchanges, None)
    with np.errstate(all="ignore"):
        for step in range(program.num_supersteps):
            # Exchange: the source must own the whole box, written in an earlier superstep.
            this_step: dict = {}
            while pending is not None and pending[0] < step:  # outside the program: never run
                pending = next(exchanges, None)
            if pending is not None and pending[0] == step:
                this_step, pending = pending[1], next(exchanges, None)
            for name, (src, dst, boxes, sid) in this_step.items():
                st = memory.state(name)
                safe = np.maximum(sid, 0)
                ok = (sid >= 0) & (st.owners[safe] == src) & (st.written[safe] < step) if len(st.owners) else sid >= 0
                if not ok.all():
                    j = int(np.flatnonzero(~ok)[0])
                    raise BSPOrderError(f"superstep {step}: tile {int(src[j])} sends '{name}' "
                                        f"{boxes[j].tolist()} that it does not own yet")
                memory.receive(name, dst, boxes, sid)
            for of_op in _tasks_by_op(tasks.in_superstep(step)):  # one superstep's task objects at a time
                if len(of_op) > 1 and _masked_cost(of_op, graph) > PER_TILE_MASK_ELEMENTS:
                    _compute_op(of_op, schedule, graph, memory, step)
                else:
                    for t in of_op:
                        _compute(t, schedule, graph, memory, step)
            memory.end_superstep()
            for name in free_at.get(step, ()):  # nothing is kept from finished supersteps
                if name in memory.tensors:
                    memory.tensors[name].release()
    out = {}
    for t in graph.outputs:
        if is_static(graph, t.name):
            out[t.name] = np.array(graph.initializers[t.name], copy=True)
            continue
        st = memory.state(t.name)
        full = np.empty(st.shape, dtype=st.dtype)
        if st.value is not None:
            for box in st.boxes:
                full[_sl(box)] = st.value[_sl(box)]
        out[t.name] = full
    return out


#: Above this many elements (the op's output size times the tiles running it in one superstep),
#: the op runs once for all those tiles, on inputs holding the union of their declared reads,
#: instead of once per tile on inputs holding that tile's reads.  Each tile's reads are still
#: checked to be held by it; what is lost is only that a read one rTask fails to declare, but an
#: rTask of the same op on another tile declares in the same superstep, is not made NaN.  Per tile,
#: a layer of a 224 px model on ~1,400 tiles computed the whole layer ~1,400 times: real:zfnet512's
#: simulation did not finish in 900 s.
PER_TILE_MASK_ELEMENTS = 1 << 22


def _tasks_by_op(tasks) -> list[list]:
    """The tile tasks of one superstep grouped by op, in op order (producers before consumers)."""
    by_op: dict[int, list] = defaultdict(list)
    for t in tasks:
        by_op[t.op].append(t)
    return [by_op[op] for op in sorted(by_op)]


def _masked_cost(tasks, graph: Graph) -> int:
    node = graph.nodes[tasks[0].op]
    size = 0
    for name in node.outputs:
        info = graph.value_info.get(name) if name else None
        if info is not None and info.shape is not None:
            size += int(np.prod(info.shape))
    return size * len(tasks)


def _compute(task, schedule: Schedule, graph: Graph, memory: ChipMemory, step: int) -> None:
    _compute_op([task], schedule, graph, memory, step)


def _compute_op(tasks, schedule: Schedule, graph: Graph, memory: ChipMemory, step: int) -> None:
    """Run the tile tasks ``tasks`` of one op in superstep ``step``: every declared read checked
    to be held by its tile, the op computed once on inputs holding only the reads the tasks
    declared, the tasks' write boxes kept (owned by their tiles)."""
    op_index = tasks[0].op
    node = graph.nodes[op_index]
    k = schedule.ops[op_index].kernel
    read_boxes: dict[str, set] = defaultdict(set)
    reads: dict[tuple[str, int], list] = defaultdict(list)  # (tensor, tile) -> [(box, rTask)]
    writes: dict[tuple[str, int], list] = defaultdict(list)  # (tensor, tile) -> [box]
    for task in tasks:
        for r in task.rtasks:
            a = k.accesses(r)
            for slot, box in a.reads:
                name = node.inputs[slot] if slot < len(node.inputs) else ""
                if not name or is_static(graph, name):
                    continue
                reads[name, task.tile].append((box, r))
            for slot, box in a.writes:
                name = node.outputs[slot] if slot < len(node.outputs) else ""
                if name:
                    writes[name, task.tile].append(box)
    for (name, tile), boxes in reads.items():
        bad = memory.first_not_held(name, tile, [box for box, _ in boxes], step)
        if bad >= 0:
            box, r = boxes[bad]
            raise BSPOrderError(
                f"superstep {step}: tile {tile} runs rTask {r} of {node.label}, which reads "
                f"'{name}' {[list(b) for b in box]} that the tile neither owns nor received")
        read_boxes[name].update(tuple((int(lo), int(hi)) for lo, hi in box) for box, _ in boxes)
    env = _Env(graph, None)
    env.values = {name: graph.initializers[name] if is_static(graph, name) else _tile_view(memory, name, read_boxes)
                  for name in node.inputs if name}
    outs = run_node(node, graph, env, check=True)
    produced = dict(zip([o for o in node.outputs if o], outs))
    for (name, tile), boxes in writes.items():
        st = memory.state(name)
        value, result = st.ensure_value(), np.asarray(produced[name])
        for box in boxes:
            at = _sl(box)
            value[at] = result[at]
        idx = st.slices_of(tile)
        if not len(idx):
            continue
        wrote = np.asarray(boxes, dtype=np.int64).reshape(len(boxes), len(st.shape), 2)
        lo = np.maximum(st.boxes[idx][:, None, :, 0], wrote[None, :, :, 0])  # (slices, writes, ndim)
        hi = np.minimum(st.boxes[idx][:, None, :, 1], wrote[None, :, :, 1])
        mine = idx[(hi > lo).all(axis=-1).any(axis=1)]
        st.written[mine] = np.minimum(st.written[mine], step)


def _tile_view(memory: ChipMemory, name: str, read_boxes: dict[str, set]) -> np.ndarray:
    """``name`` as the tile's vertices see it: the declared read boxes, NaN (or 0) elsewhere."""
    st = memory.state(name)
    view = np.full(st.shape, _fill(st.dtype), dtype=st.dtype)
    if st.value is not None:
        for box in read_boxes.get(name, ()):
            view[_sl(box)] = st.value[_sl(box)]
    return view

