"""The window kernels of depthwise convs and pooling, generated as LLVM IR: the tap sweep over
stride-phase planes and the deinterleave that splits a plane's column pairs into them
(:mod:`.kernels_window` has the phase planes), and the direct window sweeps: a square window (3x3 or 5x5 at stride 1; 2x2, 3x3
or 5x5 at stride 2) read straight from the input plane, padding included, written straight to
the output plane.  "conv" sweeps serve depthwise convs (and average pooling, with weights of
one); "max" sweeps serve max pooling.

The phase-plane path of :mod:`.kernels_window` first copies every input plane into padded
stride-phase planes and, after the sweep, copies the output rows out of an accumulator with the
planes' row pitch: on MobileNet's 112x112 stride-2 planes the copies took 3.6 of 4.6 us per
channel.  Here each output row's column vector of ``width`` pixels is computed from the input rows
in place:

* stride 1: tap (i, j) is the input row's vector at column ``ox - pw + j``, one unaligned load;
* stride 2: taps 2q and 2q + 1 are the even and odd lanes of the two vectors at column
  ``2*ox - pw + 2q``: two loads and two shuffles give two taps.

Vectors wholly inside the plane take plain loads; those at the plane's edges take masked loads,
whose masked-off lanes are the padding (0, or -inf for max; nothing past the plane is read).
Input rows outside the plane are skipped.  The last column vector of a row is stored masked, so
the output needs no pitch of its own and nothing past a row is written.
"""
from __future__ import annotations

import ctypes

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import WIDTH, _clamp, _fma, _masked, _prefetch, _splat, _vec_ptr
from .window_shapes import SHAPES

SWEEP_SYMBOL = "rammer_cpu_tap_sweep"
DEINTERLEAVE_SYMBOL = "rammer_cpu_deinterleave2"


