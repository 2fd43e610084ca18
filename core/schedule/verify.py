"""The schedule verifier.

:func:`verify` checks that a schedule is a correct execution of a graph:

1. its ops are the graph's nodes, with the graph's dependencies;
2. every rTask of every op appears exactly once in the programs, every
   barrier once, and nothing else;
3. every rTask's kernel fits the resources of a vEU;
4. no barrier waits in a cycle (deadlock);
5. every dependency is satisfied: before an rTask of op ``C`` runs on vEU
   ``v``, every rTask of every op ``C`` depends on has completed, because it
   is earlier in ``v``'s program or because a barrier earlier in ``v``'s
   program waited (directly or transitively) for it or a later rTask on its
   vEU.  Happens-before is tracked with vector clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ScheduleError
from ..ir import Graph
from .problem import op_names, op_predecessors
from .schedule import Schedule
from .walk import rtask_locations, walk


@dataclass(frozen=True)
class VerifyReport:
    rtasks: int
    barriers: int
    dependencies_checked: int


def verify(schedule: Schedule, graph: Graph | None = None) -> VerifyReport:
    """Raise a :class:`ScheduleError` naming the first problem found; return
    what was checked otherwise.  Without ``graph``, the dependencies recorded
    in the schedule are checked."""
    preds = _check_ops(schedule, graph)
    _check_exactly_once(schedule)
    _check_resources(schedule)
    return _check_order(schedule, preds)


def _check_ops(schedule: Schedule, graph: Graph | None) -> list[tuple[int, ...]]:
    ops = schedule.ops
    expected_first = 0
    for op in ops:
        if op.first_rtask != expected_first:
            raise ScheduleError(f"op '{op.name}' starts at rTask id {op.first_rtask}, expected {expected_first}")
        expected_first += op.kernel.num_rtasks
    if graph is None:
        return [op.preds for op in ops]
    names = op_names(graph)
    if len(names) != len(ops):
        raise ScheduleError(f"the schedule has {len(ops)} ops but graph '{graph.name}' has {len(names)} nodes")
    for i, (name, op) in enumerate(zip(names, ops)):
        if name != op.name or graph.nodes[i].op_type != op.op_type:
            raise ScheduleError(f"op {i} of the schedule is '{op.name}' ({op.op_type}) but the graph's node {i} "
                                f"is '{name}' ({graph.nodes[i].op_type}); was it made for another graph?")
    return op_predecessors(graph)


def _check_exactly_once(schedule: Schedule) -> None:
    n, b = schedule.num_rtasks, schedule.num_barriers
    flat = np.fromiter((e for prog in schedule.programs for e in prog), dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= n + b):
        bad = int(flat[(flat < 0) | (flat >= n + b)][0])
        raise ScheduleError(f"entry id {bad} is neither an rTask (0..{n - 1}) nor a barrier ({n}..{n + b - 1})")
    counts = np.bincount(flat, minlength=n + b)
    lost = np.nonzero(counts[:n] == 0)[0]
    if lost.size:
        raise ScheduleError(f"{lost.size} rTask(s) are never run, e.g. {schedule.describe_rtask(int(lost[0]))}")
    twice = np.nonzero(counts > 1)[0]
    if twice.size:
        e = int(twice[0])
        what = schedule.describe_rtask(e) if e < n else f"barrier {e}"
        raise ScheduleError(f"{what} appears {int(counts[e])} times in the programs")
    unused = np.nonzero(counts[n:] == 0)[0]
    if unused.size:
        raise ScheduleError(f"barrier {n + int(unused[0])} is in no program")


def _check_resources(schedule: Schedule) -> None:
    veu = schedule.vdevice.veu
    for op in schedule.ops:
        r = op.kernel.resources
        if not r.fits(veu):
            raise ScheduleError(
                f"op '{op.name}' uses {op.kernel.kernel_id}, whose rTasks need {r.threads} threads and "
                f"{r.local_mem_bytes} bytes of local memory; a vEU of '{schedule.vdevice.name}' has "
                f"{veu.threads} and {veu.local_mem_bytes}")


def _op_hosts(schedule: Schedule, loc_veu: np.ndarray, loc_pos: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per op: the vEUs running its rTasks and the last position on each."""
    hosts = []
    for op in schedule.ops:
        sl = slice(op.first_rtask, op.first_rtask + op.kernel.num_rtasks)
        v, p = loc_veu[sl], loc_pos[sl]
        order = np.lexsort((p, v))
        v, p = v[order], p[order]
        last = np.ones(v.size, dtype=bool)
        last[:-1] = v[1:] != v[:-1]
        hosts.append((v[last], p[last]))
    return hosts


def _check_order(schedule: Schedule, preds: list[tuple[int, ...]]) -> VerifyReport:
    locations = rtask_locations(schedule)
    loc_veu, loc_pos = locations
    n = schedule.num_rtasks
    num_veus = len(schedule.programs)
    hosts = _op_hosts(schedule, loc_veu, loc_pos)
    rtask_op = schedule.rtask_op.tolist()
    # How many barriers wait for each rTask: its clock snapshot is kept
    # until the last of them has used it.
    all_waits = np.fromiter((w for ws in schedule.barrier_waits for w in ws), dtype=np.int64)
    refs = np.bincount(all_waits[(all_waits >= 0) & (all_waits < n)], minlength=n).tolist()
    loc_veu_l = loc_veu.tolist()
    # clock[v, u]: the last position on vEU u known complete at v's current point.
    clock = np.full((num_veus, num_veus), -1, dtype=np.int64)
    snapshots: dict[int, np.ndarray] = {}  # rTask id -> its vEU's clock when it completed
    checked: set[tuple[int, int]] = set()
    deps = 0
    for v, p, e in walk(schedule, locations):
        if e >= n:
            seen = []
            for w in schedule.barrier_waits[e - n]:
                if loc_veu_l[w] != v:
                    seen.append(snapshots[w])
                refs[w] -= 1
                if refs[w] == 0:
                    snapshots.pop(w, None)
            if seen:
                np.maximum(clock[v], np.max(seen, axis=0), out=clock[v])
            continue
        o = rtask_op[e]
        # The first rTask of an op on a vEU is the strictest check: clocks
        # only grow along a program.
        if (o, v) not in checked:
            checked.add((o, v))
            for pred in preds[o]:
                pv, pp = hosts[pred]
                deps += 1
                same = pv == v
                if np.any(pp[same] > p):
                    raise ScheduleError(
                        f"{schedule.describe_rtask(e)} on vEU {v} runs before an rTask of '{schedule.ops[pred].name}' "
                        f"it depends on, later on the same vEU")
                other = ~same
                late = other & (clock[v, pv] < pp)
                if np.any(late):
                    u = int(pv[late][0])
                    missing = schedule.programs[u][int(pp[late][0])]
                    raise ScheduleError(
                        f"dependency not satisfied: {schedule.describe_rtask(e)} on vEU {v} (position {p}) may start "
                        f"before {schedule.describe_rtask(missing)} on vEU {u} completes; no barrier orders them")
        if refs[e]:
            snap = clock[v].copy()
            snap[v] = p
            snapshots[e] = snap
    return VerifyReport(n, schedule.num_barriers, deps)
