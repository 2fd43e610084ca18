"""``--emit DIR``: the generated driver, the schedules as JSON and the report."""

from __future__ import annotations

import json
import os

import numpy as np


def emit(folder: str, compiled) -> list[str]:
    """Write the generated program, one schedule JSON per segment, the task tables, constants and report."""
    os.makedirs(folder, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)

    put("program.py", compiled.source)
    for k, sched in enumerate(compiled.schedules):
        put(f"schedule{k}.json" if len(compiled.schedules) > 1 else "schedule.json",
            json.dumps(sched.to_dict(), separators=(",", ":")))
    put("report.json", json.dumps(compiled.program.report, indent=2))
    from .runtime import CompiledSegment

    p = compiled.program
    arrays = {"T": p.T, "X": p.X, "R": p.R}
    for k, seg in enumerate(s for s in p.steps if isinstance(s, CompiledSegment)):
        arrays[f"starts{k}"] = seg.starts
        arrays[f"ends{k}"] = seg.ends
    path = os.path.join(folder, "tables.npz")
    np.savez(path, **arrays)
    written.append(path)
    path = os.path.join(folder, "consts.bin")
    p.const_blob.tofile(path)
    written.append(path)
    return written
