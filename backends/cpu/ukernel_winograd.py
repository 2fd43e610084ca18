"""The transforms of Winograd F(2x2, 3x3) convolution, generated as LLVM IR (see
:mod:`.kernels_winograd` for the algorithm around them).

A 3x3 stride-1 convolution computes each 2x2 output tile from a 4x4 input tile
``d`` as ``Y = A^T [ (G g G^T) * (B^T d B) ] A``: the 16 products of the
transformed weights ``U = G g G^T`` (made at compile time) and the transformed
input ``V = B^T d B`` summed over input channels are 16 GEMMs with 2.25x fewer
multiplications than the direct convolution (36 per tile and channel pair
against 16).  These two kernels move WIDTH tiles of one tile row per vector:

* :func:`wino_in`, for every input channel: the 4 input rows of the tiles,
  even and odd columns split apart with two-source shuffles, to the 16
  transformed rows ``V[xi, c, tiles]``;
* :func:`wino_out`, for every output channel: the 16 GEMM results of the
  tiles to the 2x2 outputs, even and odd columns interleaved again, with the
  conv's bias, residual and ReLU applied at the (masked) store.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import WIDTH, _activate, _masked, _per_flag_blocks, _splat, _vec_ptr

IN_SYMBOL = "rammer_cpu_winograd_in"
OUT_SYMBOL = "rammer_cpu_winograd_out"

#: F(2x2, 3x3): Y = AT (G g GT * BT d B) A
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def transform_weights(w: np.ndarray) -> np.ndarray:
    """``U[xi, m, c]`` (xi = 4*i + j) of weights ``w[m, c, 3, 3]``, computed in float64."""
    u = np.einsum("ia,mcab,jb->ijmc", G, np.asarray(w, np.float64), G)
    return u.reshape(16, w.shape[0], w.shape[1]).astype(np.float32)


def _transform_1d(bld: ir.IRBuilder, x: list, rows: np.ndarray) -> list:
    """``rows @ x`` for a small integer matrix ``rows`` (entries -1, 0, 1), as vector adds."""
    out = []
    for coeffs in rows:
        acc = None
        for c, v in zip(coeffs, x):
            if c == 0:
                continue
            if acc is None:
                acc = v if c > 0 else bld.fsub(ir.Constant(v.type, [0.0] * v.type.count), v)
            else:
                acc = bld.fadd(acc, v) if c > 0 else bld.fsub(acc, v)
        out.append(acc)
    return out


def _add_input_transform(mod: ir.Module, width: int) -> None:
    """``(x, wq, cstride, v, ldv, vs, ncg)``: for c < ncg, the WIDTH tiles whose 4x4 windows
    start at ``x + c*cstride + 2*t`` (t < WIDTH, rows ``wq`` apart) to
    ``v[xi*vs + c*ldv + t] = (BT d B)[xi]``.  Reads 2*WIDTH + 2 floats of each row."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    fp = f32.as_pointer()
    vec = ir.VectorType(f32, width)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, i64, i64, fp, i64, i64, i64]), name=IN_SYMBOL)
    x, wq, cstride, v, ldv, vs, ncg = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    even = ir.Constant(ir.VectorType(i32, width), [2 * t for t in range(width)])
    odd = ir.Constant(ir.VectorType(i32, width), [2 * t + 1 for t in range(width)])
    with cgutils.for_range(bld, ncg) as loop:
        c = loop.index
        xc = bld.gep(x, [bld.mul(c, cstride)])
        d = []  # d[i][j]: element (i, j) of every tile's window
        for i in range(4):
            row = bld.gep(xc, [bld.mul(ir.Constant(i64, i), wq)])
            lo, hi, lo2, hi2 = (bld.load(_vec_ptr(bld, row, ir.Constant(i64, o), vec), align=4)
                                for o in (0, width, 2, width + 2))
            d.append([bld.shuffle_vector(lo, hi, even), bld.shuffle_vector(lo, hi, odd),
                      bld.shuffle_vector(lo2, hi2, even), bld.shuffle_vector(lo2, hi2, odd)])
        cols = [_transform_1d(bld, [d[i][j] for i in range(4)], BT) for j in range(4)]  # cols[j][i] = (BT d)[i, j]
        vrow = bld.gep(v, [bld.mul(c, ldv)])
        for i in range(4):
            for xi, val in enumerate(_transform_1d(bld, [cols[j][i] for j in range(4)], BT)):
                at = bld.mul(ir.Constant(i64, 4 * i + xi), vs)
                bld.store(val, _vec_ptr(bld, vrow, at, vec), align=4)
    bld.ret_void()


