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
from itertools import chain

import numpy as np

from ..errors import ScheduleError
from ..ir import Graph
from .clocks import ScheduleClocks, schedule_clocks
from .problem import op_names, op_predecessors
from .schedule import Schedule


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
    # chain, not a generator expression: C-level over a full-size schedule's 10^5-10^6 entries.
    flat = np.fromiter(chain.from_iterable(schedule.programs), np.int64, sum(map(len, schedule.programs)))
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


def _op_hosts(schedule: Schedule, loc_veu: np.ndarray, loc_pos: np.ndarray, first: bool = False
              ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per op: the vEUs running its rTasks (ascending) and the last (``first``: the first) position
    on each.  One sort of every op's rTasks by (op, vEU, position), not one per op: an unrolled RNN
    has thousands of ops."""
    ops = schedule.ops
    counts = np.fromiter((op.kernel.num_rtasks for op in ops), np.int64, len(ops))
    firsts = np.fromiter((op.first_rtask for op in ops), np.int64, len(ops))
    ends = np.cumsum(counts)
    rtask = np.repeat(firsts - (ends - counts), counts) + np.arange(int(ends[-1]) if ends.size else 0)
    owner = np.repeat(np.arange(len(ops)), counts)
    v, p = loc_veu[rtask], loc_pos[rtask]
    order = np.lexsort((-p if first else p, v, owner))
    v, p, owner = v[order], p[order], owner[order]
    last = np.ones(v.size, dtype=bool)
    last[:-1] = (v[1:] != v[:-1]) | (owner[1:] != owner[:-1])
    v, p, owner = v[last], p[last], owner[last]
    cuts = np.searchsorted(owner, np.arange(len(ops) + 1)).tolist()
    return [(v[a:z], p[a:z]) for a, z in zip(cuts[:-1], cuts[1:])]


#: Pairs (an op's first rTask on a vEU, a host of one of its producers) compared per pass, bounded.
_PAIRS_PER_PASS = 1 << 21


def _order_violated(sc: ScheduleClocks, hosts: list[tuple[np.ndarray, np.ndarray]],
                    firsts: list[tuple[np.ndarray, np.ndarray]], preds: list[tuple[int, ...]]) -> bool:
    """Whether :func:`_check_order`'s test fails anywhere: every (op's first rTask on a vEU, producer's
    last rTask on a vEU) pair at once, in array passes over groups of ops, instead of a few numpy
    calls per op and producer (an unrolled RNN has thousands of ops)."""
    fv_all = np.concatenate([f[0] for f in firsts]) if firsts else np.zeros(0, np.int64)
    fp_all = np.concatenate([f[1] for f in firsts]) if firsts else np.zeros(0, np.int64)
    hv_all = np.concatenate([h[0] for h in hosts]) if hosts else np.zeros(0, np.int64)
    hp_all = np.concatenate([h[1] for h in hosts]) if hosts else np.zeros(0, np.int64)
    f_at = np.concatenate([[0], np.cumsum([f[0].size for f in firsts])]).astype(np.int64)
    h_at = np.concatenate([[0], np.cumsum([h[0].size for h in hosts])]).astype(np.int64)
    o = 0
    while o < len(preds):
        # A group of ops whose pairs fit one pass (at least one op).
        parts: list[tuple[int, int]] = []  # (op, producer)
        pairs = 0
        while o < len(preds):
            size = int(f_at[o + 1] - f_at[o]) * sum(int(h_at[p + 1] - h_at[p]) for p in preds[o])
            if parts and pairs + size > _PAIRS_PER_PASS:
                break
            parts += [(o, p) for p in preds[o]]
            pairs += size
            o += 1
        if not pairs:
            continue
        op_of, pred_of = (np.array(x, np.int64) for x in zip(*parts))
        a0, a_len = f_at[op_of], f_at[op_of + 1] - f_at[op_of]
        b0, b_len = h_at[pred_of], h_at[pred_of + 1] - h_at[pred_of]
        sizes = a_len * b_len
        keep = sizes > 0
        a0, b0, b_len, sizes = a0[keep], b0[keep], b_len[keep], sizes[keep]
        k = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        b_rep = np.repeat(b_len, sizes)
        i = np.repeat(a0, sizes) + k // b_rep
        j = np.repeat(b0, sizes) + k % b_rep
        same = fv_all[i] == hv_all[j]
        if (same & (hp_all[j] > fp_all[i])).any():
            return True
        # what the op's first rTask there knows of the producer's vEU (its own vEU: same above)
        known = sc.clocks.before_at(sc.starts[fv_all[i]] + fp_all[i], fv_all[i], hv_all[j])
        if (~same & (known <= hp_all[j])).any():
            return True
    return False


def _check_order(schedule: Schedule, preds: list[tuple[int, ...]]) -> VerifyReport:
    """Every op's first rTask on each vEU (the strictest: clocks only grow along a program) runs
    after every rTask of each op it depends on: earlier on its vEU, or known complete through the
    barriers (:func:`.clocks.schedule_clocks`, which also finds deadlocks)."""
    sc = schedule_clocks(schedule)
    n = schedule.num_rtasks
    hosts = _op_hosts(schedule, sc.rtask_veu, sc.rtask_pos)
    firsts = _op_hosts(schedule, sc.rtask_veu, sc.rtask_pos, first=True)
    deps = sum(firsts[o][0].size * len(p) for o, p in enumerate(preds))
    if not _order_violated(sc, hosts, firsts, preds):
        return VerifyReport(n, schedule.num_barriers, deps)
    # Some dependency is violated: the op-by-op walk below names the first one.
    for o in range(len(schedule.ops)):
        if not preds[o]:
            continue
        fv, fp = firsts[o]
        if not fv.size:
            continue
        clock = sc.clocks.before(sc.starts[fv] + fp, fv)  # entries of each vEU known complete
        for pred in preds[o]:
            pv, pp = hosts[pred]
            same = fv[:, None] == pv[None, :]
            early = same & (pp[None, :] > fp[:, None])
            if early.any():
                k = int(np.nonzero(early.any(axis=1))[0][0])
                v, e = int(fv[k]), schedule.programs[int(fv[k])][int(fp[k])]
                raise ScheduleError(
                    f"{schedule.describe_rtask(e)} on vEU {v} runs before an rTask of '{schedule.ops[pred].name}' "
                    f"it depends on, later on the same vEU")
            late = ~same & (clock[:, pv] <= pp[None, :])
            if late.any():
                k, j = (int(x[0]) for x in np.nonzero(late))
                v, p, u = int(fv[k]), int(fp[k]), int(pv[j])
                e, missing = schedule.programs[v][p], schedule.programs[u][int(pp[j])]
                raise ScheduleError(
                    f"dependency not satisfied: {schedule.describe_rtask(e)} on vEU {v} (position {p}) may start "
                    f"before {schedule.describe_rtask(missing)} on vEU {u} completes; no barrier orders them")
    return VerifyReport(n, schedule.num_barriers, deps)
