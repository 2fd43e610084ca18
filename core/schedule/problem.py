"""A scheduling problem: the rOperators of a graph, their op-level
dependencies and the vDevice to place them on."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ir import Graph, Node, TensorInfo, outer_names
from ..kernel_families import generic_families
from ..kernels_generic import candidates_from
from ..rtask import RKernel, ROperator, build_roperators
from ..vdevice import VDevice

if TYPE_CHECKING:  # pragma: no cover
    from ..backend import Backend


def op_names(graph: Graph) -> list[str]:
    """A unique name per node: its own, or ``OpType_index`` when it has none,
    with ``#2``, ``#3``... appended to repeats.  Schedules name ops this way."""
    seen: dict[str, int] = {}
    names = []
    for i, node in enumerate(graph.nodes):
        base = node.name or f"{node.op_type}_{i}"
        k = seen.get(base, 0) + 1
        seen[base] = k
        names.append(base if k == 1 else f"{base}#{k}")
    return names


def op_predecessors(graph: Graph) -> list[tuple[int, ...]]:
    """For each node, the indices of the nodes producing what it reads
    (including tensors its subgraphs capture)."""
    producer: dict[str, int] = {}
    preds: list[tuple[int, ...]] = []
    for i, node in enumerate(graph.nodes):
        reads = set(node.inputs)
        if node.subgraphs():
            reads |= outer_names(node)
        preds.append(tuple(sorted({producer[t] for t in reads if t in producer})))
        for out in node.outputs:
            if out:
                producer[out] = i
    return preds


def op_waves(preds: Sequence[Sequence[int]], one_per_op: bool = False) -> list[int]:
    """Each op's wave (a launch, a compute set): 1 + the latest wave among its predecessors (0 for
    sources), ops in topological order; ``one_per_op`` gives every op a wave of its own (op by op)."""
    if one_per_op:
        return list(range(len(preds)))
    wave: list[int] = []
    for ps in preds:
        wave.append(1 + max((wave[p] for p in ps), default=-1))
    return wave


@dataclass(frozen=True, eq=False)
class Problem:
    """Everything a policy needs: rOperators in graph order, op-level
    predecessors and successors, and the vDevice."""

    graph_name: str
    rops: tuple[ROperator, ...]
    names: tuple[str, ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    vdevice: VDevice
    #: The graph's tensors and which are initializers, for self-contained schedules.
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict)
    constants: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.rops)


def problem_from_rops(graph_name: str, rops: list[ROperator], names: list[str],
                      preds: list[tuple[int, ...]], vdevice: VDevice, tensors: Mapping[str, TensorInfo] | None = None,
                      constants: Iterable[str] = ()) -> Problem:
    succs: list[list[int]] = [[] for _ in rops]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return Problem(graph_name, tuple(rops), tuple(names), tuple(tuple(p) for p in preds),
                   tuple(tuple(s) for s in succs), vdevice, tensors if tensors is not None else {},
                   frozenset(constants))


def build_problem(graph: Graph, vdevice: VDevice, backend: Backend | None = None,
                  candidates: Callable[[Node, Graph, VDevice], Iterable[RKernel]] | None = None) -> Problem:
    """The problem of scheduling ``graph`` on ``vdevice`` with the rKernels of
    ``backend`` (or ``candidates``; the generic families when neither)."""
    if candidates is None:
        if backend is not None:
            candidates = backend.rkernels
        else:
            families = generic_families()

            def candidates(node: Node, g: Graph, vd: VDevice) -> list[RKernel]:
                return candidates_from(families, node, g, vd)

    rops = build_roperators(graph, vdevice, candidates)
    return problem_from_rops(graph.name, rops, op_names(graph), op_predecessors(graph), vdevice,
                             graph.value_info, graph.initializers)
