"""GEMM rKernels: MatMul, Gemm and the GEMM half of convolutions.

A GEMM rOperator is described once in the int64 side array (the
*descriptor*) and each rTask computes one tile ``C[b, m0:m1, n0:n1]`` for a
range of batch matrices, then runs the fused epilogue program (bias,
residual add, activation...) over that tile while it is still in cache.

Descriptor layout (element offsets into the float32 arena)::

    [M, N, K, a_rs, a_cs, b_rs, b_cs, c_rs, epilogue_prog, alpha_imm, table, pack_scratch, b_prepacked]

and ``table`` holds, per batch matrix, ``(a_off, b_off, c_off)``.  With ``b_prepacked`` = 1, B is a
constant weight packed at compile time in the micro-kernel's panel layout (:func:`prepack_b`) and
``b_off`` points at the panels; ``b_rs``/``b_cs`` are then unused and task tiles start at multiples of NR
columns.  ``b_prepacked`` = 2 (:data:`B_PACKED_A_IN_PLACE`): the same, and A's rows (unit column stride,
alpha 1) are read in place (:func:`gemm_prepacked_a_in_place`), by the task rows of :func:`k_gemm_lda`.

Five inner paths: the micro-kernel on a weight packed at compile time (:func:`gemm_prepacked`: no
per-call packing of B, 4- and 8-row kernel variants for skinny M); the packed SIMD micro-kernel of
:mod:`.ukernel` for tiles
with enough rows and work; OpenBLAS ``sgemm`` (when the micro-kernel is
switched off) on a large tile whose operands have a unit stride; a row-broadcast loop for the skinny
GEMV-like tiles of batch-1 RNNs (vectorized over N, four K steps per pass so
C is loaded once per four rows of B); and a generic strided loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .blas import HAVE_BLAS, sgemm
from .kernels_ew import ew_epilogue
from .kernels_gemm_inplace import lda_tile_into
from .ukernel import MR, NR, WIDTH, ukernel, ukernel4, ukernel8
from .ukernel_pack import pack_a_panel, pack_b_columns

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_JIT_REASSOC = dict(_JIT, fastmath={"reassoc", "contract", "nsz"})

USE_BLAS = HAVE_BLAS
#: The packed micro-kernel GEMM (ukernel.py) instead of OpenBLAS for tiles big enough.
USE_PACKED = True
#: Whole MR-row panels of A with rows of unit stride, and whole NR-column panels of a B stored column
#: by column, are packed by the vector transposes of :mod:`.ukernel_pack` (False: element by element,
#: as the ragged ends are).
PACK_VECTORS = True
#: Tiles with fewer multiply-adds than this (or fewer rows) use the loops.
BLAS_MIN_MACS = 32 * 1024
BLAS_MIN_ROWS = 12

D_M, D_N, D_K, D_ARS, D_ACS, D_BRS, D_BCS, D_CRS, D_EPI, D_ALPHA, D_TABLE, D_PACK, D_BPACKED = range(13)
DESC_LEN = 13

#: Blocking of the packed GEMM: a KC x NC panel of B (L2) against MC x KC blocks of A.
KC = 256
NC = 512
MC = 8 * MR
#: Float32 scratch the packed GEMM needs: packed A, packed B and one edge tile.
PACK_FLOATS = MC * KC + KC * ((NC + NR - 1) // NR) * NR + MR * NR + 64
#: Blocking of the GEMM on a weight packed at compile time: KC_PRE rows of B per pass and A in
#: blocks of MC_PRE rows (MC_PRE x KC_PRE floats: within PACK_FLOATS, less one edge tile).
KC_PRE = 512
MC_PRE = 24 * MR
#: Tiles below these sizes keep to the vectorized loops (bandwidth-bound GEMVs).
PACKED_MIN_ROWS = 4
PACKED_MIN_MACS = 16 * 1024
#: Above this depth OpenBLAS's blocking beat ours in measurements (deep, skinny
#: convolution GEMMs such as DeepSpeech2's 32 x 3075 x 7392), so it keeps them.
PACKED_MAX_K = 1536


@njit(**_JIT)
def _pack_a(F, a_off, a_rs, a_cs, i0, mc, p0, kc, alpha, P):
    """P[(mp * kc + k) * MR + r] = alpha * A[i0 + mp*MR + r, p0 + k], zero-padded to whole MR panels."""
    panels = (mc + MR - 1) // MR
    for mp in range(panels):
        base = mp * kc * MR
        rows = min(MR, mc - mp * MR)
        done = 0
        if rows == MR and a_cs == 1 and PACK_VECTORS:
            # whole column blocks transposed in registers (ukernel_pack.py), the ragged end below
            blocks = kc // WIDTH
            pack_a_panel(blocks, F, a_off + (i0 + mp * MR) * a_rs + p0, a_rs, P, base, alpha)
            done = blocks * WIDTH
        for r in range(rows):
            src = a_off + (i0 + mp * MR + r) * a_rs + p0 * a_cs
            if a_cs == 1:
                row = F[src:src + kc]
                for k in range(done, kc):
                    P[base + k * MR + r] = row[k] * alpha
            else:
                for k in range(kc):
                    P[base + k * MR + r] = F[src + k * a_cs] * alpha
        for r in range(rows, MR):
            for k in range(kc):
                P[base + k * MR + r] = f32(0.0)


@njit(**_JIT)
def _pack_b(F, b_off, b_rs, b_cs, p0, kc, j0, nc, P):
    """P[(jp * kc + k) * NR + j] = B[p0 + k, j0 + jp*NR + j], zero-padded to whole NR panels."""
    panels = (nc + NR - 1) // NR
    for jp in range(panels):
        base = jp * kc * NR
        cols = min(NR, nc - jp * NR)
        if b_cs == 1:
            for k in range(kc):
                src = b_off + (p0 + k) * b_rs + j0 + jp * NR
                row = F[src:src + cols]
                dst = P[base + k * NR:base + k * NR + NR]
                for j in range(cols):
                    dst[j] = row[j]
                for j in range(cols, NR):
                    dst[j] = f32(0.0)
        elif b_rs == 1:
            # a transposed view (attention's K^T): a column of B is a contiguous run of kc floats;
            # whole panels WIDTH columns at a time through the vector transposes of ukernel_pack.py
            done = 0
            if cols == NR and PACK_VECTORS:
                blocks = kc // WIDTH
                for h in range(0, NR, WIDTH):
                    pack_b_columns(blocks, F, b_off + p0 + (j0 + jp * NR + h) * b_cs, b_cs, P, base + h, f32(1.0))
                done = blocks * WIDTH
            for j in range(cols):
                src = b_off + p0 + (j0 + jp * NR + j) * b_cs
                col = F[src:src + kc]
                for k in range(done, kc):
                    P[base + k * NR + j] = col[k]
            for k in range(kc):
                for j in range(cols, NR):
                    P[base + k * NR + j] = f32(0.0)
        else:
            for k in range(kc):
                dst = P[base + k * NR:base + k * NR + NR]
                for j in range(cols):
                    dst[j] = F[b_off + (p0 + k) * b_rs + (j0 + jp * NR + j) * b_cs]
                for j in range(cols, NR):
                    dst[j] = f32(0.0)


@njit(**_JIT)
def tile_into(F, kc, a, b, cp, ldc, rows, cols, first, pt):
    """One micro-kernel tile into C at ``cp`` (row stride ``ldc``): in place when it is whole,
    else through the scratch tile at ``pt``, copying (``first``) or adding its ``rows x cols`` corner."""
    if rows == MR and cols == NR:
        ukernel(kc, F, a, F, b, F, cp, ldc, 0 if first else 1)
        return
    ukernel(kc, F, a, F, b, F, pt, NR, 0)
    tile = F[pt:pt + MR * NR]
    for r in range(rows):
        crow = F[cp + r * ldc:cp + r * ldc + cols]
        trow = tile[r * NR:r * NR + cols]
        if first:
            for j in range(cols):
                crow[j] = trow[j]
        else:
            for j in range(cols):
                crow[j] += trow[j]


@njit(**_JIT)
def gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha, acc, pack):
    """C[m0:m1, n0:n1] (+)= alpha A B with the SIMD micro-kernel on packed panels.

    ``pack`` is the float offset in F of PACK_FLOATS of scratch; C has a unit
    column stride.  Tiles cut by the matrix edge go through a scratch tile.
    """
    pa = pack
    pb = pack + MC * KC
    pt = pb + KC * ((NC + NR - 1) // NR) * NR
    for jc in range(n0, n1, NC):
        nc = min(NC, n1 - jc)
        for pc in range(0, K, KC):
            kc = min(KC, K - pc)
            first = pc == 0 and acc == 0
            _pack_b(F, b_off, b_rs, b_cs, pc, kc, jc, nc, F[pb:pt])
            for ic in range(m0, m1, MC):
                mc = min(MC, m1 - ic)
                _pack_a(F, a_off, a_rs, a_cs, ic, mc, pc, kc, alpha, F[pa:pb])
                for ir in range(0, mc, MR):
                    rows = min(MR, mc - ir)
                    for jr in range(0, nc, NR):
                        cols = min(NR, nc - jr)
                        cp = c_off + (ic + ir) * c_rs + jc + jr
                        tile_into(F, kc, pa + ir * kc, pb + jr * kc, cp, c_rs, rows, cols, first, pt)


def prepack_b(b: np.ndarray) -> np.ndarray:
    """A constant K x N weight in the micro-kernel's panel layout, for :func:`gemm_prepacked`:
    ``P[(jp * K + k) * NR + j] = B[k, jp*NR + j]``, zero-padded to whole NR panels, so the kernel
    streams one panel's K rows of NR floats in order and any K block of it starts at ``k * NR``."""
    k, n = b.shape
    panels = -(-n // NR)
    padded = np.zeros((k, panels * NR), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, NR).transpose(1, 0, 2)).reshape(-1)


