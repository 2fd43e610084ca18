"""Shape-manipulation ops: Reshape, Transpose, Concat, Split, Pad, Shape...

These ops decide the static shapes of exported models, so their ``infer``
functions are exact: wherever an input's *value* decides the output shape
(Reshape's ``shape``, Split's ``split``, Pad's ``pads``...), they read it with
``ctx.const(i)``, which names the node when the value is only known at run
time.  Ops that moved an attribute to an input across opsets (Squeeze/Unsqueeze
axes and Split sizes in opset 13, Pad pads in opset 11) accept both forms:
the input wins when the node has it, otherwise the attribute is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..dtypes import from_onnx
from .registry import OpContext, OutSpec, broadcast_shapes, normalize_axis, register_op


def int_list(values: np.ndarray | Sequence[int] | None) -> list[int]:
    """A tensor or attribute of integers as a flat list of Python ints."""
    if values is None:
        return []
    return [int(v) for v in np.asarray(values).reshape(-1)]


def axes_operand(ctx: OpContext, index: int, attr: str = "axes") -> list[int] | None:
    """Axes given as input ``index`` (newer opsets) or as an attribute (older ones)."""
    if ctx.has_input(index):
        return int_list(ctx.const(index, attr))
    value = ctx.attr(attr)
    return None if value is None else int_list(value)


def _axes_from_array(ctx: OpContext, array: np.ndarray | None, index: int, attr: str = "axes") -> list[int] | None:
    """Compute-time twin of :func:`axes_operand` (the array is already at hand)."""
    if ctx.has_input(index) and array is not None:
        return int_list(array)
    value = ctx.attr(attr)
    return None if value is None else int_list(value)


def _input(ctx: OpContext, i: int = 0):
    info = ctx.inputs[i]
    if info is None:
        raise ctx.fail(f"input {i} is required")
    return info


# -- Reshape / Flatten / Transpose ------------------------------------------


def reshape_target(ctx: OpContext, in_shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    """Resolve Reshape's 0 (copy the input dim, unless allowzero) and -1 (infer)."""
    allowzero = int(ctx.attr("allowzero", 0))
    out: list[int] = []
    unknown = None
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.fail(f"shape {target} copies dim {i} (0) but the input has rank {len(in_shape)}")
            out.append(in_shape[i])
        elif d == -1:
            if unknown is not None:
                raise ctx.fail(f"shape {target} has more than one -1")
            unknown = i
            out.append(1)
        elif d < 0:
            raise ctx.fail(f"shape {target} has an invalid dimension {d}")
        else:
            out.append(d)
    total = math.prod(in_shape)
    if unknown is not None:
        known = math.prod(out)
        if known == 0 or total % known:
            raise ctx.fail(f"cannot reshape {list(in_shape)} to {target}: -1 cannot be inferred")
        out[unknown] = total // known
    elif math.prod(out) != total:
        raise ctx.fail(f"cannot reshape {list(in_shape)} ({total} elements) to {out}")
    return tuple(out)


def _reshape_shape_operand(ctx: OpContext, array: np.ndarray | None) -> list[int]:
    if ctx.has_input(1):
        return int_list(array)
    return int_list(ctx.attr("shape"))  # opset < 5 attribute form


def _infer_reshape(ctx: OpContext) -> list[OutSpec]:
    x = _input(ctx)
    target = int_list(ctx.const(1, "shape")) if ctx.has_input(1) else int_list(ctx.attr("shape"))
    return [(x.dtype, reshape_target(ctx, x.shape, target))]


@register_op("Reshape", infer=_infer_reshape)
def reshape(ctx: OpContext, x: np.ndarray, shape: np.ndarray | None = None) -> np.ndarray:
    return x.reshape(reshape_target(ctx, x.shape, _reshape_shape_operand(ctx, shape)))


