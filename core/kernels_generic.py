"""Hardware-neutral rKernel families with analytic costs.

Every family cuts an operator's output into boxes (tiles), one rTask per
tile, and offers a few tile sizes as candidate rKernels.  The duration of
one rTask on one vEU is

    rtask_overhead_us + max(flops / (vEU FLOP rate x efficiency),
                            bytes / vEU bandwidth)

where ``bytes`` counts every operand byte the tile reads and writes (a tile
re-reads the panels it shares with its neighbours, so smaller tiles move
more bytes in total) and ``efficiency`` falls for small matrix tiles (little
register reuse).  Finer tiles give more rTasks, hence more parallelism but
more total work; the scheduler trades the two.  Of the tilings tried, only
those not dominated in (latency alone on the device, time x vEUs) are kept.

Families: ``elementwise.tile``, ``copy.tile`` (data movement), ``split.outputs``,
``rows.tile`` (softmax, normalizations, reductions), ``matmul.tile``,
``conv.tile``, ``pool.tile`` (in :mod:`rammer.kernels_dense`), and the
fallback ``whole`` (the whole operator as one rTask) for anything else;
:func:`rammer.kernel_families.generic_families` lists them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from .cost import node_bytes, node_flops, rtask_duration
from .ir import Graph, Node
from .rtask import Box, RKernel, RKernelFamily, RTaskAccess, RTaskResources

if TYPE_CHECKING:  # pragma: no cover
    from .vdevice import VDevice, VEUResources


# -- tiling ---------------------------------------------------------------

@dataclass(frozen=True)
class Tiling:
    """A tensor of ``shape`` cut into a grid of ``block``-sized boxes."""

    shape: tuple[int, ...]
    block: tuple[int, ...]

    @cached_property
    def grid(self) -> tuple[int, ...]:
        # A zero-extent axis gets a zero block from tile sizes clamped to the shape: one empty box.
        return tuple(max(1, -(-s // b)) if b > 0 else 1 for s, b in zip(self.shape, self.block))

    @property
    def count(self) -> int:
        return math.prod(self.grid)

    @property
    def block_size(self) -> int:
        """Elements of a full (non-edge) tile: the size rTask costs assume."""
        return math.prod(min(b, s) for b, s in zip(self.block, self.shape))

    def box(self, i: int) -> Box:
        out: list[tuple[int, int]] = []
        for g, b, s in zip(reversed(self.grid), reversed(self.block), reversed(self.shape)):
            i, k = divmod(i, g)
            out.append((k * b, min(s, (k + 1) * b)))
        return tuple(reversed(out))


def chunk_block(shape: Sequence[int], chunk: int, splittable: Iterable[int] | None = None) -> tuple[int, ...]:
    """Block shape of tiles of about ``chunk`` elements (counting splittable
    axes only), cutting outer axes first so each tile is contiguous."""
    shape = tuple(int(s) for s in shape)
    axes = sorted(set(range(len(shape)) if splittable is None else splittable))
    block = list(shape)
    inner = 1
    for pos in range(len(axes) - 1, -1, -1):
        a = axes[pos]
        if inner * shape[a] > chunk:
            block[a] = max(1, chunk // inner)
            for outer in axes[:pos]:
                block[outer] = 1
            break
        inner *= shape[a]
    return tuple(block)


def map_broadcast(box: Box, in_shape: Sequence[int]) -> Box:
    """The box of a (numpy-broadcast) input that an output box reads."""
    offset = len(box) - len(in_shape)
    return tuple((0, 1) if d == 1 and box[offset + j] != (0, 1) else box[offset + j]
                 for j, d in enumerate(in_shape))


def normalize_axis(axis: int, rank: int) -> int:
    """A possibly negative axis as 0..rank-1 (shapes were checked at import)."""
    return axis % rank if rank else 0


def box_size(box: Box) -> int:
    return math.prod(hi - lo for lo, hi in box)


def whole(shape: Sequence[int]) -> Box:
    return tuple((0, int(d)) for d in shape)


# -- costing --------------------------------------------------------------

def tile_efficiency(rows: int, cols: int) -> float:
    """Compute efficiency of a rows x cols output tile of a contraction:
    1 at 64x64 and above, falling with the square root of the tile area."""
    return math.sqrt(min(rows, 64) * min(cols, 64) / 4096.0)


def make_kernel(
    family: str, params: dict[str, Any], count: int, vd: VDevice, flops: float, nbytes: float,
    access: Callable[[int], RTaskAccess] | None, node: Node, graph: Graph,
    efficiency: float = 1.0, staging_bytes: int = 0, contraction: bool = False,
    work_items: float | None = None, local_bytes: int | None = None,
) -> RKernel:
    """An RKernel whose rTasks each do ``flops`` and move ``nbytes`` (costed by
    :func:`rammer.cost.rtask_duration`; ``contraction`` for GEMM/conv tiles).

    Local memory: on local-memory-only devices an rTask's working set must fit
    a vEU (its constant operands excepted where the vDevice keeps constants in
    flash); elsewhere it needs ``staging_bytes``.  ``local_bytes`` overrides
    both (a kernel that stages slices of its operands).  Threads: one per work
    item of a tile (``work_items``, e.g. its output elements), at most the
    vEU's; the whole vEU when not given."""
    if local_bytes is not None:
        local = int(local_bytes)
    elif vd.local_memory_only:
        local = int(nbytes)
        if vd.constant_memory == "flash":
            local = max(0, local - int(constant_read_bytes(access, node, graph)))
    else:
        local = int(staging_bytes)
    threads = vd.veu.threads if work_items is None else max(1, min(vd.veu.threads, math.ceil(work_items)))
    return RKernel(
        family=family, params=params, num_rtasks=int(count),
        duration_us=rtask_duration(vd, flops, nbytes, efficiency, contraction),
        resources=RTaskResources(threads=threads, local_mem_bytes=local),
        flops=float(flops), bytes=float(nbytes), access_fn=access,
        input_shapes=tuple(shape_of(graph, i) for i in node.inputs),
        output_shapes=tuple(shape_of(graph, o) for o in node.outputs),
    )


