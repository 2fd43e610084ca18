"""Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (the ``winograd`` form of ``k_convp``).

Per block (image, group) and chunk of tile rows (each tile: 2x2 outputs from a 4x4
input window, windows 2 apart):

1. the chunk's zero-padded input rows are copied into planes (one fill, then
   the rows' insides, as for the other forms);
2. :func:`~.ukernel_winograd.wino_in` turns every channel's windows into
   ``V[xi][c][tile]`` (16 matrices of cg rows; rows ``ldv`` apart, WIDTH floats
   of slack each, since a tile row's last vector runs over into the next);
3. 16 GEMMs ``Mx[xi] = U[xi] . V[xi]`` with the strided-B micro-kernel
   (:func:`~.ukernel.ukernel_ldb`), U the transformed weights packed at compile
   time as MR-row A panels per (group, xi);
4. :func:`~.ukernel_winograd.wino_out` turns ``Mx`` into the 2x2 outputs and
   applies bias, residual and ReLU at its masked stores; a fused elementwise
   program runs over the chunk's output rows after that.

Scratch (floats, from the task's panel offset): the planes of the chunk
(cg x (2*TRC + 2) x Wq, plus slack for over-long reads), V (16 matrices of cg x
ldv) and Mx (16 of mpad x TCP), each 16-float aligned, the matrices an odd
number of lines apart.  Multiplications per tile and channel pair: 16 instead
of 36.
"""

from __future__ import annotations

from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_ew import ew_epilogue
from .kernels_window import _pad_phases
from .ukernel import (
    EPI_BIAS,
    EPI_HSWISH,
    EPI_RELU,
    EPI_RELU6,
    EPI_RESIDUAL,
    EPI_SILU,
    MR,
    NR,
    WIDTH,
    ukernel_ldb,
    ukernel_ldb4,
    ukernel_ldb8,
)
from .ukernel_winograd import wino_in, wino_out

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@njit(**_JIT)
def ldb_panel(rows, k, F, a, b, ldb, c, ldc, flags, bias, res, ldr):
    """``ukernel_ldb`` on the first ``rows`` rows of an MR-row A panel, rounded up to the 4, 8 or
    MR rows of a kernel variant (C gets that many rows: exactly ``rows`` when it is 4, 8 or MR;
    ``rows`` past MR: MR rows).  The 8-row variant only where MR is larger: with AVX2's MR = 6 it
    read two rows past the panel and wrote two past the tile (1x1 convs accumulating K blocks got
    another panel's junk; the last panel's rows ran past the output)."""
    if rows > 8 or (rows > 4 and MR <= 8):
        ukernel_ldb(k, F, a, F, b, ldb, F, c, ldc, flags, F, bias, F, res, ldr)
    elif rows > 4:
        ukernel_ldb8(k, F, a, F, b, ldb, F, c, ldc, flags, F, bias, F, res, ldr)
    else:
        ukernel_ldb4(k, F, a, F, b, ldb, F, c, ldc, flags, F, bias, F, res, ldr)