def _flatten_shape(ctx: OpContext, shape: tuple[int, ...]) -> tuple[int, int]:
    rank = len(shape)
    axis = int(ctx.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return (math.prod(shape[:axis]), math.prod(shape[axis:]))


@register_op("Flatten", infer=lambda ctx: [(_input(ctx).dtype, _flatten_shape(ctx, _input(ctx).shape))])
def flatten(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return x.reshape(_flatten_shape(ctx, x.shape))


def _perm(ctx: OpContext, rank: int) -> list[int]:
    perm = ctx.attr("perm")
    if perm is None:
        return list(range(rank))[::-1]
    perm = [normalize_axis(ctx, p, rank) for p in int_list(perm)]
    if sorted(perm) != list(range(rank)):
        raise ctx.fail(f"perm {int_list(ctx.attr('perm'))} is not a permutation of {rank} axes")
    return perm


def _infer_transpose(ctx: OpContext) -> list[OutSpec]:
    x = _input(ctx)
    return [(x.dtype, tuple(x.shape[p] for p in _perm(ctx, len(x.shape))))]


@register_op("Transpose", infer=_infer_transpose)
def transpose(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.transpose(x, _perm(ctx, x.ndim))


# -- Squeeze / Unsqueeze --------------------------------------------------------


def _squeeze_shape(ctx: OpContext, shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    rank = len(shape)
    if axes is None:
        return tuple(d for d in shape if d != 1)
    drop = {normalize_axis(ctx, a, rank) for a in axes}
    for a in drop:
        if shape[a] != 1:
            raise ctx.fail(f"cannot squeeze axis {a} of shape {list(shape)}: its size is {shape[a]}, not 1")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


@register_op("Squeeze",
             infer=lambda ctx: [(_input(ctx).dtype, _squeeze_shape(ctx, _input(ctx).shape, axes_operand(ctx, 1)))])
def squeeze(ctx: OpContext, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return x.reshape(_squeeze_shape(ctx, x.shape, _axes_from_array(ctx, axes, 1)))


def _unsqueeze_shape(ctx: OpContext, shape: tuple[int, ...], axes: list[int] | None) -> tuple[int, ...]:
    if not axes:
        raise ctx.fail("Unsqueeze needs axes")
    out_rank = len(shape) + len(axes)
    where = {normalize_axis(ctx, a, out_rank) for a in axes}
    if len(where) != len(axes):
        raise ctx.fail(f"axes {axes} repeat an axis")
    dims = iter(shape)
    return tuple(1 if i in where else next(dims) for i in range(out_rank))


@register_op("Unsqueeze",
             infer=lambda ctx: [(_input(ctx).dtype, _unsqueeze_shape(ctx, _input(ctx).shape, axes_operand(ctx, 1)))])
def unsqueeze(ctx: OpContext, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return x.reshape(_unsqueeze_shape(ctx, x.shape, _axes_from_array(ctx, axes, 1)))


# -- Concat / Split -------------------------------------------------------------


def _infer_concat(ctx: OpContext) -> list[OutSpec]:
    infos = [t for t in ctx.inputs if t is not None]
    if not infos:
        raise ctx.fail("Concat needs at least one input")
    rank = len(infos[0].shape)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), rank)
    for t in infos:
        if t.dtype != infos[0].dtype:
            raise ctx.fail(f"inputs mix dtypes {infos[0].dtype} and {t.dtype}")
        if len(t.shape) != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, infos[0].shape)) if i != axis):
            raise ctx.fail(f"input shapes {[list(t.shape) for t in infos]} do not agree off axis {axis}")
    shape = list(infos[0].shape)
    shape[axis] = sum(t.shape[axis] for t in infos)
    return [(infos[0].dtype, tuple(shape))]


@register_op("Concat", infer=_infer_concat)
def concat(ctx: OpContext, *xs: np.ndarray | None) -> np.ndarray:
    arrays = [x for x in xs if x is not None]
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), arrays[0].ndim)
    return np.concatenate(arrays, axis=axis)


def split_sizes(ctx: OpContext, dim: int, split: list[int] | None, n_outputs: int) -> list[int]:
    """Chunk sizes of Split: explicit sizes, ``num_outputs`` (opset 18), or equal parts."""
    if split is not None and len(split) > 0:
        if len(split) != n_outputs or sum(split) != dim or min(split) < 0:
            raise ctx.fail(f"split {split} does not divide a dimension of {dim} into {n_outputs} outputs")
        return split
    num = ctx.attr("num_outputs")
    if num is not None:
        if int(num) != n_outputs:
            raise ctx.fail(f"num_outputs={num} but the node has {n_outputs} outputs")
        # Opset 18: chunks of ceil(dim / n); the last one takes what is left.
        chunk = -(-dim // n_outputs)
        sizes = [min(chunk, max(dim - chunk * i, 0)) for i in range(n_outputs)]
        return sizes
    if dim % n_outputs:
        raise ctx.fail(f"a dimension of {dim} does not split evenly into {n_outputs} outputs")
    return [dim // n_outputs] * n_outputs


def _split_operand(ctx: OpContext, array: np.ndarray | None, infer: bool) -> list[int] | None:
    if ctx.has_input(1):
        return int_list(ctx.const(1, "split") if infer else array)
    value = ctx.attr("split")
    return None if value is None else int_list(value)


def _infer_split(ctx: OpContext) -> list[OutSpec]:
    x = _input(ctx)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(x.shape))
    sizes = split_sizes(ctx, x.shape[axis], _split_operand(ctx, None, True), len(ctx.node.outputs))
    return [(x.dtype, x.shape[:axis] + (s,) + x.shape[axis + 1 :]) for s in sizes]


@register_op("Split", infer=_infer_split)
def split(ctx: OpContext, x: np.ndarray, sizes: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), x.ndim)
    chunks = split_sizes(ctx, x.shape[axis], _split_operand(ctx, sizes, False), len(ctx.node.outputs))
    return tuple(np.split(x, np.cumsum(chunks)[:-1], axis=axis))


