"""Data-movement rKernels: strided copy, pad, gather.

They move elements by size (1, 4 or 8 bytes) through the arena view of
that width, so they work for every arena dtype and never touch the bits of
the values (a float NaN payload is copied as is).

Strided copy descriptor (``X[d:]``)::

    [esize, src_off, s0, s1, s2, s3, dst_off, t0, t1, t2, t3, d0, d1, d2, d3]

Task rows cover flattened rows ``[r0, r1)`` of ``d0*d1*d2``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


# Indices are arena offsets, never negative: as unsigned integers numba skips its
# negative-index wraparound, which otherwise keeps LLVM from vectorizing the row
# loops (measured: a 768 KiB row copy 125 -> 11 us).
_u = np.uint64
f32 = np.float32


@njit(**_JIT)
def _copy_row(A, src, s, dst, t, n):
    if s == 1 and t == 1:
        for j in range(n):
            A[_u(dst + j)] = A[_u(src + j)]
    else:
        for j in range(n):
            A[_u(dst + j * t)] = A[_u(src + j * s)]


@njit(**_JIT)
def row_index(r, d1, d2):
    """Row ``r`` of the flattened (d0, d1, d2) space as its indices (i0, i1, i2)."""
    t = r // d2
    return t // d1, t % d1, r % d2


@njit(**_JIT)
def advance_rows(i0, i1, i2, run, d1, d2):
    """The indices of the row ``run`` rows after (i0, i1, i2), for a run of rows that stays within
    one (i0, i1) slice (``run <= d2 - i2``): the tiled copies and loads step a run at a time."""
    i2 += run
    if i2 == d2:
        i2 = 0
        i1 += 1
        if i1 == d1:
            i1 = 0
            i0 += 1
    return i0, i1, i2


@njit(**_JIT)
def next_row(i0, i1, i2, d1, d2):
    """The indices of the row after (i0, i1, i2) in a (d0, d1, d2) space (stepping is cheaper
    than dividing again: a division per row cost as much as copying a 32-element row)."""
    return advance_rows(i0, i1, i2, 1, d1, d2)


#: Rows of at most this many elements that repeat one source element (a nearest-neighbour
#: upsampling's Expand: each input pixel twice along the row) are copied a run of rows at a time.
_REPEAT_MAX = 8


@njit(**_JIT)
def _repeat_rows(J, X, d, r0, r1, i0, i1, i2, d1, d2, n):
    """Rows [r0, r1) of a 4-byte copy whose rows each repeat one source element ``n`` times into
    contiguous output (``s3 == 0``, ``t3 == 1``, ``t2 == n``): the rows along i2 are one output run,
    so they are written in one loop per (i0, i1) instead of one call per row of n elements
    (a 2x upsampling's rows are 2 elements long)."""
    s0, s1, s2 = X[d + 2], X[d + 3], X[d + 4]
    t0, t1 = X[d + 7], X[d + 8]
    r = r0
    while r < r1:
        run = min(d2 - i2, r1 - r)
        src = X[d + 1] + i0 * s0 + i1 * s1 + i2 * s2
        dst = X[d + 6] + i0 * t0 + i1 * t1 + i2 * n
        if n == 2:
            for k in range(run):
                v = J[_u(src + k * s2)]
                J[_u(dst + 2 * k)] = v
                J[_u(dst + 2 * k + 1)] = v
        else:
            for k in range(run):
                v = J[_u(src + k * s2)]
                for j in range(n):
                    J[_u(dst + k * n + j)] = v
        r += run
        i2 = 0
        i1 += 1
        if i1 == d1:
            i1 = 0
            i0 += 1


#: A 4-byte copy that is a transpose (one side unit-strided along the rows, the other along the
#: columns) runs in tiles of this many rows by TRANSPOSE_TILE_COLUMNS columns (each tile's reads and
#: writes in L1: 16 rows of 4 bytes are one cache line).
TRANSPOSE_TILE_ROWS = 16
TRANSPOSE_TILE_COLUMNS = 64
#: Strides (elements of 4 bytes) that are multiples of this put a tile's rows in one L1 cache set.
ALIASING_STRIDE = 1024


@njit(**_JIT)
def _transpose_rows(J, X, d, r0, r1, i0, i1, i2, d1, d2, n):
    """Rows [r0, r1) of a 4-byte copy that is a transpose (``s2 == 1`` and ``t3 == 1``, or
    ``t2 == 1`` and ``s3 == 1``).  Row by row, one side touched a new cache line per element, and
    at a power-of-two stride (a [128, 4096] plane read by columns) all of them fell in the same few
    cache sets, so nearly every element missed to L3 (3 ns each).  Instead, tiles of up to
    TRANSPOSE_TILE_ROWS consecutive rows by TRANSPOSE_TILE_COLUMNS columns are read in the source's
    order and written in the destination's.  The tile moves directly, its rows' lines on the strided
    side staying in L1 while its columns pass, unless that side's stride is a multiple of
    ALIASING_STRIDE (4 KiB: its lines would share one L1 set and evict each other): then it goes
    through a small dense buffer, which costs a second move per element (measured on [n, 4096] ->
    [4096, n] planes: 0.55 -> 0.29 ms buffered, 1.4 ms direct)."""
    s0, s1, s2, s3 = X[d + 2], X[d + 3], X[d + 4], X[d + 5]
    t0, t1, t2, t3 = X[d + 7], X[d + 8], X[d + 9], X[d + 10]
    tc = TRANSPOSE_TILE_COLUMNS
    buffered = (t2 if s2 == 1 else s2) % ALIASING_STRIDE == 0
    tmp = np.empty(TRANSPOSE_TILE_ROWS * tc if buffered else 1, np.int32)
    r = r0
    while r < r1:
        run = min(TRANSPOSE_TILE_ROWS, d2 - i2, r1 - r)
        src = X[d + 1] + i0 * s0 + i1 * s1 + i2 * s2
        dst = X[d + 6] + i0 * t0 + i1 * t1 + i2 * t2
        for cb in range(0, n, tc):
            cn = min(tc, n - cb)
            if not buffered:
                for c in range(cb, cb + cn):
                    for u in range(run):
                        J[_u(dst + u * t2 + c * t3)] = J[_u(src + u * s2 + c * s3)]
                continue
            if s2 == 1:  # the source's rows are adjacent: a column of the tile is one run
                for c in range(cn):
                    at = src + (cb + c) * s3
                    for u in range(run):
                        tmp[u * tc + c] = J[_u(at + u)]
            else:
                for u in range(run):
                    at = src + u * s2 + cb
                    for c in range(cn):
                        tmp[u * tc + c] = J[_u(at + c)]
            if t3 == 1:  # the destination's columns are adjacent: a row of the tile is one run
                for u in range(run):
                    at = dst + u * t2 + cb
                    for c in range(cn):
                        J[_u(at + c)] = tmp[u * tc + c]
            else:
                for c in range(cn):
                    at = dst + (cb + c) * t3
                    for u in range(run):
                        J[_u(at + u)] = tmp[u * tc + c]
        r += run
        i0, i1, i2 = advance_rows(i0, i1, i2, run, d1, d2)


@njit(**_JIT)
def copy_rows(B, J, I, X, d, r0, r1):
    esize = X[d]
    d1 = X[d + 12]
    d2 = X[d + 13]
    n = X[d + 14]
    s0, s1, s2, s3 = X[d + 2], X[d + 3], X[d + 4], X[d + 5]
    t0, t1, t2, t3 = X[d + 7], X[d + 8], X[d + 9], X[d + 10]
    i0, i1, i2 = row_index(r0, d1, d2)  # then stepped row by row
    if s3 == 0 and t3 == 1 and t2 == n and n <= _REPEAT_MAX and esize == 4:
        _repeat_rows(J, X, d, r0, r1, i0, i1, i2, d1, d2, n)
        return
    if esize == 4 and d2 >= 8 and n >= 8 and ((s2 == 1 and t3 == 1 and s3 != 1) or (t2 == 1 and s3 == 1 and t3 != 1)):
        _transpose_rows(J, X, d, r0, r1, i0, i1, i2, d1, d2, n)
        return
    for r in range(r0, r1):
        src = X[d + 1] + i0 * s0 + i1 * s1 + i2 * s2
        dst = X[d + 6] + i0 * t0 + i1 * t1 + i2 * t2
        if esize == 4:
            _copy_row(J, src, s3, dst, t3, n)
        elif esize == 8:
            _copy_row(I, src, s3, dst, t3, n)
        else:
            _copy_row(B, src, s3, dst, t3, n)
        i0, i1, i2 = next_row(i0, i1, i2, d1, d2)


@njit(**_JIT)
def k_copy(F, B, I, J, X, R, p, sbase):
    """Task row: [desc, r0, r1]."""
    copy_rows(B, J, I, X, p[0], p[1], p[2])


@njit(**_JIT)
def k_copy_many(F, B, I, J, X, R, p, sbase):
    """Task row: [table, count]; the table lists ``count`` copy descriptors, then their row counts."""
    t = p[0]
    n = p[1]
    for k in range(n):
        copy_rows(B, J, I, X, X[t + k], 0, X[t + n + k])


@njit(**_JIT)
def _fill(A, off, n, t, v):
    for j in range(n):
        A[_u(off + j * t)] = v


# Pad descriptor: [esize, src_off, s0..s3, dst_off, (dense output) D0..D3,
#                  begin0..begin3, S0..S3 (source dims), value_int, value_f32_imm]
@njit(**_JIT)
def k_pad(F, B, I, J, X, R, p, sbase):
    """Constant-mode Pad, one output row (last dim) at a time.  Row: [desc, r0, r1]."""
    d = p[0]
    esize = X[d]
    D1 = X[d + 8]
    D2 = X[d + 9]
    D3 = X[d + 10]
    b3 = X[d + 14]
    S3 = X[d + 18]
    ivalue = X[d + 19]
    fvalue = R[X[d + 20]]
    b0, b1, b2 = X[d + 11], X[d + 12], X[d + 13]
    S0, S1, S2 = X[d + 15], X[d + 16], X[d + 17]
    o0, o1, o2 = row_index(p[1], D1, D2)  # then stepped row by row
    for r in range(p[1], p[2]):
        dst = X[d + 6] + r * D3
        i0 = o0 - b0
        i1 = o1 - b1
        i2 = o2 - b2
        o0, o1, o2 = next_row(o0, o1, o2, D1, D2)
        inside = 0 <= i0 < S0 and 0 <= i1 < S1 and 0 <= i2 < S2
        lo = min(max(b3, 0), D3)
        hi = min(max(b3 + S3, 0), D3)
        if not inside:
            lo = 0
            hi = 0
        src = X[d + 1] + i0 * X[d + 2] + i1 * X[d + 3] + i2 * X[d + 4]
        s3 = X[d + 5]
        # [0, lo) and [hi, D3) are padding; [lo, hi) copies source columns lo-b3...
        if esize == 4:
            if X[d + 21] == 1:
                _fill(F, dst, lo, 1, fvalue)
                _fill(F, dst + hi, D3 - hi, 1, fvalue)
            else:
                _fill(J, dst, lo, 1, np.int32(ivalue))
                _fill(J, dst + hi, D3 - hi, 1, np.int32(ivalue))
            if hi > lo:
                _copy_row(J, src + (lo - b3) * s3, s3, dst + lo, 1, hi - lo)
        elif esize == 8:
            _fill(I, dst, lo, 1, ivalue)
            _fill(I, dst + hi, D3 - hi, 1, ivalue)
            if hi > lo:
                _copy_row(I, src + (lo - b3) * s3, s3, dst + lo, 1, hi - lo)
        else:
            _fill(B, dst, lo, 1, np.uint8(ivalue))
            _fill(B, dst + hi, D3 - hi, 1, np.uint8(ivalue))
            if hi > lo:
                _copy_row(B, src + (lo - b3) * s3, s3, dst + lo, 1, hi - lo)


# Gather descriptor: [esize, data_off, axis_len, inner, data_outer_stride,
#                     idx_off, n_idx, out_off, idx_dtype(8|4)]
@njit(**_JIT)
def k_gather(F, B, I, J, X, R, p, sbase):
    """Gather along one axis of dense data; rows r = outer * n_idx + i.  Row: [desc, r0, r1].

    Returns 1 (an error the runtime reports) on an out-of-range index.
    """
    d = p[0]
    esize = X[d]
    data = X[d + 1]
    axis_len = X[d + 2]
    inner = X[d + 3]
    outer_stride = X[d + 4]
    idx = X[d + 5]
    n_idx = X[d + 6]
    out = X[d + 7]
    wide = X[d + 8] == 8
    # (o, i) stepped rather than divided out of r: two 64-bit divisions per row dominated
    # one-element rows (the per-node lookups of rammer.ml's tree traversals).
    i = p[1] % n_idx
    o = p[1] // n_idx
    if inner == 1 and esize == 4:
        for r in range(p[1], p[2]):
            k = I[idx + i] if wide else np.int64(J[idx + i])
            if k < 0:
                k += axis_len
            if k < 0 or k >= axis_len:
                return 1
            J[_u(out + r)] = J[_u(data + o * outer_stride + k)]
            i += 1
            if i == n_idx:
                i = 0
                o += 1
        return 0
    for r in range(p[1], p[2]):
        k = I[idx + i] if wide else np.int64(J[idx + i])
        if k < 0:
            k += axis_len
        if k < 0 or k >= axis_len:
            return 1
        src = data + o * outer_stride + k * inner
        dst = out + r * inner
        if esize == 4:
            _copy_row(J, src, 1, dst, 1, inner)
        elif esize == 8:
            _copy_row(I, src, 1, dst, 1, inner)
        else:
            _copy_row(B, src, 1, dst, 1, inner)
        i += 1
        if i == n_idx:
            i = 0
            o += 1
    return 0


def gather_fault(arena: np.ndarray, X: np.ndarray, p: np.ndarray) -> tuple[int, int, int] | None:
    """Host-side: the first out-of-range index of the Gather whose task row ``p`` reported an error,
    as (flat position in the indices, the index, the axis length), read from the arena as
    :func:`k_gather` reads it; None when every index is in range.  Called only after a failed
    launch (the indices are still in place: nothing after the Gather ran on the data it feeds)."""
    d = int(p[0])
    axis_len, idx, n_idx = int(X[d + 2]), int(X[d + 5]), int(X[d + 6])
    dtype = np.dtype(np.int64) if int(X[d + 8]) == 8 else np.dtype(np.int32)
    indices = np.frombuffer(arena, dtype, count=n_idx, offset=idx * dtype.itemsize)
    bad = (indices < -axis_len) | (indices >= axis_len)
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    return first, int(indices[first]), axis_len


@njit(**_JIT)
def k_resize(F, B, I, J, X, R, p, sbase):
    """Separable resampling (Resize: linear, cubic) of planes [q0, q1) over their last two axes.
    Row: [desc, q0, q1].  Descriptor: [x, H, W, out, OH, OW, rows' taps, rows' indices (int64),
    rows' weights, columns' taps, columns' indices, columns' weights, scratch]: output pixel
    (oh, ow) is sum_i wh[oh, i] * sum_j ww[j, ow] * x[ih[oh, i], iw[j, ow]], the tables built at
    compile time (indices clamped to the plane) by the op's own coordinate rules
    (``rammer.ops.resize``); the rows' tables are output-row-major, the columns' tap-major.

    With ``scratch`` >= 0 (H x OW floats of the vEU's scratch there), each input row is resampled
    along its columns once into scratch, and each output row is then a weighted sum of whole
    scratch rows (vector loops); otherwise every output pixel gathers its th x tw taps (the same
    sums in the same order: both give the same bits).  Per pixel, a 4x upsampling's bilinear taps
    cost about 40 ns in the gathering loop, which was most of a SegFormer decoder's time."""
    d = p[0]
    x = X[d]
    H = X[d + 1]
    W = X[d + 2]
    out = X[d + 3]
    OH = X[d + 4]
    OW = X[d + 5]
    th = X[d + 6]
    ih = X[d + 7]
    wh = X[d + 8]
    tw = X[d + 9]
    iw = X[d + 10]
    ww = X[d + 11]
    scratch = X[d + 12]
    if scratch >= 0:
        _resize_separable(F, I, x, H, W, out, OH, OW, th, ih, wh, tw, iw, ww, sbase + scratch, p[1], p[2])
        return 0
    for q in range(p[1], p[2]):
        src = x + q * H * W
        dst = out + q * OH * OW
        for oh in range(OH):
            o = dst + oh * OW
            for ow in range(OW):
                acc = f32(0.0)
                for i in range(th):
                    row = src + I[ih + oh * th + i] * W
                    line = f32(0.0)
                    for j in range(tw):
                        line += F[_u(row + I[iw + j * OW + ow])] * F[ww + j * OW + ow]
                    acc += line * F[wh + oh * th + i]
                F[_u(o + ow)] = acc
    return 0


@njit(**_JIT)
def _resize_separable(F, I, x, H, W, out, OH, OW, th, ih, wh, tw, iw, ww, tmp, q0, q1):
    """:func:`k_resize`'s two passes over planes [q0, q1): columns into the H x OW rows at
    ``tmp``, then rows into the output (per pixel and tap, the gathering loop's arithmetic)."""
    for q in range(q0, q1):
        src = x + q * H * W
        for r in range(H):
            row = src + r * W
            t = F[_u(tmp + r * OW):_u(tmp + (r + 1) * OW)]
            for ow in range(OW):
                t[ow] = f32(0.0)
            for j in range(tw):
                idx = I[_u(iw + j * OW):_u(iw + (j + 1) * OW)]
                wt = F[_u(ww + j * OW):_u(ww + (j + 1) * OW)]
                for ow in range(OW):
                    t[ow] += F[_u(row + idx[ow])] * wt[ow]
        dst = out + q * OH * OW
        for oh in range(OH):
            o = F[_u(dst + oh * OW):_u(dst + (oh + 1) * OW)]
            for ow in range(OW):
                o[ow] = f32(0.0)
            for i in range(th):
                t = F[_u(tmp + I[ih + oh * th + i] * OW):_u(tmp + (I[ih + oh * th + i] + 1) * OW)]
                wv = F[wh + oh * th + i]
                for ow in range(OW):
                    o[ow] += t[ow] * wv
