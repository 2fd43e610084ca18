"""Ops that only re-index memory, as strided views of their input's buffer (aliasing).

Identity, Dropout (inference), Reshape/Flatten/Squeeze/Unsqueeze (when the strides allow),
Transpose, Slice, Split, Expand and Gather with constant indices that form a range become
views (:class:`~.views.View`) of their input's buffer.  Where a reshape of a strided view cannot be
expressed with strides, :func:`alias_outputs` says so (None) and the backend inserts a copy.
"""

from __future__ import annotations

import numpy as np

from rammer.ir import Graph, Node

from .views import View, broadcast_view

VIEW_OPS = frozenset({"Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
                      "Split", "Expand", "Gather"})

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def is_view(graph: Graph, opset: int, node: Node) -> bool:
    """Whether ``node`` only re-indexes memory (its outputs are views of its first input)."""
    op = node.op_type
    if op not in VIEW_OPS:
        return False
    g = graph
    if op == "Dropout":
        # Inference: an identity.  A training_mode input that is not a constant false drops values.
        training = node.inputs[2] if len(node.inputs) > 2 else ""
        if training:
            flag = g.initializers.get(training)
            if flag is None or bool(np.asarray(flag).ravel()[0]):
                return False
        return len([o for o in node.outputs if o]) == 1
    if op == "Slice":
        if opset < 10:
            return True
        return all(not name or name in g.initializers for name in node.inputs[1:])
    if op == "Gather":
        idx = g.initializers.get(node.inputs[1])
        return idx is not None and gather_as_slice(idx, g.value_info[node.inputs[0]].shape,
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


def alias_outputs(graph: Graph, opset: int, node: Node, src: View) -> dict[str, View | None]:
    """The views of a view node's outputs over its input's view ``src``; a reshape that strides
    cannot express maps its output to None (the caller copies)."""
    g = graph
    op = node.op_type
    outs = [o for o in node.outputs if o]
    shape = g.value_info[outs[0]].shape
    views: dict[str, View | None] = {}
    if op in ("Identity", "Dropout"):
        views[outs[0]] = src
    elif op in RESHAPES:
        views[outs[0]] = reshape_view(src, shape)
    elif op == "Transpose":
        perm = node.attr("perm") or list(range(src.rank))[::-1]
        views[outs[0]] = View(src.buffer, src.dtype, tuple(src.shape[p] for p in perm),
                              tuple(src.strides[p] for p in perm), src.offset)
    elif op == "Expand":
        views[outs[0]] = broadcast_view(src, shape)
    elif op == "Split":
        axis = int(node.attr("axis", 0)) % src.rank
        start = 0
        for name in node.outputs:
            if not name:
                continue
            size = g.value_info[name].shape[axis]
            views[name] = narrow(src, axis, start, size, 1)
            start += size
    elif op == "Slice":
        views[outs[0]] = slice_view(graph, opset, node, src)
    elif op == "Gather":
        idx = g.initializers[node.inputs[1]]
        axis = int(node.attr("axis", 0)) % src.rank
        span = gather_as_slice(idx, src.shape, axis)
        assert span is not None, "only Gathers whose indices are a range are aliased"
        start, count, step = span
        v = narrow(src, axis, start, count, step)
        if idx.ndim == 0:
            v = View(v.buffer, v.dtype, v.shape[:axis] + v.shape[axis + 1:], v.strides[:axis] + v.strides[axis + 1:],
                     v.offset)
        views[outs[0]] = v
    else:
        raise ValueError(f"{node.label}: {op} is not a view op")
    for name, v in views.items():
        if v is not None and v.shape != g.value_info[name].shape:
            raise AssertionError(f"{node.label}: view shape {v.shape} != {g.value_info[name].shape}")
    return views


def narrow(v: View, axis: int, start: int, count: int, step: int) -> View:
    """``v`` restricted to ``count`` indices from ``start`` by ``step`` along ``axis``."""
    shape = list(v.shape)
    strides = list(v.strides)
    offset = v.offset + start * strides[axis]
    shape[axis] = count
    strides[axis] = strides[axis] * step
    return View(v.buffer, v.dtype, tuple(shape), tuple(strides), offset)


def gather_as_slice(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> tuple[int, int, int] | None:
    """Constant Gather indices along ``axis`` as (start, count, step), or None if they are no range."""
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


def slice_view(graph: Graph, opset: int, node: Node, v: View) -> View:
    """``v`` sliced as the Slice node says (constant starts/ends/axes/steps, or opset < 10 attributes)."""
    g = graph
    rank = v.rank
    if opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", list(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        def const(i: int, default: list[int] | None) -> list[int] | None:
            if i < len(node.inputs) and node.inputs[i]:
                return [int(x) for x in g.initializers[node.inputs[i]].ravel()]
            return default

        starts, ends = const(1, None), const(2, None)
        assert starts is not None and ends is not None, "Slice-10 requires its starts and ends inputs"
        axes = const(3, list(range(len(starts))))
        steps = const(4, [1] * len(starts))
        assert axes is not None and steps is not None  # const() returns its default when they are absent
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= rank
        dim = v.shape[a]
        # ONNX clamps like Python slicing (with its huge sentinels).
        s = max(min(s, 2**62), -(2**62))
        e = max(min(e, 2**62), -(2**62))
        lo, hi, step = slice(s, e, st).indices(dim)
        count = len(range(lo, hi, step))
        v = narrow(v, a, lo if count else 0, count, step if count else 1)
    return v
