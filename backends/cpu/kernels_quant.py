"""Quantized rKernels: QuantizeLinear, DequantizeLinear, ByteTable, QuantizedAdd, DynamicQuantizeLinear, MatMulInteger,
QLinearMatMul and QLinearConv, computing in integers (int32 accumulation) as the ONNX spec and onnxruntime do.

8-bit tensors live in the arena's byte view ``B``; a ``signed`` flag says whether a byte is int8
(read sign-extended) or uint8.  Rounding is half to even (``np.rint``), and every conversion to
8 bits saturates.  Scales and zero points are read from the arena (constants or, after a
DynamicQuantizeLinear, values computed at run time); a per-axis scale / zero point is indexed by
the position along the quantized axis.

Descriptors (``X[d:]``) are described at each kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .kernels_quant_window import k_qconv_int8  # noqa: F401  (QLinearConv's int8 GEMM forms: kernels.py names it here)
from .ukernel_int8 import MR, NR, int8_shift, no_min_byte, rint_f32, ukernel_int8

_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_u = np.uint64
f32 = np.float32


@njit(**_JIT)
def _byte(B, at, signed):
    """The 8-bit element at byte ``at`` as int32 (sign-extended when ``signed``)."""
    v = np.int32(B[_u(at)])
    if signed and v > 127:
        v -= 256
    return v


@njit(**_JIT)
def _saturate_store(B, at, v, lo, hi):
    """Store float ``v`` (already rounded) clamped to [lo, hi] as a byte (two's complement for int8)."""
    if v < lo:
        v = f32(lo)
    elif v > hi:
        v = f32(hi)
    B[_u(at)] = np.int64(v) & 255


@njit(**_JIT)
def _quantize_run(F, B, src, dst, n, s, z, lo, hi):
    """B[dst:dst + n] = saturate(rint(F[src:src + n] / s) + z) to [lo, hi] (float32 bounds): the
    clamp as min / max and the run contiguous, so the loop vectorizes (a run is a line of
    QuantizeLinear, or DynamicQuantizeLinear's whole tensor)."""
    for j in range(n):
        v = rint_f32(F[_u(src + j)] / s) + z
        v = min(max(v, lo), hi)
        B[_u(dst + j)] = np.int32(v) & 255


@njit(**_JIT)
def k_quantize(F, B, I, J, X, R, p, sbase):
    """QuantizeLinear of lines [q0, q1).  Row: [desc, q0, q1].  Descriptor:
    [x, out, axis_len, inner, scale, zp (-1: none), signed, per_axis]: line q is ``inner`` elements at
    ``q * inner``; its scale / zero point index is ``q % axis_len`` per axis, else 0.
    y = saturate(rint(x / scale) + zp)."""
    d = p[0]
    x = X[d]
    out = X[d + 1]
    axis_len = X[d + 2]
    inner = X[d + 3]
    scale = X[d + 4]
    zp = X[d + 5]
    signed = X[d + 6] != 0
    per_axis = X[d + 7] != 0
    lo = f32(-128.0) if signed else f32(0.0)
    hi = f32(127.0) if signed else f32(255.0)
    for q in range(p[1], p[2]):
        c = q % axis_len if per_axis else 0
        s = F[_u(scale + c)]
        z = f32(_byte(B, zp + c, signed)) if zp >= 0 else f32(0.0)
        _quantize_run(F, B, x + q * inner, out + q * inner, inner, s, z, lo, hi)
    return 0


@njit(**_JIT)
def k_dequantize(F, B, I, J, X, R, p, sbase):
    """DequantizeLinear of lines [q0, q1).  Row: [desc, q0, q1].  Descriptor:
    [x, out, axis_len, inner, scale, zp (-1: none), kind (0 uint8, 1 int8, 2 int32), per_axis]:
    y = float32(x - zp) * scale, lines as in :func:`k_quantize`."""
    d = p[0]
    x = X[d]
    out = X[d + 1]
    axis_len = X[d + 2]
    inner = X[d + 3]
    scale = X[d + 4]
    zp = X[d + 5]
    kind = X[d + 6]
    per_axis = X[d + 7] != 0
    for q in range(p[1], p[2]):
        c = q % axis_len if per_axis else 0
        s = F[_u(scale + c)]
        base = q * inner
        src = x + base
        dst = out + base
        if kind == 2:
            z = np.int64(J[_u(zp + c)]) if zp >= 0 else np.int64(0)
            for j in range(inner):
                F[_u(dst + j)] = f32(np.int64(J[_u(src + j)]) - z) * s
        elif kind == 1:  # int8 and uint8 apart: one branch-free loop each, which vectorizes
            z32 = _byte(B, zp + c, True) if zp >= 0 else np.int32(0)
            for j in range(inner):
                F[_u(dst + j)] = f32(np.int32(np.int8(B[_u(src + j)])) - z32) * s
        else:
            z32 = _byte(B, zp + c, False) if zp >= 0 else np.int32(0)
            for j in range(inner):
                F[_u(dst + j)] = f32(np.int32(B[_u(src + j)]) - z32) * s
    return 0


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False)
def _requantize_bytes(B, x, out, e0, e1, signed_in, m, zx, lo, hi, zy, qlo, qhi):
    """out[e] = saturate(rint(clip(float32(x[e] - zx) * m, lo, hi)) + zy) for e in [e0, e1): a ByteTable's
    function computed (DequantizeLinear -> Relu / Clip -> QuantizeLinear with m = sx / sy and the bounds
    over sy), one branch-free loop per input signedness over slices, all in float32 (``x - zx`` is an
    integer of at most 9 bits, exact) with :func:`rint_f32`: the loop vectorizes (int32 - float32 is a
    float64 in numba, and its ``np.rint`` a call per byte, which kept it scalar: 1.6 bytes/ns)."""
    n = e1 - e0
    a = B[_u(x + e0):_u(x + e1)]
    o = B[_u(out + e0):_u(out + e1)]
    if signed_in:
        for e in range(n):
            v = min(max((f32(np.int8(a[e])) - zx) * m, lo), hi)
            y = min(max(rint_f32(v) + zy, qlo), qhi)
            o[e] = np.int32(y) & 255
    else:
        for e in range(n):
            v = min(max((f32(a[e]) - zx) * m, lo), hi)
            y = min(max(rint_f32(v) + zy, qlo), qhi)
            o[e] = np.int32(y) & 255


