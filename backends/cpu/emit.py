"""``--emit DIR``: the generated driver, the schedules as JSON and the report."""

from __future__ import annotations

import json
import os

import numpy as np


def emit(folder: str, compiled, source: str) -> list[str]:
    """Write the driver source, one schedule JSON per segment, the task tables and the report."""
    os.makedirs(folder, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)

    put("driver.py", source)
    for k, sched in enumerate(compiled.schedules):
        put(f"schedule{k}.json" if len(compiled.schedules) > 1 else "schedule.json",
            json.dumps(sched.to_dict(), separators=(",", ":")))
    put("report.json", json.dumps(compiled.program.report, indent=2))
    path = os.path.join(folder, "tables.npz")
    p = compiled.program
    np.savez(path, T=p.T, X=p.X, R=p.R)
    written.append(path)
    return written
