"""Linear algebra ops: MatMul, Gemm, Einsum, MatMulInteger, Det."""

from __future__ import annotations

import numpy as np

from .registry import OpContext, OutSpec, broadcast_shapes, register_op


def accumulate_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate products in: float16 sums lose too much in float16."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def matmul_shape(ctx: OpContext, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's output shape, including the 1-D promotion rules."""
    if not a or not b:
        raise ctx.fail(f"MatMul operands must have rank >= 1, got shapes {list(a)} and {list(b)}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ctx.fail(f"inner dimensions differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    out = batch + (a2[-2], b2[-1])
    # The dimensions added for 1-D operands are removed again.
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(ctx: OpContext) -> list[OutSpec]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    assert a is not None and b is not None
    return [(a.dtype, matmul_shape(ctx, a.shape, b.shape))]


def matmul_keep_dtype(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in the operands' dtype, accumulating float16 in float32."""
    acc = accumulate_dtype(a.dtype)
    return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False)).astype(a.dtype, copy=False)


@register_op("MatMul", infer=_matmul_infer)
def matmul(ctx: OpContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(matmul_keep_dtype(a, b))


# -- Gemm --------------------------------------------------------------------


def _gemm_infer(ctx: OpContext) -> list[OutSpec]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    assert a is not None and b is not None
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.fail(f"Gemm needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    m, k = a.shape[::-1] if ctx.attr("transA", 0) else a.shape
    kb, n = b.shape[::-1] if ctx.attr("transB", 0) else b.shape
    if k != kb:
        raise ctx.fail(f"inner dimensions differ: A gives K={k}, B gives K={kb}")
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    if c is not None and broadcast_shapes(ctx, [c.shape, (m, n)]) != (m, n):
        raise ctx.fail(f"C of shape {list(c.shape)} does not broadcast to the output [{m}, {n}]")
    return [(a.dtype, (m, n))]


@register_op("Gemm", infer=_gemm_infer)
def gemm(ctx: OpContext, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    if ctx.attr("transA", 0):
        a = a.T
    if ctx.attr("transB", 0):
        b = b.T
    # Integer Gemm stays exact when the scale factors are 1.
    exact_int = a.dtype.kind in "iu" and alpha == 1.0 and beta == 1.0
    acc = a.dtype if exact_int else np.dtype(np.float64 if a.dtype == np.float64 else np.float32)
    y = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
    if alpha != 1.0:
        y = y * acc.type(alpha)
    if c is not None and beta != 0.0:
        y = y + (c.astype(acc, copy=False) * acc.type(beta) if beta != 1.0 else c.astype(acc, copy=False))
    return np.asarray(y).astype(a.dtype, copy=False)


# -- Einsum ------------------------------------------------------------------


def _parse_einsum(ctx: OpContext, equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Output shape of an einsum equation (explicit or implicit output)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ctx.fail(f"equation '{equation}' has {len(terms)} operands but the node has {len(shapes)} inputs")
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipsis_shapes: list[tuple[int, ...]] = []
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        n_ellipsis = len(shape) - len(letters) if "..." in term else 0
        if n_ellipsis < 0 or ("..." not in term and len(letters) != len(shape)):
            raise ctx.fail(f"einsum term '{term}' does not match an input of rank {len(shape)}")
        head, _, tail = term.partition("...")
        if "..." in term:
            ellipsis_shapes.append(shape[len(head) : len(head) + n_ellipsis])
        dims = list(shape[: len(head)]) + list(shape[len(shape) - len(tail) :]) if "..." in term else list(shape)
        for letter, dim in zip(head + tail if "..." in term else term, dims):
            counts[letter] = counts.get(letter, 0) + 1
            if sizes.get(letter, 1) == 1:
                sizes[letter] = dim
            elif dim not in (1, sizes[letter]):
                raise ctx.fail(f"einsum index '{letter}' has sizes {sizes[letter]} and {dim}")
    ellipsis = broadcast_shapes(ctx, ellipsis_shapes) if ellipsis_shapes else ()
    if not arrow:
        # Implicit output: the ellipsis, then indices used once, alphabetically.
        rhs = ("..." if ellipsis_shapes else "") + "".join(sorted(k for k, v in counts.items() if v == 1))
    if ellipsis and "..." not in rhs:
        raise ctx.fail(f"equation '{equation}' broadcasts dimensions with '...' but its output drops them")
    out: list[int] = []
    head, has_ellipsis, tail = rhs.partition("...")
    for letter in head:
        out.append(sizes[letter])
    if has_ellipsis:
        out.extend(ellipsis)
    for letter in tail:
        out.append(sizes[letter])
    return tuple(out)


def _einsum_infer(ctx: OpContext) -> list[OutSpec]:
    present = [t for t in ctx.inputs if t is not None]
    shape = _parse_einsum(ctx, str(ctx.attr("equation")), [t.shape for t in present])
    return [(present[0].dtype, shape)]


@register_op("Einsum", infer=_einsum_infer)
def einsum(ctx: OpContext, *operands: np.ndarray) -> np.ndarray:
    dtype = operands[0].dtype
    acc = accumulate_dtype(dtype)
    y = np.einsum(str(ctx.attr("equation")).replace(" ", ""), *[x.astype(acc, copy=False) for x in operands])
    return np.asarray(y).astype(dtype, copy=False)


# -- MatMulInteger -----------------------------------------------------------


def _matmul_integer_infer(ctx: OpContext) -> list[OutSpec]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    assert a is not None and b is not None
    return [("int32", matmul_shape(ctx, a.shape, b.shape))]


@register_op("MatMulInteger", infer=_matmul_integer_infer)
def matmul_integer(
    ctx: OpContext,
    a: np.ndarray,
    b: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    a32 = a.astype(np.int32)
    b32 = b.astype(np.int32)
    if a_zero_point is not None:
        zp = a_zero_point.astype(np.int32)
        # A 1-D zero point of A is per row (the M axis).
        a32 = a32 - (zp.reshape(-1, 1) if zp.ndim == 1 and zp.size > 1 else zp)
    if b_zero_point is not None:
        # A 1-D zero point of B is per column (the N axis), which broadcasts as is.
        b32 = b32 - b_zero_point.astype(np.int32)
    return np.matmul(a32, b32).astype(np.int32)


# -- Det ---------------------------------------------------------------------


def _det_infer(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.fail(f"Det needs square matrices in the last two axes, got shape {list(x.shape)}")
    return [(x.dtype, x.shape[:-2])]


@register_op("Det", infer=_det_infer)
def det(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return np.asarray(np.linalg.det(x.astype(accumulate_dtype(x.dtype)))).astype(x.dtype)