@njit(**_JIT)
def k_byte_table(F, B, I, J, X, R, p, sbase):
    """ByteTable of elements [e0, e1).  Row: [desc, e0, e1].  Descriptor: [x, table, out, params (-1:
    none), x signed, out signed]: out[e] = table[x[e]], the byte read unsigned (the 256-entry table
    stays in L1); with params (float32 [m, zx, lo, hi, zy], which the lowering checked give the table
    on all 256 bytes) :func:`_requantize_bytes` computes it instead."""
    d = p[0]
    x = X[d]
    table = X[d + 1]
    out = X[d + 2]
    params = X[d + 3]
    if params >= 0:
        o_signed = X[d + 5] != 0
        _requantize_bytes(B, x, out, p[1], p[2], X[d + 4] != 0, F[_u(params)], F[_u(params + 1)],
                          F[_u(params + 2)], F[_u(params + 3)], F[_u(params + 4)],
                          f32(-128.0) if o_signed else f32(0.0), f32(127.0) if o_signed else f32(255.0))
        return 0
    for e in range(p[1], p[2]):
        B[_u(out + e)] = B[_u(table + np.int64(B[_u(x + e)]))]
    return 0


#: The lowest float32: the floor of a QuantizedAdd without Relu (finite, as the loop's fastmath flags assume).
_NO_FLOOR = f32(np.finfo(np.float32).min)


@njit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"nnan", "ninf", "nsz"})
def _quantized_add(B, a, b, out, e0, e1, flip_a, flip_b, za, zb, sa, sb, floor, sy, zy, qlo, qhi):
    """out[e] = saturate(rint(max((a[e] - za) * sa + (b[e] - zb) * sb, floor) / sy) + zy) for e in [e0, e1),
    every step in float32 as DequantizeLinear, Add, Relu and QuantizeLinear compute it (the byte minus its
    zero point is an integer of at most 9 bits, exact; no contraction into an FMA, a true division): bit for
    bit the chain.  An int8 byte is read as the unsigned byte ^ 0x80 with its zero point + 128 (``flip_*``,
    ``z*``), so one branch-free loop over slices serves every signedness and vectorizes."""
    n = e1 - e0
    x = B[_u(a + e0):_u(a + e1)]
    y = B[_u(b + e0):_u(b + e1)]
    o = B[_u(out + e0):_u(out + e1)]
    for e in range(n):
        v = max((f32(x[e] ^ flip_a) - za) * sa + (f32(y[e] ^ flip_b) - zb) * sb, floor)
        q = min(max(rint_f32(v / sy) + zy, qlo), qhi)
        o[e] = np.int32(q) & 255


