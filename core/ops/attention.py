"""Attention (opsets 23/24, plus the window attributes of later opsets) and
RotaryEmbedding (opset 23).

Attention works on ``[batch, heads, seq, head_size]`` internally; 3-D inputs
``[batch, seq, heads * head_size]`` are split into heads by ``q_num_heads`` /
``kv_num_heads`` and merged back for ``Y``.  Every masking source (attn_mask,
is_causal, nonpad_kv_seqlen, sliding windows) is folded into one additive bias
of 0 / -inf (plus float mask values) that broadcasts against the scores.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import from_onnx
from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, register_op


def _heads(ctx: OpContext, shape: tuple[int, ...], attr: str) -> tuple[int, int, int]:
    """(heads, seq, head_size) of a 3-D or 4-D Q/K/V shape."""
    if len(shape) == 4:
        return shape[1], shape[2], shape[3]
    if len(shape) != 3:
        raise ctx.fail(f"Q, K and V must be 3-D or 4-D, got shape {list(shape)}")
    heads = ctx.attr(attr)
    if not heads:
        raise ctx.fail(f"3-D inputs need the '{attr}' attribute")
    if shape[2] % int(heads):
        raise ctx.fail(f"hidden size {shape[2]} is not divisible by {attr}={heads}")
    return int(heads), shape[1], shape[2] // int(heads)


def _attention_infer(ctx: OpContext) -> list[OutSpec]:
    q, k, v = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    assert q is not None and k is not None and v is not None
    if not len(q.shape) == len(k.shape) == len(v.shape):
        raise ctx.fail(f"Q, K and V must have the same rank, got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    batch = q.shape[0]
    hq, sq, dq = _heads(ctx, q.shape, "q_num_heads")
    hk, skv, dk = _heads(ctx, k.shape, "kv_num_heads")
    hv, _, dv = _heads(ctx, v.shape, "kv_num_heads")
    if dq != dk or hk != hv or hq % hk:
        raise ctx.fail(
            f"incompatible heads: Q {hq}x{dq}, K {hk}x{dk}, V {hv}x{dv} "
            "(Q and K head sizes must match and Q heads must be a multiple of KV heads)"
        )
    _, sv, _ = _heads(ctx, v.shape, "kv_num_heads")
    if k.shape[0] != batch or v.shape[0] != batch or sv != skv:
        raise ctx.fail(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} must share the batch size, "
                       f"and K and V the sequence length")
    past = ctx.inputs[4] if len(ctx.inputs) > 4 else None
    past_v = ctx.inputs[5] if len(ctx.inputs) > 5 else None
    if (past is None) != (past_v is None):
        raise ctx.fail("past_key and past_value must be given together")
    if past is not None and past_v is not None:
        if len(past.shape) != 4 or len(past_v.shape) != 4 or past.shape[2] != past_v.shape[2] or \
                tuple(past.shape[:2]) + (past.shape[3],) != (batch, hk, dk) or \
                tuple(past_v.shape[:2]) + (past_v.shape[3],) != (batch, hv, dv):
            raise ctx.fail(f"past_key {list(past.shape)} / past_value {list(past_v.shape)} must be "
                           f"[{batch}, {hk}, past_len, {dk}] / [{batch}, {hv}, past_len, {dv}]")
    total = skv + (past.shape[2] if past is not None else 0)
    mask = ctx.inputs[3] if len(ctx.inputs) > 3 else None
    if mask is not None:
        full = (batch, hq, sq, total)
        m = tuple(mask.shape)
        # The mask's last dim may be shorter than the total key length (the rest is masked).
        ok = 1 <= len(m) <= 4 and m[-1] <= total and all(a in (1, b) for a, b in zip(m[-2::-1], full[-2::-1]))
        if not ok:
            raise ctx.fail(f"attn_mask of shape {list(m)} does not broadcast to [batch, heads, q_len, "
                           f"total_len] = {list(full)}")
    lens = ctx.inputs[6] if len(ctx.inputs) > 6 else None
    if lens is not None and tuple(lens.shape) != (batch,):
        raise ctx.fail(f"nonpad_kv_seqlen of shape {list(lens.shape)} must be [{batch}] (one length per batch entry)")
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ctx.fail(f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3")
    y_shape = (batch, hq, sq, dv) if len(q.shape) == 4 else (batch, sq, hq * dv)
    specs: list[OutSpec] = [
        (q.dtype, y_shape),
        (k.dtype, (batch, hk, total, dk)),
        (v.dtype, (batch, hv, total, dv)),
        (q.dtype, (batch, hq, sq, total)),
    ]
    return specs[: max(1, len(ctx.node.outputs))]


def _to_4d(x: np.ndarray, heads: int) -> np.ndarray:
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _mask_bias(mask: np.ndarray, kv_len: int, dtype: np.dtype) -> np.ndarray:
    """An attn_mask as an additive bias, padded to the total key length."""
    if mask.dtype == np.bool_:
        bias = np.where(mask, dtype.type(0), dtype.type(-np.inf))
    else:
        bias = mask.astype(dtype)
    short = kv_len - bias.shape[-1]
    if short > 0:
        # Keys past the mask's end (e.g. freshly appended ones) are masked out.
        bias = np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, short)], constant_values=-np.inf)
    return bias


def _position_bias(
    q_len: int, kv_len: int, offset: int | np.ndarray, causal: bool, left: int, right: int, dtype: np.dtype
) -> np.ndarray | None:
    """Causal and sliding-window bias; query i sits at absolute position i + offset.

    ``offset`` is the cache length (a scalar) or per batch entry (an array),
    giving a (q, kv) or (batch, 1, q, kv) bias.
    """
    if not causal and left < 0 and right < 0:
        return None
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    offsets = np.reshape(offset, (-1, 1, 1)) if np.ndim(offset) else int(offset)
    diff = i + offsets - j  # how far key j lies behind the query
    allowed = np.ones(np.shape(diff), dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    bias = np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    return bias.reshape(-1, 1, q_len, kv_len) if np.ndim(offset) else bias


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row that is all -inf gives zeros, not NaN."""
    row_max = scores.max(axis=-1, keepdims=True)
    safe_max = np.where(np.isneginf(row_max), 0, row_max)
    e = np.exp(scores - safe_max)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