def _add_deinterleave(mod: ir.Module, width: int) -> None:
    """``(src, n, even, odd)``: ``even[t] = src[2t]``, ``odd[t] = src[2t + 1]`` for t < n: two
    vector loads and two shuffles per ``width`` pairs, then a scalar tail.  The stride-2 phase
    planes of depthwise convs and pooling (``kernels_window._split_column_pairs``): numba's loop
    over the pairs stayed scalar."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    vec = ir.VectorType(f32, width)
    fp = f32.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, i64, fp, fp]), name=DEINTERLEAVE_SYMBOL)
    src, n, even, odd = fn.args
    for arg, name in zip(fn.args, ("src", "n", "even", "odd")):
        arg.name = name
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    i32 = ir.IntType(32)
    evens = ir.Constant(ir.VectorType(i32, width), [2 * t for t in range(width)])
    odds = ir.Constant(ir.VectorType(i32, width), [2 * t + 1 for t in range(width)])
    blocks = bld.sdiv(n, ir.Constant(i64, width))
    with cgutils.for_range(bld, blocks) as loop:
        t = bld.mul(loop.index, ir.Constant(i64, width))
        base = bld.gep(src, [bld.add(t, t)])
        lo = bld.load(_vec_ptr(bld, base, 0, vec), align=4)
        hi = bld.load(_vec_ptr(bld, base, width, vec), align=4)
        bld.store(bld.shuffle_vector(lo, hi, evens), _vec_ptr(bld, even, t, vec), align=4)
        bld.store(bld.shuffle_vector(lo, hi, odds), _vec_ptr(bld, odd, t, vec), align=4)
    done = bld.mul(blocks, ir.Constant(i64, width))
    with cgutils.for_range(bld, bld.sub(n, done)) as loop:
        t = bld.add(done, loop.index)
        t2 = bld.add(t, t)
        bld.store(bld.load(bld.gep(src, [t2])), bld.gep(even, [t]))
        bld.store(bld.load(bld.gep(src, [bld.add(t2, ir.Constant(i64, 1))])), bld.gep(odd, [t]))
    bld.ret_void()


def deinterleave_module(width: int) -> ir.Module:
    """A module with only the deinterleave at the given vector width (tests run the AVX2 width too)."""
    mod = ir.Module(name="rammer_deinterleave")
    _add_deinterleave(mod, width)
    return mod


#: Vectors per block of the tap sweep, largest first (the accumulators of a block stay in registers).
SWEEP_BLOCKS = (8, 4, 2, 1)


def _add_tap_sweep(mod: ir.Module, width: int) -> None:
    """``(p, toff, w, ntaps, nvec, acc, bias, lo, hi)``:
    ``acc[q] = clamp(bias + sum_t w[t] * p[toff[t] + q], lo, hi)`` for q < nvec*width.

    The flat sweep of depthwise convolution and average pooling over
    stride-phase planes (:mod:`.kernels_window`): every tap is a shift of the
    planes.  The q range is cut into blocks of 8, 4, 2 and 1 vectors; a block's
    accumulators stay in registers across all taps, so each tap costs one
    broadcast weight and one (unaligned) load per vector, and the block is
    stored once, after the bias (the accumulators' start) and the clamp of a fused
    ReLU or Clip (lo = -inf, hi = +inf: none)."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    vec = ir.VectorType(f32, width)
    fp = f32.as_pointer()
    ip = i64.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, ip, fp, i64, i64, fp, f32, f32, f32]),
                     name=SWEEP_SYMBOL)
    p, toff, w, ntaps, nvec, acc, bias, lo, hi = fn.args
    for arg, name in zip(fn.args, ("p", "toff", "w", "ntaps", "nvec", "acc", "bias", "lo", "hi")):
        arg.name = name
    fma = _fma(mod, vec)
    entry = fn.append_basic_block("entry")
    bld = ir.IRBuilder(entry)
    zero = _splat(bld, bias, vec)
    lo_v, hi_v = _splat(bld, lo, vec), _splat(bld, hi, vec)
    v0 = ir.Constant(i64, 0)
    prev_block, prev_v = entry, v0
    exit_block = fn.append_basic_block("exit")
    for nv in SWEEP_BLOCKS:
        # while nvec - v >= nv: one block of nv vectors at v
        head, taps_head, taps_body, store = (fn.append_basic_block(f"{n}{nv}") for n in ("head", "taps", "tap", "store"))
        bld.branch(head)
        bld = ir.IRBuilder(head)
        v = bld.phi(i64, name=f"v{nv}")
        v.add_incoming(prev_v, prev_block)
        after = fn.append_basic_block(f"after{nv}")
        bld.cbranch(bld.icmp_signed("<=", bld.add(v, ir.Constant(i64, nv)), nvec), taps_head, after)

        bld = ir.IRBuilder(taps_head)
        t = bld.phi(i64, name=f"t{nv}")
        t.add_incoming(ir.Constant(i64, 0), head)
        accs = [bld.phi(vec, name=f"a{nv}_{k}") for k in range(nv)]
        for a in accs:
            a.add_incoming(zero, head)
        bld.cbranch(bld.icmp_signed("<", t, ntaps), taps_body, store)

        bld = ir.IRBuilder(taps_body)
        weight = _splat(bld, bld.load(bld.gep(w, [t]), align=4), vec)
        q0 = bld.add(bld.load(bld.gep(toff, [t]), align=8), bld.mul(v, ir.Constant(i64, width)))
        base = bld.gep(p, [q0])
        new = []
        for k in range(nv):
            x = bld.load(_vec_ptr(bld, base, k * width, vec), align=4)
            new.append(bld.call(fma, [weight, x, accs[k]]))
        t.add_incoming(bld.add(t, ir.Constant(i64, 1)), taps_body)
        for a, n in zip(accs, new):
            a.add_incoming(n, taps_body)
        bld.branch(taps_head)

        bld = ir.IRBuilder(store)
        out = bld.gep(acc, [bld.mul(v, ir.Constant(i64, width))])
        for k in range(nv):
            bld.store(_clamp(bld, accs[k], lo_v, hi_v), _vec_ptr(bld, out, k * width, vec), align=4)
        v.add_incoming(bld.add(v, ir.Constant(i64, nv)), store)
        bld.branch(head)

        bld = ir.IRBuilder(after)
        prev_block, prev_v = after, v
    bld.branch(exit_block)
    ir.IRBuilder(exit_block).ret_void()


def tap_sweep_module(width: int) -> ir.Module:
    """A module with only the tap sweep at the given vector width (tests run the AVX2 width too)."""
    mod = ir.Module(name="rammer_tap_sweep")
    _add_tap_sweep(mod, width)
    return mod