@njit(**_JIT)
def k_qadd(F, B, I, J, X, R, p, sbase):
    """QuantizedAdd of elements [e0, e1) (rammer domain: DequantizeLinear(a) + DequantizeLinear(b) [-> Relu]
    -> QuantizeLinear, see :mod:`rammer.passes.qdq_add`).  Row: [desc, e0, e1].  Descriptor: [a, b, out,
    a scale, a zp, b scale, b zp, y scale, y zp, a signed, b signed, out signed, relu] (per-tensor scales
    and zero points; -1: no zero point)."""
    d = p[0]
    a_signed = X[d + 9] != 0
    b_signed = X[d + 10] != 0
    o_signed = X[d + 11] != 0
    za = f32(_byte(B, X[d + 4], a_signed)) if X[d + 4] >= 0 else f32(0.0)
    zb = f32(_byte(B, X[d + 6], b_signed)) if X[d + 6] >= 0 else f32(0.0)
    zy = f32(_byte(B, X[d + 8], o_signed)) if X[d + 8] >= 0 else f32(0.0)
    _quantized_add(B, X[d], X[d + 1], X[d + 2], p[1], p[2], np.uint8(128 if a_signed else 0),
                   np.uint8(128 if b_signed else 0), za + f32(128.0) if a_signed else za,
                   zb + f32(128.0) if b_signed else zb, F[_u(X[d + 3])], F[_u(X[d + 5])],
                   f32(0.0) if X[d + 12] != 0 else _NO_FLOOR, F[_u(X[d + 7])], zy,
                   f32(-128.0) if o_signed else f32(0.0), f32(127.0) if o_signed else f32(255.0))
    return 0


@njit(**_JIT)
def k_dynquant(F, B, I, J, X, R, p, sbase):
    """DynamicQuantizeLinear of a whole tensor (one rTask).  Row: [desc].  Descriptor:
    [x, n, y, scale out, zp out]: the range [min(0, x), max(0, x)] onto uint8; scale 1 for an
    all-zero input (onnxruntime's choice), as the reference (``rammer.ops.quant``)."""
    d = p[0]
    x = X[d]
    n = X[d + 1]
    y = X[d + 2]
    scale_at = X[d + 3]
    zp_at = X[d + 4]
    lo = f32(0.0)
    hi = f32(0.0)
    for j in range(n):
        v = F[_u(x + j)]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    if hi > lo:
        s = f32((np.float64(hi) - np.float64(lo)) / 255.0)
    else:
        s = f32(1.0)
    zf = rint_f32(f32(0.0) - lo / s)
    zf = f32(0.0) if zf < 0 else (f32(255.0) if zf > 255 else zf)
    F[_u(scale_at)] = s
    B[_u(zp_at)] = np.int64(zf) & 255
    _quantize_run(F, B, x, y, n, s, zf, f32(0.0), f32(255.0))
    return 0


@njit(**_JIT)
def _int_row(B, J, o, arow, bmat, K, N, za, a_signed, b_signed, b_zp, b_zp_cols):
    """J[o:o + N] = sum_k (a[k] - za) * (b[k, :] - zb) for one row of a: sum_k (a - za) * b, less
    zb[j] * sum_k (a - za), so that the inner loop is a widening multiply-add over a row of b
    (which LLVM vectorizes)."""
    for j in range(N):
        J[_u(o + j)] = 0
    asum = np.int32(0)
    for k in range(K):
        av = _byte(B, arow + k, a_signed) - za
        if av == 0:
            continue
        asum += av
        brow = bmat + k * N
        if b_signed:
            for j in range(N):
                J[_u(o + j)] += av * np.int32(np.int8(B[_u(brow + j)]))
        else:
            for j in range(N):
                J[_u(o + j)] += av * np.int32(B[_u(brow + j)])
    if b_zp >= 0:
        if b_zp_cols:
            for j in range(N):
                J[_u(o + j)] -= _byte(B, b_zp + j, b_signed) * asum
        else:
            zb = _byte(B, b_zp, b_signed)
            if zb != 0:
                for j in range(N):
                    J[_u(o + j)] -= zb * asum


