"""The recurrence of an LSTM, GRU or RNN layer as one rKernel: all time steps of one direction for a
block of batch rows in one rTask.

Per step the kernel multiplies the state by the recurrent weight (the GEMM paths of
:mod:`.kernels_gemm`: a weight packed at compile time for the micro-kernel, or strided loops for a
batch of 1-3 rows), adds the step's input projection (computed for all steps before, biases folded
in) and runs the cell in vectorized loops over the hidden units, writing the step's output straight
into Y.  As one rOperator per step the recurrence paid, every step, two or more task rows, the
elementwise interpreter for the cell and the GEMM's epilogue, and a store and reload of every gate
(``ci/micro_rnn.py`` measures both ways).

Descriptor (int64, at ``p[0]``): see the ``D_*`` indices; a task row is ``[desc, b0, b1]``.  The
scratch of a task: the micro-kernel's packing space (:data:`.kernels_gemm.PACK_FLOATS`), then the
state ``h`` and ``c`` (``rows x hid`` each), ``r * h`` (GRU) and the gates (``rows x gates*hid``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .fastmath import sigmoid_act32
from .kernels_gemm import PACK_FLOATS, gemm_prepacked, gemm_tile

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_JIT_CONTRACT = dict(_JIT, fastmath={"contract"})
_JIT_REASSOC = dict(_JIT, fastmath={"reassoc", "contract", "nsz"})
#: How a recurrent weight is read (the descriptor's ``*_PACKED`` words, chosen by the lowering): a strided
#: view through the GEMM loops of kernels_gemm, packed at compile time for the micro-kernel, or ONNX's
#: rows of R through :func:`_dot_rows`.
W_STRIDED, W_PACKED, W_DOT_ROWS = 0, 1, 2

LSTM, GRU, RNN = 0, 1, 2
#: The gate count of each kind (ONNX's gate orders: LSTM i, o, f, c; GRU z, r, h).
GATES = {LSTM: 4, GRU: 3, RNN: 1}

(D_KIND, D_SEQ, D_BATCH, D_HID, D_REVERSE, D_LBR, D_GX,
 D_W1, D_W1_RS, D_W1_CS, D_W1_PACKED, D_W2, D_W2_RS, D_W2_CS, D_W2_PACKED, D_RBH,
 D_H0, D_H0_RS, D_H0_CS, D_C0, D_C0_RS, D_C0_CS,
 D_Y, D_Y_TS, D_Y_BS, D_Y_CS, D_YH, D_YH_BS, D_YH_CS, D_YC, D_YC_BS, D_YC_CS) = range(32)
DESC_LEN = 32


@njit(inline="always", error_model="numpy")
def sigmoid32(x):
    """The logistic function of the cell's gates: ``fastmath.sigmoid_act32`` (no subnormal or overflow
    branches, so a loop of cells vectorizes; within 2e-7 relative, NaN kept)."""
    return sigmoid_act32(x)


@njit(inline="always", error_model="numpy")
def tanh32(x):
    """tanh as ``fastmath.tanh32`` computes it (an odd polynomial below 0.3, 1 - 2/(e^2|x| + 1) above),
    with that exponential through :func:`sigmoid32`: 1 - 2 sigmoid(-2|x|), free of branches."""
    a = abs(x)
    x2 = x * x
    p = f32(-1382.0 / 155925.0)
    p = p * x2 + f32(62.0 / 2835.0)
    p = p * x2 + f32(-17.0 / 315.0)
    p = p * x2 + f32(2.0 / 15.0)
    p = p * x2 + f32(-1.0 / 3.0)
    small = x + x * x2 * p
    big = f32(1.0) - f32(2.0) * sigmoid_act32(f32(-2.0) * a)
    big = big if x >= f32(0.0) else -big
    y = small if a < f32(0.3) else big
    return x if x != x else y


def scratch_floats(kind: int, batch: int, hid: int) -> int:
    """Float32 scratch of one task of up to ``batch`` rows."""
    return PACK_FLOATS + batch * hid * (3 + GATES[kind]) + 64


@njit(**_JIT_REASSOC)
def _dot_rows(F, a_off, a_rs, rows, K, w_off, w_cs, c_off, c_rs, N):
    """C[rows, 0:N] = A[rows, 0:K] @ W^T for a weight stored as N rows of K adjacent floats (ONNX's R):
    eight dot products at a time share each load of A's row and keep eight vector accumulators (the
    loops over K vectorize with reassociation), so the batch-1 step is bound by reading W.  The GEMM
    paths for few rows made one dot product at a time (a latency-bound reduction each) or an axpy
    per row of W^T through C: 1.3-1.7x slower on 128 x 512 to 256 x 768 (this machine, L2-resident)."""
    for r in range(rows):
        x = F[a_off + r * a_rs:a_off + r * a_rs + K]
        c = c_off + r * c_rs
        n = 0
        while n + 8 <= N:
            w = w_off + n * w_cs
            w0 = F[w:w + K]
            w1 = F[w + w_cs:w + w_cs + K]
            w2 = F[w + 2 * w_cs:w + 2 * w_cs + K]
            w3 = F[w + 3 * w_cs:w + 3 * w_cs + K]
            w4 = F[w + 4 * w_cs:w + 4 * w_cs + K]
            w5 = F[w + 5 * w_cs:w + 5 * w_cs + K]
            w6 = F[w + 6 * w_cs:w + 6 * w_cs + K]
            w7 = F[w + 7 * w_cs:w + 7 * w_cs + K]
            s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = f32(0.0)
            for k in range(K):
                xk = x[k]
                s0 += xk * w0[k]
                s1 += xk * w1[k]
                s2 += xk * w2[k]
                s3 += xk * w3[k]
                s4 += xk * w4[k]
                s5 += xk * w5[k]
                s6 += xk * w6[k]
                s7 += xk * w7[k]
            out = F[c + n:c + n + 8]
            out[0] = s0
            out[1] = s1
            out[2] = s2
            out[3] = s3
            out[4] = s4
            out[5] = s5
            out[6] = s6
            out[7] = s7
            n += 8
        while n < N:
            w0 = F[w_off + n * w_cs:w_off + n * w_cs + K]
            s0 = f32(0.0)
            for k in range(K):
                s0 += x[k] * w0[k]
            F[c + n] = s0
            n += 1


@njit(**_JIT)
def _times_weight(F, a_off, a_rs, rows, K, w_off, w_rs, w_cs, packed, c_off, c_rs, N, pack):
    """C[rows, 0:N] = A[rows, 0:K] @ W; ``packed`` says how W is stored and read (``W_*``)."""
    if packed == W_PACKED:
        gemm_prepacked(F, a_off, a_rs, 1, w_off, K, c_off, c_rs, 0, rows, 0, N, f32(1.0), pack)
    elif packed == W_DOT_ROWS:
        _dot_rows(F, a_off, a_rs, rows, K, w_off, w_cs, c_off, c_rs, N)
    else:
        gemm_tile(F, a_off, a_rs, 1, w_off, w_rs, w_cs, c_off, c_rs, K, 0, rows, 0, N, f32(1.0), pack)


@njit(**_JIT)
def _load_state(F, dst, src, rs, cs, b0, rows, hid):
    for r in range(rows):
        d = F[dst + r * hid:dst + (r + 1) * hid]
        if src < 0:
            for j in range(hid):
                d[j] = f32(0.0)
        else:
            s = src + (b0 + r) * rs
            for j in range(hid):
                d[j] = F[s + j * cs]


@njit(**_JIT)
def _store_rows(F, src, dst, rs, cs, b0, rows, hid):
    for r in range(rows):
        s = F[src + r * hid:src + (r + 1) * hid]
        o = dst + (b0 + r) * rs
        if cs == 1:
            d = F[o:o + hid]
            for j in range(hid):
                d[j] = s[j]
        else:
            for j in range(hid):
                F[o + j * cs] = s[j]


@njit(**_JIT_CONTRACT)
def _lstm_cell(F, g_off, x_off, h_off, c_off, hid):
    g = F[g_off:g_off + 4 * hid]
    x = F[x_off:x_off + 4 * hid]
    h = F[h_off:h_off + hid]
    c = F[c_off:c_off + hid]
    for j in range(hid):
        i = sigmoid32(g[j] + x[j])
        o = sigmoid32(g[hid + j] + x[hid + j])
        f = sigmoid32(g[2 * hid + j] + x[2 * hid + j])
        cand = tanh32(g[3 * hid + j] + x[3 * hid + j])
        cn = f * c[j] + i * cand
        c[j] = cn
        h[j] = o * tanh32(cn)


@njit(**_JIT_CONTRACT)
def _gru_cell_lbr(F, g_off, x_off, rbh_off, h_off, hid):
    """linear_before_reset: candidate = tanh(x_h + r * (h R_h^T + Rb_h))."""
    g = F[g_off:g_off + 3 * hid]
    x = F[x_off:x_off + 3 * hid]
    rb = F[rbh_off:rbh_off + hid]
    h = F[h_off:h_off + hid]
    for j in range(hid):
        z = sigmoid32(g[j] + x[j])
        r = sigmoid32(g[hid + j] + x[hid + j])
        cand = tanh32(x[2 * hid + j] + r * (g[2 * hid + j] + rb[j]))
        h[j] = (f32(1.0) - z) * cand + z * h[j]


@njit(**_JIT_CONTRACT)
def _gru_gates(F, g_off, x_off, h_off, rh_off, hid):
    """The z and r gates (z kept in the gate buffer) and r * h, the candidate GEMM's operand."""
    g = F[g_off:g_off + 2 * hid]
    x = F[x_off:x_off + 2 * hid]
    h = F[h_off:h_off + hid]
    rh = F[rh_off:rh_off + hid]
    for j in range(hid):
        g[j] = sigmoid32(g[j] + x[j])
        rh[j] = sigmoid32(g[hid + j] + x[hid + j]) * h[j]