def constant_read_bytes(access: Callable[[int], RTaskAccess] | None, node: Node, graph: Graph) -> float:
    """Bytes of constant inputs (initializers) the first rTask reads (all of them when ``access`` is None)."""
    if access is None:
        return float(sum(graph.initializers[i].nbytes for i in node.inputs if i and i in graph.initializers))
    return float(sum(box_size(box) * itemsize(graph, node.inputs[s]) for s, box in access(0).reads
                     if node.inputs[s] in graph.initializers))


def shape_of(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.value_info.get(name) if name else None
    return t.shape if t is not None else None


def itemsize(graph: Graph, name: str) -> int:
    t = graph.value_info.get(name) if name else None
    return t.np_dtype.itemsize if t is not None else 4


def pareto(kernels: list[RKernel], num_veus: int, veu: VEUResources | None = None) -> list[RKernel]:
    """Kernels not dominated in (latency alone, time x vEUs), one per point.  With ``veu``, only
    among those whose rTasks fit it: a kernel that cannot run must not hide one that can."""
    if veu is not None:
        kernels = [k for k in kernels if k.resources.fits(veu)]
    best: dict[tuple[float, float], RKernel] = {}
    for k in kernels:
        key = (round(k.latency_us(num_veus), 9), round(k.work_us(num_veus), 9))
        if key not in best or k.num_rtasks < best[key].num_rtasks:
            best[key] = k
    points = sorted(best.items())
    kept: list[RKernel] = []
    lowest_work = math.inf
    for (_, work), k in points:  # by latency ascending: keep if it needs less work than all faster ones
        if work < lowest_work - 1e-12:
            kept.append(k)
            lowest_work = work
    return kept


#: Fewest bytes an elementwise-like rTask handles (unless the tensor is smaller):
#: below a vector's worth per rTask, the overhead is all there is.
MIN_TILE_BYTES = 256


def chunk_sizes(total: int, num_veus: int, unit_bytes: int = 4) -> list[int]:
    """Tile sizes to try, in units (elements, or rows of a row-wise op) of ``unit_bytes`` each,
    for a tensor of ``total`` units: fixed powers of four and sizes giving 1, 2 and 4 tiles per
    vEU, none below :data:`MIN_TILE_BYTES` (in bytes, so a tile of long rows may be one row)."""
    sizes = {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, total}
    sizes |= {-(-total // (m * num_veus)) for m in (1, 2, 4)}
    least = min(total, max(1, -(-MIN_TILE_BYTES // max(1, unit_bytes))))
    return sorted(s for s in sizes if least <= s <= total)


# -- elementwise and data movement ------------------------------------------

#: FLOPs per output element; unlisted elementwise ops count 1.
_ELEMENTWISE_WEIGHT = {
    **dict.fromkeys(["Sigmoid", "Tanh", "Exp", "Log", "Erf", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos",
                     "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Gelu", "Mish", "Softplus",
                     "Elu", "Selu", "Celu", "HardSwish", "Sqrt"], 8),
    **dict.fromkeys(["Div", "Reciprocal", "Mod", "Softsign"], 4),
}
ELEMENTWISE_OPS = frozenset(_ELEMENTWISE_WEIGHT) | frozenset([
    "Add", "Sub", "Mul", "Max", "Min", "Mean", "Sum", "Relu", "LeakyRelu", "PRelu", "HardSigmoid",
    "ThresholdedRelu", "Shrink", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Clip", "Cast",
    "CastLike", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
    "Xor", "Not", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsNaN", "IsInf",
    "Dropout",
])
COPY_OPS = frozenset(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat",
                      "Slice", "Pad", "Expand", "Tile", "Gather", "DepthToSpace", "SpaceToDepth"])


def _single_output(node: Node) -> bool:
    return bool(node.outputs) and all(not o for o in node.outputs[1:])


class TiledOutputFamily:
    """Cuts the (single) output into contiguous chunks.  Subclasses say
    which input box an output box reads and what a tile costs."""

    name = "tiled"
    op_types: frozenset[str] | None = frozenset()

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        if not _single_output(node):
            return []
        out = shape_of(graph, node.outputs[0])
        if out is None:
            return []
        total = math.prod(out)
        if total == 0:
            return []
        in_shapes = [shape_of(graph, i) for i in node.inputs]
        blocks = {chunk_block(out, c) for c in chunk_sizes(total, vd.num_veus, itemsize(graph, node.outputs[0]))}
        kernels = []
        for block in sorted(blocks):
            tiling = Tiling(out, block)
            first = tiling.box(0)
            nbytes = self.tile_bytes(node, graph, first, in_shapes)
            flops = box_size(first) * self.weight(node)

            def access(i: int, tiling: Tiling = tiling) -> RTaskAccess:
                box = tiling.box(i)
                return RTaskAccess(tuple(self.reads(node, graph, box, in_shapes)), ((0, box),))

            kernels.append(make_kernel(self.name, {"block": list(block)}, tiling.count, vd, flops,
                                       nbytes, access, node, graph, work_items=box_size(first)))
        return pareto(kernels, vd.num_veus, vd.veu)

    def weight(self, node: Node) -> float:
        return 0.0

    def tile_bytes(self, node: Node, graph: Graph, box: Box, in_shapes: list) -> float:
        """Bytes one tile moves: its input boxes and its output box."""
        reads = self.reads(node, graph, box, in_shapes)
        return (sum(box_size(b) * itemsize(graph, node.inputs[s]) for s, b in reads)
                + box_size(box) * itemsize(graph, node.outputs[0]))

    def reads(self, node: Node, graph: Graph, box: Box, in_shapes: list) -> list[tuple[int, Box]]:
        return [(s, whole(sh)) for s, sh in enumerate(in_shapes) if sh is not None]


class ElementwiseFamily(TiledOutputFamily):
    name = "elementwise.tile"
    op_types = ELEMENTWISE_OPS

    def weight(self, node: Node) -> float:
        return float(_ELEMENTWISE_WEIGHT.get(node.op_type, 1))

    def reads(self, node, graph, box, in_shapes):
        if node.op_type == "CastLike":  # the second input only lends its dtype
            in_shapes = in_shapes[:1]
        return [(s, map_broadcast(box, sh)) for s, sh in enumerate(in_shapes) if sh is not None]


class CopyFamily(TiledOutputFamily):
    """Data movement: 0 FLOPs, each output byte read once and written once."""

    name = "copy.tile"
    op_types = COPY_OPS

    def reads(self, node, graph, box, in_shapes):
        if node.op_type == "Transpose" and in_shapes[0] is not None:
            perm = list(node.attr("perm", list(range(len(box)))[::-1]))
            inv = [0] * len(perm)
            for out_axis, in_axis in enumerate(perm):
                inv[in_axis] = out_axis
            return [(0, tuple(box[inv[a]] for a in range(len(perm))))]
        if node.op_type == "Concat":
            axis = normalize_axis(int(node.attr("axis", 0)), len(box))
            reads, start = [], 0
            for s, sh in enumerate(in_shapes):
                if sh is None:
                    continue
                lo, hi = max(box[axis][0], start), min(box[axis][1], start + sh[axis])
                if lo < hi:
                    reads.append((s, box[:axis] + ((lo - start, hi - start),) + box[axis + 1:]))
                start += sh[axis]
            return reads
        # Reshape-like, Slice, Pad, Gather...: the data input may be read
        # anywhere; small constant inputs (shapes, indices) are read whole.
        return super().reads(node, graph, box, in_shapes)

    def tile_bytes(self, node: Node, graph: Graph, box: Box, in_shapes: list) -> float:
        # Whatever the access regions over-approximate, a copy moves each
        # output element once in and once out.
        return 2.0 * box_size(box) * itemsize(graph, node.outputs[0])


class SplitFamily:
    """Split: one rTask per output, or a single rTask writing them all."""

    name = "split.outputs"
    op_types = frozenset(["Split"])

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        src = shape_of(graph, node.inputs[0])
        outs = cast("list[tuple[int, ...]]", [shape_of(graph, o) for o in node.outputs])  # None checked below
        if src is None or any(o is None for o in outs):
            return []
        axis = normalize_axis(int(node.attr("axis", 0)), len(src))
        starts = [0]
        for o in outs:
            starts.append(starts[-1] + o[axis])
        size = itemsize(graph, node.inputs[0])

        def piece(j: int) -> Box:
            return tuple((starts[j], starts[j + 1]) if a == axis else (0, d) for a, d in enumerate(src))

        def per_output(j: int) -> RTaskAccess:
            return RTaskAccess(((0, piece(j)),), ((j, whole(outs[j])),))

        def all_outputs(_: int) -> RTaskAccess:
            return RTaskAccess(((0, whole(src)),), tuple((j, whole(o)) for j, o in enumerate(outs)))

        biggest = max(math.prod(o) for o in outs)
        kernels = [make_kernel(self.name, {"per_output": False}, 1, vd, 0, 2 * math.prod(src) * size,
                               all_outputs, node, graph, work_items=math.prod(src))]
        if len(outs) > 1:
            kernels.append(make_kernel(self.name, {"per_output": True}, len(outs), vd, 0,
                                       2 * biggest * size, per_output, node, graph, work_items=biggest))
        return pareto(kernels, vd.num_veus, vd.veu)


# -- row-wise operators: softmax, normalizations, reductions ------------------

_REDUCE_OPS = frozenset(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"])
ROW_OPS = _REDUCE_OPS | frozenset(["Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "ArgMax",
                                   "ArgMin", "InstanceNormalization", "BatchNormalization"])


def reduced_axes(node: Node, graph: Graph, rank: int) -> tuple[int, ...] | None:
    """Axes an op reduces over (None when they cannot be read statically)."""
    op, opset = node.op_type, graph.opset.get("", 17)
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        if opset >= 13:
            return (normalize_axis(int(node.attr("axis", -1)), rank),)
        return tuple(range(normalize_axis(int(node.attr("axis", 1)), rank), rank))
    if op == "LayerNormalization":
        return tuple(range(normalize_axis(int(node.attr("axis", -1)), rank), rank))
    if op in ("ArgMax", "ArgMin"):
        return (normalize_axis(int(node.attr("axis", 0)), rank),)
    if op == "InstanceNormalization":
        return tuple(range(2, rank))
    if op == "BatchNormalization":
        return ()
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        const = graph.initializers.get(node.inputs[1])
        if const is None:
            return None
        axes = const.ravel().tolist()
    if not axes:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(normalize_axis(int(a), rank) for a in axes))


class RowFamily:
    """Tiles over the axes an op does not reduce; each rTask owns whole rows."""

    name = "rows.tile"
    op_types = ROW_OPS

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        src = shape_of(graph, node.inputs[0])
        outs = [shape_of(graph, o) for o in node.outputs if o]
        if src is None or not src or None in outs or math.prod(src) == 0:
            return []
        axes = reduced_axes(node, graph, len(src))
        if axes is None or (node.op_type == "BatchNormalization" and sum(1 for o in node.outputs if o) > 1):
            return []  # unknown axes; training-mode BatchNormalization also reduces to running stats
        kept = [a for a in range(len(src)) if a not in axes]
        row = math.prod(src[a] for a in axes)
        weight = 5.0 if node.op_type in ("Softmax", "LogSoftmax", "LayerNormalization",
                                         "InstanceNormalization") else 1.0
        kept_total = math.prod(src[a] for a in kept) if kept else 1
        blocks = {chunk_block(src, c, kept)
                  for c in chunk_sizes(kept_total, vd.num_veus, row * itemsize(graph, node.inputs[0]))}
        if not kept:
            blocks = {tuple(src)}
        out_names = [o for o in node.outputs]
        kernels = []
        for block in sorted(blocks):
            tiling = Tiling(tuple(src), block)

            def access(i: int, tiling: Tiling = tiling) -> RTaskAccess:
                box = tiling.box(i)
                return RTaskAccess(self._reads(node, graph, box), self._writes(graph, out_names, box, axes))

            acc = access(0)
            nbytes = sum(box_size(b) * itemsize(graph, node.inputs[s]) for s, b in acc.reads)
            nbytes += sum(box_size(b) * itemsize(graph, out_names[s]) for s, b in acc.writes)
            flops = box_size(tiling.box(0)) * weight
            kernels.append(make_kernel(self.name, {"block": list(block)}, tiling.count, vd, flops, nbytes,
                                       access, node, graph, work_items=box_size(tiling.box(0))))
        return pareto(kernels, vd.num_veus, vd.veu)

    @staticmethod
    def _reads(node: Node, graph: Graph, box: Box) -> tuple[tuple[int, Box], ...]:
        reads = [(0, box)]
        for s, name in enumerate(node.inputs[1:], start=1):
            sh = shape_of(graph, name)
            if sh is None:
                continue
            if node.op_type in ("BatchNormalization", "InstanceNormalization") and len(sh) == 1:
                reads.append((s, (box[1],)))  # per-channel parameters
            else:
                reads.append((s, whole(sh)))
        return tuple(reads)

    @staticmethod
    def _writes(graph: Graph, outs: list[str], box: Box, axes: tuple[int, ...]) -> tuple[tuple[int, Box], ...]:
        writes = []
        for s, name in enumerate(outs):
            sh = shape_of(graph, name)
            if not name or sh is None:
                continue
            if len(sh) == len(box):  # same rank: a reduced axis is whole (or kept as size 1)
                writes.append((s, tuple((0, d) if a in axes else b for a, (b, d) in enumerate(zip(box, sh)))))
            else:  # reduced axes dropped
                writes.append((s, tuple(b for a, b in enumerate(box) if a not in axes)))
        return tuple(writes)


# -- fallback ---------------------------------------------------------------

class WholeFamily:
    """Any operator as a single rTask, costed from its FLOPs and bytes."""

    name = "whole"
    op_types = None

    def candidates(self, node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
        return [make_kernel(self.name, {}, 1, vd, node_flops(node, graph), node_bytes(node, graph),
                            None, node, graph)]


WHOLE = WholeFamily()


def candidates_from(families: Sequence[RKernelFamily], node: Node, graph: Graph, vd: VDevice) -> list[RKernel]:
    """Every candidate the families offer for ``node``; the ``whole`` fallback
    when none applies."""
    found: list[RKernel] = []
    for family in families:
        if family.op_types is None or node.op_type in family.op_types:
            found.extend(family.candidates(node, graph, vd))
    return found or WHOLE.candidates(node, graph, vd)
