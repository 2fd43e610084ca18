"""Run-time profiles: Chrome trace files and a top-ops table, from a real run.

A backend that can time its own run implements ``trace_run(feeds) ->
(outputs, [TraceSlice, ...])`` on its executable: one slice per rTask (or
fused group), barrier wait and host step, on a named track (one per vEU),
with times in nanoseconds of ``time.perf_counter_ns``'s clock.  This module
turns slices into the trace-event JSON that chrome://tracing and Perfetto
open (one thread per track), and into a summary of the ops that took longest.
Nothing here is simulated: ``rammer schedule`` is the simulator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .atomic_file import atomic_write

__all__ = ["TraceSlice", "Profile", "chrome_trace", "write_chrome_trace", "top_ops"]


@dataclass(frozen=True)
class TraceSlice:
    """One timed piece of a run."""

    track: str
    name: str
    category: str
    start_ns: int
    end_ns: int
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def us(self) -> float:
        return (self.end_ns - self.start_ns) / 1e3


@dataclass(frozen=True)
class Profile:
    """The slices of one profiled run and where its trace was written."""

    slices: tuple[TraceSlice, ...]
    wall_us: float
    path: str | None = None

    def top_ops(self, limit: int = 15) -> list[dict[str, Any]]:
        return top_ops(self.slices, limit)

    def table(self, limit: int = 15) -> str:
        rows = self.top_ops(limit)
        busy = {s.track for s in self.slices}
        lines = [f"profile of one run: {self.wall_us:.1f} us wall, {len(busy)} track(s)"
                 + (f", trace in {self.path}" if self.path else ""),
                 f"{'op':<40} {'category':<14} {'calls':>6} {'total us':>10} {'share':>6}"]
        for r in rows:
            lines.append(f"{r['name'][:40]:<40} {r['category'][:14]:<14} {r['calls']:>6} {r['total_us']:>10.1f} "
                         f"{r['share']:>6.1%}")
        return "\n".join(lines)


def top_ops(slices: Sequence[TraceSlice], limit: int = 15) -> list[dict[str, Any]]:
    """Time per (name, category), summed over tracks, longest first; barrier waits are one row."""
    totals: dict[tuple[str, str], list[float]] = {}
    for s in slices:
        key = ("barrier waits", "barrier") if s.category == "barrier" else (s.name, s.category)
        acc = totals.setdefault(key, [0.0, 0])
        acc[0] += s.us
        acc[1] += 1
    grand = sum(v[0] for v in totals.values()) or 1.0
    rows: list[dict[str, Any]] = [
        {"name": k[0], "category": k[1], "total_us": v[0], "calls": int(v[1]), "share": v[0] / grand}
        for k, v in totals.items()]
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:limit]


def chrome_trace(slices: Sequence[TraceSlice], process_name: str = "rammer") -> dict[str, Any]:
    """The trace-event JSON object: complete events ('X') in microseconds from the run's start."""
    if not slices:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(s.start_ns for s in slices)
    tracks = sorted({s.track for s in slices}, key=lambda t: (not t.startswith("vEU"), _track_order(t)))
    tid = {t: i for i, t in enumerate(tracks)}
    events: list[dict[str, Any]] = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": process_name}}]
    for t, i in tid.items():
        events.append({"ph": "M", "pid": 0, "tid": i, "name": "thread_name", "args": {"name": t}})
        events.append({"ph": "M", "pid": 0, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    for s in slices:
        events.append({"ph": "X", "pid": 0, "tid": tid[s.track], "name": s.name, "cat": s.category,
                       "ts": (s.start_ns - t0) / 1e3, "dur": max(0.0, (s.end_ns - s.start_ns) / 1e3),
                       "args": dict(s.args)})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _track_order(track: str) -> tuple[int, str]:
    tail = track.split()[-1]
    return (int(tail), track) if tail.isdigit() else (1 << 30, track)


def write_chrome_trace(slices: Sequence[TraceSlice], path: str, process_name: str = "rammer") -> str:
    """Write the trace atomically (a temp file, then ``os.replace``); returns ``path``."""
    with atomic_write(path, "the profile", binary=False) as f:
        json.dump(chrome_trace(slices, process_name), f, separators=(",", ":"))
    return path