def prepacked_ok(m: int, n: int, k: int) -> bool:
    """Whether a GEMM of ``m`` rows against a constant weight gains from packing that weight at
    compile time: the micro-kernel path (4 rows and more; fewer rows stream B through the GEMV loops,
    which are bound by reading B either way)."""
    return USE_PACKED and m >= PACKED_MIN_ROWS and m * n * k >= PACKED_MIN_MACS


@njit(**_JIT)
def _panel_tile(F, kc, a, b, cp, ldc, rows, cols, first, pt):
    """``rows x cols`` of C at ``cp`` (+)= A panel @ B panel with the smallest kernel variant of at
    least ``rows`` rows (4, 8 or MR): in place when the variant's rows and NR columns are all
    real, else through the scratch tile at ``pt``."""
    flag = 0 if first else 1
    # (the 8-row variant only where MR is larger: with AVX2's MR = 6, 5-6 rows take the full kernel)
    if cols == NR and (rows == MR or (rows == 8 and MR > 8) or rows == 4):
        if rows == MR:
            ukernel(kc, F, a, F, b, F, cp, ldc, flag)
        elif rows == 8:
            ukernel8(kc, F, a, F, b, F, cp, ldc, flag)
        else:
            ukernel4(kc, F, a, F, b, F, cp, ldc, flag)
        return
    if rows > 8 or (rows > 4 and MR <= 8):
        ukernel(kc, F, a, F, b, F, pt, NR, 0)
    elif rows > 4:
        ukernel8(kc, F, a, F, b, F, pt, NR, 0)
    else:
        ukernel4(kc, F, a, F, b, F, pt, NR, 0)
    tile = F[pt:pt + MR * NR]
    for r in range(rows):
        crow = F[cp + r * ldc:cp + r * ldc + cols]
        trow = tile[r * NR:r * NR + cols]
        if first:
            for j in range(cols):
                crow[j] = trow[j]
        else:
            for j in range(cols):
                crow[j] += trow[j]


