"""Implicit-GEMM convolution: no column matrix, weights packed at compile time.

A convolution of block b = (image n, group g) is the GEMM
``out[m, q] = sum_k W[g, m, k] col[k, q]`` with ``k = (c, i, j)`` (input
channel, kernel row, kernel column) and ``q`` an output pixel.  Where an
im2col convolution writes the whole ``col`` to memory and then packs it again
for the micro-kernel, this kernel gathers ``col`` straight from the input
into the micro-kernel's packed B layout, one KC x NC panel at a time in the
vEU's scratch (L2-sized), and multiplies it with the weights, which the
lowering packed once at compile time into the A-panel layout the micro-kernel
reads (:func:`pack_weights`):

    per group g, per K block [pc, pc + kc), per MR-row panel mp:
        kc x MR floats, element (k, r) = W[g, mp * MR + r, pc + k] (0 past mg),
    at offset ``g * Mpad * K + pc * Mpad + mp * MR * kc``  (Mpad = mg rounded up to MR).

Descriptor (int64 side table), after the shared window words of
:mod:`.kernels_window` (x, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, out)::

    [groups, cg, mg, w_packed, Mpad, KC, NC, epilogue, panel_scratch, padded_width, form]

``form`` is :data:`FORM_DIRECT`, :data:`FORM_TRANSPOSED`, :data:`FORM_PIXEL_ROWS`,
:data:`FORM_WINOGRAD` (3x3 stride-1 convs, :mod:`.kernels_winograd`) or :data:`FORM_PLANES`.

Scratch from ``panel_scratch``: the B panels (KC x NC rounded up to NR
columns), one MR x NR edge tile, NR floats of slack, then the zero-padded
input rows of the task as stride-phase planes (cg x sh x sw x ceil(rows / sh) x
ceil(padded_width / sw), plus NR floats of slack).

Task row: ``[desc, b0, b1, m0, m1, q0, q1]`` with m0 a multiple of MR (of NR when
transposed).

*Transposed form*, for output planes of a few pixels: the micro-kernel's rows
are pixels and its columns output channels (col panels gathered MR wide,
weights packed NR wide, ``Mpad`` = mg rounded up to NR), and each tile is
scattered into the output; see :func:`_transposed_block`.

*Pixel-row form* (:func:`_pixel_rows`): no gather at all.  The pixel-row
micro-kernel (:func:`~.ukernel.ukernel_rows`) reads its PX_MR pixel rows
straight from the phase planes (or, for an unpadded 1x1 conv at any stride,
from the input) through a table of one offset per k (channel and tap, built
once per rTask) and one per pixel row, multiplies them with weights packed PX_NR
output channels wide over the whole of K, and stores its tile transposed,
which is the NCHW output.  Where a panel's weights and the input do not fit
in L2 together, K runs in blocks (the descriptor's KC word) and the tiles of
later blocks accumulate into the output.  Scratch: the k table (K int64), the row table
(PX_MR int64), one PX_MR x PX_NR edge tile, then the phase planes as above.
The gather it saves is 10-20% of the direct form's time on 3x3 convs.

*Plane form* (:func:`_planes`), for groups of at most 8 output channels: the plane micro-kernel
(:mod:`.ukernel_planes`) computes 4 output channels x NR pixels of one output row, its B rows read
in place from the task's phase planes (one offset per k, the tap table of the pixel-row form) and
its tile stored as NCHW rows; weights packed 4 channels wide over the whole of K (:func:`pack_weights`
with width 4).  Scratch: the tap table (K int64), one 4 x NR edge tile, NR floats of slack, the
phase planes, NR floats of slack.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .atomics import copy_block
from .fastmath import hardswish32, sigmoid_act32
from .kernels_ew import ew_epilogue
from .kernels_window import W_OUT, W_X, WIN_LEN, _pad_phases, read_window
from .kernels_winograd import ldb_panel, winograd_block
from .ukernel import (
    EPI_ACCUMULATE,
    EPI_BIAS,
    EPI_HSWISH,
    EPI_RELU,
    EPI_RELU6,
    EPI_RESIDUAL,
    EPI_SILU,
    MR,
    NR,
    PX_MR,
    PX_NR,
    PX_NR_NARROW,
    edge_flags,
    ukernel,
    ukernel_ldb,
    ukernel_rows,
    ukernel_rows_narrow,
)
from .ukernel_planes import PLANES_ROWS, ukernel_planes

f32 = np.float32
_u = np.uint64  # arena offsets as unsigned indices: no negative-index wraparound (see kernels_data)
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

(C_GROUPS, C_CG, C_MG, C_WPACK, C_MPAD, C_KC, C_NC, C_EPI, C_PANEL, C_WP, C_FORM, C_BIAS,
 C_RELU, C_RES, C_INPLACE) = range(WIN_LEN, WIN_LEN + 15)
FORM_DIRECT, FORM_TRANSPOSED, FORM_PIXEL_ROWS, FORM_WINOGRAD, FORM_PLANES = 0, 1, 2, 3, 4
#: Bit of the C_INPLACE word: the pixel-row form of an unpadded 1x1 conv packs its tiles' pixel
#: rows (see :func:`_pack_pixel_rows`) when its channel panels run outermost.
PACK_PIXEL_ROWS = 4
#: Bit of the C_INPLACE word: the pixel-row form of a strided, padded conv copies its task's rows
#: as plain padded rows (no stride phases) and reads its pixel rows from them at the stride.
STRIDED_PLAIN_ROWS = 8


def pack_weights(w: np.ndarray, groups: int, kc: int, width: int = MR) -> np.ndarray:
    """Weights [M, Cg, kh, kw] in the panel layout above (K blocks of ``kc``, panels of ``width`` rows).

    ``width`` is MR for the A panels of the direct form; the transposed form
    (small output planes, see :func:`k_convp`) reads the weights as B panels
    of NR output channels, packed the same way with ``width = NR``.
    """
    m = w.shape[0]
    mg = m // groups
    k = int(np.prod(w.shape[1:]))
    mpad = -(-mg // width) * width
    flat = np.zeros((groups, mpad, k), np.float32)
    flat[:, :mg] = np.asarray(w, np.float32).reshape(groups, mg, k)
    out = np.empty(groups * mpad * k, np.float32)
    pos = 0
    for g in range(groups):
        for pc in range(0, k, kc):
            blk = flat[g, :, pc:pc + kc]  # mpad x kcb
            kcb = blk.shape[1]
            # panels of `width` rows, each stored k-major: (panel, k, r)
            panels = blk.reshape(mpad // width, width, kcb).transpose(0, 2, 1)
            out[pos:pos + mpad * kcb] = panels.reshape(-1)
            pos += mpad * kcb
    return out


@njit(**_JIT)
def pixel_row_panels(mg):
    """``(wide, narrow)``: the pixel-row form packs a group's ``mg`` output channels as ``wide``
    panels PX_NR channels wide and then ``narrow`` panels PX_NR_NARROW wide (0, 1 or 2).  With
    24 and 16 (AVX2) the channels, rounded up to 8, fill them exactly: a rest of 16 is one narrow
    panel, a rest of 8 makes the last wide panel two narrow ones (24 + 8 = 16 + 16), so 32, 64 and
    128 channels pad nothing where panels of 24 would pad 16, 8 and 16."""
    if PX_NR_NARROW == PX_NR:
        return (mg + PX_NR - 1) // PX_NR, 0
    m8 = max(PX_NR_NARROW, (mg + 7) // 8 * 8)
    wide = m8 // PX_NR
    rest = m8 - wide * PX_NR
    if rest == 0:
        return wide, 0
    # the last wide panel and the rest as two narrow ones, when they fill them exactly
    if wide > 0 and (rest + PX_NR) == 2 * PX_NR_NARROW:
        return wide - 1, 2
    return wide, (rest + PX_NR_NARROW - 1) // PX_NR_NARROW


@njit(**_JIT)
def pixel_row_panel_start(p, wide):
    """The first output channel (of its group) of pixel-row panel ``p`` (:func:`pixel_row_panels`)."""
    return min(p, wide) * PX_NR + max(0, p - wide) * PX_NR_NARROW


def pack_pixel_row_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """Weights [M, Cg, kh, kw] as the pixel-row form reads them: per group, its panels
    (:func:`pixel_row_panels`) one after the other over the whole of K, each k-major
    (element (k, j) of the panel from channel ``s`` at ``s * K + k * width + j``, zeros past mg)."""
    m = w.shape[0]
    mg = m // groups
    k = int(np.prod(w.shape[1:]))
    wide, narrow = pixel_row_panels(mg)
    mpad = pixel_row_panel_start(wide + narrow, wide)
    flat = np.zeros((groups, mpad, k), np.float32)
    flat[:, :mg] = np.asarray(w, np.float32).reshape(groups, mg, k)
    out = np.empty((groups, mpad * k), np.float32)
    for p in range(wide + narrow):
        s = pixel_row_panel_start(p, wide)
        width = PX_NR if p < wide else PX_NR_NARROW
        out[:, s * k:(s + width) * k] = flat[:, s:s + width].transpose(0, 2, 1).reshape(groups, k * width)
    return out.reshape(-1)


@njit(**_JIT)
def panel_columns(nc: int) -> int:
    """Floats per k row of the gathered panels of ``nc`` pixels (NR- or MR-wide panels)."""
    return max(-(-nc // NR) * NR, -(-nc // MR) * MR)


@njit(**_JIT)
def _gather_pointwise(F, xb, H, W, p0, kc, q0, nc, pb, wd):
    """The col panels (``wd`` pixels wide) of a 1x1 stride-1 convolution: col row k is input plane p0 + k."""
    hw = H * W
    qe = q0 + nc
    for k in range(kc):
        src = xb + (p0 + k) * hw
        row = pb + k * wd
        q = q0
        while q < qe:
            rel = q - q0
            jp = rel // wd
            jj = rel - jp * wd
            run = min(qe - q, wd - jj)
            if run == NR:
                copy_block(F, row + jp * kc * wd + jj, src + q, NR)
            else:
                copy_block(F, row + jp * kc * wd + jj, src + q, run)
            q += run


@njit(**_JIT)
def _gather_padded(F, pp, Rq, Wq, kh, kw, sh, sw, dh, dw, OW, oh0_task, p0, kc, q0, nc, pb, wd):
    """F[pb + jp*kc*wd + k*wd + t] = col[p0 + k, q0 + jp*wd + t] from the phase planes at F[pp:]
    (panels ``wd`` = NR pixels wide for the direct form, MR for the transposed one).

    ``col[(c*kh + i)*kw + j, oh*OW + ow] = Xpad[c, oh*sh + i*dh, ow*sw + j*dw]``, which
    is phase plane ((i*dh) % sh, (j*dw) % sw) at row oh - oh0_task + (i*dh)//sh and
    column ow + (j*dw)//sw (:func:`_pad_phases`): unit stride for every tap.
    Each panel's pixels are walked in runs inside one output row, and every
    run is copied as one whole NR-float vector block (the excess lands in
    slots written later, or in the slack after the panels), so no run pays for
    a scalar remainder loop.  Columns past nc in the last panel hold junk:
    their products only reach the discarded part of an edge tile.
    """
    taps = kh * kw
    phase = Rq * Wq
    chan = sh * sw * phase
    qe = q0 + nc
    c0 = p0 // taps
    t0 = p0 - c0 * taps
    i0 = t0 // kw
    j0 = t0 - i0 * kw
    for jp in range((nc + wd - 1) // wd):
        qa = q0 + jp * wd
        qb = min(qa + wd, qe)
        oh0 = qa // OW
        ow0 = qa - oh0 * OW
        panel = pb + jp * kc * wd
        # tap (i, j) of channel c reads phase (ra, cb) at row ri, column cj; all
        # four are stepped without dividing (this loop runs once per k)
        c = c0
        i = i0
        j = j0
        ra = (i * dh) % sh
        ri = (i * dh) // sh
        cb = (j * dw) % sw
        cj = (j * dw) // sw
        for k in range(kc):
            src = pp + c * chan + (ra * sw + cb) * phase + (ri - oh0_task) * Wq + cj
            dst = panel + k * wd
            q = qa
            oh = oh0
            ow = ow0
            while q < qb:
                run = min(qb - q, OW - ow)
                s = src + oh * Wq + ow
                d = dst + q - qa
                # one fixed-size vector block per run (short runs: tiny planes)
                if run <= 4:
                    copy_block(F, d, s, 4)
                elif run <= 8:
                    copy_block(F, d, s, 8)
                elif run <= 16:
                    copy_block(F, d, s, 16)
                else:
                    copy_block(F, d, s, NR)
                q += run
                ow = 0
                oh += 1
            j += 1
            cb += dw
            while cb >= sw:
                cb -= sw
                cj += 1
            if j == kw:
                j = 0
                cb = 0
                cj = 0
                i += 1
                ra += dh
                while ra >= sh:
                    ra -= sh
                    ri += 1
                if i == kh:
                    i = 0
                    ra = 0
                    ri = 0
                    c += 1


@njit(**_JIT)
def _transposed_block(F, kc, pb, wb, out, ohw, qc, nc, m0, m1, pt, first):
    """One K block of the transposed form: out[m, q] (+)= sum_k colT[q, k] W[m, k].

    For planes of a few pixels the direct form's NR-pixel tiles are mostly
    padding (a 2x2 plane fills 4 of 32 columns).  Here the micro-kernel's MR
    rows are pixels (panels gathered MR wide at ``pb``) and its NR columns
    output channels (weights packed NR wide at ``wb``), and each tile is
    scattered into the NCHW output.
    """
    tile = F[pt:pt + MR * NR]
    for jr in range(0, nc, MR):
        rows = min(MR, nc - jr)
        for ic in range(m0, m1, NR):
            cols = min(NR, m1 - ic)
            ukernel(kc, F, pb + jr * kc, F, wb + ic * kc, F, pt, NR, 0)
            for t in range(cols):
                dst = F[out + (ic + t) * ohw + qc + jr:out + (ic + t) * ohw + qc + jr + rows]
                if first:
                    for r in range(rows):
                        dst[r] = tile[r * NR + t]
                else:
                    for r in range(rows):
                        dst[r] += tile[r * NR + t]


# Bias, a residual Add and a ReLU run inside the kernel (descriptor words C_BIAS
# and C_RES: offsets or -1, C_RELU).  The direct and pixel-row forms apply them as
# each tile is stored (the micro-kernels' EPI_* flags: bias and residual with the
# first K block, ReLU with the last; edge tiles when copied out of the scratch
# tile).  The transposed form starts the output rows as bias + residual, accumulates
# every K block onto them and applies the ReLU in one in-place pass.  Through the
# elementwise interpreter a bias cost as much as the GEMM itself on small
# convolutions (32 -> 32 channels at 32x32: 16.8 us without, 26.6 us with); the
# direct form's packed-B path ran the same two passes until it too took the flags:
# ResNeXt's 256 -> 1024 convs at 32x32 wrote and re-read a 4 MB output twice.

@njit(**_JIT)
def _relu(x):
    """ReLU keeping NaN, as the interpreter and the micro-kernels do."""
    return x if (x > f32(0.0) or x != x) else f32(0.0)


@njit(fastmath={"contract"}, **_JIT)
def _activate_line(d, t, n, relu):
    """``d[:n] = act(t[:n])`` (``d`` may be ``t``) for the conv's fused activation ``relu``: 0 none,
    1 a ReLU, 2 a ReLU6, 3 a HardSwish, 4 a SiLU (NaN kept, as the micro-kernels do).  One loop per
    activation, so each vectorizes: with the activation chosen per element, the SiLU of the
    transposed form's rows and of edge tiles ran scalar (an EfficientNet 192 -> 1152 conv at 7x7
    took 0.27 ms without its SiLU, 0.71 with it)."""
    if relu == 4:
        for j in range(n):
            x = t[j]
            d[j] = x * sigmoid_act32(x)
    elif relu == 3:
        for j in range(n):
            d[j] = hardswish32(t[j])
    elif relu == 2:
        for j in range(n):
            x = _relu(t[j])
            d[j] = x if (x < f32(6.0) or x != x) else f32(6.0)
    elif relu == 1:
        for j in range(n):
            d[j] = _relu(t[j])
    else:
        for j in range(n):
            d[j] = t[j]


@njit(**_JIT)
def _init_rows(F, out, ohw, bias, res, m0, m1, q0, q1):
    """out[m, q0:q1] = bias[m] (if bias >= 0) + res[m, q0:q1] (if res >= 0), m in [m0, m1)."""
    n = q1 - q0
    for m in range(m0, m1):
        v = F[bias + m] if bias >= 0 else f32(0.0)
        row = F[out + m * ohw + q0:out + m * ohw + q1]
        if res >= 0:
            rrow = F[res + m * ohw + q0:res + m * ohw + q1]
            for j in range(n):
                row[j] = rrow[j] + v
        else:
            for j in range(n):
                row[j] = v


@njit(**_JIT)
def _store_flags(first, last, bias, res, relu):
    """The EPI_* flags of one K block's tile stores: bias and residual with the first block,
    accumulating onto the output after it, ReLU with the last."""
    return ((0 if first else EPI_ACCUMULATE) | (EPI_BIAS if first and bias >= 0 else 0)
            | (EPI_RESIDUAL if first and res >= 0 else 0) | _act_flags(relu if last else 0))


@njit(**_JIT)
def _act_flags(relu):
    """The EPI_* bits of activation ``relu`` (see :func:`_activate_line`)."""
    if relu == 4:
        return EPI_SILU
    if relu == 3:
        return EPI_HSWISH
    return (EPI_RELU if relu else 0) | (EPI_RELU6 if relu == 2 else 0)


@njit(**_JIT)
def _store_tile(F, src, lds, dst, ldd, rows, cols, flags, bias_at, res_at, ldr):
    """``F[dst + r*ldd + j] = act((src[r*lds + j] (+ dst) (+ F[bias_at + r])) (+ F[res_at + r*ldr + j]))``
    for r < rows, j < cols, per the EPI_* ``flags``: an edge tile computed into scratch (at
    ``src``, which it overwrites), stored as the micro-kernels store a whole one.  One
    vectorized pass per row and step: tested per element, the flags made the edge tiles of a
    7x7 plane's 1x1 convs (49 pixels: 32 + 17 columns) cost as much as all the full tiles."""
    act = 0
    if flags & EPI_SILU:
        act = 4
    elif flags & EPI_HSWISH:
        act = 3
    elif flags & EPI_RELU:
        act = 2 if flags & EPI_RELU6 else 1
    for r in range(rows):
        t = F[_u(src + r * lds):_u(src + r * lds + cols)]
        d = F[_u(dst + r * ldd):_u(dst + r * ldd + cols)]
        if flags & EPI_ACCUMULATE:
            for j in range(cols):
                t[j] += d[j]
        if flags & EPI_BIAS:
            bv = F[_u(bias_at + r)]
            for j in range(cols):
                t[j] += bv
        if flags & EPI_RESIDUAL:
            rr = F[_u(res_at + r * ldr):_u(res_at + r * ldr + cols)]
            for j in range(cols):
                t[j] += rr[j]
        _activate_line(d, t, cols, act)


