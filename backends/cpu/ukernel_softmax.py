"""Softmax of one contiguous row as a vector kernel: ``d = exp(a - max(a)) / sum``, WIDTH lanes a step.

The numba passes of :func:`.kernels_nn._softmax_row` ran at about 3.8 ns a float on this machine
(onnxruntime's Softmax: 0.14): LLVM kept the max (a select chain) and :func:`.fastmath.exp32`
(called per element) scalar.  Here every pass is written on vectors: the maximum by lanes, then
``exp`` (:func:`.ukernel._vec_exp`, the same algorithm as ``exp32``, so the same values) written to
``d`` while the lanes add up in float64, then the scale by ``1 / float32(sum)`` with probabilities
below the smallest normal float flushed to 0 (:data:`.fastmath.FLT_MIN`: a subnormal GEMM operand
costs a microcode assist in every FMA).  The last partial vector is read and written masked.

NaN and infinities as before: a NaN or +inf anywhere makes ``a - max`` NaN somewhere, so the sum and
every output are NaN (the reference's result).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import WIDTH, _exp_reduced, _fma, _masked, _splat, _vec_exp, _vec_ptr

#: Lanes of these row kernels: all of a zmm register.  Eight (ymm, what LLVM chose for the numba
#: loops on this Xeon) measured 1.5-1.7x slower per float from 128 floats a row up, the same below.
LANES = WIDTH
SOFTMAX_SYMBOL = "rammer_cpu_softmax_row"
EXP_ROW_SYMBOL = "rammer_cpu_exp_row"
#: float32's smallest normal number (fastmath.FLT_MIN, written out: this module builds IR only).
_FLT_MIN = 1.1754943508222875e-38


def _loop(fn: ir.Function, bld: ir.IRBuilder, n: ir.Value, carried: list[tuple[ir.Type, ir.Value]], body_fn, name: str):
    """``for (i = 0; i + LANES <= n; i += LANES) carried = body_fn(bld, i, carried)``, then the tail
    (``body_fn(bld, i, carried, mask)`` when ``i < n``); returns the builder after it and the values."""
    i64 = ir.IntType(64)
    head, body, tail, masked, done = (fn.append_basic_block(f"{name}_{s}") for s in ("head", "body", "tail", "masked",
                                                                                     "done"))
    start = bld.block
    bld.branch(head)
    hb = ir.IRBuilder(head)
    i = hb.phi(i64, name=f"{name}_i")
    i.add_incoming(ir.Constant(i64, 0), start)
    phis = []
    for ty, init in carried:
        ph = hb.phi(ty)
        ph.add_incoming(init, start)
        phis.append(ph)
    hb.cbranch(hb.icmp_signed("<=", hb.add(i, ir.Constant(i64, LANES)), n), body, tail)
    bb = ir.IRBuilder(body)
    new = body_fn(bb, i, phis, None)
    i.add_incoming(bb.add(i, ir.Constant(i64, LANES)), body)
    for ph, val in zip(phis, new):
        ph.add_incoming(val, body)
    bb.branch(head)
    tb = ir.IRBuilder(tail)
    tb.cbranch(tb.icmp_signed("<", i, n), masked, done)
    mb = ir.IRBuilder(masked)
    lanes = ir.Constant(ir.VectorType(i64, LANES), list(range(LANES)))
    mask = mb.icmp_signed("<", lanes, _splat(mb, mb.sub(n, i), ir.VectorType(i64, LANES)))
    tail_vals = body_fn(mb, i, phis, mask)
    mb.branch(done)
    db = ir.IRBuilder(done)
    out = []
    for ph in phis:
        merged = db.phi(ph.type)
        merged.add_incoming(ph, tail)
        out.append(merged)
    for merged, val in zip(out, tail_vals):
        merged.add_incoming(val, masked)
    return db, out


def _exp_flushed(bld: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e**x for x <= 0 (a value minus its row's maximum) or NaN, 0 where it is below FLT_MIN: bit for
    bit :func:`.ukernel._vec_exp` (fused) then the flush, in about two thirds of its instructions.
    x <= 0 needs no overflow check, the flush no subnormal results, and a NaN x passes through the
    clamp and the arithmetic, so no NaN select.  Below -86 x is shifted up by 64 ln 2 and the result
    scaled by 2**-64 as there (the same roundings down to FLT_MIN)."""
    vf = x.type
    n_lanes = vf.count
    vi = ir.VectorType(ir.IntType(32), n_lanes)
    fma = _fma(bld.module, vf)

    def c(v: float) -> ir.Constant:
        return ir.Constant(vf, [v] * n_lanes)

    low = bld.fcmp_ordered("<", x, c(-86.0))
    xs = bld.select(low, bld.fadd(x, c(44.3614195558365)), x)
    xc = bld.select(bld.fcmp_ordered("<", xs, c(-86.0)), c(-86.0), xs)
    k, p = _exp_reduced(bld, xc, lambda a, b, acc: bld.call(fma, [a, b, acc]), degree=7)
    # k's low mantissa bits hold n + 2**22: n + 127 in the exponent field is 2**n (n in [-124, 0])
    bits = bld.add(bld.bitcast(k, vi), ir.Constant(vi, [127 - 0x4B400000] * n_lanes))
    y = bld.fmul(p, bld.bitcast(bld.shl(bits, ir.Constant(vi, [23] * n_lanes)), vf))
    y = bld.select(low, bld.fmul(y, c(5.421010862427522e-20)), y)
    return bld.select(bld.fcmp_ordered("<", y, c(_FLT_MIN)), c(0.0), y)


