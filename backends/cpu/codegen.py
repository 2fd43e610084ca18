"""From schedules to data and code: task tables and the generated driver.

The schedule of every compiled segment is lowered to rows of one int64
task table ``T`` (``ROW`` columns: kernel id, scratch offset, parameters),
with each vEU's rows contiguous per segment.  A barrier rTask becomes one
row per other vEU it waits for: "wait until vEU u has completed n rows".

Rows name their rKernel by a per-model kernel id; the driver
(:mod:`.driver`) calls the kernel's compiled entry through an address table
built from :mod:`.entries`.  Nothing numba compiles depends on the model, so
a 14,000-node model compiles no more numba code than a 20-node one: the
model is data.  :func:`program_source` generates the standalone Python
program that ``--emit`` writes.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rammer import progress
from rammer.codegen.names import comment_text, py_string
from rammer.lower.views import Buffer
from rammer.schedule import Schedule
from rammer.schedule.rows import place_scratch, row_waits, veu_scratch

from .compiled import HostStep
from .driver import BARRIER
from .entries import ROW_PARAMS, entry_address
from .ops import CpuOp, EmitContext
from .program import SideTables
from .warmup import warm

#: Columns of a task row: kernel id, scratch offset, up to 8 parameters.
ROW = 2 + ROW_PARAMS


@dataclass
class Segment:
    """One launch of the workers: rows ``starts[v]:ends[v]`` of the table per vEU."""

    starts: np.ndarray
    ends: np.ndarray
    schedule: Schedule | None = None
    rtasks: int = 0
    barrier_rows: int = 0
    #: Op index (in the segment) of every row of the table; -1 for barrier rows.
    row_op: dict[int, int] = field(default_factory=dict)


@dataclass
class Tables:
    T: np.ndarray
    X: np.ndarray
    R: np.ndarray
    kernel_names: list[str]
    segments: list[Segment]
    scratch_bytes: int
    stats: dict[str, Any] = field(default_factory=dict)


def build_tables(segment_ops: list[list[CpuOp]], schedules: list[Schedule], buffers: list[Buffer],
                 num_veus: int, scratch_base: int) -> Tables:
    """Rows for every segment; ``scratch_base`` is the byte offset of the scratch region."""
    side = SideTables()
    ctx = EmitContext(side, buffers)
    kernel_ids: dict[str, int] = {}
    rows: list[list[int]] = []
    segments: list[Segment] = []
    # Scratch (float32 elements): each vEU gets a region as large as its largest rTask needs.
    need = veu_scratch(schedules, lambda k, i: segment_ops[k][i].scratch, num_veus)
    scratch_at, end = place_scratch(need, scratch_base // 4, 16)
    scratch_bytes = (end - scratch_base // 4) * 4

    for ops, sched in zip(segment_ops, schedules):
        op_rows: dict[int, list] = {}
        n_rt = sched.num_rtasks
        waits = row_waits(sched)
        starts = np.zeros(num_veus, np.int64)
        ends = np.zeros(num_veus, np.int64)
        barrier_rows = 0
        row_op: dict[int, int] = {}
        for v, prog in enumerate(sched.programs):
            starts[v] = len(rows)
            for q, e in enumerate(prog):
                if e < n_rt:
                    i = int(sched.rtask_op[e])
                    op = ops[i]
                    if i not in op_rows:
                        parts = op.tilings(num_veus).get(sched.ops[i].kernel.num_rtasks)
                        if parts is None:
                            raise AssertionError(f"{op.name}: no tiling with {sched.ops[i].kernel.num_rtasks} rTasks")
                        op_rows[i] = op.emit(ctx, parts)
                    name, params = op_rows[i][e - sched.ops[i].first_rtask]
                    kid = kernel_ids.setdefault(name, len(kernel_ids) + 1)
                    if len(params) > ROW - 2:
                        raise AssertionError(f"{name}: {len(params)} parameters do not fit a task row")
                    row_op[len(rows)] = i
                    rows.append([kid, scratch_at[v]] + list(params) + [0] * (ROW - 2 - len(params)))
                else:
                    for w in waits[v][q]:
                        rows.append([BARRIER, 0, w.veu, w.rows] + [0] * (ROW - 4))
                        barrier_rows += 1
            ends[v] = len(rows)
        segments.append(Segment(starts, ends, sched, n_rt, barrier_rows, row_op))
    T = np.array(rows, dtype=np.int64).reshape(-1, ROW) if rows else np.zeros((1, ROW), np.int64)
    X, R = side.arrays()
    names = [None] * (len(kernel_ids) + 1)
    for name, kid in kernel_ids.items():
        names[kid] = name
    names[0] = "barrier"
    return Tables(T, X, R, names, segments, scratch_bytes,
                  {"rows": len(rows), "side_ints": int(X.size), "side_floats": int(R.size)})


# -- kernel entry table ---------------------------------------------------------------------------

def entry_table(kernel_names: list[str]) -> np.ndarray:
    """Addresses of the kernels' entries, indexed by kernel id (0, the barrier, has none)."""
    kernels = kernel_names[1:]
    progress.stage("compiling kernels (numba; cached after the first run)")
    warm(kernels)
    addresses = [0]
    for k, name in enumerate(kernels):
        progress.step(k, len(kernels), name)
        addresses.append(entry_address(name))
    progress.step(len(kernels), len(kernels))
    return np.array(addresses, dtype=np.int64)


