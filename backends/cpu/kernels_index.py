"""Scan and index rKernels: CumSum, GatherElements and ArgMax / ArgMin.

Both see their tensors as dense and walk them by element offsets in the arena view of the element's
width (float32 ``F``, int64 ``I``, int32 ``J``; 1-byte elements ``B``).

CumSum descriptor (``X[d:]``)::

    [dtype (0 float32, 1 int64, 2 int32), x, out, axis_len, inner, exclusive, reverse]

Task rows cover lines ``[q0, q1)`` of ``outer * inner``: line q is the run along the scanned axis
that starts at ``(q // inner) * axis_len * inner + q % inner``, stepping by ``inner``.  The sum runs
in order, in the element's own type (float32 rounding as numpy's sequential ``cumsum``; integers wrap).

GatherElements descriptor::

    [esize, data, idx, out, idx_wide, rank, axis, axis_len, n_idx,
     out_dim[0], data_stride[0], ..., out_dim[rank-1], data_stride[rank-1]]

Task rows cover output elements ``[r0, r1)`` (the output has the indices' shape).

ArgMax / ArgMin descriptor::

    [x, outer, red, inner, out, flags (1: ArgMin, 2: select_last_index)]

over float32 ``x`` seen as (outer, red, inner), writing int64 positions at ``out``; task rows cover
lines ``[e0, e1)`` of ``outer * inner``.  The first extremum in the walk's order wins (the last one
with select_last_index, the walk then running backwards), and a NaN is the extremum, as numpy's
argmax / argmin (the reference) have it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64


@njit(**_JIT)
def k_cumsum(F, B, I, J, X, R, p, sbase):
    """Inclusive / exclusive, forward / reverse cumulative sum of lines [p1, p2).  Row: [desc, q0, q1]."""
    d = p[0]
    kind = X[d]
    x = X[d + 1]
    out = X[d + 2]
    n = X[d + 3]
    inner = X[d + 4]
    exclusive = X[d + 5] != 0
    reverse = X[d + 6] != 0
    for q in range(p[1], p[2]):
        base = (q // inner) * n * inner + q % inner
        step = inner
        if reverse:
            base += (n - 1) * inner
            step = -inner
        if kind == 0:
            facc = np.float32(0.0)
            for t in range(n):
                at = base + t * step
                v = F[_u(x + at)]
                if exclusive:
                    F[_u(out + at)] = facc
                    facc += v
                else:
                    facc += v
                    F[_u(out + at)] = facc
        elif kind == 1:
            iacc = np.int64(0)
            for t in range(n):
                at = base + t * step
                v = I[_u(x + at)]
                if exclusive:
                    I[_u(out + at)] = iacc
                    iacc += v
                else:
                    iacc += v
                    I[_u(out + at)] = iacc
        else:
            # int64 accumulation stored truncated: the same bits as numpy's wrapping int32 sum.
            jacc = np.int64(0)
            for t in range(n):
                at = base + t * step
                v = np.int64(J[_u(x + at)])
                if exclusive:
                    J[_u(out + at)] = jacc  # (truncated to 32 bits by the store)
                    jacc += v
                else:
                    jacc += v
                    J[_u(out + at)] = jacc  # (truncated to 32 bits by the store)
    return 0


@njit(**_JIT)
def k_gather_elements(F, B, I, J, X, R, p, sbase):
    """GatherElements of output elements [p1, p2).  Row: [desc, r0, r1].  Returns 1 (an error the
    runtime reports) on an index outside [-axis_len, axis_len).

    The output is walked a line (its last dimension) at a time: the source offset of the line's other
    coordinates is found once per line, so an element costs one index load and one copy (decomposing
    every element's position over the dimensions cost ~100 cycles, most of DeBERTa's attention)."""
    d = p[0]
    esize = X[d]
    data = X[d + 1]
    idx = X[d + 2]
    out = X[d + 3]
    wide = X[d + 4] == 8
    rank = X[d + 5]
    axis = X[d + 6]
    axis_len = X[d + 7]
    dims = d + 9
    last = rank - 1
    width = X[dims + 2 * last]
    step = X[dims + 2 * last + 1]
    # where the index lands: along the last dimension itself, or along another one
    k_step = step if axis == last else X[dims + 2 * axis + 1]
    r = p[1]
    while r < p[2]:
        line = r // width
        c0 = r - line * width
        end = min(p[2], r - c0 + width)
        base = data
        rest = line
        for a in range(last - 1, -1, -1):
            dim = X[dims + 2 * a]
            c = rest % dim
            rest //= dim
            if a != axis:
                base += c * X[dims + 2 * a + 1]
        # the line's other coordinate (the last one) when the index runs along another axis
        inc = step if axis != last else 0
        base += c0 * inc - r * inc
        # one loop per element and index width: no per-element branch on them
        if esize == 4 and wide:
            for q in range(r, end):
                k = I[_u(idx + q)]
                k += axis_len if k < 0 else 0
                if k < 0 or k >= axis_len:
                    return 1
                J[_u(out + q)] = J[_u(base + k * k_step + q * inc)]
        elif esize == 4:
            for q in range(r, end):
                k = np.int64(J[_u(idx + q)])
                k += axis_len if k < 0 else 0
                if k < 0 or k >= axis_len:
                    return 1
                J[_u(out + q)] = J[_u(base + k * k_step + q * inc)]
        else:
            for q in range(r, end):
                k = I[_u(idx + q)] if wide else np.int64(J[_u(idx + q)])
                if k < 0:
                    k += axis_len
                if k < 0 or k >= axis_len:
                    return 1
                src = base + k * k_step + q * inc
                if esize == 8:
                    I[_u(out + q)] = I[_u(src)]
                else:
                    B[_u(out + q)] = B[_u(src)]
        r = end
    return 0


def gather_elements_fault(arena: np.ndarray, X: np.ndarray, p: np.ndarray) -> tuple[int, int, int] | None:
    """Host-side: the first out-of-range index of the GatherElements whose task row ``p`` reported an
    error, as (flat position in the indices, the index, the axis length), read as
    :func:`k_gather_elements` reads it; None when every index is in range."""
    d = int(p[0])
    idx, axis_len, n_idx = int(X[d + 2]), int(X[d + 7]), int(X[d + 8])
    dtype = np.dtype(np.int64) if int(X[d + 4]) == 8 else np.dtype(np.int32)
    indices = np.frombuffer(arena, dtype, count=n_idx, offset=idx * dtype.itemsize)
    bad = (indices < -axis_len) | (indices >= axis_len)
    if not bad.any():
        return None
    first = int(np.argmax(bad))
    return first, int(indices[first]), axis_len


@njit(**_JIT)
def k_argreduce(F, B, I, J, X, R, p, sbase):
    """ArgMax (flags bit 0 clear) or ArgMin of lines [p1, p2).  Row: [desc, e0, e1]."""
    d = p[0]
    x = X[d]
    red = X[d + 2]
    inner = X[d + 3]
    out = X[d + 4]
    want_min = (X[d + 5] & 1) != 0
    last = (X[d + 5] & 2) != 0
    first, step = (red - 1, -1) if last else (0, 1)
    for e in range(p[1], p[2]):
        base = x + (e // inner) * red * inner + e % inner
        at = first
        best = F[_u(base + first * inner)]
        if best == best:
            r = first + step
            for _ in range(red - 1):
                v = F[_u(base + r * inner)]
                if v != v:
                    at = r
                    break
                if (v < best) if want_min else (v > best):
                    best = v
                    at = r
                r += step
        I[_u(out + e)] = at
    return 0