@njit(**_JIT)
def gemm_prepacked(F, a_off, a_rs, a_cs, bp, K, c_off, c_rs, m0, m1, n0, n1, alpha, pack):
    """C[m0:m1, n0:n1] = alpha A B with B packed at compile time (:func:`prepack_b`, at ``bp``);
    ``n0`` is a multiple of NR.  Only A is packed here, in MC_PRE x KC_PRE blocks (the scratch the
    per-call B panels would take holds them), once per block: for the token counts of transformers
    (up to MC_PRE rows) A is packed once per KC_PRE rows of B, and each B panel read from memory
    serves every row panel of A while it is in cache."""
    pa = pack
    pt = pack + MC_PRE * KC_PRE
    for pc in range(0, K, KC_PRE):
        kc = min(KC_PRE, K - pc)
        first = pc == 0
        for ic in range(m0, m1, MC_PRE):
            mc = min(MC_PRE, m1 - ic)
            _pack_a(F, a_off, a_rs, a_cs, ic, mc, pc, kc, alpha, F[pa:pa + MC_PRE * KC_PRE])
            for jr in range(n0, n1, NR):
                cols = min(NR, n1 - jr)
                b = bp + ((jr // NR) * K + pc) * NR
                for ir in range(0, mc, MR):
                    rows = min(MR, mc - ir)
                    cp = c_off + (ic + ir) * c_rs + jr
                    _panel_tile(F, kc, pa + ir * kc, b, cp, c_rs, rows, cols, first, pt)


#: ``b_prepacked`` word of a GEMM whose B is packed at compile time and whose A is read in place.
B_PACKED_A_IN_PLACE = 2


@njit(**_JIT)
def gemm_prepacked_a_in_place(F, a_off, a_rs, bp, K, c_off, c_rs, m0, m1, n0, n1, pt):
    """C[m0:m1, n0:n1] = A B with B packed at compile time (as for :func:`gemm_prepacked`) and A's
    rows read in place (unit column stride) by :mod:`.ukernel_lda`'s kernels: no packing of A.
    Packing A is a transposing gather of about a nanosecond a float, paid once per N columns: for a
    narrow N (a channels-last conv's 320 -> 80 projection) it cost a third as much as the multiply-adds.
    Row panels run outermost, so an MR-row panel of A (MR x KC_PRE floats) stays in L1 while every
    column panel of B multiplies it; ``pt``: an MR x NR scratch tile for a ragged last column panel."""
    for pc in range(0, K, KC_PRE):
        kc = min(KC_PRE, K - pc)
        acc = 0 if pc == 0 else 1
        for ir in range(m0, m1, MR):
            rows = min(MR, m1 - ir)
            a = a_off + ir * a_rs + pc
            for jr in range(n0, n1, NR):
                cols = min(NR, n1 - jr)
                b = bp + ((jr // NR) * K + pc) * NR
                lda_tile_into(rows, cols, kc, F, a, a_rs, b, c_off + ir * c_rs + jr, c_rs, acc, pt)


def packed_ok(mt: int, nt: int, k: int) -> bool:
    """Whether a tile may go to the packed micro-kernel (the same test as in the kernels)."""
    return mt >= PACKED_MIN_ROWS and mt * nt * k >= PACKED_MIN_MACS


@njit(**_JIT)
def _rows_times_b(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, alpha):
    """C[m, n0:n1] = alpha * sum_k A[m, k] B[k, n0:n1] with unit column stride in B and C.

    Four rows of C share each row of B read (the skinny GEMMs of batch-1
    RNNs are bound by reading B).  Loops index slices from 0, so numba emits
    no negative-index wrap-around and LLVM vectorizes them.
    """
    nt = n1 - n0
    m = m0
    while m < m1:
        rows = min(4, m1 - m)
        c0 = F[c_off + m * c_rs + n0:c_off + m * c_rs + n0 + nt]
        c1 = F[c_off + (m + 1) * c_rs + n0:c_off + (m + 1) * c_rs + n0 + nt] if rows > 1 else c0
        c2 = F[c_off + (m + 2) * c_rs + n0:c_off + (m + 2) * c_rs + n0 + nt] if rows > 2 else c0
        c3 = F[c_off + (m + 3) * c_rs + n0:c_off + (m + 3) * c_rs + n0 + nt] if rows > 3 else c0
        for j in range(nt):
            c0[j] = f32(0.0)
            c1[j] = f32(0.0)
            c2[j] = f32(0.0)
            c3[j] = f32(0.0)
        if rows == 1:
            ab = a_off + m * a_rs
            k = 0
            while k + 4 <= K:
                a0 = F[ab + k * a_cs]
                a1 = F[ab + (k + 1) * a_cs]
                a2 = F[ab + (k + 2) * a_cs]
                a3 = F[ab + (k + 3) * a_cs]
                r0 = b_off + k * b_rs + n0
                b0 = F[r0:r0 + nt]
                b1 = F[r0 + b_rs:r0 + b_rs + nt]
                b2 = F[r0 + 2 * b_rs:r0 + 2 * b_rs + nt]
                b3 = F[r0 + 3 * b_rs:r0 + 3 * b_rs + nt]
                for j in range(nt):
                    c0[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]
                k += 4
            while k < K:
                a0 = F[ab + k * a_cs]
                r0 = b_off + k * b_rs + n0
                b0 = F[r0:r0 + nt]
                for j in range(nt):
                    c0[j] += a0 * b0[j]
                k += 1
        else:
            for k in range(K):
                r0 = b_off + k * b_rs + n0
                bk = F[r0:r0 + nt]
                x0 = F[a_off + m * a_rs + k * a_cs]
                x1 = F[a_off + (m + 1) * a_rs + k * a_cs] if rows > 1 else f32(0.0)
                x2 = F[a_off + (m + 2) * a_rs + k * a_cs] if rows > 2 else f32(0.0)
                x3 = F[a_off + (m + 3) * a_rs + k * a_cs] if rows > 3 else f32(0.0)
                if rows == 4:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
                        c2[j] += x2 * v
                        c3[j] += x3 * v
                elif rows == 3:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
                        c2[j] += x2 * v
                else:
                    for j in range(nt):
                        v = bk[j]
                        c0[j] += x0 * v
                        c1[j] += x1 * v
        if alpha != f32(1.0):
            for j in range(nt):
                c0[j] *= alpha
                if rows > 1:
                    c1[j] *= alpha
                if rows > 2:
                    c2[j] *= alpha
                if rows > 3:
                    c3[j] *= alpha
        m += rows


@njit(**_JIT_REASSOC)
def _dot_tiles(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha):
    """Generic strides: one dot product per output element (vectorized when both K strides are 1)."""
    for m in range(m0, m1):
        ab = a_off + m * a_rs
        for n in range(n0, n1):
            bb = b_off + n * b_cs
            acc = f32(0.0)
            if a_cs == 1 and b_rs == 1:
                av = F[ab:ab + K]
                bv = F[bb:bb + K]
                for k in range(K):
                    acc += av[k] * bv[k]
            else:
                for k in range(K):
                    acc += F[ab + k * a_cs] * F[bb + k * b_rs]
            F[c_off + m * c_rs + n] = acc * alpha


@njit(**_JIT)
def gemm_acc(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, acc, pack):
    """C[m0:m1, n0:n1] (+)= A[m0:m1, :] @ B[:, n0:n1] with unit column strides in A, B and C.

    ``acc`` = 0 overwrites C, 1 adds to it (K-chunked convolutions); ``pack``
    is the scratch offset for the packed micro-kernel path.
    """
    mt = m1 - m0
    nt = n1 - n0
    if mt <= 0 or nt <= 0:
        return
    if USE_PACKED and mt >= PACKED_MIN_ROWS and mt * nt * K >= PACKED_MIN_MACS and K <= PACKED_MAX_K:
        gemm_packed(F, a_off, a_rs, 1, b_off, b_rs, 1, c_off, c_rs, K, m0, m1, n0, n1, f32(1.0), acc, pack)
        return
    if USE_BLAS and mt >= 4 and mt * nt * K >= BLAS_MIN_MACS:
        sgemm(0, 0, nt, mt, K, f32(1.0), F, b_off + n0, b_rs, F, a_off + m0 * a_rs, a_rs,
              f32(acc), F, c_off + m0 * c_rs + n0, c_rs)
        return
    for m in range(m0, m1):
        cb = c_off + m * c_rs + n0
        c = F[cb:cb + nt]
        if acc == 0:
            for j in range(nt):
                c[j] = f32(0.0)
        ab = a_off + m * a_rs
        for k in range(K):
            a0 = F[ab + k * a_cs]
            r0 = b_off + k * b_rs + n0
            bk = F[r0:r0 + nt]
            for j in range(nt):
                c[j] += a0 * bk[j]


@njit(**_JIT)
def gemm_tile(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha, pack):
    """C[m0:m1, n0:n1] = alpha * A[m0:m1, :] @ B[:, n0:n1] (C has unit column stride).

    ``pack`` is the float offset of PACK_FLOATS scratch for the packed path.
    """
    mt = m1 - m0
    nt = n1 - n0
    if mt <= 0 or nt <= 0:
        return
    if K == 0:
        for m in range(m0, m1):
            for n in range(n0, n1):
                F[c_off + m * c_rs + n] = f32(0.0)
        return
    if USE_PACKED and mt >= PACKED_MIN_ROWS and mt * nt * K >= PACKED_MIN_MACS and K <= PACKED_MAX_K:
        gemm_packed(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha, 0, pack)
        return
    a_unit = a_cs == 1 or a_rs == 1
    b_unit = b_cs == 1 or b_rs == 1
    if USE_BLAS and a_unit and b_unit and mt >= BLAS_MIN_ROWS and mt * nt * K >= BLAS_MIN_MACS:
        # Row-major C = A B is column-major C^T = B^T A^T.
        tb = 0 if b_cs == 1 else 1
        ldb = b_rs if b_cs == 1 else b_cs
        ta = 0 if a_cs == 1 else 1
        lda = a_rs if a_cs == 1 else a_cs
        sgemm(tb, ta, nt, mt, K, alpha, F, b_off + n0 * b_cs, ldb, F, a_off + m0 * a_rs, lda,
              f32(0.0), F, c_off + m0 * c_rs + n0, c_rs)
    elif b_cs == 1:
        _rows_times_b(F, a_off, a_rs, a_cs, b_off, b_rs, c_off, c_rs, K, m0, m1, n0, n1, alpha)
    else:
        _dot_tiles(F, a_off, a_rs, a_cs, b_off, b_rs, b_cs, c_off, c_rs, K, m0, m1, n0, n1, alpha)


@njit(**_JIT)
def k_gemm(F, B, I, J, X, R, p, sbase):
    """Task row: [desc, batch0, batch1, m0, m1, n0, n1]."""
    d = p[0]
    M = X[d + D_M]
    K = X[d + D_K]
    a_rs = X[d + D_ARS]
    a_cs = X[d + D_ACS]
    b_rs = X[d + D_BRS]
    b_cs = X[d + D_BCS]
    c_rs = X[d + D_CRS]
    epi = X[d + D_EPI]
    alpha = R[X[d + D_ALPHA]]
    table = X[d + D_TABLE]
    pack = sbase + X[d + D_PACK]
    prepacked = X[d + D_BPACKED]
    m0 = p[3]
    m1 = p[4]
    n0 = p[5]
    n1 = p[6]
    for b in range(p[1], p[2]):
        t = table + 3 * b
        if prepacked != 0:
            gemm_prepacked(F, X[t], a_rs, a_cs, X[t + 1], K, X[t + 2], c_rs, m0, m1, n0, n1, alpha, pack)
        else:
            gemm_tile(F, X[t], a_rs, a_cs, X[t + 1], b_rs, b_cs, X[t + 2], c_rs, K, m0, m1, n0, n1, alpha,
                      pack)
        if epi >= 0:
            ew_epilogue(F, X, R, epi, b * M + m0, b * M + m1, n0, n1, sbase)


@njit(**_JIT)
def k_gemm_lda(F, B, I, J, X, R, p, sbase):
    """Task row of a GEMM on a compile-time-packed B whose A is read in place (a ``k_gemm``
    descriptor with ``b_prepacked`` = :data:`B_PACKED_A_IN_PLACE`): [desc, batch0, batch1, m0, m1,
    n0, n1].  An entry of its own, so a model without such a GEMM never builds the strided-A
    micro-kernels (:mod:`.machine_code` builds the modules an entry's code calls)."""
    d = p[0]
    M = X[d + D_M]
    K = X[d + D_K]
    a_rs = X[d + D_ARS]
    c_rs = X[d + D_CRS]
    epi = X[d + D_EPI]
    table = X[d + D_TABLE]
    pack = sbase + X[d + D_PACK]
    for b in range(p[1], p[2]):
        t = table + 3 * b
        gemm_prepacked_a_in_place(F, X[t], a_rs, X[t + 1], K, X[t + 2], c_rs, p[3], p[4], p[5], p[6], pack)
        if epi >= 0:
            ew_epilogue(F, X, R, epi, b * M + p[3], b * M + p[4], p[5], p[6], sbase)