@njit(**_JIT)
def k_matmul_int(F, B, I, J, X, R, p, sbase):
    """MatMulInteger rows [r0, r1) of the stacked [batch * M, N] int32 output.  Row: [desc, r0, r1].
    Descriptor: [a, b, out, M, K, N, a batch stride, b batch stride, a signed, b signed, a zp (-1),
    b zp (-1), b zp per column]: out[i, j] = sum_k (a[i, k] - za) * (b[k, j] - zb[j]) (:func:`_int_row`)."""
    d = p[0]
    a = X[d]
    b = X[d + 1]
    out = X[d + 2]
    M = X[d + 3]
    K = X[d + 4]
    N = X[d + 5]
    a_bs = X[d + 6]
    b_bs = X[d + 7]
    a_signed = X[d + 8] != 0
    b_signed = X[d + 9] != 0
    a_zp = X[d + 10]
    za = _byte(B, a_zp, a_signed) if a_zp >= 0 else np.int32(0)
    for r in range(p[1], p[2]):
        bi = r // M
        _int_row(B, J, out + r * N, a + bi * a_bs + (r % M) * K, b + bi * b_bs, K, N, za, a_signed, b_signed,
                 X[d + 11], X[d + 12] != 0)
    return 0


@njit(**_JIT)
def k_qlinear_matmul(F, B, I, J, X, R, p, sbase):
    """QLinearMatMul rows [r0, r1) of the stacked [batch * M, N] 8-bit output.  Row: [desc, r0, r1].
    Descriptor: MatMulInteger's (:func:`k_matmul_int`), then [a scale, b scale, b scale per column,
    y scale, y zp (-1), out signed]: the int32 row accumulates in the vEU's scratch (N slots), then
    y = saturate(rint(acc * (a_scale * b_scale / y_scale)) + y_zp)."""
    d = p[0]
    a = X[d]
    b = X[d + 1]
    out = X[d + 2]
    M = X[d + 3]
    K = X[d + 4]
    N = X[d + 5]
    a_bs = X[d + 6]
    b_bs = X[d + 7]
    a_signed = X[d + 8] != 0
    b_signed = X[d + 9] != 0
    a_zp = X[d + 10]
    b_zp = X[d + 11]
    b_zp_cols = X[d + 12] != 0
    a_scale = F[_u(X[d + 13])]
    b_scale = X[d + 14]
    b_scale_cols = X[d + 15] != 0
    y_scale = F[_u(X[d + 16])]
    y_zp = X[d + 17]
    o_signed = X[d + 18] != 0
    lo = -128 if o_signed else 0
    hi = 127 if o_signed else 255
    za = _byte(B, a_zp, a_signed) if a_zp >= 0 else np.int32(0)
    zy = f32(_byte(B, y_zp, o_signed)) if y_zp >= 0 else f32(0.0)
    for r in range(p[1], p[2]):
        bi = r // M
        _int_row(B, J, sbase, a + bi * a_bs + (r % M) * K, b + bi * b_bs, K, N, za, a_signed, b_signed, b_zp,
                 b_zp_cols)
        o = out + r * N
        for j in range(N):
            mult = a_scale * F[_u(b_scale + (j if b_scale_cols else 0))] / y_scale
            v = rint_f32(f32(J[_u(sbase + j)]) * mult) + zy
            _saturate_store(B, o + j, v, lo, hi)
    return 0


