"""The ``op-by-op`` policy: the two-layer execution of today's frameworks.

Operators run one at a time in graph order, each with its fastest kernel
spread over all vEUs (rTask ``r`` on vEU ``r mod V``, as a hardware block
scheduler would), and a global barrier after each: before an operator's
first rTask on a vEU, a barrier waits for every rTask of the previous
operator.  A barrier here stands for a kernel boundary, so it costs the
vDevice's ``kernel_launch_us``.
"""

from __future__ import annotations

from .problem import Problem
from .schedule import Schedule, ScheduleBuilder


class OpByOpPolicy:
    name = "op-by-op"
    description = "one operator at a time, fastest kernel, a global barrier (kernel launch) after each"

    def schedule(self, problem: Problem) -> Schedule:
        vd = problem.vdevice
        num_veus = vd.num_veus
        builder = ScheduleBuilder(problem, self.name, vd.kernel_launch_us, {"launch_per_op": True})
        previous: dict[int, int] = {}  # vEU -> handle of the previous op's last rTask there
        for i, rop in enumerate(problem.rops):
            kernel = rop.fastest(num_veus)
            builder.choose(i, kernel)
            current: dict[int, int] = {}
            # Every barrier before this op waits for the same rTasks: one wait group, kept once.
            group = builder.add_wait_group(list(previous.values())) if previous else -1
            for r in range(kernel.num_rtasks):
                v = r % num_veus
                if v not in current and previous:
                    # Waiting on its own earlier rTask too keeps a barrier
                    # (a launch gap) even where program order would do.
                    builder.wait_group(group, v)
                current[v] = builder.append_rtask(i, r, v)
            previous = current
        return builder.finish()
