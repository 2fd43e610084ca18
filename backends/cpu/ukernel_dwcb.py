"""Depthwise convolution of small planes, a block of ``WIDTH`` channels at a time, generated as LLVM IR.

On a 7x7 or 14x14 output plane the plane-by-plane sweeps of :mod:`.ukernel_window` keep few lanes
busy: a 7-pixel row fills 7 of 8 lanes, every 5x5 tap of it is a masked load at the plane's edge,
and the set-up of each plane is paid for 49 outputs (MobileNetV3's and EfficientNet's 5x5 layers on
7x7 planes ran at 13-14 GFLOP/s, a third of onnxruntime's NCHWc kernels).  Here the lanes are
channels instead, so every lane is busy whatever the plane's width:

1. the block's ``WIDTH`` input planes are transposed (``WIDTH`` row vectors at a time, one shuffle
   network) into a zero-padded, channels-innermost copy in scratch, ``Hp x Wp`` pixels of
   ``WIDTH`` floats (only the border is zeroed, once per call);
2. each output pixel is ``bias + sum_t w[t] * x[pixel + tap t]``, one vector multiply-add per tap,
   ``PIXELS`` output pixels of a row at a time sharing each tap's weight vector; clamped to
   [lo, hi] (a fused ReLU or Clip, as :func:`~.ukernel._clamp`) and stored pixel-major;
3. the result is transposed back into the block's ``WIDTH`` NCHW output planes, ``WIDTH`` pixels
   at a time (the last group of a plane stored masked).

The weights are tap-major, ``w[t * w_stride + c]`` (packed at compile time), so one vector load
gives a tap's weights for the block's channels.  Dilation 1 only (the lowering's condition).
"""
from __future__ import annotations

import math

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import WIDTH, _clamp, _fma, _masked, _splat, _vec_ptr

SYMBOL = "rammer_cpu_dw_cblock"
#: Output pixels of a row whose accumulators stay in registers across all taps.
PIXELS = 4
#: The (kernel width, stride) pairs with a variant of their own (a row's loads shared between taps):
#: the depthwise windows of MobileNets, EfficientNets, MnasNets and ConvNeXt-style blocks.
SHAPES = ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1), (7, 2))


def symbol(shape: tuple[int, int] | None) -> str:
    """The symbol of the variant for ``shape`` (kernel width, stride), None the generic one."""
    return f"{SYMBOL}_generic" if shape is None else f"{SYMBOL}_k{shape[0]}_s{shape[1]}"


def scratch_floats(OH: int, OW: int, kh: int, kw: int, sh: int, sw: int, width: int = WIDTH) -> int:
    """Float32 scratch of one call: the padded channels-innermost input, the pixel-major output,
    and one group of ``width`` pixels of slack (the last transpose reads a whole group)."""
    hp = (OH - 1) * sh + kh
    wp = (OW - 1) * sw + kw
    return (hp * wp + OH * OW + width) * width


