"""The recurrence of an LSTM/GRU/RNN layer as one rOperator of :func:`.kernels_rnn.k_rnn`.

:func:`.lower_rnn.lower_rnn` computes the input projection of every step (one GEMM per direction,
biases folded in) and hands the recurrence here when the layer uses ONNX's default activations and no
clip, peepholes or coupled input-forget gate (the others keep the rOperators per step).  The rTasks
are one per direction and block of batch rows: the steps of one chain run in one task row, which
writes Y, Y_h and Y_c itself (one rOperator, so each output buffer keeps a single writer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rammer.ir import Node
from rammer.lower.views import View

from . import kernels_rnn as kr
from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, split_range

_KINDS = {"LSTM": kr.LSTM, "GRU": kr.GRU, "RNN": kr.RNN}
_DEFAULTS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh"), "RNN": ("tanh",)}
#: Batch-1 to -3 recurrent GEMMs on a weight of at most this many floats read ONNX's rows of R eight at a
#: time (:func:`.kernels_rnn._dot_rows`); larger ones, which stream from L3 whatever the loop, keep the
#: one-dot-product-at-a-time loop, 5-10% faster there (hidden 512: 3-4 MB) in ``ci/micro_rnn.py``.
#: 0: never.
DOT_ROWS_MAX_FLOATS = 256 * 1024
#: A micro-kernel GEMM wants whole 4-row tiles: blocks of batch rows on a packed weight keep to them.
_MIN_PACKED_ROWS = 4

#: ``operand(d, n0, n1, rows)`` of :class:`.lower_rnn._WeightOperands`: (view, b_rs, b_cs, prepacked).
WeightOperand = Callable[[int, int, int, int], tuple[View, int, int, bool]]


@dataclass(frozen=True)
class RecurrentLayer:
    """What the recurrence kernel needs to know of the layer besides its buffers."""
    op: str
    layout: int
    seq: int
    batch: int
    hid: int
    kinds: list[str]
    linear_before_reset: bool
    #: The recurrent biases ``[dirs, gates * hid]`` (GRU with linear_before_reset reads Rb_h).
    recurrent_bias: np.ndarray


def fusable(op: str, acts: list[list[tuple[str, float | None, float | None]]] | None, clip: float | None,
            peephole: np.ndarray | None, input_forget: bool) -> bool:
    """Whether the layer's cell is the kernel's: default activations, no clip, peepholes or coupling."""
    if acts is None or clip is not None or peephole is not None or input_forget:
        return False
    return all(tuple(name for name, _, _ in per_dir) == _DEFAULTS[op] for per_dir in acts)


def _reading(weight: View, row_stride: int, packed: bool) -> int:
    """The kernel's way of reading one recurrent weight operand (``kernels_rnn.W_*``)."""
    if packed:
        return kr.W_PACKED
    k, n = weight.shape
    if row_stride == 1 and k * n <= DOT_ROWS_MAX_FLOATS:
        return kr.W_DOT_ROWS
    return kr.W_STRIDED