def _add_output_transform(mod: ir.Module, width: int) -> None:
    """``(m, ms, mstride, out, ldo, ostride, nm, ncols, nrows, flags, bias, res)``: for each
    output channel r < nm, the WIDTH tiles ``m[xi*ms + r*mstride + t]`` to ``out[r*ostride +
    a*ldo + 2*t + b] = (AT M A)[a, b]`` (+ bias[r], + res at the same place, ReLU per the
    EPI_* ``flags``), only the first ``nrows`` rows and ``ncols`` columns stored."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    fp = f32.as_pointer()
    vec = ir.VectorType(f32, width)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, i64, i64, fp, i64, i64, i64, i64, i64, i64, fp, fp]),
                     name=OUT_SYMBOL)
    m, ms, mstride, out, ldo, ostride, nm, ncols, nrows, flags, bias, res = fn.args
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    iota = ir.Constant(ir.VectorType(i64, width), list(range(width)))
    masks = [entry.icmp_signed("<", iota, _splat(entry, entry.sub(ncols, ir.Constant(i64, h * width)),
                                                  ir.VectorType(i64, width))) for h in (0, 1)]
    two_rows = _splat(entry, entry.icmp_signed(">", nrows, ir.Constant(i64, 1)), ir.VectorType(ir.IntType(1), width))
    row_masks = (masks, [entry.and_(mask, two_rows) for mask in masks])  # the second output row: if nrows > 1
    mstore, mload = _masked(mod, vec, True), _masked(mod, vec, False)
    align = ir.Constant(i32, 4)
    zero = ir.Constant(vec, [0.0] * width)
    lo_mask = ir.Constant(ir.VectorType(i32, width), [t // 2 + (t % 2) * width for t in range(width)])
    hi_mask = ir.Constant(ir.VectorType(i32, width), [width // 2 + t // 2 + (t % 2) * width for t in range(width)])
    for bb, (_, bias_on, res_on, relu_on) in _per_flag_blocks(fn, entry, flags):
        with cgutils.for_range(bb, nm) as loop:
            r = loop.index
            mr = bb.gep(m, [bb.mul(r, mstride)])
            mv = [[bb.load(_vec_ptr(bb, mr, bb.mul(ir.Constant(i64, 4 * i + j), ms), vec), align=4) for j in range(4)]
                  for i in range(4)]
            cols = [_transform_1d(bb, [mv[i][j] for i in range(4)], AT) for j in range(4)]  # cols[j][a]
            orow = bb.gep(out, [bb.mul(r, ostride)])
            rrow = bb.gep(res, [bb.mul(r, ostride)])
            bv = _splat(bb, bb.load(bb.gep(bias, [r]), align=4), vec) if bias_on else None
            for a in range(2):
                y = _transform_1d(bb, [cols[j][a] for j in range(4)], AT)  # even and odd columns
                halves = (bb.shuffle_vector(y[0], y[1], lo_mask), bb.shuffle_vector(y[0], y[1], hi_mask))
                for h, val in enumerate(halves):
                    at = bb.add(bb.mul(ir.Constant(i64, a), ldo), ir.Constant(i64, h * width))
                    mask = row_masks[a][h]
                    if bias_on:
                        val = bb.fadd(val, bv)
                    if res_on:
                        val = bb.fadd(val, bb.call(mload, [_vec_ptr(bb, rrow, at, vec), align, mask, zero]))
                    val = _activate(bb, val, relu_on)
                    bb.call(mstore, [val, _vec_ptr(bb, orow, at, vec), align, mask])
        bb.ret_void()


def winograd_module(width: int) -> ir.Module:
    """Both transforms at vector width ``width`` (tests build the AVX2 width too)."""
    mod = ir.Module(name="rammer_winograd")
    _add_input_transform(mod, width)
    _add_output_transform(mod, width)
    return mod


WINOGRAD = MachineCode(f"winograd {WIDTH}", lambda: winograd_module(WIDTH), (IN_SYMBOL, OUT_SYMBOL))
#: ctypes types, for tests: (x, wq, cstride, v, ldv, vs, ncg) and
#: (m, ms, mstride, out, ldo, ostride, nm, ncols, nrows, flags, bias, res).
IN_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *[ctypes.c_int64] * 2, ctypes.c_void_p,
                                *[ctypes.c_int64] * 3)
OUT_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *[ctypes.c_int64] * 2, ctypes.c_void_p,
                                 *[ctypes.c_int64] * 6, ctypes.c_void_p, ctypes.c_void_p)


@uses(IN_SYMBOL)
@intrinsic
def wino_in(typingctx, X, x_off, wq, cstride, V, v_off, ldv, vs, ncg):
    """:func:`_add_input_transform` on ``X[x_off:]`` into ``V[v_off:]``."""
    if not arrays_are(types.float32, X, V):
        return None
    return types.none(X, x_off, wq, cstride, V, v_off, ldv, vs, ncg), call_codegen(IN_SYMBOL, "fiifiii")


@uses(OUT_SYMBOL)
@intrinsic
def wino_out(typingctx, M, m_off, ms, mstride, O, o_off, ldo, ostride, nm, ncols, nrows, flags, Bias, bias_off,
             Res, res_off):
    """:func:`_add_output_transform` from ``M[m_off:]`` into ``O[o_off:]``."""
    if not arrays_are(types.float32, M, O, Bias, Res):
        return None
    sig = types.none(M, m_off, ms, mstride, O, o_off, ldo, ostride, nm, ncols, nrows, flags, Bias, bias_off, Res,
                     res_off)
    return sig, call_codegen(OUT_SYMBOL, "fiifiiiiiiff")
