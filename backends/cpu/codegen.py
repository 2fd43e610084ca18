"""From schedules to data and code: task tables and the generated driver.

The schedule of every compiled segment is lowered to rows of one int64
task table ``T`` (``ROW`` columns: kernel id, scratch offset, parameters),
with each vEU's rows contiguous per segment.  A barrier rTask becomes one
row per other vEU it waits for: "wait until vEU u has completed n rows".

The generated driver is a small numba module: ``walk`` (one vEU walking its
rows, dispatching on the kernel id to the rKernels the model uses) and
``run`` (a ``prange`` over vEU ids that starts every worker at once and
joins them).  Its size depends on the set of kernels used, not on the model,
and it is cached on disk by numba, so a 14,000-node model compiles no more
numba code than a 20-node one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rammer.schedule import Schedule

from .kernels import KERNELS, MAY_FAIL, kernels_fingerprint
from .ops import CpuOp, EmitContext
from .program import SideTables
from .views import Buffer

#: Columns of a task row: kernel id, scratch offset, up to 8 parameters.
ROW = 10
BARRIER = 0
STRIDE = 8  # progress counters sit 64 bytes apart


@dataclass
class Segment:
    """One launch of the workers: rows ``starts[v]:ends[v]`` of the table per vEU."""

    starts: np.ndarray
    ends: np.ndarray
    schedule: Schedule | None = None
    rtasks: int = 0
    barrier_rows: int = 0


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
    # Scratch: each vEU gets a region as large as its largest rTask needs.
    need = [0] * num_veus
    for ops, sched in zip(segment_ops, schedules):
        for v, prog in enumerate(sched.programs):
            for e in prog:
                if e < sched.num_rtasks:
                    need[v] = max(need[v], ops[int(sched.rtask_op[e])].scratch)
    scratch_at = []
    pos = scratch_base // 4
    for v in range(num_veus):
        scratch_at.append(pos)
        pos += (need[v] + 15) // 16 * 16
    scratch_bytes = (pos - scratch_base // 4) * 4

    for ops, sched in zip(segment_ops, schedules):
        op_rows: dict[int, list] = {}
        n_rt = sched.num_rtasks
        loc: dict[int, tuple[int, int]] = {}
        for v, prog in enumerate(sched.programs):
            for q, e in enumerate(prog):
                if e < n_rt:
                    loc[e] = (v, q)
        # Rows each entry turns into, to translate positions to row counts.
        waits_per_entry: list[list[list[tuple[int, int]]]] = []
        done_after: list[list[int]] = []
        for v, prog in enumerate(sched.programs):
            per_entry = []
            counts = []
            total = 0
            for e in prog:
                if e < n_rt:
                    per_entry.append([])
                    total += 1
                else:
                    last: dict[int, int] = {}
                    for w in sched.barrier_waits[e - n_rt]:
                        u, q = loc[w]
                        if u != v:
                            last[u] = max(last.get(u, -1), q)
                    per_entry.append(sorted(last.items()))
                    total += len(last)
                counts.append(total)
            waits_per_entry.append(per_entry)
            done_after.append(counts)
        starts = np.zeros(num_veus, np.int64)
        ends = np.zeros(num_veus, np.int64)
        barrier_rows = 0
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
                    rows.append([kid, scratch_at[v]] + list(params) + [0] * (ROW - 2 - len(params)))
                else:
                    for u, uq in waits_per_entry[v][q]:
                        rows.append([BARRIER, 0, u, done_after[u][uq]] + [0] * (ROW - 4))
                        barrier_rows += 1
            ends[v] = len(rows)
        segments.append(Segment(starts, ends, sched, n_rt, barrier_rows))
    T = np.array(rows, dtype=np.int64).reshape(-1, ROW) if rows else np.zeros((1, ROW), np.int64)
    X, R = side.arrays()
    names = [None] * (len(kernel_ids) + 1)
    for name, kid in kernel_ids.items():
        names[kid] = name
    names[0] = "barrier"
    return Tables(T, X, R, names, segments, scratch_bytes,
                  {"rows": len(rows), "side_ints": int(X.size), "side_floats": int(R.size)})


# -- the generated driver ---------------------------------------------------------------------------

_TEMPLATE = '''"""rammer CPU backend: generated driver for the rKernels {names}.

Kernel sources fingerprint {fingerprint}.  Do not edit: regenerated from
backends/cpu/codegen.py.
"""
from numba import njit, prange

from rammer.backends.cpu.atomics import atomic_add, pin_to_core, store_release, wait_at_least
{imports}

STRIDE = {stride}


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def walk(v, F, B, I, J, X, R, T, start, end, counters, abort, max_sleeps):
    for r in range(start, end):
        k = T[r, 0]
        if k == {barrier}:
            st = wait_at_least(counters, T[r, 2] * STRIDE, T[r, 3], abort, max_sleeps)
            if st != 0:
                atomic_add(counters, abort, 1)
                return st
{dispatch}
        store_release(counters, v * STRIDE, r - start + 1)
    return 0


@njit(parallel=True, nogil=True, cache=True)
def run(F, B, I, J, X, R, T, starts, ends, counters, status, cores, max_sleeps):
    n = starts.shape[0]
    abort = n * STRIDE
    for v in prange(n):
        if cores[v] >= 0:
            pin_to_core(cores[v])
        status[v] = walk(v, F, B, I, J, X, R, T, starts[v], ends[v], counters, abort, max_sleeps)
'''

#: status codes of ``walk``
STATUS = {0: "ok", 1: "aborted because another vEU failed", 2: "barrier timed out (a scheduling bug?)",
          3: "a Gather index is out of range"}


def driver_source(kernel_names: list[str]) -> str:
    used = [n for n in kernel_names[1:]]
    by_module: dict[str, list[str]] = {}
    for n in used:
        by_module.setdefault(KERNELS[n].__name__, []).append(n)
    imports = "\n".join(f"from {mod} import {', '.join(sorted(ns))}" for mod, ns in sorted(by_module.items()))
    lines = []
    for kid, n in enumerate(kernel_names):
        if kid == BARRIER:
            continue
        call = f"{n}(F, B, I, J, X, R, T[r, 2:], T[r, 1])"
        lines.append(f"        elif k == {kid}:")
        if n in MAY_FAIL:
            lines.append(f"            if {call} != 0:")
            lines.append("                atomic_add(counters, abort, 1)")
            lines.append("                return 3")
        else:
            lines.append(f"            {call}")
    return _TEMPLATE.format(names=", ".join(used), fingerprint=kernels_fingerprint(), imports=imports,
                            stride=STRIDE, barrier=BARRIER, dispatch="\n".join(lines))


def driver_dir() -> str:
    root = os.environ.get("RAMMER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rammer")
    return os.path.join(root, "cpu", "drivers")


_LOADED: dict[str, Any] = {}


def load_driver(kernel_names: list[str]) -> tuple[Any, str]:
    """The ``run`` function of the driver for these kernels (written and imported once)."""
    source = driver_source(kernel_names)
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    if digest in _LOADED:
        return _LOADED[digest], source
    folder = driver_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"driver_{digest}.py")
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != source:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".py.tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"rammer_cpu_driver_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[digest] = module.run
    return module.run, source