@njit(**_JIT)
def _epilogue_tile(F, kc, a, b, hw, cp, ohw, rows, cols, flags, bias_at, res_at, pt):
    """One tile of the direct form, B's k-th row at ``b + k*hw`` (the input planes of a 1x1
    stride-1 conv read in place, or a packed panel), the EPI_* epilogue ``flags`` applied as it
    is stored; an edge tile goes through the scratch tile at ``pt`` and gets its epilogue here.
    (In place, its B rows run up to NR - 1 floats past a plane's row: junk columns of the
    scratch tile only.)"""
    if cols == NR and (rows == MR or rows == 8 or rows == 4):  # (a last panel of 8 or 4: no scratch tile)
        ldb_panel(rows, kc, F, a, b, hw, cp, ohw, flags, bias_at if flags & EPI_BIAS else cp,
                  res_at if flags & EPI_RESIDUAL else cp, ohw)
        return
    ukernel_ldb(kc, F, a, F, b, hw, F, pt, NR, 0, F, pt, F, pt, NR)
    _store_tile(F, pt, NR, cp, ohw, rows, cols, flags, bias_at, res_at, ohw)


@njit(**_JIT)
def _relu_rows(F, out, ohw, m0, m1, q0, q1, relu):
    """The activation ``relu`` (see :func:`_activate_line`) in place over out[m0:m1, q0:q1] (NaN
    stays NaN, as in the interpreter)."""
    for m in range(m0, m1):
        row = F[out + m * ohw + q0:out + m * ohw + q1]
        _activate_line(row, row, q1 - q0, relu)


