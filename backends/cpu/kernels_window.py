"""Window rKernels: depthwise convolution and pooling over NCHW planes.

Both sweep *phase planes* (below) so that strides become flat shifts, and
both read the window descriptor shared with :mod:`.kernels_conv`.  Every
kernel works on dense float32 data (the lowering inserts a copy for a
strided input).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .atomics import copy_block
from .fastmath import hardswish32, sigmoid_act32
from .kernels_ew import ew_epilogue
from .ukernel import WIDTH
from .ukernel_dwcb import dw_cblock
from .ukernel_window import SHAPES as DIRECT_SHAPES
from .ukernel_window import deinterleave2, sweep_code, tap_sweep, window_direct

f32 = np.float32
_INF = f32(np.inf)
#: Arena offsets as unsigned indices: numba then skips negative-index wraparound (see kernels_data).
_u = np.uint64
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# Window descriptor shared by convolutions, depthwise conv and pooling:
W_X, W_C, W_H, W_W, W_KH, W_KW, W_SH, W_SW, W_PH, W_PW, W_DH, W_DW, W_OH, W_OW, W_OUT = range(15)
# then: conv: see kernels_conv; dwconv: [.., w_off, mult, epi, scratch, bias, act, plane_act];
# pool: [.., mode, lo_h, hi_h, lo_w, hi_w, scratch, stack, epi, in plane, out plane, first pixel]
WIN_LEN = 15


@njit(**_JIT)
def read_window(X, d):
    """The shared words of window descriptor ``d``: (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW)."""
    return (X[d + W_C], X[d + W_H], X[d + W_W], X[d + W_KH], X[d + W_KW], X[d + W_SH], X[d + W_SW],
            X[d + W_PH], X[d + W_PW], X[d + W_DH], X[d + W_DW], X[d + W_OH], X[d + W_OW])


# Output pixel (oh, ow) of a window op reads the padded input at
# (oh*sh + i*dh, ow*sw + j*dw).  Splitting the padded plane into sh x sw
# *phase planes* (phase (a, b) holds the rows = a and columns = b modulo the
# stride) turns every stride into stride 1: tap (i, j) reads phase
# ((i*dh) % sh, (j*dw) % sw) at row oh + (i*dh)//sh, column ow + (j*dw)//sw.
# With the output laid out at the phase planes' row pitch Wq, a tap is then a
# flat shift, and one loop over q = oh*Wq + ow (columns past OW are junk,
# dropped when the result is copied out) covers the whole plane: long
# contiguous loops even for 8x8 planes.  The sweep is an LLVM kernel
# (``ukernel_window.tap_sweep``) that keeps blocks of up to 8 vectors of the
# accumulator in registers across all taps: one broadcast weight and one load
# per tap and vector (in numba, the accumulator went through memory every few
# taps and the sweeps took half of a depthwise convolution).  Square windows
# that :func:`direct_fits` (3x3 and 5x5 at stride 1; 2x2, 3x3 and 5x5 at
# stride 2) skip all this: the direct sweeps of :mod:`.ukernel_window` read the
# input plane in place and write the output plane.

#: Sweeps run over L rounded up to a multiple of this: a vectorized loop with a
#: scalar remainder of up to 15 iterations costs as much as the vector part on
#: an 8x8 plane.  The extra lanes read up to _SLACK elements past the planes.
_SLACK = 16
#: Output planes up to this many pixels are computed tap by tap (see k_dwconv).
_TINY_PLANE = 4
#: Output floats per epilogue call of the depthwise kernel (16 KiB: still in L1).
_EPI_GROUP = 4096


#: Stride-1 pooling stacks planes into one sweep up to this many floats of phase planes (L1-sized).
STACK_FLOATS = 4096


def pool_stack(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> int:
    """Planes one stride-1 pooling sweep covers at once (1 for strided pooling)."""
    if sh != 1 or sw != 1:
        return 1
    hq = OH + (kh - 1) * dh
    wq = OW + (kw - 1) * dw
    return max(1, STACK_FLOATS // (hq * wq))


def window_scratch(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, planes: int = 1) -> int:
    """Float32 scratch elements the phase planes and the accumulator of ``planes`` stacked planes need."""
    hq = ((OH - 1) * sh + (kh - 1) * dh + sh) // sh
    wq = ((OW - 1) * sw + (kw - 1) * dw + sw) // sw
    # planes + slack read by the rounded-up sweeps, accumulator (rounded up), 1/counts and ones of
    # pooling, the int64 tap table, pooling's 1/count plane
    return (planes * (sh * sw * hq * wq + hq * wq) + 2 * _SLACK + OH + OW + kh * kw + 16 + 2 * kh * kw + 2
            + OH * OW + 2)


@njit(**_JIT)
def _phase_dims(OH, OW, kh, kw, sh, sw, dh, dw):
    hp = (OH - 1) * sh + (kh - 1) * dh + 1
    wp = (OW - 1) * sw + (kw - 1) * dw + 1
    return (hp + sh - 1) // sh, (wp + sw - 1) // sw


@njit(**_JIT)
def copy_run(F, dst, src, n):
    """F[dst:dst + n] = F[src:src + n] for disjoint ranges.  Runs of up to 256 floats (small
    planes' rows) as constant-size vector moves, 32 floats at a time and then 16, 8, 4, 2, 1:
    there a ``memcpy`` call costs more than the copy (a conv's padded 32-float rows took 13.6 ns
    each with it, 3.4 without); longer runs through ``memcpy``.  Each step needs its size as a
    literal for ``copy_block`` to emit vector moves, hence the unrolled steps."""
    if n > 256:
        copy_block(F, dst, src, n)
        return
    while n >= 32:
        copy_block(F, dst, src, 32)
        dst += 32
        src += 32
        n -= 32
    if n >= 16:
        copy_block(F, dst, src, 16)
        dst += 16
        src += 16
        n -= 16
    if n >= 8:
        copy_block(F, dst, src, 8)
        dst += 8
        src += 8
        n -= 8
    if n >= 4:
        copy_block(F, dst, src, 4)
        dst += 4
        src += 4
        n -= 4
    if n >= 2:
        copy_block(F, dst, src, 2)
        dst += 2
        src += 2
        n -= 2
    if n >= 1:
        copy_block(F, dst, src, 1)


@njit(**_JIT)
def _phase_planes(F, src, H, W, ph, pw, sh, sw, Hq, Wq, P, fill, p0):
    """P[(a*sw + b)*Hq*Wq + r*Wq + t] = x[r*sh + a - ph, t*sw + b - pw] (``fill`` outside the H x W
    plane at F[src:]); P is F[p0:].  A negative ``ph`` starts the planes -ph input rows down
    (a convolution task's rows)."""
    # One fill of everything, then only the rows' inside parts: per-row edge
    # handling costs more than the whole memset on planes this small.  Large planes split by
    # column pairs fill only their borders (_split_column_pairs), and the slack past the planes.
    border = (sw == 2 or (sh == 1 and sw == 1)) and Hq * Wq >= _BORDER_FILL_MIN
    if border:
        for q in range(sh * sw * Hq * Wq, P.size):
            P[q] = fill
    else:
        for q in range(P.size):  # (the slack past the planes too)
            P[q] = fill
    if sh == 1 and sw == 1:
        # one plane: rows [ph, ph + H) and columns [pw, pw + W) hold the input (no divisions:
        # per plane they cost as much as the copies on 8x8 planes)
        n = min(W, Wq - pw)
        r_lo = min(max(ph, 0), Hq)
        r_hi = max(min(Hq, H + ph) if n > 0 else 0, r_lo)
        if border:  # the rows above and below, and each inside row's ends (a strided conv's plain rows)
            for q in range(r_lo * Wq):
                P[q] = fill
            for q in range(r_hi * Wq, Hq * Wq):
                P[q] = fill
            c_lo = min(max(pw, 0), Wq)
            c_hi = min(max(pw + max(n, 0), c_lo), Wq)
            for r in range(r_lo, r_hi):
                for q in range(r * Wq, r * Wq + c_lo):
                    P[q] = fill
                for q in range(r * Wq + c_hi, (r + 1) * Wq):
                    P[q] = fill
        for r in range(r_lo, r_hi):
            copy_run(F, p0 + r * Wq + pw, src + (r - ph) * W, n)
        return
    for a in range(sh):
        # rows r with 0 <= r*sh + a - ph < H
        r_lo = min((ph - a + sh - 1) // sh if ph > a else 0, Hq)
        r_hi = min(Hq, (H + ph - a + sh - 1) // sh) if H + ph > a else 0
        if sw == 2:
            _split_column_pairs(F, src, W, ph, pw, sh, a, r_lo, r_hi, Hq, Wq, P, p0, border, fill)
            continue
        for b in range(sw):
            base = (a * sw + b) * Hq * Wq
            # columns t with 0 <= t*sw + b - pw < W
            t_lo = min((pw - b + sw - 1) // sw if pw > b else 0, Wq)
            t_hi = max(min(Wq, (W + pw - b + sw - 1) // sw) if W + pw > b else 0, t_lo)
            n = t_hi - t_lo
            for r in range(r_lo, r_hi):
                row = P[base + r * Wq + t_lo:base + r * Wq + t_hi]
                s0 = src + (r * sh + a - ph) * W + t_lo * sw + b - pw
                if sw == 1:
                    copy_run(F, p0 + base + r * Wq + t_lo, s0, n)
                else:
                    inp = F[s0:s0 + (n - 1) * sw + 1]
                    for t in range(n):
                        row[t] = inp[t * sw]


#: Phase planes of at least this many elements each fill only their borders when split by column
#: pairs (a 112x112 plane's four 57x57 phases: the full fill was a third of the split).
_BORDER_FILL_MIN = 1024


@njit(**_JIT)
def _split_column_pairs(F, src, W, ph, pw, sh, a, r_lo, r_hi, Hq, Wq, P, p0, border, fill):
    """Rows [r_lo, r_hi) of row phase ``a`` into both column phases of a column stride of 2:
    phase b's column t is input column 2t + b - pw.  Where both phases are inside the row, one
    call splits each input pair (``ukernel_window.deinterleave2``: wide loads and shuffles; a numba loop
    over the pairs stayed scalar, and a loop per phase read every other element twice).  The
    at most two columns at each end that only one phase has inside are copied one by one.  With
    ``border`` everything of the two phases outside the plane (rows outside [r_lo, r_hi), and the
    columns outside it of the rows inside) is filled here (the caller filled nothing)."""
    lo0 = min((pw + 1) // 2, Wq)
    hi0 = max(min(Wq, (W + pw + 1) // 2), lo0)
    lo1 = min(pw // 2 if pw > 1 else 0, Wq)
    hi1 = max(min(Wq, (W + pw) // 2) if W + pw > 1 else 0, lo1)
    t0 = max(lo0, lo1)
    t1 = max(min(hi0, hi1), t0)
    n = t1 - t0
    if border:
        for b in range(2):
            base = (a * 2 + b) * Hq * Wq
            for q in range(base, base + r_lo * Wq):
                P[q] = fill
            for q in range(base + r_hi * Wq, base + Hq * Wq):
                P[q] = fill
    for r in range(r_lo, r_hi):
        s_row = src + (r * sh + a - ph) * W - pw
        d0 = p0 + (a * 2) * Hq * Wq + r * Wq
        d1 = d0 + Hq * Wq
        if border:
            for t in range(lo0):
                F[_u(d0 + t)] = fill
            for t in range(hi0, Wq):
                F[_u(d0 + t)] = fill
            for t in range(lo1):
                F[_u(d1 + t)] = fill
            for t in range(hi1, Wq):
                F[_u(d1 + t)] = fill
        for t in range(lo0, min(t0, hi0)):
            F[_u(d0 + t)] = F[_u(s_row + 2 * t)]
        for t in range(max(t1, lo0), hi0):
            F[_u(d0 + t)] = F[_u(s_row + 2 * t)]
        for t in range(lo1, min(t0, hi1)):
            F[_u(d1 + t)] = F[_u(s_row + 2 * t + 1)]
        for t in range(max(t1, lo1), hi1):
            F[_u(d1 + t)] = F[_u(s_row + 2 * t + 1)]
        if n > 0:
            deinterleave2(F, s_row + 2 * t0, n, F, d0 + t0, F, d1 + t0)


@njit(**_JIT)
def _pad_phases(F, xb, cg, H, W, ph, pw, r0, Rq, sh, sw, Wq, pp):
    """The task's rows of the zero-padded input, split into stride-phase planes at F[pp:].

    Phase plane (a, b) of channel c holds the padded rows r0 + a, r0 + a + sh, ...
    and the padded columns b, b + sw, ...: element [rr, cc] at
    ``pp + ((c*sh + a)*sw + b)*Rq*Wq + rr*Wq + cc`` is ``Xpad[c, r0 + rr*sh + a, cc*sw + b]``.
    Every tap of a strided convolution then reads one phase plane with unit
    stride (see :func:`~.kernels_conv._gather_padded`), so the strided reads are
    paid once per input element here instead of once per tap and pixel in the
    gather.  Each channel's planes are those of :func:`_phase_planes` (the
    pooling windows' layout) for an image starting r0 padded rows down; the
    Winograd form takes them with sh = sw = 1 (plain padded rows).
    """
    planes = sh * sw * Rq * Wq
    for c in range(cg):
        base = pp + c * planes
        _phase_planes(F, xb + c * H * W, H, W, ph - r0, pw, sh, sw, Rq, Wq,
                      F[np.uint64(base):np.uint64(base + planes)], f32(0.0), base)


@njit(**_JIT)
def direct_fits(kh, kw, sh, sw, dh, dw):
    """Whether a window takes a direct sweep (:mod:`.ukernel_window`): square, equal strides,
    no dilation, (stride, k) one of the generated ``SHAPES``.  It needs no scratch: on
    MobileNet's depthwise planes it took 0.4-0.7x the time of the phase planes, the sweep and
    the copy out (and a fifth on planes of 28x28 and less, where the copies dominated)."""
    if kh != kw or sh != sw or dh != 1 or dw != 1:
        return False
    for stride, k in DIRECT_SHAPES:
        if sh == stride and kh == k:
            return True
    return False


def dwconv_scratch(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> int:
    """Float32 scratch elements :func:`k_dwconv` needs for one plane: none for the direct sweeps
    and the tiny planes' tap loops, else the phase planes and the accumulator."""
    if direct_fits(kh, kw, sh, sw, dh, dw) or OH * OW <= _TINY_PLANE:
        return 0
    return window_scratch(OH, OW, kh, kw, sh, sw, dh, dw)


@njit(**_JIT)
def direct_sweep(is_max, k, stride, F, src, H, W, ph, pw, w_off, OH, OW, dst, bias, lo, hi):
    """The output plane at F[dst:] of a window that :func:`direct_fits`, from the input plane at
    F[src:], padding included: a depthwise conv's (weights at F[w_off:], ``bias``, clamped to
    [lo, hi]) or, ``is_max``, a max pool's."""
    window_direct(sweep_code(stride, k, is_max), F, src, H, W, ph, pw, F, w_off, 0, OH, OW, F, dst, bias, lo, hi)


@njit(**_JIT)
def _tap_table(I, ti, kh, kw, sh, sw, dh, dw, plane, Wq):
    """I[ti + i*kw + j] = where tap (i, j) starts in the phase planes, for output pixel 0:
    phase ((i*dh) % sh, (j*dw) % sw), row (i*dh) // sh, column (j*dw) // sw.  Computed once
    per task (the divisions would cost more than the taps on small planes)."""
    for i in range(kh):
        r = (i * dh) % sh * sw * plane + (i * dh) // sh * Wq
        for j in range(kw):
            I[ti + i * kw + j] = r + (j * dw) % sw * plane + (j * dw) // sw


@njit(**_JIT)
def k_dwconv(F, B, I, J, X, R, p, sbase):
    """Depthwise convolution (groups == C) of channel planes [c0, c1) of batch items [n0, n1).

    Row: [desc, n0, n1, c0, c1].  Output channel m = c * mult + k reads input
    channel c.  Each input plane is split once into zero-padded phase planes
    in scratch (or read in place: stride 1, no padding), then swept (see
    above); the fused epilogue runs on each output plane while it is in
    cache.  Descriptor tail: [w_off, mult, epilogue, scratch offset, bias, act, plane_act]: ``bias``
    the offset of a per-output-channel bias the sweep starts from (-1: none), ``act`` where in R
    the bounds [lo, hi] of a fused ReLU or Clip lie (-1: none), applied before the store; a plain
    conv + bias + ReLU6 then needs no epilogue pass over its output.  ``plane_act``: 1 a HardSwish,
    2 a SiLU, applied to each finished output plane while it is in cache (through the elementwise
    interpreter, EfficientNet's depthwise SiLU cost 5x the convolution).
    """
    d = p[0]
    C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = read_window(X, d)
    w_off = X[d + WIN_LEN]
    mult = X[d + WIN_LEN + 1]
    epi = X[d + WIN_LEN + 2]
    bias_at = X[d + WIN_LEN + 4]
    act = X[d + WIN_LEN + 5]
    plane_act = X[d + WIN_LEN + 6]
    cb_w = X[d + WIN_LEN + 7]
    lo = R[act] if act >= 0 else -_INF
    hi = R[act + 1] if act >= 0 else _INF
    M = C * mult
    Hq, Wq = _phase_dims(OH, OW, kh, kw, sh, sw, dh, dw)
    # The input plane is already the (single) phase plane when nothing is padded.
    direct = sh == 1 and sw == 1 and ph == 0 and pw == 0 and Wq == W and Hq <= H
    nplanes = 0 if direct else sh * sw * Hq * Wq + _SLACK
    pbase = sbase + X[d + WIN_LEN + 3]
    L = (OH - 1) * Wq + OW
    Lr = (L + _SLACK - 1) // _SLACK * _SLACK
    a0 = pbase + nplanes
    # Tiny planes (late MobileNet stages): per-plane sweep set-up would cost
    # more than the arithmetic, so each output is a plain loop over its taps.
    tiny = OH * OW <= _TINY_PLANE
    ti = (a0 + Hq * Wq + _SLACK + 1) // 2  # the int64 tap table, after the accumulator
    # (no scratch at all for the direct sweep)
    swept = direct_fits(kh, kw, sh, sw, dh, dw)
    if not (swept or tiny):
        _tap_table(I, ti, kh, kw, sh, sw, dh, dw, Hq * Wq, Wq)
    for n in range(p[1], p[2]):
        # The epilogue runs over groups of finished planes that are still in L1 (one call per plane is
        # costly on small planes).
        pending = n * M + p[3] * mult
        c = p[3]
        while c < p[4]:
            src = X[d + W_X] + (n * C + c) * H * W
            if cb_w >= 0 and p[4] - c >= WIDTH:
                # small planes, WIDTH channels at a time with channels in the lanes (mult 1)
                nblk = (p[4] - c) // WIDTH
                dst = X[d + W_OUT] + (n * M + c) * OH * OW
                dw_cblock(F, src, H * W, H, W, ph, pw, kh, kw, sh, sw, OH, OW, F, cb_w + c, C,
                          F, bias_at + c if bias_at >= 0 else 0, 1 if bias_at >= 0 else 0, lo, hi,
                          F, pbase, F, dst, nblk)
                if plane_act != 0:
                    _plane_activation(F, dst, nblk * WIDTH * OH * OW, plane_act)
                c += nblk * WIDTH
                if not (swept or tiny):
                    # the blocks' scratch is the plane sweeps' too: their tap table again for the rest
                    _tap_table(I, ti, kh, kw, sh, sw, dh, dw, Hq * Wq, Wq)
            else:
                _dwconv_plane(F, I, X, d, n, c, src, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, mult, M,
                              w_off, bias_at, lo, hi, plane_act, tiny, swept, direct, pbase, nplanes, a0, Lr, Hq,
                              Wq, ti)
                c += 1
            done = n * M + c * mult
            if epi >= 0 and ((done - pending) * OH * OW >= _EPI_GROUP or c == p[4]):
                ew_epilogue(F, X, R, epi, pending, done, 0, OH * OW, sbase)
                pending = done


@njit(**_JIT)
def _dwconv_plane(F, I, X, d, n, c, src, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, mult, M, w_off, bias_at,
                  lo, hi, plane_act, tiny, swept, direct, pbase, nplanes, a0, Lr, Hq, Wq, ti):
    """The ``mult`` output planes of input channel ``c`` of batch item ``n`` (see :func:`k_dwconv`)."""
    if tiny:
        for k in range(mult):
            m = c * mult + k
            _direct_plane(F, src, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, w_off + m * kh * kw,
                          X[d + W_OUT] + (n * M + m) * OH * OW,
                          F[bias_at + m] if bias_at >= 0 else f32(0.0), lo, hi)
            if plane_act != 0:
                _plane_activation(F, X[d + W_OUT] + (n * M + m) * OH * OW, OH * OW, plane_act)
    elif swept:
        for k in range(mult):
            m = c * mult + k
            dst = X[d + W_OUT] + (n * M + m) * OH * OW
            direct_sweep(False, kh, sh, F, src, H, W, ph, pw, w_off + m * kh * kw, OH, OW, dst,
                         F[bias_at + m] if bias_at >= 0 else f32(0.0), lo, hi)
            if plane_act != 0:
                _plane_activation(F, dst, OH * OW, plane_act)
    else:
        if direct:
            # (the rounded-up lanes read a little of what follows the plane: junk columns only)
            planes_at = src
        else:
            planes_at = pbase
            _phase_planes(F, src, H, W, ph, pw, sh, sw, Hq, Wq, F[pbase:pbase + nplanes], f32(0.0), pbase)
        for k in range(mult):
            m = c * mult + k
            b = F[bias_at + m] if bias_at >= 0 else f32(0.0)
            tap_sweep(F, planes_at, I, ti, F, w_off + m * kh * kw, kh * kw, Lr // WIDTH, F, a0, b, lo, hi)
            dst = X[d + W_OUT] + (n * M + m) * OH * OW
            for oh in range(OH):
                copy_run(F, dst + oh * OW, a0 + oh * Wq, OW)
            if plane_act != 0:
                _plane_activation(F, dst, OH * OW, plane_act)


@njit(fastmath={"contract"}, **_JIT)
def _plane_activation(F, at, n, kind):
    """F[at:at + n] in place: ``kind`` 1 HardSwish ``x * Clip(x + 3, 0, 6) / 6``, 2 SiLU
    ``x * sigmoid(x)``; NaN kept (as the conv micro-kernels do)."""
    v = F[_u(at):_u(at + n)]
    if kind == 1:
        for j in range(n):
            v[j] = hardswish32(v[j])
    else:
        for j in range(n):
            x = v[j]
            v[j] = x * sigmoid_act32(x)


@njit(**_JIT)
def _direct_plane(F, src, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, wb, dst, bias, lo, hi):
    """One output plane, each pixel a loop over its taps inside the input (for tiny planes),
    from ``bias`` and clamped to [lo, hi] as the sweeps do (``ukernel._clamp``)."""
    for oh in range(OH):
        h0 = oh * sh - ph
        # kernel rows i with 0 <= h0 + i*dh < H
        # (integer divisions only with dilation: they would cost more than the taps)
        if dh == 1:
            i_lo = max(0, -h0)
            i_hi = min(kh, H - h0)
        else:
            i_lo = (-h0 + dh - 1) // dh if h0 < 0 else 0
            i_hi = min(kh, (H - 1 - h0) // dh + 1) if H - 1 - h0 >= 0 else 0
        for ow in range(OW):
            w0 = ow * sw - pw
            if dw == 1:
                j_lo = max(0, -w0)
                j_hi = min(kw, W - w0)
            else:
                j_lo = (-w0 + dw - 1) // dw if w0 < 0 else 0
                j_hi = min(kw, (W - 1 - w0) // dw + 1) if W - 1 - w0 >= 0 else 0
            s = f32(0.0)
            for i in range(i_lo, i_hi):
                row = src + (h0 + i * dh) * W + w0
                wr = wb + i * kw
                for j in range(j_lo, j_hi):
                    s += F[_u(wr + j)] * F[_u(row + j * dw)]
            s += bias
            s = s if (s > lo or s != s) else lo
            F[_u(dst + oh * OW + ow)] = s if (s < hi or s != s) else hi


@njit(**_JIT)
def _max_run(acc, s, c, L):
    """acc[q] = max(acc[q], s[q], ..., s[q + c - 1]) with NaN winning, c <= 3 (larger runs: call again)."""
    if c == 1:
        for q in range(L):
            a = acc[q]
            v = s[q]
            acc[q] = v if (v > a or v != v) else a
    elif c == 2:
        for q in range(L):
            a = acc[q]
            v = s[q]
            a = v if (v > a or v != v) else a
            v = s[q + 1]
            acc[q] = v if (v > a or v != v) else a
    else:
        for q in range(L):
            a = acc[q]
            v = s[q]
            a = v if (v > a or v != v) else a
            v = s[q + 1]
            a = v if (v > a or v != v) else a
            v = s[q + 2]
            acc[q] = v if (v > a or v != v) else a


@njit(**_JIT)
def k_pool(F, B, I, J, X, R, p, sbase):
    """Max (mode 0) or average (mode 1) pooling of planes [q0, q1) (q = n * C + c).

    Row: [desc, q0, q1].  Descriptor tail: [mode, lo_h, hi_h, lo_w, hi_w,
    scratch, planes per sweep (:func:`pool_stack`), epilogue, input plane stride, output plane
    stride, first output pixel]: taps whose padded coordinate falls
    in [lo, hi) count towards the average; the fused elementwise epilogue (or -1) runs on each
    sweep's finished planes (its registers are the scratch before ``scratch``).  A descriptor may
    cover a band of a plane's rows (planes too large for a vEU's scratch are cut into bands, see
    ``lower_nn.lower_pool``): H, OH and the pads are then the band's, the plane strides the whole
    planes', and the epilogue's columns start at the band's first output pixel.  Like depthwise
    convolution: phase planes padded with -inf (max) or 0 (average), then flat sweeps: the
    depthwise ones over weights of 1 (average), or runs of up to 3 taps (max).
    """
    d = p[0]
    _, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = read_window(X, d)
    mode = X[d + WIN_LEN]
    lo_h = X[d + WIN_LEN + 1]
    hi_h = X[d + WIN_LEN + 2]
    lo_w = X[d + WIN_LEN + 3]
    hi_w = X[d + WIN_LEN + 4]
    Hq, Wq = _phase_dims(OH, OW, kh, kw, sh, sw, dh, dw)
    plane = Hq * Wq
    # Stride 1: G planes stacked one under the other are swept as one tall plane (the
    # rows between them are junk, dropped on the way out): per-plane set-up cost more
    # than the arithmetic on 8x8 and 16x16 planes.
    G = X[d + WIN_LEN + 6]
    epi = X[d + WIN_LEN + 7]
    xs = X[d + WIN_LEN + 8]
    ys = X[d + WIN_LEN + 9]
    c0 = X[d + WIN_LEN + 10]
    nplanes = G * sh * sw * plane + _SLACK
    pbase = sbase + X[d + WIN_LEN + 5]
    acc = F[pbase + nplanes:pbase + nplanes + G * plane + _SLACK]
    cnt0 = pbase + nplanes + G * plane + _SLACK
    inv_h = F[cnt0:cnt0 + OH]
    inv_w = F[cnt0 + OH:cnt0 + OH + OW]
    # Average pooling sums with the depthwise sweeps over weights of one (exact products).
    ones = cnt0 + OH + OW
    for t in range(kh * kw):
        F[ones + t] = f32(1.0)
    ti = (ones + kh * kw + 1) // 2  # the int64 tap table
    _tap_table(I, ti, kh, kw, sh, sw, dh, dw, plane, Wq)
    if mode == 1:
        # 1 / (taps counted along each axis): the count is separable.
        for oh in range(OH):
            cnt = 0
            for i in range(kh):
                if lo_h <= oh * sh + i * dh < hi_h:
                    cnt += 1
            inv_h[oh] = f32(1.0) / f32(cnt) if cnt > 0 else f32(np.nan)
        for ow in range(OW):
            cnt = 0
            for j in range(kw):
                if lo_w <= ow * sw + j * dw < hi_w:
                    cnt += 1
            inv_w[ow] = f32(1.0) / f32(cnt) if cnt > 0 else f32(np.nan)
    # 1/count per output pixel, after the tap table
    scale = F[2 * (ti + kh * kw) + 2:2 * (ti + kh * kw) + 2 + OH * OW]
    if mode == 1:
        for oh in range(OH):
            for ow in range(OW):
                scale[oh * OW + ow] = inv_h[oh] * inv_w[ow]
    fill = f32(-np.inf) if mode == 0 else f32(0.0)
    # A single tap inside the plane (1x1 kernel, no padding): a strided subsample.
    subsample = kh == 1 and kw == 1 and ph == 0 and pw == 0 and (OH - 1) * sh < H and (OW - 1) * sw < W
    P = F[pbase:pbase + nplanes]
    separable = (mode == 0 and dh == 1 and dw == 1 and kh * kw > 1 and (sh > 1 or sw > 1)
                 and OW >= _SEPARABLE_MIN_WIDTH)
    direct = direct_fits(kh, kw, sh, sw, dh, dw)
    for q in range(p[1], p[2], G):
        g = min(G, p[2] - q)
        src = X[d + W_X] + q * xs
        dst = X[d + W_OUT] + q * ys
        if direct:
            # max: -inf padding in the sweep; average: the sum (weights of one), then 1/count
            for k in range(g):
                out_k = dst + k * ys
                direct_sweep(mode == 0, kh, sh, F, src + k * xs, H, W, ph, pw, ones, OH, OW, out_k, f32(0.0),
                             -_INF, _INF)
                if mode == 1:
                    out = F[_u(out_k):_u(out_k + OH * OW)]
                    for e in range(OH * OW):
                        out[e] *= scale[e]
            if epi >= 0:
                ew_epilogue(F, X, R, epi, q, q + g, c0, c0 + OH * OW, sbase)
            continue
        if separable:
            for k in range(g):
                _max_separable(F, src + k * xs, dst + k * ys, H, W, kh, kw, sh, sw, ph, pw, OH, OW, pbase)
            if epi >= 0:
                ew_epilogue(F, X, R, epi, q, q + g, c0, c0 + OH * OW, sbase)
            continue
        if subsample:
            for k in range(g):
                for oh in range(OH):
                    s = inv_h[oh] * inv_w[0] if mode == 1 else f32(1.0)
                    so = src + k * xs + oh * sh * W
                    do = dst + k * ys + oh * OW
                    for ow in range(OW):
                        F[_u(do + ow)] = F[_u(so + ow * sw)] * s
            if epi >= 0:
                ew_epilogue(F, X, R, epi, q, q + g, c0, c0 + OH * OW, sbase)
            continue
        for k in range(g):
            P_k = P[k * sh * sw * plane:(k + 1) * sh * sw * plane]
            _phase_planes(F, src + k * xs, H, W, ph, pw, sh, sw, Hq, Wq, P_k, fill, pbase + k * sh * sw * plane)
        for t in range(g * sh * sw * plane, nplanes):
            P[t] = fill
        L = (g - 1) * plane + (OH - 1) * Wq + OW
        Lr = (L + _SLACK - 1) // _SLACK * _SLACK
        if mode == 1:
            tap_sweep(F, pbase, I, ti, F, ones, kh * kw, Lr // WIDTH, F, pbase + nplanes, f32(0.0), -_INF, _INF)
        else:
            for t in range(Lr):
                acc[t] = fill
        for i in range(kh if mode == 0 else 0):
            r = (i * dh) % sh * sw * plane + (i * dh) // sh * Wq
            if dw == 1:
                for b in range(min(sw, kw)):
                    n = (kw - b + sw - 1) // sw
                    t = 0
                    while t < n:
                        c = min(3, n - t)
                        o = r + b * plane + t
                        _max_run(acc, P[o:o + Lr + c - 1], c, Lr)
                        t += c
            else:
                for j in range(kw):
                    o = r + (j * dw) % sw * plane + (j * dw) // sw
                    _max_run(acc, P[o:o + Lr], 1, Lr)
        for k in range(g):
            _pool_out(F, pbase + nplanes + k * plane, dst + k * ys, OH, OW, Wq, mode, scale)
        if epi >= 0:
            ew_epilogue(F, X, R, epi, q, q + g, c0, c0 + OH * OW, sbase)


#: Strided max pooling that no direct sweep serves (non-square windows, strides other than 1 and 2,
#: 2x2 ... 5x5 limits: :func:`direct_fits`) over output rows at least this wide runs separably
#: (:func:`_max_separable`): 15-25% faster than the phase-plane sweeps on 55-112 pixel planes;
#: narrower planes, and stride 1 (whose stacked sweeps share their set-up across planes: 28x28
#: measured 2x slower separably), keep the sweeps.
_SEPARABLE_MIN_WIDTH = 8


@njit(**_JIT)
def _max_separable(F, src, dst, H, W, kh, kw, sh, sw, ph, pw, OH, OW, v0):
    """Max pooling of one plane (no dilation) as two 1-D maxima per output row: the kernel's
    input rows into one padded row at F[v0:] (-inf outside the plane), then each output pixel the
    maximum of kw neighbours of that row, NaN winning as in :func:`_max_run`.  About kh + kw
    comparisons per output pixel instead of kh * kw, and no phase planes: a 3x3 stride-2 max pool
    of a 111x111 plane spent most of its time splitting the plane into phases."""
    Wp = (OW - 1) * sw + kw
    v = F[v0:v0 + Wp]
    c_lo = min(pw, Wp)  # padded columns [c_lo, c_hi) hold input columns [0, c_hi - c_lo)
    c_hi = max(min(pw + W, Wp), c_lo)
    n = c_hi - c_lo
    ninf = -_INF
    for oh in range(OH):
        h0 = oh * sh - ph
        i_lo = max(0, -h0)
        i_hi = min(kh, H - h0)
        for c in range(Wp):
            v[c] = ninf
        for i in range(i_lo, i_hi):
            row = F[_u(src + (h0 + i) * W):_u(src + (h0 + i) * W + n)]
            vr = v[c_lo:c_hi]
            for c in range(n):
                a = vr[c]
                x = row[c]
                vr[c] = x if (x > a or x != x) else a
        out = F[_u(dst + oh * OW):_u(dst + oh * OW + OW)]
        for ow in range(OW):
            b = ow * sw
            a = v[b]
            for j in range(1, kw):
                x = v[b + j]
                a = x if (x > a or x != x) else a
            out[ow] = a


@njit(**_JIT)
def _pool_out(F, a0, dst, OH, OW, Wq, mode, scale):
    """One output plane from the accumulator rows at F[a0:] (pitch Wq); average pooling then
    multiplies the plane by ``scale`` (1/counts per output pixel) in one flat pass."""
    for oh in range(OH):
        copy_run(F, dst + oh * OW, a0 + oh * Wq, OW)
    if mode == 1:
        out = F[dst:dst + OH * OW]
        for e in range(OH * OW):
            out[e] *= scale[e]
