"""The cpu backend's view nodes and its strided-copy rKernel.

Which nodes only re-index memory, and the views of their outputs, are the core's
(:mod:`rammer.lower.aliasing`); where a reshape of a strided view cannot be expressed with strides,
the node becomes a copy op here (:func:`copy_op`, the strided-copy rKernel).
"""

from __future__ import annotations

import itertools

from rammer.ir import Node
from rammer.lower.aliasing import alias_outputs
from rammer.lower.views import View, collapse, to_rank4

from .lower_context import LowerContext
from .ops import ARENA_DTYPES, CpuOp, EmitContext, Row, split_range


def lower_view(lw: LowerContext, node: Node) -> None:
    src = lw.view(node.inputs[0])
    for name, v in alias_outputs(lw.graph, lw.opset, node, src).items():
        if v is None:  # a reshape that strides cannot express: a dense copy
            dst = lw.new_dense(src.dtype, lw.graph.value_info[name].shape)
            lw.add_op(copy_op(lw, node.name or node.op_type, (node,), src, dst.with_shape(src.shape)))
            v = dst
        lw.views[name] = v


# -- the strided copy op ------------------------------------------------------------

def copy_descriptors(src: View, dst: View) -> list[list[int]] | None:
    """Copy descriptors (without offsets resolved) covering src -> dst of equal shapes.

    Each is ``[esize, src_rel, s0..s3, dst_rel, t0..t3, d0..d3]`` with
    element offsets relative to the views' own offsets; more than 4 dims are
    cut into several 4-D descriptors over the leading indices.
    """
    esize = ARENA_DTYPES[src.dtype]
    shape, (sstr, dstr) = copy_loop_order(tuple(src.shape), tuple(src.strides), tuple(dst.strides))
    space = to_rank4(shape, [sstr, dstr])
    if space is not None:
        dims, (ss, ts) = space
        return [[esize, 0, *ss, 0, *ts, *dims]]
    lead = len(shape) - 4
    out = []
    for index in itertools.product(*(range(d) for d in shape[:lead])):
        so = sum(i * s for i, s in zip(index, sstr))
        to = sum(i * s for i, s in zip(index, dstr))
        out.append([esize, so, *sstr[lead:], to, *dstr[lead:], *shape[lead:]])
    return out


#: A copy whose innermost dim (after merging) has fewer elements than this walks another dim innermost
#: when one is at least twice as long and unit-strided on either side.
COPY_SHORT_ROW = 8


def copy_loop_order(shape: tuple[int, ...], src_strides: tuple[int, ...],
                    dst_strides: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The copy's dims (merged) with the one its rows run along last.

    ``k_copy`` runs a loop along the last dim per row of the others, so a short last dim costs a
    row's index stepping per few elements.  A transpose that interleaves channels into the last
    dim (a stride-2 ConvTranspose as a 1x1 conv + transpose ``[C, 2, 2, H, W] -> [C, H, 2, W, 2]``,
    DepthToSpace, NCHW -> NHWC with 3 channels) wrote 2-3 elements a row: 1.38 M floats of DBNet's
    head took 15.5 ms.  Any order of the dims copies the same elements, so the longest dim with a
    unit stride on either side (its reads or its writes sequential) runs innermost instead."""
    dims, (ss, ts) = collapse(shape, [src_strides, dst_strides])
    if not dims or dims[-1] >= COPY_SHORT_ROW:
        return dims, [ss, ts]
    best = -1
    for i in range(len(dims) - 1):
        if (ss[i] == 1 or ts[i] == 1) and dims[i] >= 2 * dims[-1] and (best < 0 or dims[i] > dims[best]):
            best = i
    if best < 0:
        return dims, [ss, ts]
    order = [i for i in range(len(dims)) if i != best] + [best]
    return collapse(tuple(dims[i] for i in order), [tuple(ss[i] for i in order), tuple(ts[i] for i in order)])


def copy_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], src: View, dst: View,
            family: str = "copy") -> CpuOp:
    """Copy ``src`` into ``dst`` (same shape, any strides)."""
    descs = copy_descriptors(src, dst)
    rows_per = [d[11] * d[12] * d[13] for d in descs]
    total_rows = sum(rows_per)
    nbytes = 2.0 * src.size * ARENA_DTYPES[src.dtype]

    def partition(n: int) -> list:
        """(descriptor, row0, row1) pieces; several descriptors give one rTask each."""
        if len(descs) > 1:
            return [(k, 0, rows_per[k]) for k in range(len(descs))]
        n = min(n, max(1, rows_per[0]))
        if n > 1 and src.size < 8192:
            return []
        return [(0,) + split_range(rows_per[0], n, i) for i in range(n)]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        offs = []
        for d in descs:
            d = list(d)
            d[1] += ctx.locate(src)
            d[6] += ctx.locate(dst)
            offs.append(ctx.side.add_ints(d))
        return [("k_copy", [offs[k], r0, r1]) for k, r0, r1 in parts]

    return CpuOp(name, family, nodes, (src.buffer,), (dst.buffer,), 0.0, nbytes, partition, emit,
                 extra={"rows": total_rows})


def multi_copy_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], pieces: list[tuple[View, View]],
                  family: str = "copy.many") -> CpuOp:
    """Several (src -> dst) copies as one rOperator; rTasks take runs of descriptors."""
    descs = [(src, dst, d) for src, dst in pieces for d in copy_descriptors(src, dst)]
    rows = [d[11] * d[12] * d[13] for _, _, d in descs]

    def partition(n: int) -> list:
        groups = min(n, len(descs))
        return [split_range(len(descs), groups, i) for i in range(groups)]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        offs = []
        for src, dst, d in descs:
            d = list(d)
            d[1] += ctx.locate(src)
            d[6] += ctx.locate(dst)
            offs.append(ctx.side.add_ints(d))
        out = []
        for lo, hi in parts:
            table = ctx.side.add_ints(offs[lo:hi] + rows[lo:hi])
            out.append(("k_copy_many", [table, hi - lo]))
        return out

    reads = tuple(sorted({src.buffer for src, _, _ in descs}))
    writes = tuple(sorted({dst.buffer for _, dst, _ in descs}))
    nbytes = 2.0 * sum(src.size * ARENA_DTYPES[src.dtype] for src, _ in pieces)
    return CpuOp(name, family, nodes, reads, writes, 0.0, nbytes, partition, emit)
