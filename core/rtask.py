"""rKernels, rOperators and rTasks: the units the scheduler places.

* An :class:`RKernel` is one way to implement an operator on a backend, e.g.
  a MatMul cut into 1x64 output tiles.  It has ``num_rtasks`` homogeneous
  rTasks, each needing :class:`RTaskResources` on one vEU and taking
  ``duration_us`` (estimated by a cost model or profiled).  It can say what
  each rTask reads and writes (:meth:`RKernel.accesses`), so a backend may
  compute dependencies at rTask granularity.
* An :class:`ROperator` is a graph node with its candidate rKernels.
* An :class:`RTask` is ``(rOperator, rKernel, rtask_id)``; a
  :class:`BarrierRTask` waits for a set of rTasks (Rammer's ``Wait``).

rKernels come from *families*: objects with a ``name``, the ``op_types``
they handle and ``candidates(node, graph, vdevice) -> list[RKernel]``.  The
hardware-neutral families live in :mod:`rammer.kernels_generic`; backends and
plugins add their own through the ``rammer_register_rkernels`` hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .errors import ScheduleError
from .ir import Graph, Node

if TYPE_CHECKING:  # pragma: no cover
    from .vdevice import VDevice

#: A hyper-rectangle of a tensor: ``((start, stop), ...)`` per dimension.
Box = tuple[tuple[int, int], ...]


def whole_box(shape: Sequence[int]) -> Box:
    return tuple((0, int(d)) for d in shape)


@dataclass(frozen=True)
class RTaskAccess:
    """What one rTask reads and writes: ``(slot, box)`` pairs, where ``slot``
    indexes the node's inputs (for reads) or outputs (for writes).  Reads may
    over-approximate; writes are exact."""

    reads: tuple[tuple[int, Box], ...]
    writes: tuple[tuple[int, Box], ...]


@dataclass(frozen=True)
class RTaskResources:
    """What one rTask needs on a vEU."""

    threads: int = 1
    local_mem_bytes: int = 0

    def fits(self, veu: Any) -> bool:
        return self.threads <= veu.threads and self.local_mem_bytes <= veu.local_mem_bytes


@dataclass(frozen=True, eq=False)
class RKernel:
    """One implementation of an operator: ``num_rtasks`` homogeneous rTasks."""

    #: The family that made it, e.g. ``"matmul.tile"``.
    family: str
    #: Its parameters (tile sizes...); plain JSON values only.
    params: Mapping[str, Any]
    num_rtasks: int
    #: Estimated or profiled time of one rTask on one vEU, in microseconds.
    duration_us: float
    resources: RTaskResources = RTaskResources()
    #: Work of one rTask, for reports (FLOPs and bytes moved).
    flops: float = 0.0
    bytes: float = 0.0
    #: ``rtask_id -> RTaskAccess``; None means every rTask reads all inputs
    #: and writes all outputs (then ``num_rtasks`` should be 1).  The shapes
    #: below (None for omitted optional tensors) give those whole boxes.
    access_fn: Callable[[int], RTaskAccess] | None = field(default=None, repr=False, compare=False)
    input_shapes: tuple[tuple[int, ...] | None, ...] = field(default=(), repr=False)
    output_shapes: tuple[tuple[int, ...] | None, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.num_rtasks < 1:
            raise ScheduleError(f"rKernel {self.family} must have at least one rTask")
        if not (self.duration_us >= 0 and math.isfinite(self.duration_us)):
            raise ScheduleError(f"rKernel {self.family} has an invalid duration {self.duration_us}")

    @property
    def kernel_id(self) -> str:
        """Stable name: family and sorted parameters, e.g. ``matmul.tile[tile_m=1,tile_n=64]``."""
        inner = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        return f"{self.family}[{inner}]"

    def latency_us(self, num_veus: int) -> float:
        """Time to run every rTask alone on ``num_veus`` vEUs (rounds x duration)."""
        return math.ceil(self.num_rtasks / num_veus) * self.duration_us

    def work_us(self, num_veus: int) -> float:
        """Time x vEUs used when run alone: the resources it occupies."""
        return self.latency_us(num_veus) * min(self.num_rtasks, num_veus)

    def accesses(self, rtask_id: int) -> RTaskAccess:
        if not 0 <= rtask_id < self.num_rtasks:
            raise ScheduleError(f"{self.kernel_id} has no rTask {rtask_id} (it has {self.num_rtasks})")
        if self.access_fn is not None:
            return self.access_fn(rtask_id)
        reads = tuple((i, whole_box(s)) for i, s in enumerate(self.input_shapes) if s is not None)
        writes = tuple((i, whole_box(s)) for i, s in enumerate(self.output_shapes) if s is not None)
        return RTaskAccess(reads, writes)

    def describe(self) -> dict[str, Any]:
        """Plain data for schedules and reports."""
        return {
            "kernel_id": self.kernel_id, "family": self.family, "params": dict(self.params),
            "num_rtasks": self.num_rtasks, "duration_us": self.duration_us,
            "threads": self.resources.threads, "local_mem_bytes": self.resources.local_mem_bytes,
            "flops": self.flops, "bytes": self.bytes,
        }

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> RKernel:
        """An RKernel from :meth:`describe` (without access information)."""
        return cls(
            family=d["family"], params=dict(d.get("params", {})), num_rtasks=int(d["num_rtasks"]),
            duration_us=float(d["duration_us"]),
            resources=RTaskResources(int(d.get("threads", 1)), int(d.get("local_mem_bytes", 0))),
            flops=float(d.get("flops", 0.0)), bytes=float(d.get("bytes", 0.0)),
        )


class RKernelFamily(Protocol):
    """A maker of rKernels for some op types (see the module docstring)."""

    # Read-only members, so a family may declare a narrower type (op_types = frozenset({...})).
    @property
    def name(self) -> str: ...

    @property
    def op_types(self) -> frozenset[str] | None:
        """Op types it can implement; None means any op."""

    def candidates(self, node: Node, graph: Graph, vdevice: VDevice) -> list[RKernel]: ...


@dataclass(frozen=True, eq=False)
class ROperator:
    """A graph node together with its candidate rKernels."""

    #: Position of the node in ``graph.nodes`` (topological order).
    index: int
    node: Node
    kernels: tuple[RKernel, ...]

    @property
    def name(self) -> str:
        return self.node.name

    def fastest(self, num_veus: int) -> RKernel:
        """The kernel with the lowest latency alone on the device (ties: less work)."""
        return min(self.kernels, key=lambda k: (k.latency_us(num_veus), k.work_us(num_veus)))

    def most_efficient(self, num_veus: int) -> RKernel:
        """The kernel with the lowest time x vEUs used (ties: lower latency)."""
        return min(self.kernels, key=lambda k: (k.work_us(num_veus), k.latency_us(num_veus)))


@dataclass(frozen=True)
class RTask:
    """``(rOperator, rKernel, rtask_id)``: one unit of work placed on one vEU."""

    rop: ROperator
    kernel: RKernel
    rtask_id: int

    def __post_init__(self) -> None:
        if not 0 <= self.rtask_id < self.kernel.num_rtasks:
            raise ScheduleError(
                f"{self.rop.node.label}: rTask {self.rtask_id} out of range for {self.kernel.kernel_id} "
                f"({self.kernel.num_rtasks} rTasks)"
            )


@dataclass(frozen=True)
class BarrierRTask:
    """A barrier: the vEU running it waits until every listed rTask (by
    schedule id) has completed.  Rammer's ``Wait``."""

    waits: tuple[int, ...]


