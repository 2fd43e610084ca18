"""Ops that only re-index memory: strided views instead of copies.

Identity, Dropout (inference), Reshape/Flatten/Squeeze/Unsqueeze (when the
strides allow), Transpose, Slice, Split, Expand and Gather with constant
indices that form a range become views of their input's buffer.  Where a
reshape of a strided view cannot be expressed with strides, the node becomes
a copy op (:func:`copy_op`, the strided-copy rKernel).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from rammer.ir import Node

from .ops import CpuOp, EmitContext, Row, split_range
from .views import ARENA_DTYPES, View, broadcast_view, dense_strides, to_rank4

if TYPE_CHECKING:  # pragma: no cover
    from .lowering import Lowerer

VIEW_OPS = frozenset({"Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
                      "Split", "Expand", "Gather"})


def is_view(lw: Lowerer, node: Node) -> bool:
    op = node.op_type
    if op not in VIEW_OPS:
        return False
    g = lw.graph
    if op == "Dropout":
        # Inference: an identity.  A training_mode input that is not a constant false drops values.
        training = node.inputs[2] if len(node.inputs) > 2 else ""
        if training:
            flag = g.initializers.get(training)
            if flag is None or bool(np.asarray(flag).ravel()[0]):
                return False
        return len([o for o in node.outputs if o]) == 1
    if op == "Slice":
        if lw.opset < 10:
            return True
        return all(not name or name in g.initializers for name in node.inputs[1:])
    if op == "Gather":
        idx = g.initializers.get(node.inputs[1])
        return idx is not None and _gather_as_slice(idx, g.value_info[node.inputs[0]].shape,
                                                    int(node.attr("axis", 0))) is not None
    return True


def reshape_view(view: View, shape: tuple[int, ...]) -> View | None:
    """``view`` reshaped to ``shape`` without copying, if its strides allow (numpy's rule)."""
    if view.is_dense():
        return view.with_shape(shape)
    old = [(d, s) for d, s in zip(view.shape, view.strides) if d != 1]
    new_dims = [d for d in shape if d != 1]
    new_strides: list[int] = []
    i = j = 0
    while i < len(old) and j < len(new_dims):
        # Grow matching groups of old and new dims with equal products.
        oi, nj = i + 1, j + 1
        po, pn = old[i][0], new_dims[j]
        while po != pn:
            if po < pn:
                po *= old[oi][0]
                oi += 1
            else:
                pn *= new_dims[nj]
                nj += 1
        # The old group must be contiguous within itself.
        for k in range(i, oi - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[oi - 1][1]
        group = []
        for k in range(nj - 1, j - 1, -1):
            group.append(stride)
            stride *= new_dims[k]
        new_strides.extend(reversed(group))
        i, j = oi, nj
    it = iter(new_strides)
    strides = tuple(0 if d == 1 else next(it) for d in shape)
    return View(view.buffer, view.dtype, tuple(shape), strides, view.offset)


def lower_view(lw: Lowerer, node: Node) -> None:
    g = lw.graph
    op = node.op_type
    src = lw.view(node.inputs[0])
    outs = [o for o in node.outputs if o]
    shape = g.value_info[outs[0]].shape
    if op in ("Identity", "Dropout"):
        lw.views[outs[0]] = src
    elif op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
        v = reshape_view(src, shape)
        if v is None:
            dst = lw.new_dense(src.dtype, shape)
            lw.add_op(copy_op(lw, node.name or op, (node,), src, dst.with_shape(src.shape)))
            v = dst
        lw.views[outs[0]] = v
    elif op == "Transpose":
        perm = node.attr("perm") or list(range(src.rank))[::-1]
        lw.views[outs[0]] = View(src.buffer, src.dtype, tuple(src.shape[p] for p in perm),
                                 tuple(src.strides[p] for p in perm), src.offset)
    elif op == "Expand":
        lw.views[outs[0]] = broadcast_view(src, shape)
    elif op == "Split":
        axis = int(node.attr("axis", 0)) % src.rank
        start = 0
        for name in node.outputs:
            if not name:
                continue
            size = g.value_info[name].shape[axis]
            lw.views[name] = _narrow(src, axis, start, size, 1)
            start += size
    elif op == "Slice":
        lw.views[outs[0]] = _slice(lw, node, src)
    elif op == "Gather":
        idx = g.initializers[node.inputs[1]]
        axis = int(node.attr("axis", 0)) % src.rank
        start, count, step = _gather_as_slice(idx, src.shape, axis)
        v = _narrow(src, axis, start, count, step)
        if idx.ndim == 0:
            v = View(v.buffer, v.dtype, v.shape[:axis] + v.shape[axis + 1:], v.strides[:axis] + v.strides[axis + 1:],
                     v.offset)
        lw.views[outs[0]] = v
    else:  # pragma: no cover - is_view guards
        raise AssertionError(op)
    for name in outs:
        if lw.views[name].shape != g.value_info[name].shape:
            raise AssertionError(f"{node.label}: view shape {lw.views[name].shape} != {g.value_info[name].shape}")


def _narrow(v: View, axis: int, start: int, count: int, step: int) -> View:
    shape = list(v.shape)
    strides = list(v.strides)
    offset = v.offset + start * strides[axis]
    shape[axis] = count
    strides[axis] = strides[axis] * step
    return View(v.buffer, v.dtype, tuple(shape), tuple(strides), offset)


def _gather_as_slice(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> tuple[int, int, int] | None:
    if axis < -len(shape) or axis >= len(shape) or idx.ndim > 1 or idx.dtype.kind not in "iu":
        return None
    dim = shape[axis % len(shape)]
    flat = idx.astype(np.int64).ravel()
    flat = np.where(flat < 0, flat + dim, flat)
    if flat.size == 0 or flat.min() < 0 or flat.max() >= dim:
        return None
    if flat.size == 1:
        return int(flat[0]), 1, 1
    step = int(flat[1] - flat[0])
    if step == 0 or not np.all(np.diff(flat) == step):
        return None
    return int(flat[0]), int(flat.size), step


def _slice(lw: Lowerer, node: Node, v: View) -> View:
    g = lw.graph
    rank = v.rank
    if lw.opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", list(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        def const(i: int, default: list[int] | None) -> list[int] | None:
            if i < len(node.inputs) and node.inputs[i]:
                return [int(x) for x in g.initializers[node.inputs[i]].ravel()]
            return default

        starts, ends = const(1, None), const(2, None)
        axes = const(3, list(range(len(starts))))
        steps = const(4, [1] * len(starts))
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= rank
        dim = v.shape[a]
        # ONNX clamps like Python slicing (with its huge sentinels).
        s = max(min(s, 2**62), -(2**62))
        e = max(min(e, 2**62), -(2**62))
        lo, hi, step = slice(s, e, st).indices(dim)
        count = len(range(lo, hi, step))
        v = _narrow(v, a, lo if count else 0, count, step if count else 1)
    return v


# -- the strided copy op ------------------------------------------------------------

def copy_descriptors(src: View, dst: View) -> list[list[int]] | None:
    """Copy descriptors (without offsets resolved) covering src -> dst of equal shapes.

    Each is ``[esize, src_rel, s0..s3, dst_rel, t0..t3, d0..d3]`` with
    element offsets relative to the views' own offsets; more than 4 dims are
    cut into several 4-D descriptors over the leading indices.
    """
    esize = ARENA_DTYPES[src.dtype]
    shape = src.shape
    space = to_rank4(shape, [src.strides, dst.strides])
    if space is not None:
        dims, (ss, ts) = space
        return [[esize, 0, *ss, 0, *ts, *dims]]
    lead = len(shape) - 4
    out = []
    for index in itertools.product(*(range(d) for d in shape[:lead])):
        so = sum(i * s for i, s in zip(index, src.strides))
        to = sum(i * s for i, s in zip(index, dst.strides))
        out.append([esize, so, *src.strides[lead:], to, *dst.strides[lead:], *shape[lead:]])
    return out


def copy_op(lw: Lowerer, name: str, nodes: tuple[Node, ...], src: View, dst: View,
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


def multi_copy_op(lw: Lowerer, name: str, nodes: tuple[Node, ...], pieces: list[tuple[View, View]],
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