#: The generated sweeps: each (stride, k) of SHAPES (:mod:`.window_shapes`) for both ops, "conv" (a
#: depthwise conv, and average pooling with weights of one) and "max" (max pooling).
OPS = ("conv", "max")


def symbol(stride: int, k: int, op: str = "conv") -> str:
    return f"rammer_cpu_{op}_direct_s{stride}_k{k}"


#: Output rows each block of the interior keeps in registers (with the k*k broadcast weights).
BLOCK_ROWS = 4
#: Output rows of a band: the sweep covers a band's rows strip by strip before the next band, so
#: the input rows a band reads (BAND_ROWS * stride + k - 1 of them: 7.6 KiB of a 112-wide plane
#: at stride 2) stay in L1 across its strips.  Strip by strip down the whole plane, a stride-2
#: sweep of MobileNet's 112 x 112 planes read each row's lines from L2 or memory once per strip and
#: ran at ~1 GFLOP/s.  A multiple of BLOCK_ROWS, so bands split no block.
BAND_ROWS = 8


def _add_direct_sweep(mod: ir.Module, stride: int, k: int, width: int, op: str = "conv") -> None:
    """``(x, H, W, ph, pw, w, r0, r1, OW, out, bias, lo, hi)``: for output rows r in [r0, r1) and
    columns ox < OW, ``out[r*OW + ox] = clamp(bias + sum_ij w[i*k + j] * x[(stride*r - ph + i)*W +
    stride*ox - pw + j], lo, hi)``, the x outside the H x W plane taken as 0 (the clamp as in
    :func:`~.ukernel._clamp`).  With ``op`` "max": the maximum of the window's x instead, NaN
    winning, the x outside the plane taken as -inf (``w``, ``bias``, ``lo`` and ``hi`` unused).

    The plane is swept in bands of BAND_ROWS output rows, each band one strip of ``width``
    output columns at a time.  A strip's load masks are made per band (none for a strip inside
    the plane); down the strip's rows of the band, rows whose taps all lie
    inside the plane go BLOCK_ROWS at a time, each input row's taps loaded (and split) once for
    every output row of the block that reads it; the rows at the top and bottom edges, and the
    remainder, go one at a time, skipping the input rows outside the plane."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    vec = ir.VectorType(f32, width)
    ivec = ir.VectorType(i32, width)
    fp = f32.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, i64, i64, i64, i64, fp, i64, i64, i64, fp, f32, f32,
                                                          f32]), name=symbol(stride, k, op))
    x, H, W, ph, pw, w, r0, r1, OW, out, bias, lo, hi = fn.args
    for arg, name in zip(fn.args, ("x", "H", "W", "ph", "pw", "w", "r0", "r1", "OW", "out", "bias", "lo", "hi")):
        arg.name = name
    fma = _fma(mod, vec)
    pf = _prefetch(mod)
    mload, mstore = _masked(mod, vec, False), _masked(mod, vec, True)
    align = ir.Constant(i32, 4)
    is_max = op == "max"
    # what a masked-off lane (padding) reads
    zero_v = ir.Constant(vec, [float("-inf") if is_max else 0.0] * width)
    R = BLOCK_ROWS

    def c(v: int) -> ir.Constant:
        return ir.Constant(i64, v)

    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    wv = None if is_max else [_splat(bld, bld.load(bld.gep(w, [c(t)]), align=4), vec) for t in range(k * k)]
    bias_v = zero_v if is_max else _splat(bld, bias, vec)  # where the accumulators start
    lo_v, hi_v = _splat(bld, lo, vec), _splat(bld, hi, vec)
    iota = ir.Constant(ivec, list(range(width)))
    W_v = _splat(bld, bld.trunc(W, i32), ivec)
    zeros_i = ir.Constant(ivec, [0] * width)
    evens = ir.Constant(ivec, [2 * t for t in range(width)])
    odds = ir.Constant(ivec, [2 * t + 1 for t in range(width)])
    ncv = bld.sdiv(bld.add(OW, c(width - 1)), c(width))
    # the column offsets of a strip's loads, after s = stride*ox0 - pw
    offsets = list(range(k)) if stride == 1 else [o for q in range((k + 1) // 2) for o in (2 * q, 2 * q + width)]
    span = offsets[-1] + width  # every load of a strip lies in [s, s + span)
    # rows whose k input rows all lie in the plane: stride*r - ph >= 0 and stride*r - ph + k <= H
    in_lo = bld.sdiv(bld.add(ph, c(stride - 1)), c(stride))
    in_hi_num = bld.add(bld.sub(H, c(k)), ph)
    in_hi = bld.select(bld.icmp_signed(">=", in_hi_num, c(0)), bld.add(bld.sdiv(in_hi_num, c(stride)), c(1)), c(0))

    def combine(b: ir.IRBuilder, acc: ir.Value, tap: ir.Value, t: int) -> ir.Value:
        """acc + w[t] * tap, or max(acc, tap) with NaN winning (as kernels_window._max_run)."""
        if not is_max:
            return b.call(fma, [wv[t], tap, acc])
        take = b.or_(b.fcmp_ordered(">", tap, acc), b.fcmp_unordered("uno", tap, tap))
        return b.select(take, tap, acc)

    def taps(b: ir.IRBuilder, row: ir.Value, s: ir.Value, masks: list | None) -> list:
        """The k tap vectors of input row pointer ``row`` for the strip at column s."""
        def load(n: int) -> ir.Value:
            ptr = _vec_ptr(b, row, b.add(s, c(offsets[n])), vec)
            if masks is None:
                return b.load(ptr, align=4)
            return b.call(mload, [ptr, align, masks[n], zero_v])  # masked-off lanes read nothing
        if stride == 1:
            return [load(j) for j in range(k)]
        out_taps = []
        for q in range((k + 1) // 2):
            lo_half, hi_half = load(2 * q), load(2 * q + 1)
            out_taps.append(b.shuffle_vector(lo_half, hi_half, evens))
            if 2 * q + 1 < k:
                out_taps.append(b.shuffle_vector(lo_half, hi_half, odds))
        return out_taps

    def store(b: ir.IRBuilder, acc: ir.Value, r: ir.Value, ox0: ir.Value, full: ir.Value, store_mask: ir.Value
              ) -> None:
        val = acc if is_max else _clamp(b, acc, lo_v, hi_v)
        dst = _vec_ptr(b, out, b.add(b.mul(r, OW), ox0), vec)
        with b.if_else(full) as (then, otherwise):
            with then:
                b.store(val, dst, align=4)
            with otherwise:
                b.call(mstore, [val, dst, align, store_mask])

    def strip(b: ir.IRBuilder, ox0: ir.Value, s: ir.Value, masks: list | None, r0: ir.Value, r1: ir.Value
              ) -> None:
        """Rows [r0, r1) of the strip at output column ox0."""
        full = b.icmp_signed("<=", b.add(ox0, c(width)), OW)
        store_mask = b.icmp_signed("<", b.add(_splat(b, b.trunc(ox0, i32), ivec), iota),
                                   _splat(b, b.trunc(OW, i32), ivec))
        head = b.append_basic_block("rows")
        block_rows = b.append_basic_block("block")
        one_row = b.append_basic_block("row")
        done = b.append_basic_block("strip_done")
        before = b.block
        b.branch(head)
        b.position_at_end(head)
        r = b.phi(i64, name="r")
        r.add_incoming(r0, before)
        more = b.icmp_signed("<", r, r1)
        pick = b.append_basic_block("pick")
        b.cbranch(more, pick, done)
        b.position_at_end(pick)
        blocked = b.and_(b.icmp_signed(">=", r, in_lo), b.icmp_signed("<=", b.add(r, c(R)), b.select(
            b.icmp_signed("<", in_hi, r1), in_hi, r1)))
        b.cbranch(blocked, block_rows, one_row)

        # R rows inside the plane: input row t of the block feeds output rows rr with 0 <= t - stride*rr < k
        b.position_at_end(block_rows)
        top = b.sub(b.mul(r, c(stride)), ph)
        accs = [bias_v] * R
        for t in range(stride * (R - 1) + k):
            row = b.gep(x, [b.mul(b.add(top, c(t)), W)])
            tv = taps(b, row, s, masks)
            for rr in range(R):
                i = t - stride * rr
                if 0 <= i < k:
                    for j in range(k):
                        accs[rr] = combine(b, accs[rr], tv[j], i * k + j)
        for rr in range(R):
            store(b, accs[rr], b.add(r, c(rr)), ox0, full, store_mask)
        r.add_incoming(b.add(r, c(R)), b.block)
        b.branch(head)

        # one row, skipping its input rows outside the plane
        b.position_at_end(one_row)
        top = b.sub(b.mul(r, c(stride)), ph)
        acc = bias_v
        for i in range(k):
            y = b.add(top, c(i))
            inside = b.and_(b.icmp_signed(">=", y, c(0)), b.icmp_signed("<", y, H))
            here = b.block
            with b.if_then(inside):
                tv = taps(b, b.gep(x, [b.mul(y, W)]), s, masks)
                new = acc
                for j in range(k):
                    new = combine(b, new, tv[j], i * k + j)
                then_end = b.block
            phi = b.phi(vec)
            phi.add_incoming(acc, here)
            phi.add_incoming(new, then_end)
            acc = phi
        store(b, acc, r, ox0, full, store_mask)
        r.add_incoming(b.add(r, c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    nbands = bld.sdiv(bld.add(bld.sub(r1, r0), c(BAND_ROWS - 1)), c(BAND_ROWS))
    with cgutils.for_range(bld, nbands) as band:
        ra = bld.add(r0, bld.mul(band.index, c(BAND_ROWS)))
        rb = bld.add(ra, c(BAND_ROWS))
        rb = bld.select(bld.icmp_signed("<", rb, r1), rb, r1)
        # the next band's new input rows (contiguous in the plane), one prefetch a line: down a
        # strip the loads step by a row, which the hardware prefetchers do not follow far enough
        # (a prefetch never faults: past the plane it reads the next channel's, or nothing)
        ahead = bld.gep(x, [bld.mul(bld.sub(bld.add(bld.mul(rb, c(stride)), c(k - 1)), ph), W)])
        with cgutils.for_range(bld, bld.sdiv(bld.mul(c(stride * BAND_ROWS), W), c(16))) as line:
            addr = bld.bitcast(bld.gep(ahead, [bld.mul(line.index, c(16))]), ir.IntType(8).as_pointer())
            bld.call(pf, [addr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        with cgutils.for_range(bld, ncv) as col:
            ox0 = bld.mul(col.index, c(width))
            s = bld.sub(bld.mul(ox0, c(stride)), pw)
            inside = bld.and_(bld.icmp_signed(">=", s, c(0)), bld.icmp_signed("<=", bld.add(s, c(span)), W))
            with bld.if_else(inside) as (then, otherwise):
                with then:
                    strip(bld, ox0, s, None, ra, rb)
                with otherwise:
                    s_v = _splat(bld, bld.trunc(s, i32), ivec)
                    masks = []
                    for off in offsets:
                        lanes = bld.add(bld.add(s_v, iota), _splat(bld, ir.Constant(i32, off), ivec))
                        masks.append(bld.and_(bld.icmp_signed(">=", lanes, zeros_i),
                                              bld.icmp_signed("<", lanes, W_v)))
                    strip(bld, ox0, s, masks, ra, rb)
    bld.ret_void()


#: The entry that picks a sweep: ``(code, x, H, W, ph, pw, w, r0, r1, OW, out, bias, lo, hi)`` with
#: ``code`` = :func:`sweep_code` of the sweep, the other arguments those of :func:`_add_direct_sweep`.
DISPATCH_SYMBOL = "rammer_cpu_window_direct"


@njit(nogil=True, cache=True)
def sweep_code(stride: int, k: int, is_max: bool) -> int:
    """The ``code`` that selects a sweep in the dispatching entry."""
    return 100 * (1 if is_max else 0) + 10 * stride + k


def _add_dispatch(mod: ir.Module) -> None:
    """The entry that calls the sweep its first argument names (a code not generated: nothing)."""
    sweeps = {sweep_code(stride, k, op == "max"): mod.get_global(symbol(stride, k, op))
              for op in OPS for stride, k in SHAPES}
    first = next(iter(sweeps.values()))
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, *first.function_type.args]), name=DISPATCH_SYMBOL)
    code, *args = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    none = fn.append_basic_block("none")
    switch = bld.switch(code, none)
    for value, sweep in sweeps.items():
        block = fn.append_basic_block(f"c{value}")
        switch.add_case(ir.Constant(i64, value), block)
        case = ir.IRBuilder(block)
        case.call(sweep, args)
        case.ret_void()
    ir.IRBuilder(none).ret_void()


def direct_module(width: int) -> ir.Module:
    """Every (op, stride, k) of :data:`OPS` and :data:`SHAPES` at vector width ``width``, and the
    entry that picks among them (tests build the AVX2 width too)."""
    mod = ir.Module(name="rammer_window_direct")
    for op in OPS:
        for stride, k in SHAPES:
            _add_direct_sweep(mod, stride, k, width, op)
    _add_dispatch(mod)
    return mod


def window_module(width: int) -> ir.Module:
    """Every window kernel at vector width ``width``: the direct sweeps and their entry, the tap
    sweep and the deinterleave."""
    mod = direct_module(width)
    _add_tap_sweep(mod, width)
    _add_deinterleave(mod, width)
    return mod


WINDOW = MachineCode(f"window {WIDTH}", lambda: window_module(WIDTH),
                     (DISPATCH_SYMBOL, SWEEP_SYMBOL, DEINTERLEAVE_SYMBOL))


def __getattr__(name: str) -> object:
    """``ADDRESSES``, (stride, k, op) -> the address of its sweep, for tests; built on first access."""
    if name != "ADDRESSES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = {(stride, k, op): WINDOW.address(symbol(stride, k, op))
                               for op in OPS for stride, k in SHAPES}
    return value


#: ctypes type of the tap sweep: (p, toff, w, ntaps, nvec, acc, bias, lo, hi).
SWEEP_CFUNCTYPE = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                   *[ctypes.c_float] * 3)
#: ctypes type of each sweep, for tests: (x, H, W, ph, pw, w, r0, r1, OW, out, bias, lo, hi).
CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *[ctypes.c_int64] * 4, ctypes.c_void_p, *[ctypes.c_int64] * 3,
                             ctypes.c_void_p, *[ctypes.c_float] * 3)


@uses(DISPATCH_SYMBOL)
@intrinsic
def window_direct(typingctx, code, X, x_off, H, W, ph, pw, Wt, w_off, r0, r1, OW, O, o_off, bias, lo, hi):
    """The sweep that ``code`` (:func:`sweep_code`) names, from ``X[x_off:]`` with weights
    ``Wt[w_off:]`` into ``O[o_off:]`` (:func:`_add_direct_sweep`)."""
    if not arrays_are(types.float32, X, Wt, O):
        return None
    sig = types.none(code, X, x_off, H, W, ph, pw, Wt, w_off, r0, r1, OW, O, o_off, bias, lo, hi)
    return sig, call_codegen(DISPATCH_SYMBOL, "ifiiiifiiifsss")


@uses(SWEEP_SYMBOL)
@intrinsic
def tap_sweep(typingctx, P, p_off, T, t_off, Wt, w_off, ntaps, nvec, A, a_off, bias, lo, hi):
    """``A[a_off + q] = clamp(bias + sum_t Wt[w_off + t] * P[p_off + T[t_off + t] + q], lo, hi)``
    for q < nvec * WIDTH (see :func:`_add_tap_sweep`)."""
    if not (arrays_are(types.float32, P, Wt, A) and arrays_are(types.int64, T)):
        return None
    sig = types.none(P, p_off, T, t_off, Wt, w_off, ntaps, nvec, A, a_off, bias, lo, hi)
    return sig, call_codegen(SWEEP_SYMBOL, "fqfiifsss")


@uses(DEINTERLEAVE_SYMBOL)
@intrinsic
def deinterleave2(typingctx, S, s_off, n, E, e_off, O, o_off):
    """``E[e_off + t] = S[s_off + 2t]``, ``O[o_off + t] = S[s_off + 2t + 1]`` for t < n
    (:func:`_add_deinterleave`)."""
    if not arrays_are(types.float32, S, E, O):
        return None
    sig = types.none(S, s_off, n, E, e_off, O, o_off)
    return sig, call_codegen(DEINTERLEAVE_SYMBOL, "fiff")