def boxes_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Overlap matrix of two box lists shaped (n, ndim, 2) and (m, ndim, 2)."""
    lo = np.maximum(a[:, None, :, 0], b[None, :, :, 0])
    hi = np.minimum(a[:, None, :, 1], b[None, :, :, 1])
    return np.all(lo < hi, axis=-1)


def rtask_dependencies(
    producer: Node, producer_kernel: RKernel, consumer: Node, consumer_kernel: RKernel
) -> list[list[int]]:
    """For each consumer rTask, the producer rTasks whose writes it reads.

    This is what a backend that wants rTask-granularity dependencies uses;
    the built-in policies depend on whole operators.
    """
    deps: list[set[int]] = [set() for _ in range(consumer_kernel.num_rtasks)]
    for out_slot, tensor in enumerate(producer.outputs):
        if not tensor:
            continue
        in_slots = [i for i, name in enumerate(consumer.inputs) if name == tensor]
        if not in_slots:
            continue
        writes = [(p, box) for p in range(producer_kernel.num_rtasks)
                  for slot, box in producer_kernel.accesses(p).writes if slot == out_slot]
        reads = [(c, box) for c in range(consumer_kernel.num_rtasks)
                 for slot, box in consumer_kernel.accesses(c).reads if slot in in_slots]
        if not writes or not reads:
            continue
        wb = np.array([b for _, b in writes], dtype=np.int64).reshape(len(writes), -1, 2)
        rb = np.array([b for _, b in reads], dtype=np.int64).reshape(len(reads), -1, 2)
        hit = boxes_overlap(rb, wb)
        for ri, wi in zip(*np.nonzero(hit)):
            deps[reads[ri][0]].add(writes[wi][0])
    return [sorted(d) for d in deps]


def node_signature(node: Node, graph: Graph) -> tuple:
    """What decides a node's candidate kernels: op, shapes, dtypes, attributes
    and constant inputs, but not tensor or node names.  Nodes with equal
    signatures share their kernel lists (a 14,000-node LSTM has a handful)."""
    def info(name: str) -> Any:
        if not name:
            return None
        t = graph.value_info.get(name)
        const = graph.initializers.get(name)
        small_const = tuple(const.ravel().tolist()) if const is not None and const.size <= 16 else None
        return (t.dtype, t.shape, small_const) if t is not None else None

    attrs = tuple(sorted((k, _hashable(v)) for k, v in node.attrs.items()))
    return (node.domain, node.op_type, tuple(info(i) for i in node.inputs),
            tuple(info(o) for o in node.outputs), attrs)


def _hashable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (int, float, str, bytes)) or value is None:
        return value
    return ("id", id(value))  # subgraphs: never shared


def build_roperators(
    graph: Graph, vdevice: VDevice, candidates: Callable[[Node, Graph, VDevice], Iterable[RKernel]]
) -> list[ROperator]:
    """One rOperator per node, with the candidate kernels that fit a vEU.

    ``candidates`` is usually ``backend.rkernels``.  Raises a
    :class:`ScheduleError` naming the node when no kernel fits.
    """
    cache: dict[tuple, tuple[RKernel, ...]] = {}
    rops: list[ROperator] = []
    for index, node in enumerate(graph.nodes):
        key = node_signature(node, graph)
        kernels = cache.get(key)
        if kernels is None:
            found = list(candidates(node, graph, vdevice))
            kernels = tuple(k for k in found if k.resources.fits(vdevice.veu))
            if not kernels:
                why = (f"{len(found)} candidate(s) need more than a vEU offers "
                       f"({vdevice.veu.threads} threads, {vdevice.veu.local_mem_bytes} bytes)"
                       if found else "no rKernel family implements this op")
                raise ScheduleError(
                    f"{node.label}: no rKernel can run it on vDevice '{vdevice.name}': {why}; "
                    "choose another --vdevice or add an rKernel family for it"
                )
            cache[key] = kernels
        rops.append(ROperator(index, node, kernels))
    return rops