def transpose(bld: ir.IRBuilder, rows: list, width: int) -> list:
    """The ``width`` x ``width`` transpose of ``rows`` (vectors of ``width`` lanes): log2(width)
    rounds, each interleaving row i with row i + width/2 (low halves, then high halves)."""
    i32 = ir.IntType(32)
    half = width // 2
    lo_mask = ir.Constant(ir.VectorType(i32, width), [t // 2 + (width if t % 2 else 0) for t in range(width)])
    hi_mask = ir.Constant(ir.VectorType(i32, width), [half + t // 2 + (width if t % 2 else 0) for t in range(width)])
    for _ in range(int(math.log2(width))):
        out = []
        for i in range(half):
            out.append(bld.shuffle_vector(rows[i], rows[i + half], lo_mask))
            out.append(bld.shuffle_vector(rows[i], rows[i + half], hi_mask))
        rows = out
    return rows


def _add_cblock(mod: ir.Module, width: int, shape: tuple[int, int] | None = None) -> None:
    """``(x, hw, H, W, ph, pw, kh, kw, sh, sw, OH, OW, w, w_stride, b, has_bias, lo, hi, buf, out,
    nblk)``: for blocks k < nblk of ``width`` channels, channel c = k*width + t of the input planes at
    ``x + c*hw`` (H x W) convolved with its taps ``w[(i*kw + j)*w_stride + c]`` (stride s, padding
    ph/pw, dilation 1) into the output plane at ``out + c*OH*OW``, starting from ``b[c]`` when
    ``has_bias``, clamped to [lo, hi]."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    vec = ir.VectorType(f32, width)
    ivec = ir.VectorType(i32, width)
    fp = f32.as_pointer()
    names = ("x", "hw", "H", "W", "ph", "pw", "kh", "kw", "sh", "sw", "OH", "OW", "w", "w_stride", "b", "has_bias",
             "lo", "hi", "buf", "out", "nblk")
    kinds = [fp, *[i64] * 11, fp, i64, fp, i64, f32, f32, fp, fp, i64]
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), kinds), name=symbol(shape))
    for arg, name in zip(fn.args, names):
        arg.name = name
    (x, hw, H, W, ph, pw, kh, kw, sh, sw, OH, OW, w, w_stride, b, has_bias, lo, hi, buf, out, nblk) = fn.args
    fma = _fma(mod, vec)
    mload, mstore = _masked(mod, vec, False), _masked(mod, vec, True)
    align = ir.Constant(i32, 4)
    zero_v = ir.Constant(vec, [0.0] * width)
    iota = ir.Constant(ivec, list(range(width)))

    def c(v: int) -> ir.Constant:
        return ir.Constant(i64, v)

    entry = fn.append_basic_block("entry")
    bld = ir.IRBuilder(entry)
    # the accumulators, as allocas in the entry block (promoted to registers)
    accs = [bld.alloca(vec, name=f"acc{p}") for p in range(PIXELS)]
    lo_v, hi_v = _splat(bld, lo, vec), _splat(bld, hi, vec)
    Hp = bld.add(bld.mul(bld.sub(OH, c(1)), sh), kh)
    Wp = bld.add(bld.mul(bld.sub(OW, c(1)), sw), kw)
    ohw = bld.mul(OH, OW)
    obuf = bld.gep(buf, [bld.mul(bld.mul(Hp, Wp), c(width))])
    # the input rows and columns the windows reach (the padded copy holds no more)
    Hc = bld.sub(Hp, ph)
    Hc = bld.select(bld.icmp_signed("<", H, Hc), H, Hc)
    Wc = bld.sub(Wp, pw)
    Wc = bld.select(bld.icmp_signed("<", W, Wc), W, Wc)

    def pixel_ptr(b_: ir.IRBuilder, base: ir.Value, pixel: ir.Value) -> ir.Value:
        return _vec_ptr(b_, base, b_.mul(pixel, c(width)), vec)

    def zero_run(b_: ir.IRBuilder, start: ir.Value, count: ir.Value) -> None:
        with cgutils.for_range(b_, count) as loop:
            b_.store(zero_v, pixel_ptr(b_, buf, b_.add(start, loop.index)), align=4)

    # 1a. the border of the padded copy (the same for every block)
    with cgutils.for_range(bld, Hp) as rows:
        r = rows.index
        row0 = bld.mul(r, Wp)
        inside = bld.and_(bld.icmp_signed(">=", r, ph), bld.icmp_signed("<", r, bld.add(ph, Hc)))
        with bld.if_else(inside) as (then, otherwise):
            with then:
                zero_run(bld, row0, bld.select(bld.icmp_signed("<", pw, Wp), pw, Wp))
                right = bld.add(pw, Wc)
                zero_run(bld, bld.add(row0, right), bld.sub(Wp, right))
            with otherwise:
                zero_run(bld, row0, Wp)

    with cgutils.for_range(bld, nblk) as blocks:
        ch0 = bld.mul(blocks.index, c(width))
        xb = bld.gep(x, [bld.mul(ch0, hw)])
        ob = bld.gep(out, [bld.mul(ch0, ohw)])
        wb = bld.gep(w, [ch0])
        bias_v = bld.select(bld.icmp_signed("!=", has_bias, c(0)),
                            bld.load(_vec_ptr(bld, b, ch0, vec), align=4), zero_v)

        # 1b. the interior: width input row segments at a time, transposed into pixels
        ncol = bld.sdiv(bld.add(Wc, c(width - 1)), c(width))
        with cgutils.for_range(bld, Hc) as in_rows:
            ih = in_rows.index
            with cgutils.for_range(bld, ncol) as cols:
                iw0 = bld.mul(cols.index, c(width))
                n = bld.sub(Wc, iw0)
                full = bld.icmp_signed(">=", n, c(width))
                mask = bld.icmp_signed("<", iota, _splat(bld, bld.trunc(n, i32), ivec))
                at = bld.add(bld.mul(ih, W), iw0)
                loaded_full, loaded_part = [], []
                with bld.if_else(full) as (then, otherwise):
                    with then:
                        loaded_full = [bld.load(_vec_ptr(bld, xb, bld.add(bld.mul(c(t), hw), at), vec), align=4)
                                       for t in range(width)]
                        full_end = bld.block
                    with otherwise:
                        loaded_part = [bld.call(mload, [_vec_ptr(bld, xb, bld.add(bld.mul(c(t), hw), at), vec),
                                                        align, mask, zero_v]) for t in range(width)]
                        part_end = bld.block
                vs = []
                for t in range(width):
                    phi = bld.phi(vec)
                    phi.add_incoming(loaded_full[t], full_end)
                    phi.add_incoming(loaded_part[t], part_end)
                    vs.append(phi)
                pixels = transpose(bld, vs, width)
                dst0 = bld.add(bld.mul(bld.add(ih, ph), Wp), bld.add(pw, iw0))
                for j in range(width):
                    with bld.if_then(bld.icmp_signed("<", c(j), n), likely=True):
                        bld.store(pixels[j], pixel_ptr(bld, buf, bld.add(dst0, c(j))), align=4)

        # 2. the taps, PIXELS output pixels of a row at a time, then the rest of the row as one group
        def pixels_block(b_: ir.IRBuilder, oh: ir.Value, ow: ir.Value, count: int) -> None:
            for p in range(count):
                b_.store(bias_v, accs[p])
            with cgutils.for_range(b_, kh) as krow:
                i = krow.index
                row_base = b_.add(b_.mul(b_.add(b_.mul(oh, sh), i), Wp), b_.mul(ow, sw))
                if shape is None:
                    with cgutils.for_range(b_, kw) as kcol:
                        j = kcol.index
                        wv = b_.load(_vec_ptr(b_, wb, b_.mul(b_.add(b_.mul(i, kw), j), w_stride), vec), align=4)
                        base = b_.add(row_base, j)
                        for p in range(count):
                            xv = b_.load(pixel_ptr(b_, buf, b_.add(base, b_.mul(c(p), sw))), align=4)
                            b_.store(b_.call(fma, [wv, xv, b_.load(accs[p])]), accs[p])
                else:
                    # a known kernel width and stride: the row's input pixels are loaded once for
                    # every output pixel and tap that reads them (k + stride*(count-1) loads, not k*count)
                    k_w, s_w = shape
                    xs = [b_.load(pixel_ptr(b_, buf, b_.add(row_base, c(u))), align=4)
                          for u in range(s_w * (count - 1) + k_w)]
                    vals = [b_.load(accs[p]) for p in range(count)]
                    for j in range(k_w):
                        wv = b_.load(_vec_ptr(b_, wb, b_.mul(b_.add(b_.mul(i, kw), c(j)), w_stride), vec), align=4)
                        for p in range(count):
                            vals[p] = b_.call(fma, [wv, xs[p * s_w + j], vals[p]])
                    for p in range(count):
                        b_.store(vals[p], accs[p])
            q = b_.add(b_.mul(oh, OW), ow)
            for p in range(count):
                b_.store(_clamp(b_, b_.load(accs[p]), lo_v, hi_v), pixel_ptr(b_, obuf, b_.add(q, c(p))), align=4)

        nfull = bld.sdiv(OW, c(PIXELS))
        with cgutils.for_range(bld, OH) as out_rows:
            oh = out_rows.index
            with cgutils.for_range(bld, nfull) as groups:
                pixels_block(bld, oh, bld.mul(groups.index, c(PIXELS)), PIXELS)
            done = bld.mul(nfull, c(PIXELS))
            after = bld.append_basic_block("row_done")
            switch = bld.switch(bld.sub(OW, done), after)
            for rest in range(1, PIXELS):
                case = bld.append_basic_block(f"rest{rest}")
                switch.add_case(c(rest), case)
                bld.position_at_end(case)
                pixels_block(bld, oh, done, rest)
                bld.branch(after)
            bld.position_at_end(after)

        # 3. back to NCHW, width pixels of the flattened planes at a time (the slack after obuf
        # makes the last group's whole read safe; its lanes past the plane are not stored)
        ngroups = bld.sdiv(bld.add(ohw, c(width - 1)), c(width))
        with cgutils.for_range(bld, ngroups) as grp:
            q0 = bld.mul(grp.index, c(width))
            n = bld.sub(ohw, q0)
            full = bld.icmp_signed(">=", n, c(width))
            mask = bld.icmp_signed("<", iota, _splat(bld, bld.trunc(n, i32), ivec))
            pix = [bld.load(pixel_ptr(bld, obuf, bld.add(q0, c(j))), align=4) for j in range(width)]
            chans = transpose(bld, pix, width)
            with bld.if_else(full) as (then, otherwise):
                with then:
                    for t in range(width):
                        bld.store(chans[t], _vec_ptr(bld, ob, bld.add(bld.mul(c(t), ohw), q0), vec), align=4)
                with otherwise:
                    for t in range(width):
                        bld.call(mstore, [chans[t], _vec_ptr(bld, ob, bld.add(bld.mul(c(t), ohw), q0), vec),
                                          align, mask])
    bld.ret_void()


def _add_dispatch(mod: ir.Module) -> None:
    """The entry :data:`SYMBOL`: the variant made for the call's (kw, sw), else the generic one."""
    generic = mod.get_global(symbol(None))
    fn = ir.Function(mod, generic.function_type, name=SYMBOL)
    args = list(fn.args)
    kw, sw = args[7], args[9]
    i64 = ir.IntType(64)
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    other = fn.append_basic_block("generic")
    switch = bld.switch(bld.add(bld.mul(kw, ir.Constant(i64, 16)), sw), other)
    for shape in SHAPES:
        block = fn.append_basic_block(f"k{shape[0]}s{shape[1]}")
        switch.add_case(ir.Constant(i64, 16 * shape[0] + shape[1]), block)
        case = ir.IRBuilder(block)
        case.call(mod.get_global(symbol(shape)), args)
        case.ret_void()
    tail = ir.IRBuilder(other)
    tail.call(generic, args)
    tail.ret_void()


def cblock_module(width: int) -> ir.Module:
    """Every variant at vector width ``width`` and the entry that picks one (tests build the AVX2
    width too)."""
    mod = ir.Module(name="rammer_dw_cblock")
    for shape in (None, *SHAPES):
        _add_cblock(mod, width, shape)
    _add_dispatch(mod)
    return mod


CBLOCK = MachineCode(f"dw cblock {WIDTH} p{PIXELS} {SHAPES}", lambda: cblock_module(WIDTH), (SYMBOL,))


@uses(SYMBOL)
@intrinsic
def dw_cblock(typingctx, X, x_off, hw, H, W, ph, pw, kh, kw, sh, sw, OH, OW, Wt, w_off, w_stride, Bt, b_off,
              has_bias, lo, hi, S, s_off, O, o_off, nblk):
    """``nblk`` blocks of ``WIDTH`` channels of a depthwise conv (see :func:`_add_cblock`): input
    planes at ``X[x_off:]``, tap-major weights at ``Wt[w_off:]`` (row stride ``w_stride``), bias at
    ``Bt[b_off:]``, scratch at ``S[s_off:]`` (:func:`scratch_floats`), output planes at ``O[o_off:]``."""
    if not arrays_are(types.float32, X, Wt, Bt, S, O):
        return None
    sig = types.none(X, x_off, hw, H, W, ph, pw, kh, kw, sh, sw, OH, OW, Wt, w_off, w_stride, Bt, b_off, has_bias,
                     lo, hi, S, s_off, O, o_off, nblk)
    return sig, call_codegen(SYMBOL, "f" + "i" * 11 + "fifissffi")
