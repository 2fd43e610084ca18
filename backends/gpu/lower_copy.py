"""Data movement as strided copies (Slice, Split, Concat, Transpose, Pad (edge, reflect and wrap as a
strided view per box around the input), Reshape, Gather of
constant indices in strided order...): the view is derived from rammer's own reference implementation
run on index arrays and checked against that index map element by element, so a view this module gets
wrong is refused (``ValueError``), never run."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from rammer.ir import Graph, Node

from . import kernels_model as km
from .lower_types import (
    BIG,
    Lowered,
    Ref,
    chunks,
    pad6,
    reference_outputs,
    row_major_strides,
    shape_of,
    template,
)

__all__ = ["lower_copy", "strided_index"]


@dataclass(frozen=True)
class _View:
    """One copy: over extents ``dims``, source coordinate k + st, valid below se, source index
    ``src_base + ss . s`` and destination ``dst_base + ds . k``."""

    in_slot: int
    out_slot: int
    dims: tuple[int, ...]
    ss: tuple[int, ...]
    ds: tuple[int, ...]
    st: tuple[int, ...]
    se: tuple[int, ...]
    src_base: int
    dst_base: int


def separable(dims: tuple[int, ...], base: np.ndarray, terms: list[np.ndarray], combine: Any) -> np.ndarray:
    """The array over ``dims`` whose element at ``k`` is ``combine`` of ``base`` and ``terms[d][k_d]``
    over every axis ``d``, built one axis at a time by broadcasting: a copy's index map is checked
    element by element, and an ``np.indices`` grid per axis cost seconds on batched models."""
    out = base
    for term in terms:
        out = combine(out[..., None], term)
    return out.reshape(dims)


def strided_index(base: int, strides: list[int] | tuple[int, ...], dims: tuple[int, ...],
                  dtype: type[np.signedinteger] = np.int64) -> np.ndarray:
    """``base + strides . k`` for every coordinate ``k`` of ``dims`` (in ``dtype``; int64 wherever a
    value could leave int32)."""
    reach = abs(base) + sum(abs(s) * max(d - 1, 0) for d, s in zip(dims, strides))
    if reach >= 2 ** 31:
        dtype = np.int64
    return separable(dims, np.array(base, dtype),
                     [np.arange(d, dtype=dtype) * dtype(s) for d, s in zip(dims, strides)], np.add)


def _index_dtype(size: int) -> type[np.signedinteger]:
    """int32 for the index maps of a copy of ``size`` elements where they fit: the maps of a batched
    model's concatenations are tens of millions of elements, and half the bytes is half the time."""
    return np.int32 if size < 2 ** 31 - 1 else np.int64


def _affine(index: np.ndarray) -> tuple[int, list[int]]:
    """``index`` (an n-d array of flat positions) as base + strides . coords; ValueError if not."""
    if index.size == 0:
        return 0, [0] * index.ndim
    base = int(index.flat[0])
    strides = []
    for d in range(index.ndim):
        unit = [0] * index.ndim
        if index.shape[d] > 1:
            unit[d] = 1
            strides.append(int(index[tuple(unit)]) - base)
        else:
            strides.append(0)
    if not np.array_equal(strided_index(base, strides, tuple(index.shape), index.dtype.type), index):
        raise ValueError("its data movement is not a strided view")
    return base, strides


def _gather_view(src: np.ndarray, valid: np.ndarray, in_shape: tuple[int, ...], in_slot: int,
                 out_slot: int) -> _View:
    """The view producing ``out[k] = valid ? x[src[k]] : pad``, checked element by element."""
    dims = tuple(src.shape)
    if valid.all():
        base, ss = _affine(src)  # checks every element against the view
        return _View(in_slot, out_slot, dims, tuple(ss), tuple(row_major_strides(dims)), (0,) * len(dims),
                     (BIG,) * len(dims), base, 0)
    if len(in_shape) != len(dims) or not valid.any():
        raise ValueError("its padding is not a box around the input")
    p = np.unravel_index(int(np.argmax(valid)), dims)
    s = np.unravel_index(int(src[p]), in_shape)
    view = _View(in_slot, out_slot, dims, tuple(row_major_strides(in_shape)), tuple(row_major_strides(dims)),
                 tuple(int(a) - int(b) for a, b in zip(s, p)), tuple(in_shape), 0, 0)
    # Check the view against the reference's index map: source coordinate k + st, valid in [0, se).
    coords = [np.arange(d, dtype=np.int64) + st for d, st in zip(dims, view.st)]
    ok = separable(dims, np.array(True), [(a >= 0) & (a < se) for a, se in zip(coords, view.se)], np.logical_and)
    idx = separable(dims, np.array(view.src_base, np.int64), [a * ssd for a, ssd in zip(coords, view.ss)], np.add)
    if not (np.array_equal(ok, valid) and np.array_equal(idx[ok], src[ok])):
        raise ValueError("its data movement is not a strided, box-padded view (e.g. edge or reflect padding)")
    return view


