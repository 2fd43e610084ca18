"""LSTM, GRU and RNN nodes as rOperators: one input-projection GEMM per
direction and, per time step, a recurrent GEMM with the step's input
projection fused as its epilogue plus one fused elementwise cell program.

The cell is the FusionStitching case: all gate activations, the state
update and the output of one step are one register program over
``[batch, hidden]`` that reads the gate columns in place (strided views of
the GEMM's output) and never stores a gate.  Y, Y_h and Y_c are assembled by
one copy rOperator at the end (every buffer has a single writer, which the
dependency analysis relies on).

That per-step form is kept for the layers :func:`.lower_rnn_fused.fusable` refuses (activations other
than ONNX's defaults, clip, peepholes, input_forget); the others run their recurrence as one
rOperator of :mod:`.kernels_rnn` after the same input projections (``FUSED_RECURRENCE``).
"""

from __future__ import annotations

import numpy as np

from rammer.ir import Node
from rammer.lower.views import View

from .kernels_gemm import prepack_b, prepacked_ok
from .lower_common import GemmSpec, ew_op, gemm_op
from .lower_context import LowerContext
from .lower_rnn_fused import RecurrentLayer, add_recurrence, fusable
from .lower_views import copy_op, multi_copy_op
from .program import EwProgram

#: Pack the weights of GEMMs with enough rows at compile time (:class:`_WeightOperands`); off, every
#: GEMM reads strided views of the constants (``ci/micro_gemm.py --family rnn --before`` compares).
PACK_WEIGHTS = True
#: Run the recurrence of a layer with the default activations as one rKernel per direction and block of
#: batch rows (:mod:`.kernels_rnn`); off, as rOperators per time step (``ci/micro_rnn.py --before``).
FUSED_RECURRENCE = True
RNN_OPS = frozenset({"LSTM", "GRU", "RNN"})
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
# ONNX's activation parameters and their defaults (alpha, beta); None = unused.
_PARAMS = {"relu": (None, None), "tanh": (None, None), "sigmoid": (None, None), "softsign": (None, None),
           "softplus": (None, None), "affine": (1.0, 0.0), "leakyrelu": (0.01, None),
           "thresholdedrelu": (1.0, None), "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None)}


class _WeightOperands:
    """A constant ``[dirs, N_total, K]`` weight (W or R) as the B operands ``W[d, n0:n1]^T`` (K x N) of
    the GEMMs that read it.  A GEMM of at least the micro-kernel's rows (an RNN at batch 4 and more,
    every input projection of a sequence) gets a copy packed once at compile time in the
    micro-kernel's panel layout: unpacked, the transposed weight was packed again on every time step,
    most of a batch-8 LSTM's run.  Fewer rows (batch 1) stream strided views of the one constant through
    the GEMV loops, which are bound by reading the weight either way."""

    def __init__(self, lw: LowerContext, mats: np.ndarray) -> None:
        self.lw, self.mats = lw, mats
        self._plain: View | None = None
        self._packed: dict[tuple[int, int, int], View] = {}

    def operand(self, d: int, n0: int, n1: int, rows: int) -> tuple[View, int, int, bool]:
        """(view, b_rs, b_cs, prepacked) of ``W[d, n0:n1]^T`` for a GEMM of ``rows`` rows."""
        k = self.mats.shape[2]
        n = n1 - n0
        if PACK_WEIGHTS and prepacked_ok(rows, n, k):
            found = self._packed.get((d, n0, n1))
            if found is None:
                packed = self.lw.const_view(prepack_b(np.ascontiguousarray(self.mats[d, n0:n1].T)))
                found = self._packed[(d, n0, n1)] = View(packed.buffer, "float32", (k, n), (n, 1), packed.offset)
            return found, n, 1, True
        if self._plain is None:
            self._plain = self.lw.const_view(self.mats)
        off = self._plain.offset + (d * self.mats.shape[1] + n0) * k
        return View(self._plain.buffer, "float32", (k, n), (1, k), off), 1, k, False


def _activations(node: Node, dirs: int) -> list[list[tuple[str, float | None, float | None]]] | None:
    per = len(_DEFAULT_ACTS[node.op_type])
    names = [a.decode() if isinstance(a, bytes) else str(a) for a in (node.attr("activations") or [])]
    if not names:
        names = _DEFAULT_ACTS[node.op_type] * dirs
    elif len(names) == per and dirs == 2:
        names = names * 2
    if len(names) != per * dirs or any(n.lower() not in _PARAMS for n in names):
        return None
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    acts = []
    for name in names:
        da, db = _PARAMS[name.lower()]
        alpha = float(alphas.pop(0)) if da is not None and alphas else da
        beta = float(betas.pop(0)) if db is not None and betas else db
        acts.append((name.lower(), alpha, beta))
    return [acts[d * per:(d + 1) * per] for d in range(dirs)]


def _apply(prog: EwProgram, act: tuple[str, float | None, float | None], x: int, clip: float | None) -> int:
    if clip is not None:
        x = prog.op("CLIP", x, imms=(-clip, clip))
    name, a, b = act
    simple = {"relu": "RELU", "tanh": "TANH", "sigmoid": "SIGMOID", "softsign": "SOFTSIGN", "softplus": "SOFTPLUS"}
    if name in simple:
        return prog.op(simple[name], x)
    if name == "affine":
        return prog.op("AFFINE", x, imms=(a, b))
    if name == "leakyrelu":
        return prog.op("LEAKY", x, imms=(a,))
    if name == "thresholdedrelu":
        return prog.op("THRESHOLDED", x, imms=(a,))
    if name == "scaledtanh":
        return prog.op("AFFINE", prog.op("TANH", prog.op("AFFINE", x, imms=(b, 0.0))), imms=(a, 0.0))
    if name == "hardsigmoid":
        return prog.op("HARDSIGMOID", x, imms=(a, b))
    if name == "elu":
        return prog.op("ELU", x, imms=(a,))
    raise AssertionError(name)


def reason(lw: LowerContext, node: Node) -> str | None:
    g = lw.graph
    ins = [g.value_info[i] if i else None for i in node.inputs]
    if any(t is not None and t.dtype != "float32" for k, t in enumerate(ins) if k != 4):
        return "non-float32 recurrent layer"
    for k in (1, 2, 3, 7):
        if k < len(node.inputs) and node.inputs[k] and node.inputs[k] not in g.initializers:
            return "weights computed at run time"
    if len(node.inputs) > 4 and node.inputs[4]:
        lens = g.initializers.get(node.inputs[4])
        seq = ins[0].shape[0 if int(node.attr("layout", 0)) == 0 else 1]
        if lens is None or np.any(lens != seq):
            return "sequence_lens shorter than the sequence (or computed at run time)"
    dirs = 2 if node.attr("direction", "forward") in ("bidirectional", b"bidirectional") else 1
    if _activations(node, dirs) is None:
        return "unsupported activations"
    return None


def lower_rnn(lw: LowerContext, node: Node) -> None:
    g = lw.graph
    op = node.op_type
    gates = _GATES[op]
    layout = int(node.attr("layout", 0))
    xin = g.value_info[node.inputs[0]]
    seq, batch = (xin.shape[0], xin.shape[1]) if layout == 0 else (xin.shape[1], xin.shape[0])
    isz = xin.shape[2]
    w = np.asarray(g.initializers[node.inputs[1]], dtype=np.float32)
    r = np.asarray(g.initializers[node.inputs[2]], dtype=np.float32)
    dirs, hid = w.shape[0], r.shape[-1]
    direction = node.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    kinds = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    acts = _activations(node, dirs)
    clip = node.attr("clip")
    clip = None if clip is None else float(clip)
    width = gates * hid
    bias = (np.asarray(g.initializers[node.inputs[3]], dtype=np.float32)
            if len(node.inputs) > 3 and node.inputs[3] else np.zeros((dirs, 2 * width), np.float32))
    wb, rb = bias[:, :width], bias[:, width:]
    peep = (np.asarray(g.initializers[node.inputs[7]], dtype=np.float32)
            if op == "LSTM" and len(node.inputs) > 7 and node.inputs[7] else None)
    lbr = bool(node.attr("linear_before_reset", 0))
    input_forget = bool(node.attr("input_forget", 0))
    name = node.name or op

    # X in layout 0 as a dense [seq * batch, input] matrix.
    x = lw.view(node.inputs[0])
    if layout == 1:
        x = View(x.buffer, x.dtype, (seq, batch, isz), (x.strides[1], x.strides[0], x.strides[2]), x.offset)
    if not x.is_dense():
        dense = lw.new_dense("float32", (seq, batch, isz))
        lw.add_op(copy_op(lw, f"{name}:x", (node,), x, dense))
        x = dense
    x2 = x.with_shape((seq * batch, isz))

    def state(index: int, d: int) -> View | None:
        if index >= len(node.inputs) or not node.inputs[index]:
            return None
        v = lw.view(node.inputs[index])  # [dirs, batch, hid] or layout 1 [batch, dirs, hid]
        if layout == 0:
            return View(v.buffer, v.dtype, (batch, hid), (v.strides[1], v.strides[2]), v.offset + d * v.strides[0])
        return View(v.buffer, v.dtype, (batch, hid), (v.strides[0], v.strides[2]), v.offset + d * v.strides[1])

    w_ops = _WeightOperands(lw, w)
    r_ops = _WeightOperands(lw, r)
    fused = FUSED_RECURRENCE and fusable(op, acts, clip, peep, input_forget)
    projections: list[View] = []
    hs: list[list[View]] = []
    finals_h: list[View] = []
    finals_c: list[View] = []
    for d, kind in enumerate(kinds):
        # 1. The input projection of every step: G = X W^T + biases folded there.
        in_bias = wb[d] + rb[d]
        if op == "GRU":
            in_bias = wb[d].copy()
            in_bias[:2 * hid] += rb[d][:2 * hid]
            if not lbr:
                in_bias[2 * hid:] += rb[d][2 * hid:]
        gx = lw.new_dense("float32", (seq * batch, width))
        wd, w_rs, w_cs, w_packed = w_ops.operand(d, 0, width, seq * batch)
        spec = GemmSpec(seq * batch, width, isz, x2, isz, 1, wd, w_rs, w_cs, gx, width, [(0, 0, 0)],
                        b_prepacked=w_packed)
        epi = EwProgram((seq * batch, width))
        epi.store(epi.op("ADD", epi.load(gx), epi.load(lw.const_view(in_bias))), gx)
        lw.add_op(gemm_op(lw, f"{name}:input{d}", (node,), spec, epi, ("matrix",)))
        if fused:
            projections.append(gx)
            continue

        h_prev, c_prev = state(5, d), state(6, d) if op == "LSTM" else None
        outs: list[View] = []
        for s in range(seq):
            t = s if kind == "forward" else seq - 1 - s
            g_t = View(gx.buffer, "float32", (batch, width), (width, 1), gx.offset + t * batch * width)
            h_new = lw.new_dense("float32", (batch, hid))
            if op == "GRU":
                h_prev = _gru_step(lw, name, node, d, s, g_t, h_prev, h_new, r_ops, rb[d], acts[d], clip, lbr, batch,
                                   hid)
            else:
                pre = g_t
                if h_prev is not None:
                    # gates = h_prev R^T + (the step's input projection), as the GEMM's epilogue
                    pre = lw.new_dense("float32", (batch, width))
                    rd, r_rs, r_cs, r_packed = r_ops.operand(d, 0, width, batch)
                    spec = GemmSpec(batch, width, hid, h_prev, h_prev.strides[0], h_prev.strides[1], rd, r_rs, r_cs,
                                    pre, width, [(0, 0, 0)], b_prepacked=r_packed)
                    epi = EwProgram((batch, width))
                    epi.store(epi.op("ADD", epi.load(pre), epi.load(g_t)), pre)
                    lw.add_op(gemm_op(lw, f"{name}:d{d}t{s}", (node,), spec, epi, ("matrix",)))
                cols = [View(pre.buffer, "float32", (batch, hid), (pre.strides[0], 1), pre.offset + k * hid)
                        for k in range(gates)]
                prog = EwProgram((batch, hid))
                if op == "RNN":
                    prog.store(_apply(prog, acts[d][0], prog.load(cols[0]), clip), h_new)
                else:
                    c_new = lw.new_dense("float32", (batch, hid))
                    _lstm_cell(lw, prog, cols, c_prev, acts[d], clip, peep[d] if peep is not None else None,
                               input_forget, h_new, c_new, hid)
                    finals_c_next = c_new
                lw.add_op(ew_op(lw, [node], prog, []))
                h_prev = h_new
                if op == "LSTM":
                    c_prev = finals_c_next
            outs.append(h_new)
        hs.append(outs)
        finals_h.append(h_prev)
        if op == "LSTM":
            finals_c.append(c_prev)
    if fused:
        add_recurrence(lw, node, RecurrentLayer(op, layout, seq, batch, hid, kinds, lbr, rb), projections,
                       r_ops.operand, [(state(5, d), state(6, d) if op == "LSTM" else None) for d in range(dirs)])
        return
    _assemble(lw, node, layout, seq, batch, hid, kinds, hs, finals_h, finals_c)


def _lstm_cell(lw: LowerContext, prog: EwProgram, cols: list[View], c_prev: View | None, acts, clip, peep, input_forget,
               h_new: View, c_new: View, hid: int) -> None:
    f_act, g_act, h_act = acts
    c = prog.load(c_prev) if c_prev is not None else None

    def gate(col: View, p: np.ndarray | None, state: int | None) -> int:
        pre = prog.load(col)
        if p is not None and state is not None:
            pre = prog.op("ADD", pre, prog.op("MUL", prog.load(lw.const_view(p)), state))
        return _apply(prog, f_act, pre, clip)

    p_i = p_o = p_f = None
    if peep is not None:
        p_i, p_o, p_f = peep[:hid].copy(), peep[hid:2 * hid].copy(), peep[2 * hid:].copy()
    i = gate(cols[0], p_i, c)
    forget = prog.op("AFFINE", i, imms=(-1.0, 1.0)) if input_forget else gate(cols[2], p_f, c)
    cell = _apply(prog, g_act, prog.load(cols[3]), clip)
    ic = prog.op("MUL", i, cell)
    c2 = prog.op("ADD", prog.op("MUL", forget, c), ic) if c is not None else ic
    o = gate(cols[1], p_o, c2)
    prog.store(c2, c_new)
    prog.store(prog.op("MUL", o, _apply(prog, h_act, c2, None)), h_new)


def _gru_step(lw: LowerContext, name: str, node: Node, d: int, s: int, g_t: View, h_prev: View | None, h_new: View,
              r_ops: _WeightOperands, rb: np.ndarray, acts, clip, lbr: bool, batch: int, hid: int) -> View:
    f_act, g_act = acts
    width = 3 * hid

    def col(v: View, k: int) -> View:
        return View(v.buffer, "float32", (batch, hid), (v.strides[0], 1), v.offset + k * hid)

    if h_prev is None:
        # h = 0: no recurrent GEMM; (h R_h + rb_h) is just rb_h
        prog = EwProgram((batch, hid))
        z = _apply(prog, f_act, prog.load(col(g_t, 0)), clip)
        reset = _apply(prog, f_act, prog.load(col(g_t, 1)), clip)
        hpart = prog.load(lw.const_view(rb[2 * hid:].copy())) if lbr else None
        pre_h = prog.load(col(g_t, 2))
        if lbr:
            pre_h = prog.op("ADD", pre_h, prog.op("MUL", reset, hpart))
        cand = _apply(prog, g_act, pre_h, clip)
        prog.store(prog.op("MUL", prog.op("AFFINE", z, imms=(-1.0, 1.0)), cand), h_new)
        lw.add_op(ew_op(lw, [node], prog, []))
        return h_new
    if lbr:
        rr = lw.new_dense("float32", (batch, width))
        rd, r_rs, r_cs, r_packed = r_ops.operand(d, 0, width, batch)
        spec = GemmSpec(batch, width, hid, h_prev, h_prev.strides[0], h_prev.strides[1], rd, r_rs, r_cs, rr, width,
                        [(0, 0, 0)], b_prepacked=r_packed)
        epi = EwProgram((batch, width))
        bias = np.zeros(width, np.float32)
        bias[2 * hid:] = rb[2 * hid:]
        epi.store(epi.op("ADD", epi.load(rr), epi.load(lw.const_view(bias))), rr)
        lw.add_op(gemm_op(lw, f"{name}:d{d}t{s}", (node,), spec, epi, ("matrix",)))
        prog = EwProgram((batch, hid))
        z = _apply(prog, f_act, prog.op("ADD", prog.load(col(g_t, 0)), prog.load(col(rr, 0))), clip)
        reset = _apply(prog, f_act, prog.op("ADD", prog.load(col(g_t, 1)), prog.load(col(rr, 1))), clip)
        cand = _apply(prog, g_act, prog.op("ADD", prog.load(col(g_t, 2)), prog.op("MUL", reset, prog.load(col(rr, 2)))),
                      clip)
    else:
        zr = lw.new_dense("float32", (batch, 2 * hid))
        rd_zr, zr_rs, zr_cs, zr_packed = r_ops.operand(d, 0, 2 * hid, batch)
        spec = GemmSpec(batch, 2 * hid, hid, h_prev, h_prev.strides[0], h_prev.strides[1], rd_zr, zr_rs, zr_cs, zr,
                        2 * hid, [(0, 0, 0)], b_prepacked=zr_packed)
        g_zr = View(g_t.buffer, "float32", (batch, 2 * hid), g_t.strides, g_t.offset)
        epi = EwProgram((batch, 2 * hid))
        epi.store(_apply(epi, f_act, epi.op("ADD", epi.load(zr), epi.load(g_zr)), clip), zr)
        lw.add_op(gemm_op(lw, f"{name}:d{d}t{s}zr", (node,), spec, epi, ("matrix",)))
        rh = lw.new_dense("float32", (batch, hid))
        p1 = EwProgram((batch, hid))
        p1.store(p1.op("MUL", p1.load(col(zr, 1)), p1.load(h_prev)), rh)
        lw.add_op(ew_op(lw, [node], p1, []))
        hh = lw.new_dense("float32", (batch, hid))
        rd_h, h_rs, h_cs, h_packed = r_ops.operand(d, 2 * hid, 3 * hid, batch)
        spec = GemmSpec(batch, hid, hid, rh, hid, 1, rd_h, h_rs, h_cs, hh, hid, [(0, 0, 0)], b_prepacked=h_packed)
        epi = EwProgram((batch, hid))
        epi.store(epi.op("ADD", epi.load(hh), epi.load(col(g_t, 2))), hh)
        lw.add_op(gemm_op(lw, f"{name}:d{d}t{s}h", (node,), spec, epi, ("matrix",)))
        prog = EwProgram((batch, hid))
        z = prog.load(col(zr, 0))
        cand = _apply(prog, g_act, prog.load(hh), clip)
    hp = prog.load(h_prev)
    one_minus_z = prog.op("AFFINE", z, imms=(-1.0, 1.0))
    prog.store(prog.op("ADD", prog.op("MUL", one_minus_z, cand), prog.op("MUL", z, hp)), h_new)
    lw.add_op(ew_op(lw, [node], prog, []))
    return h_new


def _assemble(lw: LowerContext, node: Node, layout: int, seq: int, batch: int, hid: int, kinds: list[str],
              hs: list[list[View]], finals_h: list[View], finals_c: list[View]) -> None:
    """One copy rOperator writing Y, Y_h and Y_c from the per-step buffers."""
    pieces: list[tuple[View, View]] = []
    outs = list(node.outputs) + [""] * 3
    if outs[0]:
        y = lw.views[outs[0]]  # [seq, dirs, batch, hid] or layout 1 [batch, seq, dirs, hid]
        for d in range(len(kinds)):
            for s, h in enumerate(hs[d]):
                t = s if kinds[d] == "forward" else seq - 1 - s
                if layout == 0:
                    dst = View(y.buffer, "float32", (batch, hid), (y.strides[2], y.strides[3]),
                               y.offset + t * y.strides[0] + d * y.strides[1])
                else:
                    dst = View(y.buffer, "float32", (batch, hid), (y.strides[0], y.strides[3]),
                               y.offset + t * y.strides[1] + d * y.strides[2])
                pieces.append((h, dst))
    for k, finals in ((1, finals_h), (2, finals_c)):
        if outs[k]:
            st = lw.views[outs[k]]
            for d, h in enumerate(finals):
                if layout == 0:
                    dst = View(st.buffer, "float32", (batch, hid), (st.strides[1], st.strides[2]),
                               st.offset + d * st.strides[0])
                else:
                    dst = View(st.buffer, "float32", (batch, hid), (st.strides[0], st.strides[2]),
                               st.offset + d * st.strides[1])
                pieces.append((h, dst))
    if not pieces:
        return
    lw.add_op(multi_copy_op(lw, f"{node.name or node.op_type}:outputs", (node,), pieces, family="copy.rnn"))