# -- the emitted program ----------------------------------------------------------------------------

_PROGRAM = '''"""Generated by rammer's CPU backend: model {model_comment} as a static rTask program.

{summary}

Files next to this one: tables.npz (task table T, side tables X and R,
per-segment row ranges), consts.bin (the arena's constant region), and
schedule*.json / report.json.  Run it with

    python program.py            # random inputs, prints output summaries

It needs only rammer's CPU driver and kernel entries.
"""
import os

import numpy as np

from rammer.backends.cpu.atomics import cpuset_words
from rammer.backends.cpu.driver import run
from rammer.backends.cpu.entries import entry_address

MODEL = {model}
KERNELS = {kernels}
ARENA_BYTES = {arena_bytes}
NUM_VEUS = {num_veus}
#: name -> (dtype, byte offset, shape, element strides)
INPUTS = {inputs}
OUTPUTS = {outputs}
#: the program: compiled segments (row ranges per vEU) and host steps
STEPS = {steps}

HERE = os.path.dirname(os.path.abspath(__file__))


def view(arena, placement):
    dtype, off, shape, strides = placement
    dt = np.dtype(dtype)
    return np.ndarray(shape, dt, buffer=arena, offset=off, strides=tuple(s * dt.itemsize for s in strides))


def main():
    tables = np.load(os.path.join(HERE, "tables.npz"))
    consts = np.fromfile(os.path.join(HERE, "consts.bin"), dtype=np.uint8)
    arena = np.zeros(ARENA_BYTES, dtype=np.uint8)
    arena[:consts.size] = consts
    rng = np.random.default_rng(0)
    for name, placement in INPUTS.items():
        target = view(arena, placement)
        target[...] = rng.standard_normal(target.shape).astype(target.dtype)
    entries = np.array([0] + [entry_address(k) for k in KERNELS[1:]], dtype=np.int64)
    counters = np.zeros((NUM_VEUS + 1) * 8, dtype=np.int64)
    status = np.zeros(NUM_VEUS, dtype=np.int64)
    cores = np.full(NUM_VEUS, -1, dtype=np.int64)
    for step in STEPS:
        if "host" in step:
            raise SystemExit(f"step {{step}} needs the reference implementation; run the model through rammer")
        k = step["segment"]
        worst = run(arena, tables["X"], tables["R"], tables["T"], tables[f"starts{{k}}"], tables[f"ends{{k}}"],
                    entries, counters, status, cores, cpuset_words(sorted(os.sched_getaffinity(0))), 1_000_000)
        assert worst == 0, status
    for name, placement in OUTPUTS.items():
        out = view(arena, placement)
        print(name, out.shape, out.dtype, "mean", float(out.mean()), "first", out.ravel()[:4])


if __name__ == "__main__":
    main()
'''


def _placements(tensors: dict[str, Any], names: list[str]) -> str:
    """``{name: (dtype, offset, shape, strides)}`` as Python source; names only through py_string."""
    rows = []
    for n in names:
        if n in tensors:
            dtype, off, shape, strides = tensors[n]
            rows.append(f"    {py_string(n)}: ({py_string(dtype)}, {int(off)}, {tuple(int(d) for d in shape)!r}, "
                        f"{tuple(int(d) for d in strides)!r}),\n")
    return "{\n" + "".join(rows) + "}" if rows else "{}"


def program_source(program) -> str:
    """A standalone Python program running the compiled model with the driver.

    Model-supplied text (graph, tensor and node names, fallback reasons) reaches
    the source only through :mod:`rammer.codegen.names`: as sanitized comment text
    in the docstring and as escaped string literals in the code.
    """
    rep = program.report
    steps = []
    k = 0
    for st in program.steps:
        if isinstance(st, HostStep):
            steps.append(f"    {{\"host\": {int(st.node_index)}, \"reason\": {py_string(st.reason)}}},\n")
        else:
            steps.append(f"    {{\"segment\": {k}}},\n")
            k += 1
    kernels = ", ".join(comment_text(n, 40) for n in program.kernel_names[1:])
    summary = textwrap.fill(
        f"{_count(rep.get('nodes'))} nodes -> {_count(rep.get('cpu_ops'))} CPU ops -> {_count(rep.get('rtasks'))} "
        f"rTasks and {_count(rep.get('barrier_rows'))} barrier rows on {int(program.num_veus)} vEUs "
        f"({comment_text(rep.get('policy'), 40)} policy); kernels: {kernels}.", width=100)
    model = rep.get("model", "?")
    return _PROGRAM.format(
        model_comment=comment_text(model), summary=summary, model=py_string(model),
        kernels="[" + ", ".join(py_string(n) for n in program.kernel_names) + "]",
        arena_bytes=int(program.arena_bytes), num_veus=int(program.num_veus),
        inputs=_placements(program.tensors, list(rep.get("inputs", []))),
        outputs=_placements(program.tensors, list(rep.get("outputs", []))),
        steps="[\n" + "".join(steps) + "]" if steps else "[]")


def _count(value: Any) -> str:
    """A count from the report as digits only (or ``?``)."""
    return str(int(value)) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else "?"