def add_recurrence(lw: LowerContext, node: Node, layer: RecurrentLayer, projections: list[View],
                   operand: WeightOperand, states: list[tuple[View | None, View | None]]) -> None:
    """One rOperator running every step of every direction of ``node`` from its input projections."""
    kind = _KINDS[layer.op]
    hid, batch, seq = layer.hid, layer.batch, layer.seq
    width = kr.GATES[kind] * hid
    dirs = len(layer.kinds)
    split_gemm = layer.op == "GRU" and not layer.linear_before_reset
    weights = []
    for d in range(dirs):
        first = operand(d, 0, 2 * hid if split_gemm else width, batch)
        second = operand(d, 2 * hid, width, batch) if split_gemm else first
        weights.append((first, second))
    rbh = [lw.const_view(np.ascontiguousarray(layer.recurrent_bias[d, 2 * hid:3 * hid]))
           if layer.op == "GRU" and layer.linear_before_reset else None for d in range(dirs)]
    outs = list(node.outputs) + [""] * 3
    y, y_h, y_c = (lw.views[name] if name else None for name in outs[:3])
    if kind != kr.LSTM:
        y_c = None
    packed = weights[0][0][3]
    chunk_rows = _MIN_PACKED_ROWS if packed else 1

    def partition(n: int) -> list:
        chunks = max(1, min(n // dirs, batch // chunk_rows))
        return [(d,) + split_range(batch, chunks, i) for d in range(dirs) for i in range(chunks)]

    def out_words(locate: Callable[[View], int], view: View | None, d: int, time_axis: bool) -> list[int]:
        """[offset, (time stride,) batch stride, column stride] of direction d's part of Y / Y_h / Y_c."""
        if view is None:
            return [-1, 0, 0, 0] if time_axis else [-1, 0, 0]
        st = view.strides
        if time_axis:  # Y: [seq, dirs, batch, hid] or layout 1 [batch, seq, dirs, hid]
            t_s, d_s, b_s = (st[0], st[1], st[2]) if layer.layout == 0 else (st[1], st[2], st[0])
            return [locate(view) + d * d_s, t_s, b_s, st[3]]
        d_s, b_s = (st[0], st[1]) if layer.layout == 0 else (st[1], st[0])
        return [locate(view) + d * d_s, b_s, st[2]]

    def state_words(locate: Callable[[View], int], view: View | None) -> list[int]:
        """[offset, batch stride, column stride] of an initial state ([batch, hid] view), or none."""
        return [-1, 0, 0] if view is None else [locate(view), view.strides[0], view.strides[1]]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        descs = []
        for d, kind_name in enumerate(layer.kinds):
            (w1, w1_rs, w1_cs, w1_packed), (w2, w2_rs, w2_cs, w2_packed) = weights[d]
            h0, c0 = states[d]
            words = [0] * kr.DESC_LEN
            words[kr.D_KIND], words[kr.D_SEQ], words[kr.D_BATCH], words[kr.D_HID] = kind, seq, batch, hid
            words[kr.D_REVERSE] = int(kind_name == "reverse")
            words[kr.D_LBR] = int(layer.linear_before_reset)
            words[kr.D_GX] = ctx.locate(projections[d])
            words[kr.D_W1:kr.D_W1 + 4] = [ctx.locate(w1), w1_rs, w1_cs, _reading(w1, w1_rs, w1_packed)]
            words[kr.D_W2:kr.D_W2 + 4] = [ctx.locate(w2), w2_rs, w2_cs, _reading(w2, w2_rs, w2_packed)]
            rb = rbh[d]
            words[kr.D_RBH] = ctx.locate(rb) if rb is not None else -1
            words[kr.D_H0:kr.D_H0 + 3] = state_words(ctx.locate, h0)
            words[kr.D_C0:kr.D_C0 + 3] = state_words(ctx.locate, c0)
            words[kr.D_Y:kr.D_Y + 4] = out_words(ctx.locate, y, d, True)
            words[kr.D_YH:kr.D_YH + 3] = out_words(ctx.locate, y_h, d, False)
            words[kr.D_YC:kr.D_YC + 3] = out_words(ctx.locate, y_c, d, False)
            descs.append(ctx.side.add_ints(words))
        return [("k_rnn", [descs[d], b0, b1]) for d, b0, b1 in parts]

    reads = {v.buffer for v in projections}
    for (w1, _, _, _), (w2, _, _, _) in weights:
        reads |= {w1.buffer, w2.buffer}
    reads |= {v.buffer for v in rbh if v is not None}
    reads |= {v.buffer for pair in states for v in pair if v is not None}
    writes = {v.buffer for v in (y, y_h, y_c) if v is not None}
    if not writes:
        return
    macs = float(seq * batch * width * hid * dirs)
    nbytes = 4.0 * seq * dirs * (width * hid + 2 * batch * width)
    lw.add_op(CpuOp(f"{node.name or layer.op}:recurrence", "rnn", (node,), tuple(sorted(reads - writes)),
                    tuple(sorted(writes)), 2.0 * macs, nbytes, partition, emit,
                    scratch=kr.scratch_floats(kind, batch, hid)))
