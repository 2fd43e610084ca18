"""Per-rOperator profile of a compiled CPU program (the work-by-family lines of ``ci/bench_cpu.py``).

Each op's task rows are run alone, on one vEU, with the arena as a real
inference leaves it, and timed; the sum over ops is the program's work
(compare with the measured latency x vEUs to see the cost of waiting).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .compiled import CompiledSegment
from .compiler import Compiled
from .driver import run as driver_run
from .runtime import CpuExecutable


def profile_ops(exe: CpuExecutable, compiled: Compiled, feeds: Mapping[str, np.ndarray],
                repeat: int = 5) -> list[dict[str, Any]]:
    """Time every op of every compiled segment; returns rows sorted by time."""
    exe.run(feeds)  # the arena now holds a real inference's values
    program = exe.program
    segments = [s for s in program.steps if isinstance(s, CompiledSegment)]
    seg_ops = [ops for ops in _segment_ops(compiled)]
    out = []
    one = np.zeros(1, np.int64)
    counters = np.zeros(2 * 8, np.int64)
    status = np.zeros(1, np.int64)
    cores = np.full(1, -1, np.int64)
    for seg, meta, ops in zip(segments, compiled.tables.segments, seg_ops):
        by_op: dict[int, list[int]] = {}
        for row, i in meta.row_op.items():
            by_op.setdefault(i, []).append(row)
        for i, rows in by_op.items():
            table = np.ascontiguousarray(program.T[np.array(rows)])
            ends = np.array([len(rows)], np.int64)
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                driver_run(exe.arena, program.X, program.R, table, one * 0, ends, exe._entries, counters, status,
                           cores, exe.allowed, exe.max_sleeps)
                best = min(best, time.perf_counter() - t)
            op = ops[i]
            out.append({"op": op.name, "family": op.family, "nodes": len(op.nodes), "tasks": len(rows),
                        "us": best * 1e6})
    out.sort(key=lambda r: -r["us"])
    return out


def _segment_ops(compiled: Compiled) -> list[list]:
    groups: list[list] = []
    current: list = []
    for op in compiled.lowered.ops:
        if op.host:
            if current:
                groups.append(current)
                current = []
        else:
            current.append(op)
    if current:
        groups.append(current)
    return groups


def by_family(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    fam: dict[str, dict[str, float]] = {}
    for r in rows:
        f = fam.setdefault(r["family"], {"ops": 0, "us": 0.0})
        f["ops"] += 1
        f["us"] += r["us"]
    return dict(sorted(fam.items(), key=lambda kv: -kv[1]["us"]))
