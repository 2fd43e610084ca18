"""The static schedule: for each vEU, an ordered program of rTasks and
barrier rTasks.  Plain data with stable integer ids and a JSON round trip.

Ids: the rTasks of op ``i`` (in graph order) using a kernel with ``n``
rTasks have ids ``first_rtask[i] .. first_rtask[i] + n - 1``, in
``rtask_id`` order, so an rTask's id depends only on the kernels chosen.
Barriers have ids ``num_rtasks ..``, numbered by (vEU, position).

Semantics (see docs/scheduling.md): a vEU runs its program in order, one
entry at a time; an rTask entry runs ``rtask_id`` of its op's kernel; a
barrier on vEU ``v`` blocks ``v`` until every rTask it lists has completed.
Program order on one vEU implies completion order, so a barrier need list
only the last rTask it depends on per other vEU.

The JSON is self-contained: each operator carries its op type, attributes,
input and output tensors (name, dtype, shape, constant or not, and the arena
offset once a backend has placed it, :meth:`Schedule.place`) and, when its
kernel can say, each rTask's tile (the boxes it reads and writes), so a code
generator can render a program from the JSON alone (:mod:`.records`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ScheduleError
from ..rtask import RKernel, RTask
from ..vdevice import VDevice
from .problem import Problem
from .records import TensorRef, decode_attr, decode_tiles, encode_attr, encode_tiles, has_tiles, tensor_refs
from .waits import NO_SKIP, BarrierWaitsField, CompactWaits, compact_waits, hold_compact, stored_waits

#: The self-contained fields (attrs, inputs, outputs, rtasks) are additions: a reader
#: that ignores them still reads the schedule, and schedules without them still load.
FORMAT = "rammer.schedule/1"


@dataclass(frozen=True)
class ScheduledOp:
    """One operator of a schedule: the kernel chosen and its first rTask id."""

    name: str
    op_type: str
    kernel: RKernel
    first_rtask: int
    #: Indices of the ops it depends on (all their rTasks before any of its own).
    preds: tuple[int, ...]
    #: The node's attributes, and the tensors it reads and writes (in slot order).
    attrs: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorRef, ...] = ()
    outputs: tuple[TensorRef, ...] = ()


@dataclass(frozen=True)
class RTaskEntry:
    id: int
    op: str
    kernel: str
    rtask_id: int


@dataclass(frozen=True)
class BarrierEntry:
    id: int
    waits: tuple[int, ...]


@dataclass(eq=False)
class Schedule:
    policy: str
    graph_name: str
    vdevice: VDevice
    ops: list[ScheduledOp]
    #: Entry ids per vEU, in program order.
    programs: list[list[int]]
    #: The rTask ids barrier ``num_rtasks + b`` waits for.  A policy's schedule keeps them compactly
    #: (:mod:`.waits`) and builds this list when it is first read: a field whose value a descriptor
    #: holds (to type checkers, the plain list it reads as).
    if TYPE_CHECKING:
        barrier_waits: list[tuple[int, ...]]
    else:
        barrier_waits: list[tuple[int, ...]] = BarrierWaitsField()
    #: Cost of one barrier once its rTasks are done (a kernel launch gap for op-by-op).
    barrier_cost_us: float
    options: dict[str, Any] = field(default_factory=dict)
    #: Tensor name -> byte offset in the backend's arena, once memory is planned (:meth:`place`).
    offsets: dict[str, int] = field(default_factory=dict)

    def place(self, offsets: Mapping[str, int]) -> None:
        """Record where a backend placed tensors (byte offsets in its arena); the JSON carries them."""
        self.offsets.update({str(k): int(v) for k, v in offsets.items()})

    # -- sizes and lookups --------------------------------------------------
    @cached_property
    def num_rtasks(self) -> int:
        return sum(op.kernel.num_rtasks for op in self.ops)

    @property
    def num_barriers(self) -> int:
        return len(stored_waits(self))

    def barrier_wait_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(all barriers' waits concatenated, the start of each barrier's and the end), without
        building the per-barrier tuples when the schedule still holds them compactly."""
        held = stored_waits(self)
        if isinstance(held, CompactWaits):
            return held.arrays()
        starts = np.zeros(len(held) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in held], out=starts[1:])
        return np.fromiter(chain.from_iterable(held), np.int64, int(starts[-1])), starts

    @cached_property
    def rtask_op(self) -> np.ndarray:
        """Op index of every rTask id."""
        counts = [op.kernel.num_rtasks for op in self.ops]
        return np.repeat(np.arange(len(self.ops), dtype=np.int64), counts)

    @cached_property
    def op_durations(self) -> np.ndarray:
        return np.array([op.kernel.duration_us for op in self.ops], dtype=np.float64)

    def is_barrier(self, entry: int) -> bool:
        return entry >= self.num_rtasks

    def entry(self, entry: int) -> RTaskEntry | BarrierEntry:
        if entry >= self.num_rtasks:
            return BarrierEntry(entry, self.barrier_waits[entry - self.num_rtasks])
        op = self.ops[int(self.rtask_op[entry])]
        return RTaskEntry(entry, op.name, op.kernel.kernel_id, entry - op.first_rtask)

    def entries(self, veu: int) -> list[RTaskEntry | BarrierEntry]:
        """vEU ``veu``'s program as typed entries."""
        return [self.entry(e) for e in self.programs[veu]]

    def describe_rtask(self, rtask: int) -> str:
        if rtask < 0 or rtask >= self.num_rtasks:
            return f"rTask {rtask} (no such rTask)"
        e = self.entry(rtask)
        assert isinstance(e, RTaskEntry)  # ids below num_rtasks are rTasks, not barriers
        return f"rTask {rtask} ('{e.op}' #{e.rtask_id})"

    # -- plain data ------------------------------------------------------------
    def to_dict(self, summary: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The schedule as JSON-ready data; ``summary`` (e.g. simulated
        makespan, utilization, barriers) is merged in at the top level."""
        n = self.num_rtasks
        # Each op's name and kernel id once (not per rTask: a full-size GPU schedule has 10^4-10^5).
        names = [op.name for op in self.ops]
        kernel_ids = [op.kernel.kernel_id for op in self.ops]
        firsts = [op.first_rtask for op in self.ops]
        rtask_op = self.rtask_op.tolist()
        programs = []
        for prog in self.programs:
            out = []
            for e in prog:
                if e >= n:
                    out.append({"id": e, "barrier": list(self.barrier_waits[e - n])})
                else:
                    o = rtask_op[e]
                    out.append({"id": e, "op": names[o], "kernel": kernel_ids[o], "rtask_id": e - firsts[o]})
            programs.append(out)
        data: dict[str, Any] = {
            "format": FORMAT, "policy": self.policy, "graph": self.graph_name,
            "vdevice": self.vdevice.to_dict(), "barrier_cost_us": self.barrier_cost_us,
            "granularity": "op", "options": dict(self.options),
            "num_rtasks": self.num_rtasks, "num_barriers": self.num_barriers,
        }
        data.update(summary or {})
        data["operators"] = [self._operator(op) for op in self.ops]
        data["programs"] = programs
        return data

    def _operator(self, op: ScheduledOp, tiles: bool = True) -> dict[str, Any]:
        d = {"name": op.name, "op_type": op.op_type, "first_rtask": op.first_rtask,
             "preds": [self.ops[p].name for p in op.preds], **op.kernel.describe(),
             "attrs": {k: encode_attr(v) for k, v in op.attrs.items()},
             "inputs": [t.to_dict(self.offsets.get(t.name)) for t in op.inputs],
             "outputs": [t.to_dict(self.offsets.get(t.name)) for t in op.outputs]}
        if tiles and has_tiles(op.kernel):
            d["rtasks"] = encode_tiles(op.kernel)
        return d

    def to_json(self, path: str, summary: Mapping[str, Any] | None = None) -> None:
        # json.dumps, not json.dump: only dumps uses the C encoder (dump streams through the Python
        # one), 5-10x faster on a full-size GPU schedule's million barrier waits; the text is the same.
        text = json.dumps(self.to_dict(summary), separators=(",", ":"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        if data.get("format") != FORMAT:
            raise ScheduleError(f"not a rammer schedule (format {data.get('format')!r}, expected {FORMAT!r})")
        try:
            index = {op["name"]: i for i, op in enumerate(data["operators"])}
            ops = [_scheduled_op(op, index) for op in data["operators"]]
            offsets = {t["name"]: int(t["offset"]) for op in data["operators"]
                       for t in op.get("inputs", []) + op.get("outputs", []) if "offset" in t}
            num_rtasks = sum(op.kernel.num_rtasks for op in ops)
            programs: list[list[int]] = []
            waits: dict[int, tuple[int, ...]] = {}
            for prog in data["programs"]:
                ids = []
                for e in prog:
                    ids.append(int(e["id"]))
                    if "barrier" in e:
                        waits[int(e["id"])] = tuple(int(w) for w in e["barrier"])
                programs.append(ids)
            barrier_waits = [waits[num_rtasks + b] for b in range(len(waits))]
            return cls(data["policy"], data.get("graph", ""), VDevice.from_dict(data["vdevice"]), ops, programs,
                       barrier_waits, float(data["barrier_cost_us"]), dict(data.get("options", {})), offsets)
        except (KeyError, TypeError, ValueError) as exc:
            raise ScheduleError(f"malformed schedule data: {type(exc).__name__}: {exc}") from None

    @classmethod
    def from_json(cls, path: str) -> Schedule:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


def _scheduled_op(op: Mapping[str, Any], index: Mapping[str, int]) -> ScheduledOp:
    kernel = RKernel.from_description(op)
    if "rtasks" in op:  # the tiles written by to_dict: the kernel can say them again
        tiles = decode_tiles(op["rtasks"], kernel.num_rtasks, op["name"])
        kernel = replace(kernel, access_fn=tiles.__getitem__)
    return ScheduledOp(op["name"], op["op_type"], kernel, int(op["first_rtask"]), tuple(index[p] for p in op["preds"]),
                       {k: decode_attr(v) for k, v in op.get("attrs", {}).items()},
                       tuple(TensorRef.from_dict(t) for t in op.get("inputs", [])),
                       tuple(TensorRef.from_dict(t) for t in op.get("outputs", [])))


#: Up to this many rTasks, :meth:`ScheduleBuilder.append_rtasks` appends them one by one.
SMALL_APPEND = 256


class ScheduleBuilder:
    """Builds a schedule with the paper's interface: :meth:`append` an rTask
    to a vEU, :meth:`wait` (append a barrier rTask) for a set of rTasks.

    Policies that place many rTasks use the integer forms
    (:meth:`append_rtask`, :meth:`wait_ids`): an rTask is then named by a
    *handle* returned when it was appended.
    """

    def __init__(self, problem: Problem, policy: str, barrier_cost_us: float,
                 options: Mapping[str, Any] | None = None) -> None:
        self.problem = problem
        self.policy = policy
        self.barrier_cost_us = barrier_cost_us
        self.options = dict(options or {})
        self.kernels: list[RKernel | None] = [None] * len(problem.rops)
        self.programs: list[list[int]] = [[] for _ in range(problem.vdevice.num_veus)]
        # Handle h >= 0 is an rTask; -(b + 1) is barrier b.
        self._handle_op: list[int] = []
        self._handle_local: list[int] = []
        # Barrier b waits for the handles of group _barrier_group[b] but those at positions
        # _barrier_skips[b] (see .waits: many barriers share one group on a many-vEU vDevice).
        self._wait_groups: list[np.ndarray] = []
        self._barrier_group: list[int] = []
        self._barrier_skips: list[np.ndarray] = []
        # A vDevice whose programs do not read the waits (VDevice.exact_waits) gets every barrier's
        # whole group: the skips were most of what a schedule on 1,472 tiles stored.
        self._keep_skips = problem.vdevice.exact_waits
        self._placed: set[tuple[int, int]] = set()
        # Ops with an rTask in _placed; ops whose rTasks were all appended at once (append_rtasks).
        self._placed_ops: set[int] = set()
        self._placed_whole: set[int] = set()

    def choose(self, op: int, kernel: RKernel) -> None:
        """Fix the kernel of op ``op`` (before appending its rTasks)."""
        current = self.kernels[op]
        if current is not None and current is not kernel:
            raise ScheduleError(f"op '{self.problem.names[op]}' already uses {current.kernel_id}")
        self.kernels[op] = kernel

    def append_rtask(self, op: int, rtask_id: int, veu: int) -> int:
        kernel = self.kernels[op]
        if kernel is None:
            raise ScheduleError(f"choose a kernel for op '{self.problem.names[op]}' before appending its rTasks")
        if not 0 <= rtask_id < kernel.num_rtasks or (op, rtask_id) in self._placed or op in self._placed_whole:
            raise ScheduleError(f"rTask {rtask_id} of op '{self.problem.names[op]}' is out of range or placed twice")
        self._placed.add((op, rtask_id))
        self._placed_ops.add(op)
        handle = len(self._handle_op)
        self._handle_op.append(op)
        self._handle_local.append(rtask_id)
        self.programs[veu].append(handle)
        return handle

    def append_rtasks(self, op: int, veus: np.ndarray) -> int:
        """Append every rTask of ``op`` at once, rTask ``r`` to vEU ``veus[r]`` (in the order of ``r``
        on each vEU), as :meth:`append_rtask` for ``r = 0, 1, ...`` would; returns the handle of rTask 0
        (rTask ``r``'s is that plus ``r``).  A batch-8 model has a million rTasks, and a call each
        cost a third of its scheduling."""
        kernel = self.kernels[op]
        if kernel is None:
            raise ScheduleError(f"choose a kernel for op '{self.problem.names[op]}' before appending its rTasks")
        n = kernel.num_rtasks
        veus = np.asarray(veus, dtype=np.int64)
        if (veus.shape != (n,) or op in self._placed_whole or op in self._placed_ops
                or (n and not 0 <= int(veus.min()) <= int(veus.max()) < len(self.programs))):
            raise ScheduleError(f"op '{self.problem.names[op]}': give each of its {n} rTasks one vEU, once")
        self._placed_whole.add(op)
        first = len(self._handle_op)
        self._handle_op.extend(repeat(op, n))
        self._handle_local.extend(range(n))
        if n <= SMALL_APPEND:  # an unrolled RNN's thousands of small ops: no array passes
            programs = self.programs
            for r, v in enumerate(veus.tolist()):
                programs[v].append(first + r)
            return first
        order = np.argsort(veus, kind="stable")
        handles = (order + first).tolist()
        bounds = np.searchsorted(veus[order], np.arange(len(self.programs) + 1)).tolist()
        for v in np.unique(veus).tolist():
            self.programs[v].extend(handles[bounds[v]:bounds[v + 1]])
        return first

    def wait_ids(self, handles: Sequence[int] | np.ndarray, veu: int) -> None:
        """Append to ``veu`` a barrier waiting for the rTasks with these handles."""
        self.wait_group(self.add_wait_group(handles), veu)

    def add_wait_group(self, handles: Sequence[int] | np.ndarray) -> int:
        """Record rTask handles that several barriers wait for (all of them, or all but a few:
        :meth:`wait_group`); returns the group's number."""
        self._wait_groups.append(np.array(handles, dtype=np.int64).reshape(-1))
        return len(self._wait_groups) - 1

    def wait_group(self, group: int, veu: int, skip: np.ndarray = NO_SKIP) -> None:
        """Append to ``veu`` a barrier waiting for the handles of ``group`` (:meth:`add_wait_group`)
        except those at the group positions ``skip`` (distinct, increasing).  On a vDevice that does
        not read exact waits (``VDevice.exact_waits`` False) the barrier waits for the whole group:
        the skipped members are its own vEU's and ones an earlier barrier waited for, so the superset
        orders nothing more."""
        self._barrier_group.append(group)
        self._barrier_skips.append(skip if self._keep_skips else NO_SKIP)
        self.programs[veu].append(-len(self._barrier_group))

    # The paper's interface.
    def append(self, rtask: RTask, veu: int) -> int:
        self.choose(rtask.rop.index, rtask.kernel)
        return self.append_rtask(rtask.rop.index, rtask.rtask_id, veu)

    def wait(self, handles: Iterable[int], veu: int) -> None:
        """Append to ``veu`` a barrier rTask waiting for the rTasks with these handles."""
        self.wait_ids(list(handles), veu)

    def finish(self) -> Schedule:
        """The schedule with stable ids (see the module docstring)."""
        p = self.problem
        missing = [p.names[i] for i, k in enumerate(self.kernels) if k is None]
        if missing:
            raise ScheduleError(f"the policy left {len(missing)} op(s) without a kernel, e.g. '{missing[0]}'")
        kernels = [k for k in self.kernels if k is not None]  # all of them: none is missing
        firsts = np.concatenate([[0], np.cumsum([k.num_rtasks for k in kernels])]).astype(np.int64)
        num_rtasks = int(firsts[-1])
        stable = firsts[np.asarray(self._handle_op, dtype=np.int64)] + np.asarray(self._handle_local, dtype=np.int64) \
            if self._handle_op else np.zeros(0, dtype=np.int64)
        # Every entry of every program at once: rTask handles to stable ids, barriers numbered by
        # (vEU, position) -- a Python loop per entry and per wait took minutes on 1,472 vEUs.
        lengths = [len(prog) for prog in self.programs]
        flat = np.fromiter(chain.from_iterable(self.programs), np.int64, sum(lengths))
        is_barrier = flat < 0
        order = -flat[is_barrier] - 1  # builder's barrier number of each barrier, in final order
        ids = np.empty_like(flat)
        ids[~is_barrier] = stable[flat[~is_barrier]]
        ids[is_barrier] = num_rtasks + np.arange(order.size, dtype=np.int64)
        id_list = ids.tolist()
        bounds = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).tolist()
        programs = [id_list[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        held = compact_waits(self._wait_groups, self._barrier_group, self._barrier_skips)
        waits = replace(held, group_ids=stable[held.group_ids]).permuted(order)
        ops = [ScheduledOp(p.names[i], rop.node.op_type, kernels[i], int(firsts[i]), p.preds[i],
                           rop.node.attrs, tensor_refs(rop.node.inputs, p.tensors, p.constants),
                           tensor_refs(rop.node.outputs, p.tensors, p.constants))
               for i, rop in enumerate(p.rops)]
        schedule = Schedule(self.policy, p.graph_name, p.vdevice, ops, programs, [], self.barrier_cost_us,
                            self.options)
        hold_compact(schedule, waits)
        return schedule
