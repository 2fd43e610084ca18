"""The fused scaled dot-product attention rKernel (``ScaledDotProductAttention``, rammer domain).

One rTask computes ``Y[b, r0:r1, :]`` for a range of batch matrices ``b`` (batch x heads, flattened)
and a block of query rows: the block's scores ``scale * Q K^T`` go into the vEU's scratch (never the
arena), the additive bias is added and each row is soft-maxed there, then the block is multiplied by V
straight into Y.  Both products run on the packed SIMD micro-kernel (:func:`.kernels_gemm.gemm_packed`),
which takes any strides, so a K transposed by the exported graph (a Transpose view) and a Q or V that
is a head-split view of the projection's output are read in place.

Descriptor (element offsets / strides into the float32 arena)::

    [S, Sk, D, Dv, q_rs, q_cs, kt_rs, kt_cs, v_rs, v_cs, y_rs, bias_rs, bias_cs, has_bias, scale_imm,
     table, block_rows, panels]

and ``table`` holds, per batch matrix, ``(q_off, kt_off, v_off, y_off, bias_off)``.  ``block_rows``
caps the score block (rows x Sk floats of scratch) so it stays in L2; the scratch after the packing
space of the GEMM holds it, then one float per block row (its softmax's 1 / sum).  ``panels`` >= 0:
where in the scratch (from its start) K^T (times the scale) and V are packed once per batch matrix, in
the micro-kernel's B-panel layout, for all the query-row blocks of the task; both products then read
their A in place (:func:`.kernels_gemm_inplace.gemm_inplace`: Q's rows when they are contiguous, and the
probabilities' rows), since packing A, a transposing gather, cost as much as the multiply-adds at a
head size of 64 (6 heads x 256 keys: 4.1 ms against onnxruntime's 2.0).  Long sequences (Whisper's
1,500 frames: 35 blocks of 43 rows) had also packed K^T and V again for every block.  ``panels`` < 0
(the operands too large for the scratch): both products pack per call (:func:`.kernels_gemm.gemm_packed`).
Keys that every row of a block masks are skipped (:func:`live_keys`): a bias of -1e30 or less (torch's
masks hold float32's minimum) makes a key's probability exactly 0, so a block's scores, softmax and
product with V run over the keys up to the last one some row of the block sees.  Under a causal mask a
block whose first rows see a part of the keys is cut in blocks of TRIM_ROWS rows (a decoder at 128
tokens: about 60% of the work); a right-padded batch skips its padding.
Task row: ``[desc, b0, b1, r0, r1]``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .fastmath import bits_float, exp32, float_bits, flush_subnormal32
from .kernels_gemm import PACK_FLOATS, _pack_b, gemm_packed, gemm_prepacked
from .kernels_gemm_inplace import gemm_inplace, gemm_inplace_panels
from .kernels_nn import _scale_row
from .ukernel import MR, NR
from .ukernel_softmax import ukernel_exp_row

f32 = np.float32
i32 = np.int32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
#: The probabilities' exp and sum through the vector kernel of :mod:`.ukernel_softmax` (off: the
#: numba loops, which LLVM left scalar: about 1.2 ns a float against 0.8, loaded).
USE_EXP_KERNEL = True

(A_S, A_SK, A_D, A_DV, A_QRS, A_QCS, A_KRS, A_KCS, A_VRS, A_VCS, A_YRS, A_BRS, A_BCS, A_HAS_BIAS, A_SCALE,
 A_TABLE, A_BLOCK, A_PANELS) = range(18)
DESC_LEN = 18
#: Per batch matrix in the table: q, kt, v, y and bias offsets.
TABLE_STRIDE = 5
#: Floats of one score block at most (256 KB): the block is written, soft-maxed and read back
#: while it is still in L2.
SCORE_BLOCK_FLOATS = 64 * 1024
#: A bias at or below this masks its key: the key's probability is exactly 0 in float32 (exp of a
#: score minus 1e30 or more), so a block skips the keys that every one of its rows masks.  torch's
#: causal and padding masks hold float32's minimum.
MASKED_BIAS = f32(-1e30)
#: Query rows per block where the bias masks a tail of the keys (a causal mask: row i sees keys 0..i):
#: a block of two micro-kernel panels then computes scores and products over about 60% of the keys
#: (128 keys), where one block of all the rows saw them all.
TRIM_ROWS = 2 * MR


# The row maximum compares float bits as integers (b ^ ((b >> 31) & 0x7fffffff) orders float32
# values as signed int32): LLVM vectorizes an integer max reduction but kept the float one
# (kernels_nn._row_max) scalar; 0.006 ms against 0.013 on 128 x 128 scores.  A NaN with the sign
# bit clear orders above +inf and so becomes the maximum; either NaN then makes the row NaN through exp.
@njit(**_JIT)
def _key(b):
    return b ^ ((b >> i32(31)) & i32(0x7FFFFFFF))


@njit(**_JIT)
def _row_max_bits(A, n):
    m = i32(-2147483648)
    for r in range(n):
        k = _key(float_bits(A[r]))
        m = k if k > m else m
    return bits_float(_key(m))


@njit(**_JIT)
def _add_bias_row_max(F, row, bias, n, bias_cs):
    """Adds the bias row to the score row and returns the row's maximum (one pass when the bias row is contiguous)."""
    s = F[row:row + n]
    if bias_cs != 1:
        for j in range(n):
            s[j] += F[bias + j * bias_cs]
        return _row_max_bits(s, n)
    m = F[bias:bias + n]
    mx = i32(-2147483648)
    for j in range(n):
        v = s[j] + m[j]
        s[j] = v
        k = _key(float_bits(v))
        mx = k if k > mx else mx
    return bits_float(_key(mx))


