"""Lowering of ``ScaledDotProductAttention`` (rammer domain, made by :mod:`rammer.passes.fuse_attention`)
to the fused :func:`.kernels_attention.k_attention` rKernel.

rTasks cover (batch x heads, query-row blocks): with fewer rTasks than batch matrices each takes a run of
whole matrices; with more, each matrix's query rows are cut in whole micro-kernel panels (MR rows).  Q, KT,
V and the bias are read through their views (transposed or head-split views in place, broadcast dims at
stride 0), so the op adds no copies.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from rammer.ir import Node
from rammer.lower.views import View, broadcast_view
from rammer.ops.control import RAMMER_DOMAIN
from rammer.ops.fused_attention import OP_TYPE

from .kernels_attention import SCORE_BLOCK_FLOATS, panel_floats
from .kernels_gemm import PACK_FLOATS
from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, split_range
from .ukernel import MR

#: (domain, op type) of the rammer-domain ops this module lowers (the lowerer runs other
#: non-ONNX domains on the host).
DOMAIN_OPS = frozenset({(RAMMER_DOMAIN, OP_TYPE)})


def reason(lw: LowerContext, node: Node) -> str | None:
    """None when :func:`lower_attention` can lower ``node``, else why not."""
    g = lw.graph
    names = [i for i in node.inputs if i] + [node.outputs[0]]
    if any(g.value_info[n].dtype != "float32" for n in names):
        return "non-float32 operands (the fused attention kernel is float32)"
    q, kt = g.value_info[node.inputs[0]].shape, g.value_info[node.inputs[1]].shape
    if q[-1] == 0 or kt[-1] == 0:
        return "no keys or an empty head size"
    return None


#: K^T and V packed once per batch matrix (kernels_attention, the products then reading their A in
#: place) when both take at most this many floats of the vEU's scratch (1 MiB: 2,048 keys at head
#: size 64); None: every product packs its operands per call.
PREPACK_MAX_FLOATS: int | None = 256 * 1024


def block_rows(keys: int) -> int:
    """Query rows per score block: as many whole MR panels as keep rows x keys floats in
    :data:`.kernels_attention.SCORE_BLOCK_FLOATS` (at least one panel)."""
    return max(MR, SCORE_BLOCK_FLOATS // max(keys, 1) // MR * MR)


def _row_parts(rows: int, parts: int) -> list[tuple[int, int]]:
    panels = -(-rows // MR)
    parts = max(1, min(parts, panels))
    return [(p0 * MR, min(rows, p1 * MR)) for p0, p1 in (split_range(panels, parts, i) for i in range(parts))]


def lower_attention(lw: LowerContext, node: Node) -> None:
    out = lw.views[node.outputs[0]]
    if not out.is_dense():
        raise AssertionError(f"the output of '{node.name}' is not dense")  # the lowerer gives op outputs dense buffers
    batch = tuple(out.shape[:-2])
    S, Dv = out.shape[-2], out.shape[-1]
    q = lw.view(node.inputs[0])
    kt = lw.view(node.inputs[1])
    v = lw.view(node.inputs[2])
    D, Sk = kt.shape[-2], kt.shape[-1]
    q = broadcast_view(q, batch + (S, D))
    kt = broadcast_view(kt, batch + (D, Sk))
    v = broadcast_view(v, batch + (Sk, Dv))
    y = out.with_shape(batch + (S, Dv))
    has_bias = len(node.inputs) > 3 and bool(node.inputs[3])
    bias = broadcast_view(lw.view(node.inputs[3]), batch + (S, Sk)) if has_bias else None
    scale = float(node.attrs.get("scale", 1.0))
    views = [q, kt, v, y] + ([bias] if bias is not None else [])
    table_rel = []
    for idx in itertools.product(*(range(d) for d in batch)):
        offs = [sum(i * s for i, s in zip(idx, w.strides)) for w in views]
        table_rel.append(offs + ([0] if bias is None else []))
    table_rel = table_rel or [[0] * 5]
    nb = len(table_rel)
    block = block_rows(Sk)
    scratch = PACK_FLOATS + block * (Sk + 1) + 64
    panel_space = panel_floats(D, Sk) + panel_floats(Sk, Dv)
    panels = -1
    if PREPACK_MAX_FLOATS is not None and panel_space <= PREPACK_MAX_FLOATS:
        panels, scratch = scratch, scratch + panel_space

    def partition(n: int) -> list:
        if n <= nb:
            return [(b0, b1, 0, S) for b0, b1 in (split_range(nb, n, i) for i in range(n))]
        cuts = _row_parts(S, n // nb)
        return [(b, b + 1, r0, r1) for b in range(nb) for r0, r1 in cuts]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        bases = [ctx.locate(w) for w in views] + ([0] if bias is None else [])
        table = ctx.side.add_ints([base + rel for offs in table_rel for base, rel in zip(bases, offs)])
        scale_imm = ctx.side.add_floats([scale])
        b_rs, b_cs = (bias.strides[-2], bias.strides[-1]) if bias is not None else (0, 0)
        desc = ctx.side.add_ints([S, Sk, D, Dv, q.strides[-2], q.strides[-1], kt.strides[-2], kt.strides[-1],
                                  v.strides[-2], v.strides[-1], y.strides[-2], b_rs, b_cs, int(has_bias), scale_imm,
                                  table, block, panels])
        return [("k_attention", [desc, *part]) for part in parts]

    reads = tuple(sorted({w.buffer for w in views if w is not y}))
    flops = float(nb) * S * Sk * (2.0 * D + 2.0 * Dv + 5.0)
    nbytes = 4.0 * sum(math.prod(w.shape) if w is y else _distinct(w) for w in views)
    lw.add_op(CpuOp(node.name or OP_TYPE, "attention", (node,), reads, (y.buffer,), flops, nbytes, partition, emit,
                    scratch=scratch, blas=True,
                    extra={"S": S, "Sk": Sk, "D": D, "Dv": Dv, "batches": nb}))


def _distinct(v: View) -> int:
    """Elements a (possibly broadcast) view really reads."""
    return int(np.prod([d for d, s in zip(v.shape, v.strides) if s != 0], dtype=np.int64)) if v.shape else 1


LOWERINGS = {OP_TYPE: lower_attention}
REASONS = {OP_TYPE: reason}
