"""Helpers for the scheduler tests: small graphs built directly in the IR,
and an executor of schedules written independently of rammer.schedule."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

import rammer
import rammer.zoo as zoo
from rammer.ir import Graph, Node, TensorInfo
from rammer.schedule import Schedule


@cache
def zoo_graph(name: str) -> Graph:
    return rammer.load(zoo.build(name))


class GraphMaker:
    """Builds a float32 graph of (rows, cols) tensors node by node."""

    def __init__(self, rows: int, cols: int, name: str = "g") -> None:
        self.rows, self.cols, self.name = rows, cols, name
        self.nodes: list[Node] = []
        self.infos: dict[str, TensorInfo] = {}
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: list[TensorInfo] = []
        self.tensors: list[str] = []  # (rows, cols) tensors usable as inputs

    def _info(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> None:
        self.infos[name] = TensorInfo(name, dtype, shape)

    def input(self) -> str:
        name = f"in{len(self.inputs)}"
        self._info(name, (self.rows, self.cols))
        self.inputs.append(self.infos[name])
        self.tensors.append(name)
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits[name] = value
        self._info(name, value.shape, value.dtype.name)
        return name

    def op(self, op_type: str, inputs: list[str], shape: tuple[int, ...] | None = None, n_out: int = 1,
           out_shapes: list[tuple[int, ...]] | None = None, **attrs) -> list[str]:
        k = len(self.nodes)
        outs = [f"t{k}_{j}" for j in range(n_out)]
        for j, o in enumerate(outs):
            self._info(o, out_shapes[j] if out_shapes else (shape or (self.rows, self.cols)))
        self.nodes.append(Node(op_type, tuple(inputs), tuple(outs), f"n{k}_{op_type}", "", attrs))
        return outs

    def graph(self, outputs: list[str]) -> Graph:
        g = Graph(self.name, tuple(self.inputs), tuple(self.infos[o] for o in outputs), tuple(self.nodes),
                  self.inits, self.infos, {"": 17})
        g.verify()
        return g


def execute(schedule: Schedule, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run the programs with the given per-rTask durations: a vEU advances
    past a barrier only once every rTask it lists has finished.  Returns
    (start, finish) per rTask id; raises AssertionError on a deadlock.

    Deliberately naive (rounds until nothing moves) and sharing no code with
    rammer.schedule.walk/simulate.
    """
    n = schedule.num_rtasks
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    clock = [0.0] * len(schedule.programs)
    cursor = [0] * len(schedule.programs)
    moved = True
    while moved:
        moved = False
        for v, prog in enumerate(schedule.programs):
            while cursor[v] < len(prog):
                e = prog[cursor[v]]
                if e < n:
                    start[e] = clock[v]
                    finish[e] = clock[v] + durations[e]
                    clock[v] = finish[e]
                else:
                    waits = schedule.barrier_waits[e - n]
                    if any(np.isnan(finish[w]) for w in waits):
                        break
                    clock[v] = max([clock[v]] + [finish[w] for w in waits])
                cursor[v] += 1
                moved = True
    assert all(c == len(p) for c, p in zip(cursor, schedule.programs)), "deadlock: some vEU never finishes"
    return start, finish


def dependency_violations(schedule: Schedule, preds: list[tuple[int, ...]], start: np.ndarray,
                          finish: np.ndarray) -> list[tuple[str, str]]:
    """(consumer op, producer op) pairs where a consumer rTask started before
    some producer rTask finished."""
    bad = []
    for i, op in enumerate(schedule.ops):
        mine = slice(op.first_rtask, op.first_rtask + op.kernel.num_rtasks)
        for p in preds[i]:
            theirs = schedule.ops[p]
            done = finish[theirs.first_rtask:theirs.first_rtask + theirs.kernel.num_rtasks].max()
            if start[mine].min() < done - 1e-9:
                bad.append((op.name, theirs.name))
    return bad


def happens_before(programs: list) -> Callable[[tuple[int, int]], set[tuple[int, int]]]:
    """An oracle written apart from rammer.schedule.clocks: ``reach(step)``, the steps (block, index)
    that happen after a step (program order, and each Wait after the Signal it counts to), found by
    walking an explicit graph.  Programs of Call / Signal / Wait steps (:mod:`rammer.schedule.programs`)."""
    from rammer.schedule.programs import Signal, Wait

    succ: dict[tuple[int, int], list[tuple[int, int]]] = {}
    signal_at: dict[tuple[int, int], tuple[int, int]] = {}
    for b, steps in enumerate(programs):
        k = 0
        for i, s in enumerate(steps):
            succ[(b, i)] = [(b, i + 1)] if i + 1 < len(steps) else []
            if isinstance(s, Signal):
                k += 1
                signal_at[(b, k)] = (b, i)
    for b, steps in enumerate(programs):
        for i, s in enumerate(steps):
            if isinstance(s, Wait) and s.count > 0:
                succ[signal_at[(s.block, s.count)]].append((b, i))

    def reach(a: tuple[int, int]) -> set[tuple[int, int]]:
        seen, todo = set(), [a]
        while todo:
            for m in succ[todo.pop()]:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen

    return reach
