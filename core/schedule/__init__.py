"""Static rTask schedules: building, verifying, simulating and plotting them.

    from rammer.schedule import build_problem, get_policy, simulate, verify
    problem = build_problem(graph, get_preset("v100"))
    schedule = get_policy("wavefront").schedule(problem)
    verify(schedule, graph)
    print(simulate(schedule).makespan_us)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..vdevice import VDevice, get_preset
from .ordering import schedule_order
from .policies import Policy, get_policy, policies
from .problem import Problem, build_problem, op_names, op_predecessors, op_waves
from .schedule import BarrierEntry, RTaskEntry, Schedule, ScheduleBuilder, ScheduledOp
from .simulate import SimResult, simulate
from .verify import VerifyReport, verify

if TYPE_CHECKING:  # pragma: no cover
    from ..backend import Backend
    from ..ir import Graph

__all__ = [
    "BarrierEntry", "Policy", "Problem", "RTaskEntry", "Schedule", "ScheduleBuilder", "ScheduledOp", "SimResult",
    "VerifyReport", "build_problem", "get_policy", "op_names", "op_predecessors", "op_waves", "policies",
    "schedule_graph",
    "schedule_order", "simulate", "verify",
]


def schedule_graph(graph: Graph, policy: str = "wavefront", vdevice: str | VDevice = "v100",
                   backend: Backend | None = None, check: bool = False) -> Schedule:
    """Schedule ``graph`` with a registered policy on a vDevice (preset name or object), each node one
    operator with ``backend``'s rKernels; ``check`` verifies the schedule against the graph."""
    vd = vdevice if isinstance(vdevice, VDevice) else (
        backend.vdevice(vdevice) if backend is not None else get_preset(vdevice))
    schedule: Schedule = get_policy(policy).schedule(build_problem(graph, vd, backend))
    if check:
        verify(schedule, graph)
    return schedule
