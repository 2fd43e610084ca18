"""Normalizations: Batch/Instance/Layer/Group/RMS/Lp normalization, LRN and
MeanVarianceNormalization.

Statistics are computed in float32 at least (float64 for float64 inputs, or
the ``stash_type`` where the op has one) and the result cast back, because
float16 sums of squares overflow and lose precision.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import from_onnx
from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, normalize_axis, register_op, same_as_input


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel vector against [N, C, ...]."""
    return (1, -1) + (1,) * (x.ndim - 2)


def _stash_dtype(ctx: OpContext, x_dtype: np.dtype) -> np.dtype:
    """The dtype statistics are computed in (``stash_type``, default float32)."""
    stash = int(ctx.attr("stash_type", 1))
    dtype = np.dtype(from_onnx(stash, ctx.node.label + " stash_type"))
    # A lower-precision stash than the data would only lose accuracy.
    return np.promote_types(dtype, accumulate_dtype(x_dtype))


# -- BatchNormalization -------------------------------------------------------


def _batch_norm_training(ctx: OpContext) -> bool:
    return ctx.opset >= 14 and bool(ctx.attr("training_mode", 0))


def _batch_norm_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if len(x.shape) < 2:
        raise ctx.fail(f"input must be [N, C, ...], got shape {list(x.shape)}")
    specs: list[OutSpec] = [(x.dtype, x.shape)]
    extra = [name for name in ctx.node.outputs[1:]]
    for i, name in enumerate(extra):
        if not name:
            specs.append(("float32", ()))  # placeholder for an omitted output
            continue
        if not _batch_norm_training(ctx):
            raise ctx.fail(
                "only inference-mode BatchNormalization is supported: "
                "outputs beyond Y need training_mode=1 (opset >= 14)"
            )
        stat = ctx.inputs[3 + min(i, 1)]
        assert stat is not None
        specs.append((stat.dtype, stat.shape))
    return specs


@register_op("BatchNormalization", infer=_batch_norm_infer)
def batch_normalization(
    ctx: OpContext,
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
) -> np.ndarray | tuple[np.ndarray, ...]:
    acc = accumulate_dtype(x.dtype)
    eps = float(ctx.attr("epsilon", 1e-5))
    xa = x.astype(acc, copy=False)
    if _batch_norm_training(ctx):
        axes = (0,) + tuple(range(2, x.ndim))
        batch_mean = xa.mean(axis=axes)
        batch_var = xa.var(axis=axes)
        use_mean, use_var = batch_mean, batch_var
    else:
        use_mean, use_var = mean.astype(acc), var.astype(acc)
    shape = _channel_shape(x)
    inv = scale.astype(acc).reshape(shape) / np.sqrt(use_var.reshape(shape) + acc.type(eps))
    y = ((xa - use_mean.reshape(shape)) * inv + bias.astype(acc).reshape(shape)).astype(x.dtype)
    if not _batch_norm_training(ctx) or len(ctx.node.outputs) == 1:
        return y
    momentum = float(ctx.attr("momentum", 0.9))
    running_mean = (mean * momentum + batch_mean * (1 - momentum)).astype(mean.dtype)
    running_var = (var * momentum + batch_var * (1 - momentum)).astype(var.dtype)
    return (y, running_mean, running_var)[: len(ctx.node.outputs)]


# -- Instance / Group normalization ------------------------------------------


