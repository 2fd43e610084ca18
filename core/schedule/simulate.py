"""An event-driven timeline of a schedule.

Each vEU runs its program in order.  An rTask starts when the previous entry
on its vEU ends and takes its kernel's ``duration_us``.  A barrier starts
when the previous entry ends and ends ``barrier_cost_us`` after both that
and the completion of every rTask it waits for.  From the timeline:
makespan, per-vEU utilization (time running rTasks / makespan), the number of
barrier rTasks and the number of kernel launches an op-by-op execution of
the same graph would need (one per operator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .schedule import Schedule
from .walk import rtask_locations, walk


@dataclass(frozen=True, eq=False)
class SimResult:
    makespan_us: float
    #: Mean over vEUs of busy time / makespan (0..1).
    utilization: float
    per_veu_utilization: np.ndarray
    barriers: int
    rtasks: int
    kernel_launches: int
    #: Start and finish of every rTask, by id.
    start_us: np.ndarray
    finish_us: np.ndarray
    #: (vEU, start, finish) of every barrier, by barrier index.
    barrier_spans: np.ndarray

    def summary(self) -> dict[str, float | int]:
        """The top-level figures written into schedule JSON."""
        return {"makespan_us": round(self.makespan_us, 4), "utilization": round(self.utilization, 6),
                "barriers": self.barriers, "rtasks": self.rtasks, "kernel_launches": self.kernel_launches}


def simulate(schedule: Schedule, barrier_cost_us: float | None = None) -> SimResult:
    """Simulate ``schedule``; ``barrier_cost_us`` overrides the schedule's own."""
    bc = schedule.barrier_cost_us if barrier_cost_us is None else float(barrier_cost_us)
    n = schedule.num_rtasks
    num_veus = len(schedule.programs)
    durations = schedule.op_durations[schedule.rtask_op].tolist() if n else []
    start = [0.0] * n
    finish = [0.0] * n
    spans = np.zeros((schedule.num_barriers, 3), dtype=np.float64)
    clock = [0.0] * num_veus
    busy = [0.0] * num_veus
    waits = schedule.barrier_waits
    for v, _, e in walk(schedule, rtask_locations(schedule)):
        t = clock[v]
        if e < n:
            d = durations[e]
            start[e] = t
            finish[e] = t + d
            clock[v] = t + d
            busy[v] += d
        else:
            ready = t
            for w in waits[e - n]:
                if finish[w] > ready:
                    ready = finish[w]
            end = ready + bc
            spans[e - n] = (v, t, end)
            clock[v] = end
    makespan = max(clock) if clock else 0.0
    per_veu = np.array(busy) / makespan if makespan > 0 else np.zeros(num_veus)
    return SimResult(
        makespan_us=makespan, utilization=float(per_veu.mean()) if num_veus else 0.0,
        per_veu_utilization=per_veu, barriers=schedule.num_barriers, rtasks=n,
        kernel_launches=len(schedule.ops), start_us=np.array(start), finish_us=np.array(finish),
        barrier_spans=spans,
    )
