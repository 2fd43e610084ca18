"""Pooling: MaxPool (with Indices), AveragePool, LpPool and the global pools.

Every windowed pool views the padded input as ``(N, C, *out, *kernel)``
windows (see :func:`.conv.windows`) and reduces the kernel axes at once.
"""

from __future__ import annotations

import math

import numpy as np

from .conv import WindowGeometry, pad_spatial, window_geometry, windows
from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, register_op


def _pool_geometry(ctx: OpContext, in_shape: tuple[int, ...]) -> WindowGeometry:
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != len(in_shape):
        raise ctx.fail(f"attribute kernel_shape must give one size per spatial axis ({len(in_shape)}), got {kernel}")
    return window_geometry(ctx, in_shape, kernel, ceil_mode=bool(ctx.attr("ceil_mode", 0)))


def _check_rank(ctx: OpContext, shape: tuple[int, ...]) -> None:
    if len(shape) < 3:
        raise ctx.fail(f"input must be [N, C, spatial...], got shape {list(shape)}")


def _check_p(ctx: OpContext) -> None:
    if ctx.node.op_type in ("LpPool", "GlobalLpPool") and float(ctx.attr("p", 2)) <= 0:
        raise ctx.fail(f"attribute p = {ctx.attr('p')}: the norm's order must be positive; fix the model")


def _pool_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    _check_rank(ctx, x.shape)
    _check_p(ctx)
    geo = _pool_geometry(ctx, x.shape[2:])
    shape = x.shape[:2] + geo.out
    specs = [(x.dtype, shape)]
    if len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        specs.append(("int64", shape))
    return specs


def _flat_windows(x: np.ndarray, geo: WindowGeometry, fill: float | int) -> np.ndarray:
    """Windows with the kernel axes flattened into one last axis."""
    view = windows(pad_spatial(x, geo, fill), geo)
    return view.reshape(view.shape[: 2 + len(geo.out)] + (-1,))


def _reduce_windows(x: np.ndarray, geo: WindowGeometry, fill: float | int, combine: np.ufunc) -> np.ndarray:
    """Combines the window elements with ``combine`` (np.maximum, np.add).

    Loops over the kernel offsets, each an output-sized strided slice, which
    touches far less memory than materializing every window.
    """
    view = windows(pad_spatial(x, geo, fill), geo)
    rank = len(geo.out)
    lead = (slice(None),) * (2 + rank)
    out = view[lead + (0,) * rank].copy()
    for offset in list(np.ndindex(*geo.kernel))[1:]:
        combine(out, view[lead + offset], out=out)
    return out


def _lowest(dtype: np.dtype) -> float | int:
    return -np.inf if dtype.kind == "f" else int(np.iinfo(dtype).min)


@register_op("MaxPool", infer=_pool_infer)
def max_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    geo = _pool_geometry(ctx, x.shape[2:])
    want_indices = len(ctx.node.outputs) > 1 and bool(ctx.node.outputs[1])
    if not want_indices:
        return _reduce_windows(x, geo, _lowest(x.dtype), np.maximum)
    flat = _flat_windows(x, geo, _lowest(x.dtype))
    which = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, which[..., None], axis=-1)[..., 0]
    return np.ascontiguousarray(y), _argmax_to_indices(ctx, which, x.shape, geo)


def _argmax_to_indices(ctx: OpContext, which: np.ndarray, x_shape: tuple[int, ...], geo: WindowGeometry) -> np.ndarray:
    """Flat input indices (ignoring padding) of the winning window elements."""
    rank = len(geo.out)
    spatial = x_shape[2:]
    offsets = np.unravel_index(which, geo.kernel)
    column_major = int(ctx.attr("storage_order", 0)) == 1
    flat = np.zeros(which.shape, dtype=np.int64)
    scale = 1
    # Row major: the last spatial axis varies fastest; column major: the first.
    axes = range(rank) if column_major else reversed(range(rank))
    for axis in axes:
        out_pos = np.arange(geo.out[axis]).reshape((-1,) + (1,) * (rank - 1 - axis))
        coord = out_pos * geo.strides[axis] + offsets[axis] * geo.dilations[axis] - geo.pad_begin[axis]
        flat += coord.astype(np.int64) * scale
        scale *= spatial[axis]
    plane = math.prod(spatial)
    nc = np.arange(x_shape[0] * x_shape[1], dtype=np.int64).reshape(x_shape[:2] + (1,) * rank)
    return flat + nc * plane


def _window_counts(geo: WindowGeometry, limits: list[tuple[int, int]]) -> np.ndarray:
    """How many kernel taps of each output window fall in [lo, hi) (padded coordinates), per axis, multiplied."""
    counts = np.ones((1,) * len(geo.out))
    for axis, (lo, hi) in enumerate(limits):
        starts = np.arange(geo.out[axis]) * geo.strides[axis]
        taps = starts[:, None] + np.arange(geo.kernel[axis])[None, :] * geo.dilations[axis]
        per_axis = ((taps >= lo) & (taps < hi)).sum(axis=1)
        shape = [1] * len(geo.out)
        shape[axis] = -1
        counts = counts * per_axis.reshape(shape)
    return counts


@register_op("AveragePool", infer=_pool_infer)
def average_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    geo = _pool_geometry(ctx, x.shape[2:])
    total = _reduce_windows(x.astype(acc, copy=False), geo, 0, np.add)
    spatial = x.shape[2:]
    if int(ctx.attr("count_include_pad", 0)):
        # Explicit padding counts; the overhang added by ceil_mode does not.
        limits = [(0, n + b + e) for n, b, e in zip(spatial, geo.pad_begin, geo.pad_end)]
    else:
        limits = [(b, b + n) for n, b in zip(spatial, geo.pad_begin)]
    counts = _window_counts(geo, limits)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = total / counts.astype(acc)
    return np.ascontiguousarray(y, dtype=x.dtype)


@register_op("LpPool", infer=_pool_infer)
def lp_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    p = float(ctx.attr("p", 2))
    geo = _pool_geometry(ctx, x.shape[2:])
    y = _reduce_windows(np.abs(x.astype(acc, copy=False)) ** p, geo, 0, np.add) ** (1.0 / p)
    return np.ascontiguousarray(y, dtype=x.dtype)


# -- global pools ------------------------------------------------------------


def _global_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    _check_rank(ctx, x.shape)
    _check_p(ctx)
    return [(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@register_op("GlobalAveragePool", infer=_global_infer)
def global_average_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    y = x.astype(accumulate_dtype(x.dtype), copy=False).mean(axis=_spatial_axes(x), keepdims=True)
    return y.astype(x.dtype, copy=False)


@register_op("GlobalMaxPool", infer=_global_infer)
def global_max_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return x.max(axis=_spatial_axes(x), keepdims=True)


@register_op("GlobalLpPool", infer=_global_infer)
def global_lp_pool(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    p = float(ctx.attr("p", 2))
    xa = np.abs(x.astype(accumulate_dtype(x.dtype), copy=False))
    y = (xa**p).sum(axis=_spatial_axes(x), keepdims=True) ** (1.0 / p)
    return y.astype(x.dtype, copy=False)