def _sum_lanes(bld: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """The lanes of ``v`` added pairwise, halves then quarters (log2 lanes dependent adds where a
    lane-by-lane chain took one per lane)."""
    i32 = ir.IntType(32)
    n = v.type.count
    while n > 1:
        half = n // 2
        lo = bld.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half), list(range(half))))
        hi = bld.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, half), list(range(half, n))))
        v, n = bld.fadd(lo, hi), half
    return bld.extract_element(v, ir.Constant(i32, 0))


class _RowOps:
    """Masked vector loads and stores, splats and horizontal reductions for one kernel."""

    def __init__(self, mod: ir.Module) -> None:
        self.vf = ir.VectorType(ir.FloatType(), LANES)
        self.vd = ir.VectorType(ir.DoubleType(), LANES)
        self.load_m, self.store_m = _masked(mod, self.vf, False), _masked(mod, self.vf, True)
        self.i32 = ir.IntType(32)

    def load(self, bld, base, i, mask, fill):
        ptr = _vec_ptr(bld, base, i, self.vf)
        if mask is None:
            return bld.load(ptr, align=4)
        return bld.call(self.load_m, [ptr, ir.Constant(self.i32, 4), mask, fill])

    def store(self, bld, val, base, i, mask):
        ptr = _vec_ptr(bld, base, i, self.vf)
        if mask is None:
            bld.store(val, ptr, align=4)
        else:
            bld.call(self.store_m, [val, ptr, ir.Constant(self.i32, 4), mask])

    def splat(self, bld, value):
        return _splat(bld, value, ir.VectorType(value.type, LANES))

    def exp_sum(self, fn, bld, n, a, d, vmx, flush: bool):
        """``d = exp(a - mx)`` (flushed below FLT_MIN when ``flush``) and the float64 sum of d, as a
        float32."""
        ninf = ir.Constant(self.vf, [float("-inf")] * LANES)
        zero = ir.Constant(self.vf, [0.0] * LANES)

        def step(b, i, acc, mask):
            x = b.fsub(self.load(b, a, i, mask, ninf), vmx)
            e = _exp_flushed(b, x) if flush else _vec_exp(b, x, fused=True)
            self.store(b, e, d, i, mask)
            if mask is not None:  # lanes past the row add nothing
                e = b.select(mask, e, zero)
            return [b.fadd(acc[0], b.fpext(e, self.vd))]

        bld, (vsum,) = _loop(fn, bld, n, [(self.vd, ir.Constant(self.vd, [0.0] * LANES))], step, "exp")
        if flush:  # (the Softmax op's rows keep their lane order: _softmax_short_rows gives the same values)
            return bld, bld.fptrunc(_sum_lanes(bld, vsum), ir.FloatType())
        total = bld.extract_element(vsum, ir.Constant(self.i32, 0))
        for lane in range(1, LANES):
            total = bld.fadd(total, bld.extract_element(vsum, ir.Constant(self.i32, lane)))
        return bld, bld.fptrunc(total, ir.FloatType())


