"""Resampling: Resize (and the deprecated Upsample), GridSample and AffineGrid.

Interpolation is separable, so an N-D resize is a sequence of 1-D resizes, one
per resized axis.  For each axis we build a small *tap table*: for every output
position, the input indices it reads and their weights.  The table follows the
ONNX specification:

* an output index ``y`` maps to an input coordinate ``x`` through the
  ``coordinate_transformation_mode`` (half_pixel, align_corners, ...);
* ``nearest`` reads one input, rounded by ``nearest_mode``;
* ``linear``/``cubic`` read the taps around ``x`` with a tent or cubic
  (coefficient ``cubic_coeff_a``) kernel; with ``antialias`` the kernel is
  stretched by ``1/scale`` when downsampling, and renormalized;
* taps outside the input clamp to the edge, or get weight 0 (renormalized)
  with ``exclude_outside``;
* ``tf_crop_and_resize`` samples inside ``roi`` and writes
  ``extrapolation_value`` where ``x`` falls outside the input.

Everything is computed in float64 and cast back to the input dtype (integers
rounded and saturated), like the ONNX reference implementation.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .registry import OpContext, OutSpec, normalize_axis, register_op
from .tensor import int_list


@dataclass(frozen=True)
class _AxisPlan:
    axis: int
    out_len: int
    scale: float
    roi: tuple[float, float] | None


def _legacy(ctx: OpContext) -> bool:
    """Upsample and Resize-10: (X, scales) inputs, asymmetric coordinates, floor rounding."""
    return ctx.node.op_type == "Upsample" or ctx.opset < 11


def _operand(ctx: OpContext, i: int, arrays: list[np.ndarray | None] | None, what: str) -> np.ndarray | None:
    """Input ``i`` if the node has it and it is not empty (infer reads constants)."""
    if not ctx.has_input(i):
        return None
    value = ctx.const(i, what) if arrays is None else arrays[i]
    if value is None or np.asarray(value).size == 0:
        return None
    return np.asarray(value)


def _resize_axes(ctx: OpContext, rank: int) -> list[int]:
    axes = ctx.attr("axes")
    if axes is None:
        return list(range(rank))
    out = [normalize_axis(ctx, a, rank) for a in int_list(axes)]
    if len(set(out)) != len(out):
        raise ctx.fail(f"axes {int_list(axes)} repeat an axis")
    return out


def _plan(ctx: OpContext, shape: tuple[int, ...], arrays: list[np.ndarray | None] | None) -> list[_AxisPlan]:
    """Output length, scale and roi of every axis (``arrays=None``: infer)."""
    rank = len(shape)
    if _legacy(ctx):
        scales_in = 1  # Upsample-9 and Resize-10: (X, scales)
        scales = _operand(ctx, 1, arrays, "scales") if ctx.has_input(1) else np.asarray(ctx.attr("scales"), float)
        sizes, roi = None, None
    else:
        scales_in = 2
        # roi never changes the output shape, so infer (arrays=None) does not need its value.
        crops = ctx.attr("coordinate_transformation_mode") == "tf_crop_and_resize"
        roi = _operand(ctx, 1, arrays, "roi") if crops and arrays is not None else None
        scales = _operand(ctx, scales_in, arrays, "scales")
        sizes = _operand(ctx, 3, arrays, "sizes")
    axes = _resize_axes(ctx, rank)
    n = len(axes)
    full_roi = [(0.0, 1.0)] * rank
    if roi is not None:
        r = [float(v) for v in roi.reshape(-1)]
        if len(r) != 2 * n:
            raise ctx.fail(f"roi holds {len(r)} values; it needs 2 per resized axis ({n})")
        for i, a in enumerate(axes):
            full_roi[a] = (r[i], r[n + i])
    plan_scales = [1.0] * rank
    out = list(shape)
    if sizes is not None:
        want = int_list(sizes)
        if len(want) != n or min(want, default=0) < 0:
            raise ctx.fail(f"sizes {want} must give one non-negative size per resized axis ({n})")
        for a, s in zip(axes, want):
            plan_scales[a] = s / shape[a] if shape[a] else 1.0
            out[a] = s
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.fail(f"unknown keep_aspect_ratio_policy '{policy}'")
            picked = [plan_scales[a] for a in axes]
            common = min(picked) if policy == "not_larger" else max(picked)
            for a in axes:
                plan_scales[a] = common
                out[a] = int(common * shape[a] + 0.5)  # round half up
    elif scales is not None:
        factors = [float(v) for v in scales.reshape(-1)]
        if len(factors) != n or min(factors, default=1.0) <= 0:
            raise ctx.fail(f"scales {factors} must give one positive factor per resized axis ({n})")
        for a, f in zip(axes, factors):
            plan_scales[a] = f
            out[a] = int(math.floor(f * shape[a]))
    else:
        raise ctx.fail(f"needs 'scales' (input {scales_in}) or 'sizes' (input 3)")
    return [
        _AxisPlan(a, out[a], plan_scales[a], full_roi[a] if roi is not None else None)
        for a in range(rank)
    ]


def _infer_resize(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    return [(x.dtype, tuple(p.out_len for p in _plan(ctx, x.shape, None)))]


# -- coordinates and taps ------------------------------------------------------------


def _source_coords(ctx: OpContext, mode: str, p: _AxisPlan, in_len: int) -> np.ndarray:
    y = np.arange(p.out_len, dtype=np.float64)
    scale = p.scale
    out_width = scale * in_len  # the real-valued output length, as ONNX defines it
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = p.out_len / out_width
        offset = in_len / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return np.full_like(y, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return np.zeros_like(y) if out_width == 1 else y * (in_len - 1) / (out_width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = p.roi if p.roi is not None else (0.0, 1.0)
        if out_width == 1:
            x = np.full_like(y, (end - start) * (in_len - 1) / 2)
        else:
            x = y * (end - start) * (in_len - 1) / (out_width - 1)
        return x + start * (in_len - 1)
    raise ctx.fail(f"unknown coordinate_transformation_mode '{mode}'")


def _nearest_index(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    rounding = ctx.attr("nearest_mode", "round_prefer_floor")
    if _legacy(ctx):
        rounding = "floor"
    if rounding == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if rounding == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if rounding == "floor":
        return np.floor(x)
    if rounding == "ceil":
        return np.ceil(x)
    raise ctx.fail(f"unknown nearest_mode '{rounding}'")


def _cubic_kernel(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _taps(ctx: OpContext, x: np.ndarray, in_len: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Input indices (clamped) and weights, each of shape (out_len, taps)."""
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":
        idx = _nearest_index(ctx, x).astype(np.int64)[:, None]
        return np.clip(idx, 0, in_len - 1), np.ones(idx.shape)
    # The left neighbour is strictly below x (an integer x counts as the right one).
    left = np.ceil(x) - 1
    ratio = x - left
    stretch = min(scale, 1.0) if int(ctx.attr("antialias", 0)) else 1.0
    radius = 1.0 if mode == "linear" else 2.0
    if mode not in ("linear", "cubic"):
        raise ctx.fail(f"unknown mode '{mode}'")
    first = int(math.floor(-radius / stretch) + 1)
    offsets = np.arange(first, 2 - first, dtype=np.float64)
    dist = (offsets[None, :] - ratio[:, None]) * stretch
    if mode == "linear":
        weights = np.clip(1 - np.abs(dist), 0, 1)
    else:
        weights = _cubic_kernel(dist, float(ctx.attr("cubic_coeff_a", -0.75)))
    if stretch != 1.0 or int(ctx.attr("antialias", 0)):
        weights = weights / weights.sum(axis=1, keepdims=True)
    idx = left.astype(np.int64)[:, None] + offsets.astype(np.int64)[None, :]
    if int(ctx.attr("exclude_outside", 0)):
        weights = np.where((idx < 0) | (idx >= in_len), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), weights


