"""ScaledDotProductAttention (rammer domain): the attention block that :mod:`rammer.passes.fuse_attention`
recognises in exported transformers, as one op::

    Y = Softmax(MatMul(Q, KT) * scale + bias, axis=-1) @ V

Inputs ``Q [..., S, D]``, ``KT [..., D, Sk]`` (the keys already transposed, as the MatMul of the
exported graph reads them), ``V [..., Sk, Dv]`` and the optional additive ``bias`` (attention mask,
relative position bias) that broadcasts to ``[..., S, Sk]``; the leading (batch, head) dims broadcast
as MatMul's do.  ``scale`` (float, default 1) multiplies the scores before the bias is added; a
``Div`` by a constant in the source graph becomes its reciprocal (one rounding step apart).  The
output is ``[..., S, Dv]``.  Everything is float32, computed in the order the unfused graph does, so
the ``reference`` backend running this op matches the original ops up to the rounding of the scale.
Not an ONNX op: it only exists in graphs that a backend's pass pipeline produced.
"""

from __future__ import annotations

import numpy as np

from .control import RAMMER_DOMAIN
from .registry import OpContext, OutSpec, register_op

#: The op's name in :data:`RAMMER_DOMAIN`.
OP_TYPE = "ScaledDotProductAttention"


def attention_batch_shape(ctx: OpContext) -> tuple[int, ...]:
    """The broadcast (batch, head...) dims of Q, KT and V; a clear error when they do not broadcast."""
    q, kt, v = ctx.input(0), ctx.input(1), ctx.input(2)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(q.shape[:-2], kt.shape[:-2], v.shape[:-2]))
    except ValueError:
        raise ctx.fail(f"the batch dims of Q {list(q.shape)}, KT {list(kt.shape)} and V {list(v.shape)} "
                       "do not broadcast") from None


def _infer(ctx: OpContext) -> list[OutSpec]:
    q, kt, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if min(len(q.shape), len(kt.shape), len(v.shape)) < 2:
        raise ctx.fail(f"Q {list(q.shape)}, KT {list(kt.shape)} and V {list(v.shape)} must be at least 2-D")
    if q.shape[-1] != kt.shape[-2] or kt.shape[-1] != v.shape[-2]:
        raise ctx.fail(f"Q {list(q.shape)} x KT {list(kt.shape)} x V {list(v.shape)}: the head sizes "
                       "(Q's last dim, KT's second last) and key counts (KT's last dim, V's second last) must match")
    batch = attention_batch_shape(ctx)
    scores = batch + (q.shape[-2], kt.shape[-1])
    if ctx.has_input(3):
        bias = ctx.input(3)
        try:
            broadcast = np.broadcast_shapes(tuple(bias.shape), scores)
        except ValueError:
            broadcast = None
        if broadcast != scores:
            raise ctx.fail(f"bias of shape {list(bias.shape)} does not broadcast to the scores' shape {list(scores)}")
    return [(q.dtype, batch + (q.shape[-2], v.shape[-1]))]


@register_op(OP_TYPE, infer=_infer, domain=RAMMER_DOMAIN)
def scaled_dot_product_attention(ctx: OpContext, q: np.ndarray, kt: np.ndarray, v: np.ndarray,
                                 bias: np.ndarray | None = None) -> np.ndarray:
    scores = np.matmul(q, kt)
    scale = ctx.attr("scale")
    if scale is not None:
        scores = scores * scores.dtype.type(scale)
    if bias is not None:
        scores = scores + bias
    # Softmax as the ONNX op defines it (a row of -inf gives NaN there too).
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return np.matmul(p, v).astype(q.dtype, copy=False)