def _add_softmax_row(mod: ir.Module) -> None:
    """``(n, a, d)``: ``d = softmax(a)``, probabilities below FLT_MIN flushed to 0."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    fp = f32.as_pointer()
    ops = _RowOps(mod)
    vf = ops.vf
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, fp]), name=SOFTMAX_SYMBOL)
    n, a, d = fn.args
    n.name, a.name, d.name = "n", "a", "d"
    ninf = ir.Constant(vf, [float("-inf")] * LANES)
    bld = ir.IRBuilder(fn.append_basic_block("entry"))

    def max_step(b, i, acc, mask):
        v = ops.load(b, a, i, mask, ninf)
        return [b.select(b.fcmp_ordered(">", v, acc[0]), v, acc[0])]

    bld, (vmax,) = _loop(fn, bld, n, [(vf, ninf)], max_step, "max")
    mx = bld.extract_element(vmax, ir.Constant(ops.i32, 0))
    for lane in range(1, LANES):
        e = bld.extract_element(vmax, ir.Constant(ops.i32, lane))
        mx = bld.select(bld.fcmp_ordered(">", e, mx), e, mx)
    bld, total = ops.exp_sum(fn, bld, n, a, d, ops.splat(bld, mx), flush=False)
    vinv = ops.splat(bld, bld.fdiv(ir.Constant(f32, 1.0), total))
    tiny = ir.Constant(vf, [_FLT_MIN] * LANES)
    zero = ir.Constant(vf, [0.0] * LANES)

    def scale_step(b, i, acc, mask):
        p = b.fmul(ops.load(b, d, i, mask, zero), vinv)
        ops.store(b, b.select(b.fcmp_ordered("<", p, tiny), zero, p), d, i, mask)
        return []

    bld, _ = _loop(fn, bld, n, [], scale_step, "scale")
    bld.ret_void()


def _add_exp_row(mod: ir.Module) -> None:
    """``(n, a, mx, inv)``: ``a = exp(a - mx)`` in place, flushed below FLT_MIN, and
    ``inv[0] = 1 / sum(a)`` (attention's probabilities, scaled after the product with V); ``mx`` is
    at least every value of the row (:func:`_exp_flushed` takes x <= 0)."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    fp = f32.as_pointer()
    ops = _RowOps(mod)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, f32, fp]), name=EXP_ROW_SYMBOL)
    n, a, mx, inv = fn.args
    n.name, a.name, mx.name, inv.name = "n", "a", "mx", "inv"
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    bld, total = ops.exp_sum(fn, bld, n, a, a, ops.splat(bld, mx), flush=True)
    bld.store(bld.fdiv(ir.Constant(f32, 1.0), total), inv)
    bld.ret_void()


def _softmax_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel_softmax")
    _add_softmax_row(mod)
    _add_exp_row(mod)
    return mod


SOFTMAX = MachineCode(f"ukernel softmax w{LANES}", _softmax_module, (SOFTMAX_SYMBOL, EXP_ROW_SYMBOL))


@uses(SOFTMAX_SYMBOL)
@intrinsic
def ukernel_softmax_row(typingctx, n, A, a_off, D, d_off):
    """``D[d_off:d_off + n] = softmax(A[a_off:a_off + n])`` (D may be A: each pass reads a vector
    before it writes it)."""
    if not arrays_are(types.float32, A, D):
        return None
    return types.none(n, A, a_off, D, d_off), call_codegen(SOFTMAX_SYMBOL, "iff")


@uses(EXP_ROW_SYMBOL)
@intrinsic
def ukernel_exp_row(typingctx, n, A, a_off, mx, Inv, inv_off):
    """``A[a_off:a_off + n] = exp(A[...] - mx)`` in place (below FLT_MIN: 0) and
    ``Inv[inv_off] = 1 / float32(sum)`` (the sum accumulated in float64)."""
    if not arrays_are(types.float32, A, Inv):
        return None
    return types.none(n, A, a_off, mx, Inv, inv_off), call_codegen(EXP_ROW_SYMBOL, "ifsf")