@njit(**_JIT)
def k_qlinearconv(F, B, I, J, X, R, p, sbase):
    """QLinearConv (2-D) output planes [q0, q1) of (image, output channel).  Row: [desc, q0, q1].
    Descriptor: [x, w, out, C, H, W, OC, OH, OW, cin per group, oc per group, kh, kw, sh, sw, dh, dw,
    pad top, pad left, x signed, w signed, out signed, x zp, w zp, w zp per channel, x scale,
    w scale, w scale per channel, y scale, y zp, bias (int32, -1 none)].  The plane accumulates in
    int32 in the vEU's scratch (``OH * OW`` slots), one weight tap at a time over whole output
    rows (the inner loop a multiply-add over contiguous pixels when the stride is 1); then
    y = saturate(rint(acc * (x_scale * w_scale / y_scale)) + y_zp)."""
    d = p[0]
    x = X[d]
    w = X[d + 1]
    out = X[d + 2]
    C = X[d + 3]
    H = X[d + 4]
    W = X[d + 5]
    OC = X[d + 6]
    OH = X[d + 7]
    OW = X[d + 8]
    cpg = X[d + 9]
    opg = X[d + 10]
    KH = X[d + 11]
    KW = X[d + 12]
    sh = X[d + 13]
    sw = X[d + 14]
    dh = X[d + 15]
    dw = X[d + 16]
    pt = X[d + 17]
    pl = X[d + 18]
    x_signed = X[d + 19] != 0
    w_signed = X[d + 20] != 0
    o_signed = X[d + 21] != 0
    x_zp = X[d + 22]
    w_zp = X[d + 23]
    w_zp_ch = X[d + 24] != 0
    x_scale = X[d + 25]
    w_scale = X[d + 26]
    w_scale_ch = X[d + 27] != 0
    y_scale = X[d + 28]
    y_zp = X[d + 29]
    bias = X[d + 30]
    lo_f = f32(-128.0) if o_signed else f32(0.0)
    hi_f = f32(127.0) if o_signed else f32(255.0)
    zx = _byte(B, x_zp, x_signed) if x_zp >= 0 else np.int32(0)
    plane = OH * OW
    acc = sbase
    for q in range(p[1], p[2]):
        n = q // OC
        oc = q % OC
        g = oc // opg
        zw = _byte(B, w_zp + (oc if w_zp_ch else 0), w_signed) if w_zp >= 0 else np.int32(0)
        b0 = J[_u(bias + oc)] if bias >= 0 else np.int32(0)
        for t in range(plane):
            J[_u(acc + t)] = b0
        pointwise = KH == 1 and KW == 1 and OH == H and OW == W and sh == 1 and sw == 1 and pt == 0 and pl == 0
        for ci in range(cpg):
            c = g * cpg + ci
            xplane = x + (n * C + c) * H * W
            wbase = w + ((oc * cpg + ci) * KH) * KW
            if pointwise:  # one multiply-add over the whole plane
                wv = _byte(B, wbase, w_signed) - zw
                if wv == 0:
                    continue
                if x_signed:
                    for t in range(plane):
                        J[_u(acc + t)] += wv * (np.int32(np.int8(B[_u(xplane + t)])) - zx)
                else:
                    for t in range(plane):
                        J[_u(acc + t)] += wv * (np.int32(B[_u(xplane + t)]) - zx)
                continue
            for i in range(KH):
                for jj in range(KW):
                    wv = _byte(B, wbase + i * KW + jj, w_signed) - zw
                    if wv == 0:
                        continue
                    # output columns whose input column lies inside the row
                    off = jj * dw - pl
                    ow0 = 0
                    if off < 0:
                        ow0 = (-off + sw - 1) // sw
                    ow1 = OW
                    last = W - 1 - off
                    if last < 0:
                        ow1 = 0
                    elif last // sw + 1 < OW:
                        ow1 = last // sw + 1
                    if ow1 <= ow0:
                        continue
                    for oh in range(OH):
                        ih = oh * sh - pt + i * dh
                        if ih < 0 or ih >= H:
                            continue
                        src = xplane + ih * W + off
                        dst = acc + oh * OW
                        if sw == 1:
                            if x_signed:
                                for ow in range(ow0, ow1):
                                    J[_u(dst + ow)] += wv * (np.int32(np.int8(B[_u(src + ow)])) - zx)
                            else:
                                for ow in range(ow0, ow1):
                                    J[_u(dst + ow)] += wv * (np.int32(B[_u(src + ow)]) - zx)
                        elif x_signed:  # strided (a depthwise stride-2 layer): still one branch-free loop per sign
                            for ow in range(ow0, ow1):
                                J[_u(dst + ow)] += wv * (np.int32(np.int8(B[_u(src + ow * sw)])) - zx)
                        else:
                            for ow in range(ow0, ow1):
                                J[_u(dst + ow)] += wv * (np.int32(B[_u(src + ow * sw)]) - zx)
        ws = F[_u(w_scale + (oc if w_scale_ch else 0))]
        mult = F[_u(x_scale)] * ws / F[_u(y_scale)]
        zy = f32(_byte(B, y_zp, o_signed)) if y_zp >= 0 else f32(0.0)
        obase = out + q * plane
        for t in range(plane):
            v = rint_f32(f32(J[_u(acc + t)]) * mult) + zy
            v = min(max(v, lo_f), hi_f)
            B[_u(obase + t)] = np.int32(v) & 255
    return 0


