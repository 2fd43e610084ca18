"""The CPU executable: the arena, the workers, and host (fallback) segments.

An inference copies the feeds into their arena buffers, then runs the
program: each compiled segment is one launch of the driver (every vEU
worker starts, walks its rows and is joined), each host op runs the
reference implementation on numpy views of the arena in between.  Outputs
are copied out of their views, so callers own them (a large one into a
buffer reused once the caller has dropped it, :mod:`.output_pool`).

An ``If`` left to the host (its condition is only known at run time) does
not interpret its branch op by op: the taken branch, made a graph of its own
(``rammer.ir.standalone_graph``: what it captures becomes its inputs), is
compiled for this backend on first use and run as a model.  A branch that
cannot be compiled so is interpreted as before.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer import api
from rammer.errors import FeedError, IndexRangeError, OpExecutionError, RammerError
from rammer.interpreter import run_graph
from rammer.ir import Graph, Node, TensorInfo, dtype_name, outer_names, standalone_graph
from rammer.ops.control import taken_branch
from rammer.profile import TraceSlice

from .adaptive import FULL, LANE, LaunchChooser
from .compiled import BRANCH_MIN_NODES, CompiledSegment, HostStep, Program, aligned_arena
from .image_runtime import NativeImage
from .output_pool import OutputPool
from .task_rows import KERNEL_FAILED, STATUS, STRIDE, available_cores, cpuset_words

#: After two callers were inside ``run`` at once, a caller alone runs a 1-vEU lane too for this
#: long (seconds) instead of the whole program (see :meth:`CpuExecutable.run`).
CONCURRENT_SPELL_S = 0.01
#: Lanes per core: each concurrent caller runs a lane on its own thread; with one lane per core,
#: callers beyond the core count queued for a lane, and each hand-off cost a thread wake-up
#: (lstm-tc-small, 4 callers on 2 cores: 35k -> 39k inferences/s with two per core).
LANES_PER_CORE = 2
#: A lane whose median run over its first LANE_PROBE_RUNS runs is shorter than this (seconds) keeps
#: the GIL while it runs.  Each GIL release lets another caller in, and when both want it back one
#: waits for a thread wake-up (tens of microseconds here); for a 15 us launch that cost more than
#: running the callers one after the other.  Longer launches release it and run side by side.
LANE_GIL_MAX_S = 50e-6
LANE_PROBE_RUNS = 8
#: A probe run at least this long ends the probing at once: the lane releases the GIL from then on
#: (a long model would otherwise keep the other callers out for LANE_PROBE_RUNS runs).
LANE_GIL_RELEASE_S = 1e-3

#: Forks this process descends from (one item, bumped in each child): ``run`` compares it with the
#: count its executable was built under instead of calling ``os.getpid()`` (a system call) per run.
_FORKS = [0]


def _count_fork() -> None:
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_count_fork)


class CpuExecutable:
    """Runs a :class:`Program`.  One caller runs the whole program on every vEU; callers
    that arrive while others are inside ``run`` each run a 1-vEU copy (a *lane*) on
    their own thread, so throughput grows with callers instead of queueing them."""

    def __init__(self, graph: Graph, program: Program, max_wait_s: float = 60.0, schedules: list | None = None,
                 schedules_loader: Any = None, arena: tuple[np.ndarray, np.ndarray] | None = None,
                 image: NativeImage | None = None):
        self.graph = graph
        self.program = program
        self._schedules = schedules
        self._schedules_loader = schedules_loader
        #: A native image of the program's kernels (a cache hit: numba is never imported), else None
        #: and the numba driver and entries.
        self.image = image if image is not None and image.covers(program.kernel_names) else None
        if self.image is not None:
            self._driver: Any = self.image.run
            self._driver_holding_gil: Any = self.image.run_holding_gil
            self._entries = self.image.entry_table(program.kernel_names)
        else:
            import numba

            from .codegen import entry_table
            from .driver import run, run_holding_gil

            if program.num_veus > numba.config.NUMBA_NUM_THREADS:
                raise OpExecutionError(
                    f"the CPU backend was asked for {program.num_veus} vEUs but numba runs at most "
                    f"{numba.config.NUMBA_NUM_THREADS} threads; compile with fewer --veus or set NUMBA_NUM_THREADS")
            self._driver = run
            self._driver_holding_gil = run_holding_gil
            self._entries = entry_table(program.kernel_names)
        self._driver_releasing_gil = self._driver
        self._lock = threading.Lock()
        self._multi_veu = program.num_veus > 1
        #: The forks behind the process that built the worker pool (a forked child runs a 1-vEU copy instead).
        self._forks = _FORKS[0]
        self._fork_copy: CpuExecutable | None = None
        #: Concurrent callers: how many are inside ``run``, and the 1-vEU lanes they use.
        self._inside: list = []  # one item per caller inside run (see run)
        self._concurrent_at = -math.inf  # (time.perf_counter) when two callers were last inside run
        self._callers_lock = threading.Lock()
        self._lanes: queue.SimpleQueue[CpuExecutable] = queue.SimpleQueue()
        self._lane_count = 0
        self._lane_build_lock = threading.Lock()
        self._lane_program: Program | None = None
        #: A lone caller's choice between the whole program and a 1-vEU lane (adaptive.py).
        self.adaptive = True
        self._chooser = LaunchChooser()
        self._solo_lane: CpuExecutable | None = None
        self._solo_builder: threading.Thread | None = None
        #: As a lane: whether its runs are still timed, and the seconds of those (see _note_lane_run).
        self._lane_probing = False
        self._lane_times: list[float] = []
        #: Compiled branches of If host steps by (node index, branch attribute); None: interpret it.
        self._branches: dict[tuple[int, str], api.CompiledModel | None] = {}
        self._branches_lock = threading.Lock()
        # 64-byte aligned arena; ``arena``: one whose constants a loader already read into it
        if arena is None:
            arena = aligned_arena(program.arena_bytes)
            arena[1][:program.const_bytes] = program.const_blob
        self._raw, self.arena = arena
        self.counters = np.zeros((program.num_veus + 1) * STRIDE, dtype=np.int64)
        self.status = np.zeros(program.num_veus, dtype=np.int64)
        self.cores = np.array(program.cores, dtype=np.int64)
        self.allowed = cpuset_words(available_cores())
        self.max_sleeps = int(max_wait_s * 1e6 / 50)
        self._inputs = {t.name: t for t in graph.inputs}
        # Per input: (name, info, numpy dtype, shape, arena view or None for host-only
        # inputs); built once, so a run does no dtype-name or view construction.
        self._feed_plan = [(t.name, t, np.dtype(t.dtype), tuple(t.shape),
                            self.tensor(t.name) if t.name in program.tensors else None) for t in graph.inputs]
        self._out_views = [(t.name, self.tensor(t.name) if t.name in program.tensors else None)
                           for t in graph.outputs]
        #: Buffers that large outputs are copied into, reused once the caller has dropped them.
        self.output_pool = OutputPool()
        #: Per program step: (step, the driver's arguments for a compiled segment, None for a host step).
        self._steps = [(step, None if isinstance(step, HostStep) else self._launch_args(step))
                       for step in program.steps]

    @property
    def schedules(self) -> list:
        """The rTask schedule of every compiled segment (:class:`rammer.schedule.Schedule`)."""
        if self._schedules is None and self._schedules_loader is not None:
            self._schedules = self._schedules_loader()
        return list(self._schedules or [])

    @property
    def source(self) -> str:
        """The generated Python program (what ``--emit`` writes as program.py)."""
        from .codegen import program_source

        return program_source(self.program)

    @property
    def report(self) -> dict[str, Any]:
        """What the compiler did (see ``rammer compile --report``)."""
        return self.program.report

    # -- views of the arena -----------------------------------------------------------
    def tensor(self, name: str) -> np.ndarray:
        dtype, off, shape, strides = self.program.tensors[name]
        dt = np.dtype(dtype)
        # a dim of one element never steps, and its stride may be huge (a Slice by a step of 2**59: the
        # fuzzer's mutants:61833529), which numpy refuses once it is a byte count
        return np.ndarray(shape, dtype=dt, buffer=self.arena, offset=off,
                          strides=tuple(0 if d == 1 else s * dt.itemsize for d, s in zip(shape, strides)))

    def _write(self, name: str, value: np.ndarray) -> None:
        dst = self.tensor(name)
        np.copyto(dst, value, casting="no")

    # -- running ------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray],
            outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The model's outputs for ``feeds``; arrays given in ``outputs`` (by name, right dtype and
        shape, checked by the caller) receive their output in place instead of a new array."""
        # After an idle spell every Python step of this path runs from cold caches (about a
        # microsecond each; a numpy call tens), so the common case is kept short: no lock, no
        # getpid, one clock read, the launch chooser inline.
        if not self._multi_veu:
            with self._lock:
                return self._run_here(feeds, outputs)
        if self._forks != _FORKS[0]:
            return self._in_forked_child().run(feeds, outputs)
        # The callers inside run, counted without a lock: list.append and list.pop are atomic
        # under the GIL.  (A lock taken twice per call, by callers that keep the GIL through
        # short launches, cost 4 callers of lstm-tc-small a third of their throughput.)  A
        # caller that finds itself alone owns the whole program's arena: any caller arriving
        # before it leaves sees two inside and takes a lane.
        inside = self._inside
        inside.append(None)
        try:
            now = time.perf_counter()
            if len(inside) > 1:
                self._concurrent_at = now
            # Alone, unless other callers were here a moment ago: under steady concurrent calls a
            # caller often finds itself alone for one call, and the whole program's vEUs would then
            # share the cores with the other callers' lanes (barriers waiting on a descheduled vEU).
            elif now - self._concurrent_at > CONCURRENT_SPELL_S:
                if not self.adaptive:
                    return self._run_here(feeds, outputs)
                # One caller: the whole program, or a 1-vEU lane while the cores are shared (adaptive.py).
                chooser = self._chooser
                lane = self._solo_lane
                if chooser.choose(lane is not None) == LANE:
                    out = lane._run_here(feeds, outputs)
                    chooser.record(LANE, time.perf_counter() - now)
                    return out
                out = self._run_here(feeds, outputs)
                chooser.record(FULL, time.perf_counter() - now)
                if chooser.lane_wanted and lane is None and self._solo_builder is None:
                    self._solo_builder = threading.Thread(target=self._build_solo_lane, name="rammer-lane",
                                                          daemon=True)
                    self._solo_builder.start()
                return out
            return self._run_on_lane(feeds, outputs)
        finally:
            inside.pop()

    def _build_solo_lane(self) -> None:
        try:
            self._solo_lane = self._new_lane(probe=False)
        except Exception as exc:  # the whole program keeps running; nothing is lost
            logging.getLogger("rammer").debug("no 1-vEU lane for adaptive launches: %s", exc)

    def _run_on_lane(self, feeds: Mapping[str, np.ndarray],
                     outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Run on a 1-vEU copy of the program while other callers are inside ``run``.

        The whole program's vEUs wait for each other at barriers, so two callers
        running it at once on shared cores would stall each other; instead each
        concurrent caller runs a 1-vEU program on its own thread (no parallel
        region), at most LANES_PER_CORE lanes per core, each with its own arena; a short lane keeps
        the GIL while it runs (:meth:`_note_lane_run`).
        """
        try:
            lane = self._lanes.get_nowait()
        except queue.Empty:
            lane = None
            with self._callers_lock:
                if self._lane_count < LANES_PER_CORE * max(1, len(available_cores())):
                    self._lane_count += 1
                    make = True
                else:
                    make = False
            if make:
                lane = self._new_lane()
            else:
                lane = self._lanes.get()
        try:
            if not lane._lane_probing:
                return lane._run_here(feeds, outputs)
            start = time.perf_counter()
            out = lane._run_here(feeds, outputs)
            lane._note_lane_run(time.perf_counter() - start)
            return out
        finally:
            self._lanes.put(lane)

    def _note_lane_run(self, seconds: float) -> None:
        """The first runs of a lane time it, holding the GIL (see :meth:`_new_lane`); a lane
        whose launches are long then releases it while it runs, so that callers run side by
        side.  (Probing with the GIL released timed the wake-ups of the other callers too: on a
        machine with slow wake-ups a 15 us launch measured over 50 us and never kept the GIL,
        and 4 callers of lstm-tc-small gave 0.5-0.7x the throughput of one.)"""
        times = self._lane_times
        times.append(seconds)
        long_run = seconds >= LANE_GIL_RELEASE_S
        if long_run or len(times) == LANE_PROBE_RUNS:
            self._lane_probing = False
            if long_run or sorted(times)[len(times) // 2] >= LANE_GIL_MAX_S:
                self._driver = self._driver_releasing_gil  # long launches release the GIL: callers run side by side

    def _new_lane(self, probe: bool = True) -> CpuExecutable:
        """A 1-vEU copy of the program.  A lane for concurrent callers (``probe``) times its first
        runs holding the GIL (:meth:`_note_lane_run`); the lone caller's lane of adaptive launches
        is not timed there and always releases it."""
        with self._lane_build_lock:
            first = self._lane_program
            if first is None:
                policy = str(self.program.report.get("policy", "wavefront"))
                lane = api.compile(self.full_graph(), backend="cpu", veus=1, policy=policy).executable
                self._lane_program = lane.program
            else:
                lane = CpuExecutable(self.graph, first, image=self.image)
        if probe and lane.program.num_veus == 1 and lane.cores[0] < 0:
            # its first runs time it (_note_lane_run); otherwise it releases the GIL from the start
            lane._driver = lane._driver_holding_gil
            lane._lane_probing = True
        return lane

    def _run_here(self, feeds: Mapping[str, np.ndarray],
                  outputs: Mapping[str, np.ndarray] | None = None,
                  trace: _Trace | None = None) -> dict[str, np.ndarray]:
        """One inference on this executable's arena.  The caller owns the arena for the call
        (``run``: the lock of a 1-vEU program, the only caller inside a multi-vEU one, or a lane
        taken from the queue)."""
        host_values: dict[str, np.ndarray] = {}
        for name, info, dt, shape, view in self._feed_plan:
            value = feeds.get(name)
            # (identity first: the dtype comparison is a slow path of numpy's)
            if type(value) is not np.ndarray or (value.dtype is not dt and value.dtype != dt) or value.shape != shape:
                value = self._feed_value(name, info, dt, shape, value)
            if view is not None:
                np.copyto(view, value)
            else:
                host_values[name] = value
        driver = self._driver
        for step, launch_args in self._steps:
            if trace is not None:
                trace.step(self, step, host_values)
            elif launch_args is None:
                self._run_host(step, host_values)
            else:
                worst = driver(*launch_args)
                if worst:
                    self._launch_failed(worst)
        out = {}
        for name, view in self._out_views:
            if view is not None:
                if outputs is not None and name in outputs:
                    np.copyto(outputs[name], view)
                    out[name] = outputs[name]
                else:
                    out[name] = self.output_pool.copy(name, view)
            elif name in host_values:
                out[name] = np.array(host_values[name], copy=True)
            else:
                out[name] = np.array(self.graph.initializers[name], copy=True)
        return out

    @staticmethod
    def _feed_value(name: str, info: TensorInfo, dt: np.dtype, shape: tuple, value: Any) -> np.ndarray:
        """A feed that is not already an array of the compiled dtype and shape: converted, or a
        :class:`FeedError`."""
        if value is None:
            raise FeedError(f"missing feed for input '{name}' ({info})")
        value = np.asarray(value)
        if value.dtype != dt or value.shape != shape:
            raise FeedError(
                f"input '{name}' is {dtype_name(value.dtype)}{list(value.shape)} but the model was compiled "
                f"for {info.dtype}{list(info.shape)}")
        return value

    def _in_forked_child(self) -> CpuExecutable:
        """A 1-vEU copy of this model for a child made by ``fork()``.

        GNU OpenMP, which runs numba's worker threads, aborts a forked child that
        starts a parallel region once the parent has used one.  One vEU runs on the
        calling thread without a parallel region, so the child recompiles the model
        for one vEU (the kernels are already in memory) and runs that, with a
        warning: full speed in workers needs the 'spawn' or 'forkserver' start method.
        """
        if self._fork_copy is None or self._fork_copy._forks != _FORKS[0]:
            logging.getLogger("rammer").warning(
                "a compiled model of the cpu backend is used in a process made by fork(); its %d vEUs cannot "
                "run there (GNU OpenMP), so it runs on 1 vEU. For worker processes at full speed use "
                "multiprocessing's 'spawn' or 'forkserver' start method and compile in each worker",
                self.program.num_veus)
            if self._lane_program is not None:  # the 1-vEU program, already compiled (or loaded)
                self._fork_copy = CpuExecutable(self.graph, self._lane_program, image=self.image)
            else:
                policy = str(self.program.report.get("policy", "wavefront"))
                self._fork_copy = api.compile(self.full_graph(), backend="cpu", veus=1, policy=policy).executable
        return self._fork_copy

    def full_graph(self) -> Graph:
        """The whole graph the program was compiled from (lanes and fork copies compile it for one
        vEU).  An executable loaded without its graph (a cache hit) overrides this to import it then."""
        return self.graph

    def trace_run(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[TraceSlice]]:
        """Run once on every vEU, recording when each task row ran: one slice per rTask
        (named by its op and nodes) or barrier wait, per vEU, and one per host step."""
        trace = _Trace(self)
        if not self._multi_veu:
            with self._lock:
                out = self._run_here(feeds, trace=trace)
            return out, trace.slices
        inside = self._inside
        while True:  # the whole program's arena is ours once we are the only caller inside run
            inside.append(None)
            if len(inside) == 1:
                break
            inside.pop()
            time.sleep(1e-4)
        try:
            out = self._run_here(feeds, trace=trace)
        finally:
            inside.pop()
        return out, trace.slices

    def _launch_args(self, seg: CompiledSegment, rows: np.ndarray | None = None) -> tuple:
        """The driver's arguments for one launch of ``seg`` (``rows``: a trace array or None); a native
        image's driver takes them as addresses (bound once per segment: the arrays live as long as
        this executable)."""
        args = (self.arena, self.program.X, self.program.R, self.program.T, seg.starts, seg.ends, self._entries,
                self.counters, self.status, self.cores, self.allowed, self.max_sleeps, rows)
        return args if self.image is None else self.image.bind(*args)

    def _launch(self, seg: CompiledSegment, rows: np.ndarray | None = None) -> None:
        worst = self._driver(*self._launch_args(seg, rows))
        if worst:
            self._launch_failed(worst)

    def _launch_failed(self, worst: int) -> None:
        if worst == KERNEL_FAILED:
            from .faults import describe_failure, failed_rows

            # The failing rows' ops and the bad index (faults.py): work done on this path only.
            described = describe_failure(self.program, self.arena, failed_rows(self.status, self.counters))
            if described is not None:
                message, located = described
                if located:  # the indices in the arena are out of range: the values' fault
                    raise IndexRangeError(message)
                raise OpExecutionError(f"CPU backend: {message}")
        raise OpExecutionError(f"CPU backend: {STATUS.get(worst, f'status {worst}')} "
                               f"(vEU status codes {self.status.tolist()})")

    def _run_host(self, step: HostStep, host_values: dict[str, np.ndarray]) -> None:
        """A host step on one BLAS thread: more would fight the vEU workers for the
        cores (a detector's host steps went from 56 to 17 ms that way)."""
        blas = _blas_libraries()
        saved = [lib.num_threads for lib in blas]
        for lib in blas:
            lib.set_num_threads(1)
        try:
            self._run_host_step(step, host_values)
        finally:
            for lib, n in zip(blas, saved):
                lib.set_num_threads(n)

    def _host_value(self, name: str, host_values: dict[str, np.ndarray]) -> np.ndarray:
        return host_values[name] if name in host_values else np.array(self.tensor(name))

    def _store(self, name: str, value: np.ndarray, host_values: dict[str, np.ndarray]) -> None:
        if name in self.program.tensors:
            self._write(name, np.asarray(value))
        else:
            host_values[name] = np.asarray(value)

    def _compiled_branch(self, index: int, node: Node, attr: str) -> api.CompiledModel | None:
        key = (index, attr)
        with self._branches_lock:
            if key not in self._branches:
                self._branches[key] = _compile_branch(node, attr, self.graph, self.program.num_veus)
            return self._branches[key]

    def _run_branch(self, step: HostStep, node: Node, host_values: dict[str, np.ndarray]) -> bool:
        """Run the taken branch of an ``If`` compiled; False when it has no compiled form."""
        attr = taken_branch(self._host_value(node.inputs[0], host_values))
        model = self._compiled_branch(step.node_index, node, attr)
        if model is None:
            return False
        out = model.run({t.name: self._host_value(t.name, host_values) for t in model.inputs})
        for name, branch_out in zip(node.outputs, node.attrs[attr].outputs):
            if name:
                self._store(name, out[branch_out.name], host_values)
        return True

    def _run_host_step(self, step: HostStep, host_values: dict[str, np.ndarray]) -> None:
        g = self.graph
        node: Node = g.nodes[step.node_index]
        if node.op_type == "If" and node.domain == "" and self._run_branch(step, node, host_values):
            return
        feeds: dict[str, np.ndarray] = {}
        inputs: list[TensorInfo] = []
        inits = {}
        for name in dict.fromkeys(i for i in node.inputs if i):
            if name in g.initializers:
                inits[name] = g.initializers[name]
                continue
            inputs.append(g.value_info[name])
            feeds[name] = host_values[name] if name in host_values else np.array(self.tensor(name))
        for name in sorted(outer_names(node)):
            if name in g.initializers:
                inits[name] = g.initializers[name]
            elif name not in feeds:
                inputs.append(g.value_info[name])
                feeds[name] = host_values[name] if name in host_values else np.array(self.tensor(name))
        outputs = [g.value_info[o] for o in node.outputs if o]
        value_info = {t.name: t for t in inputs + outputs}
        value_info.update({k: TensorInfo(k, dtype_name(v.dtype), v.shape) for k, v in inits.items()})
        one = Graph(f"host:{node.name}", tuple(inputs), tuple(outputs), (node,), inits, value_info, g.opset)
        results = run_graph(one, feeds, check=True)
        for info, value in zip(outputs, results):
            self._store(info.name, value, host_values)


def _compile_branch(node: Node, attr: str, outer: Graph, veus: int) -> api.CompiledModel | None:
    """The branch ``attr`` of If ``node`` compiled as a model of its own, or None (then it is
    interpreted): too small, not expressible as a plain graph, or refused by the compiler."""
    sub = node.attrs[attr]
    if len(sub.nodes) < BRANCH_MIN_NODES:
        return None
    graph = standalone_graph(sub, outer, f"{outer.name}.{node.name}.{attr}")
    if graph is None:
        return None
    try:
        return api.compile(graph, backend="cpu", veus=veus)
    except RammerError as exc:
        logging.getLogger("rammer").debug("branch %s of %s is interpreted: %s", attr, node.label, exc)
        return None


_BLAS: list | None = None


def _blas_libraries() -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process (found once)."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController  # optional; loaded on the first host step

            _BLAS = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
        except Exception:  # no threadpoolctl, or a library it cannot drive: host steps keep BLAS's threads
            _BLAS = []
    return _BLAS


class _Trace:
    """Collects the slices of one traced run (``CpuExecutable.trace_run``)."""

    def __init__(self, exe: CpuExecutable):
        self.rows = np.zeros((exe.program.T.shape[0], 2), np.int64)
        self.slices: list[TraceSlice] = []
        tmap = exe.program.report.get("trace_map") or {}
        self.row_op: list[int] = list(tmap.get("row_op", []))
        self.ops: list[dict] = list(tmap.get("ops", []))

    def step(self, exe: CpuExecutable, step: Any, host_values: dict[str, np.ndarray]) -> None:
        if isinstance(step, HostStep):
            start = time.perf_counter_ns()
            exe._run_host(step, host_values)
            node = exe.graph.nodes[step.node_index]
            self.slices.append(TraceSlice("host", f"{node.op_type} (host step)", "host", start,
                                          time.perf_counter_ns(), {"node": node.name, "reason": step.reason}))
            return
        exe._launch(step, self.rows)
        T = exe.program.T
        for v in range(len(step.starts)):
            for r in range(int(step.starts[v]), int(step.ends[v])):
                t0, t1 = int(self.rows[r, 0]), int(self.rows[r, 1])
                if T[r, 0] == 0:
                    self.slices.append(TraceSlice(f"vEU {v}", f"wait for vEU {int(T[r, 2])}", "barrier", t0, t1,
                                                  {"row": r, "until_rows": int(T[r, 3])}))
                    continue
                i = self.row_op[r] if r < len(self.row_op) else -1
                op = self.ops[i] if 0 <= i < len(self.ops) else {}
                kernel = exe.program.kernel_names[int(T[r, 0])]
                self.slices.append(TraceSlice(f"vEU {v}", str(op.get("name", kernel)), str(op.get("family", "op")),
                                              t0, t1, {"kernel": kernel, "row": r, "nodes": op.get("nodes", [])}))