@njit(**_JIT)
def k_convp(F, B, I, J, X, R, p, sbase):
    """Convolution tile: output channels [m0, m1) x pixels [q0, q1) of blocks [b0, b1)."""
    d = p[0]
    if p[1] >= p[2] or p[3] >= p[4] or p[5] >= p[6]:
        return  # an empty tile (its phase planes would have a negative row count)
    C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = read_window(X, d)
    groups = X[d + C_GROUPS]
    cg = X[d + C_CG]
    mg = X[d + C_MG]
    wpack = X[d + C_WPACK]
    mpad = X[d + C_MPAD]
    KC = X[d + C_KC]
    NC = X[d + C_NC]
    epi = X[d + C_EPI]
    pb = sbase + X[d + C_PANEL]
    form = X[d + C_FORM]
    bias = X[d + C_BIAS]
    relu = X[d + C_RELU]
    res = X[d + C_RES]
    # a 1x1 stride-1 conv's micro-kernel may read B's rows from the input planes in place
    inplace = (X[d + C_INPLACE] & 1) != 0
    init = bias >= 0 or res >= 0
    trans = form == FORM_TRANSPOSED
    wd = MR if trans else NR
    pt = pb + KC * panel_columns(NC)
    pp = pt + MR * NR + NR  # padded input rows (after the tile and the panels' overrun slack)
    m0 = p[3]
    m1 = p[4]
    ohw = OH * OW
    K = cg * kh * kw
    M = groups * mg
    pointwise = kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 and OW == W and OH == H
    Wp = X[d + C_WP]
    # padded input rows the task's pixels reach, as stride-phase planes of Rq x Wq
    r0 = (p[5] // OW) * sh
    r1 = ((p[6] - 1) // OW) * sh + (kh - 1) * dh + 1
    Rq = (r1 - r0 + sh - 1) // sh
    Wq = (Wp + sw - 1) // sw
    if form == FORM_WINOGRAD:  # (the K and NC words hold tile rows per chunk and its padded tile count)
        winograd_block(F, X, R, p, sbase, pb, X[d + W_X], X[d + W_OUT], C, H, W, ph, pw, OH, OW, groups, cg, mg,
                       wpack, mpad, KC, NC, Wp, epi, bias, relu, res)
        return
    if form == FORM_PLANES:
        _planes(F, I, X, R, p, sbase, pb, C, H, W, sh, sw, ph, pw, kh, kw, dh, dw, OH, OW, groups, cg, mg,
                wpack, mpad, epi, r0, Rq, Wq, bias, relu, res)
        return
    if form == FORM_PIXEL_ROWS:
        # an unpadded 1x1 conv's pixel rows are read in place at any stride
        # (and no end pads: every output pixel's window lies inside the plane)
        unpadded_1x1 = kh == 1 and kw == 1 and ph == 0 and pw == 0 and (OH - 1) * sh < H and (OW - 1) * sw < W
        _pixel_rows(F, I, X, R, p, sbase, pb, unpadded_1x1, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, ohw,
                    groups, cg, mg, wpack, mpad, KC, NC, epi, r0, Rq, Wq, bias, relu, res,
                    (X[d + C_INPLACE] & PACK_PIXEL_ROWS) != 0, (X[d + C_INPLACE] & STRIDED_PLAIN_ROWS) != 0,
                    r1, Wp)
        return
    for b in range(p[1], p[2]):
        n = b // groups
        g = b - n * groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        out = X[d + W_OUT] + (n * M + g * mg) * ohw
        wg = wpack + g * mpad * K
        if not pointwise:
            _pad_phases(F, xb, cg, H, W, ph, pw, r0, Rq, sh, sw, Wq, pp)
        qc = p[5]
        while qc < p[6]:
            nc = min(NC, p[6] - qc)
            if init and trans:
                _init_rows(F, out, ohw, bias + g * mg if bias >= 0 else -1,
                           res + (n * M + g * mg) * ohw if res >= 0 else -1, m0, m1, qc, qc + nc)
            pc = 0
            while pc < K:
                kc = min(KC, K - pc)
                # (read in place, the micro-kernel takes B's rows straight from the input planes)
                if pointwise and not inplace:
                    _gather_pointwise(F, xb, H, W, pc, kc, qc, nc, pb, wd)
                elif not pointwise:
                    _gather_padded(F, pp, Rq, Wq, kh, kw, sh, sw, dh, dw, OW, r0 // sh, pc, kc, qc, nc, pb, wd)
                if trans:
                    _transposed_block(F, kc, pb, wg + pc * mpad, out, ohw, qc, nc, m0, m1, pt, pc == 0 and not init)
                    pc += kc
                    continue
                flags = _store_flags(pc == 0, pc + kc >= K, bias, res, relu)
                for ir in range(m0, m1, MR):
                    rows = min(MR, m1 - ir)
                    a = wg + pc * mpad + ir * kc
                    for jr in range(0, nc, NR):
                        cols = min(NR, nc - jr)
                        cp = out + ir * ohw + qc + jr
                        # B's rows: the input planes in place, or the packed panel (NR floats a row)
                        brow, ldb = (xb + pc * H * W + qc + jr, H * W) if inplace else (pb + jr * kc, NR)
                        _epilogue_tile(F, kc, a, brow, ldb, cp, ohw, rows, cols, flags,
                                       bias + g * mg + ir, res + (n * M + g * mg + ir) * ohw + qc + jr, pt)
                pc += kc
            if relu and trans:
                _relu_rows(F, out, ohw, m0, m1, qc, qc + nc, relu)
            if epi >= 0:
                ew_epilogue(F, X, R, epi, b * mg + m0, b * mg + m1, qc, qc + nc, sbase)
            qc += nc


@njit(**_JIT)
def _planes(F, I, X, R, p, sbase, pb, C, H, W, sh, sw, ph, pw, kh, kw, dh, dw, OH, OW, groups, cg, mg,
            wpack, mpad, epi, r0, Rq, Wq, bias, relu, res):
    """The plane form of :func:`k_convp` for one task row ``p`` (see the module's text): per block,
    its padded phase planes, then its tiles (:func:`_planes_rows`, or :func:`_planes_wrapped` on
    rows shorter than NR pixels) and the fused epilogue."""
    d = p[0]
    K = cg * kh * kw
    M = groups * mg
    ohw = OH * OW
    m0 = p[3]
    m1 = p[4]
    q0 = p[5]
    q1 = p[6]
    ti = (pb + 1) // 2  # the tap table, int64-aligned
    pt = 2 * (ti + K)  # the edge tile
    pp = pt + PLANES_ROWS * NR + NR  # the phase planes
    phase = Rq * Wq
    _tap_table(I, ti, cg, kh, kw, sh, sw, dh, dw, sh * sw * phase, phase, Wq, 0)
    o0 = r0 // sh
    flags = _store_flags(True, True, bias, res, relu)
    for b in range(p[1], p[2]):
        n = b // groups
        g = b - n * groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        out = X[d + W_OUT] + (n * M + g * mg) * ohw
        wg = wpack + g * mpad * K
        _pad_phases(F, xb, cg, H, W, ph, pw, r0, Rq, sh, sw, Wq, pp)
        bias_g = bias + g * mg
        res_g = res + (n * M + g * mg) * ohw
        if OW < NR:
            _planes_wrapped(F, I, K, wg, pp, ti, pt, Wq, OW, o0, ohw, out, m0, m1, q0, q1, flags, bias_g, res_g)
        else:
            _planes_rows(F, I, K, wg, pp, ti, pt, Wq, OW, o0, ohw, out, m0, m1, q0, q1, flags, bias, bias_g, res,
                         res_g)
        if epi >= 0:
            ew_epilogue(F, X, R, epi, b * mg + m0, b * mg + m1, q0, q1, sbase)


@njit(**_JIT)
def _planes_rows(F, I, K, wg, pp, ti, pt, Wq, OW, o0, ohw, out, m0, m1, q0, q1, flags, bias, bias_g, res, res_g):
    """The plane form's tiles on output rows of at least NR pixels: runs of at most NR pixels of one
    row; a tile short of 4 channels or NR pixels goes through the scratch tile."""
    q = q0
    while q < q1:
        oh = q // OW
        ow = q - oh * OW
        cols = min(NR, OW - ow, q1 - q)
        brow = pp + (oh - o0) * Wq + ow  # (a short run reads on into the planes' next floats: junk columns)
        for ic in range(m0, m1, PLANES_ROWS):
            rows = min(PLANES_ROWS, m1 - ic)
            a = wg + ic * K
            cp = out + ic * ohw + q
            if rows == PLANES_ROWS and cols == NR:
                # (operands whose flag is off point at C: valid memory, read and dropped)
                ukernel_planes(K, F, a, F, brow, I, ti, F, cp, ohw, flags, F, bias_g + ic if bias >= 0 else cp,
                               F, res_g + ic * ohw + q if res >= 0 else cp, ohw)
                continue
            ukernel_planes(K, F, a, F, brow, I, ti, F, pt, NR, 0, F, pt, F, pt, NR)
            _store_tile(F, pt, NR, cp, ohw, rows, cols, flags, bias_g + ic, res_g + ic * ohw + q, ohw)
        q += cols


@njit(**_JIT)
def _planes_wrapped(F, I, K, wg, pp, ti, pt, Wq, OW, o0, ohw, out, m0, m1, q0, q1, flags, bias_g, res_g):
    """The plane form on output rows shorter than NR pixels (7x7 planes): each tile is NR
    consecutive positions of the phase planes' rows (``(oh - o0) * Wq + ow``), so it runs on
    across output rows, and its columns past a row's OW pixels are junk; each tile goes through
    the scratch tile and its rows' runs of real pixels are stored from there."""
    p_lo = (q0 // OW - o0) * Wq + q0 % OW
    p_hi = ((q1 - 1) // OW - o0) * Wq + (q1 - 1) % OW + 1
    t = p_lo
    while t < p_hi:
        for ic in range(m0, m1, PLANES_ROWS):
            rows = min(PLANES_ROWS, m1 - ic)
            ukernel_planes(K, F, wg + ic * K, F, pp + t, I, ti, F, pt, NR, 0, F, pt, F, pt, NR)
            r = t // Wq
            while r * Wq < min(t + NR, p_hi):
                lo = max(t, r * Wq, p_lo)
                hi = min(t + NR, r * Wq + OW, p_hi)
                if lo < hi:
                    q = (r + o0) * OW + lo - r * Wq
                    _store_tile(F, pt + lo - t, NR, out + ic * ohw + q, ohw, rows, hi - lo, flags, bias_g + ic,
                                res_g + ic * ohw + q, ohw)
                r += 1
        t += NR


@njit(**_JIT)
def _tap_table(I, ti, cg, kh, kw, sh, sw, dh, dw, chan, phase, Wq, plane):
    """I[ti + k] = where col row k = (c, i, j) starts: in the phase planes (``plane`` 0) or,
    for a pointwise conv, in the input (channel c at c * ``plane``)."""
    k = ti
    for c in range(cg):
        if plane:
            I[k] = c * plane
            k += 1
            continue
        for i in range(kh):
            ra = (i * dh) % sh
            ri = (i * dh) // sh
            for j in range(kw):
                cb = (j * dw) % sw
                I[k] = c * chan + (ra * sw + cb) * phase + ri * Wq + (j * dw) // sw
                k += 1


#: Floats of one group's packed weights up to which the pixel-row form walks tiles outermost.
#: ResNeXt's 64-channel groups of 3x3 convs (147 Ki floats) run 1.4-2.2% faster with channel
#: panels outer (5.90 -> 5.80 ms); 128 -> 128 at 28x28 and 14x14 (also 147 Ki) measured the same.
WEIGHTS_IN_L2 = 100 * 1024


@njit(**_JIT)
def _row_table(I, ri, q, rows, OW, o0, rs, cs):
    """I[ri + r] = where pixel row r of the tile at output pixel q starts (relative to a k's
    offset): ``(oh - o0) * rs + ow * cs`` for output pixel (oh, ow); the rows past ``rows``
    repeat the last real pixel, so they read valid memory."""
    oh = q // OW
    ow = q - oh * OW
    for r in range(PX_MR):
        I[ri + r] = (oh - o0) * rs + ow * cs
        if r + 1 < rows:
            ow += 1
            if ow == OW:
                ow = 0
                oh += 1


@njit(**_JIT)
def _pack_pixel_rows(F, I, kt, ri, base, pk, kb, qc, qe, OW, o0, rs, cs):
    """Copy the pixel rows of the tiles of pixels [qc, qe) for ``kb`` rows of K (their offsets
    at ``I[kt:kt + kb]``) to ``pk``, tile after tile, each ``kb`` x PX_MR floats, k-major.

    Read in place, every k of a tile reads PX_MR floats of another input plane: one cache line
    per k on top of the weights' two, half of it used, in a stride the L1 prefetcher follows
    badly.  Packed, a tile's rows are one sequential stream; ResNeXt's 8x8 4096 -> 1024 convs'
    tile loop measured 10-15% faster for a copy of the input per task.  Rows past a short
    tile's end repeat its last pixel (:func:`_row_table`), so they hold finite input values."""
    nq = (qe - qc + PX_MR - 1) // PX_MR
    for iq in range(nq):
        q = qc + iq * PX_MR
        _row_table(I, ri, q, min(PX_MR, qe - q), OW, o0, rs, cs)
        dst = pk + iq * kb * PX_MR
        if I[ri + PX_MR - 1] - I[ri] == PX_MR - 1:  # one run of PX_MR pixels
            r0 = base + I[ri]
            for kk in range(kb):
                copy_block(F, dst + kk * PX_MR, r0 + I[kt + kk], PX_MR)
            continue
        for kk in range(kb):
            src = base + I[kt + kk]
            for r in range(PX_MR):
                F[dst + kk * PX_MR + r] = F[src + I[ri + r]]


@njit(**_JIT)
def _pixel_rows(F, I, X, R, p, sbase, pb, in_place, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OW, ohw,
                groups, cg, mg, wpack, mpad, KC, NC, epi, r0, Rq, Wq, bias, relu, res, pack, plain, r1, Wp):
    """The pixel-row form of :func:`k_convp` for one task row ``p``.

    ``plain`` (a strided conv, not read in place): the task's padded rows ``[r0, r1)`` are copied as
    they are, ``Wp`` floats a row, and each pixel row is read at the stride from them, where the
    stride-phase planes put a channel's taps in sh x sw planes (``lower_conv.STRIDED_PIXEL_ROWS_PLAIN``).

    With channel panels outer, K runs in blocks of ``KC`` rows (all panels pass over one block
    of the input before the next; see ``lower_conv.pixel_rows_depth``): the first block's tiles
    store bias + residual + partial sums, the later ones accumulate, the last applies the ReLU."""
    d = p[0]
    K = cg * kh * kw
    M = groups * mg
    m0 = p[3]
    m1 = p[4]
    ti = (pb + 1) // 2  # the k table, int64-aligned
    ri = ti + K  # the row table
    pt = 2 * (ri + PX_MR)  # the edge tile
    pp = pt + PX_MR * PX_NR + NR  # the phase planes
    if plain:  # one phase: plain padded rows, read at the stride
        Rq = r1 - r0
        Wq = Wp
    phase = Rq * Wq
    # packed pixel rows (read in place only, so after the slack where the phase planes would start): a k
    # table kk * PX_MR, a row table 0..PX_MR-1, then the tiles' rows, 64-byte aligned
    pki = (pp + NR + 1) // 2
    pkr = pki + KC
    pk = (2 * (pkr + PX_MR) + 15) // 16 * 16
    if pack:
        for kk in range(KC):
            I[pki + kk] = kk * PX_MR
        for r in range(PX_MR):
            I[pkr + r] = r
    tsh, tsw = (1, 1) if plain else (sh, sw)  # the planes' phases
    # the task's channel panels: m0 is a panel's start, m1 one's end or mg (pixel_row_panels)
    wide, narrow = pixel_row_panels(mg)
    panel0 = 0
    while pixel_row_panel_start(panel0 + 1, wide) <= m0:
        panel0 += 1
    panels_end = panel0
    while panels_end < wide + narrow and pixel_row_panel_start(panels_end, wide) < m1:
        panels_end += 1
    _tap_table(I, ti, cg, kh, kw, tsh, tsw, dh, dw, tsh * tsw * phase, phase, Wq, H * W if in_place else 0)
    # pixel rows in the phase planes (from the task's first row), in plain rows at the stride, or in
    # the input itself
    o0, rs, cs = (0, sh * W, sw) if in_place else ((r0 // sh, sh * Wq, sw) if plain else (r0 // sh, Wq, 1))
    for b in range(p[1], p[2]):
        n = b // groups
        g = b - n * groups
        xb = X[d + W_X] + (n * C + g * cg) * H * W
        out = X[d + W_OUT] + (n * M + g * mg) * ohw
        wg = wpack + g * mpad * K
        if not in_place:
            _pad_phases(F, xb, cg, H, W, ph, pw, r0, Rq, tsh, tsw, Wq, pp)
        base = xb if in_place else pp
        qc = p[5]
        bias_g = bias + g * mg
        res_g = res + (n * M + g * mg) * ohw
        while qc < p[6]:
            qe = min(qc + NC, p[6])
            # tiles outer when the group's weights stay in L2 (each tile's input rows are then
            # read from L1 for every channel panel), channel panels outer otherwise
            nq = (qe - qc + PX_MR - 1) // PX_MR
            npan = panels_end - panel0
            tiles_outer = (m1 - m0) * K <= WEIGHTS_IN_L2
            kc = K if tiles_outer else KC
            packed = pack and in_place and not tiles_outer
            pc = 0
            while pc < K:
                kb = min(kc, K - pc)
                flags = _store_flags(pc == 0, pc + kb >= K, bias, res, relu)
                if packed:
                    _pack_pixel_rows(F, I, ti + pc, ri, base, pk, kb, qc, qe, OW, o0, rs, cs)
                for it in range(nq * npan):
                    if tiles_outer:
                        iq = it // npan
                        ip = it - iq * npan
                    else:
                        ip = it // nq
                        iq = it - ip * nq
                    ic = pixel_row_panel_start(panel0 + ip, wide)
                    width = PX_NR if panel0 + ip < wide else PX_NR_NARROW
                    q = qc + iq * PX_MR
                    cols = min(width, m1 - ic)
                    wb = wg + ic * K + pc * width
                    rows = min(PX_MR, qe - q)
                    # the tile's rows: packed (kb x PX_MR floats a tile), or read through the k and row tables
                    if packed:
                        src, kt, rt = pk + iq * kb * PX_MR, pki, pkr
                    else:
                        src, kt, rt = base, ti + pc, ri
                        if ip == 0 or not tiles_outer:  # tiles outer: one row table serves all its panels
                            _row_table(I, ri, q, rows, OW, o0, rs, cs)
                    cp = out + ic * ohw + q
                    # an edge tile (fewer pixels or channels than the tile's) is stored by the kernel too,
                    # only its live rows and columns (ukernel.EDGE_COLS_SHIFT)
                    tf = flags if rows == PX_MR and cols == width else edge_flags(flags, cols, rows)
                    # (operands whose flag is off point at C: valid memory, read and dropped)
                    if width == PX_NR:
                        ukernel_rows(kb, F, src, I, kt, I, rt, F, wb, F, cp, ohw, tf,
                                     F, bias_g + ic if bias >= 0 else cp,
                                     F, res_g + ic * ohw + q if res >= 0 else cp)
                    else:
                        ukernel_rows_narrow(kb, F, src, I, kt, I, rt, F, wb, F, cp, ohw, tf,
                                            F, bias_g + ic if bias >= 0 else cp,
                                            F, res_g + ic * ohw + q if res >= 0 else cp)
                pc += kb
            if epi >= 0:
                ew_epilogue(F, X, R, epi, b * mg + m0, b * mg + m1, qc, qe, sbase)
            qc = qe
