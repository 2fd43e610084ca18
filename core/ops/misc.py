"""Other tensor ops: triangles, one-hot, block moves, selection and uniqueness.

Trilu, EyeLike, OneHot, DepthToSpace, SpaceToDepth, CenterCropPad,
ReverseSequence, Compress, NonZero, Unique and Col2Im.  Compress, NonZero and
Unique have data-dependent output shapes: rammer keeps every shape static, so
their ``infer`` needs the deciding input as a constant and otherwise names the
node and says why.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import ShapeError
from .registry import OpContext, OutSpec, normalize_axis, register_op, same_as_input
from .tensor import int_list, onnx_dtype_attr


def needs_constant(ctx: OpContext, i: int, error: ShapeError) -> ShapeError:
    """Tag ``error`` with the tensor whose value was missing (callers that can
    bind that tensor to a value, like the ONNX backend adapter, retry with it)."""
    error.needs_constant = ctx.node.inputs[i]
    return error


def _data_dependent(ctx: OpContext, i: int, what: str) -> np.ndarray:
    """The constant value of input ``i``, whose values decide the output shape."""
    value = ctx.values[i] if i < len(ctx.values) else None
    if value is None:
        raise needs_constant(ctx, i, ctx.fail(
            f"the output shape of {ctx.node.op_type} depends on the values of input {i} "
            f"'{ctx.node.inputs[i]}' ({what}), which are only known at run time; rammer needs "
            f"static shapes, so this input must be a constant (or rewrite the model to avoid {ctx.node.op_type})"
        ))
    return np.asarray(value)


def _infer_trilu(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if len(x.shape) < 2:
        raise ctx.fail(f"Trilu needs an input of rank 2 or more, got shape {list(x.shape)}")
    return [(x.dtype, x.shape)]


@register_op("Trilu", infer=_infer_trilu)
def trilu(ctx: OpContext, x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
    diagonal = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
    # Diagonals past the matrix keep all or nothing; clamped, numpy builds no mask of that size.
    diagonal = max(-x.shape[-2], min(x.shape[-1], diagonal))
    keep = np.triu if int(ctx.attr("upper", 1)) else np.tril
    return keep(x, diagonal).astype(x.dtype, copy=False)


def _infer_eye_like(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if len(x.shape) != 2:
        raise ctx.fail(f"EyeLike needs a 2-D input, got shape {list(x.shape)}")
    return [(onnx_dtype_attr(ctx, "dtype", x.dtype), x.shape)]


@register_op("EyeLike", infer=_infer_eye_like)
def eye_like(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    dtype = onnx_dtype_attr(ctx, "dtype", x.dtype.name)
    return np.eye(x.shape[0], x.shape[1], k=int(ctx.attr("k", 0)), dtype=dtype)


def _one_hot_depth(ctx: OpContext, depth: np.ndarray) -> int:
    value = np.asarray(depth).reshape(-1)
    if value.size != 1 or value[0] < 1:
        raise ctx.fail(f"depth must be one positive number, got {value.tolist()}")
    return int(value[0])


def _one_hot_axis(ctx: OpContext, rank: int) -> int:
    axis = int(ctx.attr("axis", -1))
    if not -rank - 1 <= axis <= rank:
        raise ctx.fail(f"axis {axis} is out of range for output rank {rank + 1}")
    return axis + rank + 1 if axis < 0 else axis


def _infer_one_hot(ctx: OpContext) -> list[OutSpec]:
    indices, values = ctx.inputs[0], ctx.inputs[2]
    assert indices is not None and values is not None
    depth = _one_hot_depth(ctx, ctx.const(1, "depth"))
    shape = list(indices.shape)
    shape.insert(_one_hot_axis(ctx, len(shape)), depth)
    return [(values.dtype, tuple(shape))]


@register_op("OneHot", infer=_infer_one_hot)
def one_hot(ctx: OpContext, indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    n = _one_hot_depth(ctx, depth)
    axis = _one_hot_axis(ctx, indices.ndim)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + n, idx)  # negative indices count from the end
    classes = np.arange(n).reshape((n,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == classes
    off, on = np.asarray(values).reshape(-1)[:2]
    return np.where(hot, on, off).astype(values.dtype)


# -- block moves ------------------------------------------------------------------


def _block(ctx: OpContext, shape: tuple[int, ...]) -> int:
    b = int(ctx.attr("blocksize", 0))
    if len(shape) != 4 or b < 1:
        raise ctx.fail(f"needs a 4-D NCHW input and a positive blocksize, got {list(shape)} and {b}")
    return b


def _depth_to_space_shape(ctx: OpContext, shape: tuple[int, ...]) -> tuple[int, ...]:
    b = _block(ctx, shape)
    n, c, h, w = shape
    if c % (b * b):
        raise ctx.fail(f"channels {c} are not divisible by blocksize^2 = {b * b}")
    return (n, c // (b * b), h * b, w * b)


@register_op("DepthToSpace", infer=lambda ctx: [(ctx.input(0).dtype, _depth_to_space_shape(ctx, ctx.input(0).shape))])
def depth_to_space(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    out = _depth_to_space_shape(ctx, x.shape)
    b = _block(ctx, x.shape)
    n, c, h, w = x.shape
    if ctx.attr("mode", "DCR") == "CRD":
        tmp = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        tmp = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return tmp.reshape(out)


def _space_to_depth_shape(ctx: OpContext, shape: tuple[int, ...]) -> tuple[int, ...]:
    b = _block(ctx, shape)
    n, c, h, w = shape
    if h % b or w % b:
        raise ctx.fail(f"spatial dims {h}x{w} are not divisible by blocksize {b}")
    return (n, c * b * b, h // b, w // b)


@register_op("SpaceToDepth", infer=lambda ctx: [(ctx.input(0).dtype, _space_to_depth_shape(ctx, ctx.input(0).shape))])
def space_to_depth(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    out = _space_to_depth_shape(ctx, x.shape)
    b = _block(ctx, x.shape)
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    # The inverse of DepthToSpace in the same mode (CRD arrived in opset 25).
    if ctx.attr("mode", "DCR") == "CRD":
        return blocks.transpose(0, 1, 3, 5, 2, 4).reshape(out)
    return blocks.transpose(0, 3, 5, 1, 2, 4).reshape(out)


def _crop_pad_targets(ctx: OpContext, shape: tuple[int, ...], target: list[int]) -> list[int]:
    rank = len(shape)
    axes = ctx.attr("axes")
    axes = list(range(rank)) if axes is None else [normalize_axis(ctx, a, rank) for a in int_list(axes)]
    if len(target) != len(axes) or min(target, default=0) < 0:
        raise ctx.fail(f"shape {target} must give one non-negative size per axis {axes}")
    out = list(shape)
    for a, t in zip(axes, target):
        out[a] = t
    return out


@register_op(
    "CenterCropPad",
    infer=lambda ctx: [(ctx.input(0).dtype,
                        tuple(_crop_pad_targets(ctx, ctx.input(0).shape, int_list(ctx.const(1, "shape")))))],
)
def center_crop_pad(ctx: OpContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    out_shape = _crop_pad_targets(ctx, x.shape, int_list(shape))
    src, dst = [], []
    for d, t in zip(x.shape, out_shape):
        # The centred window starts at floor(difference / 2) on the larger side.
        if t <= d:
            start = (d - t) // 2
            src.append(slice(start, start + t))
            dst.append(slice(0, t))
        else:
            start = (t - d) // 2
            src.append(slice(0, d))
            dst.append(slice(start, start + d))
    out = np.zeros(out_shape, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out


@register_op("ReverseSequence", infer=same_as_input)
def reverse_sequence(ctx: OpContext, x: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    batch_axis = normalize_axis(ctx, int(ctx.attr("batch_axis", 1)), x.ndim)
    time_axis = normalize_axis(ctx, int(ctx.attr("time_axis", 0)), x.ndim)
    out = x.copy()
    for b, n in enumerate(int_list(lengths)):
        n = min(max(n, 0), x.shape[time_axis])
        index: list[slice | int] = [slice(None)] * x.ndim
        index[batch_axis] = b
        index[time_axis] = slice(0, n)
        src = x[tuple(index)]
        # The time axis inside the batch slice shifts left when batch comes first.
        t = time_axis - (batch_axis < time_axis)
        out[tuple(index)] = np.flip(src, axis=t)
    return out


# -- data-dependent selection --------------------------------------------------------


def _compress_shape(ctx: OpContext, shape: tuple[int, ...], condition: np.ndarray) -> tuple[int, ...]:
    axis = ctx.attr("axis")
    cond = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        return (int(np.count_nonzero(cond[: math.prod(shape)])),)
    axis = normalize_axis(ctx, int(axis), len(shape))
    out = list(shape)
    out[axis] = int(np.count_nonzero(cond[: shape[axis]]))
    return tuple(out)


@register_op(
    "Compress",
    infer=lambda ctx: [(ctx.input(0).dtype,
                        _compress_shape(ctx, ctx.input(0).shape, _data_dependent(ctx, 1, "condition")))],
)
def compress(ctx: OpContext, x: np.ndarray, condition: np.ndarray) -> np.ndarray:
    axis = ctx.attr("axis")
    cond = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        return np.compress(cond, x.reshape(-1))
    return np.compress(cond, x, axis=normalize_axis(ctx, int(axis), x.ndim))


def _nonzero(x: np.ndarray) -> np.ndarray:
    if x.ndim == 0:  # numpy refuses 0-d nonzero; ONNX gives a (0, n) result
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register_op("NonZero", infer=lambda ctx: [("int64", _nonzero(_data_dependent(ctx, 0, "the tensor searched")).shape)])
def nonzero(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return _nonzero(x)


def _unique(ctx: OpContext, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    axis = ctx.attr("axis")
    axis = None if axis is None else normalize_axis(ctx, int(axis), x.ndim)
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not int(ctx.attr("sorted", 1)):
        # Order by first occurrence and renumber the inverse mapping to match.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_i64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    return values.astype(x.dtype, copy=False), as_i64(first), as_i64(inverse), as_i64(counts)


def _infer_unique(ctx: OpContext) -> list[OutSpec]:
    x = _data_dependent(ctx, 0, "the tensor whose unique values are taken")
    outs = _unique(ctx, x)
    return [(ctx.input(0).dtype, outs[0].shape)] + [("int64", o.shape) for o in outs[1:]]


@register_op("Unique", infer=_infer_unique)
def unique(ctx: OpContext, x: np.ndarray) -> tuple[np.ndarray, ...]:
    return _unique(ctx, x)[: len(ctx.node.outputs)]


# -- Col2Im -----------------------------------------------------------------------


def _col2im_geometry(ctx: OpContext, shape: tuple[int, ...], image: list[int], block: list[int]):
    nd = len(image)
    if len(block) != nd or len(shape) != 3:
        raise ctx.fail(f"needs a (N, C*prod(block), L) input and matching image/block shapes, got {list(shape)}")
    dil = int_list(ctx.attr("dilations")) or [1] * nd
    strides = int_list(ctx.attr("strides")) or [1] * nd
    pads = int_list(ctx.attr("pads")) or [0] * (2 * nd)
    blocks = [
        (image[d] + pads[d] + pads[d + nd] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(nd)
    ]
    kernel = math.prod(block)
    if shape[1] % kernel or math.prod(blocks) != shape[2]:
        raise ctx.fail(f"input {list(shape)} does not match {blocks} blocks of size {block}")
    return (shape[0], shape[1] // kernel), blocks, dil, strides, pads


def _infer_col2im(ctx: OpContext) -> list[OutSpec]:
    x = ctx.input(0)
    image, block = int_list(ctx.const(1, "image_shape")), int_list(ctx.const(2, "block_shape"))
    (n, c), *_ = _col2im_geometry(ctx, x.shape, image, block)
    return [(x.dtype, (n, c, *image))]


@register_op("Col2Im", infer=_infer_col2im)
def col2im(ctx: OpContext, x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray) -> np.ndarray:
    image, block = int_list(image_shape), int_list(block_shape)
    (n, c), blocks, dil, strides, pads = _col2im_geometry(ctx, x.shape, image, block)
    nd = len(image)
    padded = np.zeros((n, c, *[image[d] + pads[d] + pads[d + nd] for d in range(nd)]), dtype=x.dtype)
    cols = x.reshape(n, c, *block, *blocks)
    # Each kernel offset adds one strided lattice of block positions.
    for offset in itertools.product(*[range(k) for k in block]):
        window = tuple(
            slice(o * dil[d], o * dil[d] + strides[d] * (blocks[d] - 1) + 1, strides[d]) for d, o in enumerate(offset)
        )
        padded[(slice(None), slice(None)) + window] += cols[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(nd))
    return padded[(slice(None), slice(None)) + crop]