@njit(**_JIT)
def _odd_lines(floats):
    """``floats`` (a multiple of 16) rounded up to an odd number of 64-byte lines.

    The transforms touch all 16 matrices of V (or Mx) for each channel; with
    matrices a multiple of 4 KiB apart those 16 lines share one L1 set (12
    ways) and evict each other.  An odd line count spreads them over 16 sets:
    ResNeXt's 64-channel groups at 32x32 (V 36 KiB, Mx 32 KiB apart) took
    1.03 ms in the input transform, 0.36 ms with one more line."""
    return floats + 16 if (floats // 16) % 2 == 0 else floats


@njit(**_JIT)
def winograd_layout(cg, mpad, TRC, TCP, Wq):
    """Offsets (planes, V, Mx, end) of the scratch above, relative to the task's panel, and
    the strides of V's and Mx's 16 matrices."""
    planes = 0  # (the planes come first)
    vb = ((cg * (2 * TRC + 2) * Wq + 2 * WIDTH + 16) + 15) // 16 * 16
    ldv = TCP + WIDTH
    vs = _odd_lines(cg * ldv)
    ms = _odd_lines(mpad * TCP)
    mb = (vb + 16 * vs + WIDTH + 15) // 16 * 16
    end = mb + 16 * ms + 2 * WIDTH
    return planes, vb, mb, end, vs, ms


def scratch_floats(cg: int, mpad: int, trc: int, tcp: int, wq: int) -> int:
    """Floats of scratch one rTask of the winograd form needs (see the module docstring)."""
    return int(winograd_layout(cg, mpad, trc, tcp, wq)[3]) + 16


@njit(**_JIT)
def winograd_block(F, X, R, p, sbase, pb, xoff, ooff, C, H, W, ph, pw, OH, OW, groups, cg, mg, wpack, mpad,
                   TRC, TCP, Wq, epi, bias, relu, res):
    """The winograd form of ``k_convp`` for one task row ``p``: blocks [p1, p2), output
    channels [p3, p4) (p3 a multiple of MR) and the tile rows covering pixels [p5, p6)
    (whole tile rows: the partition cuts at multiples of 2*OW)."""
    m0 = p[3]
    m1 = p[4]
    M = groups * mg
    ohw = OH * OW
    TW = (OW + 1) // 2
    TH = (OH + 1) // 2
    tr_lo = p[5] // (2 * OW)
    tr_hi = min(TH, (p[6] + 2 * OW - 1) // (2 * OW))
    ldv = TCP + WIDTH
    _, vo, mo, _, VS, MS = winograd_layout(cg, mpad, TRC, TCP, Wq)
    pp = pb
    vb = pb + vo
    mb = pb + mo
    flags = ((EPI_BIAS if bias >= 0 else 0) | (EPI_RESIDUAL if res >= 0 else 0)
             | (EPI_SILU if relu == 4 else EPI_HSWISH if relu == 3
                else (EPI_RELU if relu else 0) | (EPI_RELU6 if relu == 2 else 0)))
    for b in range(p[1], p[2]):
        n = b // groups
        g = b - n * groups
        xb = xoff + (n * C + g * cg) * H * W
        out = ooff + (n * M + g * mg) * ohw
        ug = wpack + g * 16 * mpad * cg
        tr = tr_lo
        while tr < tr_hi:
            trc = min(TRC, tr_hi - tr)
            Rq = 2 * trc + 2
            plane = Rq * Wq
            _pad_phases(F, xb, cg, H, W, ph, pw, 2 * tr, Rq, 1, 1, Wq, pp)
            for i in range(trc):
                for tx in range(0, TW, WIDTH):
                    wino_in(F, pp + 2 * i * Wq + 2 * tx, Wq, plane, F, vb + i * TW + tx, ldv, VS, cg)
            nt = trc * TW
            for xi in range(16):
                for tp in range(0, nt, NR):
                    for mp in range(m0, m1, MR):
                        cp = mb + xi * MS + (mp - m0) * TCP + tp
                        # (a last panel of up to 4 or 8 channels runs only those rows; Mx has mpad rows)
                        ldb_panel(m1 - mp, cg, F, ug + (xi * mpad + mp) * cg, vb + xi * VS + tp, ldv, cp, TCP, 0,
                                  cp, cp, TCP)
            for i in range(trc):
                oy = 2 * (tr + i)
                nrows = min(2, OH - oy)
                for tx in range(0, TW, WIDTH):
                    o = out + m0 * ohw + oy * OW + 2 * tx
                    wino_out(F, mb + i * TW + tx, MS, TCP, F, o, OW, ohw, m1 - m0, min(2 * WIDTH, OW - 2 * tx),
                             nrows, flags, F, bias + g * mg + m0 if bias >= 0 else o,
                             F, res + (n * M + g * mg + m0) * ohw + oy * OW + 2 * tx if res >= 0 else o)
            if epi >= 0:
                ew_epilogue(F, X, R, epi, b * mg + m0, b * mg + m1, 2 * tr * OW, min(ohw, 2 * (tr + trc) * OW),
                            sbase)
            tr += trc