@njit(**_JIT)
def _row_sum(B, at, K, signed):
    """The sum of the K bytes of an A row (sign-extended when ``signed``)."""
    s = np.int64(0)
    if signed:
        for k in range(K):
            s += np.int64(np.int8(B[_u(at + k)]))
    else:
        for k in range(K):
            s += np.int64(B[_u(at + k)])
    return s


@njit(**_JIT)
def k_gemm_int8(F, B, I, J, X, R, p, sbase):
    """MatMulInteger / QLinearMatMul against a constant B packed at compile time (:func:`.ukernel_int8.pack_b`),
    tiles [t0, t1) of MR rows x NR columns, tile t = panel * row_tiles + row tile (a task's tiles share
    a B panel).  Row: [desc, t0, t1].  Descriptor: [a, packed b (bytes), out, rows, K, N, a signed,
    b unsigned, a zp (-1), b zp (-1), b zp per column, column sums of the packed int8 B (int32),
    out kind (0: int32, 1: requantized 8 bits, 2: float32), a scale, b scale, b scale per column, y scale,
    y zp (-1), out signed, no -128 in the packed b].  Kind 2 (MatMulIntegerToFloat) stores
    ``float32(acc) * scale + bias`` (two float32 roundings, as the Cast -> Mul -> Add it replaces), its
    scale at the b scale's slots and its bias (float32 per column, -1 none) at the a scale's.

    The micro-kernel sums ``D = sum_k a' * b'`` with a' = a (+128 when a is int8) and b' = b (-128
    when b is uint8); with zb' = zb - 128 [b unsigned] the zero-point product is
    ``sum (a - za)(b - zb) = D - rowsum(a) * zb' - colsum(b') * (za + 128 [a signed]) + K * za * zb'``
    (int64 here, wrapped to int32 as the int32 accumulation of the spec would).  The kernel's form may
    store ``D - shift * colsum(b')`` (:func:`.ukernel_int8.int8_shift`, the AVX2 form's 128): the shift
    joins the column term, and the k values past the last group of 4 are summed the same way."""
    d = p[0]
    a = X[d]
    bp = X[d + 1]
    out = X[d + 2]
    rows = X[d + 3]
    K = X[d + 4]
    N = X[d + 5]
    a_signed = X[d + 6] != 0
    b_unsigned = X[d + 7] != 0
    a_zp = X[d + 8]
    b_zp = X[d + 9]
    b_zp_cols = X[d + 10] != 0
    colsum = X[d + 11]
    kind = X[d + 12]
    requant = kind == 1
    o_signed = X[d + 18] != 0
    lo = -128 if o_signed else 0
    hi = 127 if o_signed else 255
    za = np.int64(_byte(B, a_zp, a_signed)) if a_zp >= 0 else np.int64(0)
    shift = int8_shift()  # the micro-kernel form's: its tile holds D - shift * colsum(b')
    a_shift = za + (128 if a_signed else 0) - shift
    row_tiles = (rows + MR - 1) // MR
    k4 = K // 4
    pbytes = ((K + 3) // 4) * 4 * NR
    tile = sbase
    sums = sbase + MR * NR
    zbs = sums + MR
    cterms = zbs + NR
    mults = cterms + NR
    biases = mults + NR
    bias_at = X[d + 13] if kind == 2 else -1
    lo_f = f32(lo)
    hi_f = f32(hi)
    a_scale = f32(0.0)
    y_scale = f32(1.0)
    zy = f32(0.0)
    if requant:
        a_scale = F[_u(X[d + 13])]
        y_scale = F[_u(X[d + 16])]
        zy = f32(_byte(B, X[d + 17], o_signed)) if X[d + 17] >= 0 else f32(0.0)
    terms_for = -1  # the panel whose per-column terms the scratch holds
    any_zb = True
    wsafe = 0
    for t in range(p[1], p[2]):
        panel = t // row_tiles
        r0 = (t % row_tiles) * MR
        nr = min(MR, rows - r0)
        pb = bp + panel * pbytes
        c0 = panel * NR
        nc = min(NR, N - c0)
        if panel != terms_for:  # the per-column terms once per panel, so that the stores below vectorize
            terms_for = panel
            any_zb = False
            # the panel read once here for a -128, not by every tile's call (a form with no shift ignores it)
            # (or known at compile time to hold none: descriptor slot 19)
            wsafe = (1 if X[d + 19] != 0 else no_min_byte(B, pb, k4 * NR * 4)) if shift != 0 else 0
            for j in range(nc):
                col = c0 + j
                zb = np.int64(0)
                if b_zp >= 0:
                    zb = np.int64(_byte(B, b_zp + (col if b_zp_cols else 0), not b_unsigned))
                if b_unsigned:
                    zb -= 128
                any_zb |= zb != 0
                J[_u(zbs + j)] = np.int32(zb)
                J[_u(cterms + j)] = np.int32(K * za * zb - np.int64(J[_u(colsum + col)]) * a_shift)
                if requant:
                    F[_u(mults + j)] = a_scale * F[_u(X[d + 14] + (col if X[d + 15] != 0 else 0))] / y_scale
                elif kind == 2:
                    F[_u(mults + j)] = F[_u(X[d + 14] + (col if X[d + 15] != 0 else 0))]
                    F[_u(biases + j)] = F[_u(bias_at + col)] if bias_at >= 0 else f32(0.0)
        ukernel_int8(k4, B, a + r0 * K, K, nr, 1 if a_signed else 0, B, pb, J, tile, NR, wsafe)
        for r in range(nr):
            arow = a + (r0 + r) * K
            # A's row sums only where a zero point of B needs them (symmetric int8 weights: none)
            J[_u(sums + r)] = np.int32(_row_sum(B, arow, K, a_signed)) if any_zb else np.int32(0)
            for kk in range(k4 * 4, K):  # the last K % 4 values of k, past the kernel's groups of 4
                av = _byte(B, arow + kk, a_signed) + (128 if a_signed else 0) - shift
                tb = pb + (k4 * NR) * 4 + (kk - k4 * 4)
                for j in range(NR):
                    J[_u(tile + r * NR + j)] += av * np.int32(np.int8(B[_u(tb + j * 4)]))
        for r in range(nr):
            rs = np.int64(J[_u(sums + r)])
            trow = tile + r * NR
            o = out + (r0 + r) * N + c0
            if requant:
                for j in range(nc):
                    v = np.int64(J[_u(trow + j)]) - rs * np.int64(J[_u(zbs + j)]) + np.int64(J[_u(cterms + j)])
                    q = rint_f32(f32(np.int32(v)) * F[_u(mults + j)]) + zy
                    q = min(max(q, lo_f), hi_f)
                    B[_u(o + j)] = np.int32(q) & 255
            elif kind == 2 and bias_at >= 0:
                for j in range(nc):
                    v = np.int64(J[_u(trow + j)]) - rs * np.int64(J[_u(zbs + j)]) + np.int64(J[_u(cterms + j)])
                    F[_u(o + j)] = f32(np.int32(v)) * F[_u(mults + j)] + F[_u(biases + j)]
            elif kind == 2:  # no bias: no "+ 0.0" either (it would turn a -0.0 into 0.0)
                for j in range(nc):
                    v = np.int64(J[_u(trow + j)]) - rs * np.int64(J[_u(zbs + j)]) + np.int64(J[_u(cterms + j)])
                    F[_u(o + j)] = f32(np.int32(v)) * F[_u(mults + j)]
            else:
                for j in range(nc):
                    v = np.int64(J[_u(trow + j)]) - rs * np.int64(J[_u(zbs + j)]) + np.int64(J[_u(cterms + j)])
                    J[_u(o + j)] = np.int32(v)
    return 0
