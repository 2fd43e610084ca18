"""The lowered operator: what a backend's lowering produces and its scheduler and code generator consume.

A :class:`LoweredOp` covers one or more graph nodes (a fused group, or a GEMM with its epilogue),
reads and writes buffers (:mod:`.views`), and offers tilings: ways to cut it into rTasks, each
with a cost from the core's cost model.  What a task row of it looks like is the backend's:
``emit`` is opaque here.  :func:`topological_order` orders lowered ops by their buffer reads and
writes, :func:`split_at_host` cuts them into compiled segments at host ops, and :func:`classify`
sorts a graph's nodes into kinds by rules a backend supplies.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rammer.cost import rtask_duration
from rammer.ir import Graph, Node
from rammer.vdevice import VDevice


class OpCycle(Exception):
    """Lowered ops depend on each other in a circle (a fusion or batching decision made one)."""


@dataclass
class LoweredOp:
    name: str
    #: Kernel family, e.g. "ew", "gemm", "conv", "conv.depthwise", "copy", "host".
    family: str
    nodes: tuple[Node, ...]
    #: Buffer ids read and written.
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    #: Work of the whole op, for costs and reports.
    flops: float
    nbytes: float
    #: ``partition(n) -> parts``: cut the op into about ``n`` rTasks
    #: (shape-only; the number of parts returned is the real rTask count).
    partition: Callable[[int], list] | None
    #: The backend's writer of one task row per part, once buffers are placed (opaque here).
    emit: Callable[..., list] | None
    #: Float32 scratch elements one rTask needs on its vEU.
    scratch: int = 0
    #: A contraction (GEMM, conv): costed at the vEU's peak.
    blas: bool = False
    #: Host ops (reference fallback) run between compiled segments.
    host: bool = False
    host_reason: str = ""
    index: int = -1
    extra: dict = field(default_factory=dict)

    def tilings(self, max_veus: int) -> dict[int, list]:
        """Candidate partitions by rTask count: about 1, 2, 4... up to 4x the vEUs."""
        if self.host or self.partition is None:
            return {1: [None]}
        found: dict[int, list] = {}
        wanted = {1, max_veus}
        n = 2
        while n <= 4 * max_veus:
            wanted.add(n)
            n *= 2
        for n in sorted(wanted):
            parts = self.partition(n)
            if parts and len(parts) not in found:
                found[len(parts)] = parts
        return found

    def task_us(self, n_tasks: int, vdevice: VDevice) -> float:
        """One of ``n_tasks`` equal rTasks on a vEU of ``vdevice``."""
        return rtask_duration(vdevice, self.flops / n_tasks, self.nbytes / n_tasks, contraction=self.blas)


def split_range(total: int, parts: int, index: int) -> tuple[int, int]:
    """The ``index``-th of ``parts`` near-equal chunks of ``range(total)``."""
    base, extra = divmod(total, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def grid_split(rows: int, cols: int, parts: int, col_align: int = 1) -> list[tuple[int, int, int, int]]:
    """Cut a rows x cols space into ``parts`` rectangles: rows first, then columns."""
    if parts <= rows or cols <= col_align:
        parts = min(parts, max(rows, 1))
        return [split_range(rows, parts, i) + (0, cols) for i in range(parts)]
    row_parts = max(rows, 1)
    col_parts = max(1, parts // row_parts)
    col_parts = min(col_parts, max(1, cols // col_align))
    out = []
    for r in range(row_parts):
        r0, r1 = split_range(rows, row_parts, r)
        chunks = math.ceil(cols / col_align)
        for c in range(col_parts):
            c0, c1 = split_range(chunks, col_parts, c)
            out.append((r0, r1, c0 * col_align, min(cols, c1 * col_align)))
    return out


def topological_order(ops: Sequence[Any]) -> list[Any]:
    """``ops`` (each with ``index``, ``reads``, ``writes``; ``index`` its position) in an order where
    every op follows the writers of what it reads, smallest index first among the ready; ``index``
    renumbered to the new positions.  Raises :class:`OpCycle` when the ops feed each other in a circle."""
    writer = {}
    for op in ops:
        for b in op.writes:
            writer[b] = op.index
    preds = [sorted({writer[b] for b in op.reads if b in writer and writer[b] != op.index}) for op in ops]
    succs: list[list[int]] = [[] for _ in ops]
    remaining = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    heap = [i for i, r in enumerate(remaining) if r == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(ops[i])
        for s in succs[i]:
            remaining[s] -= 1
            if remaining[s] == 0:
                heapq.heappush(heap, s)
    if len(order) != len(ops):
        raise OpCycle()
    for k, op in enumerate(order):
        op.index = k
    return order


def split_at_host(ops: Sequence[Any]) -> list[Any]:
    """``ops`` (each with ``host``) cut into segments at the ops left to the reference
    implementation: a list of compiled segments (lists of ops, in order) and host ops."""
    steps: list[Any] = []
    for op in ops:
        if op.host:
            steps.append(op)
        elif steps and isinstance(steps[-1], list):
            steps[-1].append(op)
        else:
            steps.append([op])
    return steps


@dataclass(frozen=True)
class Rules:
    """A backend's rules for sorting nodes into kinds (:func:`classify`).

    Each ``*_reason`` returns None when the node qualifies, else why not; ``host_reason`` returns ""
    when the node may be compiled at all.
    """

    #: Why a node must run on the reference implementation ("" if it need not).
    host_reason: Callable[[Node], str]
    #: Whether the node has nothing to compute (every output empty).
    is_empty: Callable[[Node], bool]
    #: Whether the node only re-indexes memory (see :mod:`.aliasing`).
    is_view: Callable[[Node], bool]
    #: Why the node does not fuse into elementwise programs.
    ew_reason: Callable[[Node], str | None]
    #: Op types that may head a fusion group (take an epilogue), and why a node of one cannot.
    head_ops: frozenset[str]
    head_reason: Callable[[Node], str | None]
    #: Op types with a lowering of their own, and why a node of one cannot take it.
    op_types: frozenset[str]
    op_reason: Callable[[Node], str | None]
    #: The op types ``ew_reason`` knows (their reason is given when nothing else takes them).
    ew_ops: frozenset[str] = frozenset()
    no_kernel: str = "no rKernel for this op"


def classify(graph: Graph, rules: Rules) -> tuple[list[str], list[str]]:
    """Per node, its kind and (for "host") the reason: "host", "empty", "view", "ew" (fuses into
    elementwise programs), "head" (GEMM-like, takes an epilogue) or "op" (its own lowering)."""
    kinds: list[str] = []
    reasons: list[str] = []
    for node in graph.nodes:
        reason = rules.host_reason(node)
        if reason:
            kinds.append("host")
        elif rules.is_empty(node):
            kinds.append("empty")
        elif rules.is_view(node):
            kinds.append("view")
        elif rules.ew_reason(node) is None:
            kinds.append("ew")
        elif node.op_type in rules.head_ops and rules.head_reason(node) is None:
            kinds.append("head")
        else:
            why = rules.op_reason(node) if node.op_type in rules.op_types else (
                rules.head_reason(node) if node.op_type in rules.head_ops else
                rules.ew_reason(node) if node.op_type in rules.ew_ops else
                rules.no_kernel)
            if why is None:
                kinds.append("op")
            else:
                kinds.append("host")
                reason = why
        reasons.append(reason)
    return kinds, reasons