def _frozen(value: Any) -> Any:
    """``value`` (an attribute or a constant input) as a hashable key; TypeError where it has none."""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        value = np.asarray(value)
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(map(_frozen, value))
    hash(value)
    return value


def _views_key(node: Node, graph: Graph) -> tuple | None:
    """What :func:`_derive_views` reads of ``node`` and ``graph`` (None where some attribute is not
    hashable): the op, its opset, attributes, each input's shape and dtype and, for a constant
    input, its value, and which outputs are named."""
    try:
        attrs = tuple(sorted((k, _frozen(v)) for k, v in node.attrs.items()))
        inputs = tuple((n, None) if not n else
                       (graph.value_info[n].shape, graph.value_info[n].dtype,
                        _frozen(np.asarray(graph.initializers[n])) if n in graph.initializers else None)
                       for n in node.inputs)
    except TypeError:
        return None
    return (node.op_type, node.domain, graph.opset.get(node.domain, 1), attrs, inputs,
            tuple(bool(n) for n in node.outputs))


#: Views already derived, by :func:`_views_key`: an unrolled RNN has thousands of copies of a few
#: kinds (the same Slice of each step's gates), each derived by running the reference op on index
#: arrays (a third of compiling conv-bilstm-asr-b8).  Bounded: cleared when full.
_VIEW_MEMO: dict[tuple, tuple[_View, ...]] = {}
_VIEW_MEMO_SIZE = 4096


def _views(node: Node, graph: Graph) -> list[_View]:
    key = _views_key(node, graph)
    if key is None:
        return _derive_views(node, graph)
    hit = _VIEW_MEMO.get(key)
    if hit is None:
        if len(_VIEW_MEMO) >= _VIEW_MEMO_SIZE:
            _VIEW_MEMO.clear()
        hit = _VIEW_MEMO[key] = tuple(_derive_views(node, graph))
    return list(hit)


def _concat_views(node: Node, graph: Graph) -> list[_View] | None:
    """A Concat's views from its shapes: input ``i`` lands at ``offset_i`` along the axis of the
    output, with the output's row-major strides (0 on a dimension of one element, as :func:`_affine`
    reads them); None where the shapes do not say so (the index maps then decide).  The maps of a
    batched model's concatenations are tens of millions of elements, run through the reference op."""
    out_shape = tuple(shape_of(graph, node.outputs[0]))
    axis = int(node.attrs.get("axis", 0))
    axis = axis + len(out_shape) if axis < 0 else axis
    ins = [(i, tuple(shape_of(graph, n))) for i, n in enumerate(node.inputs) if n]
    if not 0 <= axis < len(out_shape) or any(len(s) != len(out_shape) for _, s in ins):
        return None
    if any(s[:axis] + s[axis + 1:] != out_shape[:axis] + out_shape[axis + 1:] for _, s in ins) or \
            sum(s[axis] for _, s in ins) != out_shape[axis]:
        return None
    out_strides = row_major_strides(out_shape)
    views, along = [], 0
    for i, shape in ins:
        empty = int(np.prod(shape)) == 0
        base = 0 if empty else along * out_strides[axis]
        ds = tuple(0 if empty or shape[d] <= 1 else int(out_strides[d]) for d in range(len(shape)))
        views.append(_View(i, 0, shape, tuple(row_major_strides(shape)), ds, (0,) * len(shape),
                           (BIG,) * len(shape), 0, base))
        along += shape[axis]
    return views


