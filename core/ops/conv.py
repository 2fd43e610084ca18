"""Convolutions: Conv and ConvTranspose, plus the sliding-window geometry that
the pooling ops share.

Conv is computed as im2col + one batched matmul per group: the padded input is
viewed (without copying) as windows of shape ``(N, C, *out, *kernel)`` via
strides, and the matmul against the flattened weights does the arithmetic.
ConvTranspose is the adjoint: one matmul produces every input pixel's
contribution to every kernel offset, and a loop over kernel offsets (not over
pixels) scatters them into the output.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, register_op


@dataclass(frozen=True)
class WindowGeometry:
    """Where a sliding window lands along each spatial axis."""

    out: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]

    @property
    def spans(self) -> tuple[int, ...]:
        """Extent of the dilated kernel along each axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def auto_pad_mode(ctx: OpContext) -> str:
    mode = ctx.attr("auto_pad", "NOTSET")
    return mode.decode() if isinstance(mode, bytes) else str(mode)


def spatial_ints(ctx: OpContext, name: str, rank: int, default: int) -> tuple[int, ...]:
    """An int-per-spatial-axis attribute (strides, dilations...), defaulted."""
    value = ctx.attr(name)
    if value is None or len(value) == 0:
        return (default,) * rank
    if len(value) != rank:
        raise ctx.fail(f"attribute '{name}' has {len(value)} values for {rank} spatial axes")
    if name in ("strides", "dilations") and any(int(v) < 1 for v in value):
        raise ctx.fail(f"attribute '{name}' = {list(value)}: every value must be at least 1; fix the model")
    return tuple(int(v) for v in value)


def check_kernel_and_pads(ctx: OpContext, kernel: Sequence[int], pads: Sequence[int] | None) -> None:
    """Clear errors for a kernel size below 1 and negative pads (ONNX allows neither)."""
    if any(int(k) < 1 for k in kernel):
        raise ctx.fail(f"kernel shape {list(kernel)}: every size must be at least 1; fix the model")
    if pads is not None and any(int(p) < 0 for p in pads):
        raise ctx.fail(f"attribute 'pads' = {list(pads)} has a negative value; ONNX pads are >= 0, fix the model")