# -- Expand / Tile / Pad ----------------------------------------------------------


def _infer_expand(ctx: OpContext) -> list[OutSpec]:
    x = _input(ctx)
    return [(x.dtype, broadcast_shapes(ctx, [x.shape, tuple(int_list(ctx.const(1, "shape")))]))]


@register_op("Expand", infer=_infer_expand)
def expand(ctx: OpContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    out_shape = broadcast_shapes(ctx, [x.shape, tuple(int_list(shape))])
    return np.broadcast_to(x, out_shape).copy()


def _tile_shape(ctx: OpContext, shape: tuple[int, ...], repeats: list[int]) -> tuple[int, ...]:
    if len(repeats) != len(shape) or min(repeats, default=0) < 0:
        raise ctx.fail(f"repeats {repeats} must hold one non-negative count per axis of {list(shape)}")
    return tuple(d * r for d, r in zip(shape, repeats))


@register_op("Tile",
             infer=lambda ctx: [(_input(ctx).dtype,
                                 _tile_shape(ctx, _input(ctx).shape, int_list(ctx.const(1, "repeats"))))])
def tile(ctx: OpContext, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    counts = int_list(repeats)
    _tile_shape(ctx, x.shape, counts)
    return np.tile(x, counts)


def _pad_widths(ctx: OpContext, rank: int, pads: list[int], axes: list[int] | None) -> list[tuple[int, int]]:
    """(before, after) per axis from ONNX's [x1_begin, x2_begin, ..., x1_end, ...]."""
    axes = list(range(rank)) if axes is None else [normalize_axis(ctx, a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.fail(f"pads {pads} must hold 2 values per padded axis ({len(axes)} axes)")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[len(axes) + i])
    return widths


def _pad_operands(ctx: OpContext, arrays: Sequence[np.ndarray | None] | None) -> tuple[list[int], list[int] | None]:
    """(pads, axes); ``arrays`` is None in infer (read constants), else the inputs."""
    if ctx.has_input(1):
        pads = int_list(ctx.const(1, "pads") if arrays is None else arrays[1])
    else:  # opset < 11 attribute form (it was called "paddings" in opset 1)
        pads = int_list(ctx.attr("pads", ctx.attr("paddings")))
    axes = None
    if ctx.has_input(3):
        axes = int_list(ctx.const(3, "axes") if arrays is None else arrays[3])
    return pads, axes


def _pad_shape(ctx: OpContext, shape: tuple[int, ...], widths: list[tuple[int, int]]) -> tuple[int, ...]:
    out = tuple(d + b + e for d, (b, e) in zip(shape, widths))
    if min(out, default=0) < 0:
        raise ctx.fail(f"pads {widths} crop more than the input shape {list(shape)}")
    return out


def _infer_pad(ctx: OpContext) -> list[OutSpec]:
    x = _input(ctx)
    pads, axes = _pad_operands(ctx, None)
    return [(x.dtype, _pad_shape(ctx, x.shape, _pad_widths(ctx, len(x.shape), pads, axes)))]


@register_op("Pad", infer=_infer_pad)
def pad(
    ctx: OpContext,
    x: np.ndarray,
    pads: np.ndarray | None = None,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
) -> np.ndarray:
    pad_list, axes_list = _pad_operands(ctx, [x, pads, constant_value, axes])
    widths = _pad_widths(ctx, x.ndim, pad_list, axes_list)
    _pad_shape(ctx, x.shape, widths)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail(f"unknown pad mode '{mode}'")
    # Negative pads crop; crop first, then pad what remains.
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(x.shape, widths))
    x = x[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        if constant_value is not None and np.asarray(constant_value).size:
            value = np.asarray(constant_value).reshape(-1)[0]
        else:
            value = ctx.attr("value", 0)  # opset < 11 attribute; "" pads strings
            if x.dtype == object and value == 0:
                value = ""
        return np.pad(x, grow, mode="constant", constant_values=value).astype(x.dtype, copy=False)
    if any(g != (0, 0) for g in grow) and 0 in x.shape:
        raise ctx.fail(f"cannot {mode}-pad a tensor with an empty axis {list(x.shape)}")
    return np.pad(x, grow, mode=mode).astype(x.dtype, copy=False)


# -- Shape / Size ---------------------------------------------------------------------


def _shape_slice(ctx: OpContext, shape: tuple[int, ...]) -> tuple[int, ...]:
    rank = len(shape)

    def clamp(v: int) -> int:
        v = v + rank if v < 0 else v
        return min(max(v, 0), rank)

    start = clamp(int(ctx.attr("start", 0)))
    end = clamp(int(ctx.attr("end", rank)))
    return shape[start:end]


@register_op("Shape", infer=lambda ctx: [("int64", (len(_shape_slice(ctx, _input(ctx).shape)),))])
def shape(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.asarray(_shape_slice(ctx, x.shape), dtype=np.int64).reshape(-1)


@register_op("Size", infer=lambda ctx: [("int64", ())])
def size(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.asarray(x.size, dtype=np.int64)


# -- Constants and generators ----------------------------------------------------------


def _fill_value(ctx: OpContext) -> np.ndarray:
    value = ctx.attr("value")
    if value is None:
        return np.zeros((), dtype=np.float32)
    value = np.asarray(value)
    if value.size != 1:
        raise ctx.fail(f"'value' must hold exactly one element, it holds {value.size}")
    return value.reshape(())


def _const_shape(ctx: OpContext, array: np.ndarray) -> tuple[int, ...]:
    dims = tuple(int_list(array))
    if min(dims, default=0) < 0:
        raise ctx.fail(f"shape {list(dims)} has a negative dimension")
    return dims


@register_op(
    "ConstantOfShape",
    infer=lambda ctx: [(_fill_value(ctx).dtype.name, _const_shape(ctx, ctx.const(0, "shape")))],
)
def constant_of_shape(ctx: OpContext, shape: np.ndarray) -> np.ndarray:
    value = _fill_value(ctx)
    return np.full(_const_shape(ctx, shape), value, dtype=value.dtype)


def _constant_value(ctx: OpContext) -> np.ndarray:
    attrs = ctx.node.attrs
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32).reshape(-1)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64).reshape(-1)
    if "value_string" in attrs:
        return np.asarray(_text(attrs["value_string"]), dtype=object)
    if "value_strings" in attrs:
        return np.asarray([_text(s) for s in attrs["value_strings"]], dtype=object).reshape(-1)
    if "sparse_value" in attrs:
        raise ctx.fail("sparse tensor constants are not supported; densify the model first")
    raise ctx.fail("Constant has no value attribute")


def _text(s: str | bytes) -> str:
    return s.decode() if isinstance(s, bytes) else str(s)


def _infer_constant(ctx: OpContext) -> list[OutSpec]:
    value = _constant_value(ctx)
    dtype = "object" if value.dtype == object else value.dtype.name
    return [(dtype, tuple(value.shape))]


@register_op("Constant", infer=_infer_constant)
def constant(ctx: OpContext) -> np.ndarray:
    return _constant_value(ctx).copy()


def _range_length(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    s, l, d = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    if d == 0:
        raise ValueError("delta is 0")
    if isinstance(s, int) and isinstance(l, int) and isinstance(d, int):
        return max(-((s - l) // d), 0)  # exact integer ceil
    return max(int(math.ceil((l - s) / d)), 0)


def _infer_range(ctx: OpContext) -> list[OutSpec]:
    start = _input(ctx)
    try:
        n = _range_length(ctx.const(0, "start"), ctx.const(1, "limit"), ctx.const(2, "delta"))
    except ValueError:
        raise ctx.fail("Range with delta 0 never ends") from None
    return [(start.dtype, (n,))]


@register_op("Range", infer=_infer_range)
def range_(ctx: OpContext, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    try:
        n = _range_length(start, limit, delta)
    except ValueError:
        raise ctx.fail("Range with delta 0 never ends") from None
    s, d = np.asarray(start).reshape(()), np.asarray(delta).reshape(())
    return (s + np.arange(n, dtype=s.dtype) * d).astype(start.dtype)


def onnx_dtype_attr(ctx: OpContext, key: str, default: str) -> str:
    """A dtype given as an ONNX element type attribute (``dtype``/``to``)."""
    value = ctx.attr(key)
    return default if value is None else from_onnx(int(value), ctx.node.label)