def _resize_axis(ctx: OpContext, data: np.ndarray, p: _AxisPlan, ctm: str) -> np.ndarray:
    in_len = data.shape[p.axis]
    if p.out_len == 0 or in_len == 0:
        shape = list(data.shape)
        shape[p.axis] = p.out_len
        return np.zeros(shape, dtype=data.dtype)
    x = _source_coords(ctx, ctm, p, in_len)
    idx, weights = _taps(ctx, x, in_len, p.scale)
    gathered = np.take(data, idx, axis=p.axis)  # (..., out, taps, ...)
    if weights.shape[1] == 1:
        out = np.squeeze(gathered, axis=p.axis + 1)  # nearest: exact, no float round trip
    else:
        w = weights.reshape((1,) * p.axis + weights.shape + (1,) * (data.ndim - p.axis - 1))
        out = (gathered * w).sum(axis=p.axis + 1)
    if ctm == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_len - 1)
        if outside.any():
            mask = outside.reshape((1,) * p.axis + (-1,) + (1,) * (data.ndim - p.axis - 1))
            out = np.where(mask, np.asarray(float(ctx.attr("extrapolation_value", 0.0))).astype(out.dtype), out)
    return out


def _cast_back(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if values.dtype == dtype:
        return values
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.round(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


def resize_array(ctx: OpContext, x: np.ndarray, arrays: list[np.ndarray | None]) -> np.ndarray:
    plans = _plan(ctx, x.shape, arrays)
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if _legacy(ctx):
        ctm = "asymmetric"
    nearest = ctx.attr("mode", "nearest") == "nearest"
    data = x if nearest else x.astype(np.float64)
    for p in plans:
        unchanged = p.out_len == x.shape[p.axis] and math.isclose(p.scale, 1.0)
        if unchanged and (p.roi is None or p.roi == (0.0, 1.0)):
            continue  # an identity along this axis
        data = _resize_axis(ctx, data, p, ctm)
    return _cast_back(np.asarray(data), x.dtype)


@register_op("Resize", infer=_infer_resize)
def resize(ctx: OpContext, x: np.ndarray, *rest: np.ndarray | None) -> np.ndarray:
    return resize_array(ctx, x, [x, *rest])


@register_op("Upsample", infer=_infer_resize)
def upsample(ctx: OpContext, x: np.ndarray, *rest: np.ndarray | None) -> np.ndarray:
    return resize_array(ctx, x, [x, *rest])


# -- GridSample / AffineGrid --------------------------------------------------------
#
# GridSample reads X at normalized coordinates in [-1, 1] given by a grid whose
# last axis lists them innermost-dimension first (x = width, y = height, ...).
# Each spatial dim contributes taps (indices, weights) as in Resize; the taps of
# all dims are combined by an outer product.


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates into [lo, hi] by mirroring at the borders."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dist = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    flips = np.floor(dist / span)
    rest = dist - flips * span
    even = flips % 2 == 0
    from_lo, from_hi = lo + rest, hi - rest
    return np.where(below, np.where(even, from_lo, from_hi), np.where(above, np.where(even, from_hi, from_lo), x))


def _grid_taps(ctx: OpContext, x: np.ndarray, length: int, mode: str, padding: str, align: bool):
    """(indices, weights, valid) of shape (..., taps) for one spatial dim."""
    lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
    if mode == "nearest":
        x = np.rint(x)  # round half to even, as PyTorch and the ONNX reference do
    outside = (x < lo) | (x > hi)
    if padding == "border":
        x = np.where(outside, np.clip(x, 0, length - 1), x)
    elif padding == "reflection":
        x = np.where(outside, _reflect(x, lo, hi), x)
    elif padding != "zeros":
        raise ctx.fail(f"unknown padding_mode '{padding}'")
    if mode == "nearest":
        idx, weights = np.trunc(x)[..., None], np.ones(x.shape + (1,))
    else:
        base = np.floor(x)
        t = x - base
        if mode == "linear":
            offsets, weights = np.array([0.0, 1.0]), np.stack([1 - t, t], axis=-1)
        elif mode == "cubic":
            offsets = np.array([-1.0, 0.0, 1.0, 2.0])
            weights = _cubic_kernel(offsets - t[..., None], -0.75)
        else:
            raise ctx.fail(f"unknown mode '{mode}'")
        idx = base[..., None] + offsets
    # Taps that land outside the image read 0 (zeros), the edge (border) or a mirror (reflection).
    if padding == "zeros":
        valid = (idx >= 0) & (idx <= length - 1)
    else:
        valid = np.ones(idx.shape, dtype=bool)
        if padding == "reflection":
            idx = _reflect(idx, lo, hi)
    return np.clip(idx, 0, length - 1).astype(np.int64), weights, valid


def _infer_grid_sample(ctx: OpContext) -> list[OutSpec]:
    x, grid = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and grid is not None
    nd = len(x.shape) - 2
    if nd < 1 or grid.shape != (x.shape[0], *grid.shape[1:-1], nd) or len(grid.shape) != nd + 2:
        raise ctx.fail(f"grid {list(grid.shape)} must be [N, *out_spatial, {nd}] for input {list(x.shape)}")
    if x.dtype in ("object", "bool"):
        raise ctx.fail(f"sampling a {'string' if x.dtype == 'object' else x.dtype} input is not supported "
                       f"(X must be numeric)")
    return [(x.dtype, (x.shape[0], x.shape[1], *grid.shape[1:-1]))]


@register_op("GridSample", infer=_infer_grid_sample)
def grid_sample(ctx: OpContext, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "bilinear"), ctx.attr("mode", "bilinear"))
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(int(ctx.attr("align_corners", 0)))
    n, c, *spatial = x.shape
    nd = len(spatial)
    g = grid.astype(np.float64)
    taps = []
    for d, length in enumerate(spatial):
        coord = g[..., nd - 1 - d]  # the grid lists the innermost dim first
        coord = (coord + 1) / 2 * (length - 1) if align else ((coord + 1) * length - 1) / 2
        taps.append(_grid_taps(ctx, coord, length, mode, padding, align))
    out_spatial = grid.shape[1:-1]
    batch = np.arange(n).reshape((n,) + (1,) * len(out_spatial))
    acc = np.zeros((n, *out_spatial, c))
    for combo in itertools.product(*[range(t[0].shape[-1]) for t in taps]):
        weight = np.ones((n, *out_spatial))
        index = []
        for (idx, w, valid), k in zip(taps, combo):
            weight = weight * w[..., k] * valid[..., k]
            index.append(idx[..., k])
        # Advanced indices around a slice put the channel axis last.
        values = x[(batch, slice(None)) + tuple(index)].astype(np.float64)
        acc += values * weight[..., None]
    return _cast_back(np.moveaxis(acc, -1, 1), x.dtype)


def _base_grid_axis(length: int, align: bool) -> np.ndarray:
    if align:
        return np.linspace(-1.0, 1.0, length) if length > 1 else np.array([-1.0])
    return (2 * np.arange(length) + 1) / length - 1


def _affine_sizes(ctx: OpContext, size: np.ndarray, theta_shape: tuple[int, ...]) -> list[int]:
    dims = int_list(size)
    nd = len(dims) - 2
    if nd not in (2, 3) or theta_shape != (dims[0], nd, nd + 1):
        raise ctx.fail(f"size {dims} and theta {list(theta_shape)} must be (N, C, [D,] H, W) and (N, {nd}, {nd + 1})")
    return dims


def _infer_affine_grid(ctx: OpContext) -> list[OutSpec]:
    theta = ctx.inputs[0]
    assert theta is not None
    dims = _affine_sizes(ctx, ctx.const(1, "size"), theta.shape)
    return [(theta.dtype, (dims[0], *dims[2:], len(dims) - 2))]


@register_op("AffineGrid", infer=_infer_affine_grid)
def affine_grid(ctx: OpContext, theta: np.ndarray, size: np.ndarray) -> np.ndarray:
    dims = _affine_sizes(ctx, size, theta.shape)
    spatial = dims[2:]
    align = bool(int(ctx.attr("align_corners", 0)))
    axes = [_base_grid_axis(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # one array per spatial dim, outermost first
    # Homogeneous points (x, y, [z], 1): innermost dim first, like GridSample's grid.
    points = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)
    grid = np.einsum("nij,...j->n...i", theta.astype(np.float64), points)
    return grid.astype(theta.dtype)