def _derive_views(node: Node, graph: Graph) -> list[_View]:
    op = node.op_type
    if op == "Concat":
        by_shapes = _concat_views(node, graph)
        if by_shapes is not None:
            return by_shapes
        return _concat_views_by_index_maps(node, graph)
    in_shape = shape_of(graph, node.inputs[0])
    arrays = {0: (np.arange(int(np.prod(in_shape)), dtype=np.float64) + 1).reshape(in_shape)}
    if op == "Pad":
        if len(node.inputs) > 2 and node.inputs[2]:
            arrays[2] = np.zeros((), np.float64)
        mode = node.attrs.get("mode", "constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode != "constant":
            return _box_views(reference_outputs(node, graph, arrays)[0], _pad_regions(node, graph, in_shape))
    outs = reference_outputs(node, graph, arrays)
    views = []
    for k, (name, out) in enumerate(zip(node.outputs, outs)):
        if name and not (op == "Dropout" and k > 0):  # Dropout's mask: unread (_copy refuses otherwise)
            valid = out != 0
            views.append(_gather_view(out.astype(np.int64) - 1, valid, in_shape, 0, k))
    return views


def _pad_regions(node: Node, graph: Graph, in_shape: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    """Per output axis of a Pad, the ranges before, over and after the input's (begin pads > 0, end
    pads > 0): in each box of their product an edge, reflect or wrap pad reads a strided view."""
    rank = len(in_shape)
    if graph.opset.get("", 1) < 11:
        pads = [int(p) for p in node.attrs.get("pads", [0] * 2 * rank)]
        axes = list(range(rank))
    else:
        pads_value = graph.initializers.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if pads_value is None:
            raise ValueError("its pads are computed at run time")
        pads = [int(p) for p in np.asarray(pads_value).ravel()]
        axes_value = graph.initializers.get(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
        axes = [int(a) % rank for a in np.asarray(axes_value).ravel()] if axes_value is not None else list(range(rank))
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    regions = []
    for d in range(rank):
        size = in_shape[d] + begin[d] + end[d]
        cuts = sorted({0, max(begin[d], 0), size - max(end[d], 0), size})
        regions.append([(a, b) for a, b in zip(cuts, cuts[1:]) if b > a])
    return regions


def _box_views(index: np.ndarray, regions: list[list[tuple[int, int]]]) -> list[_View]:
    """Views of a copy whose index map (``index``: element numbers + 1 of the input) is strided in each
    box of ``regions``' product (each checked element by element by :func:`_affine`)."""
    if not (index > 0).all():
        raise ValueError("its data movement reads no input element for some output")
    out_strides = row_major_strides(index.shape)
    views = []
    for box in np.ndindex(*[len(r) for r in regions]):
        ranges = [regions[d][i] for d, i in enumerate(box)]
        part = index[tuple(slice(a, b) for a, b in ranges)].astype(np.int64) - 1
        base, ss = _affine(part)
        dst = sum(a * st for (a, _), st in zip(ranges, out_strides))
        views.append(_View(0, 0, tuple(part.shape), tuple(ss), tuple(out_strides), (0,) * part.ndim,
                           (BIG,) * part.ndim, base, int(dst)))
    return views


def _concat_views_by_index_maps(node: Node, graph: Graph) -> list[_View]:
    """A Concat's views found by running the reference op on its inputs' element numbers."""
    ins = [(i, n) for i, n in enumerate(node.inputs) if n]
    dtype = _index_dtype(sum(int(np.prod(shape_of(graph, n))) for _, n in ins))
    arrays, offs, off = {}, [], 0
    for i, n in ins:  # each input's elements numbered by their position in the inputs, in turn
        size = int(np.prod(shape_of(graph, n)))
        arrays[i] = np.arange(off, off + size, dtype=dtype).reshape(shape_of(graph, n))
        offs.append(off)
        off += size
    out = reference_outputs(node, graph, arrays)[0]
    if out.dtype != dtype or out.size != off:
        raise ValueError("its reference did not move the elements of its inputs")
    pos = np.empty(out.size, dtype)
    pos[out.ravel()] = np.arange(out.size, dtype=dtype)
    views = []
    for (i, n), o in zip(ins, offs):
        shape = shape_of(graph, n)
        dst = pos[o:o + int(np.prod(shape))].reshape(shape)
        base, ds = _affine(dst)
        views.append(_View(i, 0, shape, tuple(row_major_strides(shape)), tuple(ds), (0,) * len(shape),
                           (BIG,) * len(shape), 0, base))
    return views


def _pad_value(node: Node, graph: Graph) -> float:
    if node.op_type != "Pad":
        return 0.0
    if graph.opset.get("", 1) < 11:
        return float(node.attrs.get("value", 0.0))
    if len(node.inputs) > 2 and node.inputs[2]:
        value = graph.initializers.get(node.inputs[2])
        if value is None:
            raise ValueError("its constant_value is computed at run time")
        return float(np.asarray(value).ravel()[0]) if value.size else 0.0
    return 0.0


def lower_copy(node: Node, graph: Graph, mult: int) -> Lowered:
    if node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1] and (
            graph.consumers.get(node.outputs[1]) or node.outputs[1] in {t.name for t in graph.outputs}):
        raise ValueError("its mask output is read (inference Dropout is a copy; its mask is not written)")
    for i, n in enumerate(node.inputs):
        if n and i > 0 and node.op_type != "Concat" and n not in graph.initializers:
            raise ValueError(f"its input '{n}' is computed at run time; it must be a constant")
    pv = _pad_value(node, graph)
    chunk = 256 * mult
    calls = []
    for view in _views(node, graph):
        total = int(np.prod(view.dims))
        args = (Ref("in", view.in_slot, view.src_base), Ref("out", view.out_slot, view.dst_base), total, chunk,
                *pad6(list(view.dims), 1)[1:], *pad6(list(view.ss), 0), *pad6(list(view.ds), 0),
                *pad6(list(view.st), 0), *pad6(list(view.se), BIG), pv)
        calls += zip(range(chunks(total, chunk)), repeat(args))
    if not calls:  # nothing to move (an empty tensor): one rTask that does nothing
        calls = [(0, (Ref("in", 0), Ref("out", 0), 0, chunk, *[1] * 5, *[0] * 18, *[BIG] * 6, pv))]
    return Lowered(template(km.copy_nd, "copy_nd"), tuple(calls), 0.0, 8.0 * chunk)