@njit(**_JIT_CONTRACT)
def _gru_update(F, g_off, x_off, h_off, hid):
    """candidate = tanh(x_h + (r * h) R_h^T) (Rb_h folded into x_h); h = (1 - z) cand + z h."""
    g = F[g_off:g_off + 3 * hid]
    x = F[x_off:x_off + 3 * hid]
    h = F[h_off:h_off + hid]
    for j in range(hid):
        z = g[j]
        cand = tanh32(x[2 * hid + j] + g[2 * hid + j])
        h[j] = (f32(1.0) - z) * cand + z * h[j]


@njit(**_JIT_CONTRACT)
def _rnn_cell(F, g_off, x_off, h_off, hid):
    g = F[g_off:g_off + hid]
    x = F[x_off:x_off + hid]
    h = F[h_off:h_off + hid]
    for j in range(hid):
        h[j] = tanh32(g[j] + x[j])


@njit(**_JIT)
def k_rnn(F, B, I, J, X, R, p, sbase):
    """Task row: [desc, b0, b1]: every step of one direction for batch rows b0:b1."""
    d = p[0]
    b0 = p[1]
    rows = p[2] - b0
    kind = X[d + D_KIND]
    seq = X[d + D_SEQ]
    batch = X[d + D_BATCH]
    hid = X[d + D_HID]
    gates = 4 if kind == LSTM else (3 if kind == GRU else 1)
    width = gates * hid
    lbr = X[d + D_LBR]
    gx = X[d + D_GX]
    pack = sbase
    h = sbase + PACK_FLOATS
    c = h + rows * hid
    rh = c + rows * hid
    g = rh + rows * hid
    _load_state(F, h, X[d + D_H0], X[d + D_H0_RS], X[d + D_H0_CS], b0, rows, hid)
    if kind == LSTM:
        _load_state(F, c, X[d + D_C0], X[d + D_C0_RS], X[d + D_C0_CS], b0, rows, hid)
    split = kind == GRU and lbr == 0
    n1 = 2 * hid if split else width
    for s in range(seq):
        t = seq - 1 - s if X[d + D_REVERSE] != 0 else s
        _times_weight(F, h, hid, rows, hid, X[d + D_W1], X[d + D_W1_RS], X[d + D_W1_CS], X[d + D_W1_PACKED],
                      g, width, n1, pack)
        for r in range(rows):
            x_row = gx + (t * batch + b0 + r) * width
            g_row = g + r * width
            h_row = h + r * hid
            if kind == LSTM:
                _lstm_cell(F, g_row, x_row, h_row, c + r * hid, hid)
            elif kind == RNN:
                _rnn_cell(F, g_row, x_row, h_row, hid)
            elif lbr != 0:
                _gru_cell_lbr(F, g_row, x_row, X[d + D_RBH], h_row, hid)
            else:
                _gru_gates(F, g_row, x_row, h_row, rh + r * hid, hid)
        if split:
            _times_weight(F, rh, hid, rows, hid, X[d + D_W2], X[d + D_W2_RS], X[d + D_W2_CS], X[d + D_W2_PACKED],
                          g + 2 * hid, width, hid, pack)
            for r in range(rows):
                _gru_update(F, g + r * width, gx + (t * batch + b0 + r) * width, h + r * hid, hid)
        if X[d + D_Y] >= 0:
            _store_rows(F, h, X[d + D_Y] + t * X[d + D_Y_TS], X[d + D_Y_BS], X[d + D_Y_CS], b0, rows, hid)
    if X[d + D_YH] >= 0:
        _store_rows(F, h, X[d + D_YH], X[d + D_YH_BS], X[d + D_YH_CS], b0, rows, hid)
    if kind == LSTM and X[d + D_YC] >= 0:
        _store_rows(F, c, X[d + D_YC], X[d + D_YC_BS], X[d + D_YC_CS], b0, rows, hid)