# exp in place over the row: one slice read and written (LLVM vectorizes it; two overlapping slices
# of the arena, as kernels_nn's _exp_shifted(D, A) called with D = A, fail its overlap check and ran
# scalar), the polynomial contracted to FMAs.  No "reassoc" here: it folds exp32's rounding trick
# ((x * log2e + magic) - magic) away and gives wrong values; the sum gets its own pass with it.
# Measured on 128 x 128 scores: exp 0.017 ms against 0.028 without FMAs.  Subnormal results are
# flushed to 0 (fastmath.FLT_MIN): the probabilities are the A of the next GEMM.
@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"})
def _exp_in_place(A, n, mx):
    for r in range(n):
        A[r] = flush_subnormal32(exp32(A[r] - mx))


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"reassoc", "nsz"})
def _row_sum(A, n):
    s = f32(0.0)
    for r in range(n):
        s += A[r]
    return s


@njit(**_JIT)
def _scale_rows(F, y, y_rs, n, inv, rows):
    for r in range(rows):
        _scale_row(F[y + r * y_rs:y + r * y_rs + n], n, F[inv + r])


def panel_floats(k: int, n: int) -> int:
    """Floats of a K x N operand packed whole by :func:`.kernels_gemm._pack_b` (N rounded up to whole NR panels)."""
    return -(-n // NR) * NR * k


@njit(**_JIT)
def live_keys(F, bias, bias_rs, bias_cs, rows, Sk):
    """How many leading keys a block of ``rows`` query rows needs: one past the last key that some
    row's bias (rows at ``bias + r * bias_rs``) does not mask (:data:`MASKED_BIAS`; a NaN bias
    masks nothing).  A row that masks every key makes it ``Sk``: it is soft-maxed over all of them,
    as it is without trimming."""
    live = 0
    for r in range(rows - 1, -1, -1):  # a causal mask's last row sees the most keys: the rest stop at once
        row = bias + r * bias_rs
        first = 0
        while first < Sk and F[row + first * bias_cs] <= MASKED_BIAS:
            first += 1
        if first == Sk:
            return Sk
        j = Sk - 1
        while j >= live and j > first and F[row + j * bias_cs] <= MASKED_BIAS:
            j -= 1
        if j + 1 > live:
            live = j + 1
    return live


@njit(**_JIT)
def _attend_block(F, q, q_rs, q_cs, kt_off, kt_rs, kt_cs, v_off, v_rs, v_cs, y, y_rs, bias, bias_rs, bias_cs,
                  has_bias, scale, Sk, D, Dv, rows, keys, kp, vp, pack, scores, inv, prepacked):
    """``Y[rows] = softmax(scale Q K^T + bias) V`` for one block of query rows (Q's first row at
    ``q``, the bias's at ``bias``, Y's at ``y``) over its first ``keys`` keys: the rest are masked
    for every row of the block (:func:`live_keys`; ``keys`` = Sk otherwise)."""
    # scores[0:rows, 0:cols] = scale * Q @ KT over whole panels of keys (the scale rides on K^T's
    # panels, or on the packing of Q); keys in [keys, cols) are masked, their probabilities 0
    cols = min(Sk, (keys + NR - 1) // NR * NR)
    if prepacked and q_cs == 1:
        gemm_inplace(F, q, q_rs, kp, D, scores, Sk, 0, rows, 0, cols, pack)
    elif prepacked:
        gemm_prepacked(F, q, q_rs, q_cs, kp, D, scores, Sk, 0, rows, 0, cols, f32(1.0), pack)
    else:
        gemm_packed(F, q, q_rs, q_cs, kt_off, kt_rs, kt_cs, scores, Sk, D, 0, rows, 0, cols, scale, 0, pack)
    # softmax's exp in place; its 1 / sum is applied to the (Dv-wide) output rows instead
    for r in range(rows):
        row = scores + r * Sk
        A = F[row:row + cols]
        if has_bias != 0:
            mx = _add_bias_row_max(F, row, bias + r * bias_rs, cols, bias_cs)
        else:
            mx = _row_max_bits(A, cols)
        if USE_EXP_KERNEL:
            ukernel_exp_row(cols, F, row, mx, F, inv + r)
        else:
            _exp_in_place(A, cols, mx)
            F[inv + r] = f32(1.0) / _row_sum(A, cols)
    if prepacked:
        gemm_inplace_panels(F, scores, Sk, vp, keys, Sk, y, y_rs, 0, rows, 0, Dv, pack)
    else:
        gemm_packed(F, scores, Sk, 1, v_off, v_rs, v_cs, y, y_rs, keys, 0, rows, 0, Dv, f32(1.0), 0, pack)
    _scale_rows(F, y, y_rs, Dv, inv, rows)


@njit(**_JIT)
def k_attention(F, B, I, J, X, R, p, sbase):
    """Row: [desc, b0, b1, r0, r1]."""
    d = p[0]
    Sk = X[d + A_SK]
    D = X[d + A_D]
    Dv = X[d + A_DV]
    q_rs = X[d + A_QRS]
    q_cs = X[d + A_QCS]
    kt_rs = X[d + A_KRS]
    kt_cs = X[d + A_KCS]
    v_rs = X[d + A_VRS]
    v_cs = X[d + A_VCS]
    y_rs = X[d + A_YRS]
    bias_rs = X[d + A_BRS]
    bias_cs = X[d + A_BCS]
    has_bias = X[d + A_HAS_BIAS]
    scale = R[X[d + A_SCALE]]
    table = X[d + A_TABLE]
    block = X[d + A_BLOCK]
    panels = X[d + A_PANELS]
    pack = sbase
    scores = sbase + PACK_FLOATS
    inv = scores + block * Sk  # 1 / (sum of exp) per row of the block
    r0 = p[3]
    r1 = p[4]
    for b in range(p[1], p[2]):
        t = table + TABLE_STRIDE * b
        q_off = X[t]
        kt_off = X[t + 1]
        v_off = X[t + 2]
        y_off = X[t + 3]
        bias_off = X[t + 4]
        # K^T (scaled) and V packed once per batch matrix for all its query-row blocks; both products
        # then read their A (Q's rows, the probabilities' rows) in place (kernels_gemm_inplace).
        prepacked = panels >= 0
        kp = sbase + panels
        vp = kp + ((Sk + NR - 1) // NR) * NR * D
        if prepacked:
            _pack_b(F, kt_off, kt_rs, kt_cs, 0, D, 0, Sk, F[kp:vp])
            _scale_row(F[kp:vp], vp - kp, scale)
            _pack_b(F, v_off, v_rs, v_cs, 0, Sk, 0, Dv, F[vp:vp + ((Dv + NR - 1) // NR) * NR * Sk])
        for i0 in range(r0, r1, block):
            rows = min(block, r1 - i0)
            step = rows
            if has_bias != 0:
                bias_row = bias_off + i0 * bias_rs
                # a block whose first rows mask a tail of the keys (a causal mask) goes in short blocks,
                # each over the keys it needs; else one block over the keys any of its rows needs
                if rows > TRIM_ROWS and live_keys(F, bias_row, bias_rs, bias_cs, TRIM_ROWS, Sk) < Sk:
                    step = TRIM_ROWS
            for s0 in range(i0, i0 + rows, step):
                n = min(step, i0 + rows - s0)
                keys = Sk
                if has_bias != 0:
                    keys = live_keys(F, bias_off + s0 * bias_rs, bias_rs, bias_cs, n, Sk)
                _attend_block(F, q_off + s0 * q_rs, q_rs, q_cs, kt_off, kt_rs, kt_cs, v_off, v_rs, v_cs,
                              y_off + s0 * y_rs, y_rs, bias_off + s0 * bias_rs, bias_rs, bias_cs, has_bias, scale,
                              Sk, D, Dv, n, keys, kp, vp, pack, scores, inv, prepacked)