def window_geometry(
    ctx: OpContext,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    ceil_mode: bool = False,
) -> WindowGeometry:
    """Output size and padding of a conv/pool window over ``in_shape``.

    Follows ONNX: explicit ``pads`` with floor (or ceil) division, or
    ``auto_pad`` SAME_UPPER/SAME_LOWER (output = ceil(in / stride), the odd
    padding pixel at the end resp. the beginning) or VALID (no padding).
    """
    rank = len(in_shape)
    kernel = tuple(int(k) for k in kernel)
    check_kernel_and_pads(ctx, kernel, ctx.attr("pads"))
    strides = spatial_ints(ctx, "strides", rank, 1)
    dilations = spatial_ints(ctx, "dilations", rank, 1)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    mode = auto_pad_mode(ctx)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(-(-n // s) for n, s in zip(in_shape, strides))
        total = [max(0, (o - 1) * s + sp - n) for o, s, sp, n in zip(out, strides, spans, in_shape)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if mode == "SAME_UPPER" else (big, small)
    elif mode in ("VALID", "NOTSET", ""):
        pads = ctx.attr("pads") if mode != "VALID" else None
        if pads is None or len(pads) == 0:
            pads = [0] * (2 * rank)
        if len(pads) != 2 * rank:
            raise ctx.fail(f"attribute 'pads' has {len(pads)} values; {2 * rank} expected for {rank} spatial axes")
        begin, end = [int(p) for p in pads[:rank]], [int(p) for p in pads[rank:]]
        out_list = []
        for n, b, e, sp, s in zip(in_shape, begin, end, spans, strides):
            room = n + b + e - sp
            size = (-(-room // s) if ceil_mode else room // s) + 1
            # In ceil mode the last window must start inside the input or the
            # leading padding, never wholly in the trailing padding.
            if ceil_mode and (size - 1) * s >= n + b:
                size -= 1
            out_list.append(size)
        out = tuple(out_list)
    else:
        raise ctx.fail(f"unknown auto_pad '{mode}' (expected NOTSET, SAME_UPPER, SAME_LOWER or VALID)")
    if any(o <= 0 for o in out):
        raise ctx.fail(
            f"the window (kernel {list(kernel)}, dilations {list(dilations)}) does not fit the "
            f"input's spatial shape {list(in_shape)} with pads {begin + end}: output would be {list(out)}"
        )
    return WindowGeometry(out, tuple(begin), tuple(end), kernel, strides, dilations)


def pad_spatial(x: np.ndarray, geo: WindowGeometry, fill: float | int) -> np.ndarray:
    """Pad the spatial axes so that every window of ``geo`` lies inside.

    The end padding grows when ceil mode needs room for a last partial window.
    """
    widths = [(0, 0), (0, 0)]
    for n, b, o, s, sp in zip(x.shape[2:], geo.pad_begin, geo.out, geo.strides, geo.spans):
        needed = (o - 1) * s + sp
        widths.append((b, max(0, needed - n - b)))
    if all(w == (0, 0) for w in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=fill)


def windows(xp: np.ndarray, geo: WindowGeometry) -> np.ndarray:
    """Read-only view of shape ``(N, C, *out, *kernel)`` over a padded input."""
    rank = len(geo.out)
    spatial_strides = xp.strides[2:]
    shape = xp.shape[:2] + geo.out + geo.kernel
    strides = (
        xp.strides[:2]
        + tuple(st * s for st, s in zip(spatial_strides, geo.strides))
        + tuple(st * d for st, d in zip(spatial_strides, geo.dilations))
    )
    assert len(shape) == 2 + 2 * rank
    return np.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides, writeable=False)


def _kernel_shape(ctx: OpContext, w_shape: tuple[int, ...]) -> tuple[int, ...]:
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and len(kernel):
        if tuple(int(k) for k in kernel) != tuple(w_shape[2:]):
            raise ctx.fail(f"kernel_shape {list(kernel)} disagrees with the weights' shape {list(w_shape)}")
        return tuple(int(k) for k in kernel)
    return tuple(w_shape[2:])


# -- Conv --------------------------------------------------------------------


def _conv_infer(ctx: OpContext) -> list[OutSpec]:
    x, w = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and w is not None
    group = int(ctx.attr("group", 1))
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ctx.fail(f"Conv needs X [N, C, ...] and W of the same rank, got {list(x.shape)} and {list(w.shape)}")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ctx.fail(
            f"channels do not match: X has {x.shape[1]} channels, W {list(w.shape)} with group={group} "
            f"expects {w.shape[1] * group} (and output channels divisible by the group count)"
        )
    geo = window_geometry(ctx, x.shape[2:], _kernel_shape(ctx, w.shape))
    return [(x.dtype, (x.shape[0], w.shape[0]) + geo.out)]


@register_op("Conv", infer=_conv_infer)
def conv(ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    geo = window_geometry(ctx, x.shape[2:], _kernel_shape(ctx, w.shape))
    group = int(ctx.attr("group", 1))
    n, c = x.shape[:2]
    m = w.shape[0]
    rank = len(geo.out)
    view = windows(pad_spatial(x.astype(acc, copy=False), geo, 0), geo)
    if group == c and m == c:
        y = _depthwise(view, w.astype(acc, copy=False), geo)
    else:
        y = _im2col_gemm(view, w.astype(acc, copy=False), geo, group)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape((1, m) + (1,) * rank)
    return np.ascontiguousarray(y, dtype=x.dtype)


def _depthwise(view: np.ndarray, w: np.ndarray, geo: WindowGeometry) -> np.ndarray:
    """One filter per channel: a multiply-add per kernel offset beats tiny GEMMs."""
    rank = len(geo.out)
    lead = (slice(None),) * (2 + rank)
    y = np.zeros(view.shape[: 2 + rank], dtype=view.dtype)
    for offset in np.ndindex(*geo.kernel):
        tap = w[(slice(None), 0) + offset].reshape((1, -1) + (1,) * rank)
        y += view[lead + offset] * tap
    return y


def _im2col_gemm(view: np.ndarray, w: np.ndarray, geo: WindowGeometry, group: int) -> np.ndarray:
    n, c = view.shape[:2]
    m = w.shape[0]
    rank = len(geo.out)
    cg, mg = c // group, m // group
    cols = view.reshape((n, group, cg) + geo.out + geo.kernel)
    # (N, G, Cg, *out, *k) -> (G, N, *out, Cg, *k): each output pixel's patch is
    # contiguous, and batch and pixels share the rows of one big GEMM per group
    # (much faster than a stack of per-image GEMMs).
    perm = (1, 0) + tuple(range(3, 3 + rank)) + (2,) + tuple(range(3 + rank, 3 + 2 * rank))
    patch = cg * math.prod(geo.kernel)
    pixels = math.prod(geo.out)
    cols = cols.transpose(perm).reshape(group, n * pixels, patch)
    wmat = w.reshape(group, mg, patch).transpose(0, 2, 1)
    y = cols[0] @ wmat[0] if group == 1 else np.matmul(cols, wmat)  # (G, N * P, Mg)
    return y.reshape(group, n, pixels, mg).transpose(1, 0, 3, 2).reshape((n, m) + geo.out)


# -- ConvTranspose -----------------------------------------------------------


@dataclass(frozen=True)
class _TransposeGeometry:
    out: tuple[int, ...]
    pad_begin: tuple[int, ...]
    full: tuple[int, ...]  # size before cropping the padding away
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]


def _transpose_geometry(ctx: OpContext, in_shape: tuple[int, ...], kernel: tuple[int, ...]) -> _TransposeGeometry:
    rank = len(in_shape)
    check_kernel_and_pads(ctx, kernel, ctx.attr("pads"))
    strides = spatial_ints(ctx, "strides", rank, 1)
    dilations = spatial_ints(ctx, "dilations", rank, 1)
    out_pad = spatial_ints(ctx, "output_padding", rank, 0)
    if any(p < 0 for p in out_pad):
        raise ctx.fail(f"attribute 'output_padding' = {list(out_pad)} has a negative value; fix the model")
    full = tuple(
        s * (n - 1) + (k - 1) * d + 1 + op for n, s, k, d, op in zip(in_shape, strides, kernel, dilations, out_pad)
    )
    mode = auto_pad_mode(ctx)
    output_shape = ctx.attr("output_shape")
    if output_shape is not None and len(output_shape):
        output_shape = [int(v) for v in output_shape]
        # Some exporters give output_shape with the N and C dimensions.
        if len(output_shape) == rank + 2:
            output_shape = output_shape[2:]
        if len(output_shape) != rank:
            raise ctx.fail(f"output_shape {output_shape} does not have one value per spatial axis ({rank})")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [n * s for n, s in zip(in_shape, strides)]
    if output_shape is not None and len(output_shape):
        total = [f - o for f, o in zip(full, output_shape)]
        if mode == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
        out = tuple(output_shape)
    else:
        pads = ctx.attr("pads") if mode != "VALID" else None
        if pads is None or len(pads) == 0:
            pads = [0] * (2 * rank)
        if len(pads) != 2 * rank:
            raise ctx.fail(f"attribute 'pads' has {len(pads)} values; {2 * rank} expected")
        begin = [int(p) for p in pads[:rank]]
        out = tuple(f - int(b) - int(e) for f, b, e in zip(full, pads[:rank], pads[rank:]))
    if any(o <= 0 for o in out):
        raise ctx.fail(f"output spatial shape {list(out)} is empty; check pads/output_shape")
    return _TransposeGeometry(out, tuple(begin), full, kernel, strides, dilations)


def _conv_transpose_infer(ctx: OpContext) -> list[OutSpec]:
    x, w = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and w is not None
    group = int(ctx.attr("group", 1))
    if len(x.shape) < 3 or len(w.shape) != len(x.shape) or x.shape[1] != w.shape[0] or x.shape[1] % group:
        raise ctx.fail(
            f"ConvTranspose needs X [N, C, ...] and W [C, M/group, ...] of the same rank, "
            f"got {list(x.shape)} and {list(w.shape)} (group={group})"
        )
    geo = _transpose_geometry(ctx, x.shape[2:], _kernel_shape(ctx, w.shape))
    return [(x.dtype, (x.shape[0], w.shape[1] * group) + geo.out)]


def _crop(full: np.ndarray, begin: Sequence[int], size: Sequence[int]) -> np.ndarray:
    """full[..., begin:begin+size] per spatial axis, zero-filled where out of range."""
    if all(b >= 0 and b + s <= f for b, s, f in zip(begin, size, full.shape[2:])):
        return full[(slice(None), slice(None)) + tuple(slice(b, b + s) for b, s in zip(begin, size))]
    out = np.zeros(full.shape[:2] + tuple(size), dtype=full.dtype)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for b, s, f in zip(begin, size, full.shape[2:]):
        lo, hi = max(b, 0), min(b + s, f)
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - b, lo - b + max(0, hi - lo)))
    out[tuple(dst)] = full[tuple(src)]
    return out


@register_op("ConvTranspose", infer=_conv_transpose_infer)
def conv_transpose(ctx: OpContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    group = int(ctx.attr("group", 1))
    kernel = _kernel_shape(ctx, w.shape)
    geo = _transpose_geometry(ctx, x.shape[2:], kernel)
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    rank = len(in_shape)
    cg, mg = c // group, w.shape[1]
    m = mg * group
    k_count = math.prod(kernel)
    pixels = math.prod(in_shape)
    # Rows of one GEMM per group are (image, pixel) pairs, as in Conv.
    xg = x.astype(acc, copy=False).reshape(n, group, cg, pixels).transpose(1, 0, 3, 2).reshape(group, n * pixels, cg)
    wg = w.astype(acc, copy=False).reshape(group, cg, mg * k_count)
    contrib = xg[0] @ wg[0] if group == 1 else np.matmul(xg, wg)  # (G, N * P, Mg * K)
    contrib = contrib.reshape((group, n) + tuple(in_shape) + (mg, k_count))
    # -> (K, N, G, Mg, *in): one slab of the output per kernel offset.
    contrib = contrib.transpose((3 + rank, 1, 0, 2 + rank) + tuple(range(2, 2 + rank)))
    contrib = contrib.reshape((k_count, n, m) + tuple(in_shape))
    full = np.zeros((n, m) + geo.full, dtype=acc)
    for index, offset in enumerate(itertools.product(*[range(k) for k in kernel])):
        target = tuple(
            slice(o * d, o * d + s * (size - 1) + 1, s)
            for o, d, s, size in zip(offset, geo.dilations, geo.strides, in_shape)
        )
        full[(slice(None), slice(None)) + target] += contrib[index]
    y = _crop(full, geo.pad_begin, geo.out)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape((1, m) + (1,) * rank)
    return np.ascontiguousarray(y, dtype=x.dtype)