@register_op("Attention", infer=_attention_infer)
def attention(
    ctx: OpContext,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
) -> tuple[np.ndarray | None, ...]:
    dtype = q.dtype
    # ONNX defines every step in the input dtype (softmax_precision aside);
    # following it keeps float16 results within the tolerance of other runtimes.
    acc = dtype
    is_3d = q.ndim == 3
    hq = int(ctx.attr("q_num_heads", 0)) if is_3d else q.shape[1]
    hkv = int(ctx.attr("kv_num_heads", 0)) if is_3d else k.shape[1]
    q4, k4, v4 = _to_4d(q, hq), _to_4d(k, hkv), _to_4d(v, hkv)
    present_k = k4 if past_key is None else np.concatenate([past_key, k4], axis=2)
    present_v = v4 if past_value is None else np.concatenate([past_value, v4], axis=2)
    q_len, kv_len = q4.shape[2], present_k.shape[2]

    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(q4.shape[3]) if scale is None else float(scale)
    # sqrt(scale) on both sides, as ONNX specifies, keeps fp16 products in range.
    root = acc.type(np.sqrt(scale))
    qa = q4.astype(acc) * root
    ka = present_k.astype(acc) * root
    va = present_v.astype(acc)
    if hq != hkv:  # grouped-query attention: each KV head serves hq/hkv query heads
        ka = np.repeat(ka, hq // hkv, axis=1)
        va = np.repeat(va, hq // hkv, axis=1)
    scores = qa @ ka.transpose(0, 1, 3, 2)
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        # Before the mask, so masked positions stay -inf.
        scores = softcap * np.tanh(scores / softcap)

    bias = np.zeros((q_len, kv_len), dtype=acc)
    if attn_mask is not None:
        bias = bias + _mask_bias(attn_mask, kv_len, acc)
    if past_key is not None or nonpad_kv_seqlen is None:
        offset: int | np.ndarray = past_key.shape[2] if past_key is not None else 0
    else:
        offset = nonpad_kv_seqlen.astype(np.int64).reshape(-1) - q_len
    position = _position_bias(
        q_len,
        kv_len,
        offset,
        bool(ctx.attr("is_causal", 0)),
        int(ctx.attr("left_window_size", -1)),
        int(ctx.attr("right_window_size", -1)),
        acc,
    )
    if position is not None:
        bias = bias + position
    if nonpad_kv_seqlen is not None:
        valid = np.arange(kv_len)[None, :] < nonpad_kv_seqlen.astype(np.int64).reshape(-1, 1)
        bias = bias + np.where(valid, acc.type(0), acc.type(-np.inf)).reshape(-1, 1, 1, kv_len)

    biased = scores + bias
    precision = ctx.attr("softmax_precision")
    soft_dtype = np.dtype(from_onnx(int(precision))) if precision else acc
    probs = _softmax_rows(biased.astype(np.promote_types(soft_dtype, acc)))
    # A query with no attendable key outputs zeros (decided on the bias, not
    # on the scores, which may hold inf or NaN).
    fully_masked = np.isneginf(bias.max(axis=-1, keepdims=True))
    probs = np.where(fully_masked, 0, probs)
    # Round the probabilities to the input dtype as ONNX's definition does.
    probs = probs.astype(dtype).astype(acc)
    y = probs @ va
    if is_3d:
        b, h, s, d = y.shape
        y = y.transpose(0, 2, 1, 3).reshape(b, s, h * d)

    outputs: list[np.ndarray | None] = [y.astype(dtype), present_k, present_v, None]
    if len(ctx.node.outputs) > 3 and ctx.node.outputs[3]:
        mode = int(ctx.attr("qk_matmul_output_mode", 0))
        qk = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
        if qk is None:
            raise ctx.fail(f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3")
        outputs[3] = np.broadcast_to(qk, scores.shape).astype(dtype)
    return tuple(outputs[: max(1, len(ctx.node.outputs))])


# -- RotaryEmbedding -----------------------------------------------------------


def _rotary_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if len(x.shape) == 3 and not ctx.attr("num_heads"):
        raise ctx.fail("3-D input needs the 'num_heads' attribute")
    if len(x.shape) not in (3, 4):
        raise ctx.fail(f"input must be 3-D or 4-D, got shape {list(x.shape)}")
    if len(x.shape) == 4:
        batch, seq, head = x.shape[0], x.shape[2], x.shape[3]
    else:
        heads = int(ctx.attr("num_heads"))
        if heads <= 0 or x.shape[2] % heads:
            raise ctx.fail(f"num_heads={heads} must be positive and divide the hidden size {x.shape[2]}")
        batch, seq, head = x.shape[0], x.shape[1], x.shape[2] // heads
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or head
    if rot > head or rot % 2:
        raise ctx.fail(f"rotary_embedding_dim={rot} must be even and at most the head size {head}")
    cos, sin = ctx.inputs[1], ctx.inputs[2]
    ids = ctx.inputs[3] if len(ctx.inputs) > 3 else None
    for what, cache in (("cos_cache", cos), ("sin_cache", sin)):
        if cache is None:
            continue
        want = "[max_position, rot/2]" if ids is not None else "[batch, seq, rot/2]"
        ok = (len(cache.shape) == 2 if ids is not None else tuple(cache.shape[:2]) == (batch, seq)
              and len(cache.shape) == 3) and cache.shape[-1] == rot // 2
        if not ok:
            raise ctx.fail(f"{what} of shape {list(cache.shape)} must be {want} with rot/2 = {rot // 2}")
    if ids is not None and tuple(ids.shape) != (batch, seq):
        raise ctx.fail(f"position_ids of shape {list(ids.shape)} must be [batch, seq] = [{batch}, {seq}]")
    return [(x.dtype, x.shape)]


@register_op("RotaryEmbedding", infer=_rotary_infer)
def rotary_embedding(
    ctx: OpContext,
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
) -> np.ndarray:
    acc = accumulate_dtype(x.dtype)
    # Work in [batch, seq, heads, head_size].
    if x.ndim == 4:
        xs = x.transpose(0, 2, 1, 3)
    else:
        heads = int(ctx.attr("num_heads"))
        xs = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    xs = xs.astype(acc)
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or xs.shape[3]
    if position_ids is not None:
        ids = np.asarray(position_ids)
        if ids.size and (ids.min() < 0 or ids.max() >= cos_cache.shape[0]):
            raise ctx.fail(f"position_ids hold {int(ids.min() if ids.min() < 0 else ids.max())}, out of range for "
                           f"caches of {cos_cache.shape[0]} positions")
        cos_cache, sin_cache = cos_cache[ids], sin_cache[ids]
    if cos_cache.shape[-1] != rot // 2 or sin_cache.shape[-1] != rot // 2:
        raise ctx.fail(
            f"cos/sin caches must have rotary_embedding_dim/2 = {rot // 2} columns, got {cos_cache.shape[-1]}"
        )
    cos = cos_cache.astype(acc)[:, :, None, :]
    sin = sin_cache.astype(acc)[:, :, None, :]
    rotated = xs[..., :rot]
    if int(ctx.attr("interleaved", 0)):
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = rotated[..., : rot // 2], rotated[..., rot // 2 :]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if int(ctx.attr("interleaved", 0)):
        rotated = np.stack([real, imag], axis=-1).reshape(rotated.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, xs[..., rot:]], axis=-1)
    out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
    return np.ascontiguousarray(out, dtype=x.dtype)