def _normalize(xa: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = xa.mean(axis=axes, keepdims=True)
    var = np.square(xa - mean).mean(axis=axes, keepdims=True)
    return (xa - mean) / np.sqrt(var + eps)


@register_op("InstanceNormalization", infer=same_as_input)
def instance_normalization(ctx: OpContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    eps = float(ctx.attr("epsilon", 1e-5))
    y = _normalize(x.astype(acc, copy=False), tuple(range(2, x.ndim)), eps)
    shape = _channel_shape(x)
    y = y * scale.astype(acc).reshape(shape) + bias.astype(acc).reshape(shape)
    return y.astype(x.dtype)


def _group_norm_infer(ctx: OpContext) -> list[OutSpec]:
    x, scale = ctx.inputs[0], ctx.inputs[1]
    assert x is not None and scale is not None
    groups = int(ctx.attr("num_groups", 0))
    if len(x.shape) < 2 or groups <= 0 or x.shape[1] % groups:
        raise ctx.fail(f"num_groups={groups} must be positive and divide the channel count of {list(x.shape)}")
    if scale.shape not in ((x.shape[1],), (groups,)):
        raise ctx.fail(f"scale of shape {list(scale.shape)} is neither per channel nor per group")
    return [(x.dtype, x.shape)]


@register_op("GroupNormalization", infer=_group_norm_infer)
def group_normalization(ctx: OpContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    acc = _stash_dtype(ctx, x.dtype)
    eps = float(ctx.attr("epsilon", 1e-5))
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[:2]
    grouped = x.astype(acc, copy=False).reshape((n, groups, -1))
    y = _normalize(grouped, (2,), eps).reshape(x.shape)
    # Opset 18 took one scale/bias per group, opset 21 one per channel.
    if scale.shape[0] != c:
        scale = np.repeat(scale, c // groups)
        bias = np.repeat(bias, c // groups)
    shape = _channel_shape(x)
    y = y * scale.astype(acc).reshape(shape) + bias.astype(acc).reshape(shape)
    return y.astype(x.dtype)


# -- LayerNormalization / RMSNormalization -----------------------------------


def _trailing_axes(ctx: OpContext, rank: int) -> tuple[int, ...]:
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), rank)
    return tuple(range(axis, rank))


def _layer_norm_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    axes = _trailing_axes(ctx, len(x.shape))
    stat_shape = x.shape[: axes[0]] + (1,) * len(axes)
    stash = from_onnx(int(ctx.attr("stash_type", 1)), ctx.node.label + " stash_type")
    return [(x.dtype, x.shape)] + [(stash, stat_shape)] * (len(ctx.node.outputs) - 1)


@register_op("LayerNormalization", infer=_layer_norm_infer)
def layer_normalization(
    ctx: OpContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None
) -> np.ndarray | tuple[np.ndarray, ...]:
    acc = _stash_dtype(ctx, x.dtype)
    stash = np.dtype(from_onnx(int(ctx.attr("stash_type", 1))))
    eps = float(ctx.attr("epsilon", 1e-5))
    axes = _trailing_axes(ctx, x.ndim)
    xa = x.astype(acc, copy=False)
    mean = xa.mean(axis=axes, keepdims=True)
    centered = xa - mean
    inv_std = 1.0 / np.sqrt(np.square(centered).mean(axis=axes, keepdims=True) + eps)
    y = centered * inv_std * scale.astype(acc)
    if bias is not None:
        y = y + bias.astype(acc)
    outputs = (y.astype(x.dtype), mean.astype(stash), inv_std.astype(stash))
    n_out = len(ctx.node.outputs)
    return outputs[0] if n_out == 1 else outputs[:n_out]


def _rms_norm_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    _trailing_axes(ctx, len(x.shape))  # a clear error for an axis out of range
    return [(x.dtype, x.shape)]


@register_op("RMSNormalization", infer=_rms_norm_infer)
def rms_normalization(ctx: OpContext, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    acc = _stash_dtype(ctx, x.dtype)
    eps = float(ctx.attr("epsilon", 1e-5))
    xa = x.astype(acc, copy=False)
    mean_square = np.square(xa).mean(axis=_trailing_axes(ctx, x.ndim), keepdims=True)
    y = xa / np.sqrt(mean_square + eps) * scale.astype(acc)
    return y.astype(x.dtype)


# -- LpNormalization, LRN, MeanVarianceNormalization --------------------------


def _lp_norm_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if int(ctx.attr("p", 2)) not in (1, 2):
        raise ctx.fail(f"p={ctx.attr('p')} is not supported (ONNX allows 1 or 2)")
    normalize_axis(ctx, int(ctx.attr("axis", -1)), len(x.shape))
    return [(x.dtype, x.shape)]


@register_op("LpNormalization", infer=_lp_norm_infer)
def lp_normalization(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.fail(f"p={p} is not supported (ONNX allows 1 or 2)")
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), x.ndim)
    xa = x.astype(accumulate_dtype(x.dtype), copy=False)
    norm = np.abs(xa).sum(axis=axis, keepdims=True) if p == 1 else np.sqrt(np.square(xa).sum(axis=axis, keepdims=True))
    # A zero vector stays zero instead of becoming NaN.
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0, xa / norm)
    return y.astype(x.dtype)


def _lrn_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if int(ctx.attr("size", 0)) < 1:
        raise ctx.fail(f"attribute size = {ctx.attr('size')}: the window must cover at least one channel")
    if len(x.shape) < 2:
        raise ctx.fail(f"input must be [N, C, ...], got shape {list(x.shape)}")
    return [(x.dtype, x.shape)]


@register_op("LRN", infer=_lrn_infer)
def lrn(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    size = int(ctx.attr("size"))
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    xa = x.astype(accumulate_dtype(x.dtype), copy=False)
    square = np.square(xa)
    # Channel c sums squares over [c - floor((size-1)/2), c + ceil((size-1)/2)].
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(square, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    channels = x.shape[1]
    window_sum = sum(padded[:, i : i + channels] for i in range(size))
    y = xa / (bias + alpha / size * window_sum) ** beta
    return y.astype(x.dtype)


@register_op("MeanVarianceNormalization", infer=same_as_input)
def mean_variance_normalization(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    axes_attr = ctx.attr("axes")
    axes = tuple(normalize_axis(ctx, int(a), x.ndim) for a in (axes_attr if axes_attr is not None else [0, 2, 3]))
    xa = x.astype(accumulate_dtype(x.dtype), copy=False)
    mean = xa.mean(axis=axes, keepdims=True)
    std = np.sqrt(np.maximum(np.square(xa).mean(axis=axes, keepdims=True) - np.square(mean), 0))
    return ((xa - mean) / (std + 1e-9)).astype(x.dtype)
